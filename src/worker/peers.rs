//! The peer table and the engine's own protocol: a handshake before the first
//! request to a peer, and keepalives (the goodbye at shutdown: goodbye.rs).
//!
//! Every engine this one writes or sends to, or that greets it, is a peer:
//! an entry with its address (incl. epoch), its id in every domain and a
//! state (`Connecting` → `Up` → `Down`). Requests to a `Connecting` peer wait
//! (parked) until it answers. Every `keepalive_interval` each live peer gets a
//! PING and answers PONG; a peer not heard from for `peer_timeout`, one whose
//! work requests fail with an unreachable-peer error, or one that says BYE is
//! `Down`: its requests end with `PeerDown`, its work requests on the wire are
//! abandoned, new requests to it fail at once until `add_peer` greets it
//! again (a PING is always answered, so the peer's own `add_peer` of us
//! works even while we count it down). A message from another epoch at a known peer's address means that
//! engine restarted: the old entry goes `Down` with `Stale`.
//!
//! Where a restarted process can take the old address again (IP providers:
//! tcp;ofi_rxm reconnects to whatever listens there, silently), nothing is
//! posted to a peer this engine has not heard from within `RECHECK_AFTER`:
//! the request waits (`Checking`, still `Up` to the application) while the
//! peer is pinged, and goes out once that incarnation answers; a new one
//! answers with its own epoch and the old entry ends `Stale`, a dead one
//! fails the ping (`PeerDown`). Peers in use are pinged every half window,
//! so that steady traffic never waits.
//!
//! Messages travel on the engine's own channel (mailbox.rs: their buffers
//! and format), domain 0 to domain 0; delivery fences (fence.rs) go on
//! every domain.
//!
//! The protocol is `Peers`' own: it never touches a request. What it
//! learns it returns as events (`Event`: a peer up, ready for requests,
//! down), which the worker applies (`Worker::peer_events`): it admits the
//! requests waiting, ends those of a dead peer, tells the application. State
//! is reported per pair of groups to `PeerStates`
//! (completion/peer_state.rs), which tells the application per peer engine.
mod keepalive;
mod receive;

use super::goodbye::bye_error;
use super::mailbox::{Mailbox, Message};
use super::recv::Origin;
use crate::config::PeerState;
use crate::domain::{Domain, PeerId};
use crate::error::{Error, Result, Status};
use crate::fasthash::FastMap;
use crate::liveness::Watch;
use crate::wire::{MAX_DOMAINS, NetAddr};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) const PING: u8 = 1;
const PONG: u8 = 2;
pub(super) const BYE: u8 = 3;
/// The answer to a BYE: the peer has handled every message we sent before it.
pub(super) const BYE_ACK: u8 = 4;
/// A delivery fence of a request (its tag), on the domain of its writes.
pub(super) const FENCE: u8 = 5;
/// The answer to a FENCE: everything sent before it on that domain has been
/// taken in (immediates counted, or handed to the home group's queue).
pub(super) const FENCE_ACK: u8 = 6;
/// The peer entry of an engine message to an engine not in the table.
pub(super) const NO_ENTRY: u32 = u32::MAX;
/// At a reusable address, a peer silent this long is asked again before the
/// next request to it is posted (at most `keepalive_interval`).
pub(crate) const RECHECK_AFTER: Duration = Duration::from_millis(100);

/// Where a peer stands in this engine's goodbye (shutdown only).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Farewell {
    None,
    /// Owed a BYE that could not be posted yet.
    ToSend,
    /// BYE posted; waiting for its BYE_ACK.
    Sent,
    /// Acknowledged, or unreachable: nothing more to wait for.
    Over,
}

pub(super) enum State {
    Connecting,
    Up,
    /// Up, but silent for longer than the re-check window: requests wait for
    /// its answer to a PING (the application still sees it up).
    Checking,
    Down(Error),
}

/// What the protocol tells the worker (`Peers::events`, in order).
pub(super) enum Event {
    /// Peer `p` is up for the first time (or again): tell the application.
    Up(u32),
    /// Peer `p` answered: the requests waiting for it may go.
    Ready(u32),
    /// Peer `p` is down (or stale): its requests end with the error, its
    /// work requests on the wire are given up, the application is told.
    Down(u32, Error),
}

