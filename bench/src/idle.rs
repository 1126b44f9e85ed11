//! `fabriclib-bench idle`: what an engine costs while it merely waits, and
//! what that waiting costs the first write after a quiet spell, for each
//! idle policy, in one run. Two engines of this process (writer, receiver)
//! per provider and policy:
//! - CPU: the receiver arms an immediate expectation and nothing comes for
//!   `--idle-ms`; the process's CPU time over that wall time (both engines
//!   idle; the writer has nothing armed, so it sleeps under every policy);
//! - first write: `--samples` times, after a quiet spell of `--quiet-ms`, the
//!   writer submits an 8-byte write with the immediate and the application
//!   thread spins on the receiver's expectation flag: submit → flag seen.
//!
//! `--idle-nap-us` sets both engines' `idle_nap_us` (default 500): how long
//! a sleeping worker's naps last where a doorbell or nothing ends them.
//!
//! Then the floor, without an engine (`raw_wake`): the same quiet spells and
//! an 8-byte message to a thread that spins on a non-blocking loopback TCP
//! socket, is blocked reading it, or is parked (a futex) and unparked. What
//! blocking adds there is the kernel's wake of a sleeping thread, which no
//! idle policy can take off the first write after a quiet spell.
use fabriclib::{EngineConfig, FLAG_DONE, IdlePolicy, OnDone, TransferEngine};
use serde_json::json;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

type R<T> = Result<T, String>;

fn e2s(e: fabriclib::Error) -> String {
    e.to_string()
}

/// This process's CPU time (user + system), in seconds.
fn cpu_seconds() -> f64 {
    fabriclib::os::process_cpu_seconds()
}

struct Pair {
    w: TransferEngine,
    r: TransferEngine,
    src: fabriclib::MrHandle,
    dst: fabriclib::MrHandle,
    _mem: (Vec<u8>, Vec<u8>),
}

fn pair(provider: &str, policy: IdlePolicy, nap_us: Option<u64>) -> R<Pair> {
    let d = EngineConfig::default();
    let cfg = EngineConfig {
        provider: Some(provider.into()),
        bind_addr: Some("127.0.0.1".into()),
        idle_policy: policy,
        idle_nap_us: nap_us.unwrap_or(d.idle_nap_us),
        ..d
    };
    let (w, r) = (TransferEngine::new(&cfg).map_err(e2s)?, TransferEngine::new(&cfg).map_err(e2s)?);
    let (mut a, mut b) = (vec![1u8; 4096], vec![0u8; 4096]);
    // SAFETY: the buffers live in the Pair, dropped after the registrations.
    let src = unsafe { w.register(a.as_mut_ptr(), a.len()) }.map_err(e2s)?;
    // SAFETY: as above: b lives in the Pair too.
    let dst = unsafe { r.register(b.as_mut_ptr(), b.len()) }.map_err(e2s)?;
    Ok(Pair { w, r, src, dst, _mem: (a, b) })
}

/// Arms an expectation of one `imm` on the receiver; returns its flag.
fn arm(p: &Pair, imm: u32) -> R<Arc<AtomicU32>> {
    let f = Arc::new(AtomicU32::new(0));
    p.r.expect_imm_count(imm, 1, OnDone::Flag(f.clone())).map_err(e2s)?;
    Ok(f)
}

/// Spins until `f` holds `want`, yielding now and then (on a 2-core host the
/// other side's threads need the core too); false after 10 s.
fn spin_until(f: &AtomicU32, want: impl Fn(u32) -> bool, t0: Instant) -> bool {
    let mut spins = 0u32;
    while !want(f.load(Ordering::Acquire)) {
        spins = spins.wrapping_add(1);
        if spins % 8 == 0 {
            std::thread::yield_now();
            if t0.elapsed() > Duration::from_secs(10) {
                return false;
            }
        }
        std::hint::spin_loop();
    }
    true
}

/// How the raw floor's receiving thread waits.
#[derive(Clone, Copy)]
enum RawWait {
    /// Spins on a non-blocking TCP socket.
    TcpSpin,
    /// Blocked in `read` on a TCP socket.
    TcpBlock,
    /// Parked on a futex (`thread::park`); the writer unparks it.
    Futex,
}

/// The raw floor: `samples` times, after `quiet_ms`, the application thread
/// sends 8 bytes (or unparks) and spins until the receiving thread has seen
/// them; returns the sorted latencies in µs.
fn raw_wake(how: RawWait, quiet_ms: u64, samples: usize) -> R<Vec<f64>> {
    let e = |e: std::io::Error| e.to_string();
    let l = TcpListener::bind("127.0.0.1:0").map_err(e)?;
    let mut tx = TcpStream::connect(l.local_addr().map_err(e)?).map_err(e)?;
    let (mut rx, _) = l.accept().map_err(e)?;
    tx.set_nodelay(true).map_err(e)?;
    rx.set_nonblocking(matches!(how, RawWait::TcpSpin)).map_err(e)?;
    let seen = Arc::new(AtomicU32::new(0));
    let s = seen.clone();
    let receiver = std::thread::spawn(move || {
        let mut buf = [0u8; 8];
        for i in 1..=samples as u32 {
            match how {
                RawWait::Futex => {
                    while s.load(Ordering::Acquire) != u32::MAX {
                        std::thread::park();
                    }
                }
                _ => {
                    let mut got = 0;
                    let mut spins = 0u32;
                    while got < buf.len() {
                        match rx.read(&mut buf[got..]) {
                            Ok(0) => return,
                            Ok(n) => got += n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                spins = spins.wrapping_add(1);
                                if spins % 64 == 0 {
                                    std::thread::yield_now();
                                }
                            }
                            Err(_) => return,
                        }
                    }
                }
            }
            s.store(i, Ordering::Release);
        }
    });
    let mut lat = Vec::new();
    for i in 1..=samples as u32 {
        std::thread::sleep(Duration::from_millis(quiet_ms));
        let t0 = Instant::now();
        match how {
            RawWait::Futex => {
                seen.store(u32::MAX, Ordering::Release);
                receiver.thread().unpark();
            }
            _ => tx.write_all(&[1u8; 8]).map_err(e)?,
        }
        if !spin_until(&seen, |v| v == i, t0) {
            return Err("the raw receiver did not see the message within 10 s".into());
        }
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    drop(tx);
    receiver.join().map_err(|_| "the raw receiver panicked".to_string())?;
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(lat)
}

