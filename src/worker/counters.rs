//! Counters per NIC and per peer: work requests and bytes of the
//! application's requests posted and completed, and work requests that
//! failed (`TransferEngine::counters`, `fabriclib_engine_counters`). The
//! worker keeps them in plain integers, by domain and by the domain's id for
//! the peer (dense: an `FI_AV_TABLE` index), and answers a snapshot through
//! a control command. The engine's own messages (handshakes, keepalives,
//! acknowledgments) are not counted.
use crate::domain::PeerId;
use crate::wire::NetAddr;

/// What one NIC did, in total or for one peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub wrs_posted: u64,
    pub bytes_posted: u64,
    pub wrs_completed: u64,
    pub bytes_completed: u64,
    /// Work requests that completed with an error, or were given up with
    /// their peer.
    pub errors: u64,
}

impl Count {
    fn add(&mut self, o: &Count) {
        self.wrs_posted += o.wrs_posted;
        self.bytes_posted += o.bytes_posted;
        self.wrs_completed += o.wrs_completed;
        self.bytes_completed += o.bytes_completed;
        self.errors += o.errors;
    }
}

/// A snapshot of an engine's counters, one entry per domain.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub nics: Vec<NicCount>,
}

/// One domain's NIC: its totals and the peers it has worked for.
#[derive(Clone, Debug)]
pub struct NicCount {
    /// The NIC's name (`Nic::name`).
    pub nic: String,
    pub total: Count,
    pub peers: Vec<(NetAddr, Count)>,
}

/// Peer ids from this one up are counted in the NIC's total only (none
/// are, with `FI_AV_TABLE` and the null provider).
const MAX_PEER_ID: PeerId = 1 << 16;

/// The worker's counters: `[domain][peer id]`, and per domain what no peer
/// id names.
pub(super) struct Tally {
    per_peer: Vec<Vec<Count>>,
    other: Vec<Count>,
}

impl Tally {
    pub(super) fn new(domains: usize) -> Tally {
        Tally { per_peer: vec![Vec::new(); domains], other: vec![Count::default(); domains] }
    }

    fn at(&mut self, d: usize, peer: PeerId) -> &mut Count {
        if peer >= MAX_PEER_ID {
            return &mut self.other[d];
        }
        let v = &mut self.per_peer[d];
        if v.len() <= peer as usize {
            v.resize(peer as usize + 1, Count::default());
        }
        &mut v[peer as usize]
    }

    pub(super) fn posted(&mut self, d: usize, peer: PeerId, bytes: usize) {
        let c = self.at(d, peer);
        c.wrs_posted += 1;
        c.bytes_posted += bytes as u64;
    }

    pub(super) fn completed(&mut self, d: usize, peer: PeerId, bytes: u64) {
        let c = self.at(d, peer);
        c.wrs_completed += 1;
        c.bytes_completed += bytes;
    }

    pub(super) fn failed(&mut self, d: usize, peer: PeerId) {
        self.at(d, peer).errors += 1;
    }

    /// The snapshot: `nics[d]` names domain `d`'s NIC; `addr(d, id)` the
    /// peer domain `d` knows as `id` (counts of an id it does not know stay
    /// in the total only).
    pub(super) fn snapshot(&self, nics: &[String], addr: impl Fn(usize, PeerId) -> Option<NetAddr>) -> Counters {
        let nics = (0..self.per_peer.len())
            .map(|d| {
                let mut total = self.other[d];
                let mut peers = Vec::new();
                for (id, c) in self.per_peer[d].iter().enumerate().filter(|(_, c)| **c != Count::default()) {
                    total.add(c);
                    if let Some(a) = addr(d, id as PeerId) {
                        peers.push((a, *c));
                    }
                }
                NicCount { nic: nics.get(d).cloned().unwrap_or_default(), total, peers }
            })
            .collect();
        Counters { nics }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_nic_and_per_peer() {
        let mut t = Tally::new(2);
        t.posted(0, 3, 100);
        t.posted(0, 3, 50);
        t.completed(0, 3, 100);
        t.posted(1, 0, 7);
        t.failed(1, 0);
        t.failed(1, PeerId::MAX); // no peer id: the total only
        let who = |_: usize, id: PeerId| Some(NetAddr { epoch: id + 1, domains: vec![] });
        let s = t.snapshot(&["a".into(), "b".into()], who);
        let c0 = Count { wrs_posted: 2, bytes_posted: 150, wrs_completed: 1, bytes_completed: 100, errors: 0 };
        assert_eq!((s.nics[0].nic.as_str(), s.nics[0].total), ("a", c0));
        assert_eq!(s.nics[0].peers.len(), 1);
        assert_eq!((s.nics[0].peers[0].0.epoch, s.nics[0].peers[0].1), (4, c0));
        assert_eq!(s.nics[1].total, Count { wrs_posted: 1, bytes_posted: 7, errors: 2, ..Default::default() });
        assert_eq!(s.nics[1].peers[0].1.errors, 1);
    }
}
