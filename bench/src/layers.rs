//! `fabriclib-bench layers`: what the watcher's spin costs a layer loop on
//! a machine with few cores, for each spin setting, in one run.
//!
//! The pattern of the paper's KV transfer, without a GPU: a "model" thread
//! computes a layer (`--compute-us` of busy work), then stores the layer's
//! number into a watched host word and goes on with the next layer; the
//! watcher callback submits that layer's write (4 KiB with an immediate)
//! to a second engine of this process, whose expectation for the layer
//! records when it landed. Per setting, `--layers` layers, `--rounds` times,
//! the settings interleaved round by round:
//! - layer latency: the store of layer `l` → its immediate counted at the
//!   receiver (p50, p99);
//! - the loop's stretch: the model thread's wall time for all layers over
//!   `layers × compute-us` (1.00: nothing took its CPU).
//!
//! The settings: `auto` (the default, `WATCHER_SPIN_AUTO`), `fixed-10ms`
//! (the default before 0.4: a hot spin for 10 ms after every change) and
//! `nap` (never spin: look every `watcher_nap_us`). Ratios against
//! `fixed-10ms` come from the same run.
use fabriclib::gpu::MemoryKind;
use fabriclib::{EngineConfig, IdlePolicy, OnDone, Pages, TransferEngine};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type R<T> = Result<T, String>;

fn e2s(e: fabriclib::Error) -> String {
    e.to_string()
}

const PAGE: usize = 4096;
const SETTINGS: [(&str, u64); 5] = [
    ("auto", fabriclib::config::WATCHER_SPIN_AUTO),
    ("fixed-10ms", 10_000),
    ("fixed-200us", 200),
    ("fixed-50us", 50),
    ("nap", 0),
];

struct Opts {
    provider: String,
    layers: usize,
    compute_us: u64,
    rounds: usize,
    idle: IdlePolicy,
    json: Option<String>,
}

fn parse(args: &[String]) -> R<Opts> {
    let mut o = Opts {
        provider: "tcp;ofi_rxm".into(),
        layers: 200,
        compute_us: 200,
        rounds: 5,
        idle: IdlePolicy::Block,
        json: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--provider" => o.provider = val()?,
            "--layers" => o.layers = val()?.parse().map_err(|e| format!("--layers: {e}"))?,
            "--compute-us" => o.compute_us = val()?.parse().map_err(|e| format!("--compute-us: {e}"))?,
            "--rounds" => o.rounds = val()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--json" => o.json = Some(val()?),
            "--idle" => {
                o.idle = match val()?.as_str() {
                    "spin" => IdlePolicy::Spin,
                    "auto" => IdlePolicy::Auto,
                    "block" => IdlePolicy::Block,
                    v => return Err(format!("--idle {v}: spin, auto or block")),
                }
            }
            _ => return Err(format!("layers: unknown option {a}")),
        }
    }
    Ok(o)
}

