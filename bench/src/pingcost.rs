//! `fabriclib-bench pingcost`: what a 64 B send/recv round trip costs the
//! host, both ends driven by one thread. Two engines in manual progress
//! (and, alternating with them, two raw endpoints) live in this process;
//! the thread sends a ping from A, then drives A and B in turn until B's
//! receive callback has answered and A's has counted the answer. A round
//! trip is serial anyway (ping, answer, receipt), so this is the sum of
//! both ends' CPU work per round trip without the wake-ups between CPUs,
//! and it adds up under `valgrind --tool=callgrind` (where each function's
//! share of the engine's excess can be read).
//!
//! `--evict-kb N` writes through N KiB before every round trip (the time
//! it takes is not counted): each round trip then starts with cold caches,
//! as one does after the kernel's network stack has run between messages
//! (tcp). Under callgrind's cache simulation with a last-level cache
//! smaller than N KiB (`--cache-sim=yes --LL=4194304,16,64`, N = 8192),
//! its misses per round trip count the lines of code and data a round
//! trip touches (`evict_caches` itself left out: docs/benchmarks.md).
use crate::raw::{FabricRaw, R};
use fabriclib::domain::fabric::sys::{FI_EAGAIN, fi_cq_data_entry, fi_cq_read};
use fabriclib::{EngineConfig, IdlePolicy, OnDone, TransferEngine};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MSG: usize = 64;
const DEADLINE: Duration = Duration::from_secs(10);

pub fn run(args: &[String]) -> R<bool> {
    let (mut provider, mut iters, mut reps, mut only) = ("shm".to_string(), 20_000usize, 5usize, None::<String>);
    let mut cold = Cold::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--provider", Some(v)) => provider = v.clone(),
            ("--iters", Some(v)) => iters = crate::num(v)?,
            ("--reps", Some(v)) => reps = crate::num(v)?,
            ("--only", Some(v)) if v == "engine" || v == "raw" => only = Some(v.clone()),
            ("--evict-kb", Some(v)) => cold.buf = vec![0u8; crate::num(v)? << 10],
            _ => return Err(format!("pingcost: bad argument {a:?} (see --help)")),
        }
    }
    let bind = (provider != "shm").then_some("127.0.0.1");
    let engines = Engines::new(&provider, bind)?;
    let mut raw = Raws::new(&provider, bind)?;
    // Warm up both (greetings, first-touch of buffers).
    engines.round_trips(100, &mut cold)?;
    raw.round_trips(100, &mut cold)?;
    println!("pingcost {provider}: ns per {MSG} B round trip, both ends on this thread ({iters} per rep);");
    if !cold.buf.is_empty() {
        println!("caches evicted before every round trip: {} KiB written (not timed)", cold.buf.len() >> 10);
    }
    println!("an empty pass: ns per progress() of an engine with nothing to do, and per raw poll of an idle CQ");
    println!("{:>5} {:>10} {:>10} {:>10} {:>12} {:>10}", "rep", "engine", "raw", "excess", "empty pass", "raw poll");
    for rep in 0..reps {
        let e = if only.as_deref() != Some("raw") { engines.round_trips(iters, &mut cold)? } else { 0.0 };
        let r = if only.as_deref() != Some("engine") { raw.round_trips(iters, &mut cold)? } else { 0.0 };
        let ep = if only.as_deref() != Some("raw") { engines.empty_passes(iters) } else { 0.0 };
        let rp = if only.as_deref() != Some("engine") { raw.empty_polls(iters)? } else { 0.0 };
        println!("{:>5} {:>10.0} {:>10.0} {:>10.0} {:>12.0} {:>10.0}", rep + 1, e, r, e - r, ep, rp);
    }
    Ok(true)
}

/// `--evict-kb`: a buffer written through before each round trip, and the
/// time that took (taken out of the round trips' time).
#[derive(Default)]
struct Cold {
    buf: Vec<u8>,
    spent: Duration,
}

impl Cold {
    /// Writes a byte of every cache line of the buffer (nothing if empty).
    fn evict(&mut self) {
        if !self.buf.is_empty() {
            let t = Instant::now();
            evict_caches(&mut self.buf);
            self.spent += t.elapsed();
        }
    }
    /// Nanoseconds per round trip of `n` that took `total`, eviction left out.
    fn per_trip(&mut self, total: Duration, n: usize) -> f64 {
        let spent = std::mem::take(&mut self.spent);
        total.saturating_sub(spent).as_nanos() as f64 / n as f64
    }
}

/// Not inlined: callgrind's figures leave this function out by its name.
#[inline(never)]
fn evict_caches(buf: &mut [u8]) {
    for b in buf.iter_mut().step_by(64) {
        *b = b.wrapping_add(1);
    }
    std::hint::black_box(buf);
}

/// A pings B; B's receive callback answers from B's own thread (the one
/// driving it); A's counts.
struct Engines {
    a: Arc<TransferEngine>,
    b: Arc<TransferEngine>,
    got: Arc<AtomicU64>,
}

