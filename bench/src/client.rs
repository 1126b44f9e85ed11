//! The active side: runs each row of the plan twice per repetition, once
//! through the TransferEngine and once through the raw endpoint, interleaved
//! so that both see the same machine, and verifies the bytes after the last
//! repetition of each.
use crate::ctl::{Ctl, R, field_str, field_u64, fill, hash_pages, hex, permutation, unhex};
use crate::raw::{RawEp, RawWrite};
use crate::server::{MSG, Region};
use fabriclib::completion::notify::{RawFlag, flag_value};
use fabriclib::wire::RemoteKey;
use fabriclib::{
    EngineConfig, FLAG_DONE, MrDesc, NetAddr, OnDone, Pages, PeerSet, ScatterDst, SingleWrite, Status, TransferEngine,
};
use serde_json::json;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// Before a raw repetition, the engines' workers (here and on the servers)
/// must have stopped polling, or raw would share the cores with them: wait
/// out their idle spin (`EngineConfig::idle_spin_us`) with a margin.
fn settle(mode: Mode) {
    if mode != Mode::Engine {
        let spin = EngineConfig::default().idle_spin_us;
        std::thread::sleep(Duration::from_micros(spin + 1000));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Single,
    Paged,
    Imm,
    SendRecv,
    Scatter,
    Barrier,
    HostSingle,
    HostBatch,
    HostPaged,
    HostScatter,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Single => "single",
            Kind::Paged => "paged",
            Kind::Imm => "imm",
            Kind::SendRecv => "sendrecv",
            Kind::Scatter => "scatter",
            Kind::Barrier => "barrier",
            Kind::HostSingle => "host-single",
            Kind::HostBatch => "host-batch",
            Kind::HostPaged => "host-paged",
            Kind::HostScatter => "host-scatter",
        }
    }
    pub fn is_host(self) -> bool {
        matches!(self, Kind::HostSingle | Kind::HostBatch | Kind::HostPaged | Kind::HostScatter)
    }
    pub fn is_bandwidth(self) -> bool {
        matches!(self, Kind::Single | Kind::Paged | Kind::Scatter)
    }
    /// Server processes the row needs.
    pub fn peers(self, spec: &Spec) -> usize {
        match self {
            Kind::Scatter | Kind::Barrier => spec.peers,
            k if k.is_host() => 0,
            _ => 1,
        }
    }
}

/// One row of the plan. `size`: bytes per write, page or destination.
#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    pub size: u64,
    pub pages: usize,
    pub peers: usize,
    pub window: usize,
    pub iters: usize,
}

/// What one row measured. Samples are microseconds per repetition
/// (bandwidth rows), per operation (latency rows) or nanoseconds per work
/// request / destination (host rows).
pub struct Row {
    pub spec: Spec,
    pub provider: String,
    pub domains: usize,
    pub engine: Vec<f64>,
    pub raw: Vec<f64>,
    /// Raw through a relay thread, as a third mode (`FABRICLIB_BENCH_RAW=both`).
    pub relay: Vec<f64>,
    /// Bytes moved per sample (bandwidth rows).
    pub bytes: u64,
    pub verified: Option<bool>,
}

/// A connected server process.
pub struct PeerConn {
    pub ctl: Ctl,
    pub child: Option<Child>,
    engine: Option<NetAddr>,
    raw: u64,
    desc: Option<Arc<MrDesc>>,
    raw_base: u64,
    raw_key: u64,
}

impl PeerConn {
    pub fn new(ctl: Ctl, child: Option<Child>) -> PeerConn {
        PeerConn { ctl, child, engine: None, raw: 0, desc: None, raw_base: 0, raw_key: 0 }
    }
    fn alloc(&mut self, size: u64) -> R<()> {
        let huge = crate::mem::HUGE.load(std::sync::atomic::Ordering::Relaxed);
        let v = self.ctl.call(json!({ "op": "alloc", "size": size, "huge": huge }))?;
        self.desc = Some(Arc::new(MrDesc::parse(&unhex(field_str(&v, "desc")?)?).map_err(|e| e.to_string())?));
        self.raw_base = field_u64(&v, "raw_base")?;
        self.raw_key = field_u64(&v, "raw_key")?;
        Ok(())
    }
    fn desc(&self) -> &Arc<MrDesc> {
        self.desc.as_ref().expect("alloc first")
    }
    fn raw_write(
        &self,
        local: *const u8,
        len: u64,
        desc: *mut std::ffi::c_void,
        off: u64,
        imm: Option<u32>,
    ) -> RawWrite {
        RawWrite { local, len: len as usize, desc, peer: self.raw, addr: self.raw_base + off, key: self.raw_key, imm }
    }
}