/// One round of one setting: per layer, when the watcher saw it and when it
/// landed (µs after its store); and the loop's stretch.
fn round(o: &Opts, spin: u64) -> R<(Vec<(f64, f64)>, f64)> {
    let cfg = |spin| EngineConfig {
        provider: Some(o.provider.clone()),
        bind_addr: Some("127.0.0.1".into()),
        watcher_spin_us: spin,
        // The workers sleep when idle (on tcp's wait object), as on a
        // machine whose cores the model needs: only the watcher's spin
        // differs between the settings.
        idle_policy: o.idle,
        ..Default::default()
    };
    let w = Arc::new(TransferEngine::new(&cfg(spin)).map_err(e2s)?);
    let r = TransferEngine::new(&cfg(fabriclib::config::WATCHER_SPIN_AUTO)).map_err(e2s)?;
    let n = o.layers;
    let (mut src, mut dst) = (vec![1u8; n * PAGE], vec![0u8; n * PAGE]);
    // SAFETY: both buffers outlive the engines' use of them (the engines drop first, below).
    let (smr, dmr) = unsafe {
        (w.register(src.as_mut_ptr(), src.len()).map_err(e2s)?, r.register(dst.as_mut_ptr(), dst.len()).map_err(e2s)?)
    };
    let landed: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let t0 = Instant::now();
    for l in 0..n {
        let (landed, t0) = (landed.clone(), t0);
        let done = OnDone::callback(move |res| {
            if res.is_ok() {
                landed[l].store(t0.elapsed().as_nanos() as u64, Ordering::Release);
            }
        });
        r.expect_imm_count(0x1000 + l as u32, 1, done).map_err(e2s)?;
    }
    let stored: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let seen: Arc<Vec<AtomicU64>> = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect());
    let (we, desc, failed) = (w.clone(), dmr.descriptor().clone(), Arc::new(Mutex::new(None)));
    let (f2, seen2) = (failed.clone(), seen.clone());
    let watcher = w
        .watch(
            MemoryKind::Host,
            0,
            Box::new(move |old, new| {
                for l in old as usize..new as usize {
                    seen2[l].store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    let at = [l as u32];
                    let p = Pages { indices: &at, stride: PAGE as u64, offset: 0 };
                    if let Err(e) =
                        we.submit_paged_writes(PAGE as u64, Some(0x1000 + l as u32), &smr, p, &desc, p, OnDone::Nothing)
                    {
                        *f2.lock().unwrap() = Some(e.to_string());
                    }
                }
            }),
        )
        .map_err(e2s)?;
    // SAFETY: the watcher's word, 8-byte aligned, alive while `watcher` is.
    let word = unsafe { &*(watcher.host_ptr() as *const AtomicU64) };
    let start = Instant::now();
    for l in 0..n {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(o.compute_us) {
            std::hint::spin_loop();
        }
        stored[l].store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        word.store(l as u64 + 1, Ordering::Release);
    }
    let stretch = start.elapsed().as_secs_f64() / (n as f64 * o.compute_us as f64 * 1e-6);
    let limit = Instant::now() + Duration::from_secs(10);
    while landed.iter().any(|x| x.load(Ordering::Acquire) == 0) {
        if Instant::now() > limit {
            let got = landed.iter().filter(|x| x.load(Ordering::Acquire) != 0).count();
            return Err(format!("{got} of {n} layers landed within 10 s ({:?})", failed.lock().unwrap()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(watcher);
    let since = |t: &[AtomicU64], l: usize| {
        (t[l].load(Ordering::Acquire) as f64 - stored[l].load(Ordering::Relaxed) as f64) / 1e3
    };
    let rows = (0..n).map(|l| (since(&seen, l), since(&landed, l))).collect();
    drop(r);
    drop(w);
    drop((src, dst));
    Ok((rows, stretch))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

pub fn run(args: &[String]) -> R<bool> {
    let o = parse(args)?;
    let mut seen: Vec<Vec<f64>> = vec![Vec::new(); SETTINGS.len()];
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); SETTINGS.len()];
    let mut stretch: Vec<Vec<f64>> = vec![Vec::new(); SETTINGS.len()];
    for _ in 0..o.rounds {
        for (i, (_, spin)) in SETTINGS.iter().enumerate() {
            let (rows, s) = round(&o, *spin)?;
            seen[i].extend(rows.iter().map(|r| r.0));
            lat[i].extend(rows.iter().map(|r| r.1));
            stretch[i].push(s);
        }
    }
    println!(
        "layers: {} layers of {} us compute, {} rounds, {} on {} CPUs; latency = layer stored -> its immediate counted",
        o.layers,
        o.compute_us,
        o.rounds,
        o.provider,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<11} {:>12} {:>12} {:>12} {:>12} {:>8} {:>12}",
        "spin", "seen p50 us", "seen p99 us", "landed p50", "landed p99", "stretch", "landed/fixed"
    );
    let base = pct(&mut lat[1].clone(), 0.5);
    let mut rows = Vec::new();
    for (i, (name, _)) in SETTINGS.iter().enumerate() {
        let (s50, s99) = (pct(&mut seen[i], 0.5), pct(&mut seen[i], 0.99));
        let (p50, p99, s) = (pct(&mut lat[i], 0.5), pct(&mut lat[i], 0.99), pct(&mut stretch[i], 0.5));
        println!("{name:<11} {s50:>12.1} {s99:>12.1} {p50:>12.1} {p99:>12.1} {s:>8.3} {:>12.2}", p50 / base);
        rows.push(json!({ "spin": name, "seen_p50_us": s50, "seen_p99_us": s99, "landed_p50_us": p50,
                          "landed_p99_us": p99, "stretch": s, "landed_p50_over_fixed_10ms": p50 / base }));
    }
    if let Some(path) = &o.json {
        let doc = json!({ "layers": o.layers, "compute_us": o.compute_us, "rounds": o.rounds,
                          "provider": o.provider, "rows": rows });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).map_err(|e| e.to_string())?;
    }
    Ok(true)
}
