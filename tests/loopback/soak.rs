//! The soak: three processes, each an engine that writes to the other two
//! and is written by them, for `FABRICLIB_SOAK_OPS` randomized operations in
//! all (default 1,000,000): paged writes, single writes, scatters and
//! barriers to both peers, sends, immediate expectations, and writes that
//! are canceled at random points. The nodes go in rounds. In round `r` node
//! `w` submits the operations `plan(w, r)` — a deterministic function, so
//! each target can recompute what `w` sent it — and then every node checks
//! that every one of its own requests reported exactly once (OK, or
//! OK/CANCELED for the canceled ones), that each writer's immediates arrived
//! in exactly the planned number, that every byte of every planned write
//! landed where it should and every message arrived intact; then it tells its
//! peers it is done with the round (a send) and waits for theirs.
use super::faults::Ends;
use super::util::{Rng, from_hex, to_hex};
use fabriclib::{EngineConfig, MrDesc, NetAddr, OnDone, Pages, ScatterDst, Status, TransferEngine};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NODES: usize = 3;
/// Each writer's area in a target's region: where its planned writes go.
const AREA: usize = 1 << 20;
/// Where canceled writes go (per writer, never checked).
const SCRATCH: usize = 64 * 1024;
const SLOT: usize = AREA + SCRATCH;
const SRC: usize = 1 << 20;
const IMM_DATA: u32 = 0x5000_0000;
const MSG_DATA: u8 = 0xDA;
const MSG_DONE: u8 = 0xD0;

#[derive(Clone, Debug)]
enum Kind {
    /// `n` pages of `page` bytes from source pages `src_idx` to `dst + dst_idx*page`.
    Paged {
        page: u64,
        src_idx: Vec<u32>,
        dst_idx: Vec<u32>,
    },
    Single,
    /// To both peers: `len` bytes each from `src` to `dst` (the same offsets on both).
    Scatter,
    Barrier,
    Send,
}

#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    /// Target node (for scatters and barriers: both peers).
    to: usize,
    len: u64,
    src: u64,
    dst: u64,
    /// Without an immediate, into the scratch area, and canceled.
    cancel: bool,
}

fn src_bytes(w: usize) -> Vec<u8> {
    let mut b = vec![0u8; SRC];
    Rng(0x50AC + w as u64).fill(&mut b);
    b
}

fn peers_of(w: usize) -> [usize; 2] {
    [(w + 1) % NODES, (w + 2) % NODES]
}

/// What node `w` does in round `r` (the same on every node).
fn plan(w: usize, r: u64, n: usize) -> Vec<Op> {
    let mut rng = Rng(0x9E37_79B9 ^ (w as u64) << 40 ^ r.wrapping_mul(0x2545_F491));
    let mut next = [0u64; NODES]; // bump allocator per target area
    let mut ops = Vec::with_capacity(n);
    for _ in 0..n {
        let to = peers_of(w)[rng.below(2) as usize];
        let cancel = rng.below(10) == 0;
        let pick = rng.below(100);
        let (kind, len) = match pick {
            0..40 => {
                let page = 64 << rng.below(5); // 64..1024
                let k = 1 + rng.below(16) as usize;
                let src_idx = (0..k).map(|_| rng.below(SRC as u64 / page) as u32).collect();
                let dst_idx = rng.perm(k);
                (Kind::Paged { page, src_idx, dst_idx }, page * k as u64)
            }
            40..65 => (Kind::Single, 1 + rng.below(2048)),
            65..80 => (Kind::Scatter, 1 + rng.below(1024)),
            80..88 => (Kind::Barrier, 0),
            _ => (Kind::Send, 16 + rng.below(1000)),
        };
        let src = rng.below(SRC as u64 - len.max(1));
        let cancel = cancel && !matches!(kind, Kind::Barrier | Kind::Send);
        let dst = if cancel {
            rng.below((SCRATCH as u64 - len).max(1))
        } else {
            let targets: &[usize] =
                if matches!(kind, Kind::Scatter) { &peers_of(w) } else { std::slice::from_ref(&to) };
            let at = targets.iter().map(|t| next[*t]).max().unwrap();
            if matches!(kind, Kind::Paged { .. } | Kind::Single | Kind::Scatter) {
                if at + len > AREA as u64 {
                    break; // the round is full
                }
                for t in targets {
                    next[*t] = at + len;
                }
            }
            at
        };
        ops.push(Op { kind, to, len, src, dst, cancel });
    }
    ops
}

