//! The op-context pool of a libfabric endpoint: every posted operation
//! carries a context the provider hands back with its completion; ours maps
//! it back to the worker's token and peer, bounds the operations in flight
//! (per endpoint and per peer), and lets a dead peer's operations be
//! abandoned so that their late completions are swallowed.
use super::sys::fi_context2;
use crate::domain::{PeerId, Post};
use std::ffi::c_void;

/// An op context as libfabric sees it: the provider may use `fi` while the
/// op is in flight (FI_CONTEXT modes); the rest is ours.
#[repr(C)]
struct CtxSlot {
    fi: fi_context2,
    token: u64,
    /// The op's peer (`NO_PEER` for receives), for `abandon`.
    peer: PeerId,
    /// Bytes it carries (the worker's counters).
    bytes: u64,
    state: SlotState,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotState {
    Free,
    Busy,
    /// Abandoned (its peer is down): a late completion frees it silently.
    Abandoned,
}

pub(super) const NO_PEER: PeerId = u64::MAX;

/// A slot's chunk and its index in that chunk.
#[derive(Clone, Copy)]
struct Spot(u32, u32);

/// Op contexts with stable addresses, in chunks of `depth` slots: one at
/// first, so that finding a completion's slot is a subtraction. A slot is
/// named by its chunk and its place in it (`Spot`: no division by `depth`
/// per operation, which the provider's queue depth makes a runtime one). `depth` ops
/// may be in flight (a full pool reads as `Post::Again`); abandoned slots do
/// not count, and the pool grows a chunk when only they block it.
pub(super) struct CtxPool {
    chunks: Vec<Box<[CtxSlot]>>,
    free: Vec<Spot>,
    busy: usize,
    depth: usize,
    /// Ops in flight per peer (indexed by `fi_addr_t`, dense with FI_AV_TABLE)
    /// and the most one peer may have: a dead or stalled peer must not hold
    /// all of the endpoint's (and the provider's) transmit resources.
    per_peer: Vec<u32>,
    peer_window: u32,
}

impl CtxPool {
    pub(super) fn new(depth: usize, peer_window: usize) -> CtxPool {
        let peer_window = peer_window.clamp(1, u32::MAX as usize) as u32;
        let mut p = CtxPool { chunks: Vec::new(), free: Vec::new(), busy: 0, depth, per_peer: Vec::new(), peer_window };
        p.grow();
        p
    }
    fn grow(&mut self) {
        let c = self.chunks.len() as u32;
        let chunk = (0..self.depth).map(|_| CtxSlot {
            fi: fi_context2::default(),
            token: 0,
            peer: NO_PEER,
            bytes: 0,
            state: SlotState::Free,
        });
        self.chunks.push(chunk.collect());
        self.free.extend((0..self.depth as u32).rev().map(|i| Spot(c, i)));
    }
    fn slot(&mut self, Spot(c, i): Spot) -> &mut CtxSlot {
        &mut self.chunks[c as usize][i as usize]
    }
    /// A context for an op of `bytes` to `peer`, or why not: `Again` (the
    /// pool is full) or `Busy` (this peer has its window full).
    pub(super) fn take(&mut self, token: u64, peer: PeerId, bytes: u64) -> std::result::Result<*mut c_void, Post> {
        if self.busy >= self.depth {
            return Err(Post::Again);
        }
        if peer != NO_PEER {
            let p = peer as usize;
            if p >= self.per_peer.len() {
                self.per_peer.resize(p + 1, 0);
            }
            if self.per_peer[p] >= self.peer_window {
                return Err(Post::Busy);
            }
            self.per_peer[p] += 1;
        }
        if self.free.is_empty() {
            self.grow();
        }
        let at = self.free.pop().expect("grown");
        self.busy += 1;
        let s = self.slot(at);
        (s.token, s.peer, s.bytes, s.state) = (token, peer, bytes, SlotState::Busy);
        Ok(s as *mut CtxSlot as *mut c_void)
    }
    fn unpeer(&mut self, peer: PeerId) {
        if peer != NO_PEER {
            self.per_peer[peer as usize] -= 1;
        }
    }
    fn index(&self, ctx: *mut c_void) -> Option<Spot> {
        self.chunks.iter().enumerate().find_map(|(c, chunk)| {
            let off = (ctx as usize).checked_sub(chunk.as_ptr() as usize)?;
            let i = off / size_of::<CtxSlot>();
            (off % size_of::<CtxSlot>() == 0 && i < self.depth).then_some(Spot(c as u32, i as u32))
        })
    }
    /// Frees the slot of a completed op; its token, peer and bytes unless it
    /// was abandoned.
    pub(super) fn release(&mut self, ctx: *mut c_void) -> Option<(u64, PeerId, u64)> {
        let at = self.index(ctx)?;
        let s = self.slot(at);
        let (state, token, peer, bytes) = (s.state, s.token, s.peer, s.bytes);
        if state == SlotState::Free {
            return None;
        }
        s.state = SlotState::Free;
        self.free.push(at);
        if state == SlotState::Busy {
            self.busy -= 1;
            self.unpeer(peer);
            Some((token, peer, bytes))
        } else {
            None
        }
    }
    pub(super) fn abandon(&mut self, peer: PeerId, out: &mut Vec<u64>) {
        for chunk in self.chunks.iter_mut() {
            for s in chunk.iter_mut().filter(|s| s.state == SlotState::Busy && s.peer == peer) {
                s.state = SlotState::Abandoned;
                self.busy -= 1;
                out.push(s.token);
            }
        }
        if let Some(n) = self.per_peer.get_mut(peer as usize) {
            *n = 0;
        }
    }
    /// The contexts of the receives in flight whose token `which` picks.
    pub(super) fn receives(&mut self, which: &mut dyn FnMut(u64) -> bool) -> Vec<*mut c_void> {
        let mut out = Vec::new();
        for chunk in self.chunks.iter_mut() {
            for s in chunk.iter_mut().filter(|s| s.state == SlotState::Busy && s.peer == NO_PEER) {
                if which(s.token) {
                    out.push(s as *mut CtxSlot as *mut c_void);
                }
            }
        }
        out
    }
    pub(super) fn in_use(&self) -> usize {
        self.busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_maps_back_to_its_token_and_peer_once() {
        let mut p = CtxPool::new(4, 4);
        let a = p.take(11, 0, 0).unwrap();
        let b = p.take(22, 1, 0).unwrap();
        assert_ne!(a, b);
        assert_eq!(p.in_use(), 2);
        assert_eq!(p.release(b), Some((22, 1, 0)));
        assert_eq!(p.release(a), Some((11, 0, 0)));
        assert_eq!(p.release(a), None, "a context is released once");
        assert_eq!(p.in_use(), 0);
        assert_eq!(p.release(std::ptr::null_mut()), None, "not one of ours");
        let inside = (a as usize + 1) as *mut c_void;
        assert_eq!(p.release(inside), None, "not a slot's address");
    }

    #[test]
    fn depth_bounds_the_pool_and_the_window_bounds_a_peer() {
        let mut p = CtxPool::new(3, 2);
        p.take(1, 5, 0).unwrap();
        let c = p.take(2, 5, 0).unwrap();
        assert_eq!(p.take(3, 5, 0), Err(Post::Busy), "peer 5 has its window full");
        let r = p.take(4, NO_PEER, 0).unwrap();
        assert_eq!(p.take(5, 6, 0), Err(Post::Again), "the pool is full");
        p.release(c);
        assert!(p.take(6, 5, 0).is_ok(), "a completion reopens the peer's window");
        p.release(r);
        assert!(p.take(7, NO_PEER, 0).is_ok(), "receives count against depth only");
    }

    #[test]
    fn abandoned_contexts_free_their_room_and_are_swallowed_later() {
        let mut p = CtxPool::new(2, 2);
        let a = p.take(1, 3, 0).unwrap();
        let b = p.take(2, 3, 0).unwrap();
        assert_eq!(p.take(9, 4, 0), Err(Post::Again));
        let mut out = Vec::new();
        p.abandon(3, &mut out);
        out.sort();
        assert_eq!(out, [1, 2]);
        assert_eq!(p.in_use(), 0);
        // Both slots are still the provider's: the pool grows a chunk rather than reuse them.
        let c = p.take(3, 4, 0).unwrap();
        let d = p.take(4, 3, 0).unwrap();
        assert!(![a, b].contains(&c) && ![a, b].contains(&d));
        assert_eq!(p.release(a), None, "a late completion of an abandoned op is swallowed");
        assert_eq!(p.release(b), None);
        assert_eq!(p.release(d), Some((4, 3, 0)));
        assert_eq!(p.release(c), Some((3, 4, 0)));
        // Both chunks' slots are reused, and map back across chunks.
        let e = p.take(5, NO_PEER, 0).unwrap();
        let f = p.take(6, NO_PEER, 0).unwrap();
        assert_ne!(e, f);
        assert_eq!((p.release(f), p.release(e)), (Some((6, NO_PEER, 0)), Some((5, NO_PEER, 0))));
    }
}
