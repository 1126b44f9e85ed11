//! How the worker applies what the peer protocol (peers.rs) reports: the
//! calls that reach the protocol from a request's path (`peer_of`,
//! `peer_ready`, `add_peer`, an engine message in or out, keepalives) each
//! end by applying the events they caused (`peer_events`) — a peer up is
//! told to the application, a peer ready lets its waiting requests go, a
//! peer down ends its requests and gives up its work requests on the wire.
use super::Worker;
use super::goodbye::bye_error;
use super::mailbox::Message;
use super::peers::{Event, FENCE, FENCE_ACK, PING, State};
use super::token::Token;
use crate::config::PeerState;
use crate::domain::{Domain, PeerId};
use crate::error::{Error, Result, Status};
use crate::wire::NetAddr;

impl<D: Domain> Worker<D> {
    /// The entry of `addr`, added (and greeted) if new.
    pub(super) fn peer_of(&mut self, addr: &NetAddr) -> Result<u32> {
        match self.peers.find(addr) {
            Some(p) => Ok(p),
            None => self.new_peer(addr, State::Connecting),
        }
    }

    /// Adds `addr` in `state` (`Peers::insert`), after what the provider
    /// knew of an engine gone from its address.
    fn new_peer(&mut self, addr: &NetAddr, state: State) -> Result<u32> {
        if addr.domains.len() != self.domains.len() {
            crate::bail!(
                InvalidArgument,
                "peer has {} NICs, this engine's group {}",
                addr.domains.len(),
                self.domains.len()
            );
        }
        // An earlier engine at the same provider address is gone (shm: its
        // process died and a new one has its pid): it is down, and the
        // provider forgets it, else it would go on mapping the dead one.
        // Only a process known to have exited: the provider unmaps what it
        // knew of the address, which a live process still uses.
        for d in 0..self.domains.len() {
            if let Some((old, id)) = self.peers.gone_before(&mut self.domains[d], d, addr)? {
                self.peers.down_gone(old);
                self.peer_events();
                self.domains[d].forget(id);
            }
        }
        let p = self.peers.insert(&mut self.domains, addr, state, self.pass.now());
        self.peer_events();
        p
    }

    /// `add_peer`: greets `addr`; one that is down is greeted afresh.
    pub(super) fn add_peer(&mut self, addr: &NetAddr) -> Result<()> {
        match self.peers.find(addr) {
            Some(p) => {
                // Its requests from before a BYE end first, not the new ones.
                self.end_bye_now(p);
                self.peers.greet(&mut self.domains, p, self.pass.now())
            }
            None => return self.peer_of(addr).map(drop),
        }
        self.peer_events();
        Ok(())
    }

    /// `remove_peer`: ends every request to (or through) the engine
    /// `engine` with `Canceled`, as `cancel_peer` does, and forgets its
    /// entries (`Peers::remove`): no keepalive, no report, no sender name
    /// for it any more; the descriptors it owns look it up afresh when next
    /// used. Returns how many entries it had and how many requests ended.
    pub(super) fn remove_peer(&mut self, engine: u64) -> (usize, usize) {
        self.accept_queued();
        let (entries, mut n) = (self.peers.of_engine(engine), 0);
        for &p in &entries {
            self.end_bye_now(p);
            n += self.end_all(p, || Error::new(Status::Canceled, "canceled: its peer was removed"));
            self.requests.dsts.unlink(p);
            self.peers.remove(p);
        }
        if let Some(ps) = self.peer_states.clone() {
            let g = self.group;
            self.notifier.run(Box::new(move || ps.forget(g, engine)));
        }
        (entries.len(), n)
    }

    /// Peer `p`'s liveness record says its engine is gone: it is down.
    pub(super) fn peer_gone(&mut self, p: u32) {
        self.peers.down_gone(p);
        self.peer_events();
    }

    /// Peer `p` is down (or stale) with `err`.
    pub(super) fn peer_down(&mut self, p: u32, err: Error) {
        self.peers.down(p, err);
        self.peer_events();
    }

    /// Whether requests to peer `p` may be posted now (`Peers::ready`).
    pub(super) fn peer_ready(&mut self, p: u32) -> Result<bool> {
        let r = self.peers.ready(&mut self.domains, p, self.pass.now());
        self.peer_events();
        r
    }

    /// Posts engine message `kind` (with `tag`) through domain `d` to that
    /// domain's peer `id` (entry `p`, or `NO_ENTRY`).
    pub(super) fn post_engine_on(&mut self, d: usize, id: PeerId, p: u32, kind: u8, tag: Option<u64>) -> bool {
        self.peers.mail.post(&mut self.domains[d], d, id, p, kind, tag)
    }

