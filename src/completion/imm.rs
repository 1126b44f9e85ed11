//! ImmCounter: counts remote writes per 32-bit immediate, independent of
//! arrival order and of how a transfer was sharded over domains.
//!
//! Immediates that arrive before an expectation is set are kept and count
//! towards it. When the count reaches the expectation, `count` is subtracted
//! (the surplus stays for the next expectation) and the expectation fires
//! once and is removed. An expectation that fails (deadline, cancel) takes
//! every immediate counted so far with it, so a partial transfer can never
//! complete a later expectation of the same value; immediates that arrive
//! after it ended count afresh (`read`/`reset` let the application look).
use super::notify::{Notifier, OnDone};
use crate::bail;
use crate::error::{Error, Result};
use crate::fasthash::FastMap;
use crate::metrics::{GroupStats, IMM_TO_EXPECTATION};
use std::sync::Arc;
use std::time::Instant;

/// An armed expectation: how many immediates it waits for, whom to tell,
/// and its request id (for cancel and its deadline).
struct Expectation {
    want: u64,
    done: OnDone,
    id: u64,
}

struct Entry {
    arrived: u64,
    expect: Option<Expectation>,
    /// When the first immediate counted towards the next expectation came
    /// (the histogram first immediate → expectation met).
    first: Option<Instant>,
}

/// A word that mirrors an immediate's arrivals (`ImmCounter::mirror`).
pub struct MirrorWord(pub *const std::sync::atomic::AtomicU64);
// SAFETY: the application keeps the word valid until the mirror is stopped
// (API contract); only the worker stores to it.
unsafe impl Send for MirrorWord {}

#[derive(Default)]
pub struct ImmCounter {
    map: FastMap<u32, Entry>,
    armed: usize,
    /// Per mirrored immediate: the word and the value last stored to it.
    mirrors: FastMap<u32, (MirrorWord, u64)>,
    /// Immediates received, expectations met and failed (metrics).
    stats: Arc<GroupStats>,
}

impl ImmCounter {
    /// Counting into `stats` (its group's metrics).
    pub fn new(stats: Arc<GroupStats>) -> ImmCounter {
        ImmCounter { stats, ..Default::default() }
    }

    /// Arms an expectation of `count` immediates `imm`.
    pub fn expect(&mut self, imm: u32, count: u32, done: OnDone, id: u64, n: &Notifier) -> Result<()> {
        if count == 0 {
            bail!(InvalidArgument, "expect_imm_count: count must be at least 1");
        }
        let e = self.map.entry(imm).or_insert(Entry { arrived: 0, expect: None, first: None });
        if e.expect.is_some() {
            bail!(AlreadyExists, "immediate {imm:#x} already has an expectation; wait for it to fire");
        }
        e.expect = Some(Expectation { want: count as u64, done, id });
        self.armed += 1;
        self.check(imm, n);
        Ok(())
    }

    /// Counts one arrived immediate.
    pub fn arrived(&mut self, imm: u32, n: &Notifier, count: u64) {
        self.stats.imm_received.add(count);
        let e = self.map.entry(imm).or_insert(Entry { arrived: 0, expect: None, first: None });
        if e.arrived == 0 {
            e.first = Some(Instant::now());
        }
        e.arrived += count;
        if !self.mirrors.is_empty() {
            if let Some((w, v)) = self.mirrors.get_mut(&imm) {
                *v += count;
                // SAFETY: valid until the mirror is stopped (MirrorWord).
                unsafe { &*w.0 }.store(*v, std::sync::atomic::Ordering::Release);
            }
        }
        self.check(imm, n);
    }

    fn check(&mut self, imm: u32, n: &Notifier) {
        let Some(e) = self.map.get_mut(&imm) else {
            return;
        };
        if e.expect.as_ref().is_some_and(|x| e.arrived >= x.want) {
            let x = e.expect.take().unwrap();
            e.arrived -= x.want;
            self.armed -= 1;
            self.stats.expectations_met.add(1);
            if let Some(t) = e.first.take() {
                let now = Instant::now();
                self.stats.hists[IMM_TO_EXPECTATION].record_time(now - t);
                e.first = (e.arrived > 0).then_some(now);
            }
            n.fire(x.done, Ok(()));
        }
        if e.arrived == 0 && e.expect.is_none() {
            self.map.remove(&imm);
        }
    }

    /// Expectations armed and not yet fired.
    pub fn armed(&self) -> usize {
        self.armed
    }

    /// Whether someone waits on arrivals (an armed expectation or a mirror):
    /// the worker then polls without napping, so an arrival is seen at once.
    pub fn awaited(&self) -> bool {
        self.armed > 0 || !self.mirrors.is_empty()
    }

