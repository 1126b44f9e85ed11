//! Real verbs through fabriclib's own bindings (src/domain/verbs/). On a
//! machine without a verbs device each test says so and passes; CI runs
//! this binary inside a VM with Soft-RoCE (`scripts/test-verbs.sh` through
//! `scripts/rxe-vm.sh`) with `FABRICLIB_VERBS_REQUIRED=1`, where a missing
//! device fails. Under TCG emulation rxe moves tens of MB/s: transfers are
//! sized in MB and deadlines in tens of seconds.
use fabriclib::domain::verbs::device::{self, Device};
use fabriclib::domain::verbs::lib::{Context, Cq, Qp};
use fabriclib::domain::verbs::rc::{self, Endpoint, Path};
use fabriclib::domain::verbs::sys::*;
use std::time::{Duration, Instant};

/// The machine's first verbs device, or `None` (skipped) where there is
/// none and none is required.
fn first_device() -> Option<Device> {
    let required = std::env::var_os("FABRICLIB_VERBS_REQUIRED").is_some_and(|v| v != "0");
    let why = match device::list() {
        Ok(mut d) if !d.is_empty() => return Some(d.remove(0)),
        Ok(_) => "no verbs device".to_string(),
        Err(e) => e.message,
    };
    assert!(!required, "FABRICLIB_VERBS_REQUIRED is set, but: {why}");
    eprintln!("    skipped: {why} (CI runs this in a Soft-RoCE VM: scripts/test-verbs.sh)");
    None
}

#[test]
fn verbs_devices_ports_gids_and_limits() {
    let Some(d) = first_device() else { return };
    eprintln!("    {d:?}");
    let port = d.ports.iter().find(|p| p.active).expect("an active port");
    let gid = port.preferred_gid().expect("a GID");
    assert!(port.mtu >= 1024, "active MTU {}", port.mtu);
    assert!(d.max_qp > 0 && d.max_qp_wr > 0 && d.max_cqe > 0 && d.max_sge > 0 && d.max_mr_size > 0);
    if d.name.starts_with("rxe") {
        // Soft-RoCE on lo: no PCI parent, RoCE v2, GID ::ffff:127.0.0.1 preferred.
        assert_eq!(d.pci, None);
        assert!(gid.roce_v2(), "{gid:?}");
        assert_eq!(gid.ipv4(), Some(std::net::Ipv4Addr::LOCALHOST), "{gid}");
        // rxe's extended context has no thread-domain ops: its queue pairs are plain.
        assert!(!d.thread_domains);
    }
    if d.name.starts_with("mlx5") {
        assert!(d.thread_domains, "mlx5 has thread domains");
    }
}

/// Polls `cq` until `n` completions came (each checked by `each`), or panics after `limit`.
fn drain(cq: &Cq, n: usize, limit: Duration, mut each: impl FnMut(&ibv_wc)) {
    let (t, mut got) = (Instant::now(), 0);
    let mut wc = vec![ibv_wc::default(); 16];
    while got < n {
        assert!(t.elapsed() < limit, "{got} of {n} completions after {limit:?}");
        let k = cq.poll(&mut wc).expect("ibv_poll_cq");
        for w in &wc[..k] {
            assert_eq!(w.status, IBV_WC_SUCCESS, "work request {} failed: status {}", w.wr_id, w.status);
            each(w);
        }
        got += k;
    }
}

