//! What travels from the API to the worker, and how a request becomes work
//! requests: a request is a list of `units` (one page, one chunk of a single
//! write, one scatter destination, one barrier destination, one message);
//! unit `k` goes to domain `(k + rr) % N`. Units are generated on the fly
//! from the request's shape, so posting allocates nothing per page.
use super::Shared;
use crate::domain::{LocalMr, PeerId, WriteWr};
use crate::engine::notify::OnDone;
use crate::wire::{MrDesc, NetAddr};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

/// A registered local region. Deregistered (on the worker) when the last
/// reference goes: the user's handle and every request that uses it.
pub struct MrInner {
    pub id: u64,
    pub engine_id: u64,
    pub ptr: usize,
    pub len: usize,
    /// One provider registration per domain, in domain order.
    pub locals: Vec<LocalMr>,
    pub desc: Arc<MrDesc>,
    pub(crate) shared: Arc<Shared>,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.shared.ctrl.push(Ctrl::Deregister { id: self.id });
        self.shared.wake();
    }
}

pub struct ScatterItem {
    pub len: u64,
    pub src_offset: u64,
    pub dst: Arc<MrDesc>,
    pub dst_offset: u64,
}

pub enum Shape {
    /// `len` bytes from `src` to `dst_off` of `dst`, in chunks of `chunk` bytes.
    Single { src: usize, dst: Arc<MrDesc>, dst_off: u64, len: u64, chunk: u64 },
    /// Page k: `page_len` bytes from `src + src_idx[k]*src_stride` to `dst_off + dst_idx[k]*dst_stride`.
    Paged {
        page_len: u64,
        src: usize,
        src_stride: u64,
        src_idx: Box<[u32]>,
        dst: Arc<MrDesc>,
        dst_off: u64,
        dst_stride: u64,
        dst_idx: Box<[u32]>,
    },
    /// Item k to its own destination.
    Scatter { src: usize, items: Box<[ScatterItem]>, group: Option<u64> },
    /// A zero-byte write to each destination.
    Barrier { dsts: Box<[Arc<MrDesc>]>, group: Option<u64> },
    /// One message to domain 0 of a peer.
    Send { to: NetAddr, msg: Box<[u8]> },
    /// Nothing to post: ends once the peer is up (greeted afresh if down).
    Connect { to: NetAddr },
}

pub struct Request {
    /// The id `submit_*` returned (for `cancel`).
    pub id: u64,
    /// How long it may take; `None`: no deadline.
    pub timeout: Option<Duration>,
    pub shape: Shape,
    pub imm: Option<u32>,
    pub done: OnDone,
    /// The source region, kept registered until the request ends.
    pub src_mr: Option<Arc<MrInner>>,
}

impl Request {
    pub fn units(&self) -> usize {
        match &self.shape {
            Shape::Single { len, chunk, .. } => (len.div_ceil(*chunk) as usize).max(1),
            Shape::Paged { src_idx, .. } => src_idx.len(),
            Shape::Scatter { items, .. } => items.len(),
            Shape::Barrier { dsts, .. } => dsts.len(),
            Shape::Send { .. } => 1,
            Shape::Connect { .. } => 0,
        }
    }

    /// The destination of a single-destination request (resolved once per request).
    pub fn single_dst(&self) -> Option<&Arc<MrDesc>> {
        match &self.shape {
            Shape::Single { dst, .. } | Shape::Paged { dst, .. } => Some(dst),
            _ => None,
        }
    }

    /// The destination of unit `k` of a multi-destination request.
    pub fn unit_dst(&self, k: usize) -> &Arc<MrDesc> {
        match &self.shape {
            Shape::Scatter { items, .. } => &items[k].dst,
            Shape::Barrier { dsts, .. } => &dsts[k],
            Shape::Single { dst, .. } | Shape::Paged { dst, .. } => dst,
            Shape::Send { .. } | Shape::Connect { .. } => unreachable!("no descriptor"),
        }
    }

