//! Bundles: a batch of one-work-request writes to one peer goes to the
//! worker as one entry of its request table (docs/design.md, "Batches"),
//! and each write still ends once, on its own, with its own outcome: as
//! its work request comes back, when canceled alone, or when its peer
//! dies or its deadline passes.
use super::faults::{Ends, still_serves};
use super::{TestResult, desc, e2s, local, local_with, wait_hash};
use crate::util::Peer;
use fabriclib::{Deadline, EngineConfig, FLAG_DONE, OnDone, SingleWrite, Status};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const STEP: u64 = 4096;

/// Write `k` of a batch: `len` bytes from `k * STEP` to `k * STEP`.
fn write(k: usize, len: u64, imm: Option<u32>, dst: &Arc<fabriclib::MrDesc>, done: OnDone) -> SingleWrite<'_> {
    let at = k as u64 * STEP;
    SingleWrite { len, imm, src_offset: at, dst, dst_offset: at, done: done.into() }
}

/// 300 writes in one batch (two bundles: 256 and 44), each with an
/// immediate: every one reports once, OK; the peer counts 300; the bytes
/// land; the metrics count 300 single writes. Then, in manual progress, a
/// write canceled before it was posted: it alone reports `Canceled`, its
/// bytes and immediate never arrive, and the others land.
pub fn bundled_writes_end_one_by_one(prov: &str, domains: usize) -> TestResult {
    const N: usize = 300;
    const R: usize = N * STEP as usize;
    let l = local(prov, domains, R, 51)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    p.expect(61, N as u32);
    let ends = Ends::new(N);
    let len = |k: usize| 100 + k as u64 * 13;
    let batch = (0..N).map(|k| write(k, len(k), Some(61), &d, ends.on(k)));
    l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    ends.wait_all(Duration::from_secs(10))?;
    ends.only(&[Status::Ok])?;
    p.fired(61)?;
    let mut want = vec![0u8; R];
    for k in 0..N {
        let (s, n) = (k * STEP as usize, len(k) as usize);
        want[s..s + n].copy_from_slice(&l.mem[s..s + n]);
    }
    wait_hash(&mut p, &want)?;
    let m = l.engine.metrics();
    let g = &m.groups[0].0;
    if (g.started[0], g.requests[0][0], g.in_flight()) != (N as u64, N as u64, 0) {
        return Err(format!(
            "metrics: {} single writes started, {} ended OK, {} in flight (want {N}, {N}, 0)",
            g.started[0],
            g.requests[0][0],
            g.in_flight()
        ));
    }
    drop((l, p));

    // Manual progress: nothing is posted until this thread progresses.
    let cfg = EngineConfig { nic_count: domains, manual_progress: true, ..Default::default() };
    let l = local_with(cfg, prov, R, 52)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    // (A first contact: the bundle waits for the peer's handshake, so the
    // cancel below finds its writes not yet posted.)
    const M: usize = 8;
    p.expect(62, M as u32 - 1);
    let ends = Ends::new(M);
    let first =
        l.engine.submit_single_writes(&l.mr, (0..M).map(|k| write(k, 512, Some(62), &d, ends.on(k)))).map_err(e2s)?;
    l.engine.cancel(fabriclib::RequestId(first.0 + 3)).map_err(e2s)?;
    match l.engine.cancel(fabriclib::RequestId(first.0 + 3)) {
        Err(e) if e.status == Status::NotFound => {}
        r => return Err(format!("a second cancel of the same write: {r:?}")),
    }
    let t = Instant::now();
    while ends.done() < M && t.elapsed() < Duration::from_secs(10) {
        l.engine.progress();
    }
    ends.wait_all(Duration::from_secs(1))?;
    for k in 0..M {
        let want = if k == 3 { Status::Canceled } else { Status::Ok };
        if ends.status(k) != want {
            return Err(format!("write {k} ended {:?}, not {want:?}", ends.status(k)));
        }
    }
    p.fired(62)?;
    let mut want = vec![0u8; R];
    for k in (0..M).filter(|&k| k != 3) {
        let s = k * STEP as usize;
        want[s..s + 512].copy_from_slice(&l.mem[s..s + 512]);
    }
    wait_hash(&mut p, &want)
}

