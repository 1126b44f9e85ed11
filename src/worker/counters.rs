//! Counters per NIC and per peer: work requests and bytes of the
//! application's requests posted and completed, work requests that failed
//! (by status) and those in flight (`TransferEngine::counters`,
//! `fabriclib_engine_counters`, the metrics). The worker writes them
//! (relaxed atomics, one writer: metrics/mod.rs), by domain and by the
//! domain's id for the peer (dense: an `FI_AV_TABLE` index, in chunks made
//! as peers come); anyone reads them without stopping it. The engine's own
//! messages (handshakes, keepalives, acknowledgments) are not counted.
use crate::domain::PeerId;
use crate::metrics::{Cell, STATUSES};
use std::sync::{Arc, OnceLock};

/// What one NIC did, in total or for one peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    pub wrs_posted: u64,
    pub bytes_posted: u64,
    pub wrs_completed: u64,
    pub bytes_completed: u64,
    /// Work requests that completed with an error, or were given up with
    /// their peer.
    pub errors: u64,
    /// `errors` by status (`Status as usize`: `PeerDown`, `RemoteAccess`,
    /// `TimedOut`, `Canceled`…).
    pub errors_by_status: [u64; STATUSES],
}

impl Default for Count {
    fn default() -> Count {
        Count {
            wrs_posted: 0,
            bytes_posted: 0,
            wrs_completed: 0,
            bytes_completed: 0,
            errors: 0,
            errors_by_status: [0; STATUSES],
        }
    }
}

impl Count {
    fn add(&mut self, o: &Count) {
        self.wrs_posted += o.wrs_posted;
        self.bytes_posted += o.bytes_posted;
        self.wrs_completed += o.wrs_completed;
        self.bytes_completed += o.bytes_completed;
        self.errors += o.errors;
        for (a, b) in self.errors_by_status.iter_mut().zip(&o.errors_by_status) {
            *a += b;
        }
    }

    /// What these counts have beyond `o`'s (each field at least 0).
    pub fn saturating_sub(&self, o: &Count) -> Count {
        let errors_by_status = std::array::from_fn(|s| self.errors_by_status[s].saturating_sub(o.errors_by_status[s]));
        Count {
            wrs_posted: self.wrs_posted.saturating_sub(o.wrs_posted),
            bytes_posted: self.bytes_posted.saturating_sub(o.bytes_posted),
            wrs_completed: self.wrs_completed.saturating_sub(o.wrs_completed),
            bytes_completed: self.bytes_completed.saturating_sub(o.bytes_completed),
            errors: errors_by_status.iter().sum(),
            errors_by_status,
        }
    }

    /// Work requests posted and not yet back (completed or failed).
    pub fn wrs_in_flight(&self) -> u64 {
        self.wrs_posted.saturating_sub(self.wrs_completed + self.errors)
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
    /// Per peer: its engine group's epoch (`NetAddr::epoch`) and counts.
    pub peers: Vec<(u64, Count)>,
}

/// Peer ids from this one up are counted in the NIC's total only (none
/// are, with `FI_AV_TABLE` and the null provider).
const MAX_PEER_ID: PeerId = 1 << 16;
/// Peers per chunk of cells.
const CHUNK: usize = 256;

#[derive(Default)]
struct Cells {
    /// The epoch of the peer last counted here (0: none yet).
    epoch: Cell,
    wrs_posted: Cell,
    bytes_posted: Cell,
    wrs_completed: Cell,
    bytes_completed: Cell,
    errors: [Cell; STATUSES],
}

impl Cells {
    fn read(&self) -> Count {
        let errors_by_status = std::array::from_fn(|s| self.errors[s].get());
        Count {
            wrs_posted: self.wrs_posted.get(),
            bytes_posted: self.bytes_posted.get(),
            wrs_completed: self.wrs_completed.get(),
            bytes_completed: self.bytes_completed.get(),
            errors: errors_by_status.iter().sum(),
            errors_by_status,
        }
    }
}

/// One NIC's cells.
struct Nic {
    name: String,
    other: Cells,
    chunks: Box<[OnceLock<Box<[Cells]>>]>,
}

/// The worker's counters: `[domain][peer id]`, and per domain what no peer
/// id names. Cloned handles share the cells (the engine keeps one to read).
#[derive(Clone)]
pub struct Tally {
    nics: Arc<[Nic]>,
}

impl Tally {
    /// Cells for NICs named `nics`, in domain order.
    pub fn new(nics: &[String]) -> Tally {
        let chunks = MAX_PEER_ID as usize / CHUNK;
        Tally {
            nics: nics
                .iter()
                .map(|n| Nic {
                    name: n.clone(),
                    other: Cells::default(),
                    chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
                })
                .collect(),
        }
    }

    #[inline]
    fn at(&self, d: usize, peer: PeerId) -> &Cells {
        let nic = &self.nics[d];
        if peer >= MAX_PEER_ID {
            return &nic.other;
        }
        let (c, i) = (peer as usize / CHUNK, peer as usize % CHUNK);
        &nic.chunks[c].get_or_init(|| (0..CHUNK).map(|_| Cells::default()).collect())[i]
    }

    /// `wrs` work requests of `bytes` in all posted on domain `d` to the
    /// peer it knows as `peer`, an engine group of epoch `epoch` (0: not
    /// known here).
    #[inline]
    pub(super) fn posted_run(&self, d: usize, peer: PeerId, epoch: u64, wrs: usize, bytes: usize) {
        let c = self.at(d, peer);
        if epoch != 0 && c.epoch.get() != epoch {
            c.epoch.set(epoch);
        }
        c.wrs_posted.add(wrs as u64);
        c.bytes_posted.add(bytes as u64);
    }

