//! The TransferEngine: the Rust API. It validates every request against the
//! regions it names (the only bounds check software providers get), then
//! hands it to the DomainGroup worker through a lock-free queue.
//!
//! Immediate-count rules (identical on every provider and domain count):
//! - `submit_single_write` with an immediate: **1** immediate (the write is
//!   one work request; it must fit the provider's `max_msg_size`).
//! - `submit_paged_writes` with an immediate: **1 per page**.
//! - `submit_scatter` with an immediate: **1 per destination** (on that peer).
//! - `submit_barrier`: **1 per destination**.
//! - Writes without an immediate deliver none; sends never count.
use crate::bail;
use crate::completion::notify::{self, Deadline, RequestId, RequestOpts};
use crate::config::EngineConfig;
use crate::error::{Error, Result, Status};
use crate::wire::{MrDesc, NetAddr};
use crate::worker::request::{Ctrl, Dst, Request, Shape, Submission};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

mod batch;
mod groups;
mod imm;
mod memory;
mod nics;
mod peers;
mod progress;
mod recv;
mod writes;

pub use batch::SingleWrite;
pub(crate) use batch::in_batch;
use groups::Group;
pub use memory::MrHandle;
pub use recv::{MAX_RECV_BUFFERS, RecvPoolId};

/// How long a control call polls for the worker's reply before sleeping on it.
const RPC_POLL: std::time::Duration = std::time::Duration::from_micros(50);

/// Single writes without an immediate larger than this are sharded by bytes over all domains.
const SHARD_MIN: u64 = 256 * 1024;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Pages on one side of a paged write: page `i` starts at `offset + indices[i] * stride`.
#[derive(Clone, Copy, Debug)]
pub struct Pages<'a> {
    pub indices: &'a [u32],
    pub stride: u64,
    pub offset: u64,
}

/// One destination of a scatter: `len` bytes from `src_offset` of the source
/// region to `dst_offset` of `dst`.
#[derive(Clone, Debug)]
pub struct ScatterDst {
    pub len: u64,
    pub src_offset: u64,
    pub dst: Arc<MrDesc>,
    pub dst_offset: u64,
}

/// A handle to a pre-resolved set of peers (see `add_peer_set`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerSet(pub u64);

pub struct TransferEngine {
    id: u64,
    /// The DomainGroups; group 0 is the home group (sends, receives,
    /// immediate expectations, peer greetings) and takes what no other claims.
    groups: Vec<Group>,
    /// Every group's NICs, group by group.
    nics: Vec<crate::domain::Nic>,
    /// The largest write one work request may carry, on every group's NICs.
    max_msg: usize,
    callbacks: Option<JoinHandle<()>>,
    /// Manual progress: the callbacks, run by `progress` on the calling thread.
    inline: Option<notify::Inline>,
    peer_sets: Mutex<HashMap<u64, Arc<[NetAddr]>>>,
    next_request: AtomicU64,
    request_timeout: Option<std::time::Duration>,
    max_inflight: usize,
    errors: Arc<notify::ErrorLog>,
    events: Arc<notify::EventFd>,
    watchers: crate::watcher::Watchers,
}

/// The submit time of request `id` if the histogram submit → first post
/// samples it (`metrics::SUBMIT_SAMPLE`), else 0.
fn submit_sample(id: u64) -> u64 {
    if crate::metrics::submit_sampled(id) { crate::metrics::since_epoch_ns() } else { 0 }
}

/// Checks `[off, off+len)` against a region of `region` bytes; `what` names
/// the range in the error (built only on failure: this runs per page and per
/// destination).
fn check_range<W: std::fmt::Display>(what: impl FnOnce() -> W, off: u64, len: u64, region: u64) -> Result<()> {
    match off.checked_add(len) {
        Some(end) if end <= region => Ok(()),
        _ => bail!(OutOfBounds, "{}: bytes [{off}, {off}+{len}) fall outside the {region}-byte region", what()),
    }
}