/// How many immediates, data messages and checked bytes `w`'s round `r` plan sends to `t`.
fn expected(ops: &[Op], w: usize, t: usize) -> (u32, usize) {
    let (mut imms, mut msgs) = (0, 0);
    for op in ops.iter().filter(|o| !o.cancel) {
        let hits = op.to == t || matches!(op.kind, Kind::Scatter | Kind::Barrier);
        if !hits || !peers_of(w).contains(&t) {
            continue;
        }
        match &op.kind {
            Kind::Paged { src_idx, .. } => imms += src_idx.len() as u32,
            Kind::Single | Kind::Scatter | Kind::Barrier => imms += 1,
            Kind::Send => msgs += 1,
        }
    }
    (imms, msgs)
}

/// A data message: kind, writer, round, source offset and length, then
/// those bytes of the writer's source buffer (which every node can recompute).
fn message(w: usize, r: u64, op: &Op, src: &[u8]) -> Vec<u8> {
    let mut m = vec![MSG_DATA, w as u8];
    m.extend_from_slice(&r.to_le_bytes());
    m.extend_from_slice(&op.src.to_le_bytes());
    m.extend_from_slice(&src[op.src as usize..(op.src + op.len) as usize]);
    m
}

/// Whether a data message is intact.
fn message_ok(m: &[u8], srcs: &[Vec<u8>]) -> bool {
    let (w, off) = (m[1] as usize, u64::from_le_bytes(m[10..18].try_into().unwrap()) as usize);
    let body = &m[18..];
    w < NODES && off + body.len() <= SRC && body == &srcs[w][off..off + body.len()]
}

/// Checks that `w`'s planned writes of round `r` landed in `region` (node `t`'s).
fn verify(region: &[u8], ops: &[Op], w: usize, t: usize, src: &[u8]) -> Result<u64, String> {
    let base = w * SLOT;
    let mut checked = 0u64;
    for (k, op) in ops.iter().enumerate().filter(|(_, o)| !o.cancel) {
        let hits = op.to == t || matches!(op.kind, Kind::Scatter);
        let spans: Vec<(u64, u64, u64)> = match &op.kind {
            Kind::Paged { page, src_idx, dst_idx } if hits => {
                src_idx.iter().zip(dst_idx).map(|(s, d)| (*s as u64 * page, op.dst + *d as u64 * page, *page)).collect()
            }
            Kind::Single | Kind::Scatter if hits => vec![(op.src, op.dst, op.len)],
            _ => continue,
        };
        for (s, d, n) in spans {
            let (s, d, n) = (s as usize, base + d as usize, n as usize);
            if region[d..d + n] != src[s..s + n] {
                return Err(format!("round {}: op {k} ({:?}) from node {w}: bytes at {d} differ", 0, op.kind));
            }
            checked += n as u64;
        }
    }
    Ok(checked)
}