    /// Ends the expectation on `imm` with `err` if it is still request `id`
    /// (its deadline passed, or it was canceled), discarding the immediates
    /// counted towards it.
    pub fn expire(&mut self, imm: u32, id: u64, err: Error, n: &Notifier) -> bool {
        let Some(e) = self.map.get_mut(&imm) else {
            return false;
        };
        if e.expect.as_ref().is_none_or(|x| x.id != id) {
            return false;
        }
        let x = e.expect.take().unwrap();
        self.map.remove(&imm);
        self.armed -= 1;
        self.stats.expectations_failed.add(1);
        n.errors.record(id, &err);
        n.fire(x.done, Err(err));
        true
    }

    /// The immediates `imm` counted and not yet taken by an expectation;
    /// with `reset`, the count starts again from 0 (an armed expectation
    /// stays armed and counts from there).
    pub fn read(&mut self, imm: u32, reset: bool) -> u64 {
        let Some(e) = self.map.get_mut(&imm) else {
            return 0;
        };
        let n = e.arrived;
        if reset {
            e.arrived = 0;
            if e.expect.is_none() {
                self.map.remove(&imm);
            }
        }
        n
    }

    /// Mirrors immediate `imm` into `word` (`None`: stops): the word is set
    /// at once to the count `read` would return, and grows by one, with a
    /// release store, on every later arrival of `imm`, whatever expectations
    /// take or `reset` clears (a kernel waits for "at least n"). A new word
    /// replaces the previous one.
    pub fn mirror(&mut self, imm: u32, word: Option<MirrorWord>) {
        match word {
            None => {
                self.mirrors.remove(&imm);
            }
            Some(w) => {
                let v = self.map.get(&imm).map_or(0, |e| e.arrived);
                // SAFETY: as in `arrived`.
                unsafe { &*w.0 }.store(v, std::sync::atomic::Ordering::Release);
                self.mirrors.insert(imm, (w, v));
            }
        }
    }

    /// Whether the expectation on `imm` is request `id` and still armed.
    pub fn is_armed(&self, imm: u32, id: u64) -> bool {
        self.map.get(&imm).and_then(|e| e.expect.as_ref()).is_some_and(|x| x.id == id)
    }

    /// The immediate whose expectation is request `id`, if one is armed.
    pub fn find(&self, id: u64) -> Option<u32> {
        self.map.iter().find(|(_, e)| e.expect.as_ref().is_some_and(|x| x.id == id)).map(|(imm, _)| *imm)
    }