    /// `wrs` work requests of `bytes` in all completed on domain `d` to `peer`
    /// (a run of them: `DoneRun`).
    #[inline]
    pub(super) fn completed(&self, d: usize, peer: PeerId, wrs: u64, bytes: u64) {
        let c = self.at(d, peer);
        c.wrs_completed.add(wrs);
        c.bytes_completed.add(bytes);
    }

    /// A work request failed (or was given up) with `status`.
    pub(super) fn failed(&self, d: usize, peer: PeerId, status: crate::error::Status) {
        self.at(d, peer).errors[(status as usize).min(STATUSES - 1)].add(1);
    }

    /// The snapshot, without stopping the worker; peers by epoch (counts
    /// of a peer id never named stay in the total only).
    pub fn snapshot(&self) -> Counters {
        let nics = self
            .nics
            .iter()
            .map(|nic| {
                let mut total = nic.other.read();
                let mut peers = Vec::new();
                for cells in nic.chunks.iter().filter_map(|c| c.get()).flat_map(|c| c.iter()) {
                    let c = cells.read();
                    if c == Count::default() {
                        continue;
                    }
                    total.add(&c);
                    match cells.epoch.get() {
                        0 => {}
                        e => match peers.iter_mut().find(|(p, _)| *p == e) {
                            Some((_, pc)) => Count::add(pc, &c),
                            None => peers.push((e, c)),
                        },
                    }
                }
                NicCount { nic: nic.name.clone(), total, peers }
            })
            .collect();
        Counters { nics }
    }
}

/// Completions of one domain and peer in a row, counted once
/// (`Tally::completed`) when the run ends: at another domain or peer, at
/// the end of a poll's completions, and before any request is reported, so
/// that a request's report never runs ahead of its counts.
#[derive(Default)]
pub(super) struct DoneRun {
    d: usize,
    peer: PeerId,
    wrs: u64,
    bytes: u64,
}

impl DoneRun {
    /// One more work request of `bytes` done on domain `d` to `peer`.
    /// Inlined into each completion's path (a few instructions; a call
    /// where the inliner chose one cost 26 per write), the flush of
    /// another run out of line.
    #[inline(always)]
    pub(super) fn add(&mut self, tally: &Tally, d: usize, peer: PeerId, bytes: u64) {
        if self.wrs != 0 && (self.d != d || self.peer != peer) {
            self.flush_other(tally);
        }
        if self.wrs == 0 {
            (self.d, self.peer) = (d, peer);
        }
        self.wrs += 1;
        self.bytes += bytes;
    }

    #[inline(never)]
    fn flush_other(&mut self, tally: &Tally) {
        self.flush(tally)
    }

    #[inline]
    pub(super) fn flush(&mut self, tally: &Tally) {
        if self.wrs != 0 {
            tally.completed(self.d, self.peer, self.wrs, self.bytes);
            (self.wrs, self.bytes) = (0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Status;

    #[test]
    fn counts_add_up_per_nic_and_per_peer() {
        let t = Tally::new(&["a".into(), "b".into()]);
        t.posted_run(0, 3, 4, 1, 100);
        t.posted_run(0, 3, 4, 2, 50); // a run of two
        t.completed(0, 3, 1, 100);
        t.posted_run(1, 0, 1, 1, 7);
        t.posted_run(1, 300, 2, 1, 9);
        t.failed(1, 0, Status::PeerDown);
        t.failed(1, PeerId::MAX, Status::TimedOut); // no peer id: the total only
        let s = t.clone().snapshot();
        let c0 =
            Count { wrs_posted: 3, bytes_posted: 150, wrs_completed: 1, bytes_completed: 100, ..Default::default() };
        assert_eq!((s.nics[0].nic.as_str(), s.nics[0].total), ("a", c0));
        assert_eq!(s.nics[0].total.wrs_in_flight(), 2);
        assert_eq!(s.nics[0].peers, vec![(4, c0)]);
        let t1 = s.nics[1].total;
        assert_eq!((t1.wrs_posted, t1.bytes_posted, t1.errors), (2, 16, 2));
        assert_eq!(
            (t1.errors_by_status[Status::PeerDown as usize], t1.errors_by_status[Status::TimedOut as usize]),
            (1, 1)
        );
        assert_eq!(s.nics[1].peers.len(), 2);
        assert_eq!(s.nics[1].peers[0].1.errors, 1);
    }

    #[test]
    fn a_run_of_completions_is_counted_once_it_ends() {
        let t = Tally::new(&["a".into(), "b".into()]);
        let done = |s: &Counters, d: usize| (s.nics[d].total.wrs_completed, s.nics[d].total.bytes_completed);
        let mut run = DoneRun::default();
        run.add(&t, 0, 3, 10);
        run.add(&t, 0, 3, 20);
        assert_eq!(done(&t.snapshot(), 0), (0, 0), "a run in progress is not counted yet");
        run.add(&t, 0, 4, 5); // another peer ends the run
        assert_eq!(done(&t.snapshot(), 0), (2, 30));
        run.add(&t, 1, 4, 7); // another domain too
        assert_eq!(done(&t.snapshot(), 0), (3, 35));
        run.flush(&t);
        run.flush(&t); // nothing left: no double count
        let s = t.snapshot();
        assert_eq!((done(&s, 0), done(&s, 1)), ((3, 35), (1, 7)));
    }
}
