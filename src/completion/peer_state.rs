//! Peer state as the application sees it: one state per peer *engine*,
//! however many of its DomainGroups this engine's groups are in contact with.
//!
//! Every pair of groups (one of ours, one of the peer's) is a peer of its
//! own inside the workers: greeting, keepalive and window are per pair. An
//! application, though, knows engines: it exchanged their main addresses.
//! So each worker reports the state of each of its pairs here (on the
//! callback thread, so reports are handled one at a time), and this tells
//! the application's peer-state callback when the *engine* comes up or goes
//! down, once each time, with the engine's main address (group 0's) when it
//! is known — a peer's other groups carry it in their engine messages — and
//! otherwise the address of the group it was met through.
//!
//! The engine's state combines its pairs: `Down` if any pair is down (a
//! request through that pair would fail), else `Connecting` if any pair has
//! not answered yet, else `Up`. `Connecting` is never reported by the
//! callback (only `peer_state` tells it).
use crate::config::{PeerCallback, PeerState};
use crate::error::Error;
use crate::wire::NetAddr;
use std::collections::HashMap;
use std::sync::Mutex;

/// The combined state of the pairs in `states`; `None` if there are none.
pub fn combine(states: impl IntoIterator<Item = PeerState>) -> Option<PeerState> {
    states.into_iter().max_by_key(|s| match s {
        PeerState::Up => 0,
        PeerState::Connecting => 1,
        PeerState::Down => 2,
    })
}

struct Engine {
    /// Per pair (our group, the peer's group's epoch): its state.
    pairs: HashMap<(usize, u64), PeerState>,
    /// What the application was last told.
    told: Option<PeerState>,
    /// The address it is told with: the engine's main address once known.
    addr: NetAddr,
}

/// The peer engines of one engine, and the application's callback.
pub struct PeerStates {
    cb: PeerCallback,
    engines: Mutex<HashMap<u64, Engine>>,
}

impl PeerStates {
    pub fn new(cb: PeerCallback) -> PeerStates {
        PeerStates { cb, engines: Mutex::new(HashMap::new()) }
    }

    /// Our group `group` forgot every pair with engine `engine` (it was
    /// removed): a later contact with it is reported afresh, as a new peer.
    pub fn forget(&self, group: usize, engine: u64) {
        let mut engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = engines.get_mut(&engine) {
            e.pairs.retain(|(g, _), _| *g != group);
            if e.pairs.is_empty() {
                engines.remove(&engine);
            }
        }
    }

    /// Our group `group` sees its pair with the peer's group at `peer` in
    /// `state` (`err`: why it is down). `main`: the peer engine's main
    /// address, if that group told it. Calls the application's callback if
    /// the engine's combined state became `Up` or `Down`.
    pub fn update(&self, group: usize, peer: &NetAddr, main: Option<&NetAddr>, state: PeerState, err: Option<&Error>) {
        let tell = {
            let mut engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
            let e = engines.entry(peer.engine_id()).or_insert_with(|| Engine {
                pairs: HashMap::new(),
                told: None,
                addr: peer.clone(),
            });
            if let Some(m) = main.filter(|m| m.engine_id() == peer.engine_id()) {
                e.addr = m.clone();
            } else if peer.group_index() == 0 {
                e.addr = peer.clone();
            }
            e.pairs.insert((group, peer.epoch), state);
            match combine(e.pairs.values().copied()) {
                Some(now @ (PeerState::Up | PeerState::Down)) if e.told != Some(now) => {
                    e.told = Some(now);
                    Some((e.addr.clone(), now))
                }
                _ => None,
            }
        };
        if let Some((addr, now)) = tell {
            (self.cb.0)(&addr, now, if now == PeerState::Down { err } else { None });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn addr(engine: u64, group: u64, b: u8) -> NetAddr {
        NetAddr { epoch: engine << 4 | group, domains: vec![vec![b].into()].into() }
    }

    type Seen = Arc<Mutex<Vec<(NetAddr, PeerState)>>>;

    fn recorder() -> (PeerStates, Seen) {
        let seen: Seen = Default::default();
        let s2 = seen.clone();
        let cb = PeerCallback(Arc::new(move |a: &NetAddr, s: PeerState, _: Option<&Error>| {
            s2.lock().unwrap().push((a.clone(), s))
        }));
        (PeerStates::new(cb), seen)
    }

    #[test]
    fn a_peer_engine_of_two_groups_seen_from_two_groups_is_reported_once_each_way() {
        let (ps, seen) = recorder();
        let (main, other) = (addr(7, 0, 1), addr(7, 1, 2));
        // Four pairs come up, one by one: one Up, told with the main address.
        ps.update(1, &other, Some(&main), PeerState::Connecting, None);
        ps.update(1, &other, Some(&main), PeerState::Up, None);
        for g in 0..2 {
            ps.update(g, &main, None, PeerState::Up, None);
        }
        ps.update(0, &other, Some(&main), PeerState::Up, None);
        // The engine dies: four pairs go down, one Down.
        for g in 0..2 {
            ps.update(g, &main, None, PeerState::Down, None);
            ps.update(g, &other, Some(&main), PeerState::Down, None);
        }
        assert_eq!(*seen.lock().unwrap(), vec![(main.clone(), PeerState::Up), (main, PeerState::Down)]);
    }

    #[test]
    fn the_group_address_stands_in_until_the_main_one_is_known() {
        let (ps, seen) = recorder();
        let other = addr(9, 2, 3);
        ps.update(0, &other, None, PeerState::Down, None);
        assert_eq!(*seen.lock().unwrap(), vec![(other, PeerState::Down)]);
    }

    #[test]
    fn an_engine_is_up_again_only_when_every_pair_is() {
        let (ps, seen) = recorder();
        let (a, b) = (addr(5, 0, 1), addr(5, 1, 2));
        ps.update(0, &a, None, PeerState::Up, None);
        ps.update(0, &b, Some(&a), PeerState::Down, None);
        ps.update(0, &b, Some(&a), PeerState::Connecting, None);
        ps.update(0, &b, Some(&a), PeerState::Up, None);
        let got: Vec<PeerState> = seen.lock().unwrap().iter().map(|x| x.1).collect();
        assert_eq!(got, vec![PeerState::Up, PeerState::Down, PeerState::Up]);
        // Other engines are apart.
        ps.update(0, &addr(6, 0, 9), None, PeerState::Up, None);
        assert_eq!(seen.lock().unwrap().len(), 4);
    }
}
