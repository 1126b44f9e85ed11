//! The request table: one slot per request the worker holds, reused with a
//! new generation (`epoch`) each time, so that a late completion or timer of
//! an earlier request in a slot never touches the current one. A request
//! leaves the table through `finish` only, and only once it has nothing left
//! on the wire and either posted every unit or ended early.
use super::token::EPOCH_MASK;
use crate::error::Error;
use crate::wire::MAX_DOMAINS;
use crate::worker::fence::Fence;
use crate::worker::request::Request;
use std::sync::Arc;

/// A request in the table.
pub(in crate::worker) struct Active {
    pub(in crate::worker) req: Request,
    pub(in crate::worker) epoch: u32,
    pub(in crate::worker) units: usize,
    pub(in crate::worker) posted: usize,
    pub(in crate::worker) outstanding: usize,
    /// Next unit each domain posts.
    pub(in crate::worker) next: [usize; MAX_DOMAINS],
    /// How far `next` moves per posted unit: N when sharded over the
    /// domains, 1 when every unit goes through one (`admit`).
    pub(in crate::worker) step: usize,
    /// The destination peer (index into the peer table) of a
    /// single-destination request or a send.
    pub(in crate::worker) peer: u32,
    /// The peer of each unit of a scatter or barrier.
    pub(in crate::worker) unit_peers: Option<Arc<[u32]>>,
    /// Waiting for a peer's handshake; nothing queued yet.
    pub(in crate::worker) parked: bool,
    /// Why it ended early; nothing more is posted once set.
    pub(in crate::worker) error: Option<Error>,
    /// The staging slot of a send (stage.rs).
    pub(in crate::worker) stage: Option<u32>,
    /// Its delivery fence (fence.rs): `No` unless the request asked for one.
    pub(in crate::worker) fence: Fence,
    /// When its first work request was posted (metrics): `Pass::now_ns`;
    /// 0 until then.
    pub(in crate::worker) first_post_ns: u64,
    /// Bytes posted so far (metrics).
    pub(in crate::worker) bytes: u64,
}

impl Active {
    pub(in crate::worker) fn involves(&self, peer: u32) -> bool {
        match &self.unit_peers {
            Some(u) => u.contains(&peer),
            None => self.peer == peer,
        }
    }

    /// Nothing on the wire, and everything posted (and, if asked for,
    /// fenced) or ended early.
    fn finished(&self) -> bool {
        self.outstanding == 0 && (self.error.is_some() || (self.posted >= self.units && self.fence.settled()))
    }

    /// Every work request came back and nothing failed: its fence is due.
    pub(in crate::worker) fn fence_due(&self) -> bool {
        self.fence == Fence::Wanted && self.outstanding == 0 && self.error.is_none() && self.posted >= self.units
    }
}

#[derive(Default)]
pub(in crate::worker) struct Slots {
    list: Vec<Option<Active>>,
    gens: Vec<u32>,
    free: Vec<u32>,
    live: usize,
}

impl Slots {
    /// Takes a free slot for `req` of `units` units (`Request::units`;
    /// nothing posted; `parked`: waiting for its peers); returns the slot
    /// and its epoch. Inlined into its one caller, and written into the
    /// slot in place: the request is moved once, not built and copied.
    #[inline(always)]
    pub(in crate::worker) fn insert(
        &mut self,
        req: Request,
        units: usize,
        peer: u32,
        unit_peers: Option<Arc<[u32]>>,
        parked: bool,
    ) -> (u32, u32) {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.list.push(None);
            self.gens.push(0);
            (self.list.len() - 1) as u32
        });
        let epoch = self.gens[slot as usize];
        let delivered = req.delivered;
        let place = &mut self.list[slot as usize];
        assert!(place.is_none(), "slot {slot} is on the free list but holds a request");
        // Written where it lies: an assignment would drop the old value
        // (None) after building the new one, so the request was built
        // elsewhere and copied in (330 bytes, a libc memcpy per request).
        // SAFETY: `place` is a valid, aligned slot holding None (checked
        // above), so overwriting it leaks nothing.
        unsafe {
            std::ptr::write(
                place,
                Some(Active {
                    req,
                    epoch,
                    units,
                    posted: 0,
                    outstanding: 0,
                    next: [usize::MAX; MAX_DOMAINS],
                    step: 1,
                    peer,
                    unit_peers,
                    parked,
                    error: None,
                    stage: None,
                    fence: if delivered { Fence::Wanted } else { Fence::No },
                    first_post_ns: 0,
                    bytes: 0,
                }),
            )
        };
        self.live += 1;
        (slot, epoch)
    }

    /// The request in `slot`, whatever its epoch.
    pub(in crate::worker) fn get(&mut self, slot: u32) -> Option<&mut Active> {
        self.list.get_mut(slot as usize)?.as_mut()
    }

    /// The request in `slot` if it is still the one of `epoch`.
    pub(in crate::worker) fn current(&mut self, slot: u32, epoch: u32) -> Option<&mut Active> {
        self.get(slot).filter(|a| a.epoch == epoch)
    }

    pub(in crate::worker) fn is_current(&self, slot: u32, epoch: u32) -> bool {
        self.list.get(slot as usize).and_then(|a| a.as_ref()).is_some_and(|a| a.epoch == epoch)
    }

    /// The slots whose request satisfies `f`.
    pub(in crate::worker) fn find(&self, f: impl Fn(&Active) -> bool) -> Vec<u32> {
        (0..self.list.len() as u32).filter(|&s| self.list[s as usize].as_ref().is_some_and(&f)).collect()
    }

    /// Every slot that holds a request.
    pub(in crate::worker) fn all(&self) -> Vec<u32> {
        self.find(|_| true)
    }

    /// Requests in the table.
    pub(in crate::worker) fn live(&self) -> usize {
        self.live
    }

    /// If the request in `slot` has finished (see the module doc): hands it
    /// to `report`, then drops it where it lies (no copy of the whole
    /// request), and the slot is free with the next epoch. True if it had.
    pub(in crate::worker) fn finish(&mut self, slot: u32, report: impl FnOnce(&mut Active)) -> bool {
        let s = slot as usize;
        let Some(a) = self.list.get_mut(s).and_then(|a| a.as_mut()).filter(|a| a.finished()) else {
            return false;
        };
        report(a);
        // Dropped where it lies: `self.list[s] = None` copied the whole
        // request (330 bytes) out first, twice a round trip of messages.
        let place = &mut self.list[s];
        // A drop that unwinds would leave the slot to be dropped again: none
        // does (its callback has been taken), and one that did aborts here.
        let abort = AbortOnUnwind;
        // SAFETY: `place` holds a request (found above); it is dropped once,
        // then `None` is written over it without dropping it again.
        unsafe {
            if let Some(a) = place.as_mut() {
                std::ptr::drop_in_place(a);
            }
            std::ptr::write(place, None);
        }
        std::mem::forget(abort);
        self.gens[s] = (self.gens[s] + 1) & EPOCH_MASK;
        self.free.push(slot);
        self.live -= 1;
        true
    }
}

