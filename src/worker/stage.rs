//! Send staging: a send's message is copied into one of `SEND_SLOTS`
//! registered slots of `SEND_SLOT` bytes, behind the header that names the
//! sender to the receiver (`SEND_HEADER`: this group's epoch, written into
//! every slot once; recv.rs reads it), which is posted with the message
//! only where the backend cannot carry the epoch in the completion's data
//! (`Domain::sender_in_data`). The slot is free again when the request ends.
//!
//! `submit_send` copies the message itself, on the caller's thread, into a
//! slot it takes from the shared ones (`SendSlots`, in the group's
//! `Shared`): no heap copy of the message, and none freed on the worker's
//! thread. The slot freed last is taken first (`SendSlots::hot`), so a
//! send after a send writes where the last one did, still in cache. When
//! all `SHARED_SLOTS` are taken the message is copied to the heap instead
//! (`SendMsg::Owned`), and the worker stages it when it posts it, into
//! one of `WORKER_SLOTS` slots of its own (`Staging`): a send
//! waiting for one of those waits only for sends that hold one, never for a
//! shared slot that a send queued behind it holds, and it lets the requests
//! behind it be posted meanwhile (post.rs `post_run`), so that those holding
//! the slots are never stuck behind it.
use super::recv::OwnedMem;
use crate::domain::{Domain, LocalMr, Memory};
use crate::error::Result;
use crossbeam_queue::ArrayQueue;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The largest message `submit_send` takes.
pub const MAX_SEND: usize = 64 * 1024;
/// Bytes before every application message on the wire: the sender's epoch.
pub const SEND_HEADER: usize = 8;
/// The header's bytes on the wire of `domain`: none where its completions
/// carry the sender's epoch instead (`Domain::sender_in_data`). A send
/// posts a slot from that many bytes before its message; a receive buffer
/// starts that many before where the message is read (`recv::message`).
#[inline]
pub(super) fn wire_header<D: Domain>(domain: &D) -> usize {
    if domain.sender_in_data() { 0 } else { SEND_HEADER }
}

/// A send slot and a receive buffer: the header and the largest message.
pub const SEND_SLOT: usize = SEND_HEADER + MAX_SEND;
/// Slots the submitting threads take (`SendSlots::stage`).
const SHARED_SLOTS: usize = 64;
/// Slots only the worker takes, for messages that found no shared one.
const WORKER_SLOTS: usize = 16;
const SEND_SLOTS: usize = SHARED_SLOTS + WORKER_SLOTS;
/// From one slot to the next: at least `SEND_SLOT`, in an odd number of
/// 64-byte lines, so that successive slots' first lines fall in different
/// sets of a CPU's caches (`SEND_SLOT` apart, 64 KiB and 8 bytes, eight
/// successive slots share a set of a 32 KiB level-1 cache, of 8 ways).
const SLOT_STRIDE: usize = ((SEND_SLOT / 64 + 1) | 1) * 64;
const _: () = assert!(SLOT_STRIDE >= SEND_SLOT && (SLOT_STRIDE / 64) % 2 == 1);
/// `SendSlots::hot` when it holds no slot.
const NO_SLOT: u32 = u32::MAX;

/// A send's message: in a slot (`SendSlots::stage`), or on the heap until
/// the worker stages it.
pub enum SendMsg {
    Staged { slot: u32, len: u32 },
    Owned(Box<[u8]>),
}

impl SendMsg {
    pub(crate) fn len(&self) -> usize {
        match self {
            SendMsg::Staged { len, .. } => *len as usize,
            SendMsg::Owned(b) => b.len(),
        }
    }

    /// The shared slot it is in, if any.
    pub(crate) fn slot(&self) -> Option<u32> {
        match self {
            SendMsg::Staged { slot, .. } => Some(*slot),
            SendMsg::Owned(_) => None,
        }
    }
}

/// The slots' memory, and the shared slots not in use: what the group's
/// submitting threads and its worker both see.
pub struct SendSlots {
    mem: Arc<OwnedMem>,
    /// The slot freed last (`NO_SLOT`: none), taken first: a send after
    /// a send reuses its slot, still in cache, rather than the one the
    /// queue has held longest.
    hot: AtomicU32,
    free: ArrayQueue<u32>,
}

