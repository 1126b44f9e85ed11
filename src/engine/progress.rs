//! Manual progress (the application's threads drive the engine) and
//! watchers (words a kernel bumps).
use super::TransferEngine;
use crate::error::{Error, Result, Status};
use std::sync::atomic::Ordering;

impl TransferEngine {
    /// Watches a new 64-bit word (zero at first) of `kind` memory (for GPU
    /// `device` when CUDA-mapped): the engine's watcher thread calls
    /// `cb(old, new)` whenever it sees the word change (see `watcher`).
    pub fn watch(
        &self,
        kind: crate::gpu::MemoryKind,
        device: i32,
        cb: crate::watcher::WatchCallback,
    ) -> Result<crate::watcher::Watcher> {
        self.alive()?;
        self.watchers.watch(kind, device, cb)
    }

    /// Manual progress (`EngineConfig::manual_progress`): runs one pass of
    /// the engine on the calling thread — take new requests and control
    /// calls, post, poll the completion queues, count immediates, store
    /// completion flags, look at deadlines and keepalives — and returns
    /// whether anything happened. Any thread may call it; one at a time does
    /// the work (a call while another thread is inside returns `false` at
    /// once). Nothing moves, no deadline fires and no keepalive goes out
    /// between calls, so call it while anything is in flight or expected.
    /// Flags are stored and callbacks run inside this call (there is no
    /// callback thread in this mode); a callback may submit, cancel or call
    /// `progress` (which then does nothing). A receive pool added on the
    /// worker has its callback run inside the pass itself
    /// (`add_recv_pool_on_worker`). Destroying an engine says
    /// goodbye to its peers and waits up to `drain_timeout` for their answer:
    /// keep progressing manual peers in the same process meanwhile.
    /// Control calls (`register`, `expect_imm_count`, …) progress by
    /// themselves until answered. With a worker thread it does nothing
    /// and returns `false`.
    pub fn progress(&self) -> bool {
        // From a receive pool's callback on the worker (inside a pass): nothing.
        if crate::completion::notify::on_worker() {
            return false;
        }
        let mut busy = false;
        for g in &self.groups {
            let Some(m) = &g.manual else {
                return false;
            };
            busy |= match m.try_lock() {
                Ok(mut w) => w.as_mut().is_some_and(|p| p.step()),
                Err(_) => false,
            };
        }
        // Callbacks run here, after the worker is unlocked: they may submit,
        // progress (a nested call does nothing) or destroy the engine.
        busy | self.run_callbacks()
    }

    pub(super) fn run_callbacks(&self) -> bool {
        self.inline.as_ref().is_some_and(|q| q.run())
    }

    /// Whether the engine runs in manual-progress mode.
    pub fn is_manual(&self) -> bool {
        self.groups[0].manual.is_some()
    }

    /// Waits until `flag` has `FLAG_DONE`, or `timeout` passed (`None`: for
    /// ever): in manual-progress mode by progressing the engine on this
    /// thread, else by sleeping on the flag (`wait_flag`). Returns the
    /// flag's value; `TimedOut` if the timeout passed first. (Renamed from
    /// `wait_flag` in 0.4, which said `Again` then.)
    pub fn await_flag(&self, flag: &std::sync::atomic::AtomicU32, timeout: Option<std::time::Duration>) -> Result<u32> {
        let late = || Error::new(Status::TimedOut, format!("the flag was not done within {timeout:?}"));
        crate::completion::notify::refuse_on_worker("await_flag")?;
        if !self.is_manual() {
            return crate::completion::flag::wait(flag, timeout).ok_or_else(late);
        }
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        let mut round = 0u32;
        loop {
            let v = flag.load(Ordering::Acquire);
            if v & crate::FLAG_DONE != 0 {
                return Ok(v);
            }
            let busy = self.progress();
            round = round.wrapping_add(1);
            // Looked at every 64 rounds, busy or not: traffic never stretches a timeout.
            if round % 64 == 0 {
                if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                    return Err(late());
                }
                if !busy {
                    std::thread::yield_now();
                }
            }
        }
    }
}
