//! The DomainGroup worker: one thread that owns 1..N domains, takes requests
//! from a lock-free queue, shards them over its domains, keeps the send
//! queues full, polls every completion queue continuously (libfabric's
//! software providers only progress when polled), aggregates per-unit
//! completions into one per request and counts immediates.
pub mod request;
mod recv;

use crate::config::EngineConfig;
use crate::domain::{Completion, Domain, LocalMr, PeerId, Post};
use crate::engine::imm::ImmCounter;
use crate::engine::notify::{Notifier, shutdown_error};
use crate::error::{Error, Result, Status};
use crate::wire::{MAX_DOMAINS, NetAddr};
use crossbeam_queue::{ArrayQueue, SegQueue};
use recv::{OwnedMem, RecvPool};
use request::{Ctrl, Request, Shape};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// State shared between the API (any thread) and the worker.
pub struct Shared {
    pub data: ArrayQueue<Request>,
    pub ctrl: SegQueue<Ctrl>,
    pub stop: AtomicBool,
    napping: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
}

impl Shared {
    /// Wakes the worker if it is napping. Cheap when it is not.
    pub fn wake(&self) {
        if self.napping.load(Ordering::SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

/// What the engine learns about its group when the worker has started.
pub struct GroupInfo {
    pub address: NetAddr,
    pub provider: String,
    pub max_msg: usize,
}

/// Size of one send staging slot (the largest message `submit_send` takes).
pub const MAX_SEND: usize = 64 * 1024;
const SEND_SLOTS: usize = 64;
const RECV_BIT: u64 = 1 << 63;
/// Work requests posted per domain before the worker polls again.
const POST_BURST: usize = 256;
/// Empty polling passes between two `sched_yield`s.
const YIELD_EVERY: u32 = 16;
/// How long shutdown waits for the NIC to finish with in-flight buffers.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// Starts a worker over `cfg.domains` domains of type `D`.
pub fn spawn<D: Domain>(cfg: &EngineConfig, notifier: Notifier) -> Result<(Arc<Shared>, GroupInfo, JoinHandle<()>)> {
    if cfg.domains == 0 || cfg.domains > MAX_DOMAINS {
        crate::bail!(InvalidArgument, "domains must be 1..={MAX_DOMAINS}, got {}", cfg.domains);
    }
    let shared = Arc::new(Shared {
        data: ArrayQueue::new(cfg.submit_queue.max(1)),
        ctrl: SegQueue::new(),
        stop: AtomicBool::new(false),
        napping: AtomicBool::new(false),
        thread: Default::default(),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let (cfg2, shared2) = (cfg.clone(), shared.clone());
    let handle = std::thread::Builder::new()
        .name("fabriclib-worker".into())
        .spawn(move || {
            // Domains are opened on the worker thread, so that (once the worker is
            // pinned, in a later version) their memory lands on its NUMA node.
            match Worker::<D>::new(cfg2, shared2, notifier) {
                Ok(w) => {
                    let _ = tx.send(Ok(w.info()));
                    w.run();
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })
        .map_err(|e| Error::new(Status::Provider, format!("cannot start the worker thread: {e}")))?;
    let _ = shared.thread.set(handle.thread().clone());
    match rx.recv() {
        Ok(Ok(info)) => Ok((shared, info, handle)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(Error::new(Status::Panic, "the worker thread died while starting"))
        }
    }
}

struct Active {
    req: Request,
    epoch: u32,
    units: usize,
    posted: usize,
    outstanding: usize,
    /// Next unit each domain posts (steps by N).
    next: [usize; MAX_DOMAINS],
    /// The destination peer per domain, for single-destination requests.
    peers: [PeerId; MAX_DOMAINS],
    error: Option<Error>,
    /// The staging slot of a send.
    stage: Option<u32>,
}

struct Worker<D: Domain> {
    domains: Vec<D>,
    shared: Arc<Shared>,
    notifier: Notifier,
    cfg: EngineConfig,
    actives: Vec<Option<Active>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    live: usize,
    pending: Vec<VecDeque<(u32, u32)>>,
    rr: usize,
    mrs: HashMap<u64, Vec<LocalMr>>,
    imm: ImmCounter,
    pools: Vec<RecvPool>,
    repost: VecDeque<(u32, u32)>,
    groups: Vec<Vec<[PeerId; MAX_DOMAINS]>>,
    scratch: Arc<OwnedMem>,
    scratch_mr: Vec<LocalMr>,
    stage: Arc<OwnedMem>,
    stage_mr: LocalMr,
    stage_free: Vec<u32>,
    comps: Vec<Completion>,
}

/// Closes one registration per domain (`locals[d]` in domain `d`).
fn release<D: Domain>(domains: &mut [D], locals: &[LocalMr]) {
    for (d, m) in domains.iter_mut().zip(locals) {
        d.deregister(m);
    }
}

fn token(slot: u32, epoch: u32) -> u64 {
    (epoch as u64) << 32 | slot as u64
}

impl<D: Domain> Worker<D> {
    fn new(cfg: EngineConfig, shared: Arc<Shared>, notifier: Notifier) -> Result<Self> {
        let mut domains = Vec::with_capacity(cfg.domains);
        for i in 0..cfg.domains {
            domains.push(D::open(&cfg, i)?);
        }
        let scratch = OwnedMem::new(64);
        let stage = OwnedMem::new(MAX_SEND * SEND_SLOTS);
        let mut scratch_mr = Vec::new();
        for d in domains.iter_mut() {
            scratch_mr.push(d.register(scratch.ptr, scratch.len)?);
        }
        let stage_mr = domains[0].register(stage.ptr, stage.len)?;
        Ok(Worker {
            pending: (0..domains.len()).map(|_| VecDeque::new()).collect(),
            domains,
            shared,
            notifier,
            cfg,
            actives: Vec::new(),
            gens: Vec::new(),
            free: Vec::new(),
            live: 0,
            rr: 0,
            mrs: HashMap::new(),
            imm: ImmCounter::default(),
            pools: Vec::new(),
            repost: VecDeque::new(),
            groups: Vec::new(),
            scratch,
            scratch_mr,
            stage,
            stage_mr,
            stage_free: (0..SEND_SLOTS as u32).rev().collect(),
            comps: Vec::with_capacity(64),
        })
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            address: NetAddr { domains: self.domains.iter().map(|d| d.address().into()).collect() },
            provider: self.domains[0].provider().to_string(),
            max_msg: self.domains.iter().map(|d| d.max_msg_size()).chain(self.cfg.max_msg_size).min().unwrap_or(usize::MAX),
        }
    }

    fn run(mut self) {
        let spin = Duration::from_micros(self.cfg.idle_spin_us);
        let nap = Duration::from_micros(self.cfg.idle_nap_us.max(1));
        let mut idle_since: Option<Instant> = None;
        let mut empty_passes = 0u32;
        while !self.shared.stop.load(Ordering::Acquire) {
            if self.step() {
                idle_since = None;
                // A waiter that shares this core (a small host) sees its
                // completion now rather than at the end of our time slice.
                if self.notifier.take_fired() {
                    std::thread::yield_now();
                }
                continue;
            }
            // Nothing happened this pass. On an oversubscribed host, let other
            // runnable threads (the application's, other engines') have the core
            // now and then; with none, sched_yield returns at once.
            empty_passes = empty_passes.wrapping_add(1);
            if empty_passes % YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
            // Work in flight or an armed expectation: something will arrive, keep polling.
            if self.live > 0 || self.imm.armed() > 0 {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= spin {
                self.shared.napping.store(true, Ordering::SeqCst);
                if self.shared.data.is_empty() && self.shared.ctrl.is_empty() {
                    std::thread::park_timeout(nap);
                }
                self.shared.napping.store(false, Ordering::SeqCst);
            }
        }
        self.shutdown();
    }

    /// One pass: new requests and posting first (a request's latency), then
    /// control commands (whose callers wait on a channel), then completions.
    /// True if anything happened.
    fn step(&mut self) -> bool {
        let mut busy = false;
        for _ in 0..64 {
            let Some(r) = self.shared.data.pop() else { break };
            self.accept(r);
            busy = true;
        }
        busy |= self.post_all();
        while let Some(c) = self.shared.ctrl.pop() {
            self.control(c);
            busy = true;
        }
        busy |= self.poll_all();
        busy
    }

    fn control(&mut self, c: Ctrl) {
        match c {
            Ctrl::Register { id, ptr, len, reply } => {
                let mut locals = Vec::new();
                for d in self.domains.iter_mut() {
                    match d.register(ptr as *mut u8, len) {
                        Ok(m) => locals.push(m),
                        Err(e) => {
                            release(&mut self.domains, &locals);
                            let _ = reply.send(Err(e));
                            return;
                        }
                    }
                }
                self.mrs.insert(id, locals.clone());
                let _ = reply.send(Ok(locals));
            }
            Ctrl::Deregister { id } => {
                if let Some(locals) = self.mrs.remove(&id) {
                    release(&mut self.domains, &locals);
                }
            }
            Ctrl::Expect { imm, count, done, reply } => {
                let _ = reply.send(self.imm.expect(imm, count, done, &self.notifier));
            }
            Ctrl::RecvPool { len, count, cb, reply } => {
                let _ = reply.send(self.add_pool(len, count, cb));
            }
            Ctrl::Repost { pool, index } => self.repost.push_back((pool, index)),
            Ctrl::AddGroup { addrs, reply } => {
                let mut members = Vec::with_capacity(addrs.len());
                for a in &addrs {
                    let mut peers = [0; MAX_DOMAINS];
                    for (d, dom) in self.domains.iter_mut().enumerate() {
                        match dom.resolve(&a.domains[d]) {
                            Ok(p) => peers[d] = p,
                            Err(e) => {
                                let _ = reply.send(Err(e));
                                return;
                            }
                        }
                    }
                    members.push(peers);
                }
                self.groups.push(members);
                let _ = reply.send(Ok(self.groups.len() as u64));
            }
        }
    }

    /// Takes a new request: resolves its destination and queues its units on the domains.
    fn accept(&mut self, req: Request) {
        let n = self.domains.len();
        let units = req.units();
        let mut peers = [0; MAX_DOMAINS];
        let resolved = match (&req.shape, req.single_dst()) {
            (Shape::Send { to, .. }, _) => self.domains[0].resolve(&to.domains[0]).map(|p| peers[0] = p),
            (_, Some(dst)) => (0..n).try_for_each(|d| {
                peers[d] = self.domains[d].resolve(&dst.owner.domains[d])?;
                Ok(())
            }),
            _ => Ok(()),
        };
        if let Err(e) = resolved {
            self.notifier.fire(req.done, Err(e));
            return;
        }
        // Sends always go through domain 0; everything else rotates the first domain.
        let rr = if matches!(req.shape, Shape::Send { .. }) { 0 } else { self.rr };
        self.rr = (self.rr + units) % n;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.actives.push(None);
                self.gens.push(0);
                (self.actives.len() - 1) as u32
            }
        };
        let epoch = self.gens[slot as usize];
        let mut next = [usize::MAX; MAX_DOMAINS];
        for (d, nx) in next.iter_mut().enumerate().take(n) {
            *nx = (d + n - rr % n) % n;
            if *nx < units {
                self.pending[d].push_back((slot, epoch));
            }
        }
        self.actives[slot as usize] =
            Some(Active { req, epoch, units, posted: 0, outstanding: 0, next, peers, error: None, stage: None });
        self.live += 1;
    }

    fn post_all(&mut self) -> bool {
        // Receive buffers first, so that a peer's message always finds one.
        let mut busy = self.post_receives();
        for d in 0..self.domains.len() {
            busy |= self.post_domain(d);
        }
        busy
    }

    fn post_domain(&mut self, d: usize) -> bool {
        let n = self.domains.len();
        let scratch_mr = self.scratch_mr[d];
        let scratch = (self.scratch.ptr as *const u8, &scratch_mr);
        let mut posted = 0;
        while posted < POST_BURST {
            let Some(&(slot, epoch)) = self.pending[d].front() else { break };
            let a = match self.actives[slot as usize].as_mut() {
                Some(a) if a.epoch == epoch && a.error.is_none() && a.next[d] < a.units => a,
                _ => {
                    self.pending[d].pop_front();
                    continue;
                }
            };
            let k = a.next[d];
            let tok = token(slot, epoch);
            let res = if let Shape::Send { msg, .. } = &a.req.shape {
                if a.stage.is_none() {
                    let Some(s) = self.stage_free.pop() else { break };
                    // SAFETY: staging slot s is ours until the send completes; msg fits (checked at submit).
                    unsafe {
                        std::ptr::copy_nonoverlapping(msg.as_ptr(), self.stage.ptr.add(s as usize * MAX_SEND), msg.len())
                    };
                    a.stage = Some(s);
                }
                // SAFETY: as above.
                let buf = unsafe { self.stage.ptr.add(a.stage.unwrap() as usize * MAX_SEND) };
                self.domains[d].post_send(a.peers[0], buf, msg.len(), self.stage_mr.desc, tok)
            } else {
                let peer = if a.req.single_dst().is_some() {
                    Ok(a.peers[d])
                } else if let Some(g) = a.req.group() {
                    Ok(self.groups[g as usize - 1][k][d])
                } else {
                    self.domains[d].resolve(&a.req.unit_dst(k).owner.domains[d])
                };
                peer.and_then(|p| self.domains[d].post_write(&a.req.write_wr(k, d, p, scratch), tok))
            };
            match res {
                Ok(Post::Posted) => {
                    a.next[d] += n;
                    a.posted += 1;
                    a.outstanding += 1;
                    posted += 1;
                }
                Ok(Post::Again) => break,
                Err(e) => {
                    a.error = Some(e);
                    self.pending[d].pop_front();
                    self.maybe_finish(slot);
                }
            }
        }
        posted > 0
    }

    fn poll_all(&mut self) -> bool {
        let mut busy = false;
        for d in 0..self.domains.len() {
            let mut comps = std::mem::take(&mut self.comps);
            comps.clear();
            match self.domains[d].poll(&mut comps) {
                Ok(0) => {}
                Ok(_) => busy = true,
                Err(e) => eprintln!("fabriclib: polling domain {d}: {e}"),
            }
            for c in comps.drain(..) {
                self.complete(c);
            }
            self.comps = comps;
        }
        busy
    }

    fn complete(&mut self, c: Completion) {
        match c {
            Completion::RemoteWrite { imm } => self.imm.arrived(imm, &self.notifier),
            Completion::Recv { token, len, .. } => self.deliver(token, Ok(len)),
            Completion::Done { token } | Completion::Failed { token, .. } if token & RECV_BIT != 0 => {
                let errno = if let Completion::Failed { errno, .. } = c { errno } else { 0 };
                self.deliver(token, Err(recv::failure(errno)));
            }
            Completion::Done { token } | Completion::Failed { token, .. } => {
                let (slot, epoch) = (token as u32, (token >> 32) as u32);
                let Some(a) = self.actives[slot as usize].as_mut().filter(|a| a.epoch == epoch) else { return };
                a.outstanding -= 1;
                if let Completion::Failed { errno, .. } = c {
                    a.error.get_or_insert_with(|| {
                        Error::new(Status::Provider, format!("work request failed: {}", crate::domain::fabric::strerror(errno)))
                    });
                }
                self.maybe_finish(slot);
            }
        }
    }

    fn maybe_finish(&mut self, slot: u32) {
        let s = slot as usize;
        let Some(a) = self.actives[s].as_ref() else { return };
        if a.outstanding > 0 || (a.error.is_none() && a.posted < a.units) {
            return;
        }
        let a = self.actives[s].take().unwrap();
        self.gens[s] = self.gens[s].wrapping_add(1);
        self.free.push(slot);
        self.live -= 1;
        if let Some(st) = a.stage {
            self.stage_free.push(st);
        }
        self.notifier.fire(a.req.done, a.error.map_or(Ok(()), Err));
    }

    fn shutdown(mut self) {
        let err = shutdown_error();
        while let Some(r) = self.shared.data.pop() {
            self.notifier.fire(r.done, Err(err.clone()));
        }
        // Nothing new is posted; requests with work on the wire end once the NIC
        // is done with their buffers (or after SHUTDOWN_DRAIN).
        for a in self.actives.iter_mut().flatten() {
            if a.posted < a.units {
                a.error = Some(err.clone());
            }
        }
        for s in 0..self.actives.len() {
            self.maybe_finish(s as u32);
        }
        let deadline = Instant::now() + SHUTDOWN_DRAIN;
        while self.live > 0 && Instant::now() < deadline {
            self.poll_all();
        }
        for s in 0..self.actives.len() {
            if let Some(a) = self.actives[s].as_mut() {
                a.outstanding = 0;
                a.error = Some(err.clone());
                self.maybe_finish(s as u32);
            }
        }
        self.imm.fail_all(&err, &self.notifier);
        for pool in &self.pools {
            let cb = pool.cb.clone();
            let e = err.clone();
            self.notifier.run(Box::new(move || cb(Err(e))));
        }
        while let Some(c) = self.shared.ctrl.pop() {
            match c {
                Ctrl::Register { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::Expect { reply, .. } | Ctrl::RecvPool { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::AddGroup { reply, .. } => drop(reply.send(Err(err.clone()))),
                Ctrl::Deregister { .. } | Ctrl::Repost { .. } => {}
            }
        }
        // Close every registration before the domains.
        // Deregisters queued above are covered: every registration still known is closed here.
        for (_, locals) in std::mem::take(&mut self.mrs) {
            release(&mut self.domains, &locals);
        }
        for pool in &self.pools {
            self.domains[0].deregister(&pool.mr);
        }
        release(&mut self.domains, &self.scratch_mr);
        self.domains[0].deregister(&self.stage_mr);
    }
}
