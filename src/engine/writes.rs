//! The writes' submits: single, paged, scatter and barrier (batches of
//! single writes: batch.rs). Each checks what it names against the regions
//! and the route (the only bounds check software providers get), builds
//! its shape and hands it to `submit` (mod.rs). The immediate-count rules
//! are in mod.rs's doc.
use super::{MrHandle, Pages, PeerSet, SHARD_MIN, ScatterDst, SingleWrite, TransferEngine, check_range};
use crate::bail;
use crate::completion::notify::{self, RequestId, RequestOpts};
use crate::error::Result;
use crate::wire::MrDesc;
use crate::worker::request::{PagedShape, ScatterItem, Shape};
use std::sync::Arc;

impl TransferEngine {
    /// Writes `len` bytes from `src_offset` of `src` to `dst_offset` of `dst`.
    /// With an immediate, the receiver counts exactly one `imm` once all bytes
    /// have landed; `len` may then be 0 (a notification only).
    #[allow(clippy::too_many_arguments)]
    pub fn submit_single_write(
        &self,
        len: u64,
        imm: Option<u32>,
        src: &MrHandle,
        src_offset: u64,
        dst: &Arc<MrDesc>,
        dst_offset: u64,
        done: impl Into<RequestOpts>,
    ) -> Result<RequestId> {
        let g = self.own(src)?;
        let w = SingleWrite { len, imm, src_offset, dst, dst_offset, done: done.into() };
        let shape = self.single_write(g, src, &w)?;
        self.submit(g, shape, imm, Some(src), w.done)
    }

    /// The checked shape of single write `w` from `src`, of group `g`.
    #[inline(always)]
    pub(super) fn single_write(&self, g: usize, src: &MrHandle, w: &SingleWrite) -> Result<Shape> {
        let SingleWrite { len, imm, src_offset, dst, dst_offset, done: ref opts } = *w;
        self.check_peer(g, &dst.owner)?;
        if len == 0 && imm.is_none() {
            bail!(InvalidArgument, "submit_single_write: zero length without an immediate");
        }
        check_range(|| "single write source", src_offset, len, src.len() as u64)?;
        check_range(|| "single write destination", dst_offset, len, dst.len)?;
        let nics = self.groups[g].nic_count();
        // (The route itself is checked by `check_opts`: one NIC or sharded.)
        let sharded = nics > 1 && matches!(opts.route, notify::Route::Shard);
        let max = self.max_msg_size() as u64;
        let chunk = match imm {
            Some(_) if len > max => bail!(
                InvalidArgument,
                "a write with an immediate is one work request: {len} bytes is over max_msg_size {max}; use paged writes"
            ),
            Some(_) => len.max(1),
            None if len >= SHARD_MIN && sharded => len.div_ceil(nics as u64).next_multiple_of(4096).min(max),
            None => len.min(max),
        };
        Ok(Shape::Single {
            src: src.0.ptr + src_offset as usize,
            dst: self.dst(g, dst),
            dst_off: dst_offset,
            len,
            chunk,
        })
    }

