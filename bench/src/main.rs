//! fabriclib-bench: bandwidth, latency and host cost of the TransferEngine,
//! each measured against raw libfabric (same provider, same bindings, no
//! engine) — or, on the verbs backend, bare verbs — in the same run,
//! interleaved repetition by repetition.
//!
//! ```text
//! fabriclib-bench --suite quick                      # the standard suite (< 5 min on 2 cores)
//! fabriclib-bench --workload single --sizes 4K,32M --provider shm --json out.json --plot out.svg
//! fabriclib-bench server --listen 0.0.0.0:7471 --bind 10.0.0.2   # on host B
//! fabriclib-bench --connect 10.0.0.2:7471 --bind 10.0.0.1 ...    # on host A
//! ```
mod bare;
mod batch;
mod client;
mod ctl;
mod gpu;
mod groups;
mod handoff;
mod idle;
mod layers;
mod mem;
mod pingcost;
mod raw;
mod raw_verbs;
mod relay;
mod report;
mod server;

use client::{Kind, PeerConn, Row, Session, Spec};
use ctl::{Ctl, R, parse_size};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Instant;

const USAGE: &str = "\
usage: fabriclib-bench [options]                 run the client; spawns its servers on loopback
       fabriclib-bench idle [--idle-ms N] [--quiet-ms N] [--samples N] [--idle-nap-us N] [--provider LIST] [--json FILE]
                                                  CPU of an idle engine with an armed expectation, and the
                                                  first write after a quiet spell, per idle policy
       fabriclib-bench layers [--layers N] [--compute-us N] [--rounds N] [--provider P] [--json FILE]
                                                  a layer loop driving writes through a watcher: layer
                                                  latency and the loop's stretch per watcher spin setting
       fabriclib-bench groups [--provider P] [--groups 1,2,4] [--pages N] [--size S] [--iters N] [--reps N]
                            [--json FILE]
                                                  N groups of one NIC (a worker each) against one group of
                                                  N NICs (one worker), same streams of paged writes
       fabriclib-bench gpu [--iters N] [--rounds R] [--json FILE]
                                                  GPU signalling latency (needs a CUDA driver;
                                                  says skipped without one): see docs/gpu.md
       fabriclib-bench bare [--provider P] [--size S] [--pages N] [--iters N] [--window W] [--reps N]
                            [--cpus INITIATOR,TARGET | --no-pin] [--endpoint own|fabriclib] [--idle-engine NAP_US]
                                                  a bare fi_writedata loop (own fi_getinfo, own objects,
                                                  no yields) doing the paged row's work: the reference
                                                  the raw baseline is checked against (bench/src/bare.rs);
                                                  --endpoint fabriclib: on fabriclib's endpoints instead;
                                                  --idle-engine: beside an idle engine in both processes
       fabriclib-bench pingcost [--provider P] [--iters N] [--reps N] [--only engine|raw] [--evict-kb N]
                                                  a 64 B send/recv round trip with both ends (two
                                                  manual-progress engines, then two raw endpoints)
                                                  driven by this one thread: the host work per round
                                                  trip, without wake-ups; under callgrind, by function;
                                                  --evict-kb: caches made cold before each round trip
       fabriclib-bench server [--listen ADDR:PORT] [--bind ADDR] [--cpu N] [--engine-cpu N]
                                                  one server process (prints its control address;
                                                  --bind: its address for socket providers)

