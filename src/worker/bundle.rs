//! Bundles: the one-work-request writes of a batch to one peer
//! (`TransferEngine::submit_single_writes`), each a request of its own,
//! held in one slot of the request table (`Shape::Bundle`). The bundle is
//! taken, checked against its peer, given a deadline and queued once; each
//! member is reported as its own work request comes back, with its own
//! outcome. What ends the bundle early (its deadline, its peer down, the
//! engine's shutdown) ends every member not yet reported, once its work
//! request is back, as it would end a request of its own. A member can be
//! canceled alone: not posted if it has not been, reported `Canceled`
//! either way.
use super::Worker;
use super::ending::canceled;
use super::held::Dst;
use super::held::Dsts;
use super::request::{Request, Shape, write_to};
use crate::completion::notify::{Notifier, OnDone};
use crate::domain::Domain;
use crate::domain::{PeerId, WriteWr};
use crate::error::{Error, Result, Status};
use crate::metrics::{GroupStats, POST_TO_DONE, REQUEST_BYTES, REQUEST_WRS};
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;

/// The most members a bundle has (its tokens carry a member's index in a
/// byte: token.rs); a larger batch is cut into bundles.
pub const MAX_MEMBERS: usize = 1 << 8;
/// Bundles are formed only while every slot of the request table is below
/// this (`max_inflight` bounds the slots): their tokens carry 24 bits of it.
pub const MEMBER_SLOTS: usize = 1 << 24;

/// The writes of a `Shape::Bundle`: unit `k` is member `k`'s one work request.
pub struct BundleShape {
    pub members: Vec<Member>,
    /// Members not yet reported.
    pub open: usize,
}

/// One write of a bundle: a request of its own but for its slot.
pub struct Member {
    pub id: u64,
    /// Source address (the source region's base + the write's offset).
    pub src: usize,
    pub len: u64,
    pub dst: Dst,
    pub dst_off: u64,
    pub imm: Option<u32>,
    pub done: OnDone,
    /// It holds its descriptor's entry in the worker's table (held.rs); a
    /// write that names the same entry as the write before it shares that
    /// one's (`Worker::take_members`).
    pub holds: bool,
    /// Its work request was posted (set while the request is read for
    /// its work request: `post_run`).
    pub posted: std::cell::Cell<bool>,
    /// Reported already (its work request came back, or it was canceled
    /// before it was posted); `canceled`: report `Canceled` whatever its
    /// work request says.
    pub reported: bool,
    pub canceled: bool,
}

impl Member {
    /// Its work request on domain `d` to `peer` (`desc`: its source
    /// region's registration there).
    #[inline(always)]
    pub(in crate::worker) fn wr(&self, d: usize, peer: PeerId, desc: *mut std::ffi::c_void, dsts: &Dsts) -> WriteWr {
        write_to(dsts.get(&self.dst).keys[d], self.dst_off, self.src as u64, self.len, desc, peer, self.imm)
    }
}

/// Moves bundle `b`'s writes into memory of the worker's own (a list
/// `lists` kept from an earlier bundle, or a new one): the worker writes
/// into them (posted, reported) until the bundle ends, and memory the
/// submitting thread allocated, and will allocate again, would move between
/// the two threads' CPUs with every write (on the H200, a batch of 16 cost
/// 1.18× the requests of their own in worker mode before this copy).
/// (The box too: a new one, not the submitter's written over.)
/// The submitter's list, emptied, goes back to `spares` for its next batch.
#[allow(clippy::replace_box)]
pub(super) fn own(lists: &mut Vec<Vec<Member>>, spares: &ArrayQueue<Vec<Member>>, b: &mut Box<BundleShape>) {
    let mut mine = lists.pop().unwrap_or_default();
    mine.append(&mut b.members);
    // Full: dropped (a burst of batches keeps no more than the queue holds).
    let _ = spares.push(std::mem::take(&mut b.members));
    *b = Box::new(BundleShape { members: mine, open: b.open });
}

