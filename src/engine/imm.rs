//! Immediates: expectations on the 32-bit values writes carry, their
//! counts, and mirrors of a count into a word a kernel polls. All of them
//! live with the home group (group 0), where every group's arrivals are counted.
use super::TransferEngine;
use crate::bail;
use crate::completion::notify::{RequestId, RequestOpts};
use crate::error::Result;
use crate::worker::request::Ctrl;
use std::sync::atomic::Ordering;

impl TransferEngine {
    /// Fires `done` once `count` writes carrying immediate `imm` have landed
    /// here (immediates that arrived earlier count too). One expectation per
    /// immediate value at a time. An expectation that fails (deadline,
    /// cancel, shutdown) discards the immediates it had counted, so they can
    /// never complete a later expectation; immediates arriving after it
    /// ended count afresh (see `imm_count`).
    pub fn expect_imm_count(&self, imm: u32, count: u32, done: impl Into<RequestOpts>) -> Result<RequestId> {
        if count == 0 {
            bail!(InvalidArgument, "expect_imm_count: count must be at least 1");
        }
        let opts = done.into();
        // Immediates count whichever NIC they come through; a route is
        // checked like every other call's, and otherwise has no effect.
        self.nic_of(0, opts.route, false)?;
        let (id, timeout) = (self.next_request.fetch_add(1, Ordering::Relaxed), self.timeout(opts.deadline));
        self.rpc(|reply| Ctrl::Expect { imm, count, done: opts.done, id, timeout, reply })?;
        Ok(RequestId(id))
    }

    /// How many immediates `imm` have landed and are not yet taken by an
    /// expectation; with `reset`, that count is set to 0 (an armed
    /// expectation stays armed and counts from 0). Returns the count before
    /// the reset. A reset does not stop immediates of an earlier transfer
    /// still on their way from counting after it, even once its writer has
    /// reported `Ok`: after a failed transfer, use a new value.
    pub fn imm_count(&self, imm: u32, reset: bool) -> Result<u64> {
        self.rpc(|reply| Ctrl::ImmCount { imm, reset, reply })
    }

    /// Mirrors immediate `imm`'s arrivals into `word` (NULL: stops), for a
    /// kernel or thread that polls it: set at once to `imm_count(imm)`, then
    /// one more, stored with release ordering, on each arrival of `imm`
    /// (expectations and resets do not lower it). Put the word in mapped
    /// memory (`gpu::Mapped`) and a kernel can wait for "layer k landed".
    ///
    /// # Safety
    /// `word` stays valid and 8-byte aligned until this is called again for
    /// `imm` with another word or NULL and has returned, or the engine is destroyed.
    pub unsafe fn mirror_imm_count(&self, imm: u32, word: *const std::sync::atomic::AtomicU64) -> Result<()> {
        if !word.is_null() && (word as usize) % 8 != 0 {
            bail!(InvalidArgument, "mirror_imm_count: the word must be 8-byte aligned");
        }
        let word = (!word.is_null()).then_some(crate::completion::imm::MirrorWord(word));
        self.rpc(|reply| Ctrl::MirrorImm { imm, word, reply })
    }
}
