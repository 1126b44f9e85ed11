//! Batches: many requests handed to the worker at once. Each is a request
//! of its own (its own id, report and deadline), checked as its single
//! submit checks it; the batch costs one slot of the submission queue, one
//! reservation of `max_inflight` and one wake, where single submits pay
//! each per request (docs/design.md, "A request's path").
use super::{MrHandle, TransferEngine};
use crate::bail;
use crate::completion::notify::{RequestId, RequestOpts};
use crate::error::{Error, Result};
use crate::wire::MrDesc;
use crate::worker::request::{Request, Submission};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One write of a batch (`TransferEngine::submit_single_writes`): the
/// arguments of `submit_single_write` but its source region, which the
/// batch's writes share.
pub struct SingleWrite<'a> {
    pub len: u64,
    /// With an immediate, the destination counts exactly one `imm` once all
    /// of this write's bytes have landed; `len` may then be 0.
    pub imm: Option<u32>,
    pub src_offset: u64,
    pub dst: &'a Arc<MrDesc>,
    pub dst_offset: u64,
    /// How this write reports its end (a flag, a callback, nothing), its
    /// deadline and route: each write reports once, on its own.
    pub done: RequestOpts,
}

impl TransferEngine {
    /// Submits single writes from `src`, each a request of its own, in one
    /// hand-off to the worker. Returns the first write's id: write `k` has
    /// id `first + k`. All or none: every write is checked before any is
    /// submitted, and an error (the first bad write's, named by its index;
    /// `Again` when `max_inflight` has no room for all of them) submits
    /// none and reports none. `InvalidArgument` for an empty batch or one
    /// larger than `max_inflight`. The writes start in order, as the same
    /// single submits would.
    pub fn submit_single_writes<'a>(
        &self,
        src: &MrHandle,
        writes: impl IntoIterator<Item = SingleWrite<'a>>,
    ) -> Result<RequestId> {
        let g = self.own(src)?;
        self.alive()?;
        let writes = writes.into_iter();
        let mut reqs = Vec::with_capacity(writes.size_hint().0);
        for (k, w) in writes.enumerate() {
            let shape = self.single_write(g, src, &w).map_err(|e| in_batch(k, e))?;
            let nic = self.check_opts(g, &shape, &w.done).map_err(|e| in_batch(k, e))?;
            // As `submit` builds it (which builds it in place: a helper for
            // both cost a single submit 31–46 more instructions, callgrind).
            reqs.push(Request {
                id: 0,
                timeout_ns: Request::timeout_ns(self.timeout(w.done.deadline)),
                shape,
                imm: w.imm,
                done: w.done.done,
                region: Some(src.0.index),
                nic,
                delivered: w.done.delivered,
                submitted_ns: 0,
            });
        }
        let n = reqs.len();
        if n == 0 {
            bail!(InvalidArgument, "submit_single_writes: no writes");
        }
        if n > self.max_inflight {
            bail!(InvalidArgument, "submit_single_writes: {n} writes, more than max_inflight ({})", self.max_inflight);
        }
        self.reserve(g, n)?;
        let first = self.next_request.fetch_add(n as u64, Ordering::Relaxed);
        for (r, id) in reqs.iter_mut().zip(first..) {
            (r.id, r.submitted_ns) = (id, super::submit_sample(id));
        }
        self.queue(g, Submission::Batch(reqs), n)?;
        Ok(RequestId(first))
    }
}

/// Error `e` of write `k` of a batch, as the batch reports it.
pub(crate) fn in_batch(k: usize, mut e: Error) -> Error {
    e.message = format!("write {k} of the batch: {}", e.message);
    e
}