    /// Ends every armed expectation with `err` (shutdown); mirrors stop.
    pub fn fail_all(&mut self, err: &Error, n: &Notifier) {
        self.armed = 0;
        self.mirrors.clear();
        for (_, e) in self.map.drain() {
            if let Some(x) = e.expect {
                self.stats.expectations_failed.add(1);
                n.errors.record(x.id, err);
                n.fire(x.done, Err(err.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::notify::spawn_callback_thread;
    use crate::error::Status;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn flag() -> (Arc<AtomicU32>, OnDone) {
        let f = Arc::new(AtomicU32::new(0));
        (f.clone(), OnDone::Flag(f))
    }

    fn ended(f: &AtomicU32) -> Option<u32> {
        let v = f.load(Ordering::Acquire);
        (v != 0).then_some(v & 0xffff)
    }

    #[test]
    fn early_arrivals_count_and_the_surplus_stays() {
        let (n, _t) = spawn_callback_thread(Vec::new()).unwrap();
        let mut c = ImmCounter::default();
        for _ in 0..3 {
            c.arrived(7, &n, 1);
        }
        let (f, done) = flag();
        c.expect(7, 2, done, 1, &n).unwrap();
        assert_eq!(ended(&f), Some(Status::Ok as u32));
        assert_eq!((c.read(7, false), c.armed()), (1, 0));
        let (f, done) = flag();
        c.expect(7, 2, done, 2, &n).unwrap();
        assert_eq!(ended(&f), None);
        c.arrived(7, &n, 1);
        assert_eq!(ended(&f), Some(Status::Ok as u32));
        assert_eq!(c.read(7, false), 0);
        assert!(c.map.is_empty(), "a settled immediate leaves no entry behind");
    }

    #[test]
    fn a_mirror_counts_every_arrival_whatever_expectations_take() {
        use std::sync::atomic::AtomicU64;
        let (n, _t) = spawn_callback_thread(Vec::new()).unwrap();
        let mut c = ImmCounter::default();
        c.arrived(5, &n, 1);
        c.arrived(5, &n, 1);
        let (w, other) = (AtomicU64::new(99), AtomicU64::new(0));
        c.mirror(5, Some(MirrorWord(&w)));
        assert_eq!(w.load(Ordering::Acquire), 2, "starts at the count not yet taken");
        let (_, done) = flag();
        c.expect(5, 3, done, 1, &n).unwrap();
        c.arrived(5, &n, 1);
        c.arrived(6, &n, 1);
        assert_eq!(w.load(Ordering::Acquire), 3, "the expectation took 3; the mirror does not go down");
        c.read(5, true);
        c.arrived(5, &n, 1);
        assert_eq!(w.load(Ordering::Acquire), 4);
        c.mirror(5, Some(MirrorWord(&other)));
        c.arrived(5, &n, 1);
        assert_eq!((w.load(Ordering::Acquire), other.load(Ordering::Acquire)), (4, 2), "replaced: 1 counted + 1");
        c.mirror(5, None);
        c.arrived(5, &n, 1);
        assert_eq!(other.load(Ordering::Acquire), 2, "stopped");
    }

    #[test]
    fn one_expectation_per_value_and_never_zero() {
        let (n, _t) = spawn_callback_thread(Vec::new()).unwrap();
        let mut c = ImmCounter::default();
        c.expect(1, 1, OnDone::Nothing, 1, &n).unwrap();
        assert_eq!(c.expect(1, 1, OnDone::Nothing, 2, &n).unwrap_err().status, Status::AlreadyExists);
        assert_eq!(c.expect(2, 0, OnDone::Nothing, 3, &n).unwrap_err().status, Status::InvalidArgument);
        assert_eq!(c.armed(), 1);
    }

    #[test]
    fn a_failed_expectation_takes_its_count_with_it() {
        let (n, _t) = spawn_callback_thread(Vec::new()).unwrap();
        let mut c = ImmCounter::default();
        let (f, done) = flag();
        c.expect(9, 5, done, 11, &n).unwrap();
        for _ in 0..3 {
            c.arrived(9, &n, 1);
        }
        assert_eq!(c.read(9, false), 3);
        assert!(!c.expire(9, 12, Error::new(Status::TimedOut, "x"), &n), "another request's id");
        assert!(c.expire(9, 11, Error::new(Status::TimedOut, "late"), &n));
        assert_eq!(ended(&f), Some(Status::TimedOut as u32));
        assert_eq!((c.read(9, false), c.armed()), (0, 0));
        // A later expectation is not completed by what the failed one had.
        let (f, done) = flag();
        c.expect(9, 2, done, 13, &n).unwrap();
        assert_eq!(ended(&f), None);
        assert!(!c.expire(9, 11, Error::new(Status::TimedOut, "x"), &n), "an ended request expires once");
        // Stragglers count afresh.
        c.arrived(9, &n, 1);
        c.arrived(9, &n, 1);
        assert_eq!(ended(&f), Some(Status::Ok as u32));
    }

    #[test]
    fn reset_keeps_an_armed_expectation() {
        let (n, _t) = spawn_callback_thread(Vec::new()).unwrap();
        let mut c = ImmCounter::default();
        let (f, done) = flag();
        c.expect(4, 3, done, 1, &n).unwrap();
        c.arrived(4, &n, 1);
        c.arrived(4, &n, 1);
        assert_eq!(c.read(4, true), 2);
        assert_eq!(c.read(4, false), 0);
        assert!(c.is_armed(4, 1) && c.find(1) == Some(4));
        for _ in 0..2 {
            c.arrived(4, &n, 1);
        }
        assert_eq!(ended(&f), None, "counts from 0 after the reset");
        c.arrived(4, &n, 1);
        assert_eq!(ended(&f), Some(Status::Ok as u32));
        assert_eq!(c.read(5, true), 0, "an unknown value reads 0");
    }

    #[test]
    fn shutdown_ends_every_armed_expectation() {
        let (n, _t) = spawn_callback_thread(Vec::new()).unwrap();
        let mut c = ImmCounter::default();
        let (f1, d1) = flag();
        let (f2, d2) = flag();
        c.expect(1, 1, d1, 1, &n).unwrap();
        c.expect(2, 4, d2, 2, &n).unwrap();
        c.arrived(3, &n, 1);
        c.fail_all(&Error::new(Status::Shutdown, "bye"), &n);
        assert_eq!((ended(&f1), ended(&f2)), (Some(Status::Shutdown as u32), Some(Status::Shutdown as u32)));
        assert_eq!((c.armed(), c.read(3, false)), (0, 0));
    }
}
