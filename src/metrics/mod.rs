//! Metrics: counters and histograms that are always on and cheap. Each is
//! written by one thread only (a group's worker, or the watcher thread), as
//! a relaxed load and store of an atomic word (no locked instruction), and
//! read by anyone at any time (`TransferEngine::metrics`): a reader never
//! stops or waits for the writer. A snapshot read while the engine works
//! is a consistent count of each word, not across words.
//!
//! What is counted, and where:
//! - per NIC and per peer (`worker/counters.rs`): work requests and bytes
//!   posted and completed, errors by status, work requests in flight;
//! - per group (`GroupStats`, the worker): requests by kind and outcome,
//!   requests in flight, immediates received, expectations met and failed,
//!   and the histograms submit → first post, first post → completion,
//!   bytes and work requests per request, first immediate → expectation met;
//! - per engine (`WatcherStats`, the watcher thread): watcher events and
//!   the histogram store → callback (an upper bound: from the watcher's
//!   last look that saw the old value).
//!
//! `export.rs` writes a snapshot as JSON and as Prometheus text.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub mod export;

/// A counter with one writer: `add` is a relaxed load and store.
#[derive(Default)]
pub struct Cell(AtomicU64);

impl Cell {
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Buckets of a histogram: bucket `i` holds values in `[2^i, 2^(i+1))`
/// (bucket 0 also holds 0); the last one everything above.
pub const HIST_BUCKETS: usize = 48;

/// A log2-bucketed histogram with one writer.
pub struct Hist {
    buckets: [Cell; HIST_BUCKETS],
    sum: Cell,
}

impl Default for Hist {
    fn default() -> Hist {
        Hist { buckets: std::array::from_fn(|_| Cell::default()), sum: Cell::default() }
    }
}

impl Hist {
    #[inline]
    pub fn record(&self, v: u64) {
        let i = (63 - (v | 1).leading_zeros() as usize).min(HIST_BUCKETS - 1);
        self.buckets[i].add(1);
        self.sum.add(v);
    }

    #[inline]
    pub fn record_time(&self, d: Duration) {
        self.record(d.as_nanos().min(u64::MAX as u128) as u64)
    }

    pub fn snapshot(&self) -> HistSnap {
        HistSnap { buckets: std::array::from_fn(|i| self.buckets[i].get()), sum: self.sum.get() }
    }
}

/// A histogram as read: bucket counts (see `HIST_BUCKETS`) and the sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistSnap {
    pub buckets: [u64; HIST_BUCKETS],
    pub sum: u64,
}

impl Default for HistSnap {
    fn default() -> HistSnap {
        HistSnap { buckets: [0; HIST_BUCKETS], sum: 0 }
    }
}

impl HistSnap {
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    pub fn add(&mut self, o: &HistSnap) {
        for (a, b) in self.buckets.iter_mut().zip(&o.buckets) {
            *a += b;
        }
        self.sum += o.sum;
    }

    /// The `q` quantile (0..=1), interpolated linearly within its bucket;
    /// 0 if empty. (No libm call: `libfabriclib.so` needs libc, libgcc_s
    /// and the loader only.)
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let r = q.clamp(0.0, 1.0) * n as f64;
        let mut rank = r as u64;
        if (rank as f64) < r {
            rank += 1;
        }
        let rank = rank.max(1);
        let mut seen = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c > 0 && seen + c >= rank {
                // Half a step into the rank's share of the bucket: [lo, 2 lo).
                let within = ((rank - seen) as f64 - 0.5) / c as f64;
                let lo = if i == 0 { 1.0 } else { (1u64 << i) as f64 };
                return (lo * (1.0 + within)) as u64;
            }
            seen += c;
        }
        1 << (HIST_BUCKETS - 1)
    }
}

/// Request kinds, in the order of `GroupStats::requests` (and of the C
/// header's `FABRICLIB_REQUEST_*`).
pub const KINDS: [&str; 6] = ["single", "paged", "scatter", "barrier", "send", "connect"];
/// Room for statuses in per-status arrays (the C header's
/// `FABRICLIB_METRICS_STATUSES`); statuses are 0..20 today.
pub const STATUSES: usize = 32;

/// The histograms of a group, in the order of `GroupStats::hists`.
pub const GROUP_HISTS: [&str; 5] =
    ["submit_to_post_ns", "post_to_done_ns", "request_bytes", "request_wrs", "imm_to_expectation_ns"];

/// What a group's worker counts (one writer: that worker).
pub struct GroupStats {
    /// Requests ended, by kind (`KINDS`) and status (0: OK).
    pub requests: [[Cell; STATUSES]; KINDS.len()],
    /// Requests the worker took, by kind.
    pub started: [Cell; KINDS.len()],
    pub imm_received: Cell,
    pub expectations_met: Cell,
    pub expectations_failed: Cell,
    /// `GROUP_HISTS`.
    pub hists: [Hist; GROUP_HISTS.len()],
}

impl Default for GroupStats {
    fn default() -> GroupStats {
        GroupStats {
            requests: std::array::from_fn(|_| std::array::from_fn(|_| Cell::default())),
            started: std::array::from_fn(|_| Cell::default()),
            imm_received: Cell::default(),
            expectations_met: Cell::default(),
            expectations_failed: Cell::default(),
            hists: std::array::from_fn(|_| Hist::default()),
        }
    }
}