impl SendSlots {
    pub(super) fn new() -> SendSlots {
        let free = ArrayQueue::new(SHARED_SLOTS);
        for s in 0..SHARED_SLOTS as u32 {
            free.push(s).expect("room for every shared slot");
        }
        SendSlots { mem: OwnedMem::new(SLOT_STRIDE * SEND_SLOTS), hot: AtomicU32::new(NO_SLOT), free }
    }

    /// Copies `msg` into a free shared slot, behind its header; the heap
    /// copy (`Owned`) if none is free. The caller has checked `msg`
    /// against `MAX_SEND`.
    pub(crate) fn stage(&self, msg: &[u8]) -> SendMsg {
        let hot = self.hot.swap(NO_SLOT, Ordering::AcqRel);
        match (hot != NO_SLOT).then_some(hot).or_else(|| self.free.pop()) {
            Some(slot) => {
                // SAFETY: the slot is ours until it is released.
                unsafe { self.fill(slot, msg) };
                SendMsg::Staged { slot, len: msg.len() as u32 }
            }
            None => SendMsg::Owned(msg.into()),
        }
    }

    /// Shared slots not in use.
    pub(crate) fn free_now(&self) -> usize {
        self.free.len() + (self.hot.load(Ordering::Relaxed) != NO_SLOT) as usize
    }

    /// Gives back the slot of a send that ends without its request having
    /// been accepted (`Staging::release` for one that was).
    pub(crate) fn unstage(&self, msg: &SendMsg) {
        if let Some(s) = msg.slot() {
            self.release(s);
        }
    }

    /// Gives back shared slot `s`: its send has ended, or was refused at submit.
    pub(crate) fn release(&self, s: u32) {
        let before = self.hot.swap(s, Ordering::AcqRel);
        if before != NO_SLOT {
            self.free.push(before).expect("a shared slot is released once");
        }
    }

    /// Slot `s`'s first byte (its header's).
    fn buf(&self, s: u32) -> *mut u8 {
        assert!((s as usize) < SEND_SLOTS);
        // SAFETY: in bounds (asserted).
        unsafe { self.mem.ptr.add(s as usize * SLOT_STRIDE) }
    }

    /// Copies `msg` behind slot `s`'s header.
    /// SAFETY: slot `s` is the caller's (taken, not yet released).
    unsafe fn fill(&self, s: u32, msg: &[u8]) {
        assert!(msg.len() <= MAX_SEND, "sends are checked against MAX_SEND at submit");
        // SAFETY: slot s lies inside `mem` and is the caller's; the message fits behind the header.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), self.buf(s).add(SEND_HEADER), msg.len()) }
    }
}

/// The worker's side of the slots: their registration in domain 0 (sends
/// all go through domain 0), the sender's epoch, and its own slots.
pub(super) struct Staging {
    slots: Arc<SendSlots>,
    mr: LocalMr,
    /// The worker's own slots not in use (`WORKER_SLOTS`).
    free: Vec<u32>,
    epoch: u64,
}

impl Staging {
    /// Registers `slots` in `domain` and writes every slot's header:
    /// messages name their sender by `epoch`. Before any send is
    /// submitted: the engine is handed out once its workers have started.
    pub(super) fn new<D: Domain>(domain: &mut D, slots: Arc<SendSlots>, epoch: u64) -> Result<Staging> {
        for s in 0..SEND_SLOTS as u32 {
            // SAFETY: no slot is in use yet (above); the header is inside slot s.
            unsafe { std::ptr::copy_nonoverlapping(epoch.to_le_bytes().as_ptr(), slots.buf(s), SEND_HEADER) };
        }
        let mr = domain.register(slots.mem.ptr, slots.mem.len, Memory::Host)?;
        let free = (SHARED_SLOTS as u32..SEND_SLOTS as u32).rev().collect();
        Ok(Staging { slots, mr, free, epoch })
    }

    /// The slot `msg` is in: its own, or one of the worker's it is copied
    /// into now; `None` if it is on the heap and the worker's are all in
    /// use (try again once a send has ended).
    pub(super) fn stage(&mut self, msg: &SendMsg) -> Option<u32> {
        match msg {
            SendMsg::Staged { slot, .. } => Some(*slot),
            SendMsg::Owned(m) => {
                let s = self.free.pop()?;
                // SAFETY: slot s was free: it is the worker's until `release(s)`.
                unsafe { self.slots.fill(s, m) };
                Some(s)
            }
        }
    }