/// How an application thread waits for a completion flag.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Spin (yielding now and then): the lowest latency.
    Spin,
    /// Park; the completion (a callback) unparks it. For long requests on a
    /// small host, where a spinning waiter would take the core from the
    /// engine's worker.
    Park,
}

/// As `wait_flag`, progressing `e` while waiting when it runs in
/// manual-progress mode (`--progress manual`).
pub fn wait_flag_on(e: &TransferEngine, f: &AtomicU32, how: Wait, deadline: Instant) -> R<()> {
    // Done and OK already (a window's oldest request, mostly): the host
    // rows count the engine's work per request, not the waiter's.
    if f.load(Ordering::Acquire) == FLAG_DONE {
        return Ok(());
    }
    if e.is_manual() {
        spin_until(e, || f.load(Ordering::Acquire) & FLAG_DONE != 0, deadline)?;
    }
    wait_flag(f, how, deadline)
}

/// Spins until `done()` holds, as raw's side waits: in manual progress this
/// thread drives `e` and yields on every 16th pass that found nothing (raw's
/// `poll` yields on every 16th empty read); with a worker thread it spins as
/// `wait_flag` does (PAUSE, a yield every `yield_every()` looks). Every
/// engine row's waiter goes through here or `wait_flag`, so that no row's
/// engine side yields more often than its raw side.
pub fn spin_until(e: &TransferEngine, mut done: impl FnMut() -> bool, deadline: Instant) -> R<()> {
    let (manual, every) = if e.is_manual() { (true, 16) } else { (false, yield_every()) };
    let (mut looks, mut idle) = (0u32, 0u32);
    while !done() {
        looks = looks.wrapping_add(1);
        if !(manual && e.progress()) {
            idle = idle.wrapping_add(1);
            if idle % every == 0 {
                std::thread::yield_now();
            } else if !manual {
                std::hint::spin_loop();
            }
        }
        if looks % 64 == 0 && Instant::now() > deadline {
            return Err("no completion before the deadline".into());
        }
    }
    Ok(())
}

/// Looks between two yields of a spinning waiter (`wait_flag`): 8, or
/// `FABRICLIB_BENCH_YIELD_EVERY` (for measuring the waiter's effect).
fn yield_every() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("FABRICLIB_BENCH_YIELD_EVERY").ok().and_then(|v| v.parse().ok()).unwrap_or(8).max(1)
    })
}

/// `FABRICLIB_BENCH_WAIT=library`: the engine rows wait on their flags with
/// the library's `wait_flag` (as `fabriclib_flag_await` does) instead.
fn library_wait() -> bool {
    static N: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::env::var("FABRICLIB_BENCH_WAIT").as_deref() == Ok("library"))
}

pub fn wait_flag(f: &AtomicU32, how: Wait, deadline: Instant) -> R<()> {
    if how == Wait::Spin && library_wait() {
        fabriclib::wait_flag(f, Some(deadline.saturating_duration_since(Instant::now())));
    }
    let mut spins = 0u32;
    loop {
        let v = f.load(Ordering::Acquire);
        if v & FLAG_DONE != 0 {
            let code = (v & 0xffff) as i32;
            return match Status::from_code(code) {
                Some(Status::Ok) => Ok(()),
                s => Err(format!("request failed: {s:?}")),
            };
        }
        spins += 1;
        if how == Wait::Park {
            std::thread::park_timeout(Duration::from_millis(1));
        } else if spins % yield_every() == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
            continue;
        }
        if Instant::now() > deadline {
            return Err("request did not complete before the deadline".into());
        }
    }
}

