//! Delivery fences: what makes a request's `Ok` mean "delivered" when it was
//! submitted with `RequestOpts::delivered` (C: `FABRICLIB_SUBMIT_DELIVERED`).
//!
//! A work request's completion only says its source is free again: the
//! bytes may still sit in a socket buffer or a shared-memory queue, and the
//! target may not have counted the immediates yet (measured on tcp: up to a
//! few hundred immediates of a transfer arrived after its writer's `Ok`).
//! So once every work request of such a request has completed, the worker
//! sends a FENCE engine message, tagged with the request, to every engine
//! the request wrote to, on every domain of the group — on domain d to the
//! peer's domain d, the connection its writes took — and reports `Ok` only
//! when every FENCE has been answered.
//!
//! Why an answer means delivered: the target answers a FENCE when it takes
//! it from its completion queue, and the providers we fence on deliver a
//! message after the writes posted before it on the same connection
//! (`Domain::orders_sends_after_writes`: tcp;ofi_rxm's stream, shm's
//! command queue; a provider without that order refuses the option), so by
//! then the target has taken in every write and immediate of the request.
//! A target group other than the home one hands its immediates to the home
//! group's control queue once per pass: it answers FENCEs only after that
//! (`send_acks`), so the counts are queued ahead of any control call — an
//! `imm_count` reset, a new expectation — that the target's application makes
//! after hearing of the `Ok`.
//!
//! A request that fails (peer down, deadline, cancel) while its fences are
//! out ends with that error, without waiting for them.
use super::Worker;
use super::peers::{FENCE, FENCE_ACK, NO_ENTRY};
use super::request::Shape;
use super::token::Token;
use crate::domain::{Domain, PeerId};
use crate::wire::NetAddr;

/// Where a request stands with its delivery fence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fence {
    /// Not asked for: the request ends when its work requests have.
    No,
    /// Asked for, not started: its work requests are still out.
    Wanted,
    /// Sent (or queued to send): this many answers awaited.
    Waiting(u32),
    /// Every answer came.
    Done,
}

impl Fence {
    /// Whether the request may be reported (as far as its fence goes).
    pub(super) fn settled(self) -> bool {
        matches!(self, Fence::No | Fence::Done)
    }
}

/// The fences of this worker: those to send, and the answers it owes.
#[derive(Default)]
pub(super) struct Fences {
    /// (domain, peer entry, tag): FENCEs not yet posted.
    out: std::collections::VecDeque<(usize, u32, u64)>,
    /// (domain, the sender's id there, tag): answers owed, sent once the
    /// pass's immediates have gone to the home group (`send_acks`).
    owed: Vec<(usize, PeerId, u64)>,
}

impl<D: Domain> Worker<D> {
    /// Request `slot` has every work request back and wants a fence: sends
    /// one to each engine it wrote to, on each domain (a send went through
    /// domain 0 only).
    pub(super) fn start_fence(&mut self, slot: u32) {
        let handshakes = self.domains[0].handshakes();
        let n_domains = self.domains.len();
        let Some(a) = self.requests.slots.get(slot) else { return };
        let mut peers: Vec<u32> = match &a.unit_peers {
            Some(u) => u.to_vec(),
            None if a.req.units() > 0 => vec![a.peer],
            None => Vec::new(),
        };
        peers.sort_unstable();
        peers.dedup();
        let domains = if matches!(a.req.shape, Shape::Send { .. }) { 1 } else { n_domains };
        let tag = Token::Request { slot, epoch: a.epoch }.encode();
        // `null` moves nothing and nobody answers: there is nothing to fence.
        if !handshakes || peers.is_empty() {
            a.fence = super::fence::Fence::Done;
            return;
        }
        a.fence = Fence::Waiting((peers.len() * domains) as u32);
        for p in peers {
            for d in 0..domains {
                self.requests.fences.out.push_back((d, p, tag));
            }
        }
        self.post_fences();
    }

    /// Posts the FENCEs waiting to go (in order; stops at the first that
    /// cannot go now). True if any went. (Inline, as `send_fence_acks`:
    /// every pass calls both.)
    #[inline(always)]
    pub(super) fn post_fences(&mut self) -> bool {
        let mut busy = false;
        while let Some(&(d, p, tag)) = self.requests.fences.out.front() {
            let id = self.peers.id(p, d);
            if !self.post_engine_on(d, id, p, FENCE, Some(tag)) {
                break;
            }
            self.requests.fences.out.pop_front();
            busy = true;
        }
        busy
    }

    /// A FENCE came on domain `d` from `from`: its answer is owed.
    pub(super) fn owe_fence_ack(&mut self, d: usize, from: &NetAddr, tag: u64) {
        if let Some(id) = from.domains.get(d).and_then(|a| self.domains[d].resolve(a).ok()) {
            self.requests.fences.owed.push((d, id, tag));
        }
    }

    /// Sends the FENCE answers owed (after the pass's immediates went home).
    #[inline]
    pub(super) fn send_fence_acks(&mut self) {
        if self.requests.fences.owed.is_empty() {
            return;
        }
        let mut owed = std::mem::take(&mut self.requests.fences.owed);
        owed.retain(|&(d, id, tag)| !self.post_engine_on(d, id, NO_ENTRY, FENCE_ACK, Some(tag)));
        self.requests.fences.owed = owed;
    }

    /// A FENCE of the request tagged `tag` was answered.
    pub(super) fn fence_acked(&mut self, tag: u64) {
        let Token::Request { slot, epoch } = Token::decode(tag) else { return };
        let Some(a) = self.requests.slots.current(slot, epoch) else { return };
        if let Fence::Waiting(n) = a.fence {
            a.fence = if n <= 1 { Fence::Done } else { Fence::Waiting(n - 1) };
            self.maybe_finish(slot);
        }
    }
}
