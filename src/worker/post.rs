//! Posting: each domain's queue of requests with units still to post
//! (`Requests::pending`) becomes work requests, up to `POST_BURST` per
//! domain per pass; a peer whose window is full lets the requests behind it
//! go first. Receive buffers, engine messages and fences go before them.
//!
//! A request's units to one peer are posted as a run (`post_run`): what is
//! the same for all of them (the peer's id and liveness, the source region,
//! the token) is looked up once, and its counters and metrics are updated
//! once per run, so a page of a paged write costs its work request and
//! little else.
use super::peers::State;
use super::request::Shape;
use super::split::Splits;
use super::stage::{SEND_HEADER, wire_header};
use super::token::Token;
use super::{POST_BURST, Worker};
use crate::domain::{Chan, Domain, Post, SendWr, WriteWr};
use crate::error::Result;
use crate::metrics::SUBMIT_TO_POST;

impl<D: Domain> Worker<D> {
    pub(super) fn post_all(&mut self) -> bool {
        // Receive buffers go back after this pass's work requests: reposting
        // the one an answer's request came in is then not on the answer's
        // way out (manual progress, send/recv round trip on the H200: tcp
        // + 1.13 → + 0.85 µs, shm + 0.78 → + 0.58; docs/benchmarks.md). The
        // pool has its other buffers posted meanwhile. But if the last pass
        // left some unposted (the provider's queue was full), they go first,
        // so that work requests never starve them.
        let first = self.pass.receives_left;
        let mut busy = false;
        if first {
            busy |= self.post_all_receives();
        }
        busy |= self.post_fences();
        for d in 0..self.domains.len() {
            busy |= self.post_domain(d);
        }
        if !first {
            busy |= self.post_all_receives();
        }
        busy
    }

    /// The receive buffers to post again, the application's pools' and the
    /// engine channel's; notes whether any are left (`Pass::receives_left`).
    #[inline(always)]
    fn post_all_receives(&mut self) -> bool {
        if self.recv.repost.is_empty() && !self.peers.mail.reposts_left() {
            self.pass.receives_left = false;
            return false;
        }
        self.post_receives_now()
    }

    fn post_receives_now(&mut self) -> bool {
        let busy = self.post_receives() | self.post_engine_receives();
        self.pass.receives_left = !self.recv.repost.is_empty() || self.peers.mail.reposts_left();
        busy
    }

    /// Posts the units of the request in `slot`, just queued on domain `d`
    /// alone (`Worker::queue`), at once when nothing waits there before it:
    /// no trip through `pending`. True if nothing of it is left to queue
    /// (every unit posted, or it ended). A peer down or gone, receive
    /// buffers owed from the last pass, or this pass's burst spent: false,
    /// and `post_domain` sees to it as to any other.
    pub(super) fn post_now(&mut self, d: usize, slot: u32, entry: u32) -> bool {
        let spent = self.pass.posted_now[d];
        if spent >= POST_BURST || self.pass.receives_left || !self.requests.pending[d].is_empty() {
            return false;
        }
        if self.peers.gone(entry) || !matches!(self.peers.get(entry), State::Up) {
            return false;
        }
        let (n, res) = self.post_run(d, slot, entry, POST_BURST - spent);
        self.pass.posted_now[d] += n;
        match res {
            Ok(Post::Posted) => self.requests.slots.get(slot).is_none_or(|a| a.next[d] >= a.units),
            Ok(Post::Again | Post::Busy) => false,
            Err(e) => {
                self.end(slot, e);
                true
            }
        }
    }

    /// (Inline: every pass calls it, and most find nothing queued.)
    #[inline(always)]
    fn post_domain(&mut self, d: usize) -> bool {
        let (mut posted, mut busy_peers) = (self.post_split_imms(d) as usize + self.pass.posted_now[d], 0);
        while posted < POST_BURST && busy_peers < self.requests.pending[d].len() {
            let Some(&(slot, epoch)) = self.requests.pending[d].front() else {
                break;
            };
            let entry = match self.requests.slots.current(slot, epoch) {
                Some(a) if a.error.is_none() && a.next[d] < a.units => {
                    a.unit_peers.as_ref().map_or(a.peer, |u| u[a.next[d]])
                }
                _ => {
                    self.requests.pending[d].pop_front();
                    continue;
                }
            };
            // Nothing goes to an engine whose liveness record says it is gone
            // (shm: a restarted process could sit at its pid; liveness.rs).
            if self.peers.gone(entry) {
                self.peer_gone(entry);
                continue;
            }
            // Nothing new to a peer that is down (one that said goodbye
            // still has requests until the next tick: `Peers::bye`).
            if let State::Down(e) = self.peers.get(entry) {
                let e = e.clone();
                self.requests.pending[d].pop_front();
                self.end(slot, e);
                continue;
            }
            let (n, res) = self.post_run(d, slot, entry, POST_BURST - posted);
            posted += n;
            match res {
                // Run over: the budget is spent, or the request's next unit
                // goes to another peer, or it has none left.
                Ok(Post::Posted) => {}
                Ok(Post::Again) => break,
                // Its peer's window is full: let the requests behind it go first.
                Ok(Post::Busy) => {
                    self.requests.pending[d].rotate_left(1);
                    busy_peers += 1;
                }
                Err(e) => {
                    self.requests.pending[d].pop_front();
                    self.end(slot, e);
                }
            }
        }
        posted > 0
    }

