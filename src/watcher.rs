//! Watchers: a 64-bit word that a GPU kernel (or any thread) writes, and a
//! callback `cb(old, new)` that the engine's watcher thread calls when it
//! sees the word change (the paper's UVA watcher: a kernel signals the CPU
//! with a store, even from inside a CUDA graph, and the callback submits the
//! transfer that the kernel's output is ready for).
//!
//! One thread per engine polls every watcher of that engine, in creation
//! order, starting with the first watcher. It sees values, not writes: if
//! the word changes twice between two looks, one callback reports the
//! latest value (`old` is the value the previous callback reported), so
//! values may be skipped, but a callback never reports an older value after
//! a newer one, and `old != new` always.
//!
//! The thread spins while watchers change and for a while after the last
//! change, then looks every `nap`. How long (`Spin`): by default it adapts
//! (`Spin::auto`): where the process may use 5 CPUs or more,
//! `Spin::Auto`, the `SpinWindow` below: four times the recent gap
//! between changes, from 50 µs to 10 ms, yielding the CPU on every look so
//! that a thread that shares its core runs; on fewer CPUs it never spins
//! (its spin would take the CPU the engine's workers need); or a fixed
//! time; or always (`Duration::MAX`, the lowest latency, one core).
use crate::error::Result;
use crate::gpu::{Mapped, MemoryKind};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// Called with the previous and the new value of a watched word.
pub type WatchCallback = Box<dyn FnMut(u64, u64) + Send>;

struct Entry {
    mem: Arc<Mapped>,
    last: u64,
    dead: Arc<AtomicBool>,
    cb: WatchCallback,
}

impl Entry {
    fn word(&self) -> &AtomicU64 {
        // SAFETY: the memory is at least 8 bytes, 64-byte aligned, and lives as long as `mem`.
        unsafe { &*(self.mem.host() as *const AtomicU64) }
    }
}

#[derive(Default)]
struct Shared {
    /// Every live watcher; the thread holds this lock during a pass.
    list: Mutex<Vec<Entry>>,
    /// Watchers created since the last pass (so that creating one from a
    /// callback, which runs inside a pass, cannot deadlock).
    added: Mutex<Vec<Entry>>,
    stop: AtomicBool,
    thread: Mutex<Option<(ThreadId, std::thread::Thread)>>,
    /// Events and the store → callback histogram (metrics/mod.rs).
    stats: crate::metrics::WatcherStats,
}

/// The watcher thread of an engine, started with its first watcher.
pub struct Watchers {
    shared: Arc<Shared>,
    handle: Mutex<Option<JoinHandle<()>>>,
    spin: Spin,
    nap: Duration,
    /// The CPUs of its thread (empty: anywhere).
    cpus: Vec<u32>,
}

/// A watched word. Dropping it (or `fabriclib_watcher_destroy`) stops the
/// callbacks: none runs after the drop returns, except the one the drop is
/// made from.
pub struct Watcher {
    mem: Arc<Mapped>,
    dead: Arc<AtomicBool>,
    shared: Arc<Shared>,
}

impl Watchers {
    /// Watchers whose thread (started with the first) polls `spin`, then
    /// naps `nap`, on `cpus` if any.
    pub fn new(spin: Spin, nap: Duration, cpus: Vec<u32>) -> Watchers {
        let nap = nap.max(Duration::from_micros(1));
        Watchers { shared: Default::default(), handle: Mutex::new(None), spin, nap, cpus }
    }

    /// What the watcher thread counted (metrics).
    pub fn stats(&self) -> &crate::metrics::WatcherStats {
        &self.shared.stats
    }

