//! The DomainGroup worker: one thread that owns 1..N domains, takes requests
//! from a lock-free queue, shards them over its domains, keeps the send
//! queues full, polls every completion queue continuously (libfabric's
//! software providers only progress when polled), aggregates per-unit
//! completions into one per request and counts immediates.
mod accept;
mod control;
pub mod counters;
mod ending;
mod fence;
mod goodbye;
mod mailbox;
mod peers;
mod recv;
pub mod request;
mod split;
mod stage;
mod start;
mod tables;
mod waiter;

use crate::completion::imm::ImmCounter;
use crate::completion::notify::{Notifier, OnDone};
use crate::config::{EngineConfig, IdlePolicy};
use crate::domain::{Chan, Completion, Domain, LocalMr, Memory, Post};
use crate::error::{Error, Result, Status};
use crate::wire::NetAddr;
use crossbeam_queue::{ArrayQueue, SegQueue};
use held::{Dsts, Regions};
use peers::Peers;
use recv::{OwnedMem, RecvPool};
use request::{Ctrl, Request, Shape};
use slots::Slots;
use split::Splits;
use stage::Staging;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};
use tables::{held, slots, timers, token};
use timers::Timers;
use token::Token;

/// State shared between the API (any thread) and the worker.
pub struct Shared {
    pub data: ArrayQueue<Request>,
    pub ctrl: SegQueue<Ctrl>,
    pub stop: AtomicBool,
    /// Requests submitted and not yet reported (bounded by `max_inflight`).
    pub inflight: Arc<AtomicUsize>,
    napping: AtomicBool,
    thread: std::sync::OnceLock<Thread>,
    /// The worker's wake eventfd when it blocks on wait fds (waiter.rs); -1 if it naps.
    wake_fd: std::sync::atomic::AtomicI32,
    /// This engine's mark on the descriptors its worker holds (held.rs).
    pub tag: u32,
    /// The home group's: an expectation is armed (or an immediate mirrored),
    /// so the other groups' workers idle as if it were theirs.
    awaited: AtomicBool,
}