/// Submits `n` requests keeping `w` in flight. Requests of `bytes` >= 1 MiB
/// take long enough that the waiter parks (woken by a completion callback);
/// smaller ones are waited for by spinning on a flag.
fn windowed<T>(
    e: &TransferEngine,
    n: usize,
    w: usize,
    bytes: u64,
    mut submit: impl FnMut(usize, OnDone) -> fabriclib::Result<T>,
) -> R<()> {
    let deadline = Instant::now() + DEADLINE;
    let w = w.max(1);
    // Manual progress: this thread drives the engine, so it never parks.
    let how = if bytes >= 1 << 20 && !e.is_manual() { Wait::Park } else { Wait::Spin };
    let me = std::thread::current();
    // Caller-owned flags, one per cache line, as a C caller would keep them
    // (`OnDone::RawFlag`): flags of neighbouring requests in one line would
    // have the worker writing one while this thread resets the other, and
    // an `Arc` per request would add its reference count to every hand-off.
    let flags = leak_flags(w);
    let on_done = |f: &'static AtomicU32| match how {
        // SAFETY: the flags are leaked: valid for as long as any request may store into them.
        Wait::Spin => OnDone::RawFlag(unsafe { RawFlag::new(f.as_ptr()) }),
        Wait::Park => {
            let t = me.clone();
            OnDone::callback(move |r| {
                f.store(flag_value(&r), Ordering::Release);
                t.unpark();
            })
        }
    };
    let mut run = || -> R<()> {
        for i in 0..n {
            let f = &flags[i % w].0;
            if i >= w {
                wait_flag_on(e, f, how, deadline)?;
            }
            f.store(0, Ordering::Relaxed);
            until_taken(e, || submit(i, on_done(f)))?;
            e.progress();
        }
        for i in n.saturating_sub(w)..n {
            wait_flag_on(e, &flags[i % w].0, how, deadline)?;
        }
        Ok(())
    };
    let res = run();
    if res.is_ok() {
        // SAFETY: every request ended (each flag was waited for) and `run`, which borrowed them, is done.
        unsafe { free_flags(flags) };
    }
    res
}

/// Calls `submit` until the engine takes the request: on `Again` (a full
/// queue) it progresses the engine (manual progress) or yields, and retries.
pub fn until_taken<T>(e: &TransferEngine, mut submit: impl FnMut() -> fabriclib::Result<T>) -> R<()> {
    loop {
        match submit() {
            Ok(_) => return Ok(()),
            Err(err) if err.status == Status::Again => {
                if !e.progress() {
                    std::thread::yield_now()
                }
            }
            Err(err) => return Err(err.to_string()),
        }
    }
}

/// `w` flags, leaked: valid for as long as any request may store into them.
pub fn leak_flags(w: usize) -> &'static [FlagLine] {
    Box::leak((0..w).map(|_| FlagLine(AtomicU32::new(0))).collect())
}

/// Frees `leak_flags`' flags.
///
/// # Safety
/// `flags` came from `leak_flags`, every request given one of them has
/// stored its result, and nothing refers to them any more.
pub unsafe fn free_flags(flags: &'static [FlagLine]) {
    // SAFETY: leaked by `leak_flags` from a Box<[FlagLine]> of this length; the caller vouches for the rest.
    drop(unsafe { Box::from_raw(flags as *const [FlagLine] as *mut [FlagLine]) });
}

/// A completion flag alone in its cache line (two lines: adjacent-line prefetch).
#[repr(align(128))]
pub struct FlagLine(pub AtomicU32);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Engine,
    Raw,
    /// Raw through a relay thread (relay.rs), as a third mode of the row
    /// (`FABRICLIB_BENCH_RAW=both`).
    Relay,
}
/// The order of the modes in repetition `rep`: rotating, so that none
/// always runs right after another. `relay`: the relay as a third mode.
fn modes(rep: usize, relay: bool) -> Vec<Mode> {
    let mut m = if relay { vec![Mode::Engine, Mode::Raw, Mode::Relay] } else { vec![Mode::Engine, Mode::Raw] };
    let n = m.len();
    m.rotate_left(rep % n);
    m
}

