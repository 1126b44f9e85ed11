//! Starting a DomainGroup's worker: on a thread of its own (`spawn`,
//! pinned before it opens its domains) or driven by the application
//! (`manual`, `Progress`), with the state it shares with the API.
use super::{GroupInfo, Place, Shared, Worker, held};
use crate::completion::notify::Notifier;
use crate::config::GroupPlan;
use crate::domain::Domain;
use crate::error::{Error, Result, Status};
use crossbeam_queue::{ArrayQueue, SegQueue};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;

/// Emptied lists of a batch's writes kept for the next batches (`Shared::spare_members`).
const SPARE_MEMBER_LISTS: usize = 16;

/// The state shared with the API, for a worker as `plan` says.
fn new_shared(plan: &GroupPlan, notifier: &Notifier) -> Result<Arc<Shared>> {
    Ok(Arc::new(Shared {
        data: ArrayQueue::new(plan.worker.submit_queue.max(1)),
        ctrl: SegQueue::new(),
        stop: AtomicBool::new(false),
        inflight: notifier.inflight.clone(),
        napping: AtomicBool::new(false),
        thread: Default::default(),
        wake_fd: std::sync::atomic::AtomicI32::new(-1),
        bell: std::sync::OnceLock::new(),
        tag: held::new_tag(),
        awaited: AtomicBool::new(false),
        stats: Default::default(),
        tally: Default::default(),
        spare_members: ArrayQueue::new(SPARE_MEMBER_LISTS),
        send_slots: Arc::new(super::stage::SendSlots::new()),
    }))
}

/// A new engine's identity: random high bits, never 0, with the low bits
/// (`wire::GROUP_BITS`) free for each group's index. Random enough that a
/// restarted engine never reuses it.
pub fn new_epoch_base() -> u64 {
    (crate::domain::random_u64() & !crate::wire::GROUP_BITS).max(crate::wire::GROUP_BITS + 1)
}

/// A worker that the application's threads drive (manual progress: no
/// worker thread, no hand-off between the submitting thread and the one that
/// posts and polls).
pub trait Progress: Send {
    /// One pass of the worker (see `Worker::step`); true if anything happened.
    fn step(&mut self) -> bool;
    /// Ends the engine as the worker thread does when it stops.
    fn shutdown(self: Box<Self>);
}

// SAFETY: a worker is used by one thread at a time: its own thread, or under
// the engine's mutex in manual-progress mode. Its raw pointers (work-request
// templates, provider handles) name registered memory and provider objects
// that libfabric lets any one thread at a time use (FI_THREAD_DOMAIN).
unsafe impl<D: Domain> Send for Worker<D> {}

impl<D: Domain> Progress for Worker<D> {
    fn step(&mut self) -> bool {
        Worker::step(self)
    }
    fn shutdown(self: Box<Self>) {
        (*self).shutdown()
    }
}

/// Opens a worker over `plan`'s NICs (domains of type `D`) on the calling
/// thread, to be driven by `Progress::step`.
pub fn manual<D: Domain>(
    plan: &GroupPlan,
    notifier: Notifier,
    place: Place,
) -> Result<(Arc<Shared>, GroupInfo, Box<dyn Progress>)> {
    let shared = new_shared(plan, &notifier)?;
    let w = Worker::<D>::new(plan, shared.clone(), notifier, place)?;
    let info = w.info();
    Ok((shared, info, Box::new(w)))
}

/// Starts a worker thread over `plan`'s NICs (domains of type `D`), at
/// `place` in its engine.
pub fn spawn<D: Domain>(
    plan: &GroupPlan,
    notifier: Notifier,
    place: Place,
    name: String,
) -> Result<(Arc<Shared>, GroupInfo, JoinHandle<()>)> {
    let shared = new_shared(plan, &notifier)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let (plan, shared2) = (plan.clone(), shared.clone());
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            // Pinned first, then the domains are opened on this thread: their
            // memory lands on its NUMA node.
            if let Err(e) = crate::pin::pin_current_thread(&plan.worker_cpus) {
                let _ = tx.send(Err(e));
                return;
            }
            match Worker::<D>::new(&plan, shared2, notifier, place) {
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
