//! Send staging: `submit_send` copies the message at submit time (the caller
//! may reuse its buffer at once), and the worker copies it into one of
//! `SEND_SLOTS` registered slots of `SEND_SLOT` bytes when it posts the send,
//! behind the header that names the sender to the receiver (`SEND_HEADER`:
//! this group's epoch; recv.rs reads it), which is posted with the message
//! only where the backend cannot carry the epoch in the completion's data
//! (`Domain::sender_in_data`); the slot is free again when the request ends.
use super::recv::OwnedMem;
use crate::domain::{Domain, LocalMr, Memory};
use crate::error::Result;
use std::sync::Arc;

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
const SEND_SLOTS: usize = 64;

pub(super) struct Staging {
    mem: Arc<OwnedMem>,
    mr: LocalMr,
    free: Vec<u32>,
    /// The header every message starts with.
    header: [u8; SEND_HEADER],
}

impl Staging {
    /// Registers the slots in `domain` (sends all go through domain 0);
    /// messages name their sender by `epoch`.
    pub(super) fn new<D: Domain>(domain: &mut D, epoch: u64) -> Result<Staging> {
        let mem = OwnedMem::new(SEND_SLOT * SEND_SLOTS);
        let mr = domain.register(mem.ptr, mem.len, Memory::Host)?;
        Ok(Staging { mem, mr, free: (0..SEND_SLOTS as u32).rev().collect(), header: epoch.to_le_bytes() })
    }

    /// Copies the header and `msg` into a free slot; `None` if all are in
    /// use (try again once a send has ended). The slot's bytes to send are
    /// `buf(s)`, `msg.len() + SEND_HEADER` long.
    pub(super) fn stage(&mut self, msg: &[u8]) -> Option<u32> {
        assert!(msg.len() <= MAX_SEND, "sends are checked against MAX_SEND at submit");
        let s = self.free.pop()?;
        let at = self.buf(s) as *mut u8;
        // SAFETY: slot s lies inside `mem` and is ours until `release(s)`; header + msg fit.
        unsafe {
            std::ptr::copy_nonoverlapping(self.header.as_ptr(), at, SEND_HEADER);
            std::ptr::copy_nonoverlapping(msg.as_ptr(), at.add(SEND_HEADER), msg.len());
        }
        Some(s)
    }

    /// Slot `s`'s first byte (its header's), and the descriptor to post it with.
    pub(super) fn buf(&self, s: u32) -> *const u8 {
        assert!((s as usize) < SEND_SLOTS);
        // SAFETY: in bounds (asserted).
        unsafe { self.mem.ptr.add(s as usize * SEND_SLOT) }
    }

    /// The sender's epoch, as the header holds it (`SendWr::data` carries
    /// it instead where the backend can: `Domain::sender_in_data`).
    pub(super) fn sender(&self) -> u64 {
        u64::from_le_bytes(self.header)
    }

    pub(super) fn desc(&self) -> *mut std::ffi::c_void {
        self.mr.desc
    }

    pub(super) fn release(&mut self, s: u32) {
        debug_assert!(!self.free.contains(&s));
        self.free.push(s);
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

    #[test]
    fn slots_hold_their_message_until_released() {
        let mut d = NullDomain::open(&Default::default()).unwrap();
        let mut st = Staging::new(&mut d, 0x1122_3344_5566_7788).unwrap();
        let a = st.stage(b"first").unwrap();
        let b = st.stage(&[7u8; MAX_SEND]).unwrap();
        assert_ne!(a, b);
        // SAFETY: both slots are staged and hold what was copied, behind the header.
        unsafe {
            assert_eq!(
                std::slice::from_raw_parts(st.buf(a), SEND_HEADER + 5),
                b"\x88\x77\x66\x55\x44\x33\x22\x11first"
            );
            let all = std::slice::from_raw_parts(st.buf(b), SEND_SLOT);
            assert!(all[SEND_HEADER..].iter().all(|&x| x == 7));
        }
        let mut held = vec![a, b];
        while let Some(s) = st.stage(b"x") {
            held.push(s);
        }
        assert_eq!(held.len(), SEND_SLOTS, "every slot once, then none");
        st.release(a);
        assert_eq!(st.stage(b"again"), Some(a));
        st.close(&mut d);
    }
}