impl Mode {
    /// Also what the servers are told (`"mode"`), so that they relay too.
    fn name(self) -> &'static str {
        match self {
            Mode::Engine => "engine",
            Mode::Raw if crate::relay::enabled() => "relay",
            Mode::Raw => "raw",
            Mode::Relay => "relay",
        }
    }

    /// Whether raw runs through a relay thread in this mode.
    fn relayed(self) -> bool {
        self == Mode::Relay || (self == Mode::Raw && crate::relay::enabled())
    }
}

impl Row {
    /// Where `mode`'s samples go.
    fn samples(&mut self, mode: Mode) -> &mut Vec<f64> {
        match mode {
            Mode::Engine => &mut self.engine,
            Mode::Raw => &mut self.raw,
            Mode::Relay => &mut self.relay,
        }
    }
}

/// The client's engine and raw endpoint on one provider, talking to `peers`.
pub struct Session {
    pub provider: String,
    pub domains: usize,
    engine: TransferEngine,
    raw: RawEp,
    /// Where pongs land, and (raw) the ping message buffers.
    land: Region,
    src: Option<Region>,
    received: Arc<AtomicU64>,
    group: Option<(usize, PeerSet)>,
    next_imm: u32,
    pub reps: usize,
    pub warmup: usize,
}

impl Session {
    /// `bind`: this side's address for socket providers; `servers_bind`: the
    /// one to ask the servers for (loopback; two-host servers use their own).
    pub fn open(
        provider: &str,
        domains: usize,
        bind: Option<&str>,
        servers_bind: Option<&str>,
        peers: &mut [PeerConn],
    ) -> R<Session> {
        let cfg = EngineConfig {
            provider: Some(provider.into()),
            bind_addr: bind.map(String::from),
            nic_count: domains,
            idle_policy: crate::idle_policy(),
            worker_cpus: crate::engine_cpus(),
            callback_cpus: crate::engine_cpus(),
            manual_progress: crate::manual_progress(),
            ..Default::default()
        };
        let engine = TransferEngine::new(&cfg).map_err(|e| format!("{provider}: {e}"))?;
        let mut raw = RawEp::open(engine.provider(), bind)?;
        if raw.provider() != engine.provider() {
            return Err(format!("raw endpoint opened {} but the engine {}", raw.provider(), engine.provider()));
        }
        let mut land = Region::new(&engine, &mut raw, 2 * MSG)?;
        raw.post_recv(land.mem.as_mut_ptr(), MSG, land.raw.desc)?;
        let received = Arc::new(AtomicU64::new(0));
        let r = received.clone();
        crate::recv_pool(&engine, MSG, 16, move |m| {
            if m.data.is_ok() {
                r.fetch_add(1, Ordering::Release);
            }
        })
        .map_err(|e| e.to_string())?;
        for p in peers.iter_mut() {
            let mut cmd = json!({ "op": "open", "provider": engine.provider(), "domains": domains });
            if let Some(b) = servers_bind {
                cmd["bind"] = b.into();
            }
            let v = p.ctl.call(cmd)?;
            p.engine = Some(NetAddr::parse(&unhex(field_str(&v, "engine")?)?).map_err(|e| e.to_string())?);
            p.raw = raw.insert(&unhex(field_str(&v, "raw")?)?)?;
            p.ctl.call(json!({
                "op": "peer",
                "desc": hex(&land.mr.descriptor().to_bytes()),
                "raw": hex(raw.addr()),
                "raw_base": land.raw.remote.remote_base,
                "raw_key": land.raw.remote.key,
            }))?;
        }
        let provider = engine.provider().to_string();
        Ok(Session {
            provider,
            domains,
            engine,
            raw,
            land,
            src: None,
            received,
            group: None,
            next_imm: 1,
            reps: 5,
            warmup: 1,
        })
    }

    /// The client engine's counters (per NIC: what the engine rows posted).
    pub fn counters(&self) -> R<fabriclib::Counters> {
        self.engine.counters().map_err(|e| e.to_string())
    }

    /// The client engine's metrics snapshot (fabriclib::metrics).
    pub fn metrics(&self) -> fabriclib::metrics::Metrics {
        self.engine.metrics()
    }

