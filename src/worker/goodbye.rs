//! The goodbye: how an engine closes without a peer ever handling a
//! message from an endpoint that has closed (libfabric 1.17's shm crashes a
//! process that does). At shutdown every contacted peer gets a BYE and the
//! engine keeps progressing until each has answered BYE_ACK (or proved
//! unreachable, or the drain timeout passed); a peer answers only once it
//! has polled every domain, so it has handled all this engine sent it.
//!
//! A peer's goodbye, received: the peer is down for new requests at once,
//! and its pending requests end a tick later (`Peers::bye`).
use super::Worker;
use super::peers::{BYE, BYE_ACK, Farewell, NO_ENTRY, Peers, State};
use crate::domain::Domain;
use crate::error::{Error, Status};
use crate::wire::NetAddr;
use std::time::Instant;

impl Peers {
    /// Peer `p` said BYE at `now`: down for new requests at once. Its
    /// requests end later (`due_byes`): a write it took in before saying
    /// BYE may have its completion still unread here (shm reports a write
    /// over its inject size on an endpoint of its own, read after the
    /// message in the same poll), and ends as it went, not `PeerDown`.
    pub(super) fn bye(&mut self, p: u32, now: Instant) {
        let peer = &mut self.list[p as usize];
        if let State::Down(_) = peer.state {
            return;
        }
        peer.state = State::Down(bye_error());
        self.byes.push((p, now));
    }

    /// The peers that said BYE before `now` (every one if `all`), taken:
    /// their requests end now (`Worker::end_byes`).
    pub(super) fn due_byes(&mut self, now: Instant, all: bool) -> Vec<u32> {
        let mut due = Vec::new();
        self.byes.retain(|&(p, at)| {
            let now_due = all || now > at;
            if now_due {
                due.push(p);
            }
            !now_due
        });
        due
    }

    /// Whether peer `p` said BYE and its requests have not ended yet (they
    /// are the caller's to end now).
    pub(super) fn take_bye(&mut self, p: u32) -> bool {
        let i = self.byes.iter().position(|&(q, _)| q == p);
        i.map(|i| self.byes.swap_remove(i)).is_some()
    }

    /// An engine message while this engine shuts down: acknowledgments of
    /// our goodbye, and goodbyes of peers shutting down too (answered, so
    /// that they close). Nobody else is answered.
    pub(super) fn closing_recv<D: Domain>(&mut self, domains: &mut [D], kind: u8, from: &NetAddr) {
        match kind {
            BYE_ACK => {
                if let Some(p) = self.find(from) {
                    let f = &mut self.list[p as usize].farewell;
                    if *f == Farewell::Sent {
                        *f = Farewell::Over;
                    }
                }
            }
            BYE => self.owe_ack(domains, from),
            _ => {}
        }
    }

    /// `from` said BYE: it closes its endpoint once we acknowledge, known to
    /// us or not (its greeting may never have been posted, but the
    /// provider's own connection request may be with us).
    pub(super) fn owe_ack<D: Domain>(&mut self, domains: &mut [D], from: &NetAddr) {
        // Not to an engine that is gone since (it gave up waiting for us).
        if self.find(from).is_some_and(|p| self.gone(p)) {
            return;
        }
        if let Ok(id) = domains[0].resolve(&from.domains[0]) {
            self.acks.push(id);
        }
    }

    /// Sends the BYE_ACKs owed. Called once every domain has been polled in
    /// a pass, so that whatever the departing engine posted to our other
    /// domains before its BYE has been handled too. (Inline: every pass
    /// calls it, and most owe nothing.)
    #[inline]
    pub(super) fn send_acks<D: Domain>(&mut self, domains: &mut [D]) {
        if self.acks.is_empty() {
            return;
        }
        let mut acks = std::mem::take(&mut self.acks);
        acks.retain(|&id| !self.mail.post(&mut domains[0], 0, id, NO_ENTRY, BYE_ACK, None));
        self.acks = acks;
    }

    /// Posts the BYEs not yet posted; true while a peer has not answered.
    fn farewells<D: Domain>(&mut self, domains: &mut [D]) -> bool {
        let mut waiting = false;
        for p in 0..self.list.len() as u32 {
            let f = self.list[p as usize].farewell;
            match f {
                // Its engine is gone (liveness.rs): nothing to say or wait for.
                Farewell::ToSend | Farewell::Sent if self.gone(p) => self.list[p as usize].farewell = Farewell::Over,
                Farewell::ToSend if self.send(domains, p, BYE) => {
                    self.list[p as usize].farewell = Farewell::Sent;
                    waiting = true;
                }
                Farewell::ToSend | Farewell::Sent => waiting = true,
                _ => {}
            }
        }
        waiting
    }
}

impl<D: Domain> Worker<D> {
    /// Says goodbye before the endpoints close: every peer not down gets a
    /// BYE, and the engine keeps progressing until each has acknowledged it
    /// (or proved unreachable), or `limit` passes. A peer's BYE_ACK means it
    /// has handled every message this engine sent it, so none of them can
    /// reach it after the endpoint is gone (libfabric 1.17's shm crashes a
    /// process that handles the first message of a closed endpoint).
    pub(super) fn say_goodbye(&mut self, limit: Instant) {
        self.peers.closing = true;
        for q in self.peers.list.iter_mut() {
            // A peer we never posted to holds nothing of ours: no goodbye.
            if q.contacted && !matches!(q.state, State::Down(_)) {
                q.farewell = Farewell::ToSend;
            }
        }
        loop {
            let waiting = self.peers.farewells(&mut self.domains);
            // Our own last messages (acknowledgments) must be out too.
            if (!waiting && !self.peers.sending()) || Instant::now() >= limit {
                return;
            }
            self.poll_all();
        }
    }
}

/// Why the requests of a peer that said BYE end.
pub(super) fn bye_error() -> Error {
    Error::new(Status::PeerDown, "the peer engine shut down")
}
