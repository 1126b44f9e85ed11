//! Multi-process loopback tests: this process runs one engine, and spawns
//! peer processes (this same binary with `--peer`) that run the others, over
//! real libfabric providers. Every test compares bytes (as region hashes) and
//! counts immediates, on every provider of the matrix and with 1 and 2
//! NICs.
//!
//! Run: `cargo test --test loopback` (all), or with a filter:
//! `cargo test --test loopback -- paged`. Providers: `FABRICLIB_TEST_PROVIDERS`
//! (comma-separated; default `tcp;ofi_rxm,shm`; `verbs` is the verbs backend,
//! run in a Soft-RoCE VM by scripts/test-verbs.sh); NIC counts:
//! `FABRICLIB_TEST_NICS` (default `1,2`). A test still running after
//! `FABRICLIB_TEST_TIMEOUT_S` (default 300) fails the run with every
//! thread's state and backtrace (watchdog.rs).
mod batch;
mod bundles;
mod faults;
mod groups;
mod imm;
mod lifetimes;
mod metrics;
mod netns;
mod nics;
mod peer;
mod recv;
mod removal;
mod soak;
mod util;
mod watchdog;

use fabriclib::{
    EngineConfig, FLAG_DONE, MrDesc, MrHandle, NetAddr, OnDone, Pages, ScatterDst, Status, TransferEngine,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};
use util::{Peer, Rng, WAIT, fnv64};

type TestResult = Result<(), String>;

/// One side's engine plus a registered region.
struct Local {
    engine: TransferEngine,
    mem: Vec<u8>,
    mr: MrHandle,
}

fn local(provider: &str, domains: usize, region: usize, seed: u64) -> Result<Local, String> {
    local_with(EngineConfig { nic_count: domains, ..Default::default() }, provider, region, seed)
}

fn local_with(cfg: EngineConfig, provider: &str, region: usize, seed: u64) -> Result<Local, String> {
    let bind_addr = cfg.bind_addr.clone().or(Some("127.0.0.1".into()));
    let cfg = EngineConfig { provider: Some(provider.into()), bind_addr, ..cfg };
    let engine = TransferEngine::new(&cfg).map_err(|e| e.to_string())?;
    let mut mem = vec![0u8; region];
    Rng(seed).fill(&mut mem);
    // SAFETY: mem lives in Local next to the handle and is dropped after it.
    let mr = unsafe { engine.register(mem.as_mut_ptr(), region) }.map_err(|e| e.to_string())?;
    Ok(Local { engine, mem, mr })
}

fn peers(provider: &str, domains: usize, n: usize, region: usize) -> Result<Vec<Peer>, String> {
    (0..n).map(|_| Peer::spawn(provider, domains, region)).collect()
}

fn desc(p: &Peer) -> Arc<MrDesc> {
    Arc::new(MrDesc::parse(&p.desc).unwrap())
}

fn addr(p: &Peer) -> NetAddr {
    NetAddr::parse(&p.addr).unwrap()
}

fn flag() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

