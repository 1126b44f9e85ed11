//! One doorbell's chain of send work requests, built on templates.
//!
//! The `CHAIN` work requests and their scatter-gather entries are allocated
//! and linked once (each names its own entry and the next request); a chain
//! only rewrites what differs per page — its id, opcode, source, length and
//! key, destination and immediate — and ends itself: the last request is
//! the only one signaled and links nothing (`ops.rs` says why that is
//! safe). Nothing is allocated or zeroed per post.
use super::super::sys::*;

/// Work requests rung with one doorbell at most.
pub(super) const CHAIN: usize = 32;

/// What one work request carries.
pub(super) struct Wr {
    pub wr_id: u64,
    pub opcode: ibv_wr_opcode,
    /// Source address, length, local key (a length of 0: no entry).
    pub local: (u64, u32, u32),
    /// Destination address and remote key (writes).
    pub remote: (u64, u32),
    /// Network byte order (writes with an immediate).
    pub imm_be: u32,
}

pub(super) struct Chain {
    wrs: Box<[ibv_send_wr]>,
    sges: Box<[ibv_sge]>,
    len: usize,
}

// SAFETY: the pointers inside point into the chain's own boxes.
unsafe impl Send for Chain {}

impl Chain {
    pub fn new() -> Chain {
        let mut c = Chain {
            wrs: vec![ibv_send_wr::default(); CHAIN].into_boxed_slice(),
            sges: vec![ibv_sge::default(); CHAIN].into_boxed_slice(),
            len: 0,
        };
        // The boxes never move or grow: the links stay valid.
        let (w, s) = (c.wrs.as_mut_ptr(), c.sges.as_mut_ptr());
        for k in 0..CHAIN {
            // SAFETY: k and k + 1 are within the boxes (the last links nothing).
            unsafe {
                (*w.add(k)).sg_list = s.add(k);
                (*w.add(k)).next = if k + 1 < CHAIN { w.add(k + 1) } else { std::ptr::null_mut() };
            }
        }
        c
    }

    /// Adds `wr` to the chain (not full).
    pub fn push(&mut self, wr: &Wr) {
        let k = self.len;
        let (addr, length, lkey) = wr.local;
        self.sges[k] = ibv_sge { addr, length, lkey };
        let w = &mut self.wrs[k];
        w.wr_id = wr.wr_id;
        w.opcode = wr.opcode;
        w.num_sge = (length > 0) as i32;
        w.send_flags = 0;
        w.__bindgen_anon_1.imm_data = wr.imm_be;
        w.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: wr.remote.0, rkey: wr.remote.1 };
        self.len += 1;
    }

    /// The chain to post: its last request signaled and ending it. `clear`
    /// before the next.
    pub fn finish(&mut self) -> *mut ibv_send_wr {
        let last = &mut self.wrs[self.len - 1];
        last.send_flags = IBV_SEND_SIGNALED;
        last.next = std::ptr::null_mut();
        self.wrs.as_mut_ptr()
    }

    /// The position of `wr` (a request of this chain) in it.
    pub fn index_of(&self, wr: *const ibv_send_wr) -> usize {
        ((wr as usize).saturating_sub(self.wrs.as_ptr() as usize) / size_of::<ibv_send_wr>()).min(self.len)
    }

    /// Empties the chain, relinking the request that ended it.
    pub fn clear(&mut self) {
        if self.len > 0 && self.len < CHAIN {
            let next = self.wrs.as_mut_ptr().wrapping_add(self.len);
            self.wrs[self.len - 1].next = next;
        }
        self.len = 0;
    }
}