    /// Engine message slot `slot` to peer `p` went out (or failed with `err`).
    pub(super) fn engine_sent(&mut self, p: u32, slot: u16, err: Option<Error>) {
        self.peers.sent(p, slot, err);
        self.peer_events();
    }

    /// Posts the engine-channel receive buffers waiting to be (re)posted.
    pub(super) fn post_engine_receives(&mut self) -> bool {
        self.peers.post_receives(&mut self.domains)
    }

    /// An engine message of `len` bytes arrived in receive buffer `i` (`None`: the receive failed).
    pub(super) fn engine_recv(&mut self, i: u32, len: Option<usize>) {
        let Some(Message { domain, kind, tag, from, main }) = self.peers.take(i, len) else {
            return;
        };
        if self.peers.closing {
            return self.peers.closing_recv(&mut self.domains, kind, &from);
        }
        self.peers.message_from(&from, main);
        // A stranger greeting us is a peer, up: it has just spoken.
        if kind == PING && self.peers.find(&from).is_none() && self.new_peer(&from, State::Up).is_err() {
            return;
        }
        match kind {
            FENCE => self.owe_fence_ack(domain, &from, tag),
            FENCE_ACK => self.fence_acked(tag),
            _ => self.peers.receive(&mut self.domains, kind, &from, self.pass.now()),
        }
        self.peer_events();
    }

    /// Ends the requests of the peers that said BYE a pass or more ago
    /// (every one if `all`: at shutdown), as `end_peer` does (`Peers::bye`).
    pub(super) fn end_byes(&mut self, all: bool) {
        for p in self.peers.due_byes(self.pass.now(), all) {
            self.end_peer(p, bye_error());
        }
    }

    /// Ends now the requests of peer `p` if it said BYE and they are pending.
    fn end_bye_now(&mut self, p: u32) {
        if self.peers.take_bye(p) {
            self.end_peer(p, bye_error());
        }
    }

    /// Keepalives and peer timeouts. True if a message went out.
    pub(super) fn keepalive(&mut self) -> bool {
        let busy = self.peers.keepalive(&mut self.domains, self.pass.now());
        self.peer_events();
        busy
    }

    /// Applies what the protocol reported (`Event`), in order.
    #[inline]
    pub(super) fn peer_events(&mut self) {
        if self.peers.has_events() {
            self.apply_peer_events();
        }
    }

    #[inline(never)]
    fn apply_peer_events(&mut self) {
        while let Some(e) = self.peers.events.pop_front() {
            match e {
                Event::Up(p) => self.report(p, PeerState::Up, None),
                Event::Ready(p) => {
                    let waiting = self.requests.slots.find(|a| a.parked && a.involves(p));
                    for s in waiting {
                        self.admit(s);
                    }
                }
                Event::Down(p, err) => self.end_peer(p, err),
            }
        }
    }

    /// Peer `p` went down with `err`: the application is told, its requests
    /// end, its work requests on the wire are given up.
    fn end_peer(&mut self, p: u32, err: Error) {
        self.report(p, PeerState::Down, Some(err.clone()));
        self.end_all(p, || err.clone());
        // A stale entry shares its address (and provider ids) with the live
        // engine there now: its work requests will complete, keep them.
        if err.status != Status::PeerDown {
            return;
        }
        let mut tokens = std::mem::take(&mut self.pass.abandoned);
        for d in 0..self.domains.len() {
            let id = self.peers.id(p, d);
            self.domains[d].abandon(id, &mut tokens);
            for &t in &tokens {
                match Token::decode(t) {
                    Token::EngineSend { slot, .. } => self.peers.abandoned(slot),
                    t => {
                        self.tally.failed(d, id, err.status);
                        self.wr_done(t, Some(err.clone()));
                    }
                }
            }
            tokens.clear();
        }
        self.pass.abandoned = tokens;
    }

    /// Tells `PeerStates` (on the callback thread) that pair `p` is in `state`.
    fn report(&self, p: u32, state: PeerState, err: Option<Error>) {
        if let Some(ps) = &self.peer_states {
            let (addr, main) = (self.peers.address(p).clone(), self.peers.main_of(p).cloned());
            let (ps, g) = (ps.clone(), self.group);
            self.notifier.run(Box::new(move || ps.update(g, &addr, main.as_ref(), state, err.as_ref())));
        }
    }
}
