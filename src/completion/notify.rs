//! How a finished request tells its caller: a callback run on the engine's
//! callback thread, or an atomic store into a flag word the caller owns.
use crate::error::{Result, Status};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant};

pub use super::flag::{FLAG_DONE, flag_value};

/// A caller-owned flag word (C API). The caller guarantees it stays valid
/// until the engine has stored into it.
#[derive(Clone, Copy, Debug)]
pub struct RawFlag(pub(crate) *const AtomicU32);
// SAFETY: the pointer is only used for one atomic store; the caller keeps it alive.
unsafe impl Send for RawFlag {}

impl RawFlag {
    /// # Safety
    /// `p` must be non-null, 4-byte aligned and valid until the engine stores into it.
    pub unsafe fn new(p: *mut u32) -> RawFlag {
        RawFlag(p as *const AtomicU32)
    }
}

pub type DoneCallback = Box<dyn FnOnce(Result<()>) + Send>;

/// What to do when a request (or an immediate expectation) ends. Fires exactly once.
pub enum OnDone {
    /// Nobody is told.
    Nothing,
    /// Called on the callback thread with the outcome.
    Callback(DoneCallback),
    /// `flag_value(outcome)` is stored with release ordering, from the worker thread.
    Flag(Arc<AtomicU32>),
    /// As `Flag`, into caller-owned memory (C API).
    RawFlag(RawFlag),
}

impl OnDone {
    pub fn callback(f: impl FnOnce(Result<()>) + Send + 'static) -> OnDone {
        OnDone::Callback(Box::new(f))
    }

    /// This notification with a deadline of its own (instead of the engine's).
    pub fn deadline(self, deadline: Deadline) -> RequestOpts {
        RequestOpts { deadline, ..self.into() }
    }

    /// This notification, the request on NIC `k` only (`Route::Nic`).
    pub fn on_nic(self, k: usize) -> RequestOpts {
        RequestOpts { route: Route::Nic(k), ..self.into() }
    }
}

/// When a request times out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// The engine's `request_timeout`.
    EngineDefault,
    /// Never: the request ends only by completing, failing, cancel or shutdown.
    Never,
    /// This long after it is submitted.
    After(std::time::Duration),
}

/// Which NICs a request's work requests go through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Route {
    /// Over all the NICs of the request's group (the engine's, with one
    /// group): unit `k` of a request (a page, a chunk of a single write of
    /// 256 KiB or more, a scatter or barrier destination) on the group's NIC
    /// `(k + r) mod n`, `r` rotating from request to request, so that pages
    /// and destinations spread evenly.
    #[default]
    Shard,
    /// On NIC `k` only (numbered across the engine as
    /// `TransferEngine::nics` lists them; it must be in the request's
    /// group), as one stream: a single write is not cut into chunks.
    Nic(usize),
}

/// How a request reports its end, when it times out, and which NICs carry
/// it. An `OnDone` converts into one with the engine's default deadline,
/// sharded over every NIC.
pub struct RequestOpts {
    pub done: OnDone,
    pub deadline: Deadline,
    pub route: Route,
    /// `Ok` means delivered, not only sent: see `delivered()`.
    pub delivered: bool,
}

impl RequestOpts {
    /// These options, the request on NIC (domain) `k` only.
    pub fn on_nic(self, k: usize) -> RequestOpts {
        RequestOpts { route: Route::Nic(k), ..self }
    }

    /// These options, with `Ok` meaning *delivered*: every byte and
    /// immediate of the request has been taken in by the target engine (its
    /// immediates counted there, ahead of any call its application makes
    /// after hearing of this `Ok` — an `imm_count` reset included). Costs one
    /// round trip per destination engine after the last work request
    /// completes. Without it, `Ok` means only that the source is free again.
    /// Any other outcome says what it says without the option.
    /// `Unsupported` at submit on a provider that does not deliver a message
    /// after the writes posted before it (`Domain::orders_sends_after_writes`).
    pub fn delivered(self) -> RequestOpts {
        RequestOpts { delivered: true, ..self }
    }
}