/// Two RC queue pairs of one device connected to each other (as two
/// processes on one rxe device are: the same GID, told apart by QPN).
fn connected_pair(ctx: &std::sync::Arc<Context>, pd: &fabriclib::domain::verbs::lib::Pd, cqs: (&Cq, &Cq)) -> (Qp, Qp) {
    let d = device::describe(ctx).unwrap();
    let port = &d.ports[0];
    let gid = port.preferred_gid().unwrap();
    let attr = ctx.query_port(port.num).unwrap();
    let path = Path::new(port.num, gid.index as u8, attr.active_mtu);
    let a = pd.create_qp(IBV_QPT_RC, cqs.0, cqs.0, 256, 256).unwrap();
    let b = pd.create_qp(IBV_QPT_RC, cqs.1, cqs.1, 256, 256).unwrap();
    let (pa, pb) = (0x1234, 0xabcd);
    rc::connect(&a, &path, pa, &Endpoint { gid: gid.gid, qpn: b.qpn(), psn: pb }).unwrap();
    rc::connect(&b, &path, pb, &Endpoint { gid: gid.gid, qpn: a.qpn(), psn: pa }).unwrap();
    (a, b)
}

/// RDMA WRITE WITH IMMEDIATE: 32 writes of 64 KiB land byte for byte, and
/// the target's zero-byte receives count each immediate once.
#[test]
fn verbs_rc_writes_with_immediates_land_and_count() {
    let Some(d) = first_device() else { return };
    const N: usize = 32;
    const CHUNK: usize = 64 << 10;
    let ctx = Context::open(&d.name).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (ctx.create_cq(512).unwrap(), ctx.create_cq(512).unwrap());
    let (a, b) = connected_pair(&ctx, &pd, (&cq_a, &cq_b));
    let mut src: Vec<u8> = (0..N * CHUNK).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut dst = vec![0u8; N * CHUNK];
    let smr = pd.reg_mr(src.as_mut_ptr(), src.len(), rc::REMOTE_WRITE).unwrap();
    let dmr = pd.reg_mr(dst.as_mut_ptr(), dst.len(), rc::REMOTE_WRITE).unwrap();
    // A write with an immediate consumes one receive at the target: zero-byte ones.
    let mut recvs: Vec<ibv_recv_wr> = (0..N).map(|k| ibv_recv_wr { wr_id: k as u64, ..Default::default() }).collect();
    for k in 0..N - 1 {
        recvs[k].next = &mut recvs[k + 1];
    }
    // SAFETY: zero-byte receives name no memory.
    unsafe { b.post_recv(&mut recvs[0]) }.map_err(|(rc, _)| rc).expect("ibv_post_recv");
    let mut sges: Vec<ibv_sge> = (0..N)
        .map(|k| ibv_sge { addr: src.as_ptr() as u64 + (k * CHUNK) as u64, length: CHUNK as u32, lkey: smr.lkey() })
        .collect();
    let mut wrs: Vec<ibv_send_wr> = (0..N)
        .map(|k| {
            let mut wr = ibv_send_wr {
                wr_id: 1000 + k as u64,
                sg_list: &mut sges[k],
                num_sge: 1,
                opcode: IBV_WR_RDMA_WRITE_WITH_IMM,
                send_flags: IBV_SEND_SIGNALED,
                ..Default::default()
            };
            wr.__bindgen_anon_1.imm_data = (0x5000 + k as u32).to_be();
            wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: dst.as_ptr() as u64 + (k * CHUNK) as u64,
                rkey: dmr.rkey(),
            };
            wr
        })
        .collect();
    // One chain, one doorbell.
    for k in 0..N - 1 {
        wrs[k].next = &mut wrs[k + 1];
    }
    // SAFETY: every SGE names the registered source, alive until drained below.
    unsafe { a.post_send(&mut wrs[0]) }.map_err(|(rc, _)| rc).expect("ibv_post_send");
    let limit = Duration::from_secs(60);
    drain(&cq_a, N, limit, |w| assert_eq!(w.opcode, IBV_WC_RDMA_WRITE));
    let mut imms = Vec::new();
    drain(&cq_b, N, limit, |w| {
        assert_eq!(w.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        assert_eq!(w.byte_len as usize, CHUNK);
        // SAFETY: a receive with an immediate carries it in this member.
        imms.push(u32::from_be(unsafe { w.__bindgen_anon_1.imm_data }));
    });
    imms.sort_unstable();
    assert_eq!(imms, (0..N as u32).map(|k| 0x5000 + k).collect::<Vec<_>>(), "each immediate exactly once");
    assert!(dst == src, "the destination differs from the source");
    drop((smr, dmr, a, b));
}

