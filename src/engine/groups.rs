//! A DomainGroup as the engine holds it: its worker (a thread, or driven by
//! `progress`), started and stopped here.
use crate::completion::notify;
use crate::config::GroupPlan;
use crate::domain::{Backend, fabric::FabricDomain, null::NullDomain, verbs::VerbsDomain};
use crate::error::Result;
use crate::worker::{self, GroupInfo, Place, Shared};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One DomainGroup of the engine: its worker (a thread, or driven by
/// `progress`), what the worker reported when it started, and the memory
/// whose registrations it takes.
pub(super) struct Group {
    pub(super) shared: Arc<Shared>,
    pub(super) info: GroupInfo,
    pub(super) worker: Option<JoinHandle<()>>,
    /// Manual progress: the worker, driven by `progress` (None once shut down).
    pub(super) manual: Option<Mutex<Option<Box<dyn worker::Progress>>>>,
    pub(super) gpu: Option<i32>,
    pub(super) numa: Option<u32>,
}

impl Group {
    /// Starts group `place.index`'s worker (thread or manual) as `plan` says.
    pub(super) fn start(plan: &GroupPlan, n: notify::Notifier, place: Place) -> Result<Group> {
        let g = place.index;
        // Linux keeps 15 characters of a thread's name: group 0's reads "fabriclib-worke".
        let name = if g == 0 { "fabriclib-worker".to_string() } else { format!("fabriclib-w{g}") };
        let (shared, info, worker, manual) = if plan.worker.manual_progress {
            let (shared, info, p) = match plan.backend {
                Backend::Null => worker::manual::<NullDomain>(plan, n, place)?,
                Backend::Fabric => worker::manual::<FabricDomain>(plan, n, place)?,
                Backend::Verbs => worker::manual::<VerbsDomain>(plan, n, place)?,
            };
            (shared, info, None, Some(Mutex::new(Some(p))))
        } else {
            let (shared, info, w) = match plan.backend {
                Backend::Null => worker::spawn::<NullDomain>(plan, n, place, name)?,
                Backend::Fabric => worker::spawn::<FabricDomain>(plan, n, place, name)?,
                Backend::Verbs => worker::spawn::<VerbsDomain>(plan, n, place, name)?,
            };
            (shared, info, Some(w), None)
        };
        Ok(Group { shared, info, worker, manual, gpu: plan.gpu, numa: plan.numa })
    }

    /// How many NICs the group drives.
    pub(super) fn nic_count(&self) -> usize {
        self.info.address.domains.len()
    }

    /// Tells the worker to stop, then waits for it (manual: ends it here).
    pub(super) fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(m) = &self.manual {
            let p = m.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(p) = p {
                p.shutdown();
            }
        }
        if let Some(t) = self.worker.take() {
            t.thread().unpark();
            // From a callback on this worker: it ends once the callback returns.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}