    /// Slot `s`'s first byte (its header's), and the descriptor to post it with.
    pub(super) fn buf(&self, s: u32) -> *const u8 {
        self.slots.buf(s)
    }

    /// The sender's epoch, as the header holds it (`SendWr::data` carries
    /// it instead where the backend can: `Domain::sender_in_data`).
    pub(super) fn sender(&self) -> u64 {
        self.epoch
    }

    pub(super) fn desc(&self) -> *mut std::ffi::c_void {
        self.mr.desc
    }

    /// Frees the slot of a send that ended: the one it was posted from
    /// (`stage` gave it), else the one it was submitted in, if any (a heap
    /// message never staged has none).
    pub(super) fn release(&mut self, posted_from: Option<u32>, msg: &SendMsg) {
        match posted_from.or(msg.slot()) {
            Some(s) if (s as usize) < SHARED_SLOTS => self.slots.release(s),
            Some(s) => {
                debug_assert!(!self.free.contains(&s));
                self.free.push(s);
            }
            None => {}
        }
    }

    /// Deregisters the slots (at shutdown, before the domain closes).
    pub(super) fn close<D: Domain>(&self, domain: &mut D) {
        domain.deregister(&self.mr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::null::NullDomain;

    /// The bytes of slot `s` from its header on, `n` of them.
    fn bytes(st: &Staging, s: u32, n: usize) -> Vec<u8> {
        // SAFETY: slot s is inside the slots' memory, and n <= SEND_SLOT.
        unsafe { std::slice::from_raw_parts(st.buf(s), n).to_vec() }
    }

    #[test]
    fn slots_hold_their_message_behind_the_header_until_released() {
        let mut d = NullDomain::open(&Default::default()).unwrap();
        let slots = Arc::new(SendSlots::new());
        let mut st = Staging::new(&mut d, slots.clone(), 0x1122_3344_5566_7788).unwrap();
        let a = slots.stage(b"first");
        let SendMsg::Staged { slot: sa, len: 5 } = a else { panic!("a free shared slot") };
        assert_eq!(st.stage(&a), Some(sa), "a staged message is in its slot already");
        assert_eq!(bytes(&st, sa, SEND_HEADER + 5), b"\x88\x77\x66\x55\x44\x33\x22\x11first");
        let big = slots.stage(&[7u8; MAX_SEND]);
        let SendMsg::Staged { slot: sb, .. } = big else { panic!("a free shared slot") };
        assert!(bytes(&st, sb, SEND_SLOT)[SEND_HEADER..].iter().all(|&x| x == 7));
        let mut held = vec![sa, sb];
        for _ in 2..SHARED_SLOTS {
            let SendMsg::Staged { slot, .. } = slots.stage(b"x") else { panic!("shared slots left") };
            held.push(slot);
        }
        held.sort();
        held.dedup();
        assert_eq!(held.len(), SHARED_SLOTS, "every shared slot once");
        // No shared slot left: the heap, then the worker's own slots.
        let owned = slots.stage(b"late");
        assert!(matches!(owned, SendMsg::Owned(_)) && owned.len() == 4);
        let w = st.stage(&owned).expect("a worker's slot");
        assert!(w as usize >= SHARED_SLOTS);
        assert_eq!(bytes(&st, w, SEND_HEADER + 4), b"\x88\x77\x66\x55\x44\x33\x22\x11late");
        for _ in 1..WORKER_SLOTS {
            st.stage(&owned).expect("a worker's slot");
        }
        assert_eq!(st.stage(&owned), None, "the worker's slots are all in use");
        st.release(Some(w), &owned);
        assert_eq!(st.stage(&owned), Some(w));
        st.release(None, &owned); // never staged: nothing to free
        assert_eq!(st.stage(&owned), None);
        // A shared slot comes back to the submitters: released by the
        // worker once posted from, or by a request that ended before.
        st.release(Some(sa), &a);
        assert!(matches!(slots.stage(b"again"), SendMsg::Staged { slot, .. } if slot == sa));
        st.release(None, &big);
        let c = slots.stage(b"again");
        assert!(matches!(c, SendMsg::Staged { slot, .. } if slot == sb));
        // Given back by a submit that never reached the worker.
        slots.unstage(&c);
        assert!(matches!(slots.stage(b"again"), SendMsg::Staged { slot, .. } if slot == sb));
        st.close(&mut d);
    }
}