impl TransferEngine {
    /// Opens `cfg.nic_count` NICs of the configured provider (per group,
    /// with `cfg.groups`) and starts the worker(s) and the callback thread.
    pub fn new(cfg: &EngineConfig) -> Result<TransferEngine> {
        // Where fabriclib is linked statically (no load-time hook): here.
        crate::os::undo_infinipath_handlers();
        // The environment is read here, once: every group's ports follow from it.
        let cfg = &cfg.with_env();
        let resolved = nics::near_gpu(cfg)?;
        let cfg = resolved.as_ref().unwrap_or(cfg);
        let planned = nics::per_gpu(cfg)?;
        let cfg = planned.as_ref().unwrap_or(cfg);
        let plans = cfg.plan()?;
        for p in &plans {
            crate::pin::check("worker_cpus", &p.worker_cpus)?;
        }
        crate::pin::check("callback_cpus", &cfg.callback_cpus)?;
        crate::pin::check("watcher_cpus", &cfg.watcher_cpus)?;
        let (notifier, callbacks, inline) = if cfg.manual_progress {
            let (n, rx) = notify::inline_callbacks();
            (n, None, Some(rx))
        } else {
            let (n, h) = notify::spawn_callback_thread(cfg.callback_cpus.clone())
                .map_err(|e| Error::new(Status::Provider, format!("cannot start the callback thread: {e}")))?;
            (n, Some(h), None)
        };
        let (errors, events) = (notifier.errors.clone(), notifier.events.clone());
        let mut siblings: Vec<notify::Notifier> = (1..plans.len()).map(|_| notifier.sibling()).collect();
        let mut notifiers = vec![notifier];
        notifiers.append(&mut siblings);
        let mut groups: Vec<Group> = Vec::with_capacity(plans.len());
        // One identity for every group's epoch; peer state told per peer engine.
        let base = crate::worker::new_epoch_base();
        let peer_states =
            cfg.on_peer_state.clone().map(|cb| Arc::new(crate::completion::peer_state::PeerStates::new(cb)));
        for (g, (plan, n)) in plans.iter().zip(notifiers).enumerate() {
            let place = crate::worker::Place {
                index: g,
                epoch: base | g as u64,
                home: groups.first().map(|h| h.shared.clone()),
                main: groups.first().map(|h| h.info.address.clone()),
                peer_states: peer_states.clone(),
            };
            match Group::start(plan, n, place) {
                Ok(group) => groups.push(group),
                Err(mut e) => {
                    for started in groups.iter_mut().rev() {
                        started.stop();
                    }
                    if plans.len() > 1 {
                        e.message = format!("group {g}: {}", e.message);
                    }
                    return Err(e);
                }
            }
        }
        if groups.iter().any(|g| g.info.provider != groups[0].info.provider) {
            let names: Vec<String> = groups.iter().map(|g| g.info.provider.clone()).collect();
            for g in groups.iter_mut().rev() {
                g.stop();
            }
            bail!(InvalidArgument, "the groups opened different providers ({names:?}): name one in the config");
        }
        Ok(TransferEngine {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            nics: groups.iter().flat_map(|g| g.info.nics.iter().cloned()).collect(),
            max_msg: groups.iter().map(|g| g.info.max_msg).min().unwrap_or(0),
            groups,
            callbacks,
            inline,
            peer_sets: Mutex::new(HashMap::new()),
            next_request: AtomicU64::new(1),
            request_timeout: cfg.request_timeout,
            max_inflight: cfg.max_inflight.max(1),
            errors,
            events,
            watchers: crate::watcher::Watchers::new(
                match cfg.watcher_spin_us {
                    crate::config::WATCHER_SPIN_AUTO => {
                        crate::watcher::Spin::auto(std::thread::available_parallelism().map_or(1, |n| n.get()))
                    }
                    u64::MAX => crate::watcher::Spin::Fixed(std::time::Duration::MAX),
                    us => crate::watcher::Spin::Fixed(std::time::Duration::from_micros(us)),
                },
                std::time::Duration::from_micros(cfg.watcher_nap_us),
                cfg.watcher_cpus.clone(),
            ),
        })
    }