    /// Writes `src_pages.indices.len()` pages of `page_len` bytes; page `i`
    /// goes from source page `src_pages.indices[i]` to destination page
    /// `dst_pages.indices[i]`. Pages are sharded over the domains. With an
    /// immediate, the receiver counts one `imm` per page.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_paged_writes(
        &self,
        page_len: u64,
        imm: Option<u32>,
        src: &MrHandle,
        src_pages: Pages<'_>,
        dst: &Arc<MrDesc>,
        dst_pages: Pages<'_>,
        done: impl Into<RequestOpts>,
    ) -> Result<RequestId> {
        let g = self.own(src)?;
        self.check_peer(g, &dst.owner)?;
        if page_len == 0 {
            bail!(InvalidArgument, "submit_paged_writes: zero page length");
        }
        if page_len > self.max_msg_size() as u64 {
            bail!(InvalidArgument, "submit_paged_writes: page of {page_len} bytes is over max_msg_size");
        }
        if src_pages.indices.is_empty() {
            bail!(InvalidArgument, "submit_paged_writes: no pages");
        }
        if src_pages.indices.len() != dst_pages.indices.len() {
            bail!(
                InvalidArgument,
                "submit_paged_writes: {} source pages but {} destination pages",
                src_pages.indices.len(),
                dst_pages.indices.len()
            );
        }
        for (side, p, region) in [("source", &src_pages, src.len() as u64), ("destination", &dst_pages, dst.len)] {
            let max_idx = p.indices.iter().copied().max().unwrap_or(0) as u64;
            let start = max_idx.checked_mul(p.stride).and_then(|s| s.checked_add(p.offset));
            match start {
                Some(s) => check_range(|| format!("paged write {side} page {max_idx}"), s, page_len, region)?,
                None => bail!(OutOfBounds, "paged write {side}: page {max_idx} * stride overflows"),
            }
        }
        let shape = Shape::Paged(Box::new(PagedShape {
            page_len,
            src: src.0.ptr + src_pages.offset as usize,
            src_stride: src_pages.stride,
            src_idx: src_pages.indices.into(),
            dst: self.dst(g, dst),
            dst_off: dst_pages.offset,
            dst_stride: dst_pages.stride,
            dst_idx: dst_pages.indices.into(),
        }));
        self.submit(g, shape, imm, Some(src), done.into())
    }

    /// Writes a different slice of `src` to each destination (each to its own
    /// peer). With an immediate, each destination's owner counts one `imm`.
    pub fn submit_scatter(
        &self,
        peer_set: Option<PeerSet>,
        imm: Option<u32>,
        src: &MrHandle,
        dsts: &[ScatterDst],
        done: impl Into<RequestOpts>,
    ) -> Result<RequestId> {
        let g = self.own(src)?;
        if dsts.is_empty() {
            bail!(InvalidArgument, "submit_scatter: no destinations");
        }
        let max = self.max_msg_size() as u64;
        for (i, d) in dsts.iter().enumerate() {
            self.check_peer(g, &d.dst.owner)?;
            if d.len == 0 && imm.is_none() {
                bail!(InvalidArgument, "submit_scatter: destination {i} has zero length and no immediate");
            }
            if d.len > max {
                bail!(InvalidArgument, "submit_scatter: destination {i}: {} bytes is over max_msg_size {max}", d.len);
            }
            check_range(|| format!("scatter destination {i} source"), d.src_offset, d.len, src.len() as u64)?;
            check_range(|| format!("scatter destination {i}"), d.dst_offset, d.len, d.dst.len)?;
        }
        let pg = self.check_peer_set(peer_set, dsts.iter().map(|d| &d.dst.owner))?;
        let items = dsts
            .iter()
            .map(|d| ScatterItem {
                len: d.len,
                src_offset: d.src_offset,
                dst: self.dst(g, &d.dst),
                dst_offset: d.dst_offset,
            })
            .collect();
        self.submit(g, Shape::Scatter { src: src.0.ptr, items, peer_set: pg }, imm, Some(src), done.into())
    }

    /// A zero-byte write carrying `imm` to each destination region: each
    /// destination's owner counts one `imm`.
    pub fn submit_barrier(
        &self,
        peer_set: Option<PeerSet>,
        imm: u32,
        dsts: &[Arc<MrDesc>],
        done: impl Into<RequestOpts>,
    ) -> Result<RequestId> {
        if dsts.is_empty() {
            bail!(InvalidArgument, "submit_barrier: no destinations");
        }
        for d in dsts {
            self.check_peer(0, &d.owner)?;
        }
        let pg = self.check_peer_set(peer_set, dsts.iter().map(|d| &d.owner))?;
        self.submit(
            0,
            Shape::Barrier { dsts: dsts.iter().map(|d| self.dst(0, d)).collect(), peer_set: pg },
            Some(imm),
            None,
            done.into(),
        )
    }
}