/// Waits for a completion flag and checks its status.
fn wait_flag(f: &AtomicU32) -> TestResult {
    let t = Instant::now();
    loop {
        let v = f.load(Ordering::Acquire);
        if v & FLAG_DONE != 0 {
            let st = Status::from_code((v & 0xffff) as i32);
            return if st == Some(Status::Ok) { Ok(()) } else { Err(format!("request ended with {st:?}")) };
        }
        if t.elapsed() > WAIT {
            return Err("request did not complete in time".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Writes without an immediate have no "landed" signal: poll the peer's hash.
fn wait_hash(p: &mut Peer, want: &[u8]) -> TestResult {
    let want = fnv64(want);
    let t = Instant::now();
    loop {
        let got = p.hash()?;
        if got == want {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(20) {
            return Err(format!("peer region hash {got:016x}, expected {want:016x}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check_hash(p: &mut Peer, want: &[u8]) -> TestResult {
    let got = p.hash()?;
    if got != fnv64(want) {
        Err(format!("bytes differ: peer hash {got:016x}, expected {:016x}", fnv64(want)))
    } else {
        Ok(())
    }
}

fn e2s(e: fabriclib::Error) -> String {
    e.to_string()
}

fn single_writes(prov: &str, domains: usize) -> TestResult {
    const R: usize = 1 << 20;
    let l = local(prov, domains, R, 1)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    let mut want = vec![0u8; R];
    // A write with an immediate: exactly one immediate once every byte landed.
    p.expect(7, 1);
    let f = flag();
    l.engine.submit_single_write(300_000, Some(7), &l.mr, 1000, &d, 5000, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    want[5000..305_000].copy_from_slice(&l.mem[1000..301_000]);
    p.fired(7)?;
    check_hash(&mut p, &want)?;
    // Zero bytes, immediate only.
    p.expect(8, 1);
    l.engine.submit_single_write(0, Some(8), &l.mr, 0, &d, 0, OnDone::Nothing).map_err(e2s)?;
    p.fired(8)?;
    // Immediates that land before the expectation count towards it.
    let (f1, f2) = (flag(), flag());
    l.engine.submit_single_write(16, Some(11), &l.mr, 0, &d, R as u64 - 16, OnDone::Flag(f1.clone())).map_err(e2s)?;
    l.engine.submit_single_write(16, Some(11), &l.mr, 16, &d, R as u64 - 32, OnDone::Flag(f2.clone())).map_err(e2s)?;
    wait_flag(&f1)?;
    wait_flag(&f2)?;
    std::thread::sleep(Duration::from_millis(50));
    p.expect(11, 2);
    p.fired(11)?;
    want[R - 16..].copy_from_slice(&l.mem[..16]);
    want[R - 32..R - 16].copy_from_slice(&l.mem[16..32]);
    // A large write without an immediate (sharded by bytes over the domains).
    let (tx, rx) = channel();
    l.engine
        .submit_single_write(600_000, None, &l.mr, 400_000, &d, 400_000, OnDone::callback(move |r| tx.send(r).unwrap()))
        .map_err(e2s)?;
    rx.recv_timeout(WAIT).map_err(|e| e.to_string())?.map_err(e2s)?;
    want[400_000..1_000_000].copy_from_slice(&l.mem[400_000..1_000_000]);
    wait_hash(&mut p, &want)
}

/// Writes above the provider's max message size are split (the software
/// providers allow 2^64 bytes, so the test caps it at 64 KiB); a write with an
/// immediate must fit one work request.
fn split_at_max_msg_size(prov: &str, domains: usize) -> TestResult {
    const R: usize = 1 << 20;
    let cfg = EngineConfig { nic_count: domains, max_msg_size: Some(64 * 1024), ..Default::default() };
    let l = local_with(cfg, prov, R, 12)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    let f = flag();
    l.engine.submit_single_write(700_001, None, &l.mr, 3, &d, 11, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    let mut want = vec![0u8; R];
    want[11..700_012].copy_from_slice(&l.mem[3..700_004]);
    wait_hash(&mut p, &want)?;
    match l.engine.submit_single_write(65_537, Some(1), &l.mr, 0, &d, 0, OnDone::Nothing) {
        Err(e) if e.status == Status::InvalidArgument => Ok(()),
        other => Err(format!("write with imm over max_msg_size: {other:?}")),
    }
}

fn paged_writes(prov: &str, domains: usize) -> TestResult {
    const PAGE: u64 = 2048;
    const PAGES: usize = 10_000;
    const SLOTS: usize = 10_240;
    // Source pages are PAGE bytes at stride 2*PAGE after a 512-byte offset.
    let src_len = 512 + SLOTS * 2 * PAGE as usize;
    let dst_len = SLOTS * PAGE as usize;
    let l = local(prov, domains, src_len, 2)?;
    let mut p = Peer::spawn(prov, domains, dst_len)?;
    let d = desc(&p);
    let mut rng = Rng(99);
    let src_idx: Vec<u32> = rng.perm(SLOTS)[..PAGES].to_vec();
    let dst_idx: Vec<u32> = rng.perm(SLOTS)[..PAGES].to_vec();
    p.expect(77, PAGES as u32);
    let f = flag();
    l.engine
        .submit_paged_writes(
            PAGE,
            Some(77),
            &l.mr,
            Pages { indices: &src_idx, stride: 2 * PAGE, offset: 512 },
            &d,
            Pages { indices: &dst_idx, stride: PAGE, offset: 0 },
            OnDone::Flag(f.clone()),
        )
        .map_err(e2s)?;
    wait_flag(&f)?;
    p.fired(77)?;
    let mut want = vec![0u8; dst_len];
    for (s, t) in src_idx.iter().zip(&dst_idx) {
        let so = 512 + *s as usize * 2 * PAGE as usize;
        let to = *t as usize * PAGE as usize;
        want[to..to + PAGE as usize].copy_from_slice(&l.mem[so..so + PAGE as usize]);
    }
    check_hash(&mut p, &want)
}

fn scatter_and_barrier(prov: &str, domains: usize) -> TestResult {
    const R: usize = 256 * 1024;
    let l = local(prov, domains, 1 << 20, 3)?;
    let mut ps = peers(prov, domains, 3, R)?;
    let dsts: Vec<ScatterDst> = (0..3)
        .map(|i| ScatterDst {
            len: 10_000 + i * 1234,
            src_offset: i * 100_000 + 3,
            dst: desc(&ps[i as usize]),
            dst_offset: 777 * i,
        })
        .collect();
    let mut wants = vec![vec![0u8; R]; 3];
    for (i, s) in dsts.iter().enumerate() {
        let (so, to, n) = (s.src_offset as usize, s.dst_offset as usize, s.len as usize);
        wants[i][to..to + n].copy_from_slice(&l.mem[so..so + n]);
    }
    for p in ps.iter_mut() {
        p.expect(5, 1);
    }
    let f = flag();
    l.engine.submit_scatter(None, Some(5), &l.mr, &dsts, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    for (p, w) in ps.iter_mut().zip(&wants) {
        p.fired(5)?;
        check_hash(p, w)?;
    }
    // Through a peer set: same bytes to other offsets, one immediate per peer.
    let group = l.engine.add_peer_set(&ps.iter().map(addr).collect::<Vec<_>>()).map_err(e2s)?;
    let dsts2: Vec<ScatterDst> = dsts.iter().map(|s| ScatterDst { dst_offset: 200_000, ..s.clone() }).collect();
    for (i, s) in dsts2.iter().enumerate() {
        let (so, n) = (s.src_offset as usize, s.len as usize);
        wants[i][200_000..200_000 + n].copy_from_slice(&l.mem[so..so + n]);
        ps[i].expect(6, 1);
    }
    l.engine.submit_scatter(Some(group), Some(6), &l.mr, &dsts2, OnDone::Nothing).map_err(e2s)?;
    for (p, w) in ps.iter_mut().zip(&wants) {
        p.fired(6)?;
        check_hash(p, w)?;
    }
    // Barriers: one immediate per destination, with and without the group.
    let descs: Vec<Arc<MrDesc>> = ps.iter().map(desc).collect();
    for p in ps.iter_mut() {
        p.expect(9, 2);
    }
    let (f1, f2) = (flag(), flag());
    l.engine.submit_barrier(None, 9, &descs, OnDone::Flag(f1.clone())).map_err(e2s)?;
    l.engine.submit_barrier(Some(group), 9, &descs, OnDone::Flag(f2.clone())).map_err(e2s)?;
    wait_flag(&f1)?;
    wait_flag(&f2)?;
    for p in ps.iter_mut() {
        p.fired(9)?;
    }
    // Removing the set: a request through it still pending ends — OK if its
    // worker had started it, else BadHandle — and new ones are refused.
    let f3 = flag();
    l.engine.submit_barrier(Some(group), 10, &descs, OnDone::Flag(f3.clone())).map_err(e2s)?;
    l.engine.remove_peer_set(group).map_err(e2s)?;
    match wait_flag(&f3) {
        Ok(()) => {}
        Err(e) if e.contains("BadHandle") => {}
        Err(e) => return Err(format!("a barrier through a removed set: {e}")),
    }
    match l.engine.submit_barrier(Some(group), 10, &descs, OnDone::Nothing) {
        Err(e) if e.status == Status::BadHandle => {}
        other => return Err(format!("a barrier through a removed set was not refused: {other:?}")),
    }
    match l.engine.remove_peer_set(group) {
        Err(e) if e.status == Status::BadHandle => Ok(()),
        other => Err(format!("removing a set twice: {other:?}")),
    }
}

fn four_threads(prov: &str, domains: usize) -> TestResult {
    const Q: usize = 1 << 20;
    let l = Arc::new(local(prov, domains, 4 * Q, 6)?);
    let mut p = Peer::spawn(prov, domains, 4 * Q)?;
    let d = desc(&p);
    for t in 0..4 {
        p.expect(100 + t, 256);
        p.expect(200 + t, 16);
    }
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            let (l, d) = (l.clone(), d.clone());
            std::thread::spawn(move || -> TestResult {
                let base = t as u64 * Q as u64;
                let idx: Vec<u32> = Rng(t as u64 + 1).perm(256);
                let flags: Vec<_> = (0..17).map(|_| flag()).collect();
                let pages = Pages { indices: &idx, stride: 2048, offset: base };
                l.engine
                    .submit_paged_writes(2048, Some(100 + t), &l.mr, pages, &d, pages, OnDone::Flag(flags[16].clone()))
                    .map_err(e2s)?;
                for i in 0..16u64 {
                    let off = base + 512 * 1024 + i * 4096;
                    l.engine
                        .submit_single_write(
                            4096,
                            Some(200 + t),
                            &l.mr,
                            off,
                            &d,
                            off,
                            OnDone::Flag(flags[i as usize].clone()),
                        )
                        .map_err(e2s)?;
                }
                flags.iter().try_for_each(|f| wait_flag(f))
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "submit thread panicked".to_string())??;
    }
    let mut want = vec![0u8; 4 * Q];
    for t in 0..4 {
        for i in 0..256 {
            let o = t * Q + i * 2048;
            want[o..o + 2048].copy_from_slice(&l.mem[o..o + 2048]);
        }
        let o = t * Q + 512 * 1024;
        want[o..o + 16 * 4096].copy_from_slice(&l.mem[o..o + 16 * 4096]);
    }
    for t in 0..4 {
        p.fired(100 + t)?;
        p.fired(200 + t)?;
    }
    check_hash(&mut p, &want)
}

fn bad_input(prov: &str, domains: usize) -> TestResult {
    let l = local(prov, domains, 4096, 7)?;
    let other = local(prov, domains, 4096, 8)?;
    let p = Peer::spawn(prov, domains, 4096)?;
    let d = desc(&p);
    let expect = |r: fabriclib::Result<fabriclib::RequestId>, s: Status, what: &str| -> TestResult {
        match r {
            Err(e) if e.status == s => Ok(()),
            other => Err(format!("{what}: expected {s:?}, got {other:?}")),
        }
    };
    let e = &l.engine;
    expect(e.submit_single_write(0, None, &l.mr, 0, &d, 0, OnDone::Nothing), Status::InvalidArgument, "zero length")?;
    expect(e.submit_single_write(1, None, &l.mr, 4096, &d, 0, OnDone::Nothing), Status::OutOfBounds, "src past end")?;
    expect(e.submit_single_write(8, None, &l.mr, 0, &d, 4090, OnDone::Nothing), Status::OutOfBounds, "dst past end")?;
    expect(
        e.submit_single_write(8, None, &l.mr, u64::MAX, &d, 0, OnDone::Nothing),
        Status::OutOfBounds,
        "offset overflow",
    )?;
    expect(e.submit_single_write(8, None, &other.mr, 0, &d, 0, OnDone::Nothing), Status::BadHandle, "foreign region")?;
    let pg = |idx: &'static [u32]| Pages { indices: idx, stride: 1024, offset: 0 };
    expect(
        e.submit_paged_writes(1024, None, &l.mr, pg(&[0, 3]), &d, pg(&[0, 4]), OnDone::Nothing),
        Status::OutOfBounds,
        "page index",
    )?;
    expect(
        e.submit_paged_writes(1024, None, &l.mr, pg(&[]), &d, pg(&[]), OnDone::Nothing),
        Status::InvalidArgument,
        "no pages",
    )?;
    expect(
        e.submit_paged_writes(0, None, &l.mr, pg(&[0]), &d, pg(&[0]), OnDone::Nothing),
        Status::InvalidArgument,
        "zero page",
    )?;
    expect(e.submit_scatter(None, None, &l.mr, &[], OnDone::Nothing), Status::InvalidArgument, "empty scatter")?;
    expect(e.expect_imm_count(1, 0, OnDone::Nothing), Status::InvalidArgument, "count 0")?;
    e.expect_imm_count(1, 5, OnDone::Nothing).map_err(e2s)?;
    expect(e.expect_imm_count(1, 5, OnDone::Nothing), Status::AlreadyExists, "second expectation")?;
    expect(e.submit_send(&addr(&p), &vec![0u8; 70_000], OnDone::Nothing), Status::InvalidArgument, "oversized send")?;
    // shm: a send over its 4 KiB inject size would wait on the receiver's answer (and a dead
    // receiver would stall every later one): refused. (The sender's epoch travels in the
    // completion's data there, not in 8 bytes of the message.)
    let max = e.max_send_size();
    if max != if prov == "shm" { 4096 } else { 64 * 1024 } {
        return Err(format!("max_send_size {max} on {prov}"));
    }
    expect(e.submit_send(&addr(&p), &vec![0u8; max + 1], OnDone::Nothing), Status::InvalidArgument, "send over max")?;
    e.submit_send(&addr(&p), &vec![0u8; max], OnDone::Nothing).map_err(e2s)?;
    Ok(())
}

/// Destroying an engine with 10,000 requests queued or on the wire, an
/// armed expectation, a receive pool and a request waiting for a peer that
/// never answers: every request ends exactly once (done, or shut down), the
/// expectation and the pool end with `Shutdown` exactly once, the destroy
/// returns within the shutdown drain, and the peer goes on serving.
fn destroy_with_10000_pending(prov: &str, domains: usize) -> TestResult {
    const N: usize = 10_000;
    let cfg = EngineConfig { nic_count: domains, submit_queue: 2 * N, ..Default::default() };
    let l = local_with(cfg, prov, 4096 * 16, 10)?;
    let mut p = Peer::spawn(prov, domains, 4096 * 16)?;
    let d = desc(&p);
    // The others: an expectation, a pool, a write parked on a stopped peer's handshake.
    let others = faults::Ends::new(2);
    l.engine.expect_imm_count(0xdead, 1, others.on(0)).map_err(e2s)?;
    let mut mute = Peer::spawn(prov, domains, 4096)?;
    mute.stop()?;
    l.engine.submit_single_write(64, None, &l.mr, 0, &desc(&mute), 0, others.on(1)).map_err(e2s)?;
    let pool_ends = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let pe = pool_ends.clone();
    l.engine
        .submit_recvs(64, 4, move |m| {
            if m.is_err_and(|e| e.status == Status::Shutdown) {
                pe.fetch_add(1, Ordering::SeqCst);
            }
        })
        .map_err(e2s)?;
    let ends = faults::Ends::new(N);
    for i in 0..N {
        let off = (i % 16) as u64 * 4096;
        l.engine.submit_single_write(4096, None, &l.mr, off, &d, off, ends.on(i)).map_err(e2s)?;
    }
    let t = Instant::now();
    drop(l);
    let took = t.elapsed();
    // Killed, not continued: libfabric 1.17's shm crashes a process that
    // handles the first message of a peer whose endpoint has closed since
    // (docs/failure-semantics.md); this one holds our greeting.
    mute.kill9();
    others.wait_all(Duration::from_secs(1))?;
    others.only(&[Status::Shutdown])?;
    if pool_ends.load(Ordering::SeqCst) != 1 {
        return Err(format!("the receive pool ended {} times", pool_ends.load(Ordering::SeqCst)));
    }
    if took > Duration::from_secs(10) {
        return Err(format!("destroy took {took:?}"));
    }
    // The destroy has run every callback: this only checks each came exactly once.
    ends.wait_all(Duration::from_secs(1))?;
    ends.only(&[Status::Ok, Status::Shutdown])?;
    if !ends.tally().iter().any(|(s, _)| *s == Status::Shutdown) {
        // Not an error of the engine, but then the test did not test shutdown.
        return Err("every request finished before the destroy: nothing was pending".into());
    }
    p.hash().map(|_| ())
}

type Test = fn(&str, usize) -> TestResult;
const TESTS: &[(&str, Test)] = &[
    ("single_writes", single_writes),
    ("batch_of_single_writes", batch::batch_of_single_writes),
    ("batch_in_manual_progress_and_max_inflight", batch::batch_in_manual_progress_and_max_inflight),
    ("bundled_writes_end_one_by_one", bundles::bundled_writes_end_one_by_one),
    ("a_bundled_write_is_counted_before_it_reports", bundles::a_bundled_write_is_counted_before_it_reports),
    ("a_bundle_to_a_killed_peer_ends_each_write_once", bundles::a_bundle_to_a_killed_peer_ends_each_write_once),
    ("a_bundle_past_its_deadline", bundles::a_bundle_past_its_deadline),
    ("split_at_max_msg_size", split_at_max_msg_size),
    ("handles_dropped_after_submit", lifetimes::handles_dropped_after_submit),
    ("paged_writes_10000_random_pages", paged_writes),
    ("scatter_and_barrier_to_3_peers", scatter_and_barrier),
    ("send_recv_round_trips", recv::send_recv),
    ("sends_beyond_the_slots_arrive_and_give_their_slots_back", recv::sends_beyond_the_slots),
    ("receive_pool_on_worker", recv::pool_on_worker),
    ("receive_pool_on_worker_in_manual_progress", recv::receive_pool_on_worker_in_manual_progress),
    ("an_answer_leaves_in_the_pass_that_took_the_message", recv::an_answer_leaves_in_the_pass_that_took_the_message),
    ("a_message_after_quiet_wakes_the_receiver", recv::a_message_after_quiet_wakes_the_receiver),
    ("messages_name_their_sender", recv::messages_name_their_sender),
    ("receive_pools_removed_lose_nothing", recv::pools_removed_lose_nothing),
    ("an_engine_outlives_its_peer_in_one_process", recv::an_engine_outlives_its_peer_in_one_process),
    ("submits_from_4_threads", four_threads),
    ("bad_input", bad_input),
    ("destroy_with_10000_pending", destroy_with_10000_pending),
    ("garbage_into_receive_pool", recv::garbage_into_receive_pool),
    ("cancel_storm_1000", faults::cancel_storm),
    ("deadline_with_stopped_peer", faults::deadline_with_stopped_peer),
    ("kill9_mid_paged_write_and_scatter", faults::kill9_mid_transfer),
    ("stale_and_restarted_peers", faults::stale_and_restarted_peers),
    ("writes_landed_before_a_goodbye_end_ok", faults::writes_landed_before_a_goodbye_end_ok),
    ("bounded_completion_path", faults::bounded_completion_path),
    ("short_lived_clients", faults::short_lived_clients),
    ("dead_peer_with_large_imm_writes", faults::dead_peer_with_large_imm_writes),
    ("restart_on_the_same_address", faults::restart_on_the_same_address),
    ("restart_with_the_same_pid", faults::restart_with_the_same_pid),
    ("netns_link_down_mid_transfer", netns::link_down_mid_transfer),
    ("nic_names_are_checked", nics::nic_names_are_checked),
    ("counters_count_every_page", nics::counters_count_every_page),
    ("metrics_count_the_work_done", metrics::metrics_count_the_work_done),
    ("requests_pinned_to_a_nic_or_sharded", nics::requests_pinned_to_a_nic_or_sharded),
    ("threads_are_pinned_where_asked", nics::threads_are_pinned_where_asked),
    ("netns_2_and_4_nics_carry_a_paged_write", nics::nics_carry_a_paged_write),
    ("netns_one_nic_down_mid_transfer", nics::one_nic_down_mid_transfer),
    ("no_stale_immediate_counts", imm::no_stale_immediate_counts),
    ("delivered_means_counted", imm::delivered_means_counted),
    ("watcher_drives_layer_writes", imm::watcher_drives_layer_writes),
    ("idle_policies_sleep_and_wake", imm::idle_policies_sleep_and_wake),
    ("manual_progress", imm::manual_progress),
    ("calls_from_callbacks", faults::calls_from_callbacks),
    ("connect_reports_readiness", faults::connect_reports_readiness),
    ("peers_removed_end_their_requests", removal::peers_removed_end_their_requests),
    ("a_peer_found_dead_at_admission", removal::a_peer_found_dead_at_admission),
    ("groups_write_across_groups", groups::groups_write_across_groups),
    ("groups_nic_counts_must_match", groups::groups_nic_counts_must_match),
    ("groups_take_memory_of_their_numa_node", groups::groups_take_memory_of_their_numa_node),
    ("groups_per_gpu_from_the_topology", groups::groups_per_gpu_from_the_topology),
    ("groups_in_manual_progress", groups::groups_in_manual_progress),
    ("groups_cancel_and_state_per_engine", groups::groups_cancel_and_state_per_engine),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--peer") {
        peer::main(&args[2..]);
    }
    if args.get(1).map(String::as_str) == Some("--soak") {
        soak::node(&args[2..]);
    }
    // The matrix picks providers itself; an inherited override would collapse it.
    // SAFETY: no other thread runs yet.
    unsafe { std::env::remove_var("FABRICLIB_PROVIDER") };
    let filters: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with("--")).collect();
    let providers = std::env::var("FABRICLIB_TEST_PROVIDERS").unwrap_or_else(|_| "tcp;ofi_rxm,shm".into());
    // NIC counts to run every test with (`FABRICLIB_TEST_NICS`, default 1,2).
    let counts: Vec<usize> = std::env::var("FABRICLIB_TEST_NICS")
        .unwrap_or_else(|_| "1,2".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let (mut passed, mut failed) = (0, 0);
    watchdog::start();
    for prov in providers.split(',') {
        for &domains in &counts {
            for (name, test) in TESTS {
                let full = format!("{name}[{prov},domains={domains}]");
                if !filters.is_empty() && !filters.iter().any(|f| full.contains(f.as_str())) {
                    continue;
                }
                let t = Instant::now();
                match watchdog::run(&full, watchdog::limit(), || test(prov, domains)) {
                    Ok(()) => {
                        passed += 1;
                        println!("test {full} ... ok ({:.2}s)", t.elapsed().as_secs_f64());
                    }
                    Err(e) => {
                        failed += 1;
                        println!("test {full} ... FAILED: {e}");
                    }
                }
            }
        }
    }
    // The soak: on each provider, with 2 domains (FABRICLIB_SOAK_OPS, default 10^6 each).
    let soak_name = "soak_3_processes";
    for prov in providers.split(',') {
        let full = format!("{soak_name}[{prov},domains=2]");
        if !filters.is_empty() && !filters.iter().any(|f| full.contains(f.as_str())) {
            continue;
        }
        let ops = std::env::var("FABRICLIB_SOAK_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
        match watchdog::run(&full, 3 * watchdog::limit(), || soak::run(prov, 2, ops)) {
            Ok(report) => {
                passed += 1;
                println!("test {full} ... ok: {report}");
            }
            Err(e) => {
                failed += 1;
                println!("test {full} ... FAILED: {e}");
            }
        }
    }
    let crashes = util::PEER_CRASHES.load(Ordering::SeqCst);
    if crashes > 0 {
        failed += 1;
        println!(
            "test peer_processes_exit_cleanly ... FAILED: {crashes} peer processes crashed (see PEER CRASHED above)"
        );
    }
    println!("\nloopback: {passed} passed, {failed} failed");
    std::process::exit(if failed > 0 { 1 } else { 0 });
}