impl From<OnDone> for RequestOpts {
    fn from(done: OnDone) -> RequestOpts {
        RequestOpts { done, deadline: Deadline::EngineDefault, route: Route::Shard, delivered: false }
    }
}

/// Names a submitted request (or immediate expectation) for `cancel`.
/// Unique within an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

pub type Job = Box<dyn FnOnce() + Send>;

/// An engine's event fd (`TransferEngine::event_fd`): made on first ask,
/// then made readable by the workers after every pass that ended a request
/// (stored a flag, queued a callback) or queued a receive or a peer event,
/// so that an event loop (epoll, libuv, asyncio) can wait for the engine
/// without a thread of its own. Closed with the last worker and the engine.
#[derive(Debug)]
pub struct EventFd {
    fd: std::sync::atomic::AtomicI32,
    made: std::sync::Mutex<()>,
}

impl Default for EventFd {
    fn default() -> Self {
        EventFd { fd: std::sync::atomic::AtomicI32::new(-1), made: Default::default() }
    }
}

impl EventFd {
    /// The fd, made now if it was not yet.
    pub fn get(&self) -> crate::error::Result<i32> {
        let _made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        let fd = self.fd.load(Ordering::Acquire);
        if fd >= 0 {
            return Ok(fd);
        }
        let fd = crate::os::eventfd()
            .ok_or_else(|| crate::error::Error::new(crate::Status::Provider, "eventfd: the kernel refused one"))?;
        self.fd.store(fd, Ordering::Release);
        Ok(fd)
    }

    /// Makes it readable, if anyone asked for it.
    fn signal(&self) {
        let fd = self.fd.load(Ordering::Acquire);
        if fd >= 0 {
            crate::os::eventfd_signal(fd);
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        let fd = *self.fd.get_mut();
        if fd >= 0 {
            crate::os::close(fd);
        }
    }
}

/// The worker's handle on the callback thread.
#[derive(Clone)]
pub struct Notifier {
    tx: Sender<Job>,
    /// Set when a completion was delivered since the last `take_fired`.
    fired: std::cell::Cell<bool>,
    /// Requests submitted and not yet reported (the engine's `max_inflight` bound).
    pub(crate) inflight: Arc<AtomicUsize>,
    /// Requests reported by the worker itself (flags), taken off `inflight`
    /// once per worker pass rather than once each (one shared cache line
    /// less per request).
    released: std::cell::Cell<usize>,
    /// Why the last failed requests failed, for callers that watch flags.
    pub(crate) errors: Arc<ErrorLog>,
    /// The engine's event fd, signaled by `take_fired`.
    pub(crate) events: Arc<EventFd>,
    /// Manual progress: set after a callback is queued (`Inline::run`
    /// looks at it before anything else).
    queued: Option<Arc<AtomicBool>>,
}

/// The errors of the last `ERROR_LOG` requests (and expectations) that
/// failed, by request id: flag-mode callers read the details here
/// (`TransferEngine::request_error`). Written only when a request fails.
#[derive(Default)]
pub struct ErrorLog(std::sync::Mutex<std::collections::VecDeque<(u64, crate::error::Error)>>);

/// How many failed requests' errors are kept.
pub(crate) const ERROR_LOG: usize = 1024;

impl ErrorLog {
    pub fn record(&self, id: u64, e: &crate::error::Error) {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == ERROR_LOG {
            q.pop_front();
        }
        q.push_back((id, e.clone()));
    }

