//! `fabriclib-bench gpu`: GPU-signalling latency, fabriclib against bare
//! baselines, interleaved in one run (needs a CUDA driver; says so and exits
//! 0 without one). One kernel (`pingpong` in tests/gpu/kernels.ptx) stores
//! v = 1, 2, ... into a mapped word and waits until a second mapped word
//! (the ack) reaches v, timing each round trip in SM cycles (converted to ns
//! with the run's globaltimer/clock64 ratio). What closes the loop:
//! - `baseline`: a bare CPU thread spinning on the word, storing the ack (no fabriclib);
//! - `watcher`: a fabriclib watcher on the word; its callback stores the ack;
//! - `write_path`: the watcher callback submits a 4 KiB write with an
//!   immediate over shm to a second engine of this process, which mirrors
//!   the immediate's count into the ack word (kernel → watcher → write →
//!   immediate → mirrored word → kernel);
//! - `raw_shm`: no GPU: two bare libfabric endpoints over shm ping-pong a
//!   4 KiB write with an immediate; half the round trip.
//!
//! One way = half a round trip.
use crate::raw::{RawEp, RawWrite};
use fabriclib::gpu::cuda::{Cuda, cuda};
use fabriclib::gpu::{Mapped, MemoryKind};
use fabriclib::{EngineConfig, OnDone, Pages, TransferEngine};
use serde_json::json;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

type R<T> = Result<T, String>;

const PTX: &str = include_str!("../../tests/gpu/kernels.ptx");
const WRITE: usize = 4096;

fn e2s(e: fabriclib::Error) -> String {
    e.to_string()
}

fn word(m: &Mapped, i: usize) -> &AtomicU64 {
    // SAFETY: callers pass mapped memory of at least 8 * (i + 1) bytes, 8-byte aligned.
    unsafe { &*(m.host() as *const AtomicU64).add(i) }
}

/// Runs the kernel for `n` round trips between `word_dev` and `ack_dev`; returns each in ns.
fn pingpong(c: &Cuda, word_dev: u64, ack_dev: u64, n: usize) -> R<Vec<f64>> {
    let image = CString::new(PTX).unwrap();
    let f = c.function(0, &image, c"pingpong").map_err(e2s)?;
    let times = c.mem_alloc(0, 8 * n).map_err(e2s)?;
    let stats = c.mem_alloc(0, 24).map_err(e2s)?;
    let mut args = [word_dev, ack_dev, times, n as u64, stats];
    let mut p: Vec<*mut c_void> = args.iter_mut().map(|a| a as *mut u64 as *mut c_void).collect();
    // SAFETY: pingpong(u64*, u64*, u64*, u64, u64*) with matching arguments.
    let launched = unsafe { c.launch(0, f, 1, &mut p) }.and_then(|_| c.synchronize(0));
    let mut t = vec![0u8; 8 * n];
    let mut s = [0u8; 24];
    let copied =
        launched.and_then(|_| c.copy_from_device(0, &mut t, times)).and_then(|_| c.copy_from_device(0, &mut s, stats));
    // SAFETY: allocated above.
    unsafe {
        let _ = c.mem_free(0, times);
        let _ = c.mem_free(0, stats);
    }
    copied.map_err(e2s)?;
    let st: Vec<u64> = s.chunks(8).map(|b| u64::from_le_bytes(b.try_into().unwrap())).collect();
    if st[2] != 0 {
        return Err(format!("round trip {} got no ack within 10 s", st[2]));
    }
    let ns_per_cycle = st[0] as f64 / st[1].max(1) as f64;
    Ok(t.chunks(8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as f64 * ns_per_cycle).collect())
}

fn baseline(c: &Cuda, n: usize) -> R<Vec<f64>> {
    let m = Mapped::new(MemoryKind::CudaMapped, 0, 128).map_err(e2s)?;
    let dev = m.device().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let (w, a) = (word(&m, 0), word(&m, 8));
            let mut last = 0;
            while !stop.load(Ordering::Relaxed) {
                let v = w.load(Ordering::Acquire);
                if v != last {
                    last = v;
                    a.store(v, Ordering::Release);
                }
                std::hint::spin_loop();
            }
        });
        let r = pingpong(c, dev, dev + 64, n);
        stop.store(true, Ordering::Relaxed);
        r
    })
}