pub(super) struct Peer {
    addr: NetAddr,
    ids: [PeerId; MAX_DOMAINS],
    pub(super) state: State,
    last_heard: Instant,
    /// Until when a request to it needs no liveness check first:
    /// `last_heard` + the recheck window (`None`: no recheck on this provider).
    fresh_until: Option<Instant>,
    last_ping: Option<Instant>,
    /// The last time a request to it was admitted.
    last_used: Instant,
    /// Something was posted (or attempted: shm's first attempt already
    /// queues its connection request at the peer) to it.
    pub(super) contacted: bool,
    pub(super) farewell: Farewell,
    /// Its engine's main address, when it is another group of its engine
    /// and has said so (reports name the engine by it).
    main: Option<NetAddr>,
    /// Its address as receive callbacks name the sender (recv.rs).
    origin: Arc<Origin>,
    /// The application removed it (`remove`): out of every lookup.
    removed: bool,
    /// Its liveness record, where keys do not fence a restart (shm): read
    /// before every post to it (liveness.rs).
    watch: Option<Watch>,
    /// Why its record could not be mapped, where one is needed: it may be
    /// greeted (an engine message copies nothing into the target) so that
    /// the answer tells a restart (`Stale`) from a dead peer, but it never
    /// comes up: when its own epoch answers, it goes down with this.
    unfenced: Option<Error>,
}

impl Peer {
    /// It was heard from (or greeted afresh) at `now`: fresh for `recheck`.
    fn heard_at(&mut self, now: Instant, recheck: Option<Duration>) {
        self.last_heard = now;
        self.fresh_until = recheck.map(|w| now + w);
    }
}

pub(super) struct Peers {
    pub(super) list: Vec<Peer>,
    index: FastMap<NetAddr, u32>,
    /// Epoch → entry: the sender of an application message (recv.rs).
    by_epoch: FastMap<u64, u32>,
    /// Per domain: provider peer id → entry (the newest at that address).
    by_id: Vec<FastMap<PeerId, u32>>,
    /// The engine channel's buffers (mailbox.rs).
    pub(super) mail: Mailbox,
    /// What happened to peers, for the worker to apply (`Event`).
    pub(super) events: VecDeque<Event>,
    /// Peers that said BYE, and when (the pass's clock): down at once for
    /// new requests, but their requests end a tick later (`due_byes`), once
    /// the completions of what they had taken in before saying it have been
    /// read; anything else that says such a peer is down ends them at once.
    pub(super) byes: Vec<(u32, Instant)>,
    /// The engine is shutting down: strangers are not answered (a first
    /// message must never come from an endpoint about to close).
    pub(super) closing: bool,
    /// Domain-0 ids owed a BYE_ACK, sent once every domain has been polled.
    pub(super) acks: Vec<PeerId>,
    /// The re-check window where addresses come back (`None`: not needed).
    recheck: Option<Duration>,
    /// Keys do not fence a restarted peer here: every peer's liveness record
    /// is watched (`Domain::keys_checked_by_target`).
    fenced: bool,
    /// The provider needs a handshake (`Domain::handshakes`; not `null`).
    handshakes: bool,
    /// How often live peers are pinged, and how long one may stay silent.
    keepalive: Duration,
    timeout: Duration,
}

impl Peers {
    pub(super) fn new<D: Domain>(
        domains: &mut [D],
        me: &NetAddr,
        main: Option<&NetAddr>,
        keepalive: Duration,
        timeout: Duration,
    ) -> Result<Peers> {
        let mail = Mailbox::new(domains, me, main)?;
        Ok(Peers {
            list: Vec::new(),
            index: FastMap::default(),
            by_epoch: FastMap::default(),
            by_id: (0..domains.len()).map(|_| FastMap::default()).collect(),
            mail,
            events: VecDeque::new(),
            byes: Vec::new(),
            closing: false,
            acks: Vec::new(),
            recheck: domains[0].addresses_come_back().then_some(RECHECK_AFTER.min(keepalive)),
            fenced: !domains[0].keys_checked_by_target(),
            handshakes: domains[0].handshakes(),
            keepalive,
            timeout,
        })
    }

    pub(super) fn find(&self, addr: &NetAddr) -> Option<u32> {
        // By its epoch first (one incarnation of one group): a u64's hash and
        // one comparison of the address instead of the whole address's hash
        // (every send looks its peer up). `by_epoch` and `index` are set
        // together by `insert` and cleared together by `remove`, so an entry
        // found by epoch with this very address is the one `index` holds;
        // an address whose epoch names another entry is looked up by address.
        if let Some(&p) = self.by_epoch.get(&addr.epoch) {
            if self.list[p as usize].addr == *addr {
                return Some(p);
            }
        }
        self.index.get(addr).copied()
    }