/// Keeps an ended bundle's list of writes for the next bundle, emptied
/// (a few: a burst of bundles should not pin its memory for good).
pub(super) fn keep(lists: &mut Vec<Vec<Member>>, mut members: Vec<Member>) {
    members.clear();
    if lists.len() < 64 {
        lists.push(members);
    }
}

/// Reports member `m` of a bundle (first posted at `first_post_ns`, 0 if
/// never) with `res`, or `Canceled` if it was canceled; once.
pub(super) fn report(
    stats: &GroupStats,
    notifier: &Notifier,
    now_ns: u64,
    first_post_ns: u64,
    g: &mut BundleShape,
    m: usize,
    res: Result<()>,
) {
    let m: &mut Member = &mut g.members[m];
    if m.reported {
        return;
    }
    m.reported = true;
    g.open -= 1;
    let res = if m.canceled { Err(canceled()) } else { res };
    let status = res.as_ref().err().map_or(0, |e| e.status as usize);
    stats.ended(0, status);
    if status == 0 && first_post_ns != 0 {
        stats.hists[POST_TO_DONE].record(now_ns.saturating_sub(first_post_ns));
        stats.hists[REQUEST_BYTES].record(m.len);
        stats.hists[REQUEST_WRS].record(1);
    }
    notifier.fire_request(m.id, std::mem::replace(&mut m.done, OnDone::Nothing), res);
}

/// Reports every member of `g` not yet reported with `res` (the bundle's
/// end: `maybe_finish`).
pub(super) fn report_rest(
    stats: &GroupStats,
    notifier: &Notifier,
    now_ns: u64,
    first_post_ns: u64,
    g: &mut BundleShape,
    res: &Result<()>,
) {
    for k in 0..g.members.len() {
        if g.open == 0 {
            return;
        }
        if !g.members[k].reported {
            report(stats, notifier, now_ns, first_post_ns, g, k, res.clone());
        }
    }
}

impl<D: Domain> Worker<D> {
    /// Member `unit`'s work request of the bundle in `slot` came back (failed
    /// with `err` if given): the member is reported, unless the bundle has
    /// ended, which then reports it with the bundle's error once its last
    /// work request is back (`maybe_finish`).
    pub(super) fn member_done(&mut self, slot: u32, epoch: u32, unit: u8, err: Option<Error>) {
        // Its work request is in the counters before it is reported.
        self.pass.done.flush(&self.tally);
        let now = self.pass.now_ns();
        let Some(a) = self.requests.slots.current(slot, epoch) else {
            return;
        };
        a.outstanding -= 1;
        if a.error.is_none() {
            let Shape::Bundle(g) = &mut a.req.shape else { unreachable!("a member token of another shape") };
            report(&self.shared.stats, &self.notifier, now, a.first_post_ns, g, unit as usize, err.map_or(Ok(()), Err));
        }
        if a.outstanding == 0 && (a.posted >= a.units || a.error.is_some()) {
            self.maybe_finish(slot);
        }
    }

    /// What a bundle's writes name, taken (`take_refs`, whose region it
    /// has taken): each descriptor once per run of writes that name the same
    /// entry of the descriptor table (the others share it: `Member::holds`),
    /// and the peer they go to (one: `submit_single_writes` checks it; else
    /// each write's).
    pub(super) fn take_members(&mut self, req: &mut Request) -> Result<(u32, Option<Arc<[u32]>>)> {
        let n = req.units();
        // Write 0's peer; each write's once one differs.
        let (mut one, mut many, mut shared): (u32, Option<Vec<u32>>, Option<(u32, u32)>) = (u32::MAX, None, None);
        for j in 0..n {
            let Shape::Bundle(b) = &mut req.shape else { unreachable!("a bundle") };
            let m = &mut b.members[j];
            let p = match (&m.dst, shared) {
                (Dst::Held(i), Some((k, p))) if *i == k => p,
                _ => match self.take_dst(&mut m.dst) {
                    Ok(p) => {
                        m.holds = true;
                        shared = if let Dst::Held(i) = m.dst { Some((i, p)) } else { None };
                        p
                    }
                    Err(e) => {
                        self.put_refs(req, j);
                        return Err(e);
                    }
                },
            };
            if j == 0 {
                one = p;
            }
            match &mut many {
                Some(v) => v.push(p),
                None if p != one => many = Some(std::iter::repeat_n(one, j).chain([p]).collect()),
                None => {}
            }
        }
        Ok(match many {
            None => (one, None),
            Some(v) => (u32::MAX, Some(v.into())),
        })
    }