/// One write with `imm`; returns when the receiver's flag says it landed.
fn write_and_wait(p: &Pair, imm: u32, f: &AtomicU32) -> R<Duration> {
    let t0 = Instant::now();
    p.w.submit_single_write(8, Some(imm), &p.src, 0, p.dst.descriptor(), 0, OnDone::Nothing).map_err(e2s)?;
    if !spin_until(f, |v| v & FLAG_DONE != 0, t0) {
        return Err("the write did not land within 10 s".into());
    }
    Ok(t0.elapsed())
}

pub fn run(args: &[String]) -> R<bool> {
    let (mut idle_ms, mut quiet_ms, mut samples, mut json_out, mut nap_us) = (2000u64, 50u64, 20usize, None, None);
    let mut providers = vec!["tcp;ofi_rxm".to_string(), "shm".to_string()];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--idle-ms" => idle_ms = num(val()?)?,
            "--quiet-ms" => quiet_ms = num(val()?)?,
            "--samples" => samples = num(val()?)? as usize,
            "--idle-nap-us" => nap_us = Some(num(val()?)?),
            "--provider" => providers = val()?.split(',').map(str::to_string).collect(),
            "--json" => json_out = Some(val()?),
            other => {
                return Err(format!(
                    "idle: unknown option {other} (--idle-ms, --quiet-ms, --samples, --idle-nap-us, --provider, --json)"
                ));
            }
        }
    }
    println!(
        "idle: CPU of an idle engine pair with an armed expectation over {idle_ms} ms; first write after {quiet_ms} ms \
         quiet, {samples} samples"
    );
    println!(
        "{:<12} {:<6} {:>14} {:>16} {:>16} {:>10}",
        "provider", "policy", "CPU s/wall s", "1st write p50", "1st write max", "blocks?"
    );
    let mut rows = Vec::new();
    for prov in &providers {
        for (name, policy) in [("spin", IdlePolicy::Spin), ("auto", IdlePolicy::Auto), ("block", IdlePolicy::Block)] {
            let p = pair(prov, policy, nap_us)?;
            // Warm up: the handshake and the first write.
            let f = arm(&p, 1)?;
            write_and_wait(&p, 1, &f)?;
            let f = arm(&p, 2)?;
            std::thread::sleep(Duration::from_millis(20)); // past the idle spin
            let (c0, t0) = (cpu_seconds(), Instant::now());
            std::thread::sleep(Duration::from_millis(idle_ms));
            let cpu = (cpu_seconds() - c0) / t0.elapsed().as_secs_f64();
            write_and_wait(&p, 2, &f)?;
            let mut lat = Vec::new();
            for i in 0..samples {
                let imm = 10 + i as u32;
                let f = arm(&p, imm)?;
                std::thread::sleep(Duration::from_millis(quiet_ms));
                lat.push(write_and_wait(&p, imm, &f)?.as_secs_f64() * 1e6);
            }
            lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let (p50, max) = (lat[lat.len() / 2], lat[lat.len() - 1]);
            // What the idle worker sleeps on: a wait object (tcp), its doorbell (shm), or naps.
            let blocks = match policy {
                IdlePolicy::Spin => "no",
                _ if prov.starts_with("tcp") => "fd",
                // Its doorbell (src/bell.rs), rung by the writer's engine.
                _ if prov == "shm" => "bell",
                IdlePolicy::Auto => "no",
                IdlePolicy::Block => "naps",
            };
            println!("{prov:<12} {name:<6} {cpu:>14.3} {:>13.1} us {:>13.1} us {blocks:>10}", p50, max);
            rows.push(json!({ "provider": prov, "policy": name, "cpu_per_wall": cpu, "first_write_p50_us": p50,
                              "first_write_max_us": max, "samples": samples, "idle_ms": idle_ms, "quiet_ms": quiet_ms }));
        }
    }
    // The floor: the same quiet spells and message, no engine.
    for (prov, name, how) in [
        ("raw tcp", "spin", RawWait::TcpSpin),
        ("raw tcp", "block", RawWait::TcpBlock),
        ("raw futex", "block", RawWait::Futex),
    ] {
        let lat = raw_wake(how, quiet_ms, samples)?;
        let (p50, max) = (lat[lat.len() / 2], lat[lat.len() - 1]);
        println!("{prov:<12} {name:<6} {:>14} {:>13.1} us {:>13.1} us {:>10}", "-", p50, max, "-");
        rows.push(json!({ "provider": prov, "policy": name, "first_write_p50_us": p50, "first_write_max_us": max,
                          "samples": samples, "quiet_ms": quiet_ms }));
    }
    if let Some(f) = json_out {
        std::fs::write(&f, serde_json::to_string_pretty(&json!({ "idle": rows })).unwrap())
            .map_err(|e| format!("{f}: {e}"))?;
    }
    Ok(true)
}