options:
  --suite smoke|quick|full   a predefined plan (default: quick, unless --workload is given)
  --workload LIST            single,paged,imm,sendrecv,scatter,barrier,host (comma-separated;
                             host-single, host-batch, host-paged, host-scatter: one host row;
                             host-batch: host-single's one-WR writes, 16 per submit_single_writes)
  --provider LIST            libfabric providers, comma-separated (default: tcp;ofi_rxm,shm, and verbs
                             where the machine has a verbs device); verbs: fabriclib's verbs backend,
                             against bare verbs (bench/src/raw_verbs.rs)
  --backend libfabric|verbs  the default libfabric providers only, or the verbs backend only (--provider verbs)
  --domains N                domains (NICs) per engine (default 1)
  --sizes LIST               write / page / destination sizes, e.g. 1K,64K,32M
  --pages LIST               pages per paged request (default 100,10000)
  --peers LIST               server processes for scatter and barrier (default 4; at most 8)
  --window N                 requests in flight (raw: the same number of work requests)
  --iters N                  requests per repetition (latency rows: pings per repetition)
  --reps N  --warmup N       measured and warm-up repetitions (quick: 15 and 1)
  --connect LIST             servers to use instead of spawning them (ADDR:PORT, comma-separated)
  --bind ADDR                local address for socket providers (default 127.0.0.1 on loopback)
  --hugepages                register 2 MiB-aligned memory with madvise(MADV_HUGEPAGE) (transparent
                             huge pages; shm's copies run about 1.8x faster from them), client and servers
  --progress worker|manual   worker thread (default), or manual progress: the waiting
                             application thread drives the engine (TransferEngine::progress)
  --recv-callbacks worker|thread
                             the send rows' receive pools call back on the worker
                             (add_recv_pool_on_worker, default) or on the callback thread
  --idle-policy P            the engines' idle policy: spin (the default here: engine threads on CPUs
                             of their own, as the bench pins them; the library's default is auto),
                             auto or block
  --no-pin                   do not pin processes to CPUs (default: client on CPU 0,
                             server i on CPU (i+1) mod ncpus, on loopback; with 4 or more CPUs
                             each process's engine threads on CPU k + ncpus/2 of their own)
  --json FILE                write the JSON report
  --plot FILE                write an SVG plot: bandwidth vs. write size, engine vs. raw
";

struct Opts {
    suite: Option<String>,
    workloads: Option<Vec<String>>,
    providers: Vec<String>,
    domains: usize,
    sizes: Option<Vec<u64>>,
    pages: Option<Vec<usize>>,
    peers: Option<Vec<usize>>,
    window: Option<usize>,
    iters: Option<usize>,
    reps: Option<usize>,
    warmup: Option<usize>,
    connect: Vec<String>,
    bind: Option<String>,
    json: Option<String>,
    plot: Option<String>,
    pin: bool,
}

fn list<T>(s: &str, f: impl Fn(&str) -> R<T>) -> R<Vec<T>> {
    s.split(',').filter(|x| !x.is_empty()).map(f).collect()
}

pub fn num(s: &str) -> R<usize> {
    s.parse().map_err(|_| format!("not a number: {s}"))
}

fn parse(args: &[String]) -> R<Opts> {
    let mut o = Opts {
        suite: None,
        workloads: None,
        providers: vec!["tcp;ofi_rxm".into(), "shm".into()],
        domains: 1,
        sizes: None,
        pages: None,
        peers: None,
        window: None,
        iters: None,
        reps: None,
        warmup: None,
        connect: Vec::new(),
        bind: None,
        json: None,
        plot: None,
        pin: true,
    };
    let mut it = args.iter();
    let mut chosen = false;
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
        chosen |= a == "--provider" || a == "--backend";
        match a.as_str() {
            "--suite" => o.suite = Some(val()?),
            "--backend" => match val()?.as_str() {
                "libfabric" => {}
                "verbs" => o.providers = vec!["verbs".into()],
                b => return Err(format!("--backend {b}: libfabric or verbs")),
            },
            "--workload" => o.workloads = Some(list(&val()?, |s| Ok(s.to_string()))?),
            "--provider" => o.providers = list(&val()?, |s| Ok(s.to_string()))?,
            "--domains" => o.domains = num(&val()?)?,
            "--sizes" => o.sizes = Some(list(&val()?, parse_size)?),
            "--pages" => o.pages = Some(list(&val()?, num)?),
            "--peers" => o.peers = Some(list(&val()?, num)?),
            "--window" => o.window = Some(num(&val()?)?),
            "--iters" => o.iters = Some(num(&val()?)?),
            "--reps" => o.reps = Some(num(&val()?)?.max(1)),
            "--warmup" => o.warmup = Some(num(&val()?)?),
            "--connect" => o.connect = list(&val()?, |s| Ok(s.to_string()))?,
            "--bind" => o.bind = Some(val()?),
            "--json" => o.json = Some(val()?),
            "--plot" => o.plot = Some(val()?),
            "--no-pin" => o.pin = false,
            "--idle-policy" => {
                let v = val()?;
                fabriclib::IdlePolicy::from_code(match v.as_str() {
                    "spin" => 0,
                    "auto" => 1,
                    "block" => 2,
                    _ => return Err(format!("--idle-policy {v}: auto, spin or block")),
                })
                .map_err(|e| e.to_string())?;
                // Spawned servers inherit it.
                // SAFETY: set before any thread of ours reads the environment concurrently.
                unsafe { std::env::set_var("FABRICLIB_BENCH_IDLE_POLICY", v) };
            }
            "--recv-callbacks" => {
                let v = val()?;
                if v != "worker" && v != "thread" {
                    return Err(format!("--recv-callbacks {v}: worker or thread"));
                }
                // SAFETY: as for --idle-policy.
                unsafe { std::env::set_var("FABRICLIB_BENCH_RECV_CALLBACKS", v) };
            }
            "--progress" => {
                let v = val()?;
                if v != "worker" && v != "manual" {
                    return Err(format!("--progress {v}: worker or manual"));
                }
                // SAFETY: as for --idle-policy.
                unsafe { std::env::set_var("FABRICLIB_BENCH_PROGRESS", v) };
            }
            "--hugepages" => mem::HUGE.store(true, std::sync::atomic::Ordering::Relaxed),
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if let Some(p) = o.peers.iter().flatten().find(|&&p| p == 0 || p > 8) {
        return Err(format!("--peers: {p} is not in 1..=8"));
    }
    // Verbs rows by default where there is a device to run them on.
    if !chosen && o.connect.is_empty() && fabriclib::domain::verbs::device::list().is_ok_and(|d| !d.is_empty()) {
        o.providers.push("verbs".into());
    }
    Ok(o)
}

/// Requests per repetition for a bandwidth row: about `bytes` per repetition, within limits.
fn iters_for(bytes: u64, per_req: u64, lo: usize, hi: usize) -> usize {
    ((bytes / per_req.max(1)) as usize).clamp(lo, hi)
}

/// Writes per `submit_single_writes` in the host-batch row.
const BATCH: usize = 16;

fn spec(kind: Kind, size: u64, pages: usize, peers: usize, window: usize, iters: usize) -> Spec {
    Spec { kind, size, pages, peers, window, iters }
}

/// The rows to run, per provider (host rows run once, on the null provider).
fn plan(o: &Opts) -> R<(Vec<Spec>, Vec<Spec>, usize, usize)> {
    let suite = o.suite.clone().unwrap_or_else(|| if o.workloads.is_some() { "custom".into() } else { "quick".into() });
    let (sizes, bw_bytes, reps, warmup, peers, big_pages): (Vec<u64>, u64, usize, usize, Vec<usize>, bool) = match suite
        .as_str()
    {
        "smoke" => (vec![64 << 10], 1 << 20, 2, 1, vec![2], false),
        "quick" | "custom" => {
            (vec![4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 32 << 20], 64 << 20, 15, 1, vec![4], false)
        }
        "full" => (
            (10..=24).step_by(2).map(|s| 1u64 << s).chain([32 << 20, 64 << 20]).collect(),
            128 << 20,
            10,
            2,
            vec![2, 4, 8],
            true,
        ),
        s => return Err(format!("unknown suite {s} (smoke, quick, full)")),
    };
    let all = ["single", "paged", "imm", "sendrecv", "scatter", "barrier", "host"];
    let workloads: Vec<String> = o.workloads.clone().unwrap_or_else(|| all.iter().map(|s| s.to_string()).collect());
    let smoke = suite == "smoke";
    let (mut rows, mut host) = (Vec::new(), Vec::new());
    for w in &workloads {
        match w.as_str() {
            "single" => {
                for &s in o.sizes.as_ref().unwrap_or(&sizes) {
                    let win = o.window.unwrap_or(if s >= 4 << 20 { 2 } else { 8 });
                    rows.push(spec(Kind::Single, s, 1, 1, win, o.iters.unwrap_or(iters_for(bw_bytes, s, 4, 1024))));
                }
            }
            "paged" => {
                let page_sizes = o.sizes.clone().unwrap_or(if smoke {
                    vec![4 << 10]
                } else {
                    vec![1 << 10, 4 << 10, 16 << 10, 64 << 10]
                });
                let counts = o.pages.clone().unwrap_or(if smoke { vec![100] } else { vec![100, 10000] });
                for &n in &counts {
                    for &s in &page_sizes {
                        // 10,000-page rows: the largest page only in the full suite (625 MiB per side).
                        if n >= 10000 && o.sizes.is_none() && s > 4 << 10 && !big_pages {
                            continue;
                        }
                        let per = s * n as u64;
                        let win = o.window.unwrap_or(if n >= 10000 { 1 } else { 2 });
                        rows.push(spec(Kind::Paged, s, n, 1, win, o.iters.unwrap_or(iters_for(bw_bytes, per, 2, 256))));
                    }
                }
            }
            "imm" | "sendrecv" => {
                let kind = if w == "imm" { Kind::Imm } else { Kind::SendRecv };
                let default = if w == "imm" { 8 } else { 64 };
                for &s in o.sizes.as_ref().map_or(&vec![default], |v| v) {
                    // Pings are messages / writes into a 64 KiB landing region.
                    if s > server::MSG as u64 {
                        eprintln!(
                            "fabriclib-bench: {w}: skipping size {} (pings are at most 64 KiB)",
                            ctl::fmt_size(s)
                        );
                        continue;
                    }
                    rows.push(spec(kind, s, 1, 1, 1, o.iters.unwrap_or(if smoke { 50 } else { 400 })));
                }
            }
            "scatter" | "barrier" => {
                for &p in o.peers.as_ref().unwrap_or(&peers) {
                    if w == "scatter" {
                        for &s in o.sizes.as_ref().map_or(&vec![64 << 10], |v| v) {
                            let iters = o.iters.unwrap_or(iters_for(bw_bytes / 2, s * p as u64, 4, 512));
                            rows.push(spec(Kind::Scatter, s, 1, p, o.window.unwrap_or(4), iters));
                        }
                    } else {
                        rows.push(spec(Kind::Barrier, 0, 1, p, 1, o.iters.unwrap_or(if smoke { 50 } else { 400 })));
                    }
                }
            }
            "host" | "host-single" | "host-batch" | "host-paged" | "host-scatter" => {
                let n = if smoke { 8 } else { 64 };
                let want = |k: &str| w == "host" || w == k;
                if want("host-single") {
                    host.push(spec(Kind::HostSingle, 4 << 10, 1, 0, 64, o.iters.unwrap_or(n * 1024)));
                }
                if want("host-batch") {
                    // host-single's writes, BATCH per submit_single_writes.
                    host.push(spec(Kind::HostBatch, 4 << 10, BATCH, 0, 64, o.iters.unwrap_or(n * 1024)));
                }
                if want("host-paged") {
                    host.push(spec(Kind::HostPaged, 4 << 10, 1024, 0, 4, o.iters.unwrap_or(n)));
                }
                if want("host-scatter") {
                    host.push(spec(Kind::HostScatter, 64, 1, 64, 8, o.iters.unwrap_or(n * 16)));
                }
            }
            other => return Err(format!("unknown workload {other}")),
        }
    }
    Ok((rows, host, o.reps.unwrap_or(reps), o.warmup.unwrap_or(warmup)))
}

/// Starts (or connects to) `n` servers.
fn servers(o: &Opts, n: usize) -> R<Vec<PeerConn>> {
    if !o.connect.is_empty() {
        if o.connect.len() < n {
            return Err(format!("the plan needs {n} servers; --connect gave {}", o.connect.len()));
        }
        return o.connect[..n]
            .iter()
            .map(|a| {
                Ok(PeerConn::new(Ctl::new(TcpStream::connect(a).map_err(|e| format!("connect {a}: {e}"))?)?, None))
            })
            .collect();
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let cpus = cpus();
    (0..n)
        .map(|i| {
            let mut cmd = Command::new(&exe);
            cmd.args(["server", "--listen", "127.0.0.1:0"]);
            if o.pin && cpus > 1 {
                let (mut cpu, mut engine) = (Some(loopback_cpu(i + 1, cpus)), loopback_engine_cpu(i + 1, cpus));
                // FABRICLIB_BENCH_SERVER_SWAP=1: each server's main thread and engine
                // threads trade CPUs (is a copier slower on one CPU than another?).
                if engine.is_some() && std::env::var("FABRICLIB_BENCH_SERVER_SWAP").as_deref() == Ok("1") {
                    std::mem::swap(&mut cpu, &mut engine);
                }
                cmd.args(["--cpu", &cpu.unwrap().to_string()]);
                if let Some(c) = engine {
                    cmd.args(["--engine-cpu", &c.to_string()]);
                }
            }
            let mut child = cmd.stdout(Stdio::piped()).spawn().map_err(|e| format!("spawn server: {e}"))?;
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).map_err(|e| e.to_string())?;
            let addr = line.trim().rsplit(' ').next().unwrap_or("").to_string();
            let s = TcpStream::connect(&addr).map_err(|e| format!("server said {line:?}: {e}"))?;
            Ok(PeerConn::new(Ctl::new(s)?, Some(child)))
        })
        .collect()
}

impl Drop for PeerConn {
    fn drop(&mut self) {
        let _ = self.ctl.send(&json!({ "op": "quit" }));
        if let Some(mut c) = self.child.take() {
            let t = Instant::now();
            while t.elapsed().as_secs() < 5 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// CPUs this process may use, as it started (before any pinning).
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Pins the calling thread (and every thread it starts later) to one CPU,
/// or with `None` lets it run on all of them again.
fn pin_to(cpu: Option<usize>) -> R<()> {
    let cpus: Vec<u32> = match cpu {
        Some(c) => vec![c as u32],
        None => (0..fabriclib::os::MAX_CPUS).collect(),
    };
    fabriclib::os::set_thread_cpus(&cpus).map_err(|e| format!("cannot pin to CPU {cpu:?}: {e}"))
}

/// The CPU of loopback process `k` (0: the client, `i + 1`: server `i`).
fn loopback_cpu(k: usize, cpus: usize) -> usize {
    k % cpus
}

fn run(o: &Opts) -> R<bool> {
    let (rows, host, reps, warmup) = plan(o)?;
    // On loopback, one CPU per process: placement by the scheduler would
    // otherwise decide whether two pollers share a core, run by run.
    let pinned = o.pin && o.connect.is_empty() && cpus() > 1;
    if pinned {
        pin_to(Some(loopback_cpu(0, cpus())))?;
        let _ = ENGINE_CPU.set(loopback_engine_cpu(0, cpus()));
    }
    let total = rows.len() * o.providers.len() + host.len();
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut done = 0usize;
    let say = |i: usize, what: &str, msg: &str| {
        let line = format!("[{i}/{total} {:.0}s] {what} {msg}", started.elapsed().as_secs_f64());
        if tty {
            eprint!("\r\x1b[K{line}");
        } else if msg.ends_with("rep 1/1") || msg.starts_with("rep 1/") {
            eprintln!("{line}");
        }
        let _ = std::io::stderr().flush();
    };
    let mut results: Vec<Row> = Vec::new();
    let mut nic_counters: Vec<(String, usize, fabriclib::NicCount)> = Vec::new();
    let mut metrics: Vec<(String, fabriclib::metrics::Metrics)> = Vec::new();
    let need = rows.iter().map(|s| s.kind.peers(s)).max().unwrap_or(0);
    if need > 0 {
        let mut peers = servers(o, need)?;
        let local = o.connect.is_empty().then_some("127.0.0.1");
        let bind = o.bind.as_deref().or(local);
        for p in &o.providers {
            let mut s = Session::open(p, o.domains, bind, local, &mut peers)?;
            s.reps = reps;
            s.warmup = warmup;
            for spec in &rows {
                done += 1;
                let what = format!("{} {}", s.provider, spec.kind.name());
                let row = s.run(spec, &mut peers, &|m| say(done, &what, m)).map_err(|e| format!("{what}: {e}"))?;
                results.push(row);
            }
            for (d, n) in s.counters()?.nics.into_iter().enumerate() {
                nic_counters.push((s.provider.clone(), d, n));
            }
            metrics.push((s.provider.clone(), s.metrics()));
            s.close();
        }
    }
    // Host cost is the engine's throughput with its submitting thread and its
    // worker running side by side: unpinned.
    if pinned && !host.is_empty() {
        pin_to(None)?;
    }
    for spec in &host {
        done += 1;
        results.push(client::host_cost(spec, reps, warmup, &|m| say(done, spec.kind.name(), m))?);
    }
    if tty {
        eprintln!();
    }
    report::print_table(&results);
    let targets = report::targets(&results);
    report::print_targets(&targets);
    if !nic_counters.is_empty() {
        println!("\nclient engine counters, per NIC (the engine rows' work requests):");
        for (p, d, n) in &nic_counters {
            let t = n.total;
            println!(
                "  {p:<12} domain {d} {:<10} {:>9} WRs posted {:>9} completed {:>14} bytes {:>3} errors",
                n.nic, t.wrs_posted, t.wrs_completed, t.bytes_completed, t.errors
            );
        }
    }
    report::print_metrics(&metrics);
    let verified = results.iter().all(|r| r.verified != Some(false));
    println!(
        "\n{} rows in {:.1} s; bytes verified: {}",
        results.len(),
        started.elapsed().as_secs_f64(),
        if verified { "all" } else { "FAILED" }
    );
    if let Some(path) = &o.json {
        let doc = json!({
            "tool": "fabriclib-bench",
            "version": env!("CARGO_PKG_VERSION"),
            "command": std::env::args().collect::<Vec<_>>(),
            "machine": machine(),
            "reps": reps,
            "warmup": warmup,
            "pinned": pinned,
            "elapsed_s": started.elapsed().as_secs_f64(),
            "verified": verified,
            "rows": results.iter().map(report::row_json).collect::<Vec<_>>(),
            "targets": report::targets_json(&targets),
            "metrics": metrics.iter().map(|(p, m)| json!({
                "provider": p,
                "snapshot": serde_json::from_str::<Value>(&fabriclib::metrics::export::json(m)).unwrap_or(Value::Null),
            })).collect::<Vec<_>>(),
            "nic_counters": nic_counters.iter().map(|(p, d, n)| json!({
                "provider": p,
                "domain": d,
                "nic": n.nic,
                "wrs_posted": n.total.wrs_posted,
                "wrs_completed": n.total.wrs_completed,
                "bytes_posted": n.total.bytes_posted,
                "bytes_completed": n.total.bytes_completed,
                "errors": n.total.errors,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap() + "\n").map_err(|e| format!("{path}: {e}"))?;
    }
    if let Some(path) = &o.plot {
        report::plot(&results, path)?;
    }
    Ok(verified)
}

/// Whether the engines run in manual-progress mode (`--progress manual`;
/// servers inherit it): the waiting application thread drives them.
/// Receive pools' callbacks on the worker (`add_recv_pool_on_worker`, the
/// default) or on the callback thread (`--recv-callbacks thread`); servers
/// inherit it through the environment.
pub fn recv_on_worker() -> bool {
    std::env::var("FABRICLIB_BENCH_RECV_CALLBACKS").as_deref() != Ok("thread")
}

/// A receive pool for the send rows, where `--recv-callbacks` says.
pub fn recv_pool(
    e: &fabriclib::TransferEngine,
    len: usize,
    count: usize,
    cb: impl Fn(fabriclib::Received<'_>) + Send + Sync + 'static,
) -> fabriclib::Result<fabriclib::RecvPoolId> {
    if recv_on_worker() { e.add_recv_pool_on_worker(len, count, cb) } else { e.add_recv_pool(len, count, cb) }
}

pub fn manual_progress() -> bool {
    std::env::var("FABRICLIB_BENCH_PROGRESS").as_deref() == Ok("manual")
}

/// The engines' idle policy (`--idle-policy`; servers inherit it through the
/// environment). `Spin` unless told: the bench measures the dedicated-core
/// deployment (each process's engine threads pinned to a CPU of their own),
/// not the library's default (`Auto`).
pub fn idle_policy() -> fabriclib::IdlePolicy {
    match std::env::var("FABRICLIB_BENCH_IDLE_POLICY").as_deref() {
        Ok("auto") => fabriclib::IdlePolicy::Auto,
        Ok("block") => fabriclib::IdlePolicy::Block,
        _ => fabriclib::IdlePolicy::Spin,
    }
}

/// The CPU the engine threads (worker, callbacks) of loopback process `k`
/// run on, when the bench pins: a CPU of their own (`k + cpus/2`) on a host
/// with at least 4 CPUs, as the paper deploys a worker, so that
/// neither the application thread nor the raw loop shares its CPU with
/// them; `None` on smaller hosts (they share the process's CPU).
fn loopback_engine_cpu(k: usize, cpus: usize) -> Option<usize> {
    // FABRICLIB_BENCH_ENGINE_OFFSET: another distance between a process's CPU and its engine's.
    let off = std::env::var("FABRICLIB_BENCH_ENGINE_OFFSET").ok().and_then(|v| v.parse().ok()).unwrap_or(cpus / 2);
    (cpus >= 4 && k + off < cpus).then_some(k + off)
}

static ENGINE_CPU: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();

/// The CPUs for this process's engine threads (`EngineConfig::worker_cpus`,
/// `callback_cpus`): empty (the process's own) unless pinned apart.
pub fn engine_cpus() -> Vec<u32> {
    ENGINE_CPU.get().copied().flatten().map(|c| vec![c as u32]).unwrap_or_default()
}

fn machine() -> serde_json::Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    // SAFETY: fi_version has no preconditions.
    let fi_version = unsafe { fabriclib::domain::fabric::sys::fi_version() };
    json!({
        "cpus": cpus(),
        "cpu": cpu,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "libfabric": format!("{}.{}", fi_version >> 16, fi_version & 0xffff),
        "hugepages": mem::HUGE.load(std::sync::atomic::Ordering::Relaxed),
        "idle_policy": format!("{:?}", idle_policy()),
        "engine_cpu": ENGINE_CPU.get().copied().flatten(),
        "manual_progress": manual_progress(),
        // The raw column: raw driven from the application's thread, or through a relay
        // thread (relay.rs); "both": direct, with the relay as a third mode (rows' "relay").
        "raw_baseline": if relay::enabled() { "relay" } else if relay::both() { "both" } else { "direct" },
        "thp": read("/sys/kernel/mm/transparent_hugepage/enabled").trim(),
        // The most of the client's anonymous memory seen backed by huge pages after an allocation.
        "client_thp_bytes": mem::THP_SEEN.load(std::sync::atomic::Ordering::Relaxed),
    })
}

/// `bare` (the initiator, pinned to CPU 0, its target to CPU 1) and
/// `bare-target`: see bare.rs.
fn bare_cmd(args: &[String], target: bool) -> R<bool> {
    let (mut provider, mut size, mut pages, mut iters, mut window, mut len) =
        ("shm".to_string(), 64usize << 10, 100usize, 10usize, 200usize, 0usize);
    let (mut reps, mut warmup) = (15usize, 1usize);
    let (mut pin, mut cpu_list) = (true, None);
    let mut variant = bare::Variant::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--no-pin" {
            pin = false;
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{a}: missing value\n{USAGE}"))?;
        match a.as_str() {
            "--cpus" => cpu_list = Some(list(v, num)?),
            "--provider" => provider = v.clone(),
            "--size" => size = parse_size(v)? as usize,
            "--pages" => pages = num(v)?,
            "--iters" => iters = num(v)?,
            "--window" => window = num(v)?,
            "--reps" => reps = num(v)?,
            "--warmup" => warmup = num(v)?,
            "--len" => len = num(v)?,
            "--endpoint" if v == "fabriclib" || v == "own" => variant.fabriclib_ep = v == "fabriclib",
            "--idle-engine" => variant.idle_engine = Some(num(v)? as u64),
            _ => return Err(format!("bare: unknown option {a} {v}\n{USAGE}")),
        }
    }
    // As the bench pins its loopback processes, unless --cpus or --no-pin say
    // otherwise. The initiator names both CPUs: the target, started pinned
    // to the initiator's, sees one CPU only.
    let ncpus = cpus();
    let both: Vec<usize> = cpu_list.unwrap_or_else(|| vec![loopback_cpu(0, ncpus), loopback_cpu(1, ncpus)]);
    if both.len() != 2 {
        return Err(format!("bare: --cpus takes two CPUs (initiator,target), got {both:?}"));
    }
    let pin = pin && (target || ncpus > 1);
    if pin {
        pin_to(Some(both[if target { 1 } else { 0 }]))?;
    }
    if target {
        return bare::target(&provider, len, variant).map(|_| true);
    }
    let pass = match pin {
        true => vec!["--cpus".to_string(), format!("{},{}", both[0], both[1])],
        false => vec!["--no-pin".to_string()],
    };
    bare::run(&provider, size, pages, iters, window.max(1), reps.max(1), warmup, &pass, variant).map(|_| true)
}

fn main() {
    cpus();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = if args.first().map(String::as_str) == Some("gpu") {
        gpu::run(&args[1..])
    } else if args.first().map(String::as_str) == Some("idle") {
        idle::run(&args[1..])
    } else if args.first().map(String::as_str) == Some("layers") {
        layers::run(&args[1..])
    } else if args.first().map(String::as_str) == Some("groups") {
        groups::run(&args[1..])
    } else if args.first().map(String::as_str) == Some("pingcost") {
        pingcost::run(&args[1..])
    } else if args.first().map(String::as_str) == Some("bare") {
        bare_cmd(&args[1..], false)
    } else if args.first().map(String::as_str) == Some("bare-target") {
        bare_cmd(&args[1..], true)
    } else if args.first().map(String::as_str) == Some("server") {
        let mut listen = "127.0.0.1:7471".to_string();
        let mut bind = None;
        let mut it = args[1..].iter();
        while let Some(a) = it.next() {
            match (a.as_str(), it.next()) {
                ("--listen", Some(v)) => listen = v.clone(),
                ("--bind", Some(v)) => bind = Some(v.clone()),
                ("--cpu", Some(v)) => {
                    if let Err(e) = num(v).and_then(|c| pin_to(Some(c))) {
                        eprintln!("fabriclib-bench server: {e}");
                        std::process::exit(2);
                    }
                }
                ("--engine-cpu", Some(v)) => {
                    let _ = ENGINE_CPU.set(num(v).ok());
                }
                _ => {
                    eprintln!("{USAGE}");
                    std::process::exit(2);
                }
            }
        }
        server::serve(&listen, bind.as_deref()).map(|_| true)
    } else {
        parse(&args).and_then(|o| run(&o))
    };
    match res {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("\nfabriclib-bench: {e}");
            std::process::exit(2);
        }
    }
}
