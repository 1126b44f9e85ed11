//! Completions: what the provider gave back for each work request, by its
//! token (token.rs): a request's unit done or failed, an immediate landed,
//! a message received; and when a request has every unit back, its report
//! (`maybe_finish`).
use super::request::Shape;
use super::token::Token;
use super::{Worker, accept, bundle};
use crate::completion::notify::OnDone;
use crate::domain::{Completion, Domain};
use crate::error::{Error, Status};
use crate::metrics::{POST_TO_DONE, REQUEST_BYTES, REQUEST_WRS};

impl<D: Domain> Worker<D> {
    pub(super) fn complete(&mut self, d: usize, c: Completion) {
        // The common case first: a unit of a request done. A bundle's
        // member is reported with the others of its poll (`report_members`),
        // or before anything that may end requests: a failed work request
        // or an engine message (a peer's goodbye).
        if let Completion::Done { token, peer, bytes } = c {
            match Token::decode(token) {
                Token::Request { slot, epoch } => {
                    self.pass.done.add(&self.tally, d, peer, bytes);
                    return self.unit_done(slot, epoch);
                }
                Token::Member { slot, epoch, unit } => {
                    self.pass.done.add(&self.tally, d, peer, bytes);
                    return self.pass.members.push((slot, epoch, unit));
                }
                _ => {}
            }
        }
        let (token, res, sent, data) = match c {
            Completion::RemoteWrite { imm } if self.pass.home.is_some() => return self.forward_imm(imm),
            Completion::RemoteWrite { imm } => return self.imm.arrived(imm, &self.notifier, 1),
            Completion::Done { token, peer, bytes } => (token, Ok(0), Some((peer, bytes)), None),
            Completion::Recv { token, len, data } => (token, Ok(len), None, data),
            Completion::Failed { token, peer, error } => (token, Err((peer, error)), None, None),
        };
        let t = Token::decode(token);
        // The application's work requests count; the engine's messages do not.
        if let (Some((peer, bytes)), Token::Request { .. } | Token::Member { .. } | Token::Split(_)) = (sent, t) {
            self.pass.done.add(&self.tally, d, peer, bytes);
        }
        match (t, res) {
            (Token::EngineRecv(i), res) => {
                self.report_members();
                self.engine_recv(i, res.ok())
            }
            (Token::EngineSend { peer, slot }, res) => {
                self.report_members();
                self.engine_sent(peer, slot, res.err().map(|(_, e)| e))
            }
            (Token::Recv { pool, index }, res) => {
                let res = res.map_err(|(_, e)| Error::new(e.status, format!("receive failed: {}", e.message)));
                self.deliver(pool, index, res, data)
            }
            (Token::Split(i), Ok(_)) => self.split_done(d, i),
            (Token::Request { slot, epoch }, Ok(_)) => self.unit_done(slot, epoch),
            (Token::Member { slot, epoch, unit }, Ok(_)) => self.member_done(slot, epoch, unit, None),
            (t, Err((peer, e))) => {
                self.report_members();
                self.tally.failed(d, peer, e.status);
                let err = Error::new(e.status, format!("work request failed: {}", e.message));
                self.wr_done(t, Some(err.clone()));
                // An unreachable peer fails everything else sent to it too.
                if err.status == Status::PeerDown {
                    if let Some(p) = self.peers.by_id(d, peer) {
                        self.peer_down(p, err);
                    }
                }
            }
        }
    }

    /// Reports the bundle members `complete` held back, after one flush of
    /// the counters for all of them (a member's work request is in the
    /// counters before it is reported, as any request's).
    #[inline(always)]
    pub(super) fn report_members(&mut self) {
        if !self.pass.members.is_empty() {
            self.report_held_members();
        }
    }

    #[inline(never)]
    fn report_held_members(&mut self) {
        self.pass.done.flush(&self.tally);
        let mut members = std::mem::take(&mut self.pass.members);
        for (slot, epoch, unit) in members.drain(..) {
            self.member_done(slot, epoch, unit, None);
        }
        self.pass.members = members;
    }

    /// A unit of the request in `slot` came back done: counted down, and
    /// the request reported if it was the last one out with all posted.
    #[inline]
    fn unit_done(&mut self, slot: u32, epoch: u32) {
        let Some(a) = self.requests.slots.current(slot, epoch) else {
            return;
        };
        a.outstanding -= 1;
        if a.outstanding == 0 && (a.posted >= a.units || a.error.is_some()) {
            self.maybe_finish(slot);
        }
    }

    /// One work request of a request (`Token::Request`, or the bytes of a
    /// `Token::Split`) came back from the provider (or was abandoned),
    /// failed with `err` if given.
    pub(super) fn wr_done(&mut self, token: Token, err: Option<Error>) {
        // A split's bytes failed or were abandoned: its request's unit did.
        let token = if let Token::Split(i) = token { self.requests.splits.take(i) } else { token };
        if let Token::Member { slot, epoch, unit } = token {
            return self.member_done(slot, epoch, unit, err);
        }
        let Token::Request { slot, epoch } = token else {
            unreachable!("wr_done on {token:?}");
        };
        let Some(a) = self.requests.slots.current(slot, epoch) else {
            return;
        };
        a.outstanding -= 1;
        match err {
            Some(e) => self.end(slot, e),
            None => self.maybe_finish(slot),
        }
    }

    /// Reports request `slot` if it has finished (`Slots::finish`); one that
    /// wants a delivery fence gets it first (fence.rs).
    pub(super) fn maybe_finish(&mut self, slot: u32) {
        // Its work requests are in the counters before it is reported.
        self.pass.done.flush(&self.tally);
        if self.requests.slots.get(slot).is_some_and(|a| a.fence_due()) {
            self.start_fence(slot);
        }
        let (stage, regions, dsts, domains, lists) = (
            &mut self.requests.stage,
            &mut self.requests.regions,
            &mut self.requests.dsts,
            &mut self.domains,
            &mut self.requests.member_lists,
        );
        let (notifier, stats, now) = (&self.notifier, &self.shared.stats, self.pass.now_ns());
        self.requests.slots.finish(slot, |a| {
            if let Shape::Bundle(g) = &mut a.req.shape {
                // Its members report themselves; those left, with its end.
                let res = a.error.take().map_or(Ok(()), Err);
                bundle::report_rest(stats, notifier, now, a.first_post_ns, g, &res);
                accept::put_refs(regions, dsts, domains, &a.req, a.req.dst_count());
                if let Shape::Bundle(g) = &mut a.req.shape {
                    bundle::keep(lists, std::mem::take(&mut g.members));
                }
                return;
            }
            let status = a.error.as_ref().map_or(0, |e| e.status as usize);
            stats.ended(a.req.kind(), status);
            if a.first_post_ns != 0 && status == 0 {
                stats.hists[POST_TO_DONE].record(now.saturating_sub(a.first_post_ns));
                stats.hists[REQUEST_BYTES].record(a.bytes);
                stats.hists[REQUEST_WRS].record(a.posted as u64);
            }
            if let Shape::Send { msg, .. } = &a.req.shape {
                stage.release(a.stage, msg);
            }
            accept::put_refs(regions, dsts, domains, &a.req, a.req.dst_count());
            let done = std::mem::replace(&mut a.req.done, OnDone::Nothing);
            notifier.fire_request(a.req.id, done, a.error.take().map_or(Ok(()), Err));
        });
    }
}