/// An engine on the verbs backend (`provider = "verbs"`).
fn verbs_engine() -> fabriclib::TransferEngine {
    let cfg = fabriclib::EngineConfig { provider: Some("verbs".into()), ..Default::default() };
    fabriclib::TransferEngine::new(&cfg).expect("an engine on the verbs backend")
}

/// Waits for a request's flag (seconds: rxe under emulation is slow) and
/// returns its status.
fn wait(f: &std::sync::atomic::AtomicU32) -> Option<fabriclib::Status> {
    use std::sync::atomic::Ordering;
    let t = Instant::now();
    while f.load(Ordering::Acquire) & fabriclib::FLAG_DONE == 0 {
        assert!(t.elapsed() < Duration::from_secs(60), "a request did not end within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    fabriclib::Status::from_code((f.load(Ordering::Acquire) & 0xffff) as i32)
}

fn flag() -> std::sync::Arc<std::sync::atomic::AtomicU32> {
    std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0))
}

/// The engine on verbs, end to end: two engines (as two processes on one
/// rxe device would be) connect through the UD handshake; 256 pages of
/// 16 KiB in random order land byte for byte and the receiver's one
/// expectation counts one immediate per page; a barrier counts one more;
/// a delivered write is confirmed by a fence; messages go both ways.
#[test]
fn verbs_engine_pages_barrier_fence_and_messages() {
    use fabriclib::{OnDone, Pages, Status};
    if first_device().is_none() {
        return;
    }
    const PAGES: usize = 256;
    const PAGE: usize = 16 << 10;
    let (a, b) = (verbs_engine(), verbs_engine());
    assert_eq!(a.provider(), "verbs");
    let mut src: Vec<u8> = (0..PAGES * PAGE).map(|i| (i * 31 + i / PAGE) as u8).collect();
    let mut dst = vec![0u8; PAGES * PAGE];
    // SAFETY: both buffers outlive their handles and requests (dropped at the end).
    let smr = unsafe { a.register(src.as_mut_ptr(), src.len()) }.unwrap();
    // SAFETY: as `src` above: `dst` outlives its handle and requests.
    let dmr = unsafe { b.register(dst.as_mut_ptr(), dst.len()) }.unwrap();
    let expect = flag();
    b.expect_imm_count(0x42, PAGES as u32 + 1, OnDone::Flag(expect.clone())).unwrap();
    let s: Vec<u32> = (0..PAGES as u32).collect();
    let d: Vec<u32> = (0..PAGES as u32).map(|k| (k * 97) % PAGES as u32).collect();
    let t = Instant::now();
    let f = flag();
    let (sp, dp) =
        (Pages { indices: &s, stride: PAGE as u64, offset: 0 }, Pages { indices: &d, stride: PAGE as u64, offset: 0 });
    a.submit_paged_writes(PAGE as u64, Some(0x42), &smr, sp, dmr.descriptor(), dp, OnDone::Flag(f.clone())).unwrap();
    assert_eq!(wait(&f), Some(Status::Ok));
    let g = flag();
    a.submit_barrier(None, 0x42, std::slice::from_ref(dmr.descriptor()), OnDone::Flag(g.clone())).unwrap();
    assert_eq!(wait(&g), Some(Status::Ok));
    assert_eq!(wait(&expect), Some(Status::Ok), "one immediate per page and one for the barrier");
    eprintln!("    {PAGES} x {} KiB pages and a barrier in {:?}", PAGE >> 10, t.elapsed());
    for (k, &to) in d.iter().enumerate() {
        let (x, y) = (k * PAGE, to as usize * PAGE);
        assert!(dst[y..y + PAGE] == src[x..x + PAGE], "page {k} differs at its destination {to}");
    }
    assert_eq!(b.imm_count(0x42, false).unwrap(), 0, "no immediate beyond those expected");
    // A delivered write: OK only once the target has taken it in (a fence on the same queue pair).
    let h = flag();
    let opts = fabriclib::RequestOpts::from(OnDone::Flag(h.clone())).delivered();
    a.submit_single_write(8, Some(0x43), &smr, 0, dmr.descriptor(), 0, opts).unwrap();
    assert_eq!(wait(&h), Some(Status::Ok));
    assert_eq!(b.imm_count(0x43, true).unwrap(), 1, "a delivered immediate is counted when its OK comes");
    // Messages both ways.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let tx = std::sync::Mutex::new(tx);
    // The pool's last call, at shutdown, says so (an error): nothing to pass on.
    b.submit_recvs(256, 8, move |m| {
        if let Ok(m) = m {
            let _ = tx.lock().unwrap().send(m.to_vec());
        }
    })
    .unwrap();
    for i in 0..20u8 {
        let m = flag();
        a.submit_send(b.address(), &[i; 100], OnDone::Flag(m.clone())).unwrap();
        assert_eq!(wait(&m), Some(Status::Ok));
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), vec![i; 100]);
    }
    drop((smr, dmr));
    drop((a, b));
}

