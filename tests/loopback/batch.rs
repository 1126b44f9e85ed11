//! Batches of single writes (`submit_single_writes`): each write is a request
//! of its own (its own report, its own immediate, consecutive ids), and a
//! batch is submitted all or none.
use super::{TestResult, desc, e2s, flag, local, local_with, wait_flag, wait_hash};
use crate::util::Peer;
use fabriclib::{EngineConfig, OnDone, SingleWrite, Status};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const R: usize = 1 << 20;
const STEP: u64 = 4096;

/// Write `k`: 1000 + k bytes from `k * STEP` to `at + k * STEP`.
fn write<'a>(k: u64, at: u64, imm: Option<u32>, dst: &'a Arc<fabriclib::MrDesc>, done: OnDone) -> SingleWrite<'a> {
    SingleWrite { len: 1000 + k, imm, src_offset: k * STEP, dst, dst_offset: at + k * STEP, done: done.into() }
}

pub fn batch_of_single_writes(prov: &str, domains: usize) -> TestResult {
    let l = local(prov, domains, R, 41)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    let mut want = vec![0u8; R];
    // 64 writes, one immediate each; half report by flag, half by callback.
    const N: u64 = 64;
    p.expect(21, N as u32);
    let flags: Vec<Arc<AtomicU32>> = (0..N / 2).map(|_| flag()).collect();
    let (calls, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let batch = (0..N).map(|k| {
        let done = match k % 2 {
            0 => OnDone::Flag(flags[k as usize / 2].clone()),
            _ => {
                let (calls, failed) = (calls.clone(), failed.clone());
                OnDone::callback(move |r| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    if r.is_err() {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                })
            }
        };
        write(k, 0, Some(21), &d, done)
    });
    let first = l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    for f in &flags {
        wait_flag(f)?;
    }
    let t = Instant::now();
    while calls.load(Ordering::SeqCst) < N as usize / 2 && t.elapsed() < super::WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    if calls.load(Ordering::SeqCst) != N as usize / 2 || failed.load(Ordering::SeqCst) != 0 {
        return Err(format!(
            "callbacks: {} calls, {} failed",
            calls.load(Ordering::SeqCst),
            failed.load(Ordering::SeqCst)
        ));
    }
    p.fired(21)?;
    for k in 0..N {
        let (s, n) = ((k * STEP) as usize, 1000 + k as usize);
        want[s..s + n].copy_from_slice(&l.mem[s..s + n]);
    }
    // Ids: the batch took N in a row.
    let next = l.engine.submit_single_write(0, Some(22), &l.mr, 0, &d, 0, OnDone::Nothing).map_err(e2s)?;
    if next.0 != first.0 + N {
        return Err(format!("the batch's first id is {}, the next submit's {}: not {N} apart", first.0, next.0));
    }
    // All or none: a bad write anywhere submits nothing and reports nothing
    // (its good writes would land past 512 KiB: the hash below would differ).
    let reported = Arc::new(AtomicUsize::new(0));
    let counted = |r: &Arc<AtomicUsize>| {
        let r = r.clone();
        OnDone::callback(move |_| {
            r.fetch_add(1, Ordering::SeqCst);
        })
    };
    let bad = (0..8).map(|k| write(k, if k == 5 { R as u64 } else { R as u64 / 2 }, None, &d, counted(&reported)));
    match l.engine.submit_single_writes(&l.mr, bad) {
        Err(e) if e.status == Status::OutOfBounds && e.message.contains("write 5 of the batch") => {}
        r => return Err(format!("a batch with a bad sixth write: {r:?}")),
    }
    let none = l.engine.submit_single_writes(&l.mr, std::iter::empty());
    if none.as_ref().map_err(|e| e.status) != Err(Status::InvalidArgument) {
        return Err(format!("an empty batch: {none:?}"));
    }
    // The zero-byte write above came through; nothing of the refused batch did.
    p.expect(22, 1);
    p.fired(22)?;
    wait_hash(&mut p, &want)?;
    if reported.load(Ordering::SeqCst) != 0 {
        return Err("a write of a refused batch reported".into());
    }
    Ok(())
}

/// A batch in manual progress, and `max_inflight` for a batch: larger than
/// it, refused outright; with no room for all of it, `Again` and none sent.
pub fn batch_in_manual_progress_and_max_inflight(prov: &str, domains: usize) -> TestResult {
    let cfg = EngineConfig { nic_count: domains, manual_progress: true, max_inflight: 8, ..Default::default() };
    let l = local_with(cfg, prov, R, 42)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    let over = (0..9).map(|k| write(k, 0, Some(31), &d, OnDone::Nothing));
    match l.engine.submit_single_writes(&l.mr, over) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("max_inflight") => {}
        r => return Err(format!("a batch over max_inflight: {r:?}")),
    }
    // One request in flight (manual progress: it stays until progressed),
    // then a batch of 8: no room for all, so none goes.
    let one = flag();
    l.engine.submit_single_write(0, Some(32), &l.mr, 0, &d, 0, OnDone::Flag(one.clone())).map_err(e2s)?;
    let full = (0..8).map(|k| write(k, 0, Some(31), &d, OnDone::Nothing));
    match l.engine.submit_single_writes(&l.mr, full) {
        Err(e) if e.status == Status::Again => {}
        r => return Err(format!("a batch of 8 with one of 8 in flight: {r:?}")),
    }
    l.engine.await_flag(&one, Some(super::WAIT)).map_err(e2s)?;
    // Now it fits: 8 writes, each with its flag but the last, whose
    // callback runs inside `progress` on this thread; driven by this thread.
    p.expect(31, 8);
    let flags: Vec<Arc<AtomicU32>> = (0..7).map(|_| flag()).collect();
    let called = Arc::new(AtomicUsize::new(0));
    let me = std::thread::current().id();
    let batch = (0..8).map(|k| {
        let done = match flags.get(k as usize) {
            Some(f) => OnDone::Flag(f.clone()),
            None => {
                let called = called.clone();
                OnDone::callback(move |r| {
                    let here = std::thread::current().id() == me;
                    called.fetch_add(if r.is_ok() && here { 1 } else { 100 }, Ordering::SeqCst);
                })
            }
        };
        write(k, 0, Some(31), &d, done)
    });
    l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    let t = Instant::now();
    while called.load(Ordering::SeqCst) == 0 && t.elapsed() < super::WAIT {
        l.engine.progress();
    }
    if called.load(Ordering::SeqCst) != 1 {
        return Err(format!(
            "the batch's callback: {} (1: once, OK, on the progressing thread)",
            called.load(Ordering::SeqCst)
        ));
    }
    for f in &flags {
        let v = l.engine.await_flag(f, Some(super::WAIT)).map_err(e2s)?;
        if Status::from_code((v & 0xffff) as i32) != Some(Status::Ok) {
            return Err(format!("a write of the batch ended with {v:#x}"));
        }
    }
    p.fired(31)?;
    let mut want = vec![0u8; R];
    for k in 0..8u64 {
        let (s, n) = ((k * STEP) as usize, 1000 + k as usize);
        want[s..s + n].copy_from_slice(&l.mem[s..s + n]);
    }
    // The first write above (zero bytes) changed nothing.
    wait_hash(&mut p, &want)?;
    p.expect(32, 1);
    p.fired(32)?;
    // A batch still queued when the engine goes (nothing progressed it):
    // each of its writes reports SHUTDOWN, once. The engine goes before the
    // peer: nothing would progress it to answer the peer's goodbye.
    let queued: Vec<Arc<AtomicU32>> = (0..4).map(|_| flag()).collect();
    let batch = (0..4).map(|k| write(k, 0, None, &d, OnDone::Flag(queued[k as usize].clone())));
    l.engine.submit_single_writes(&l.mr, batch).map_err(e2s)?;
    drop(l);
    for f in &queued {
        let v = f.load(Ordering::Acquire);
        if v & fabriclib::FLAG_DONE == 0 || Status::from_code((v & 0xffff) as i32) != Some(Status::Shutdown) {
            return Err(format!("a write of a batch queued at shutdown: flag {v:#x}, not SHUTDOWN"));
        }
    }
    Ok(())
}
