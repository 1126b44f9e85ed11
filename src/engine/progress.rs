//! Manual progress (the application's threads drive the engine) and
//! watchers (words a kernel bumps).
use super::TransferEngine;
use crate::bail;
use crate::completion::notify;
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
    /// `progress` (which then does nothing). Destroying an engine says
    /// goodbye to its peers and waits up to `drain_timeout` for their answer:
    /// keep progressing manual peers in the same process meanwhile.
    /// Control calls (`register`, `expect_imm_count`, …) progress by
    /// themselves until answered. With a worker thread it does nothing
    /// and returns `false`.
    pub fn progress(&self) -> bool {
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
        match self.inline.as_ref().map(|q| q.try_lock()) {
            Some(Ok(q)) => notify::run_queued(&q),
            _ => false,
        }
    }

    /// Whether the engine runs in manual-progress mode.
    pub fn is_manual(&self) -> bool {
        self.groups[0].manual.is_some()
    }

    /// Waits until `flag` has `FLAG_DONE`, or `timeout`: in manual-progress
    /// mode by progressing the engine on this thread, else by sleeping on
    /// the flag (`wait_flag`). Returns the flag's value.
    pub fn wait_flag(&self, flag: &std::sync::atomic::AtomicU32, timeout: std::time::Duration) -> Result<u32> {
        if !self.is_manual() {
            return crate::completion::flag::wait(flag, Some(timeout))
                .ok_or_else(|| Error::new(Status::Again, format!("the flag was not done within {timeout:?}")));
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut idle = 0u32;
        loop {
            let v = flag.load(Ordering::Acquire);
            if v & crate::FLAG_DONE != 0 {
                return Ok(v);
            }
            if self.progress() {
                idle = 0;
            } else {
                idle = idle.wrapping_add(1);
                if idle % 64 == 0 {
                    if std::time::Instant::now() >= deadline {
                        bail!(Again, "the flag was not done within {timeout:?}");
                    }
                    std::thread::yield_now();
                }
            }
        }
    }
}