/// Aborts the process if dropped: held across a drop that must not unwind.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::request::{Request, Shape};

    fn connect() -> Request {
        let to = crate::wire::NetAddr { epoch: 1, domains: vec![vec![1u8, 2, 3].into()].into() };
        Request::test(Shape::Connect { to })
    }

    #[test]
    fn a_reused_slot_gets_a_new_epoch() {
        let mut t = Slots::default();
        let (s, e) = t.insert(connect(), 0, 0, None, true);
        assert!(t.is_current(s, e));
        assert!(t.finish(s, |_| {}), "a request with no units and nothing out is finished");
        assert!(!t.is_current(s, e));
        let (s2, e2) = t.insert(connect(), 0, 0, None, true);
        assert_eq!((s2, e2), (s, e + 1));
        assert!(t.current(s, e).is_none(), "the old epoch finds nothing");
        assert!(t.current(s, e2).is_some());
    }

    #[test]
    fn finish_waits_for_the_wire_and_the_units() {
        let mut t = Slots::default();
        let (s, _) = t.insert(connect(), 0, 0, None, true);
        let a = t.get(s).unwrap();
        (a.units, a.posted, a.outstanding) = (3, 2, 1);
        assert!(!t.finish(s, |_| {}), "a unit on the wire");
        t.get(s).unwrap().outstanding = 0;
        assert!(!t.finish(s, |_| {}), "a unit not posted");
        t.get(s).unwrap().error = Some(Error::new(crate::Status::Canceled, "x"));
        t.get(s).unwrap().outstanding = 1;
        assert!(!t.finish(s, |_| {}), "ended early, but a unit is still on the wire");
        t.get(s).unwrap().outstanding = 0;
        assert_eq!(t.live(), 1);
        assert!(t.finish(s, |_| {}));
        assert_eq!(t.live(), 0);
        assert!(!t.finish(s, |_| {}), "finished once");
    }

    #[test]
    fn a_finished_request_is_dropped_once_and_its_slot_reused() {
        let mut t = Slots::default();
        let req = connect();
        let Shape::Connect { to } = &req.shape else { unreachable!() };
        let addr = to.domains.clone();
        let (s, _) = t.insert(req, 0, 0, None, true);
        assert_eq!(Arc::strong_count(&addr), 2, "the request holds its address");
        assert!(t.finish(s, |_| {}));
        assert_eq!(Arc::strong_count(&addr), 1, "dropped where it lay, once");
        assert!(t.get(s).is_none());
        let (s2, _) = t.insert(connect(), 0, 0, None, true);
        assert_eq!(s2, s);
        drop(t);
        assert_eq!(Arc::strong_count(&addr), 1);
    }

    #[test]
    fn epochs_wrap_within_the_token_bits() {
        let mut t = Slots::default();
        t.insert(connect(), 0, 0, None, true);
        t.gens[0] = EPOCH_MASK;
        t.list[0].as_mut().unwrap().epoch = EPOCH_MASK;
        assert!(t.finish(0, |_| {}));
        assert_eq!(t.insert(connect(), 0, 0, None, true), (0, 0));
    }

    #[test]
    fn find_sees_only_live_requests() {
        let mut t = Slots::default();
        let (a, _) = t.insert(connect(), 0, 1, None, true);
        let (b, _) = t.insert(connect(), 0, 2, Some(vec![2, 3].into()), true);
        t.insert(connect(), 0, 4, None, true);
        assert!(t.finish(a, |_| {}));
        assert_eq!(t.find(|a| a.involves(2)), vec![b]);
        assert_eq!(t.find(|a| a.involves(3)), vec![b]);
        assert_eq!(t.all().len(), 2);
    }
}