    /// Cancels request `id` if it is a member of a live bundle (`None` if
    /// no bundle holds it): reported at once if it was not posted (it never
    /// will be), else when its work request comes back.
    pub(super) fn cancel_member(&mut self, id: u64) -> Option<Result<()>> {
        let slot = *self.requests.slots.find(|a| a.error.is_none() && a.req.has_member(id)).first()?;
        let now = self.pass.now_ns();
        let a = self.requests.slots.get(slot).expect("found just now");
        let Shape::Bundle(g) = &mut a.req.shape else { unreachable!("has_member") };
        let k = (id - g.members[0].id) as usize;
        if g.members[k].reported {
            return Some(Err(Error::new(Status::NotFound, format!("request {id} has already ended"))));
        }
        g.members[k].canceled = true;
        if !g.members[k].posted.get() {
            report(&self.shared.stats, &self.notifier, now, a.first_post_ns, g, k, Err(canceled()));
        }
        // Every member reported: nothing of it is left to post.
        if g.open == 0 {
            self.end(slot, canceled());
        }
        Some(Ok(()))
    }

    /// Ends request `req`, which never entered the table, with `e`: each
    /// of a bundle's members, as a request of its own.
    pub(super) fn fail_unaccepted(&self, mut req: Request, e: Error) {
        let stats = &self.shared.stats;
        match &mut req.shape {
            Shape::Bundle(g) => {
                for m in g.members.iter_mut() {
                    stats.ended(0, e.status as usize);
                    self.notifier.fire_request(m.id, std::mem::replace(&mut m.done, OnDone::Nothing), Err(e.clone()));
                }
            }
            _ => {
                if let Shape::Send { msg, .. } = &req.shape {
                    self.shared.send_slots.unstage(msg);
                }
                stats.ended(req.kind(), e.status as usize);
                self.notifier.fire_request(req.id, req.done, Err(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64) -> Member {
        let (posted, done) = (false.into(), OnDone::Nothing);
        Member {
            id,
            src: 0,
            len: 8,
            dst: Dst::Held(0),
            dst_off: 0,
            imm: None,
            done,
            holds: false,
            posted,
            reported: false,
            canceled: false,
        }
    }

    /// The worker moves a bundle's writes into a list of its own and gives
    /// the submitter's back, emptied, for its next batch; a full queue of
    /// spares drops it.
    #[test]
    fn own_moves_the_writes_and_gives_the_list_back() {
        let spares = ArrayQueue::new(1);
        let mut lists = vec![Vec::with_capacity(4)];
        let submitted: Vec<Member> = (0..3).map(member).collect();
        let at = submitted.as_ptr();
        let mut b = Box::new(BundleShape { members: submitted, open: 3 });
        own(&mut lists, &spares, &mut b);
        assert_eq!(b.members.iter().map(|m| m.id).collect::<Vec<_>>(), [0, 1, 2]);
        assert_ne!(b.members.as_ptr(), at, "the writes moved");
        assert_eq!(b.open, 3);
        assert!(lists.is_empty(), "the worker's kept list was used");
        let back = spares.pop().expect("the submitter's list came back");
        assert!(back.is_empty() && back.capacity() >= 3 && back.as_ptr() == at);
        // Nothing to reuse, and no room for a spare: a new list, the old dropped.
        assert!(spares.push(Vec::new()).is_ok());
        let mut b = Box::new(BundleShape { members: vec![member(7)], open: 1 });
        own(&mut lists, &spares, &mut b);
        assert_eq!(b.members[0].id, 7);
        assert!(spares.pop().is_some_and(|v| v.capacity() == 0) && spares.pop().is_none());
    }
}