    pub fn close(mut self) {
        if let Some(s) = self.src.take() {
            s.close(&mut self.raw);
        }
        self.land.close(&mut self.raw);
    }

    fn imm(&mut self) -> u32 {
        self.next_imm += 1;
        self.next_imm
    }

    fn group(&mut self, peers: &[PeerConn]) -> R<PeerSet> {
        if let Some((_, g)) = self.group.filter(|(n, _)| *n == peers.len()) {
            return Ok(g);
        }
        let addrs: Vec<NetAddr> = peers.iter().map(|p| p.engine.clone().unwrap()).collect();
        let g = self.engine.add_peer_set(&addrs).map_err(|e| e.to_string())?;
        self.group = Some((peers.len(), g));
        Ok(g)
    }

    fn new_src(&mut self, len: u64) -> R<()> {
        if let Some(s) = self.src.take() {
            s.close(&mut self.raw);
        }
        self.src = Some(Region::new(&self.engine, &mut self.raw, len as usize)?);
        Ok(())
    }

    pub fn run(&mut self, spec: &Spec, peers: &mut [PeerConn], progress: &dyn Fn(&str)) -> R<Row> {
        let np = spec.kind.peers(spec);
        if peers.len() < np {
            return Err(format!("{} needs {np} server processes, {} connected", spec.kind.name(), peers.len()));
        }
        let peers = &mut peers[..np];
        let mut row = Row {
            spec: spec.clone(),
            provider: self.provider.clone(),
            domains: self.domains,
            engine: Vec::new(),
            raw: Vec::new(),
            relay: Vec::new(),
            bytes: 0,
            verified: None,
        };
        if spec.kind.is_bandwidth() {
            self.bandwidth(&mut row, peers, progress)?;
        } else {
            self.latency(&mut row, peers, progress)?;
        }
        Ok(row)
    }