    /// Posts the units of the live request in `slot` that go next on domain
    /// `d` to peer table entry `entry`, up to `budget` of them; returns how
    /// many went, and `Ok(Posted)` if it stopped for no fault of the
    /// provider's, else what the provider said of the one that did not go.
    fn post_run(&mut self, d: usize, slot: u32, entry: u32, budget: usize) -> (usize, Result<Post>) {
        let peer = self.peers.id(entry, d);
        let peer_epoch = self.peers.address(entry).epoch;
        let a = self.requests.slots.get(slot).expect("a live request");
        let tok = Token::Request { slot, epoch: a.epoch };
        let (mut n, mut bytes, mut res) = (0, 0, Ok(Post::Posted));
        if let Shape::Send { msg, .. } = &a.req.shape {
            let s = match a.stage {
                Some(s) => s,
                None => match self.requests.stage.stage(msg) {
                    Some(s) => *a.stage.insert(s),
                    // No slot free: the requests behind it go first, as for
                    // a full peer window. (Stopping the domain's queue here,
                    // as for a full provider queue, could wait for ever on
                    // sends behind it that hold the slots and wait for
                    // their peer's window.)
                    None => return (0, Ok(Post::Busy)),
                },
            };
            // The sender named in the header, or in the completion's data.
            let (stage, header) = (&self.requests.stage, wire_header(&self.domains[d]));
            let wr = SendWr {
                chan: Chan::User,
                peer,
                // SAFETY: SEND_HEADER - header <= SEND_HEADER bytes into slot s, inside it.
                buf: unsafe { stage.buf(s).add(SEND_HEADER - header) },
                len: msg.len() + header,
                desc: stage.desc(),
                ordered: false,
                data: (header == 0).then(|| stage.sender()),
            };
            res = self.domains[d].post_send(&wr, tok.encode());
            if matches!(res, Ok(Post::Posted)) {
                a.next[d] += a.step;
                (n, bytes) = (1, msg.len());
            }
        } else if let Shape::Bundle(b) = &a.req.shape {
            // A bundle: each write has a token of its own; one canceled
            // before it went is not posted (`cancel_member` reported it).
            let src = a.req.region.map(|i| &self.requests.regions.locals(i)[d]);
            let (split_over, scratch) = (self.domains[d].write_split_limit(), &self.requests.scratch_mr[d]);
            let mut skipped = 0;
            while n < budget && a.next[d] < a.units {
                let k = a.next[d];
                let m = &b.members[k];
                if a.unit_peers.as_ref().is_some_and(|u| u[k] != entry) {
                    break;
                }
                a.next[d] += a.step;
                if m.reported {
                    skipped += 1;
                    continue;
                }
                let wr = m.wr(d, peer, src.unwrap_or(scratch).desc, &self.requests.dsts);
                let t = Token::Member { slot, epoch: a.epoch, unit: k as u8 };
                let r = post_write(&mut self.domains[d], &mut self.requests.splits, split_over, &wr, t);
                if !matches!(r, Ok(Post::Posted)) {
                    a.next[d] -= a.step;
                    res = r;
                    break;
                }
                m.posted.set(true);
                bytes += wr.len;
                n += 1;
            }
            a.posted += skipped;
        } else {
            let scratch = (self.requests.scratch.ptr as *const u8, &self.requests.scratch_mr[d]);
            let src = a.req.region.map(|i| &self.requests.regions.locals(i)[d]);
            let split_over = self.domains[d].write_split_limit();
            let pages = a.req.page_wrs(d, peer, src, scratch.1, &self.requests.dsts);
            while n < budget && a.next[d] < a.units {
                let k = a.next[d];
                if a.unit_peers.as_ref().is_some_and(|u| u[k] != entry) {
                    break;
                }
                let wr = match &pages {
                    Some(p) => p.wr(k),
                    None => a.req.write_wr(k, d, peer, src, scratch, &self.requests.dsts),
                };
                let r = post_write(&mut self.domains[d], &mut self.requests.splits, split_over, &wr, tok);
                if !matches!(r, Ok(Post::Posted)) {
                    res = r;
                    break;
                }
                a.next[d] += a.step;
                bytes += wr.len;
                n += 1;
            }
        }
        if n > 0 {
            if self.pass.bell_peers {
                self.pass.posted_to.push(entry);
            }
            self.tally.posted_run(d, peer, peer_epoch, n, bytes);
            if a.first_post_ns == 0 {
                a.first_post_ns = self.pass.now_ns();
                if a.req.submitted_ns != 0 {
                    let t = crate::metrics::at_epoch_ns(a.req.submitted_ns);
                    self.shared.stats.hists[SUBMIT_TO_POST].record_time(self.pass.now().saturating_duration_since(t));
                }
            }
            a.bytes += bytes as u64;
            a.posted += n;
            a.outstanding += n;
        }
        (n, res)
    }
}

/// Posts write `wr` of token `t` on `domain`: as its bytes, then its
/// immediate (split.rs), if it carries one and is longer than `split_over`.
#[inline(always)]
fn post_write<D: Domain>(
    domain: &mut D,
    splits: &mut Splits,
    split_over: usize,
    wr: &WriteWr,
    t: Token,
) -> Result<Post> {
    if wr.imm.is_some() && wr.len > split_over {
        post_split(domain, splits, wr, t)
    } else {
        domain.post_write(wr, t.encode())
    }
}

/// Posts the bytes of write `wr` of token `t`; its immediate follows once
/// they are written (split.rs).
#[inline(never)]
fn post_split<D: Domain>(domain: &mut D, splits: &mut Splits, wr: &WriteWr, t: Token) -> Result<Post> {
    let (body, i) = splits.start(wr, t);
    let r = domain.post_write(&body, Token::Split(i).encode());
    if !matches!(r, Ok(Post::Posted)) {
        splits.take(i);
    }
    r
}
