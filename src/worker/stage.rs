//! Send staging: `submit_send` copies the message at submit time (the caller
//! may reuse its buffer at once), and the worker copies it into one of
//! `SEND_SLOTS` registered slots of `MAX_SEND` bytes when it posts the send;
//! the slot is free again when the request ends.
use super::recv::OwnedMem;
use crate::domain::{Domain, LocalMr, Memory};
use crate::error::Result;
use std::sync::Arc;

/// Size of one send staging slot (the largest message `submit_send` takes).
pub const MAX_SEND: usize = 64 * 1024;
const SEND_SLOTS: usize = 64;

pub(super) struct Staging {
    mem: Arc<OwnedMem>,
    mr: LocalMr,
    free: Vec<u32>,
}

impl Staging {
    /// Registers the slots in `domain` (sends all go through domain 0).
    pub(super) fn new<D: Domain>(domain: &mut D) -> Result<Staging> {
        let mem = OwnedMem::new(MAX_SEND * SEND_SLOTS);
        let mr = domain.register(mem.ptr, mem.len, Memory::Host)?;
        Ok(Staging { mem, mr, free: (0..SEND_SLOTS as u32).rev().collect() })
    }

    /// Copies `msg` into a free slot; `None` if all are in use (try again
    /// once a send has ended).
    pub(super) fn stage(&mut self, msg: &[u8]) -> Option<u32> {
        assert!(msg.len() <= MAX_SEND, "sends are checked against MAX_SEND at submit");
        let s = self.free.pop()?;
        // SAFETY: slot s lies inside `mem` and is ours until `release(s)`; msg fits.
        unsafe { std::ptr::copy_nonoverlapping(msg.as_ptr(), self.buf(s) as *mut u8, msg.len()) };
        Some(s)
    }

    /// Slot `s`'s first byte, and the descriptor to post it with.
    pub(super) fn buf(&self, s: u32) -> *const u8 {
        assert!((s as usize) < SEND_SLOTS);
        // SAFETY: in bounds (asserted).
        unsafe { self.mem.ptr.add(s as usize * MAX_SEND) }
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
        let mut st = Staging::new(&mut d).unwrap();
        let a = st.stage(b"first").unwrap();
        let b = st.stage(&[7u8; MAX_SEND]).unwrap();
        assert_ne!(a, b);
        // SAFETY: both slots are staged and hold what was copied.
        unsafe {
            assert_eq!(std::slice::from_raw_parts(st.buf(a), 5), b"first");
            assert!(std::slice::from_raw_parts(st.buf(b), MAX_SEND).iter().all(|&x| x == 7));
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
