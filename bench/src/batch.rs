//! The host-batch row's loop: one-WR writes submitted `b` at a time through
//! `TransferEngine::submit_single_writes` (one hand-off per batch), `w`
//! requests in flight, each with its own flag, as `client::windowed` keeps
//! single submits.
use crate::client::{FlagLine, Wait, free_flags, leak_flags, until_taken, wait_flag_on};
use crate::ctl::R;
use fabriclib::completion::notify::RawFlag;
use fabriclib::{OnDone, TransferEngine};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Submits `n` requests in batches of `b` (the last may be shorter),
/// keeping `w` (at least `b`) in flight; `submit(first, dones)` submits one
/// batch, `dones` its requests' reports in order.
#[inline(never)] // a symbol of its own: callgrind measures it (docs/benchmarks.md)
pub fn windowed_batches<T>(
    e: &TransferEngine,
    n: usize,
    w: usize,
    b: usize,
    mut submit: impl FnMut(usize, &mut dyn Iterator<Item = OnDone>) -> fabriclib::Result<T>,
) -> R<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (b, w) = (b.max(1), w.max(b.max(1)));
    let flags = leak_flags(w);
    // SAFETY: the flags are leaked: valid for as long as any request may store into them.
    let done = |f: &'static FlagLine| OnDone::RawFlag(unsafe { RawFlag::new(f.0.as_ptr()) });
    let mut run = || -> R<()> {
        for first in (0..n).step_by(b) {
            let end = (first + b).min(n);
            for i in first..end {
                if i >= w {
                    wait_flag_on(e, &flags[i % w].0, Wait::Spin, deadline)?;
                }
                flags[i % w].0.store(0, Ordering::Relaxed);
            }
            until_taken(e, || submit(first, &mut (first..end).map(|i| done(&flags[i % w]))))?;
            e.progress();
        }
        for i in n.saturating_sub(w)..n {
            wait_flag_on(e, &flags[i % w].0, Wait::Spin, deadline)?;
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