impl Engines {
    fn new(provider: &str, bind: Option<&str>) -> R<Engines> {
        let cfg = EngineConfig {
            provider: Some(provider.into()),
            bind_addr: bind.map(String::from),
            nic_count: 1,
            manual_progress: true,
            idle_policy: IdlePolicy::Spin,
            ..Default::default()
        };
        let a = Arc::new(TransferEngine::new(&cfg).map_err(|e| e.to_string())?);
        let b = Arc::new(TransferEngine::new(&cfg).map_err(|e| e.to_string())?);
        let got = Arc::new(AtomicU64::new(0));
        let g = got.clone();
        a.add_recv_pool_on_worker(MSG, 16, move |m| {
            if m.data.is_ok() {
                g.fetch_add(1, Ordering::Release);
            }
        })
        .map_err(|e| e.to_string())?;
        let (weak, to) = (Arc::downgrade(&b), a.address().clone());
        b.add_recv_pool_on_worker(MSG, 16, move |m| {
            if let (Ok(msg), Some(b)) = (m.data, weak.upgrade()) {
                b.submit_send(&to, msg, OnDone::Nothing).expect("pingcost: the answer was refused");
            }
        })
        .map_err(|e| e.to_string())?;
        Ok(Engines { a, b, got })
    }

    /// Mean nanoseconds per `progress()` of A with nothing to do (the
    /// pass a spinning worker repeats while it waits).
    #[inline(never)]
    fn empty_passes(&self, n: usize) -> f64 {
        let t0 = Instant::now();
        for _ in 0..n {
            self.a.progress();
        }
        t0.elapsed().as_nanos() as f64 / n as f64
    }

    /// Mean nanoseconds per round trip over `n`.
    fn round_trips(&self, n: usize, cold: &mut Cold) -> R<f64> {
        let msg = [7u8; MSG];
        let deadline = Instant::now() + DEADLINE;
        let t0 = Instant::now();
        for _ in 0..n {
            cold.evict();
            let before = self.got.load(Ordering::Acquire);
            self.a.submit_send(self.b.address(), &msg, OnDone::Nothing).map_err(|e| e.to_string())?;
            while self.got.load(Ordering::Acquire) == before {
                self.a.progress();
                self.b.progress();
                if Instant::now() > deadline {
                    return Err("pingcost: engine: no answer".into());
                }
            }
        }
        Ok(cold.per_trip(t0.elapsed(), n))
    }
}

/// The same with two raw endpoints (raw.rs): A sends, B takes it and sends
/// it back from its own buffer, A takes the answer.
struct Raws {
    a: FabricRaw,
    b: FabricRaw,
    a_to_b: u64,
    b_to_a: u64,
    _mem: Vec<u8>,
    bufs: [(*mut u8, *mut std::ffi::c_void); 2],
}

impl Raws {
    fn new(provider: &str, bind: Option<&str>) -> R<Raws> {
        let (mut a, mut b) = (FabricRaw::open(provider, bind)?, FabricRaw::open(provider, bind)?);
        let (ab, ba) = (a.insert(&b.fe.addr.clone())?, b.insert(&a.fe.addr.clone())?);
        // Per side: a receive buffer and a send buffer.
        let mut mem = vec![0u8; 4 * MSG];
        let p = mem.as_mut_ptr();
        let (ma, mb) = (a.register(p, 2 * MSG)?, b.register(p.wrapping_add(2 * MSG), 2 * MSG)?);
        a.post_recv(p, MSG, ma.desc)?;
        b.post_recv(p.wrapping_add(2 * MSG), MSG, mb.desc)?;
        let bufs = [(p.wrapping_add(MSG), ma.desc), (p.wrapping_add(3 * MSG), mb.desc)];
        Ok(Raws { a, b, a_to_b: ab, b_to_a: ba, _mem: mem, bufs })
    }

    /// Mean nanoseconds per poll of A's idle completion queue.
    fn empty_polls(&mut self, n: usize) -> R<f64> {
        let mut buf = [fi_cq_data_entry::default(); 16];
        let t0 = Instant::now();
        for _ in 0..n {
            // Straight to the CQ: raw.rs's poll yields every 16th empty one.
            // SAFETY: the CQ is open; buf holds 16 entries.
            let r = unsafe { fi_cq_read(self.a.fe.cq, buf.as_mut_ptr().cast(), 16) };
            if r != -(FI_EAGAIN as isize) {
                return Err(format!("pingcost: an idle raw CQ read {r}"));
            }
        }
        Ok(t0.elapsed().as_nanos() as f64 / n as f64)
    }

    fn round_trips(&mut self, n: usize, cold: &mut Cold) -> R<f64> {
        let deadline = Instant::now() + DEADLINE;
        let t0 = Instant::now();
        let ((pa, da), (pb, db)) = (self.bufs[0], self.bufs[1]);
        let (a, b) = (&mut self.a, &mut self.b);
        for _ in 0..n {
            cold.evict();
            // Each step drives both ends: a first send waits for the
            // provider's connection, which the other end's progress makes.
            while !a.try_send(self.a_to_b, pa, MSG, da)? {
                b.poll()?;
                a.poll()?;
                timed_out(deadline)?;
            }
            let len = loop {
                if let Some(len) = b.try_recv()? {
                    break len;
                }
                a.poll()?;
                timed_out(deadline)?;
            };
            while !b.try_send(self.b_to_a, pb, len, db)? {
                a.poll()?;
                b.poll()?;
                timed_out(deadline)?;
            }
            while a.try_recv()?.is_none() {
                b.poll()?;
                timed_out(deadline)?;
            }
        }
        let ns = cold.per_trip(t0.elapsed(), n);
        // Reap the sends' local completions.
        for r in [&mut self.a, &mut self.b] {
            while r.outstanding > 0 {
                r.poll()?;
                if Instant::now() > deadline {
                    return Err("pingcost: raw: sends did not complete".into());
                }
            }
        }
        Ok(ns)
    }
}

fn timed_out(deadline: Instant) -> R<()> {
    if Instant::now() > deadline { Err("pingcost: raw: no answer".into()) } else { Ok(()) }
}
