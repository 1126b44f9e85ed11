//! The DomainGroup worker: one thread that owns 1..N domains, takes requests
//! from a lock-free queue, shards them over its domains, keeps the send
//! queues full, polls every completion queue continuously (libfabric's
//! software providers only progress when polled), aggregates per-unit
//! completions into one per request and counts immediates.
mod accept;
mod bundle;
mod complete;
mod control;
pub mod counters;
mod ending;
mod fence;
mod goodbye;
mod mailbox;
mod pass;
mod peer_events;
mod peers;
mod post;
pub mod recv;
pub mod request;
mod requests;
mod split;
mod stage;
mod start;
mod tables;
mod waiter;

use crate::completion::imm::ImmCounter;
use crate::completion::notify::Notifier;
use crate::config::{GroupPlan, IdlePolicy, WorkerSettings};
use crate::domain::{Domain, LocalMr};
use crate::error::Result;
use crate::wire::NetAddr;
use crossbeam_queue::{ArrayQueue, SegQueue};
use pass::Pass;
use peers::Peers;
use recv::Receives;
use request::{Ctrl, Submission};
use requests::Requests;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;
use tables::{held, slots, timers, token};

/// State shared between the API (any thread) and the worker.
pub struct Shared {
    pub data: ArrayQueue<Submission>,
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
    /// What the worker counts (metrics/mod.rs); read by the engine.
    pub stats: Arc<crate::metrics::GroupStats>,
    /// Its NICs' counters per peer (counters.rs), set when the worker has
    /// opened them.
    pub tally: std::sync::OnceLock<counters::Tally>,
    /// The group's doorbell, where its worker sleeps on one (bell.rs).
    bell: std::sync::OnceLock<Arc<crate::bell::Bell>>,
    /// Emptied lists of a batch's writes, which the worker gives back once
    /// it has moved their writes into lists of its own (`bundle::own`), and
    /// `submit_single_writes` fills again: no allocation of a batch's list
    /// per batch (over a kilobyte for 16 writes, past the allocator's
    /// per-thread cache) nor its free on the worker's thread. Only a
    /// bundle's list comes back (at most `MAX_MEMBERS` writes: a larger
    /// batch is cut into new lists), so the queue pins at most 16 of those.
    pub spare_members: ArrayQueue<Vec<request::Member>>,
    /// The send slots' memory and the slots `submit_send` may take
    /// (stage.rs): a message is copied into registered memory on the
    /// caller's thread.
    pub send_slots: Arc<stage::SendSlots>,
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
            if let Some(b) = self.bell.get() {
                b.ring();
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

pub use stage::{MAX_SEND, SendMsg};
pub use start::{Progress, manual, new_epoch_base, spawn};
/// Work requests posted per domain before the worker polls again.
const POST_BURST: usize = 256;
/// Empty polling passes between two `sched_yield`s.
const YIELD_EVERY: u32 = 16;
/// How often keepalives, peer timeouts and deadlines are looked at.
const TIMER_TICK: Duration = Duration::from_millis(1);
/// Passes without a clock read between two looks at the tick (pass.rs `tick_due`).
const TICK_PASSES: u32 = 8;
/// The longest a blocked worker sleeps (keepalives and peer timeouts are
/// looked at when it wakes; deadlines wake it in time).
const BLOCK_MAX: Duration = Duration::from_millis(10);

/// The worker of one DomainGroup: it owns the group's domains and every
/// piece of request state; only its thread touches them (`FI_THREAD_DOMAIN`).
/// Its parts follow a request's path: `requests` (accept.rs → post.rs →
/// complete.rs → ending.rs), `peers` (peers.rs: the table and the engine's
/// own protocol, which reports peers up and down as events), and `pass`
/// (pass.rs: the polling loop, waiting, deadlines, immediates forwarded home).
struct Worker<D: Domain> {
    /// The group's NICs (an open domain each), in order.
    domains: Vec<D>,
    /// What the API shares with it: the submission and control queues, the
    /// stop flag, the wake-up (start.rs).
    shared: Arc<Shared>,
    /// How requests and events are reported (callback thread or flags).
    notifier: Notifier,
    /// The worker's settings (timeouts, idle policy: `EngineConfig::plan`).
    cfg: WorkerSettings,
    /// This group's address (with its epoch), as peers know it.
    address: NetAddr,
    /// This group's index in its engine.
    group: usize,
    /// The requests it holds and what they hold (requests.rs).
    requests: Requests,
    /// The peer table and the engine's own protocol (peers.rs).
    peers: Peers,
    /// The polling pass: its clock, deadlines, waiting, forwarding (pass.rs).
    pass: Pass,
    /// The application's receive pools (recv.rs).
    recv: Receives,
    /// Immediates counted per value, and the expectations on them (home group).
    imm: ImmCounter,
    /// Peer sets (`add_peer_set`): the peer entries of each, by id - 1;
    /// `None` once removed.
    peer_sets: Vec<Option<Arc<[u32]>>>,
    /// Work requests and bytes per NIC and peer (counters.rs).
    tally: counters::Tally,
    /// Peer-state reports go here (none: the application did not ask).
    peer_states: Option<Arc<crate::completion::peer_state::PeerStates>>,
    /// This group's liveness record, held for the worker's life where keys
    /// do not fence a restart (shm; liveness.rs).
    live: Option<crate::liveness::Record>,
}

/// Closes one registration per domain (`locals[d]` in domain `d`).
fn release<D: Domain>(domains: &mut [D], locals: &[LocalMr]) {
    for (d, m) in domains.iter_mut().zip(locals) {
        d.deregister(m);
    }
}

impl<D: Domain> Worker<D> {
    fn new(plan: &GroupPlan, shared: Arc<Shared>, notifier: Notifier, place: Place) -> Result<Self> {
        let cfg = plan.worker.clone();
        let mut domains = Vec::with_capacity(plan.nics.len());
        for spec in &plan.nics {
            domains.push(D::open(spec)?);
        }
        let requests = Requests::new(&mut domains, shared.tag, shared.send_slots.clone(), place.epoch)?;
        let tally = counters::Tally::new(&domains.iter().map(|d| d.nic().name).collect::<Vec<_>>());
        let _ = shared.tally.set(tally.clone());
        let address = NetAddr { epoch: place.epoch, domains: domains.iter().map(|d| d.address().into()).collect() };
        let live = if domains[0].keys_checked_by_target() {
            None
        } else {
            Some(crate::liveness::Record::create(address.epoch)?)
        };
        let peers = Peers::new(&mut domains, &address, place.main.as_ref(), cfg.keepalive_interval, cfg.peer_timeout)?;
        let fds: Option<Vec<i32>> = domains.iter().map(|d| d.wait_fd()).collect();
        let waiter = fds.filter(|_| cfg.idle_policy != IdlePolicy::Spin).and_then(|f| waiter::Waiter::new(&f));
        if let Some(w) = &waiter {
            shared.wake_fd.store(w.wake_fd, Ordering::Relaxed);
        }
        // No wait object (shm): the worker sleeps on its doorbell instead,
        // which peers on this host ring (bell.rs).
        let bell = match (&waiter, &live) {
            (None, Some(rec)) => Some(Arc::new(rec.bell())),
            _ => None,
        };
        if let Some(b) = &bell {
            let _ = shared.bell.set(b.clone());
        }
        let mut pass = Pass::new(waiter, bell, place.home);
        pass.bell_peers = live.is_some();
        Ok(Worker {
            requests,
            tally,
            imm: ImmCounter::new(shared.stats.clone()),
            domains,
            shared,
            notifier,
            cfg,
            address,
            group: place.index,
            peers,
            pass,
            recv: Receives::default(),
            peer_sets: Vec::new(),
            peer_states: place.peer_states,
            live,
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
            // Sends go through domain 0; one larger than its answer-free limit
            // cannot be split (a header before the message counts).
            max_send: MAX_SEND
                .min(self.domains[0].answer_free_limit().saturating_sub(stage::wire_header(&self.domains[0]))),
            device_memory: self.domains.iter().all(|d| d.device_memory() != crate::domain::DeviceMemory::None),
            delivery_fences: self.domains.iter().all(|d| d.orders_sends_after_writes()),
            nics: self.domains.iter().map(|d| d.nic()).collect(),
        }
    }
}
