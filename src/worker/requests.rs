//! The requests part of the worker: the requests it holds and what they
//! hold. A request's path through the worker, file by file: accept.rs (it
//! takes what it names and waits for its peers), post.rs (its units become
//! work requests), complete.rs (they come back; it is reported), ending.rs
//! (it ends early: canceled, timed out, peer down).
use super::fence::Fences;
use super::held::{Dsts, Regions};
use super::recv::OwnedMem;
use super::slots::Slots;
use super::split::Splits;
use super::stage::{SendSlots, Staging};
use crate::domain::{Domain, LocalMr, Memory};
use crate::error::Result;
use std::collections::VecDeque;
use std::sync::Arc;

pub(super) struct Requests {
    /// The requests in the worker (tables/slots.rs).
    pub(super) slots: Slots,
    /// Per domain: the requests with units still to post there, (slot, epoch).
    pub(super) pending: Vec<VecDeque<(u32, u32)>>,
    /// Rotates the first domain of each sharded request (accept.rs).
    pub(super) rr: usize,
    /// The registered regions requests read from (tables/held.rs).
    pub(super) regions: Regions,
    /// The destination descriptors requests write to (tables/held.rs).
    pub(super) dsts: Dsts,
    /// Copies of messages being sent (stage.rs).
    pub(super) stage: Staging,
    /// Writes split into bytes, then a zero-byte immediate (split.rs).
    pub(super) splits: Splits,
    /// Delivery fences to send and answers owed (fence.rs).
    pub(super) fences: Fences,
    /// 64 registered bytes: the source of zero-byte writes (barriers,
    /// immediates without data), registered in every domain (`scratch_mr`).
    pub(super) scratch: Arc<OwnedMem>,
    pub(super) scratch_mr: Vec<LocalMr>,
    /// Emptied lists of bundles' writes, for the next bundles (bundle.rs:
    /// the worker's own memory, reused without an allocation).
    pub(super) member_lists: Vec<Vec<super::request::Member>>,
}

impl Requests {
    /// Empty tables for `domains`, with the scratch bytes registered in
    /// each and the send slots (`slots`) in domain 0; `tag` marks the
    /// descriptors this engine holds (held.rs); sends name their sender by
    /// `epoch`.
    pub(super) fn new<D: Domain>(domains: &mut [D], tag: u32, slots: Arc<SendSlots>, epoch: u64) -> Result<Requests> {
        let scratch = OwnedMem::new(64);
        let mut scratch_mr = Vec::new();
        for d in domains.iter_mut() {
            scratch_mr.push(d.register(scratch.ptr, scratch.len, Memory::Host)?);
        }
        let stage = Staging::new(&mut domains[0], slots, epoch)?;
        Ok(Requests {
            slots: Slots::default(),
            pending: (0..domains.len()).map(|_| VecDeque::new()).collect(),
            rr: 0,
            regions: Regions::default(),
            dsts: Dsts::new(tag),
            stage,
            splits: Splits::new(domains.len()),
            fences: Fences::default(),
            member_lists: Vec::new(),
            scratch,
            scratch_mr,
        })
    }
}