    /// The entries of every group of engine `engine` (`NetAddr::engine_id`),
    /// removed ones aside.
    pub(super) fn of_engine(&self, engine: u64) -> Vec<u32> {
        let of = |q: &Peer| q.addr.engine_id() == engine && !q.removed;
        (0..self.list.len() as u32).filter(|&p| of(&self.list[p as usize])).collect()
    }

    /// Forgets entry `p` (`remove_peer`): it leaves every lookup (by
    /// address, epoch, provider id), is never pinged or reported again, and
    /// a request to its address, or its greeting, makes a new entry. Its
    /// slot stays, marked, so that indices held elsewhere never name another
    /// peer; its requests were ended first (`Worker::remove_peer`).
    pub(super) fn remove(&mut self, p: u32) {
        let q = &mut self.list[p as usize];
        q.removed = true;
        q.state = State::Down(Error::new(Status::Canceled, "the peer was removed (remove_peer)"));
        q.watch = None;
        if self.index.get(&q.addr) == Some(&p) {
            self.index.remove(&q.addr);
        }
        if self.by_epoch.get(&q.addr.epoch) == Some(&p) {
            self.by_epoch.remove(&q.addr.epoch);
        }
        for map in self.by_id.iter_mut() {
            map.retain(|_, e| *e != p);
        }
    }

    pub(super) fn get(&self, p: u32) -> &State {
        &self.list[p as usize].state
    }

    pub(super) fn state(&self, p: u32) -> PeerState {
        match self.get(p) {
            State::Connecting => PeerState::Connecting,
            State::Up | State::Checking => PeerState::Up,
            State::Down(_) => PeerState::Down,
        }
    }

    /// Peer `p`'s id in domain `d`.
    pub(super) fn id(&self, p: u32, d: usize) -> PeerId {
        self.list[p as usize].ids[d]
    }

    /// The address of entry `p`, and its engine's main address if it is
    /// another group of its engine and has said so.
    pub(super) fn address(&self, p: u32) -> &NetAddr {
        &self.list[p as usize].addr
    }

    /// The sender of an application message whose header says `epoch`.
    pub(super) fn origin(&self, epoch: u64) -> Option<Arc<Origin>> {
        self.by_epoch.get(&epoch).map(|&p| self.list[p as usize].origin.clone())
    }

    pub(super) fn main_of(&self, p: u32) -> Option<&NetAddr> {
        self.list[p as usize].main.as_ref()
    }

    /// Entry `p`'s doorbell, where it has one (bell.rs).
    pub(super) fn bell(&self, p: u32) -> Option<&crate::bell::Bell> {
        self.list[p as usize].watch.as_ref()?.bell()
    }

    /// Events not yet applied (`Worker::peer_events`).
    #[inline]
    pub(super) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Whether peer `p`'s engine is known to be gone (its liveness record
    /// says its process died or it was destroyed). One load per call.
    #[inline]
    pub(super) fn gone(&self, p: u32) -> bool {
        self.list[p as usize].watch.as_ref().is_some_and(|w| w.gone())
    }

    pub(super) fn by_id(&self, d: usize, id: PeerId) -> Option<u32> {
        self.by_id[d].get(&id).copied()
    }

    /// Engine messages still on the wire.
    pub(super) fn sending(&self) -> bool {
        self.mail.sending()
    }

    pub(super) fn close<D: Domain>(&self, domains: &mut [D]) {
        self.mail.close(domains)
    }

    /// The entry of an engine of another epoch at `addr`'s provider address
    /// in domain `d` whose liveness record says it is gone (shm: its process
    /// died and a new one has its pid), with its provider id there.
    pub(super) fn gone_before<D: Domain>(
        &self,
        domain: &mut D,
        d: usize,
        addr: &NetAddr,
    ) -> Result<Option<(u32, PeerId)>> {
        let id = domain.resolve(&addr.domains[d])?;
        let old = self.by_id(d, id).filter(|&o| self.address(o).epoch != addr.epoch && self.gone(o));
        Ok(old.map(|o| (o, id)))
    }