/// A bundled write's work request is in the engine's counters before the
/// write reports (the worker counts a run of completed members once, then
/// reports them: `report_members`): while 4,000 writes of sixteen batches
/// complete, this thread reads how many have stored their flags, then the
/// counters, again and again; the counters never hold fewer completed work
/// requests than writes have reported (a flag's store publishes what the
/// worker counted before it).
pub fn a_bundled_write_is_counted_before_it_reports(prov: &str, domains: usize) -> TestResult {
    const N: usize = 250;
    const BATCHES: usize = 16;
    const R: usize = N * STEP as usize;
    let l = local(prov, domains, R, 54)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    let completed = || -> Result<u64, String> {
        Ok(l.engine.counters().map_err(e2s)?.nics.iter().map(|n| n.total.wrs_completed).sum())
    };
    // The peer greeted first, so that the writes complete while this thread looks.
    still_serves(&l, &mut p, 0x93, 0, 64)?;
    let base = completed()?;
    let flags: Vec<Arc<AtomicU32>> = (0..N * BATCHES).map(|_| Arc::new(AtomicU32::new(0))).collect();
    for b in 0..BATCHES {
        let batch = (0..N).map(|k| write(k, 64, None, &d, OnDone::Flag(flags[b * N + k].clone())));
        l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    }
    // `reported`: the writes before the first whose flag is not stored yet
    // (a lower bound of those reported, so a look is a few loads).
    let (t, mut reported) = (Instant::now(), 0);
    while reported < flags.len() {
        while reported < flags.len() && flags[reported].load(Ordering::Acquire) & FLAG_DONE != 0 {
            reported += 1;
        }
        let counted = completed()? - base;
        if counted < reported as u64 {
            return Err(format!("{reported} writes reported, {counted} work requests counted"));
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err(format!("{reported} of {} writes reported in 10 s", flags.len()));
        }
    }
    match flags.iter().position(|f| f.load(Ordering::Acquire) != FLAG_DONE) {
        Some(k) => Err(format!("write {k} ended {:#x}, not OK", flags[k].load(Ordering::Acquire))),
        None => Ok(()),
    }
}

/// `kill -9` of a peer while bundles of writes to it are in flight: every
/// write ends once, `Ok` or `PeerDown`, within 5 s; the engine goes on
/// serving another peer.
pub fn a_bundle_to_a_killed_peer_ends_each_write_once(prov: &str, domains: usize) -> TestResult {
    const BATCHES: usize = 16;
    const N: usize = 64;
    const LEN: u64 = 16 * 1024;
    const R: usize = N * 4 * STEP as usize;
    let l = local(prov, domains, R, 53)?;
    let mut victim = Peer::spawn(prov, domains, R)?;
    let mut other = Peer::spawn(prov, domains, 1 << 20)?;
    let dv = desc(&victim);
    still_serves(&l, &mut victim, 0x91, 0, 4096)?;
    // As in kill9_mid_transfer: an shm victim is stopped first.
    if prov == "shm" {
        victim.stop()?;
    }
    let ends = Ends::new(BATCHES * N);
    for b in 0..BATCHES {
        let batch = (0..N).map(|k| SingleWrite {
            len: LEN,
            imm: Some(0x92),
            src_offset: k as u64 * LEN,
            dst: &dv,
            dst_offset: k as u64 * LEN,
            done: ends.on(b * N + k).into(),
        });
        l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    }
    std::thread::sleep(Duration::from_millis(2));
    let killed = Instant::now();
    victim.kill9();
    let took = ends.wait_all_since(killed, Duration::from_secs(15))?;
    ends.only(&[Status::Ok, Status::PeerDown])?;
    eprintln!("    kill -9 -> last of {} bundled writes ended {took:.2?}; {:?}", BATCHES * N, ends.tally());
    if took > Duration::from_secs(5) {
        return Err(format!("the writes to the dead peer took {took:?} to end; the limit is 5 s"));
    }
    still_serves(&l, &mut other, 0x93, 0, 64 * 1024)
}

/// A bundle to a peer that never answers (stopped before its handshake),
/// with a deadline: every write ends `TimedOut`, once, in time; the peer
/// is served once it runs again.
pub fn a_bundle_past_its_deadline(prov: &str, domains: usize) -> TestResult {
    const N: usize = 8;
    let l = local(prov, domains, 1 << 20, 54)?;
    let mut fresh = Peer::spawn(prov, domains, 1 << 20)?;
    let d = desc(&fresh);
    fresh.stop()?;
    let deadline = Duration::from_millis(200);
    let ends = Ends::new(N);
    let t = Instant::now();
    let batch = (0..N).map(|k| SingleWrite {
        len: 4096,
        imm: None,
        src_offset: k as u64 * STEP,
        dst: &d,
        dst_offset: k as u64 * STEP,
        done: ends.on(k).deadline(Deadline::After(deadline)),
    });
    l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    let res = ends.wait_all(Duration::from_secs(5));
    let took = t.elapsed();
    fresh.signal("CONT");
    res?;
    ends.only(&[Status::TimedOut])?;
    let limit = deadline + EngineConfig::default().drain_timeout + Duration::from_millis(500);
    if took > limit {
        return Err(format!("the bundle timed out after {took:?} (limit {limit:?})"));
    }
    still_serves(&l, &mut fresh, 0x94, 0, 4096)
}
