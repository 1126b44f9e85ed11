//! Batches: many requests handed to the worker at once. Each is a request
//! of its own (its own id, report and deadline), checked as its single
//! submit checks it; the batch costs one slot of the submission queue, one
//! reservation of `max_inflight` and one wake, where single submits pay
//! each per request (docs/design.md, "A request's path").
use super::{MrHandle, TransferEngine};
use crate::bail;
use crate::completion::notify::{Deadline, OnDone, RequestId, RequestOpts};
use crate::error::{Error, Result};
use crate::wire::MrDesc;
use crate::worker::request::{BundleShape, MAX_MEMBERS, MEMBER_SLOTS, Member, Request, Shape, Submission};
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
    /// single submits would. Writes of one work request each to one peer,
    /// with one deadline and route and none `delivered`, go as bundles
    /// (docs/design.md, "How a request travels"): taken, checked and timed
    /// together, each still reported on its own; `cancel` of one cancels
    /// it alone.
    pub fn submit_single_writes<'a>(
        &self,
        src: &MrHandle,
        writes: impl IntoIterator<Item = SingleWrite<'a>>,
    ) -> Result<RequestId> {
        let g = self.own(src)?;
        self.alive()?;
        let writes = writes.into_iter();
        // Each write as a bundle's member (bundle.rs); and, once the batch
        // cannot go as bundles, what each write's own request holds besides.
        // A list the worker gave back (empty), else a new one.
        let mut members: Vec<Member> = self.groups[g].shared.spare_members.pop().unwrap_or_default();
        members.reserve(writes.size_hint().0);
        let mut own: Vec<Own> = Vec::new();
        // Bundles: one work request each, to one peer, with one deadline and
        // route, none delivered (and no more slots than their tokens carry);
        // write 0's, which the others must match.
        let mut bundle = self.max_inflight < MEMBER_SLOTS;
        let mut head: Option<(&Arc<MrDesc>, Deadline, Own)> = None;
        for (k, w) in writes.enumerate() {
            let shape = self.single_write(g, src, &w).map_err(|e| in_batch(k, e))?;
            let nic = self.check_opts(g, &shape, &w.done).map_err(|e| in_batch(k, e))?;
            let Shape::Single { src, dst, dst_off, len, chunk } = shape else { unreachable!("a single write") };
            let delivered = w.done.delivered;
            let (d0, deadline0, o0) = head.get_or_insert_with(|| {
                let timeout_ns = Request::timeout_ns(self.timeout(w.done.deadline));
                (w.dst, w.done.deadline, Own { timeout_ns, nic, delivered, chunk })
            });
            let was = bundle;
            bundle &=
                !delivered && len <= chunk && nic == o0.nic && w.done.deadline == *deadline0 && same_owner(d0, w.dst);
            if was && !bundle {
                // The writes before this one matched write 0 and are one work
                // request each (for which any chunk of at least their length
                // is the same).
                own = members.iter().map(|m| Own { chunk: m.len.max(1), ..*o0 }).collect();
            }
            if !bundle {
                let timeout_ns = Request::timeout_ns(self.timeout(w.done.deadline));
                own.push(Own { timeout_ns, nic, delivered, chunk });
            }
            members.push(Member {
                id: 0,
                src,
                len,
                dst,
                dst_off,
                imm: w.imm,
                done: w.done.done,
                holds: false,
                posted: false.into(),
                reported: false,
                canceled: false,
            });
        }
        let n = members.len();
        if n == 0 {
            bail!(InvalidArgument, "submit_single_writes: no writes");
        }
        if n > self.max_inflight {
            bail!(InvalidArgument, "submit_single_writes: {n} writes, more than max_inflight ({})", self.max_inflight);
        }
        self.reserve(g, n)?;
        let first = self.next_request.fetch_add(n as u64, Ordering::Relaxed);
        for (m, id) in members.iter_mut().zip(first..) {
            m.id = id;
        }
        let region = Some(src.0.index);
        let sub = match head {
            Some((_, _, o0)) if bundle && n > 1 => bundles(members, &o0, region),
            _ => Submission::Batch(singles(members, own, region)),
        };
        self.queue(g, sub, n)?;
        Ok(RequestId(first))
    }
}

/// Whether two descriptors are of one engine's group (one peer).
#[inline(always)]
fn same_owner(a: &Arc<MrDesc>, b: &Arc<MrDesc>) -> bool {
    Arc::ptr_eq(a, b) || (a.owner.epoch == b.owner.epoch && a.owner == b.owner)
}

/// What a write's request of its own holds besides its member's fields.
#[derive(Clone, Copy)]
struct Own {
    timeout_ns: u64,
    nic: Option<u8>,
    delivered: bool,
    chunk: u64,
}

/// The writes as bundles of up to `MAX_MEMBERS` (bundle.rs), which share
/// `o`'s deadline and route; each keeps its id, report and immediate.
fn bundles(members: Vec<Member>, o: &Own, region: Option<u32>) -> Submission {
    let bundle = |members: Vec<Member>| {
        let (id, open) = (members[0].id, members.len());
        // Sampled by its first write (`metrics::SUBMIT_SAMPLE`).
        let submitted_ns = super::submit_sample(id);
        let shape = Shape::Bundle(Box::new(BundleShape { members, open }));
        Request {
            id,
            timeout_ns: o.timeout_ns,
            shape,
            imm: None,
            done: OnDone::Nothing,
            region,
            nic: o.nic,
            delivered: false,
            submitted_ns,
        }
    };
    if members.len() <= MAX_MEMBERS {
        return Submission::One(bundle(members));
    }
    let mut it = members.into_iter();
    let mut out = Vec::new();
    loop {
        let chunk: Vec<Member> = it.by_ref().take(MAX_MEMBERS).collect();
        if chunk.is_empty() {
            return Submission::Batch(out);
        }
        out.push(bundle(chunk));
    }
}

/// The writes as requests of their own, as single submits would make them.
fn singles(members: Vec<Member>, own: Vec<Own>, region: Option<u32>) -> Vec<Request> {
    let one = |(m, o): (Member, Own)| Request {
        id: m.id,
        timeout_ns: o.timeout_ns,
        shape: Shape::Single { src: m.src, dst: m.dst, dst_off: m.dst_off, len: m.len, chunk: o.chunk },
        imm: m.imm,
        done: m.done,
        region,
        nic: o.nic,
        delivered: o.delivered,
        submitted_ns: super::submit_sample(m.id),
    };
    members.into_iter().zip(own).map(one).collect()
}

/// Error `e` of write `k` of a batch, as the batch reports it.
pub(crate) fn in_batch(k: usize, mut e: Error) -> Error {
    e.message = format!("write {k} of the batch: {}", e.message);
    e
}