/// One soak node (a process): `--soak INDEX PROVIDER DOMAINS OPS`.
pub fn node(args: &[String]) -> ! {
    let fail = |e: String| -> ! {
        println!("ERROR {e}");
        std::process::exit(1)
    };
    let me: usize = args[0].parse().unwrap();
    let (prov, domains, ops_total): (&str, usize, usize) =
        (&args[1], args[2].parse().unwrap(), args[3].parse().unwrap());
    let cfg = EngineConfig {
        provider: Some(prov.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: domains,
        submit_queue: 8192,
        ..Default::default()
    };
    let engine = TransferEngine::new(&cfg).unwrap_or_else(|e| fail(e.to_string()));
    let mut region = vec![0u8; NODES * SLOT];
    let mut src = src_bytes(me);
    // SAFETY: both buffers outlive the engine (it is dropped first, below).
    let (rmr, smr) = unsafe {
        (engine.register(region.as_mut_ptr(), region.len()).unwrap(), engine.register(src.as_mut_ptr(), SRC).unwrap())
    };
    println!("INFO {} {}", to_hex(&engine.address().to_bytes()), to_hex(&rmr.descriptor().to_bytes()));
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let w: Vec<&str> = line.split_whitespace().collect(); // PEERS a0 d0 a1 d1 a2 d2
    let addrs: Vec<NetAddr> = (0..NODES).map(|i| NetAddr::parse(&from_hex(w[1 + 2 * i])).unwrap()).collect();
    let descs: Vec<Arc<MrDesc>> =
        (0..NODES).map(|i| Arc::new(MrDesc::parse(&from_hex(w[2 + 2 * i])).unwrap())).collect();
    let srcs: Vec<Vec<u8>> = (0..NODES).map(src_bytes).collect();
    // Messages: (writer, round) -> data messages seen; rounds done per peer.
    let msgs: Arc<Mutex<HashMap<(usize, u64), usize>>> = Default::default();
    let dones: Arc<Mutex<HashMap<(usize, u64), usize>>> = Default::default();
    let bad_msgs = Arc::new(AtomicUsize::new(0));
    {
        let (msgs, dones, bad, srcs) = (msgs.clone(), dones.clone(), bad_msgs.clone(), srcs.clone());
        engine
            .submit_recvs(4096, 512, move |m| {
                let Ok(m) = m else { return };
                let (kind, w, r) = (m[0], m[1] as usize, u64::from_le_bytes(m[2..10].try_into().unwrap()));
                match kind {
                    MSG_DONE => *dones.lock().unwrap().entry((w, r)).or_default() += 1,
                    _ => {
                        if !message_ok(m, &srcs) {
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                        *msgs.lock().unwrap().entry((w, r)).or_default() += 1;
                    }
                }
            })
            .unwrap_or_else(|e| fail(e.to_string()));
    }
    let (mut ops_done, mut bytes, mut canceled, mut planned) = (0usize, 0u64, 0usize, 0usize);
    let mut prev: Option<Arc<Ends>> = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    let wait = |what: &str, cond: &dyn Fn() -> bool| {
        while !cond() {
            if Instant::now() > deadline {
                fail(format!("timed out waiting for {what}"));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    let mut rng = Rng(0xC0FFEE + me as u64);
    let mut r = 0u64;
    // Every node runs the same number of rounds: until all plans together reach the target.
    while planned < ops_total {
        planned += (0..NODES).map(|n| plan(n, r, PER_ROUND).len()).sum::<usize>();
        let plan_r = plan(me, r, PER_ROUND);
        // Expectations for what the two peers send us this round.
        let fired = Arc::new(AtomicUsize::new(0));
        let mut want_fired = 0;
        for w in peers_of(me) {
            let (imms, _) = expected(&plan(w, r, PER_ROUND), w, me);
            if imms > 0 {
                let f = fired.clone();
                let done = OnDone::callback(move |res| {
                    assert!(res.is_ok(), "expectation: {res:?}");
                    f.fetch_add(1, Ordering::SeqCst);
                });
                engine.expect_imm_count(IMM_DATA | w as u32, imms, done).unwrap_or_else(|e| fail(e.to_string()));
                want_fired += 1;
                ops_done += 1;
            }
        }
        let ends = Ends::new(plan_r.len());
        let mut to_cancel = Vec::new();
        for (k, op) in plan_r.iter().enumerate() {
            let mk = || ends.on(k);
            let imm = (!op.cancel).then_some(IMM_DATA | me as u32);
            let base = |t: usize| (t, op.dst + (me * SLOT + if op.cancel { AREA } else { 0 }) as u64);
            let id = loop {
                let (t, dst) = base(op.to);
                let res = match &op.kind {
                    Kind::Paged { page, src_idx, dst_idx } => engine.submit_paged_writes(
                        *page,
                        imm,
                        &smr,
                        Pages { indices: src_idx, stride: *page, offset: 0 },
                        &descs[t],
                        Pages { indices: dst_idx, stride: *page, offset: dst },
                        mk(),
                    ),
                    Kind::Single => engine.submit_single_write(op.len, imm, &smr, op.src, &descs[t], dst, mk()),
                    Kind::Scatter => {
                        let dsts: Vec<ScatterDst> = peers_of(me)
                            .iter()
                            .map(|&t| ScatterDst {
                                len: op.len,
                                src_offset: op.src,
                                dst: descs[t].clone(),
                                dst_offset: base(t).1,
                            })
                            .collect();
                        engine.submit_scatter(None, imm, &smr, &dsts, mk())
                    }
                    Kind::Barrier => {
                        let d: Vec<Arc<MrDesc>> = peers_of(me).iter().map(|&t| descs[t].clone()).collect();
                        engine.submit_barrier(None, IMM_DATA | me as u32, &d, mk())
                    }
                    Kind::Send => engine.submit_send(&addrs[t], &message(me, r, op, &src), mk()),
                };
                match res {
                    Ok(id) => break id,
                    Err(e) if e.status == Status::Again => std::thread::yield_now(),
                    Err(e) => fail(format!("submit {op:?}: {e}")),
                }
            };
            ops_done += 1;
            if op.cancel {
                if rng.below(2) == 0 {
                    to_cancel.push(id); // later
                } else {
                    let _ = engine.cancel(id);
                    ops_done += 1;
                }
            }
        }
        for id in to_cancel {
            let _ = engine.cancel(id); // OK, or NotFound if it finished first
            ops_done += 1;
        }
        wait("this round's requests", &|| ends.reported() >= plan_r.len());
        wait("the peers' immediates", &|| fired.load(Ordering::SeqCst) >= want_fired);
        wait("the peers' messages", &|| {
            let m = msgs.lock().unwrap();
            peers_of(me)
                .iter()
                .all(|&w| m.get(&(w, r)).copied().unwrap_or(0) >= expected(&plan(w, r, PER_ROUND), w, me).1)
        });
        // Exactly once, with the right status; last round's must not have fired again.
        for check in std::iter::once(&ends).chain(&prev) {
            check.once().unwrap_or_else(|e| fail(format!("round {r}: {e}")));
        }
        for (k, op) in plan_r.iter().enumerate() {
            let s = ends.status(k);
            let ok = s == Status::Ok || (op.cancel && s == Status::Canceled);
            if !ok {
                fail(format!("round {r} op {k} ({op:?}) ended {s:?}"));
            }
            canceled += (s == Status::Canceled) as usize;
        }
        for w in peers_of(me) {
            // SAFETY: the peers' writes of this round have landed (their
            // immediates fired) and nothing writes this area until we say done.
            let view = unsafe { std::slice::from_raw_parts(rmr.ptr(), NODES * SLOT) };
            bytes += verify(view, &plan(w, r, PER_ROUND), w, me, &srcs[w])
                .unwrap_or_else(|e| fail(format!("round {r}: {e}")));
        }
        if bad_msgs.load(Ordering::Relaxed) > 0 {
            fail("a message arrived corrupted".into());
        }
        for t in peers_of(me) {
            let mut m = vec![MSG_DONE, me as u8];
            m.extend_from_slice(&r.to_le_bytes());
            while let Err(e) = engine.submit_send(&addrs[t], &m, OnDone::Nothing) {
                if e.status != Status::Again {
                    fail(format!("done message: {e}"));
                }
            }
            ops_done += 1;
        }
        wait("the peers' end of round", &|| {
            let d = dones.lock().unwrap();
            peers_of(me).iter().all(|&w| d.contains_key(&(w, r)))
        });
        prev = Some(ends);
        r += 1;
    }
    println!("SOAK node {me}: {ops_done} operations in {r} rounds, {canceled} canceled, {bytes} bytes verified");
    std::io::stdout().flush().unwrap();
    // Let the peers finish their last round (they may still wait for our messages).
    let mut rest = String::new();
    let _ = std::io::stdin().lock().read_line(&mut rest);
    drop((rmr, smr));
    drop(engine);
    drop((region, src));
    std::process::exit(0)
}

/// Planned operations per node and round (a round may end earlier when its areas fill).
const PER_ROUND: usize = 1500;

/// The test: starts the three nodes, wires them up, sums their counts.
pub fn run(prov: &str, domains: usize, ops: usize) -> Result<String, String> {
    let t = Instant::now();
    let mut kids = Vec::new();
    let mut lines = Vec::new();
    for i in 0..NODES {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args(["--soak", &i.to_string(), prov, &domains.to_string(), &ops.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut out = BufReader::new(c.stdout.take().unwrap()).lines();
        let info = out.next().ok_or("no INFO")?.map_err(|e| e.to_string())?;
        let w: Vec<String> = info.split_whitespace().map(String::from).collect();
        if w[0] != "INFO" {
            return Err(format!("node {i}: {info}"));
        }
        lines.push((w[1].clone(), w[2].clone()));
        kids.push((c, out));
    }
    let peers = format!("PEERS {}", lines.iter().map(|(a, d)| format!("{a} {d}")).collect::<Vec<_>>().join(" "));
    for (c, _) in kids.iter_mut() {
        writeln!(c.stdin.as_mut().unwrap(), "{peers}").map_err(|e| e.to_string())?;
    }
    let mut total = 0usize;
    let mut report = Vec::new();
    for (i, (_, out)) in kids.iter_mut().enumerate() {
        let l = out.next().ok_or(format!("node {i} died"))?.map_err(|e| e.to_string())?;
        if !l.starts_with("SOAK") {
            return Err(format!("node {i}: {l}"));
        }
        total += l.split_whitespace().nth(3).and_then(|n| n.parse::<usize>().ok()).unwrap_or(0);
        report.push(l);
    }
    for (i, (mut c, _)) in kids.into_iter().enumerate() {
        let _ = writeln!(c.stdin.as_mut().unwrap(), "QUIT");
        match c.wait() {
            Ok(st) if st.success() => {}
            other => return Err(format!("node {i} did not exit cleanly: {other:?}")),
        }
    }
    if total < ops {
        return Err(format!("only {total} operations ran (wanted {ops})"));
    }
    Ok(format!("{total} operations across {NODES} processes in {:.1?}: {}", t.elapsed(), report.join("; ")))
}