    pub fn get(&self, id: u64) -> Option<crate::error::Error> {
        let q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        q.iter().rev().find(|(i, _)| *i == id).map(|(_, e)| e.clone())
    }
}

impl Notifier {
    /// Reports the end of submitted request `id` and, once its callback has
    /// returned (or its flag is stored), takes it off the in-flight count.
    /// An error is logged first, so a flag watcher that sees it can read it.
    #[inline]
    pub fn fire_request(&self, id: u64, done: OnDone, res: Result<()>) {
        // The common case inline: a caller's flag, and success.
        if let (OnDone::RawFlag(RawFlag(p)), Ok(())) = (&done, &res) {
            self.fired.set(true);
            // SAFETY: the caller promised the flag is valid until this store.
            super::flag::store(unsafe { &**p }, &res);
            self.released.set(self.released.get() + 1);
            return;
        }
        self.fire_request_other(id, done, res)
    }

    #[inline(never)]
    fn fire_request_other(&self, id: u64, done: OnDone, res: Result<()>) {
        if let Err(e) = &res {
            self.errors.record(id, e);
        }
        match done {
            OnDone::Callback(cb) => {
                let inflight = self.inflight.clone();
                self.fired.set(true);
                self.run(Box::new(move || {
                    // Taken off even if the callback panics (the callback thread catches it).
                    struct Dec(Arc<AtomicUsize>);
                    impl Drop for Dec {
                        fn drop(&mut self) {
                            self.0.fetch_sub(1, Ordering::Release);
                        }
                    }
                    let _dec = Dec(inflight);
                    cb(res)
                }))
            }
            other => {
                self.fire(other, res);
                self.released.set(self.released.get() + 1);
            }
        }
    }

    /// Takes the requests reported since the last call off the in-flight count.
    pub fn release_inflight(&self) {
        let n = self.released.replace(0);
        if n > 0 {
            self.inflight.fetch_sub(n, Ordering::Release);
        }
    }

    pub fn fire(&self, done: OnDone, res: Result<()>) {
        if !matches!(done, OnDone::Nothing) {
            self.fired.set(true);
        }
        match done {
            OnDone::Nothing => {}
            OnDone::Callback(cb) => self.run(Box::new(move || cb(res))),
            OnDone::Flag(f) => super::flag::store(&f, &res),
            // SAFETY: the caller promised the flag is valid until this store.
            OnDone::RawFlag(RawFlag(p)) => super::flag::store(unsafe { &*p }, &res),
        }
    }

    /// Whether anything was delivered since the last call (the worker then
    /// yields once, so that a waiter sharing its core sees it at once); if
    /// so, the event fd (if asked for) turns readable.
    pub fn take_fired(&self) -> bool {
        let fired = self.fired.replace(false);
        if fired {
            self.events.signal();
        }
        fired
    }

    /// A notifier for another worker of the same engine: the same callback
    /// thread (or inline queue), in-flight count and error log.
    pub fn sibling(&self) -> Notifier {
        Notifier {
            tx: self.tx.clone(),
            fired: Default::default(),
            inflight: self.inflight.clone(),
            released: Default::default(),
            errors: self.errors.clone(),
            events: self.events.clone(),
            queued: self.queued.clone(),
        }
    }