/// The engine's keepalives never wait behind a long transfer: 64 MiB of
/// writes queued to one peer take seconds on Soft-RoCE, several times the
/// 0.5 s peer timeout of both engines, yet neither takes the other down —
/// their PINGs and PONGs go on a queue pair of their own, not behind the
/// writes (which RC delivers in order). Every byte lands.
#[test]
fn verbs_keepalives_do_not_wait_behind_a_long_transfer() {
    use fabriclib::{OnDone, Status};
    if first_device().is_none() {
        return;
    }
    const WRITES: usize = 16;
    const SIZE: usize = 4 << 20;
    let engine = || {
        let cfg = fabriclib::EngineConfig {
            provider: Some("verbs".into()),
            keepalive_interval: Duration::from_millis(50),
            peer_timeout: Duration::from_millis(500),
            ..Default::default()
        };
        fabriclib::TransferEngine::new(&cfg).expect("an engine on the verbs backend")
    };
    let (a, b) = (engine(), engine());
    let mut src = vec![0u8; WRITES * SIZE];
    for (k, block) in src.chunks_mut(4096).enumerate() {
        block.fill((k * 7 + 1) as u8);
    }
    let mut dst = vec![0u8; WRITES * SIZE];
    // SAFETY: both buffers outlive their handles and requests (dropped at the end).
    let smr = unsafe { a.register(src.as_mut_ptr(), src.len()) }.unwrap();
    // SAFETY: as `src` above: `dst` outlives its handle and requests.
    let dmr = unsafe { b.register(dst.as_mut_ptr(), dst.len()) }.unwrap();
    // Connected and idle first, so that keepalives run from the start.
    let f = flag();
    a.submit_single_write(8, None, &smr, 0, dmr.descriptor(), 0, OnDone::Flag(f.clone())).unwrap();
    assert_eq!(wait(&f), Some(Status::Ok));
    let t = Instant::now();
    let flags: Vec<_> = (0..WRITES)
        .map(|k| {
            let f = flag();
            let off = (k * SIZE) as u64;
            a.submit_single_write(SIZE as u64, None, &smr, off, dmr.descriptor(), off, OnDone::Flag(f.clone()))
                .unwrap();
            f
        })
        .collect();
    for (k, f) in flags.iter().enumerate() {
        assert_eq!(wait(f), Some(Status::Ok), "write {k} of {WRITES}, {:?} in", t.elapsed());
    }
    let took = t.elapsed();
    eprintln!("    {} MiB in {took:?} with a 0.5 s peer timeout", (WRITES * SIZE) >> 20);
    assert!(dst == src, "the destination differs from the source");
    // Both still up: a write each way goes through.
    let (g, h) = (flag(), flag());
    a.submit_single_write(8, None, &smr, 0, dmr.descriptor(), 0, OnDone::Flag(g.clone())).unwrap();
    b.submit_single_write(8, None, &dmr, 0, smr.descriptor(), 0, OnDone::Flag(h.clone())).unwrap();
    assert_eq!((wait(&g), wait(&h)), (Some(Status::Ok), Some(Status::Ok)));
    drop((smr, dmr));
    drop((a, b));
}

