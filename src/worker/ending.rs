//! How requests end early and how the engine ends: `end` (canceled, timed
//! out, peer down, a failed post — nothing more is posted, and the report
//! waits for the work requests already on the wire, up to the drain
//! timeout), the deadlines (`tick`), and shutdown.
use super::request::Ctrl;
use super::timers::Timer;
use super::{Worker, release};
use crate::completion::notify::shutdown_error;
use crate::domain::Domain;
use crate::error::{Error, Status};
use std::time::Instant;

impl<D: Domain> Worker<D> {
    /// Ends request `slot` with `err` (canceled, timed out, peer down, a
    /// failed post): nothing more is posted, and it is reported once the
    /// provider has given back its work requests on the wire, or after the
    /// drain timeout. Keeps an earlier error.
    pub(super) fn end(&mut self, slot: u32, err: Error) {
        let Some(a) = self.requests.slots.get(slot) else {
            return;
        };
        if a.error.is_none() {
            a.error = Some(err);
            if a.outstanding > 0 {
                let t = Timer::Request { slot, epoch: a.epoch };
                let now = self.pass.now();
                self.pass.timers.add(now + self.cfg.drain_timeout, t, false);
            }
        }
        self.maybe_finish(slot);
    }

    /// Ends every request to peer `p` with `err()`; returns how many.
    pub(super) fn end_all(&mut self, p: u32, err: impl Fn() -> Error) -> usize {
        let hit = self.requests.slots.find(|a| a.error.is_none() && a.involves(p));
        for &s in &hit {
            self.end(s, err());
        }
        hit.len()
    }

    /// Ends the engine: queued and unposted requests end with `Shutdown`;
    /// work requests on the wire get `drain_timeout` to come back; then the
    /// peers are told goodbye and acknowledge it (within another
    /// `drain_timeout`); only then are registrations and endpoints closed.
    pub(super) fn shutdown(mut self) {
        // Peers that said BYE: their work requests are given up now, not waited for.
        self.end_byes(true);
        let err = shutdown_error();
        while let Some(s) = self.shared.data.pop() {
            for r in s.requests() {
                self.shared.stats.started[r.kind()].add(r.reports() as u64);
                self.fail_unaccepted(r, err.clone());
            }
        }
        // Nothing new is posted; requests with work on the wire end once the NIC
        // is done with their buffers (or after SHUTDOWN_DRAIN).
        for s in self.requests.slots.all() {
            let a = self.requests.slots.get(s).unwrap();
            if a.posted < a.units {
                a.error = Some(err.clone());
            }
            self.maybe_finish(s);
        }
        let deadline = Instant::now() + self.cfg.drain_timeout;
        while self.requests.slots.live() > 0 && Instant::now() < deadline {
            self.poll_all();
        }
        for s in self.requests.slots.all() {
            let a = self.requests.slots.get(s).unwrap();
            a.outstanding = 0;
            a.error = Some(err.clone());
            self.maybe_finish(s);
        }
        self.imm.fail_all(&err, &self.notifier);
        for (cb, on_worker) in self.recv.live_callbacks() {
            self.last_call(cb, on_worker, err.clone());
        }
        while let Some(c) = self.shared.ctrl.pop() {
            match c {
                Ctrl::Register { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::Expect { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::RecvPool { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::AddPeerSet { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::RemoveRecvPool { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::RemovePeerSet { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::Cancel { reply, .. } | Ctrl::AddPeer { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::CancelPeer { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::RemovePeer { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::ImmCount { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::MirrorImm { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::PeerState { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::Deregister { .. } | Ctrl::Repost { .. } | Ctrl::ImmArrived { .. } => {}
            }
        }
        self.say_goodbye(Instant::now() + self.cfg.drain_timeout);
        // Close every registration before the domains.
        // Deregisters queued above are covered: every registration still known is closed here.
        for locals in self.requests.regions.drain() {
            release(&mut self.domains, &locals);
        }
        for pool in self.recv.pools.iter().flatten() {
            self.domains[0].deregister(&pool.mr);
        }
        self.peers.close(&mut self.domains);
        release(&mut self.domains, &self.requests.scratch_mr);
        self.requests.stage.close(&mut self.domains[0]);
        // Gone for every peer before the endpoints close (when the worker drops).
        if let Some(l) = &self.live {
            l.mark_closed();
        }
        self.notifier.release_inflight();
    }
}

/// How a request the application canceled ends.
pub(super) fn canceled() -> Error {
    Error::new(Status::Canceled, "canceled by the application")
}