pub const SUBMIT_TO_POST: usize = 0;
/// The submit → first post histogram times one request in this many (those
/// whose id is a multiple of it): the clock read at submit is the one cost
/// of the metrics on the caller's thread that a busy engine would feel.
pub const SUBMIT_SAMPLE: u64 = 16;

/// What a sampled request's submit time is measured from (set by the first).
static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Nanoseconds since `EPOCH` (at least 1: 0 says "not sampled" in a `Request`).
pub fn since_epoch_ns() -> u64 {
    let e = *EPOCH.get_or_init(std::time::Instant::now);
    (e.elapsed().as_nanos() as u64).max(1)
}

/// The instant `since_epoch_ns` gave `ns` for.
pub fn at_epoch_ns(ns: u64) -> std::time::Instant {
    *EPOCH.get_or_init(std::time::Instant::now) + std::time::Duration::from_nanos(ns)
}

/// Whether request `id` is timed from its submit (`SUBMIT_SAMPLE`).
#[inline]
pub fn submit_sampled(id: u64) -> bool {
    id % SUBMIT_SAMPLE == 0
}
pub const POST_TO_DONE: usize = 1;
pub const REQUEST_BYTES: usize = 2;
pub const REQUEST_WRS: usize = 3;
pub const IMM_TO_EXPECTATION: usize = 4;

impl GroupStats {
    /// A request of kind `kind` ended with `status` (0: OK).
    #[inline]
    pub fn ended(&self, kind: usize, status: usize) {
        self.requests[kind][status.min(STATUSES - 1)].add(1);
    }

    pub fn snapshot(&self) -> GroupSnap {
        GroupSnap {
            requests: std::array::from_fn(|k| std::array::from_fn(|s| self.requests[k][s].get())),
            started: std::array::from_fn(|k| self.started[k].get()),
            imm_received: self.imm_received.get(),
            expectations_met: self.expectations_met.get(),
            expectations_failed: self.expectations_failed.get(),
            hists: std::array::from_fn(|h| self.hists[h].snapshot()),
        }
    }
}

/// A group's counters as read (`GroupStats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupSnap {
    pub requests: [[u64; STATUSES]; KINDS.len()],
    pub started: [u64; KINDS.len()],
    pub imm_received: u64,
    pub expectations_met: u64,
    pub expectations_failed: u64,
    pub hists: [HistSnap; GROUP_HISTS.len()],
}

impl GroupSnap {
    /// Adds another group's counters to these.
    pub fn add(&mut self, o: &GroupSnap) {
        for (a, b) in self.requests.iter_mut().flatten().zip(o.requests.iter().flatten()) {
            *a += b;
        }
        for (a, b) in self.started.iter_mut().zip(&o.started) {
            *a += b;
        }
        self.imm_received += o.imm_received;
        self.expectations_met += o.expectations_met;
        self.expectations_failed += o.expectations_failed;
        for (a, b) in self.hists.iter_mut().zip(&o.hists) {
            a.add(b);
        }
    }

    /// Requests ended, of every kind, with status `s`.
    pub fn ended_with(&self, s: usize) -> u64 {
        self.requests.iter().map(|k| k[s]).sum()
    }

    /// Requests taken and not yet ended.
    pub fn in_flight(&self) -> u64 {
        let ended: u64 = self.requests.iter().flatten().sum();
        self.started.iter().sum::<u64>().saturating_sub(ended)
    }
}

/// What the watcher thread counts.
#[derive(Default)]
pub struct WatcherStats {
    pub events: Cell,
    pub store_to_callback: Hist,
}

/// An engine's metrics as read (`TransferEngine::metrics`).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// Per group: its counters and its NICs' (with their peers).
    pub groups: Vec<(GroupSnap, Vec<crate::NicCount>)>,
    pub watcher_events: u64,
    pub watcher_store_to_callback_ns: HistSnap,
}

impl Metrics {
    /// Every group's counters added up.
    pub fn total(&self) -> GroupSnap {
        let mut t = GroupSnap::default();
        for (g, _) in &self.groups {
            t.add(g);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_bucket_by_powers_of_two_and_give_quantiles() {
        let h = Hist::default();
        for v in [0, 1, 3, 1000, 1000, 1000, 1000, 1000, 1000, 1_000_000] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count(), 10);
        assert_eq!((s.buckets[0], s.buckets[1], s.buckets[9], s.buckets[19]), (2, 1, 6, 1));
        assert_eq!(s.sum, 1_006_004);
        let p50 = s.quantile(0.5);
        assert!((512..1024).contains(&p50), "{p50}");
        assert!((1 << 19..1 << 20).contains(&s.quantile(0.99)), "{}", s.quantile(0.99));
        assert_eq!(HistSnap::default().quantile(0.5), 0);
        h.record(u64::MAX);
        assert_eq!(h.snapshot().buckets[HIST_BUCKETS - 1], 1);
    }

    #[test]
    fn a_group_counts_requests_by_kind_and_status() {
        let g = GroupStats::default();
        g.started[1].add(3);
        g.ended(1, 0);
        g.ended(1, 15);
        g.ended(1, 99);
        let s = g.snapshot();
        assert_eq!((s.requests[1][0], s.requests[1][15], s.requests[1][STATUSES - 1]), (1, 1, 1));
        assert_eq!((s.ended_with(0), s.in_flight()), (1, 0));
    }
}