    fn bandwidth(&mut self, row: &mut Row, peers: &mut [PeerConn], progress: &dyn Fn(&str)) -> R<()> {
        let s = row.spec.clone();
        let scatter = s.kind == Kind::Scatter;
        let (page, n) = (s.size, if s.kind == Kind::Paged { s.pages } else { 1 });
        for p in peers.iter_mut() {
            p.alloc(page * n as u64)?;
        }
        self.new_src(if scatter { s.size * peers.len() as u64 } else { page * n as u64 })?;
        let (seed_src, seed_dst) = if s.kind == Kind::Paged { (0x5eed_0001, 0x5eed_0002) } else { (0, 0) };
        let (src_idx, dst_idx) = (permutation(seed_src, n), permutation(seed_dst, n));
        let group = if scatter { Some(self.group(peers)?) } else { None };
        let dsts: Vec<ScatterDst> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| ScatterDst {
                len: s.size,
                src_offset: i as u64 * s.size,
                dst: p.desc().clone(),
                dst_offset: 0,
            })
            .collect();
        let imm = self.imm();
        // Immediates each server counts per repetition.
        let count = if scatter { s.iters } else { s.iters * n };
        row.bytes = s.size * (s.iters * n * peers.len()) as u64;
        let total = self.warmup + self.reps;
        for rep in 0..total {
            progress(&format!("rep {}/{total}", rep + 1));
            for mode in modes(rep, crate::relay::both()) {
                let last = rep + 1 == total;
                let src = self.src.as_mut().unwrap();
                // Every repetition reads freshly written source bytes (never the
                // kernel's zero page, never the previous repetition's cache state);
                // the destination is cleared before the verified one, as before.
                fill(&mut src.mem, 0xfab0 + mode as u64 + rep as u64 * 3);
                if last {
                    for p in peers.iter_mut() {
                        p.ctl.call(json!({ "op": "clear" }))?;
                    }
                }
                for p in peers.iter_mut() {
                    p.ctl.call(json!({ "op": "expect", "mode": mode.name(), "imm": imm, "count": count }))?;
                }
                let (sp, desc) = (src.mem.as_ptr(), src.raw.desc);
                settle(mode);
                let dt = match mode {
                    Mode::Engine => {
                        let t0 = Instant::now();
                        let (e, mr) = (&self.engine, &src.mr);
                        let per_req = if scatter { s.size * peers.len() as u64 } else { page * n as u64 };
                        windowed(e, s.iters, s.window, per_req, |_, done| match s.kind {
                            Kind::Single => e.submit_single_write(s.size, Some(imm), mr, 0, peers[0].desc(), 0, done),
                            Kind::Paged => e.submit_paged_writes(
                                page,
                                Some(imm),
                                mr,
                                Pages { indices: &src_idx, stride: page, offset: 0 },
                                peers[0].desc(),
                                Pages { indices: &dst_idx, stride: page, offset: 0 },
                                done,
                            ),
                            _ => e.submit_scatter(group, Some(imm), mr, &dsts, done),
                        })
                        .map_err(|e| format!("engine: {e}"))?;
                        t0.elapsed()
                    }
                    Mode::Raw | Mode::Relay => {
                        let per_req = if scatter { peers.len() } else { n };
                        let ops = (0..s.iters * per_req).map(|i| {
                            let k = i % per_req;
                            if scatter {
                                // SAFETY: k * size lies inside the source region.
                                peers[k].raw_write(unsafe { sp.add(k * s.size as usize) }, s.size, desc, 0, Some(imm))
                            } else {
                                let (si, di) = (src_idx[k] as u64 * page, dst_idx[k] as u64 * page);
                                // SAFETY: si + page lies inside the source region.
                                peers[0].raw_write(unsafe { sp.add(si as usize) }, page, desc, di, Some(imm))
                            }
                        });
                        // Timed once a relay (if any) is up, as the engine's worker is.
                        crate::relay::drive(&mut self.raw, mode.relayed(), |x| {
                            let t0 = Instant::now();
                            x.write_all(ops, per_req, s.window)?;
                            Ok(t0.elapsed())
                        })?
                    }
                }
                .as_secs_f64()
                    * 1e6;
                for p in peers.iter_mut() {
                    p.ctl.recv()?;
                }
                if rep >= self.warmup {
                    row.samples(mode).push(dt);
                }
                if last {
                    let src = &self.src.as_ref().unwrap().mem;
                    let mut ok = true;
                    for (i, p) in peers.iter_mut().enumerate() {
                        let v = p.ctl.call(json!({ "op": "hash", "page": page, "n": n, "seed": seed_dst }))?;
                        let want = if scatter {
                            hash_pages(&src[i * s.size as usize..], s.size as usize, &[0])
                        } else {
                            hash_pages(src, page as usize, &src_idx)
                        };
                        ok &= field_str(&v, "hash")? == want.to_string();
                    }
                    if !ok {
                        eprintln!("fabriclib-bench: {} bytes did not verify ({})", mode.name(), row.spec.kind.name());
                    }
                    row.verified = Some(row.verified.unwrap_or(true) && ok);
                }
            }
        }
        Ok(())
    }

    fn latency(&mut self, row: &mut Row, peers: &mut [PeerConn], progress: &dyn Fn(&str)) -> R<()> {
        let s = row.spec.clone();
        let np = peers.len() as u64;
        for p in peers.iter_mut() {
            p.alloc(s.size.max(64))?;
        }
        let (imm_c, imm_s) = (self.imm(), self.imm());
        let group = if s.kind == Kind::Barrier { Some(self.group(peers)?) } else { None };
        let descs: Vec<Arc<MrDesc>> = peers.iter().map(|p| p.desc().clone()).collect();
        let kind = if s.kind == Kind::SendRecv { "send" } else { "imm" };
        let (land_ptr, land_desc) = (self.land.mem.as_ptr(), self.land.raw.desc);
        // SAFETY: the second half of `land` is the raw ping buffer.
        let ping_buf = unsafe { land_ptr.add(MSG) };
        let total = self.warmup + self.reps;
        let flag = Arc::new(AtomicU32::new(0));
        for rep in 0..total {
            progress(&format!("rep {}/{total}", rep + 1));
            for mode in modes(rep, crate::relay::both()) {
                for p in peers.iter_mut() {
                    let cmd = json!({ "op": "pong", "mode": mode.name(), "kind": kind, "n": s.iters, "size": s.size, "imm_c": imm_c, "imm_s": imm_s });
                    p.ctl.call(cmd)?;
                }
                settle(mode);
                let deadline = Instant::now() + DEADLINE;
                // Raw's ping, run from this thread or through a relay (relay.rs).
                let raw_ping = |ep: &mut RawEp| -> R<()> {
                    if s.kind == Kind::SendRecv {
                        ep.send(peers[0].raw, ping_buf, s.size as usize, land_desc, deadline)?;
                        return ep.wait_recv(deadline).map(|_| ());
                    }
                    let len = if s.kind == Kind::Barrier { 0 } else { s.size };
                    for p in peers.iter() {
                        ep.post_write(&p.raw_write(land_ptr, len, land_desc, 0, Some(imm_c)), deadline)?;
                    }
                    ep.wait_imm(imm_s, np, deadline)
                };
                let relay = mode.relayed();
                crate::relay::drive(&mut self.raw, relay, |x| {
                    for _ in 0..s.iters {
                        let (dt, r) = match (mode, s.kind) {
                            (Mode::Engine, Kind::SendRecv) => {
                                let before = self.received.load(Ordering::Acquire);
                                let msg = &self.land.mem[MSG..MSG + s.size as usize];
                                let t0 = Instant::now();
                                let r =
                                    self.engine.submit_send(peers[0].engine.as_ref().unwrap(), msg, OnDone::Nothing);
                                let r = r.map_err(|e| e.to_string()).and_then(|_| {
                                    let answered = || self.received.load(Ordering::Acquire) != before;
                                    spin_until(&self.engine, answered, deadline)
                                        .map_err(|e| format!("engine: a ping: {e}"))
                                });
                                (t0.elapsed(), r)
                            }
                            (Mode::Engine, _) => {
                                flag.store(0, Ordering::Relaxed);
                                let e = &self.engine;
                                e.expect_imm_count(imm_s, np as u32, OnDone::Flag(flag.clone()))
                                    .map_err(|e| e.to_string())?;
                                let t0 = Instant::now();
                                let r = match s.kind {
                                    Kind::Barrier => e.submit_barrier(group, imm_c, &descs, OnDone::Nothing),
                                    _ => e.submit_single_write(
                                        s.size,
                                        Some(imm_c),
                                        &self.land.mr,
                                        0,
                                        &descs[0],
                                        0,
                                        OnDone::Nothing,
                                    ),
                                };
                                let r = r
                                    .map_err(|e| e.to_string())
                                    .and_then(|_| wait_flag_on(e, &flag, Wait::Spin, deadline));
                                (t0.elapsed(), r)
                            }
                            (Mode::Raw | Mode::Relay, _) => {
                                let t0 = Instant::now();
                                let r = x.call(&raw_ping);
                                (t0.elapsed(), r)
                            }
                        };
                        r.map_err(|e| format!("{} {}: {e}", mode.name(), s.kind.name()))?;
                        // Imm rows report the half round trip; the others the whole round.
                        let us = dt.as_secs_f64() * 1e6 / if s.kind == Kind::Imm { 2.0 } else { 1.0 };
                        if rep >= self.warmup {
                            row.samples(mode).push(us);
                        }
                    }
                    Ok(())
                })?;
                for p in peers.iter_mut() {
                    p.ctl.recv()?;
                }
                // Reap the raw side's own local completions.
                self.raw.drain(Instant::now() + DEADLINE)?;
            }
        }
        Ok(())
    }
}