    /// Runs `job` on the callback thread.
    pub fn run(&self, job: Job) {
        self.fired.set(true);
        // The callback thread outlives every worker, so this only fails during
        // teardown, when nothing is left to call anyway.
        let _ = self.tx.send(job);
        if let Some(q) = &self.queued {
            q.store(true, Ordering::Release);
        }
    }
}

/// Receives from `rx`, first polling it (yielding the core between tries) for
/// up to `poll`, then sleeping on it. A reply that comes within `poll` then
/// needs no wake-up from its sender. `None` once every sender is gone.
pub fn recv_polling<T>(rx: &Receiver<T>, poll: Duration) -> Option<T> {
    let t = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if t.elapsed() < poll => std::thread::yield_now(),
            Err(TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

thread_local! {
    /// Set while a callback runs on its engine's worker thread (a receive
    /// pool added with `on_worker`).
    static ON_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is running a callback on its engine's worker.
pub fn on_worker() -> bool {
    ON_WORKER.with(|w| w.get())
}

/// Runs `f`, a callback, on the worker thread: blocking engine calls from it
/// are refused (`refuse_on_worker`), a panic is caught and logged.
pub(crate) fn run_on_worker(f: impl FnOnce()) {
    ON_WORKER.with(|w| w.set(true));
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        crate::log!(Warn, "a receive callback panicked on the worker thread; the engine goes on");
    }
    ON_WORKER.with(|w| w.set(false));
}

/// `InvalidArgument` if called from a callback running on the worker thread:
/// `what` would wait for that very thread.
pub fn refuse_on_worker(what: &str) -> Result<()> {
    if on_worker() {
        crate::bail!(
            InvalidArgument,
            "{what} waits for the engine's worker, and is called from a callback running on that worker \
             (a receive pool added on_worker): submit, or do it from another thread"
        );
    }
    Ok(())
}

/// How long the callback thread keeps polling after a callback: the next
/// completion of a request/response exchange then needs no futex wake.
const CALLBACK_POLL: Duration = Duration::from_micros(50);

/// Starts the callback thread (on `cpus`, if any). It ends when every `Notifier` is dropped, after
/// running what was queued. A panicking callback is caught and reported on
/// stderr; the thread goes on.
pub fn spawn_callback_thread(cpus: Vec<u32>) -> std::io::Result<(Notifier, std::thread::JoinHandle<()>)> {
    let (tx, rx): (Sender<Job>, Receiver<Job>) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new().name("fabriclib-cb".into()).spawn(move || {
        // Checked by the engine before the thread starts (`pin::check`).
        let _ = crate::pin::pin_current_thread(&cpus);
        while let Some(job) = recv_polling(&rx, CALLBACK_POLL) {
            if catch_unwind(AssertUnwindSafe(job)).is_err() {
                crate::log!(Warn, "a completion callback panicked; the engine goes on");
            }
        }
    })?;
    let (fired, inflight, released, errors, events) = Default::default();
    Ok((Notifier { tx, fired, inflight, released, errors, events, queued: None }, handle))
}

/// Manual progress: no callback thread; the callbacks queue up for whoever
/// progresses the engine to run (`Inline::run`).
pub fn inline_callbacks() -> (Notifier, Inline) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (fired, inflight, released, errors, events) = Default::default();
    let queued = Arc::new(AtomicBool::new(false));
    let n = Notifier { tx, fired, inflight, released, errors, events, queued: Some(queued.clone()) };
    (n, Inline { rx: std::sync::Mutex::new(rx), queued })
}

/// The callbacks of a manual-progress engine, run by whoever progresses it.
pub struct Inline {
    rx: std::sync::Mutex<Receiver<Job>>,
    queued: Arc<AtomicBool>,
}

impl Inline {
    /// Runs the queued callbacks unless another thread is running them;
    /// true if any ran. Costs one load when none is queued (most passes).
    #[inline]
    pub fn run(&self) -> bool {
        if !self.queued.load(Ordering::Acquire) {
            return false;
        }
        self.run_now()
    }

    #[inline(never)]
    fn run_now(&self) -> bool {
        let Ok(rx) = self.rx.try_lock() else {
            return false; // the thread inside leaves `queued` set for later
        };
        // Cleared before the queue is drained: a callback queued after this
        // store sets it again, one queued before is drained below.
        self.queued.store(false, Ordering::Release);
        run_queued(&rx)
    }
}

/// Runs the callbacks queued on `rx` (catching panics, as the callback
/// thread does); true if any ran.
fn run_queued(rx: &Receiver<Job>) -> bool {
    let mut ran = false;
    while let Ok(job) = rx.try_recv() {
        ran = true;
        if catch_unwind(AssertUnwindSafe(job)).is_err() {
            crate::log!(Warn, "a completion callback panicked; the engine goes on");
        }
    }
    ran
}

pub fn shutdown_error() -> crate::error::Error {
    crate::error::Error::new(Status::Shutdown, "the engine shut down before the request completed")
}