    /// Why request (or expectation) `id` failed, for callers that watch a
    /// flag: kept for the last 1024 failures. `None` if it has not failed
    /// (still running, or ended `Ok`) or is older than that.
    pub fn request_error(&self, id: RequestId) -> Option<Error> {
        self.errors.get(id.0)
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// This engine's address, to hand to peers out of band: its home group's
    /// (group 0), its *main* address (C: `fabriclib_engine_address`). Sends,
    /// greetings and peer sets use it; a descriptor carries the address of
    /// the group its region belongs to. (Before 0.4: `main_address`.)
    pub fn address(&self) -> &NetAddr {
        &self.groups[0].info.address
    }

    /// How many DomainGroups the engine has (`EngineConfig::groups`; 1 without).
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// Every group's address, group 0's first: the engine's groups × NICs,
    /// for a peer's `add_engine_peer` (C: `fabriclib_engine_groups_address`;
    /// before 0.4: `engine_address`).
    pub fn groups_address(&self) -> crate::wire::EngineAddress {
        crate::wire::EngineAddress { groups: self.groups.iter().map(|g| g.info.address.clone()).collect() }
    }

    /// Group `g`'s address (its NICs, in domain order); `None` past the last group.
    pub fn group_address(&self, g: usize) -> Option<&NetAddr> {
        self.groups.get(g).map(|g| &g.info.address)
    }

    /// The libfabric provider in use (e.g. `tcp;ofi_rxm`).
    pub fn provider(&self) -> &str {
        &self.groups[0].info.provider
    }

    /// How many NICs the engine has, all groups together. (Before 0.4:
    /// `domains`.)
    pub fn nic_count(&self) -> usize {
        self.nics.len()
    }

    /// The largest message `submit_send` takes: 64 KiB, or the provider's
    /// inject size where larger messages would wait on the receiver's answer
    /// (shm: 4096 bytes; see `Domain::answer_free_limit`), less the 8-byte
    /// header that names the sender on a provider whose completions cannot
    /// carry it (`Domain::sender_in_data`).
    pub fn max_send_size(&self) -> usize {
        self.groups[0].info.max_send
    }

    /// The engine's event fd (made on first call; the engine closes it): it
    /// turns readable after a worker pass that ended a request (stored a
    /// flag or queued a callback) or queued a receive or peer event. Read its
    /// 8 bytes to clear it, then look at the flags. With manual progress it
    /// turns readable only while something progresses the engine.
    pub fn event_fd(&self) -> Result<i32> {
        self.events.get()
    }

    /// The largest write one work request may carry on this engine's provider.
    pub fn max_msg_size(&self) -> usize {
        self.max_msg
    }

    fn rpc<T>(&self, make: impl FnOnce(mpsc::Sender<Result<T>>) -> Ctrl) -> Result<T> {
        self.rpc_to(0, make)
    }

    /// A control call answered by group `g`'s worker.
    fn rpc_to<T>(&self, g: usize, make: impl FnOnce(mpsc::Sender<Result<T>>) -> Ctrl) -> Result<T> {
        self.alive()?;
        notify::refuse_on_worker("this call")?;
        let (tx, rx) = mpsc::channel();
        let shared = &self.groups[g].shared;
        shared.ctrl.push(make(tx));
        shared.wake();
        if self.is_manual() {
            // Nobody else answers: progress until the reply is there.
            loop {
                self.progress();
                match rx.try_recv() {
                    Ok(r) => return r,
                    Err(mpsc::TryRecvError::Disconnected) => return Err(notify::shutdown_error()),
                    Err(mpsc::TryRecvError::Empty) => std::thread::yield_now(),
                }
            }
        }
        // The worker answers within a pass or two: poll before sleeping.
        notify::recv_polling(&rx, RPC_POLL).unwrap_or_else(|| Err(notify::shutdown_error()))
    }

    fn alive(&self) -> Result<()> {
        if self.groups[0].shared.stop.load(Ordering::Acquire) {
            bail!(Shutdown, "the engine is shut down");
        }
        Ok(())
    }

    /// Group `g` sends to `owner` NIC k to NIC k: their NIC counts must match.
    #[inline]
    fn check_peer(&self, g: usize, owner: &NetAddr) -> Result<()> {
        let mine = self.groups[g].nic_count();
        if owner.domains.len() != mine {
            return Err(self.domain_count_mismatch(g, owner.domains.len()));
        }
        Ok(())
    }

    /// `check_peer`'s error, out of its way (it runs per write of a batch).
    #[cold]
    #[inline(never)]
    fn domain_count_mismatch(&self, g: usize, theirs: usize) -> Error {
        let mine = self.groups[g].nic_count();
        let whose = if self.groups.len() > 1 { format!("this engine's group {g}") } else { "this engine".into() };
        Error::new(
            Status::InvalidArgument,
            format!(
                "peer has {theirs} domains (NICs), {whose} {mine}: peers must use the same domain count \
                 (per group: a region's group writes NIC k to NIC k of the destination's group)"
            ),
        )
    }

    /// `desc` as group `g`'s requests carry it: an index into its worker's
    /// table once that worker holds it, else a clone.
    fn dst(&self, g: usize, desc: &Arc<MrDesc>) -> Dst {
        Dst::of(self.groups[g].shared.tag, desc)
    }

    fn timeout(&self, d: Deadline) -> Option<std::time::Duration> {
        match d {
            Deadline::EngineDefault => self.request_timeout,
            Deadline::Never => None,
            Deadline::After(t) => Some(t),
        }
    }

    /// Hands a checked request to the worker of group `g` (its source
    /// region's group; the home group for requests without one).
    fn submit(
        &self,
        g: usize,
        shape: Shape,
        imm: Option<u32>,
        src_mr: Option<&MrHandle>,
        opts: RequestOpts,
    ) -> Result<RequestId> {
        self.alive()?;
        let nic = self.check_opts(g, &shape, &opts)?;
        self.reserve(g, 1)?;
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let timeout_ns = Request::timeout_ns(self.timeout(opts.deadline));
        let (done, delivered, region) = (opts.done, opts.delivered, src_mr.map(|m| m.0.index));
        let submitted_ns = submit_sample(id);
        // Built where the queue takes it from (one copy of its two cache lines fewer).
        self.queue(
            g,
            Submission::One(Request { id, timeout_ns, shape, imm, done, region, nic, delivered, submitted_ns }),
            1,
        )?;
        Ok(RequestId(id))
    }

    /// What a request's options ask of group `g`, checked: the NIC it goes
    /// through (`None`: sharded).
    #[inline(always)]
    fn check_opts(&self, g: usize, shape: &Shape, opts: &RequestOpts) -> Result<Option<u8>> {
        let nic = self.nic_of(g, opts.route, matches!(shape, Shape::Send { .. }))?;
        if opts.delivered && !self.groups[g].info.delivery_fences {
            bail!(
                Unsupported,
                "delivered: the {} provider does not promise to deliver a message after the writes posted \
                 before it, which is how delivery is confirmed",
                self.groups[g].info.provider
            );
        }
        Ok(nic)
    }

    /// Reserves `n` requests of `max_inflight` for group `g` (`queue`
    /// gives them back if it cannot queue them).
    #[inline(always)]
    fn reserve(&self, g: usize, n: usize) -> Result<()> {
        let shared = &self.groups[g].shared;
        // The completion path is bounded too: requests not yet reported
        // (callbacks not yet returned) count until they are.
        if shared.inflight.fetch_add(n, Ordering::Acquire) + n > self.max_inflight {
            shared.inflight.fetch_sub(n, Ordering::Release);
            bail!(Again, "{} requests are in flight (max_inflight); retry when some have completed", self.max_inflight);
        }
        Ok(())
    }

    /// Queues `n` reserved requests (one, or a batch: one slot of the
    /// queue either way) for group `g`'s worker and wakes it if it naps.
    #[inline(always)]
    fn queue(&self, g: usize, sub: Submission, n: usize) -> Result<()> {
        let shared = &self.groups[g].shared;
        if let Err(sub) = shared.data.push(sub) {
            // Dropped unfired: a submit that returns an error never calls back.
            drop(sub);
            shared.inflight.fetch_sub(n, Ordering::Release);
            bail!(
                Again,
                "the submission queue is full ({} entries; a batch takes one); retry later",
                shared.data.capacity()
            );
        }
        shared.wake();
        Ok(())
    }

    /// Stops the engine: every pending request ends (`Shutdown` unless it had
    /// already finished on the wire), then both threads are joined. Called by Drop.
    pub fn shutdown(&mut self) {
        // Watcher callbacks submit: they stop first.
        self.watchers.stop();
        // The other groups first: they forward immediates to the home group.
        for g in self.groups.iter_mut().rev() {
            g.stop();
        }
        if self.is_manual() {
            // The last reports (SHUTDOWN) run here (or, from inside a
            // callback, in the progress call that runs it, right after).
            self.run_callbacks();
        }
        if let Some(cb) = self.callbacks.take() {
            // Destroying the engine from its own callback cannot join that
            // thread; from a callback on a worker neither (that worker holds
            // a sender until the callback returns): both end by themselves.
            if cb.thread().id() != std::thread::current().id() && !notify::on_worker() {
                let _ = cb.join();
            }
        }
    }
}

impl Drop for TransferEngine {
    fn drop(&mut self) {
        self.shutdown();
    }
}