/// The receives that immediates consume never run out for good: with only
/// 8 of them at the target (`FABRICLIB_VERBS_IMM_RECVS`) and 256 writes
/// in flight, senders that find none wait (RNR retries) and every one of
/// 2000 immediates is counted exactly once.
#[test]
fn verbs_immediates_outnumber_the_receives() {
    use fabriclib::{OnDone, Pages, Status};
    if first_device().is_none() {
        return;
    }
    const PAGES: usize = 2000;
    const PAGE: usize = 4096;
    // SAFETY: tests in this binary run one at a time (--test-threads 1 in the VM).
    unsafe { std::env::set_var("FABRICLIB_VERBS_IMM_RECVS", "8") };
    let (a, b) = (verbs_engine(), verbs_engine());
    // SAFETY: as above.
    unsafe { std::env::remove_var("FABRICLIB_VERBS_IMM_RECVS") };
    let mut src: Vec<u8> = (0..PAGES * PAGE).map(|i| (i / 3) as u8).collect();
    let mut dst = vec![0u8; PAGES * PAGE];
    // SAFETY: both buffers outlive their handles and requests.
    let smr = unsafe { a.register(src.as_mut_ptr(), src.len()) }.unwrap();
    // SAFETY: as `src` above: `dst` outlives its handle and requests.
    let dmr = unsafe { b.register(dst.as_mut_ptr(), dst.len()) }.unwrap();
    let expect = flag();
    b.expect_imm_count(0x99, PAGES as u32, OnDone::Flag(expect.clone())).unwrap();
    let idx: Vec<u32> = (0..PAGES as u32).collect();
    let p = Pages { indices: &idx, stride: PAGE as u64, offset: 0 };
    let f = flag();
    let t = Instant::now();
    a.submit_paged_writes(PAGE as u64, Some(0x99), &smr, p, dmr.descriptor(), p, OnDone::Flag(f.clone())).unwrap();
    assert_eq!(wait(&f), Some(Status::Ok));
    assert_eq!(wait(&expect), Some(Status::Ok));
    eprintln!("    {PAGES} immediates through 8 receives in {:?}", t.elapsed());
    assert_eq!(b.imm_count(0x99, false).unwrap(), 0);
    assert!(dst == src);
    drop((smr, dmr));
    drop((a, b));
}

/// With two verbs devices, an engine of two NICs opens one on each, and a
/// paged write's pages go half through each device (counted per NIC), each
/// shard with its own device's keys: every byte lands.
#[test]
fn verbs_two_nics_on_two_devices() {
    use fabriclib::{OnDone, Pages, Status};
    if first_device().is_none() {
        return;
    }
    if device::list().map_or(0, |d| d.len()) < 2 {
        eprintln!("    skipped: one verbs device (scripts/test-verbs.sh gives the VM two)");
        return;
    }
    let cfg = fabriclib::EngineConfig { provider: Some("verbs".into()), nic_count: 2, ..Default::default() };
    let (a, b) = (fabriclib::TransferEngine::new(&cfg).unwrap(), fabriclib::TransferEngine::new(&cfg).unwrap());
    let names: Vec<&str> = a.nics().iter().map(|n| n.name.as_str()).collect();
    assert!(names.len() == 2 && names[0] != names[1], "two NICs on two devices, got {names:?}");
    const PAGES: usize = 64;
    const PAGE: usize = 8192;
    let mut src: Vec<u8> = (0..PAGES * PAGE).map(|i| (i % 251) as u8).collect();
    let mut dst = vec![0u8; PAGES * PAGE];
    // SAFETY: both buffers outlive their handles and requests.
    let smr = unsafe { a.register(src.as_mut_ptr(), src.len()) }.unwrap();
    // SAFETY: as `src` above: `dst` outlives its handle and requests.
    let dmr = unsafe { b.register(dst.as_mut_ptr(), dst.len()) }.unwrap();
    let expect = flag();
    b.expect_imm_count(7, PAGES as u32, OnDone::Flag(expect.clone())).unwrap();
    let idx: Vec<u32> = (0..PAGES as u32).rev().collect();
    let p = Pages { indices: &idx, stride: PAGE as u64, offset: 0 };
    let f = flag();
    a.submit_paged_writes(PAGE as u64, Some(7), &smr, p, dmr.descriptor(), p, OnDone::Flag(f.clone())).unwrap();
    assert_eq!(wait(&f), Some(Status::Ok));
    assert_eq!(wait(&expect), Some(Status::Ok));
    assert!(dst == src);
    let per_nic: Vec<u64> = a.counters().unwrap().nics.iter().map(|n| n.total.wrs_completed).collect();
    assert_eq!(per_nic, vec![PAGES as u64 / 2; 2], "pages per NIC");
    drop((smr, dmr));
    drop((a, b));
}