    /// Allocates a word of `kind` memory (zero at first) and watches it.
    pub fn watch(&self, kind: MemoryKind, device: i32, cb: WatchCallback) -> Result<Watcher> {
        if self.shared.stop.load(Ordering::Acquire) {
            return Err(crate::completion::notify::shutdown_error());
        }
        let mem = Arc::new(Mapped::new(kind, device, 64)?);
        let dead = Arc::new(AtomicBool::new(false));
        let entry = Entry { mem: mem.clone(), last: 0, dead: dead.clone(), cb };
        self.shared.added.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        self.start()?;
        if let Some((_, t)) = self.shared.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            t.unpark();
        }
        Ok(Watcher { mem, dead, shared: self.shared.clone() })
    }

    fn start(&self) -> Result<()> {
        let mut h = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        if self.shared.stop.load(Ordering::Acquire) {
            self.shared.added.lock().unwrap_or_else(|e| e.into_inner()).clear();
            return Err(crate::completion::notify::shutdown_error());
        }
        if h.is_some() {
            return Ok(());
        }
        let (shared, spin, nap, cpus) = (self.shared.clone(), self.spin, self.nap, self.cpus.clone());
        let body = move || {
            // Checked when the engine was made (`pin::check`).
            let _ = crate::pin::pin_current_thread(&cpus);
            run(&shared, spin, nap)
        };
        let t = std::thread::Builder::new().name("fabriclib-watch".into()).spawn(body).map_err(|e| {
            crate::error::Error::new(crate::Status::Provider, format!("cannot start the watcher thread: {e}"))
        })?;
        *self.shared.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some((t.thread().id(), t.thread().clone()));
        *h = Some(t);
        Ok(())
    }

    /// Stops the thread (engine destroy). Watchers still held are inert.
    pub fn stop(&self) {
        let t = {
            let mut h = self.handle.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.stop.store(true, Ordering::Release);
            h.take()
        };
        match t {
            // From one of its own callbacks: the thread ends after this pass.
            Some(t) if t.thread().id() == std::thread::current().id() => {}
            Some(t) => {
                t.thread().unpark();
                let _ = t.join();
            }
            // Never started: drop what was queued.
            None => self.shared.added.lock().unwrap_or_else(|e| e.into_inner()).clear(),
        }
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long the watcher thread spins after a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spin {
    /// Adapts to the gaps between changes (`SpinWindow`), yielding as it spins.
    Auto,
    /// This long (`Duration::MAX`: always).
    Fixed(Duration),
}

impl Spin {
    /// Fewest CPUs a process may use for the default (`WATCHER_SPIN_AUTO`)
    /// to spin at all.
    pub const AUTO_MIN_CPUS: usize = 5;

    /// The default for a process that may use `cpus` CPUs: `Auto` where
    /// there is a core to spare, never spin (`Fixed(0)`: look every `nap`)
    /// where there is not. Measured with `fabriclib-bench layers` (a layer
    /// loop whose watcher submits each layer's write; docs/benchmarks.md):
    /// on 16 CPUs spinning lands a layer 3-6× sooner than napping (shm p50
    /// 12–32 µs against 69–89 µs); on 2 CPUs the spinning watcher takes the
    /// workers' CPU and napping lands it sooner (p50 0.16–1.4 ms against
    /// 1.3–2.3 ms adaptive and 2.8–4.9 ms for the old fixed 10 ms).
    pub fn auto(cpus: usize) -> Spin {
        if cpus >= Self::AUTO_MIN_CPUS { Spin::Auto } else { Spin::Fixed(Duration::ZERO) }
    }
}

/// `Spin::Auto`'s window: four times the recent gap between changes (an
/// average that follows the last few gaps), within 50 µs..10 ms; a gap over
/// 10 ms starts a new burst and does not count. Through a loop of changes
/// 0.2 ms apart it spins 0.8 ms after each, so it stays awake through the
/// loop and stops soon after it — not 10 ms later.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpinWindow {
    gap: Option<Duration>,
}

impl SpinWindow {
    const MIN: Duration = Duration::from_micros(50);
    const MAX: Duration = Duration::from_millis(10);
    /// Before any gap is known.
    const FIRST: Duration = Duration::from_millis(1);

    /// A change came `gap` after the previous one.
    pub fn changed(&mut self, gap: Duration) {
        if gap > Self::MAX {
            return;
        }
        self.gap = Some(match self.gap {
            Some(g) => (g * 3 + gap) / 4,
            None => gap,
        });
    }

    /// How long to spin after a change.
    pub fn window(&self) -> Duration {
        self.gap.map_or(Self::FIRST, |g| (g * 4).clamp(Self::MIN, Self::MAX))
    }
}

