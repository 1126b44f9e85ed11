//! `fabriclib-bench groups`: what a worker per group buys. Two engines of
//! this process, each either
//! - `groups`: N DomainGroups of one NIC each (a worker per group), or
//! - `one worker`: one group of N NICs (one worker for all of them),
//!
//! move the same bytes: N streams of paged writes (`--pages` × `--size`, a
//! window of 2 requests each), stream k from a source region to a
//! destination region (with groups: both in group k; with one worker:
//! sharded over its N NICs). Timed from the first submit to the last
//! completion; the median repetition. Engine against engine, same run, so
//! the ratio says what running the NICs from N workers instead of one is
//! worth on this host. Bytes of the last repetition verified.
use crate::ctl::fill;
use fabriclib::{EngineConfig, FLAG_DONE, GroupConfig, MrHandle, OnDone, Pages, TransferEngine};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

type R<T> = Result<T, String>;

fn e2s(e: fabriclib::Error) -> String {
    e.to_string()
}

/// Both engines and every stream's regions.
struct Setup {
    a: TransferEngine,
    /// The receiving engine: kept alive, never driven (writes land by themselves).
    _b: TransferEngine,
    src: Vec<(Vec<u8>, MrHandle)>,
    dst: Vec<(Vec<u8>, MrHandle)>,
}

fn setup(provider: &str, n: usize, per_group: bool, len: usize) -> R<Setup> {
    let cfg = EngineConfig {
        provider: Some(provider.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: if per_group { 1 } else { n },
        groups: if per_group { vec![GroupConfig::default(); n] } else { Vec::new() },
        idle_policy: crate::idle_policy(),
        ..Default::default()
    };
    let (a, b) = (TransferEngine::new(&cfg).map_err(e2s)?, TransferEngine::new(&cfg).map_err(e2s)?);
    let region = |e: &TransferEngine, k: usize| -> R<(Vec<u8>, MrHandle)> {
        let mut mem = vec![0u8; len];
        fill(&mut mem, 0x9e00 + k as u64);
        let g = if per_group { k } else { 0 };
        // SAFETY: the Vec's heap buffer does not move when the Vec does; it is kept next to its handle.
        let mr = unsafe { e.register_in_group(g, mem.as_mut_ptr(), len, None) }.map_err(e2s)?;
        Ok((mem, mr))
    };
    let src = (0..n).map(|k| region(&a, k)).collect::<R<Vec<_>>>()?;
    let dst = (0..n).map(|k| region(&b, k)).collect::<R<Vec<_>>>()?;
    Ok(Setup { a, _b: b, src, dst })
}

/// One repetition: `iters` requests of every stream, 2 in flight per
/// stream; seconds from the first submit to the last completion.
fn rep(s: &Setup, pages: &[u32], size: u64, iters: usize) -> R<f64> {
    const WINDOW: usize = 2;
    let n = s.src.len();
    let flags: Vec<Arc<AtomicU32>> = (0..n * WINDOW).map(|_| Arc::new(AtomicU32::new(FLAG_DONE))).collect();
    let wait = |f: &AtomicU32| -> R<()> {
        let t = Instant::now();
        loop {
            let v = f.load(Ordering::Acquire);
            if v & FLAG_DONE != 0 {
                return if v & 0xffff == 0 { Ok(()) } else { Err(format!("a write failed: status {}", v & 0xffff)) };
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err("a write did not complete in 60 s".into());
            }
            // This thread only waits: leave the cores to the workers.
            std::thread::yield_now();
        }
    };
    let p = Pages { indices: pages, stride: size, offset: 0 };
    let t0 = Instant::now();
    for i in 0..iters {
        for k in 0..n {
            let f = &flags[k * WINDOW + i % WINDOW];
            wait(f)?;
            f.store(0, Ordering::Relaxed);
            let (src, dst) = (&s.src[k].1, s.dst[k].1.descriptor());
            s.a.submit_paged_writes(size, None, src, p, dst, p, OnDone::Flag(f.clone())).map_err(e2s)?;
        }
    }
    for f in &flags {
        wait(f)?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

pub fn run(args: &[String]) -> R<bool> {
    let (mut provider, mut counts, mut pages, mut size) = ("shm".to_string(), vec![1usize, 2, 4], 100usize, 65536u64);
    let (mut iters, mut reps, mut json_out) = (10usize, 9usize, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{a}: missing value"));
        match a.as_str() {
            "--provider" => provider = val()?,
            "--groups" => counts = crate::list(&val()?, crate::num)?,
            "--pages" => pages = crate::num(&val()?)?,
            "--size" => size = crate::parse_size(&val()?)?,
            "--iters" => iters = crate::num(&val()?)?,
            "--reps" => reps = crate::num(&val()?)?,
            "--json" => json_out = Some(val()?),
            other => {
                return Err(format!(
                    "groups: unknown option {other} (--provider, --groups, --pages, --size, --iters, --reps, --json)"
                ));
            }
        }
    }
    if counts.iter().any(|&n| n == 0 || n > 8) || pages == 0 || size == 0 || reps == 0 || iters == 0 {
        return Err("groups: 1..=8 groups, and pages, size, iters and reps of at least 1".into());
    }
    let idx: Vec<u32> = (0..pages as u32).collect();
    let len = pages * size as usize;
    println!(
        "groups: {provider}, N streams of {iters} × paged {pages} × {size} B, 2 in flight each; median of {reps} \
         repetitions, alternating"
    );
    println!("{:>3} {:>22} {:>22} {:>8}", "N", "N groups × 1 NIC GB/s", "1 group × N NICs GB/s", "ratio");
    let mut rows = Vec::new();
    for &n in &counts {
        let setups = [setup(&provider, n, true, len)?, setup(&provider, n, false, len)?];
        let mut secs = [Vec::new(), Vec::new()];
        for r in 0..reps + 1 {
            // Alternating which goes first; the first repetition of each warms up (handshakes).
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            for m in order {
                let t = rep(&setups[m], &idx, size, iters)?;
                if r > 0 {
                    secs[m].push(t);
                }
            }
        }
        for (m, s) in setups.iter().enumerate() {
            for k in 0..n {
                if s.src[k].0 != s.dst[k].0 {
                    return Err(format!("stream {k} of {} did not land intact", ["groups", "one worker"][m]));
                }
            }
        }
        let bytes = (n * iters * len) as f64;
        let gbps: Vec<f64> = secs
            .iter_mut()
            .map(|v| {
                v.sort_by(|a, b| a.total_cmp(b));
                bytes / v[v.len() / 2] / 1e9
            })
            .collect();
        let ratio = gbps[0] / gbps[1];
        println!("{n:>3} {:>22.3} {:>22.3} {ratio:>8.3}", gbps[0], gbps[1]);
        rows.push(json!({ "n": n, "groups_gbps": gbps[0], "one_worker_gbps": gbps[1], "ratio": ratio,
                          "provider": provider, "pages": pages, "size": size, "iters": iters, "reps": reps }));
    }
    if let Some(f) = json_out {
        std::fs::write(&f, serde_json::to_string_pretty(&json!({ "groups": rows })).unwrap())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(true)
}