fn engine() -> R<TransferEngine> {
    let cfg = EngineConfig {
        provider: Some("shm".into()),
        watcher_spin_us: u64::MAX,
        idle_spin_us: 1_000_000,
        idle_policy: crate::idle_policy(),
        ..Default::default()
    };
    TransferEngine::new(&cfg).map_err(e2s)
}

fn watcher(c: &Cuda, e: &TransferEngine, n: usize) -> R<Vec<f64>> {
    let ack = Arc::new(Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(e2s)?);
    let a2 = ack.clone();
    let w = e
        .watch(MemoryKind::CudaMapped, 0, Box::new(move |_, new| word(&a2, 0).store(new, Ordering::Release)))
        .map_err(e2s)?;
    pingpong(c, w.device_ptr().unwrap(), ack.device().unwrap(), n)
}

/// The engines of the write path: `a` writes 4 KiB pages into `b`, which
/// mirrors immediate 1 into `ack`.
struct Path {
    a: Arc<TransferEngine>,
    b: TransferEngine,
    src: Mapped,
    dst: Mapped,
    ack: Mapped,
}

fn write_path(c: &Cuda, p: &Path, n: usize) -> R<Vec<f64>> {
    // SAFETY: the regions outlive their registrations (dropped at the end of this call).
    let (smr, dmr) = unsafe { (p.a.register(p.src.host(), WRITE), p.b.register(p.dst.host(), WRITE)) };
    let (smr, dmr) = (smr.map_err(e2s)?, dmr.map_err(e2s)?);
    // The previous round's immediates are all in (its kernel saw them): start from 0.
    p.b.imm_count(1, true).map_err(e2s)?;
    // SAFETY: the word lives in `p` and the mirror stops below.
    unsafe { p.b.mirror_imm_count(1, word(&p.ack, 0)) }.map_err(e2s)?;
    let (a, desc, failed) = (p.a.clone(), dmr.descriptor().clone(), Arc::new(AtomicU64::new(0)));
    let f2 = failed.clone();
    let idx = [0u32];
    let w =
        p.a.watch(
            MemoryKind::CudaMapped,
            0,
            Box::new(move |old, new| {
                let pages = Pages { indices: &idx, stride: WRITE as u64, offset: 0 };
                for _ in old..new {
                    if a.submit_paged_writes(WRITE as u64, Some(1), &smr, pages, &desc, pages, OnDone::Nothing).is_err()
                    {
                        f2.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }),
        )
        .map_err(e2s)?;
    let r = pingpong(c, w.device_ptr().unwrap(), p.ack.device().unwrap(), n);
    drop(w);
    // SAFETY: stops the mirror before the word can go.
    unsafe { p.b.mirror_imm_count(1, std::ptr::null()) }.map_err(e2s)?;
    drop(dmr);
    if failed.load(Ordering::Relaxed) > 0 {
        return Err(format!("{} submits failed", failed.load(Ordering::Relaxed)));
    }
    r
}

/// Bare libfabric over shm: a 4 KiB write with an immediate each way; half the round trip, in ns.
fn raw_shm(n: usize) -> R<Vec<f64>> {
    let (mut a, mut b) = (RawEp::open("shm", None)?, RawEp::open("shm", None)?);
    let (ma, mb) = (vec![7u8; WRITE], vec![0u8; WRITE]);
    let (ra, rb) = (a.register(ma.as_ptr() as *mut u8, WRITE)?, b.register(mb.as_ptr() as *mut u8, WRITE)?);
    let (pa, pb) = (b.insert(a.addr())?, a.insert(b.addr())?);
    let to_b = RawWrite {
        local: ma.as_ptr(),
        len: WRITE,
        desc: ra.desc,
        peer: pb,
        addr: rb.remote.remote_base,
        key: rb.remote.key,
        imm: Some(1),
    };
    let to_a = RawWrite {
        local: mb.as_ptr(),
        len: WRITE,
        desc: rb.desc,
        peer: pa,
        addr: ra.remote.remote_base,
        key: ra.remote.key,
        imm: Some(2),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    /// The echo side's endpoint moves to its thread and is used there only.
    struct Echo(RawEp, RawWrite);
    // SAFETY: see above: one thread at a time uses the endpoint (FI_THREAD_DOMAIN).
    unsafe impl Send for Echo {}
    let echo = Echo(b, to_a);
    let out = std::thread::scope(|s| -> R<Vec<f64>> {
        let echo = s.spawn(move || -> R<()> {
            let e = echo;
            let (mut b, to_a) = (e.0, e.1);
            for _ in 0..n {
                b.wait_imm(1, 1, deadline)?;
                b.post_write(&to_a, deadline)?;
            }
            b.drain(deadline)
        });
        let mut t = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            a.post_write(&to_b, deadline)?;
            a.wait_imm(2, 1, deadline)?;
            t.push(t0.elapsed().as_nanos() as f64 / 2.0);
        }
        a.drain(deadline)?;
        echo.join().map_err(|_| "the echo thread panicked".to_string())??;
        Ok(t)
    });
    let _ = ra;
    out
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `fabriclib-bench gpu [--iters N] [--rounds R] [--json FILE]`.
pub fn run(args: &[String]) -> R<bool> {
    let (mut iters, mut rounds, mut json_out) = (2000usize, 5usize, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--iters" => iters = val()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--rounds" => rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--json" => json_out = Some(val()?),
            other => return Err(format!("gpu: unknown option {other} (--iters, --rounds, --json)")),
        }
    }
    let c = match cuda() {
        Ok(c) => c,
        Err(e) => {
            println!("gpu: skipped: {}", e.message);
            return Ok(true);
        }
    };
    println!(
        "gpu: CUDA driver {}, device 0 at {}; {rounds} rounds x {iters} round trips, interleaved",
        c.version,
        c.pci_bus_id(0).map_err(e2s)?
    );
    let e = engine()?;
    let path = Path {
        a: Arc::new(engine()?),
        b: engine()?,
        src: Mapped::new(MemoryKind::Host, 0, WRITE).map_err(e2s)?,
        dst: Mapped::new(MemoryKind::Host, 0, WRITE).map_err(e2s)?,
        ack: Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(e2s)?,
    };
    let names = ["baseline", "watcher", "write_path", "raw_shm"];
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); 4];
    for round in 0..rounds {
        all[0].extend(baseline(c, iters)?);
        all[1].extend(watcher(c, &e, iters)?);
        all[2].extend(write_path(c, &path, iters)?);
        all[3].extend(raw_shm(iters)?);
        eprintln!("gpu: round {} of {rounds} done", round + 1);
    }
    let mut rows = Vec::new();
    println!(
        "{:<12} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "loop", "samples", "rtt p50 us", "rtt p99 us", "1-way p50", "1-way p99"
    );
    for (i, name) in names.iter().enumerate() {
        let v = &mut all[i];
        let (p50, p99) = (pct(v, 0.5) / 1e3, pct(v, 0.99) / 1e3);
        // raw_shm samples are already one way.
        let (r50, r99, o50, o99) =
            if i == 3 { (p50 * 2.0, p99 * 2.0, p50, p99) } else { (p50, p99, p50 / 2.0, p99 / 2.0) };
        println!("{name:<12} {:>8} {r50:>12.2} {r99:>12.2} {o50:>12.2} {o99:>12.2}", v.len());
        rows.push(json!({ "loop": name, "samples": v.len(), "rtt_p50_us": r50, "rtt_p99_us": r99,
                          "one_way_p50_us": o50, "one_way_p99_us": o99 }));
    }
    let one = |i: usize| rows[i]["one_way_p50_us"].as_f64().unwrap();
    let (base, watch) = (one(0), one(1));
    let target = base + 0.5;
    println!(
        "watcher one way p50 {watch:.2} us vs baseline {base:.2} us: +{:.2} us (target <= +0.50: {})",
        watch - base,
        if watch <= target { "met" } else { "missed" }
    );
    let path_rtt = rows[2]["rtt_p50_us"].as_f64().unwrap();
    let base_rtt = rows[0]["rtt_p50_us"].as_f64().unwrap();
    println!(
        "write path p50 {path_rtt:.2} us round trip = baseline round trip {base_rtt:.2} + {:.2} us for watcher, \
         write, immediate and mirror (raw shm one way {:.2} us)",
        path_rtt - base_rtt,
        one(3)
    );
    if let Some(f) = json_out {
        let doc = json!({ "gpu": { "driver": c.version, "iters": iters, "rounds": rounds, "rows": rows,
                                   "watcher_minus_baseline_us": watch - base } });
        std::fs::write(&f, serde_json::to_string_pretty(&doc).unwrap()).map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(true)
}