    /// Adds `addr` in `state` (greeted unless it is up already).
    pub(super) fn insert<D: Domain>(
        &mut self,
        domains: &mut [D],
        addr: &NetAddr,
        state: State,
        now: Instant,
    ) -> Result<u32> {
        let mut ids = [0; MAX_DOMAINS];
        for (d, dom) in domains.iter_mut().enumerate() {
            ids[d] = dom.resolve(&addr.domains[d])?;
        }
        let p = self.list.len() as u32;
        let state = if self.handshakes { state } else { State::Up };
        // Where keys do not fence a restart, the peer's liveness record is
        // mapped before anything is sent to it; without one it never comes up.
        let (watch, unfenced) = match self.fenced.then(|| Watch::open(addr.epoch)) {
            Some(Ok(w)) => (Some(w), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let state = if unfenced.is_some() { State::Connecting } else { state };
        let up = matches!(state, State::Up);
        let peer = Peer {
            addr: addr.clone(),
            ids,
            state,
            last_heard: now,
            fresh_until: self.recheck.map(|w| now + w),
            last_ping: None,
            last_used: now,
            contacted: false,
            farewell: Farewell::None,
            main: None,
            origin: Origin::of(addr),
            removed: false,
            watch,
            unfenced,
        };
        self.list.push(peer);
        self.index.insert(addr.clone(), p);
        self.by_epoch.insert(addr.epoch, p);
        for (d, map) in self.by_id.iter_mut().enumerate() {
            map.insert(ids[d], p);
        }
        if up {
            self.events.push_back(Event::Up(p));
        } else {
            self.ping(domains, p, now);
        }
        Ok(p)
    }

    /// Greets peer `p` afresh if it is down (`add_peer`).
    pub(super) fn greet<D: Domain>(&mut self, domains: &mut [D], p: u32, now: Instant) {
        let fenced = self.fenced;
        let peer = &mut self.list[p as usize];
        if let State::Down(_) = peer.state {
            // A peer whose engine is gone stays down: its record says so.
            if fenced && peer.watch.as_ref().is_none_or(|w| w.gone()) {
                (peer.watch, peer.unfenced) = match Watch::open(peer.addr.epoch) {
                    Ok(w) => (Some(w), None),
                    Err(e) => (None, Some(e)),
                };
            }
            (peer.state, peer.last_ping) = (State::Connecting, None);
            peer.heard_at(now, self.recheck);
            self.ping(domains, p, now);
        }
    }

    /// Peer `p` is down (or stale) with `err`, unless it already is. One
    /// that said BYE (`bye`) and still has requests ends them now.
    pub(super) fn down(&mut self, p: u32, err: Error) {
        let peer = &mut self.list[p as usize];
        if let State::Down(_) = peer.state {
            if self.take_bye(p) {
                self.events.push_back(Event::Down(p, bye_error()));
            }
            return;
        }
        peer.state = State::Down(err.clone());
        self.events.push_back(Event::Down(p, err));
    }

    /// Peer `p`'s liveness record says its engine is gone: it is down.
    pub(super) fn down_gone(&mut self, p: u32) {
        let e = Error::new(
            Status::PeerDown,
            "the peer engine is gone (its process exited or it was destroyed: its liveness record says so)",
        );
        self.down(p, e);
    }

    /// Whether requests to peer `p` may be posted now: `Ok(false)` while it
    /// has not answered (the request waits for it), its error once it is
    /// down. A peer at a reusable address silent for longer than the
    /// re-check window is asked first (see the module doc).
    pub(super) fn ready<D: Domain>(&mut self, domains: &mut [D], p: u32, now: Instant) -> Result<bool> {
        if self.gone(p) {
            self.down_gone(p);
        }
        let peer = &mut self.list[p as usize];
        peer.last_used = now;
        match &peer.state {
            State::Up if peer.fresh_until.is_none_or(|t| now <= t) => Ok(true),
            State::Up => {
                peer.state = State::Checking;
                self.ping(domains, p, now);
                Ok(false)
            }
            State::Connecting | State::Checking => Ok(false),
            State::Down(e) => Err(e.clone()),
        }
    }

    fn ping<D: Domain>(&mut self, domains: &mut [D], p: u32, now: Instant) {
        if self.send(domains, p, PING) {
            self.list[p as usize].last_ping = Some(now);
        }
    }

    /// Posts engine message `kind` to peer `p`; false if it could not be
    /// posted now, or ever: an engine whose liveness record says it is gone
    /// gets nothing (on shm, a send to an endpoint closed in this same
    /// process crashes it) and is down.
    pub(super) fn send<D: Domain>(&mut self, domains: &mut [D], p: u32, kind: u8) -> bool {
        if self.gone(p) {
            self.down_gone(p);
            return false;
        }
        self.list[p as usize].contacted = true;
        let id = self.id(p, 0);
        self.mail.post(&mut domains[0], 0, id, p, kind, None)
    }

    /// Engine message slot `slot` to peer `p` went out (or failed with `err`).
    pub(super) fn sent(&mut self, p: u32, slot: u16, err: Option<Error>) {
        self.mail.sent(slot);
        let Some(e) = err.filter(|_| p != NO_ENTRY) else {
            return;
        };
        let f = &mut self.list[p as usize].farewell;
        if *f != Farewell::None {
            *f = Farewell::Over;
        }
        if e.status == Status::PeerDown {
            self.down(p, Error::new(Status::PeerDown, format!("keepalive to the peer failed: {}", e.message)));
        }
    }

    /// An engine message's slot came back with the message abandoned.
    pub(super) fn abandoned(&mut self, slot: u16) {
        self.mail.sent(slot);
    }

    /// Posts the engine-channel receive buffers waiting to be (re)posted.
    pub(super) fn post_receives<D: Domain>(&mut self, domains: &mut [D]) -> bool {
        self.mail.post_receives(domains)
    }

    /// The message of `len` bytes in receive buffer `i` (`None`: the
    /// receive failed, or it is not well-formed: garbage from a stranger is
    /// ignored). The buffer is reposted.
    pub(super) fn take(&mut self, i: u32, len: Option<usize>) -> Option<Message> {
        self.mail.take(i, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::null::NullDomain;

    fn addr(epoch: u64) -> NetAddr {
        NetAddr { epoch, domains: vec![vec![epoch as u8; 8].into()].into() }
    }

    #[test]
    fn the_protocol_reports_events_and_never_a_request() {
        let spec = crate::domain::DomainSpec::default();
        let mut domains = vec![NullDomain::open(&spec).unwrap()];
        let me = addr(1);
        let (ka, timeout) = (Duration::from_millis(500), Duration::from_secs(3));
        let mut peers = Peers::new(&mut domains, &me, None, ka, timeout).unwrap();
        let now = Instant::now();
        // `null` needs no handshake: a new peer is up at once.
        let p = peers.insert(&mut domains, &addr(2), State::Connecting, now).unwrap();
        assert!(matches!(peers.events.pop_front(), Some(Event::Up(q)) if q == p));
        assert!(peers.ready(&mut domains, p, now).unwrap());
        let down = Error::new(Status::PeerDown, "test");
        peers.down(p, down.clone());
        peers.down(p, down);
        assert!(matches!(peers.events.pop_front(), Some(Event::Down(q, e)) if q == p && e.status == Status::PeerDown));
        assert!(peers.events.is_empty(), "down twice is one event");
        assert_eq!(peers.ready(&mut domains, p, now).unwrap_err().status, Status::PeerDown);
        assert_eq!(peers.state(p), PeerState::Down);
        assert!(!peers.keepalive(&mut domains, now), "no keepalives without a handshake");
    }

    /// `find` looks an address up by its epoch first: it finds exactly the
    /// entry `index` holds, also once another address with the same epoch
    /// came (a forged or corrupt one) and after a removal.
    #[test]
    fn find_by_epoch_agrees_with_the_address_index() {
        let spec = crate::domain::DomainSpec::default();
        let mut domains = vec![NullDomain::open(&spec).unwrap()];
        let mut peers =
            Peers::new(&mut domains, &addr(1), None, Duration::from_secs(1), Duration::from_secs(3)).unwrap();
        let now = Instant::now();
        let (a, b) = (addr(2), addr(3));
        // Same epoch as `a`, another provider address.
        let a2 = NetAddr { epoch: a.epoch, domains: vec![vec![9u8; 8].into()].into() };
        let pa = peers.insert(&mut domains, &a, State::Connecting, now).unwrap();
        let pb = peers.insert(&mut domains, &b, State::Connecting, now).unwrap();
        assert_eq!((peers.find(&a), peers.find(&b), peers.find(&a2)), (Some(pa), Some(pb), None));
        let pa2 = peers.insert(&mut domains, &a2, State::Connecting, now).unwrap();
        assert_eq!((peers.find(&a), peers.find(&a2)), (Some(pa), Some(pa2)), "one epoch, two addresses");
        peers.remove(pa2);
        assert_eq!((peers.find(&a), peers.find(&a2)), (Some(pa), None));
        peers.remove(pa);
        assert_eq!((peers.find(&a), peers.find(&b)), (None, Some(pb)));
        let again = peers.insert(&mut domains, &a, State::Connecting, now).unwrap();
        assert!(again != pa && peers.find(&a) == Some(again), "a removed entry is never found again");
    }
}