    /// The peer group a multi-destination request was submitted with.
    pub fn group(&self) -> Option<u64> {
        match &self.shape {
            Shape::Scatter { group, .. } | Shape::Barrier { group, .. } => *group,
            _ => None,
        }
    }

    /// Work request for unit `k` on domain `d`, sent to `peer`. `scratch` is
    /// the worker's registered buffer, the source of zero-byte barrier writes
    /// (EFA wants a valid descriptor even then).
    pub fn write_wr(&self, k: usize, d: usize, peer: PeerId, scratch: (*const u8, &LocalMr)) -> WriteWr {
        let desc = self.src_mr.as_ref().map(|m| m.locals[d].desc).unwrap_or(scratch.1.desc);
        let wr = |local: u64, len: u64, dst: &MrDesc, dst_off: u64| WriteWr {
            local: local as *const u8,
            len: len as usize,
            desc,
            peer,
            remote_addr: dst.keys[d].remote_base + dst_off,
            key: dst.keys[d].key,
            imm: self.imm,
        };
        match &self.shape {
            Shape::Single { src, dst, dst_off, len, chunk } => {
                let off = k as u64 * chunk;
                wr(*src as u64 + off, (*chunk).min(len - off), dst, dst_off + off)
            }
            Shape::Paged { page_len, src, src_stride, src_idx, dst, dst_off, dst_stride, dst_idx } => wr(
                *src as u64 + src_idx[k] as u64 * src_stride,
                *page_len,
                dst,
                dst_off + dst_idx[k] as u64 * dst_stride,
            ),
            Shape::Scatter { src, items, .. } => {
                let it = &items[k];
                wr(*src as u64 + it.src_offset, it.len, &it.dst, it.dst_offset)
            }
            // A barrier has no source region: `desc` is the scratch buffer's.
            Shape::Barrier { dsts, .. } => wr(scratch.0 as u64, 0, &dsts[k], 0),
            Shape::Send { .. } | Shape::Connect { .. } => {
                unreachable!("sends are posted by post_send; connects post nothing")
            }
        }
    }
}

pub type RecvCallback = Arc<dyn Fn(crate::error::Result<&[u8]>) + Send + Sync>;

/// Control commands: rare, unbounded queue, processed before data.
pub enum Ctrl {
    Register {
        id: u64,
        ptr: usize,
        len: usize,
        reply: Sender<crate::error::Result<Vec<LocalMr>>>,
    },
    Deregister {
        id: u64,
    },
    Expect {
        imm: u32,
        count: u32,
        done: OnDone,
        id: u64,
        timeout: Option<Duration>,
        reply: Sender<crate::error::Result<()>>,
    },
    RecvPool {
        len: usize,
        count: usize,
        cb: RecvCallback,
        reply: Sender<crate::error::Result<()>>,
    },
    Repost {
        pool: u32,
        index: u32,
    },
    AddGroup {
        addrs: Vec<NetAddr>,
        reply: Sender<crate::error::Result<u64>>,
    },
    /// Ends request (or expectation) `id` with `Canceled`; `NotFound` if it has ended.
    Cancel {
        id: u64,
        reply: Sender<crate::error::Result<()>>,
    },
    /// Ends every request to `addr` with `Canceled`; replies how many.
    CancelPeer {
        addr: NetAddr,
        reply: Sender<crate::error::Result<usize>>,
    },
    /// Starts (or, for a peer that is down, restarts) the handshake with `addr`.
    AddPeer {
        addr: NetAddr,
        reply: Sender<crate::error::Result<()>>,
    },
    /// The count of immediate `imm` not yet taken by an expectation (then
    /// set to 0 with `reset`).
    ImmCount {
        imm: u32,
        reset: bool,
        reply: Sender<crate::error::Result<u64>>,
    },
    /// The state of `addr`, if the engine knows it.
    PeerState {
        addr: NetAddr,
        reply: Sender<crate::error::Result<Option<crate::config::PeerState>>>,
    },
}