/// A write through a key the target never issued ends `RemoteAccess`; it
/// puts its queue pair in error and the writes behind it are flushed
/// (`Provider`, never `PeerDown`), yet the peer stays up: the next write
/// rebuilds the connection and lands, counted.
#[test]
fn verbs_a_bad_key_fails_one_write_not_the_peer() {
    use fabriclib::{OnDone, Status};
    if first_device().is_none() {
        return;
    }
    let (a, b) = (verbs_engine(), verbs_engine());
    let mut src = vec![7u8; 1 << 16];
    let mut dst = vec![0u8; 1 << 16];
    // SAFETY: both buffers outlive their handles and requests.
    let smr = unsafe { a.register(src.as_mut_ptr(), src.len()) }.unwrap();
    // SAFETY: as `src` above: `dst` outlives its handle and requests.
    let dmr = unsafe { b.register(dst.as_mut_ptr(), dst.len()) }.unwrap();
    let good = dmr.descriptor().clone();
    // A first write connects the two.
    let f = flag();
    a.submit_single_write(64, Some(1), &smr, 0, &good, 0, OnDone::Flag(f.clone())).unwrap();
    assert_eq!(wait(&f), Some(Status::Ok));
    let mut forged = (*good).clone();
    forged.keys[0].key ^= 0x5a5a_0000;
    let f = flag();
    a.submit_single_write(64, None, &smr, 0, &std::sync::Arc::new(forged), 0, OnDone::Flag(f.clone())).unwrap();
    // Writes behind it on the same queue pair are flushed when it fails:
    // they fail too, but not as a dead peer's.
    let behind: Vec<_> = (0..8).map(|_| flag()).collect();
    for g in &behind {
        a.submit_single_write(64, None, &smr, 0, &good, 0, OnDone::Flag(g.clone())).unwrap();
    }
    assert_eq!(wait(&f), Some(Status::RemoteAccess), "a forged key");
    for g in &behind {
        let st = wait(g);
        assert!(matches!(st, Some(Status::Ok | Status::Provider)), "a write behind the bad one ended {st:?}");
    }
    let f = flag();
    a.submit_single_write(4096, Some(2), &smr, 0, &good, 4096, OnDone::Flag(f.clone())).unwrap();
    assert_eq!(wait(&f), Some(Status::Ok), "the peer is still up");
    let t = Instant::now();
    while b.imm_count(2, false).unwrap() < 1 {
        assert!(t.elapsed() < Duration::from_secs(30), "the write after the bad one was not counted");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(dst[4096..8192].iter().all(|&x| x == 7));
    assert_eq!(a.peer_state(b.address()).unwrap(), Some(fabriclib::PeerState::Up));
    drop((smr, dmr));
    drop((a, b));
}