fn run(shared: &Shared, spin: Spin, nap: Duration) {
    let mut last_change = Instant::now();
    let mut auto = SpinWindow::default();
    // A change seen in this pass was stored after the previous pass began
    // (its look saw the old value): the histogram's bound.
    let mut prev_start = Instant::now();
    while !shared.stop.load(Ordering::Acquire) {
        let start = Instant::now();
        let mut changed = false;
        let empty;
        {
            let mut list = shared.list.lock().unwrap_or_else(|e| e.into_inner());
            list.append(&mut shared.added.lock().unwrap_or_else(|e| e.into_inner()));
            for e in list.iter_mut() {
                if e.dead.load(Ordering::Acquire) {
                    continue;
                }
                let v = e.word().load(Ordering::Acquire);
                if v != e.last {
                    let old = std::mem::replace(&mut e.last, v);
                    changed = true;
                    shared.stats.events.add(1);
                    shared.stats.store_to_callback.record_time(prev_start.elapsed());
                    if catch_unwind(AssertUnwindSafe(|| (e.cb)(old, v))).is_err() {
                        crate::log!(Warn, "a watcher callback panicked; the watcher goes on");
                    }
                }
            }
            list.retain(|e| !e.dead.load(Ordering::Acquire));
            empty = list.is_empty();
        }
        prev_start = start;
        let now = Instant::now();
        let window = match spin {
            Spin::Auto => auto.window(),
            Spin::Fixed(d) => d,
        };
        if changed {
            auto.changed(now.duration_since(last_change));
            last_change = now;
        } else if empty {
            std::thread::park_timeout(Duration::from_millis(100));
        } else if now.duration_since(last_change) >= window {
            std::thread::park_timeout(nap);
        } else if spin == Spin::Auto {
            // Another thread on this core (the one making the changes) runs first.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    // The callbacks (and what they captured) go with the thread.
    shared.list.lock().unwrap_or_else(|e| e.into_inner()).clear();
    shared.added.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

impl Watcher {
    /// The word, for the CPU (a thread may store to it too).
    pub fn host_ptr(&self) -> *mut u64 {
        self.mem.host().cast()
    }

    /// The word's address for a kernel; `None` if it is plain host memory.
    pub fn device_ptr(&self) -> Option<u64> {
        self.mem.device()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.dead.store(true, Ordering::Release);
        let on_thread = self.shared.thread.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(id, _)| *id)
            == Some(std::thread::current().id());
        if !on_thread {
            // Waits for a pass in progress (a callback of it may be running).
            let mut list = self.shared.list.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|e| !Arc::ptr_eq(&e.dead, &self.dead));
            drop(list);
            let mut added = self.shared.added.lock().unwrap_or_else(|e| e.into_inner());
            added.retain(|e| !Arc::ptr_eq(&e.dead, &self.dead));
        }
        // On the watcher thread (from a callback): the pass removes it when it ends.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn the_default_spins_only_with_a_core_to_spare() {
        assert_eq!(Spin::auto(2), Spin::Fixed(Duration::ZERO));
        assert_eq!(Spin::auto(4), Spin::Fixed(Duration::ZERO));
        assert_eq!(Spin::auto(5), Spin::Auto);
        assert_eq!(Spin::auto(16), Spin::Auto);
    }

    #[test]
    fn the_auto_window_follows_the_gaps_between_changes() {
        let us = Duration::from_micros;
        let mut w = SpinWindow::default();
        assert_eq!(w.window(), us(1000), "before any gap");
        // A layer loop: changes 200 µs apart.
        for _ in 0..20 {
            w.changed(us(200));
        }
        assert_eq!(w.window(), us(800));
        // A quiet spell between loops starts a new burst: it does not count.
        w.changed(Duration::from_secs(1));
        assert_eq!(w.window(), us(800));
        // Bounds: 50 µs..10 ms.
        for _ in 0..50 {
            w.changed(us(1));
        }
        assert_eq!(w.window(), us(50));
        for _ in 0..50 {
            w.changed(us(9000));
        }
        assert_eq!(w.window(), Duration::from_millis(10));
    }

    fn watchers() -> Watchers {
        // The engine's default (capi_watchers runs a fixed spin).
        Watchers::new(Spin::Auto, Duration::from_micros(50), Vec::new())
    }

    #[test]
    fn every_change_is_seen_in_order_with_its_old_value() {
        let w = watchers();
        let (tx, rx) = channel();
        let h = w.watch(MemoryKind::Host, 0, Box::new(move |old, new| tx.send((old, new)).unwrap())).unwrap();
        assert_eq!(h.device_ptr(), None);
        // SAFETY: the watcher's word, written as an atomic.
        let word = unsafe { &*(h.host_ptr() as *const AtomicU64) };
        let mut seen = Vec::new();
        for v in 1..=200u64 {
            word.store(v, Ordering::Release);
            // One at a time: wait until the thread has reported v.
            loop {
                let (old, new) = rx.recv_timeout(Duration::from_secs(5)).expect("a callback");
                seen.push((old, new));
                if new == v {
                    break;
                }
            }
        }
        let want: Vec<(u64, u64)> = (1..=200).map(|v| (v - 1, v)).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn values_may_be_skipped_but_never_reordered() {
        let w = watchers();
        let (tx, rx) = channel();
        let h = w.watch(MemoryKind::Host, 0, Box::new(move |old, new| tx.send((old, new)).unwrap())).unwrap();
        // SAFETY: as above.
        let word = unsafe { &*(h.host_ptr() as *const AtomicU64) };
        for v in 1..=100_000u64 {
            word.store(v, Ordering::Release);
        }
        let mut prev = 0;
        loop {
            let (old, new) = rx.recv_timeout(Duration::from_secs(5)).expect("callbacks up to the last value");
            assert_eq!(old, prev, "old is the previous callback's new");
            assert!(new > old, "{old} -> {new}");
            prev = new;
            if new == 100_000 {
                break;
            }
        }
    }

    #[test]
    fn no_callback_after_drop_and_drop_from_a_callback_is_allowed() {
        let w = watchers();
        let (tx, rx) = channel::<u64>();
        let slot: Arc<Mutex<Option<Watcher>>> = Arc::default();
        let s2 = slot.clone();
        let h = w
            .watch(
                MemoryKind::Host,
                0,
                Box::new(move |_, new| {
                    tx.send(new).unwrap();
                    if new == 2 {
                        drop(s2.lock().unwrap().take()); // destroys itself from its own callback
                    }
                }),
            )
            .unwrap();
        let keep = h.mem.clone();
        // SAFETY: as above; the memory stays alive while `keep` is held.
        let word = unsafe { &*(keep.host() as *const AtomicU64) };
        *slot.lock().unwrap() = Some(h);
        word.store(1, Ordering::Release);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        word.store(2, Ordering::Release);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(2));
        word.store(3, Ordering::Release);
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "a destroyed watcher called back");

        // Dropped from another thread: nothing after the drop returns.
        let (tx, rx) = channel::<u64>();
        let h = w
            .watch(
                MemoryKind::Host,
                0,
                Box::new(move |_, new| {
                    let _ = tx.send(new);
                }),
            )
            .unwrap();
        let keep = h.mem.clone();
        // SAFETY: as above.
        let word = unsafe { &*(keep.host() as *const AtomicU64) };
        word.store(5, Ordering::Release);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(5));
        drop(h);
        word.store(6, Ordering::Release);
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    }

    #[test]
    fn a_callback_may_create_watchers_and_many_are_polled() {
        let w = Arc::new(watchers());
        let (tx, rx) = channel::<(usize, u64)>();
        let mut hs = Vec::new();
        for i in 0..8 {
            let tx = tx.clone();
            hs.push(w.watch(MemoryKind::Host, 0, Box::new(move |_, new| tx.send((i, new)).unwrap())).unwrap());
        }
        let (w2, made) = (w.clone(), Arc::new(Mutex::new(Vec::new())));
        let m2 = made.clone();
        let tx2 = tx.clone();
        let creator = w
            .watch(
                MemoryKind::Host,
                0,
                Box::new(move |_, _| {
                    let tx = tx2.clone();
                    m2.lock().unwrap().push(w2.watch(
                        MemoryKind::Host,
                        0,
                        Box::new(move |_, n| {
                            let _ = tx.send((99, n));
                        }),
                    ));
                }),
            )
            .unwrap();
        for (i, h) in hs.iter().enumerate() {
            // SAFETY: as above.
            unsafe { &*(h.host_ptr() as *const AtomicU64) }.store(i as u64 + 10, Ordering::Release);
        }
        let mut got: Vec<(usize, u64)> = (0..8).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..8).map(|i| (i, i as u64 + 10)).collect::<Vec<_>>());
        // SAFETY: as above.
        unsafe { &*(creator.host_ptr() as *const AtomicU64) }.store(1, Ordering::Release);
        let made_one = loop {
            if let Some(r) = made.lock().unwrap().pop() {
                break r.unwrap();
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        // SAFETY: as above.
        unsafe { &*(made_one.host_ptr() as *const AtomicU64) }.store(42, Ordering::Release);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok((99, 42)));
        w.stop();
        assert!(w.watch(MemoryKind::Host, 0, Box::new(|_, _| {})).is_err(), "no watchers after stop");
    }
}