impl Shared {
    /// Wakes the worker if it is napping. Cheap when it is not.
    pub fn wake(&self) {
        if self.napping.load(Ordering::SeqCst) {
            let fd = self.wake_fd.load(Ordering::Relaxed);
            if fd >= 0 {
                waiter::wake(fd);
            }
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

/// Where a group's worker sits in its engine, given when it starts.
pub struct Place {
    /// The group's index in its engine (0: the home group).
    pub index: usize,
    /// The group's epoch: the engine's identity with `index` in the low bits
    /// (`NetAddr::engine_id`).
    pub epoch: u64,
    /// The home group's state, for a worker of another group (its
    /// immediates are counted there); `None` for the home group itself.
    pub home: Option<Arc<Shared>>,
    /// The engine's main address (group 0's), for a worker of another group:
    /// its engine messages carry it, so peers can name the engine.
    pub main: Option<NetAddr>,
    /// Where peer-state changes go (the application's callback, per peer engine).
    pub peer_states: Option<Arc<crate::completion::peer_state::PeerStates>>,
}

/// What the engine learns about its group when the worker has started.
pub struct GroupInfo {
    pub address: NetAddr,
    pub provider: String,
    pub max_msg: usize,
    /// The largest message `submit_send` takes on this engine.
    pub max_send: usize,
    /// Whether every domain registers CUDA device memory (`Domain::device_memory`).
    pub device_memory: bool,
    /// Whether requests may ask for delivery fences (`Domain::orders_sends_after_writes`).
    pub delivery_fences: bool,
    /// The NIC of each domain, in domain order.
    pub nics: Vec<crate::domain::Nic>,
}

pub use stage::MAX_SEND;
pub use start::{Progress, manual, new_epoch_base, spawn};
/// Work requests posted per domain before the worker polls again.
const POST_BURST: usize = 256;
/// Empty polling passes between two `sched_yield`s.
const YIELD_EVERY: u32 = 16;
/// How often keepalives, peer timeouts and deadlines are looked at.
const TIMER_TICK: Duration = Duration::from_millis(1);
/// The longest a blocked worker sleeps (keepalives and peer timeouts are
/// looked at when it wakes; deadlines wake it in time).
const BLOCK_MAX: Duration = Duration::from_millis(10);

/// The worker of one DomainGroup: it owns the group's domains and every
/// piece of request state; only its thread touches them (`FI_THREAD_DOMAIN`).
struct Worker<D: Domain> {
    /// The group's NICs, in domain order.
    domains: Vec<D>,
    /// What the API shares with it: the submission and control queues, the
    /// stop flag, the wake-up (start.rs).
    shared: Arc<Shared>,
    /// How requests and events are reported (callback thread or flags).
    notifier: Notifier,
    /// This group's configuration (engine settings, its NICs and CPUs).
    cfg: EngineConfig,
    /// This engine's address (with its epoch), as peers know it.
    address: NetAddr,
    /// The requests it holds (tables/slots.rs).
    slots: Slots,
    /// Per domain: the requests with units still to post there, (slot, epoch).
    pending: Vec<VecDeque<(u32, u32)>>,
    /// Rotates the first domain of each sharded request (request.rs).
    rr: usize,
    /// The registered regions requests read from.
    regions: Regions,
    /// The destination descriptors requests write to.
    dsts: Dsts,
    /// Work requests and bytes per NIC and peer (counters.rs).
    tally: counters::Tally,
    /// Immediates counted per value, and the expectations on them (home group).
    imm: ImmCounter,
    /// The application's receive pools (recv.rs).
    pools: Vec<RecvPool>,
    /// Receive buffers to post again, (pool, index): their callbacks returned.
    repost: VecDeque<(u32, u32)>,
    /// Peer groups (`add_peer_group`): the peer entries of each, by id - 1.
    groups: Vec<Arc<[u32]>>,
    /// The peer table and the engine's own protocol (peers.rs).
    peers: Peers,
    /// Request and expectation deadlines (tables/timers.rs).
    timers: Timers,
    /// The time at the start of this pass.
    now: Instant,
    /// When keepalives and deadlines are looked at next (every TIMER_TICK).
    next_tick: Instant,
    /// 64 registered bytes: the source of zero-byte writes (barriers,
    /// immediates without data), registered in every domain (`scratch_mr`).
    scratch: Arc<OwnedMem>,
    scratch_mr: Vec<LocalMr>,
    /// Copies of messages being sent (stage.rs).
    stage: Staging,
    /// Reused buffers: one poll's completions, a dead peer's abandoned tokens.
    comps: Vec<Completion>,
    abandoned: Vec<u64>,
    /// Writes split into bytes, then a zero-byte immediate (split.rs).
    splits: Splits,
    /// Blocks the idle worker on the domains' wait fds (None: it naps).
    waiter: Option<waiter::Waiter>,
    /// The home group, where this worker's immediates are counted (`None`:
    /// this is the home group); `forward` holds the arrivals of one pass.
    home: Option<Arc<Shared>>,
    forward: Vec<(u32, u64)>,
    /// Delivery fences to send and answers owed (fence.rs).
    fences: fence::Fences,
    /// This group's index in its engine.
    group: usize,
    /// Peer-state reports go here (none: the application did not ask).
    peer_states: Option<Arc<crate::completion::peer_state::PeerStates>>,
    /// This group's liveness record, held for the worker's life where keys
    /// do not fence a restart (shm; liveness.rs).
    _live: Option<crate::liveness::Record>,
}

/// Closes one registration per domain (`locals[d]` in domain `d`).
fn release<D: Domain>(domains: &mut [D], locals: &[LocalMr]) {
    for (d, m) in domains.iter_mut().zip(locals) {
        d.deregister(m);
    }
}

impl<D: Domain> Worker<D> {
    fn new(cfg: EngineConfig, shared: Arc<Shared>, notifier: Notifier, place: Place) -> Result<Self> {
        let mut domains = Vec::with_capacity(cfg.domains);
        for spec in cfg.domain_specs()? {
            domains.push(D::open(&spec)?);
        }
        let scratch = OwnedMem::new(64);
        let mut scratch_mr = Vec::new();
        for d in domains.iter_mut() {
            scratch_mr.push(d.register(scratch.ptr, scratch.len, Memory::Host)?);
        }
        let stage = Staging::new(&mut domains[0])?;
        let address = NetAddr { epoch: place.epoch, domains: domains.iter().map(|d| d.address().into()).collect() };
        let live = if domains[0].keys_checked_by_target() {
            None
        } else {
            Some(crate::liveness::Record::create(address.epoch)?)
        };
        let peers = Peers::new(&mut domains, &address, place.main.as_ref(), cfg.keepalive_interval)?;
        let fds: Option<Vec<i32>> = domains.iter().map(|d| d.wait_fd()).collect();
        let waiter = fds.filter(|_| cfg.idle_policy != IdlePolicy::Spin).and_then(|f| waiter::Waiter::new(&f));
        if let Some(w) = &waiter {
            shared.wake_fd.store(w.wake_fd, Ordering::Relaxed);
        }
        let now = Instant::now();
        let dsts = Dsts::new(shared.tag);
        let domains_n = domains.len();
        Ok(Worker {
            pending: (0..domains.len()).map(|_| VecDeque::new()).collect(),
            splits: Splits::new(domains.len()),
            domains,
            shared,
            notifier,
            cfg,
            address,
            slots: Slots::default(),
            rr: 0,
            regions: Regions::default(),
            tally: counters::Tally::new(domains_n),
            dsts,
            imm: ImmCounter::default(),
            pools: Vec::new(),
            repost: VecDeque::new(),
            groups: Vec::new(),
            peers,
            timers: Timers::default(),
            now,
            next_tick: now,
            scratch,
            scratch_mr,
            stage,
            comps: Vec::with_capacity(64),
            abandoned: Vec::new(),
            waiter,
            home: place.home,
            forward: Vec::new(),
            fences: Default::default(),
            group: place.index,
            peer_states: place.peer_states,
            _live: live,
        })
    }

    fn info(&self) -> GroupInfo {
        GroupInfo {
            address: self.address.clone(),
            provider: self.domains[0].provider().to_string(),
            max_msg: self
                .domains
                .iter()
                .map(|d| d.max_msg_size())
                .chain(self.cfg.max_msg_size)
                .min()
                .unwrap_or(usize::MAX),
            // Sends go through domain 0; one larger than its answer-free limit cannot be split.
            max_send: MAX_SEND.min(self.domains[0].answer_free_limit()),
            device_memory: self.domains.iter().all(|d| d.device_memory()),
            delivery_fences: self.domains.iter().all(|d| d.orders_sends_after_writes()),
            nics: self.domains.iter().map(|d| d.nic()).collect(),
        }
    }

    fn run(mut self) {
        let spin = Duration::from_micros(self.cfg.idle_spin_us);
        let nap = Duration::from_micros(self.cfg.idle_nap_us.max(1));
        let mut idle_since: Option<Instant> = None;
        let mut empty_passes = 0u32;
        let mut awaited = false;
        while !self.shared.stop.load(Ordering::Acquire) {
            if self.home.is_none() && self.imm.awaited() != awaited {
                awaited = !awaited;
                self.shared.awaited.store(awaited, Ordering::Relaxed);
            }
            if self.step() {
                idle_since = None;
                // A waiter that shares this core (a small host) sees its
                // completion now rather than at the end of our time slice.
                // (With requests queued, the application is not waiting.)
                if self.notifier.take_fired() && self.shared.data.is_empty() {
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
            // Work in flight: its completions come any moment, keep polling.
            if self.slots.live() > 0 {
                idle_since = None;
                continue;
            }
            let since = *idle_since.get_or_insert(self.now);
            if self.now.duration_since(since) < spin {
                continue;
            }
            // An armed expectation (or a mirror): data may come any moment,
            // through any group's NICs.
            if self.imm.awaited() || self.home.as_ref().is_some_and(|h| h.awaited.load(Ordering::Relaxed)) {
                match self.cfg.idle_policy {
                    IdlePolicy::Spin => continue,
                    IdlePolicy::Auto if self.waiter.is_none() => continue,
                    _ => {}
                }
            }
            self.shared.napping.store(true, Ordering::SeqCst);
            if self.shared.data.is_empty() && self.shared.ctrl.is_empty() {
                self.sleep(nap);
            }
            self.shared.napping.store(false, Ordering::SeqCst);
        }
        self.shutdown();
    }

    /// Sleeps while idle: blocked on the domains' wait fds (woken by an
    /// arrival, a completion, a submit or the next deadline) when there is a
    /// waiter and every domain agrees nothing is pending (`try_wait`; else it
    /// returns to poll), or a nap of `nap`.
    fn sleep(&mut self, nap: Duration) {
        if self.waiter.is_none() {
            std::thread::park_timeout(nap);
            return;
        }
        if !self.domains.iter_mut().all(|d| d.try_wait()) {
            return;
        }
        let until_timer = self.timers.next().map_or(BLOCK_MAX, |t| t.saturating_duration_since(Instant::now()));
        self.waiter.as_ref().unwrap().wait(until_timer.min(BLOCK_MAX));
    }

    /// One pass: new requests and posting first (a request's latency), then
    /// control commands (whose callers wait on a channel), then completions,
    /// then (every millisecond) keepalives and deadlines. True if anything happened.
    fn step(&mut self) -> bool {
        self.now = Instant::now();
        let mut busy = false;
        for _ in 0..64 {
            let Some(r) = self.shared.data.pop() else {
                break;
            };
            self.accept(r);
            busy = true;
        }
        busy |= self.post_all();
        while let Some(c) = self.shared.ctrl.pop() {
            self.control(c);
            busy = true;
        }
        busy |= self.poll_all();
        if self.now >= self.next_tick {
            self.next_tick = self.now + TIMER_TICK;
            busy |= self.tick();
        }
        self.notifier.release_inflight();
        busy
    }

    fn post_all(&mut self) -> bool {
        // Receive buffers first, so that a peer's message always finds one.
        let mut busy = self.post_receives();
        busy |= self.post_engine_receives();
        busy |= self.post_fences();
        for d in 0..self.domains.len() {
            busy |= self.post_domain(d);
        }
        busy
    }

    fn post_domain(&mut self, d: usize) -> bool {
        let scratch_mr = self.scratch_mr[d];
        let scratch = (self.scratch.ptr as *const u8, &scratch_mr);
        let (mut posted, mut busy_peers) = (self.post_split_imms(d) as usize, 0);
        while posted < POST_BURST && busy_peers < self.pending[d].len() {
            let Some(&(slot, epoch)) = self.pending[d].front() else {
                break;
            };
            let a = match self.slots.current(slot, epoch) {
                Some(a) if a.error.is_none() && a.next[d] < a.units => a,
                _ => {
                    self.pending[d].pop_front();
                    continue;
                }
            };
            let k = a.next[d];
            let tok = Token::Request { slot, epoch }.encode();
            let entry = a.unit_peers.as_ref().map_or(a.peer, |u| u[k]);
            // Nothing goes to an engine whose liveness record says it is gone
            // (shm: a restarted process could sit at its pid; liveness.rs).
            if self.peers.gone(entry) {
                self.peer_gone(entry);
                continue;
            }
            let peer = self.peers.id(entry, d);
            let (res, bytes) = if let Shape::Send { msg, .. } = &a.req.shape {
                if a.stage.is_none() {
                    let Some(s) = self.stage.stage(msg) else {
                        break;
                    };
                    a.stage = Some(s);
                }
                let buf = self.stage.buf(a.stage.unwrap());
                (self.domains[d].post_send(Chan::User, peer, buf, msg.len(), self.stage.desc(), tok), msg.len())
            } else {
                let src = a.req.region.map(|i| &self.regions.locals(i)[d]);
                let wr = a.req.write_wr(k, d, peer, src, scratch, &self.dsts);
                let r = if wr.imm.is_some() && wr.len > self.domains[d].answer_free_limit() {
                    let (bytes, i) = self.splits.start(&wr, Token::Request { slot, epoch });
                    let r = self.domains[d].post_write(&bytes, Token::Split(i).encode());
                    if !matches!(r, Ok(Post::Posted)) {
                        self.splits.take(i);
                    }
                    r
                } else {
                    self.domains[d].post_write(&wr, tok)
                };
                (r, wr.len)
            };
            match res {
                Ok(Post::Posted) => {
                    self.tally.posted(d, peer, bytes);
                    a.next[d] += a.step;
                    a.posted += 1;
                    a.outstanding += 1;
                    posted += 1;
                }
                Ok(Post::Again) => break,
                // Its peer's window is full: let the requests behind it go first.
                Ok(Post::Busy) => {
                    self.pending[d].rotate_left(1);
                    busy_peers += 1;
                }
                Err(e) => {
                    self.pending[d].pop_front();
                    self.end(slot, e);
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
                self.complete(d, c);
            }
            self.comps = comps;
        }
        if !self.forward.is_empty() {
            let home = self.home.as_ref().unwrap();
            home.ctrl.push(Ctrl::ImmArrived { counts: std::mem::take(&mut self.forward) });
            home.wake();
        }
        // Answers last: whatever arrived before a FENCE (or a BYE) is counted,
        // or queued at home ahead of anything its answer leads to.
        self.send_acks();
        self.send_fence_acks();
        busy
    }

    /// An immediate landed on this (non-home) group's NIC: counted at home,
    /// once per pass and value (`Ctrl::ImmArrived`).
    fn forward_imm(&mut self, imm: u32) {
        match self.forward.iter_mut().find(|(i, _)| *i == imm) {
            Some((_, n)) => *n += 1,
            None => self.forward.push((imm, 1)),
        }
    }

    fn complete(&mut self, d: usize, c: Completion) {
        let (token, res, sent) = match c {
            Completion::RemoteWrite { imm } if self.home.is_some() => return self.forward_imm(imm),
            Completion::RemoteWrite { imm } => return self.imm.arrived(imm, &self.notifier, 1),
            Completion::Done { token, peer, bytes } => (token, Ok(0), Some((peer, bytes))),
            Completion::Recv { token, len, .. } => (token, Ok(len), None),
            Completion::Failed { token, peer, error } => (token, Err((peer, error)), None),
        };
        let t = Token::decode(token);
        // The application's work requests count; the engine's messages do not.
        if let (Some((peer, bytes)), Token::Request { .. } | Token::Split(_)) = (sent, t) {
            self.tally.completed(d, peer, bytes);
        }
        match (t, res) {
            (Token::EngineRecv(i), res) => self.engine_recv(i, res.ok()),
            (Token::EngineSend { peer, slot }, res) => self.engine_sent(peer, slot, res.err().map(|(_, e)| e)),
            (Token::Recv { pool, index }, res) => {
                let res = res.map_err(|(_, e)| Error::new(e.status, format!("receive failed: {}", e.message)));
                self.deliver(pool, index, res)
            }
            (Token::Split(i), Ok(_)) => self.split_done(d, i),
            (t, Ok(_)) => self.wr_done(t, None),
            (t, Err((peer, e))) => {
                self.tally.failed(d, peer);
                let err = Error::new(e.status, format!("work request failed: {}", e.message));
                self.wr_done(t, Some(err.clone()));
                // An unreachable peer fails everything else sent to it too.
                if err.status == Status::PeerDown {
                    if let Some(p) = self.peers.by_id(d, peer) {
                        self.peer_down(p, err);
                    }
                }
            }
        }
    }

    /// One work request of a request (`Token::Request`, or the bytes of a
    /// `Token::Split`) came back from the provider (or was abandoned),
    /// failed with `err` if given.
    fn wr_done(&mut self, token: Token, err: Option<Error>) {
        // A split's bytes failed or were abandoned: its request's unit did.
        let token = if let Token::Split(i) = token { self.splits.take(i) } else { token };
        let Token::Request { slot, epoch } = token else {
            unreachable!("wr_done on {token:?}");
        };
        let Some(a) = self.slots.current(slot, epoch) else {
            return;
        };
        a.outstanding -= 1;
        match err {
            Some(e) => self.end(slot, e),
            None => self.maybe_finish(slot),
        }
    }

    /// Reports request `slot` if it has finished (`Slots::finish`); one that
    /// wants a delivery fence gets it first (fence.rs).
    fn maybe_finish(&mut self, slot: u32) {
        if self.slots.get(slot).is_some_and(|a| a.fence_due()) {
            self.start_fence(slot);
        }
        let (stage, regions, dsts, domains) = (&mut self.stage, &mut self.regions, &mut self.dsts, &mut self.domains);
        let notifier = &self.notifier;
        self.slots.finish(slot, |a| {
            if let Some(s) = a.stage {
                stage.release(s);
            }
            accept::put_refs(regions, dsts, domains, &a.req, a.req.dst_count());
            let done = std::mem::replace(&mut a.req.done, OnDone::Nothing);
            notifier.fire_request(a.req.id, done, a.error.take().map_or(Ok(()), Err));
        });
    }
}