/// Host cost: the engine over the `null` provider (work requests complete as
/// they are posted, no bytes move), so what is timed is the engine's own path:
/// submit, validate, queue, shard, template, post, aggregate, notify. Its raw
/// baseline is the bare hand-off of as many requests to a worker thread
/// (handoff.rs), in the same repetitions.
pub fn host_cost(spec: &Spec, reps: usize, warmup: usize, progress: &dyn Fn(&str)) -> R<Row> {
    // With --progress manual the submitting thread also posts and polls:
    // no hand-off at all.
    let cfg = EngineConfig {
        provider: Some("null".into()),
        manual_progress: crate::manual_progress(),
        idle_policy: crate::idle_policy(),
        ..Default::default()
    };
    let e = TransferEngine::new(&cfg).map_err(|e| e.to_string())?;
    let pages = spec.pages.max(1);
    let len = (spec.size as usize * pages.max(spec.peers)).max(64);
    let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
    // SAFETY: a and b outlive the engine's use (e is dropped first, below).
    let src = unsafe { e.register(a.as_mut_ptr(), len) }.map_err(|e| e.to_string())?;
    // SAFETY: as above, for b.
    let dst = unsafe { e.register(b.as_mut_ptr(), len) }.map_err(|e| e.to_string())?;
    let idx: Vec<u32> = (0..pages as u32).collect();
    // Scatter destinations on `peers` distinct (null) peers.
    let fake: Vec<Arc<MrDesc>> = (0..spec.peers)
        .map(|i| {
            let mut d = (**dst.descriptor()).clone();
            d.owner = NetAddr { epoch: 1, domains: vec![format!("null-peer-{i}").into_bytes().into()].into() };
            d.keys = vec![RemoteKey { remote_base: b.as_ptr() as u64, key: 1 }];
            Arc::new(d)
        })
        .collect();
    let group = if spec.kind == Kind::HostScatter {
        Some(e.add_peer_set(&fake.iter().map(|d| d.owner.clone()).collect::<Vec<_>>()).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let dsts: Vec<ScatterDst> = fake
        .iter()
        .enumerate()
        .map(|(i, d)| ScatterDst {
            len: spec.size,
            src_offset: (i as u64 * spec.size) % len as u64,
            dst: d.clone(),
            dst_offset: 0,
        })
        .collect();
    let per_req = match spec.kind {
        Kind::HostPaged => pages,
        Kind::HostScatter => spec.peers,
        _ => 1,
    };
    let mut row = Row {
        spec: spec.clone(),
        provider: "null".into(),
        domains: 1,
        engine: Vec::new(),
        raw: Vec::new(),
        relay: Vec::new(),
        bytes: 0,
        verified: None,
    };
    for rep in 0..warmup + reps {
        progress(&format!("rep {}/{}", rep + 1, warmup + reps));
        for mode in modes(rep, false) {
            let ns = match mode {
                // The bare hand-off of as many requests, the same window and
                // batches (handoff.rs).
                Mode::Raw | Mode::Relay => {
                    let b = if spec.kind == Kind::HostBatch { spec.pages } else { 1 };
                    crate::handoff::floor_ns(spec.iters, spec.window, b, Instant::now() + DEADLINE)?
                }
                Mode::Engine if spec.kind == Kind::HostBatch => {
                    let t0 = Instant::now();
                    crate::batch::windowed_batches(&e, spec.iters, spec.window, spec.pages, |_, dones| {
                        let write = |done: OnDone| SingleWrite {
                            len: spec.size,
                            imm: None,
                            src_offset: 0,
                            dst: dst.descriptor(),
                            dst_offset: 0,
                            done: done.into(),
                        };
                        e.submit_single_writes(&src, dones.map(write))
                    })?;
                    t0.elapsed().as_secs_f64() * 1e9 / spec.iters as f64
                }
                Mode::Engine => {
                    let t0 = Instant::now();
                    windowed(&e, spec.iters, spec.window, 0, |_, done| match spec.kind {
                        Kind::HostPaged => e.submit_paged_writes(
                            spec.size,
                            None,
                            &src,
                            Pages { indices: &idx, stride: spec.size, offset: 0 },
                            dst.descriptor(),
                            Pages { indices: &idx, stride: spec.size, offset: 0 },
                            done,
                        ),
                        Kind::HostScatter => e.submit_scatter(group, None, &src, &dsts, done),
                        _ => e.submit_single_write(spec.size, None, &src, 0, dst.descriptor(), 0, done),
                    })?;
                    t0.elapsed().as_secs_f64() * 1e9 / spec.iters as f64
                }
            };
            if rep >= warmup {
                row.samples(mode).push(ns / per_req as f64);
            }
        }
    }
    drop((src, dst));
    drop(e);
    drop((a, b));
    Ok(row)
}
