//! What travels from the API to the worker, and how a request becomes work
//! requests: a request is a list of `units` (one page, one chunk of a single
//! write, one scatter destination, one barrier destination, one message);
//! unit `k` goes to domain `(k + rr) % N` (all of them to domain `k`, in
//! order, for a request on one NIC: `Route::Nic`). Units are generated on the fly
//! from the request's shape, so posting allocates nothing per page.
use super::Shared;
pub use super::bundle::{BundleShape, MAX_MEMBERS, MEMBER_SLOTS, Member};
pub use super::held::Dst;
use super::held::Dsts;
use crate::completion::notify::OnDone;
use crate::domain::{LocalMr, PeerId, WriteWr};
use crate::wire::{MrDesc, NetAddr, RemoteKey};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

/// A registered local region. Deregistered (on the worker) once the last
/// clone of its handle is gone and no request reads from it (held.rs).
pub struct MrInner {
    /// Its entry in the worker's region table.
    pub index: u32,
    /// The engine's group the region is registered in (its worker's table).
    pub group: u8,
    pub engine_id: u64,
    pub ptr: usize,
    pub len: usize,
    pub desc: Arc<MrDesc>,
    pub(crate) shared: Arc<Shared>,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        self.shared.ctrl.push(Ctrl::Deregister { index: self.index });
        self.shared.wake();
    }
}

pub struct ScatterItem {
    pub len: u64,
    pub src_offset: u64,
    pub dst: Dst,
    pub dst_offset: u64,
}

/// Page k of a paged write: `page_len` bytes from `src + src_idx[k]*src_stride`
/// to `dst_off + dst_idx[k]*dst_stride`.
pub struct PagedShape {
    pub page_len: u64,
    pub src: usize,
    pub src_stride: u64,
    pub src_idx: Box<[u32]>,
    pub dst: Dst,
    pub dst_off: u64,
    pub dst_stride: u64,
    pub dst_idx: Box<[u32]>,
}

/// A request's shape. Every variant but `Paged` is at most 48 bytes, and a
/// `Request` is copied into the submission queue and out of it: the paged
/// one, the largest (88 bytes), is boxed (one allocation per request of many
/// pages), which keeps every `Request` to 128 bytes, two cache lines (176 before).
/// The tag is a byte of its own (`repr(u8)`): a match reads it and
/// compares, where a tag kept in a niche of a field must be decoded.
#[repr(u8)]
pub enum Shape {
    /// `len` bytes from `src` to `dst_off` of `dst`, in chunks of `chunk` bytes.
    Single {
        src: usize,
        dst: Dst,
        dst_off: u64,
        len: u64,
        chunk: u64,
    },
    Paged(Box<PagedShape>),
    /// Item k to its own destination.
    Scatter {
        src: usize,
        items: Box<[ScatterItem]>,
        peer_set: Option<u64>,
    },
    /// A zero-byte write to each destination.
    Barrier {
        dsts: Box<[Dst]>,
        peer_set: Option<u64>,
    },
    /// One message to domain 0 of a peer.
    Send {
        to: NetAddr,
        msg: super::stage::SendMsg,
    },
    /// Nothing to post: ends once the peer is up (greeted afresh if down).
    Connect {
        to: NetAddr,
    },
    /// One-work-request writes of a batch to one peer, each a request of
    /// its own (its id, its report), sharing a slot of the request table,
    /// a deadline and the peer's checks (`TransferEngine::submit_single_writes`;
    /// bundle.rs).
    Bundle(Box<BundleShape>),
}

pub struct Request {
    /// The id `submit_*` returned (for `cancel`).
    pub id: u64,
    /// How long it may take, in nanoseconds; `u64::MAX`: no deadline
    /// (`timeout()`; kept to 8 bytes, as `submitted_ns`: see `Shape`).
    pub timeout_ns: u64,
    pub shape: Shape,
    pub imm: Option<u32>,
    pub done: OnDone,
    /// The source region's index in the worker's table (held.rs), which
    /// keeps it registered until the request ends.
    pub region: Option<u32>,
    /// The one domain it goes through (`Route::Nic`); `None`: sharded.
    pub nic: Option<u8>,
    /// `Ok` only once delivered: every byte and immediate taken in by the
    /// target engine (a delivery fence, fence.rs).
    pub delivered: bool,
    /// When it was submitted (`metrics::since_epoch_ns`), for the one request
    /// in `metrics::SUBMIT_SAMPLE` that the histogram submit → first post
    /// times; 0 for the others.
    pub submitted_ns: u64,
}

/// What the submission queue carries: one request, or a batch of them
/// handed over at once (`TransferEngine::submit_single_writes`: one slot of
/// the queue, one wake, the requests side by side for the worker to read).
pub enum Submission {
    One(Request),
    Batch(Vec<Request>),
}

impl Submission {
    /// Its requests, in submit order.
    pub fn requests(self) -> impl Iterator<Item = Request> {
        match self {
            Submission::One(r) => vec![r].into_iter(),
            Submission::Batch(rs) => rs.into_iter(),
        }
    }
}

impl Request {
    /// `timeout_ns` as `EngineConfig` and `RequestOpts` give it.
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout_ns != u64::MAX).then(|| Duration::from_nanos(self.timeout_ns))
    }

    /// `timeout` as `timeout_ns` keeps it (a deadline beyond 584 years is none).
    pub fn timeout_ns(t: Option<Duration>) -> u64 {
        t.map_or(u64::MAX, |t| t.as_nanos().min(u64::MAX as u128) as u64)
    }

    /// Its kind, as the metrics count it (`metrics::KINDS`).
    pub fn kind(&self) -> usize {
        match &self.shape {
            Shape::Single { .. } => 0,
            Shape::Paged(_) => 1,
            Shape::Scatter { .. } => 2,
            Shape::Barrier { .. } => 3,
            Shape::Send { .. } => 4,
            Shape::Connect { .. } => 5,
            // Its members are single writes, and counted as such.
            Shape::Bundle(_) => 0,
        }
    }

    pub fn units(&self) -> usize {
        match &self.shape {
            // One chunk without a division (per request: tens of cycles).
            Shape::Single { len, chunk, .. } if len <= chunk => 1,
            Shape::Single { len, chunk, .. } => len.div_ceil(*chunk) as usize,
            Shape::Paged(p) => p.src_idx.len(),
            Shape::Scatter { items, .. } => items.len(),
            Shape::Barrier { dsts, .. } => dsts.len(),
            Shape::Send { .. } => 1,
            Shape::Connect { .. } => 0,
            Shape::Bundle(g) => g.members.len(),
        }
    }

    /// How many destinations the request names: one for a single or paged
    /// write, one per unit for a scatter or barrier, none for the rest.
    pub fn dst_count(&self) -> usize {
        match &self.shape {
            Shape::Single { .. } | Shape::Paged(_) => 1,
            Shape::Scatter { items, .. } => items.len(),
            Shape::Barrier { dsts, .. } => dsts.len(),
            Shape::Bundle(g) => g.members.len(),
            Shape::Send { .. } | Shape::Connect { .. } => 0,
        }
    }

    /// Destination `j` (of `dst_count`); a single-destination request's for any `j`.
    pub fn dst(&self, j: usize) -> &Dst {
        match &self.shape {
            Shape::Single { dst, .. } => dst,
            Shape::Paged(p) => &p.dst,
            Shape::Scatter { items, .. } => &items[j].dst,
            Shape::Barrier { dsts, .. } => &dsts[j],
            Shape::Bundle(g) => &g.members[j].dst,
            Shape::Send { .. } | Shape::Connect { .. } => unreachable!("no descriptor"),
        }
    }

    pub fn dst_mut(&mut self, j: usize) -> &mut Dst {
        match &mut self.shape {
            Shape::Single { dst, .. } => dst,
            Shape::Paged(p) => &mut p.dst,
            Shape::Scatter { items, .. } => &mut items[j].dst,
            Shape::Barrier { dsts, .. } => &mut dsts[j],
            Shape::Bundle(g) => &mut g.members[j].dst,
            Shape::Send { .. } | Shape::Connect { .. } => unreachable!("no descriptor"),
        }
    }

    /// Whether each unit has a destination of its own (scatter, barrier,
    /// bundle).
    pub fn multi_dst(&self) -> bool {
        matches!(self.shape, Shape::Scatter { .. } | Shape::Barrier { .. } | Shape::Bundle(_))
    }

    /// How many requests it is, as the application submitted them and
    /// sees them end: a bundle's members, else one.
    pub fn reports(&self) -> usize {
        match &self.shape {
            Shape::Bundle(g) => g.members.len(),
            _ => 1,
        }
    }

    /// Whether request `id` is a member of this bundle (members' ids are
    /// consecutive: a batch's).
    pub fn has_member(&self, id: u64) -> bool {
        match &self.shape {
            Shape::Bundle(g) => id.wrapping_sub(g.members[0].id) < g.members.len() as u64,
            _ => false,
        }
    }

    /// The peer set a multi-destination request was submitted with.
    pub fn peer_set(&self) -> Option<u64> {
        match &self.shape {
            Shape::Scatter { peer_set, .. } | Shape::Barrier { peer_set, .. } => *peer_set,
            _ => None,
        }
    }

    /// A paged write's work requests on domain `d` to `peer`, with what every
    /// page shares (the destination's key, the descriptor) looked up once:
    /// `post_run` takes a run's pages from `PageWrs::wr(k)`, without the
    /// shape's match and the key's lookup per page (`write_wr` for one page
    /// goes through it too). `None` for other shapes.
    pub(super) fn page_wrs(
        &self,
        d: usize,
        peer: PeerId,
        src: Option<&LocalMr>,
        scratch: &LocalMr,
        dsts: &Dsts,
    ) -> Option<PageWrs<'_>> {
        let Shape::Paged(p) = &self.shape else {
            return None;
        };
        let key = dsts.get(&p.dst).keys[d];
        let tpl = write_to(key, p.dst_off, 0, p.page_len, src.unwrap_or(scratch).desc, peer, self.imm);
        Some(PageWrs { p, tpl })
    }

    /// Work request for unit `k` on domain `d`, sent to `peer`. `src` is
    /// the source region's registration in domain `d` (the worker's region
    /// table); `scratch` is the worker's registered buffer, the source of
    /// zero-byte barrier writes (EFA wants a valid descriptor even then);
    /// `dsts` resolves destinations held by index. Inlined into `post_run`
    /// (measured on the 16-core machine: scatter 0.83 against not inlined).
    #[inline(always)]
    pub(super) fn write_wr(
        &self,
        k: usize,
        d: usize,
        peer: PeerId,
        src: Option<&LocalMr>,
        scratch: (*const u8, &LocalMr),
        dsts: &Dsts,
    ) -> WriteWr {
        let desc = src.unwrap_or(scratch.1).desc;
        let wr = |local: u64, len: u64, dst: &Dst, dst_off: u64| {
            write_to(dsts.get(dst).keys[d], dst_off, local, len, desc, peer, self.imm)
        };
        match &self.shape {
            Shape::Single { src, dst, dst_off, len, chunk } => {
                let off = k as u64 * chunk;
                wr(*src as u64 + off, (*chunk).min(len - off), dst, dst_off + off)
            }
            // A page's arithmetic lives in `PageWrs` (post_run's path for pages).
            Shape::Paged(_) => self.page_wrs(d, peer, src, scratch.1, dsts).expect("a paged shape").wr(k),
            Shape::Scatter { src, items, .. } => {
                let it = &items[k];
                wr(*src as u64 + it.src_offset, it.len, &it.dst, it.dst_offset)
            }
            // A barrier has no source region: `desc` is the scratch buffer's.
            Shape::Barrier { dsts, .. } => wr(scratch.0 as u64, 0, &dsts[k], 0),
            Shape::Bundle(_) => unreachable!("a bundle's writes are posted by post_run's loop of their own"),
            Shape::Send { .. } | Shape::Connect { .. } => {
                unreachable!("sends are posted by post_send; connects post nothing")
            }
        }
    }
}

/// A write of `len` bytes at `local` (registered: `desc`) to `peer`, at
/// `dst_off` of the remote region whose key on the domain is `key`.
#[inline(always)]
pub(super) fn write_to(
    key: RemoteKey,
    dst_off: u64,
    local: u64,
    len: u64,
    desc: *mut std::ffi::c_void,
    peer: PeerId,
    imm: Option<u32>,
) -> WriteWr {
    WriteWr {
        local: local as *const u8,
        len: len as usize,
        desc,
        peer,
        remote_addr: key.remote_base + dst_off,
        key: key.key,
        imm,
    }
}

/// `Request::page_wrs`: a paged write's pages on one domain.
pub(super) struct PageWrs<'a> {
    p: &'a PagedShape,
    /// Page 0 of the destination's offset, every field but `local` set.
    tpl: WriteWr,
}

impl PageWrs<'_> {
    /// Page `k`'s work request.
    #[inline]
    pub(super) fn wr(&self, k: usize) -> WriteWr {
        let p = self.p;
        WriteWr {
            local: (p.src as u64 + p.src_idx[k] as u64 * p.src_stride) as *const u8,
            remote_addr: self.tpl.remote_addr + p.dst_idx[k] as u64 * p.dst_stride,
            ..self.tpl
        }
    }
}

pub type RecvCallback = Arc<dyn Fn(super::recv::Received<'_>) + Send + Sync>;

/// Control commands: rare, unbounded queue, processed before data.
pub enum Ctrl {
    /// Registers a region in every domain; replies its index in the region table.
    Register {
        ptr: usize,
        len: usize,
        mem: crate::domain::Memory,
        reply: Sender<crate::error::Result<(u32, Vec<LocalMr>)>>,
    },
    /// The region's handle is gone (released once no request reads from it).
    Deregister {
        index: u32,
    },
    Expect {
        imm: u32,
        count: u32,
        done: OnDone,
        id: u64,
        timeout: Option<Duration>,
        reply: Sender<crate::error::Result<()>>,
    },
    /// Adds a receive pool; replies its id.
    RecvPool {
        len: usize,
        count: usize,
        cb: RecvCallback,
        /// Its callback runs on the worker thread (`add_recv_pool_on_worker`).
        on_worker: bool,
        reply: Sender<crate::error::Result<u64>>,
    },
    /// Removes every entry of a peer engine (`remove_peer`); replies how
    /// many entries it had and how many requests ended.
    RemovePeer {
        engine: u64,
        reply: Sender<crate::error::Result<(usize, usize)>>,
    },
    /// Removes receive pool `id` (recv.rs).
    RemoveRecvPool {
        id: u64,
        reply: Sender<crate::error::Result<()>>,
    },
    Repost {
        pool: u32,
        index: u32,
    },
    AddPeerSet {
        addrs: Vec<NetAddr>,
        reply: Sender<crate::error::Result<u64>>,
    },
    /// Forgets peer set `id` (its requests not started end `BadHandle`).
    RemovePeerSet {
        id: u64,
        reply: Sender<crate::error::Result<()>>,
    },
    /// Ends request (or expectation) `id` with `Canceled`; `NotFound` if it has ended.
    Cancel {
        id: u64,
        reply: Sender<crate::error::Result<()>>,
    },
    /// Ends every request to any group of engine `engine`
    /// (`NetAddr::engine_id`) with `Canceled`; replies how many.
    CancelPeer {
        engine: u64,
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
    /// Mirrors immediate `imm` into a word (`None`: stops); see `ImmCounter::mirror`.
    MirrorImm {
        imm: u32,
        word: Option<crate::completion::imm::MirrorWord>,
        reply: Sender<crate::error::Result<()>>,
    },
    /// Immediates that landed on another group's NICs: (value, how many),
    /// counted here as if they had landed on this group's.
    ImmArrived {
        counts: Vec<(u32, u64)>,
    },
    /// The combined state of this group's pairs with engine `engine`
    /// (`peer_state::combine`), if it knows any.
    PeerState {
        engine: u64,
        reply: Sender<crate::error::Result<Option<crate::config::PeerState>>>,
    },
}

#[cfg(test)]
impl Request {
    /// A request with no source region and nobody to tell (unit tests).
    pub(crate) fn test(shape: Shape) -> Request {
        Request {
            id: 1,
            timeout_ns: u64::MAX,
            shape,
            imm: None,
            done: OnDone::Nothing,
            region: None,
            nic: None,
            delivered: false,
            submitted_ns: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RemoteKey;

    /// A remote region whose domain `d` has base `0x1000 * (d + 1)` and key `d + 7`.
    fn dst(domains: usize) -> Dst {
        let keys = (0..domains as u64).map(|d| RemoteKey { remote_base: 0x1000 * (d + 1), key: d + 7 }).collect();
        let owner = NetAddr { epoch: 1, domains: vec![vec![0u8].into(); domains].into() };
        Dst::Owned(Arc::new(MrDesc {
            base: 0,
            len: 1 << 20,
            memory: Default::default(),
            owner,
            keys,
            held: Default::default(),
        }))
    }

    fn scratch() -> LocalMr {
        LocalMr { raw: std::ptr::null_mut(), desc: 0x5c as *mut _, remote: RemoteKey { remote_base: 0, key: 0 } }
    }

    fn wrs(r: &Request, d: usize) -> Vec<(u64, usize, u64, u64)> {
        let s = scratch();
        (0..r.units())
            .map(|k| {
                let w = r.write_wr(k, d, 3, None, (0x99 as *const u8, &s), &Dsts::new(0));
                assert_eq!((w.peer, w.imm), (3, r.imm));
                (w.local as u64, w.len, w.remote_addr, w.key)
            })
            .collect()
    }

    #[test]
    fn a_single_write_is_cut_into_chunks_with_a_short_tail() {
        let r = Request::test(Shape::Single { src: 0x10_0000, dst: dst(2), dst_off: 64, len: 250, chunk: 100 });
        assert_eq!(r.units(), 3);
        assert_eq!(
            wrs(&r, 1),
            [
                (0x10_0000, 100, 0x2000 + 64, 8),
                (0x10_0000 + 100, 100, 0x2000 + 164, 8),
                (0x10_0000 + 200, 50, 0x2000 + 264, 8),
            ]
        );
        let empty = Request::test(Shape::Single { src: 0, dst: dst(1), dst_off: 0, len: 0, chunk: 100 });
        assert_eq!(empty.units(), 1, "a zero-byte write is one unit (it may carry an immediate)");
        assert_eq!(wrs(&empty, 0), [(0, 0, 0x1000, 7)]);
    }

    /// A request is copied into the submission queue and out of it, then
    /// into its slot: the paged shape is boxed to keep it small (Shape).
    #[test]
    fn a_request_stays_small() {
        assert!(std::mem::size_of::<Shape>() <= 56, "Shape: {} bytes", std::mem::size_of::<Shape>());
        assert!(std::mem::size_of::<Request>() <= 128, "Request: {} bytes", std::mem::size_of::<Request>());
        // A batch rides in the request's spare room: the queue's slots stay as small.
        let sub = std::mem::size_of::<Submission>();
        assert!(sub <= std::mem::size_of::<Request>(), "Submission: {sub} bytes");
    }

    #[test]
    fn pages_follow_their_indices_and_strides() {
        let r = Request {
            imm: Some(9),
            ..Request::test(Shape::Paged(Box::new(PagedShape {
                page_len: 16,
                src: 0x4000,
                src_stride: 32,
                src_idx: vec![2, 0, 5].into(),
                dst: dst(1),
                dst_off: 8,
                dst_stride: 64,
                dst_idx: vec![1, 3, 0].into(),
            })))
        };
        assert_eq!(
            wrs(&r, 0),
            [
                (0x4000 + 64, 16, 0x1000 + 8 + 64, 7),
                (0x4000, 16, 0x1000 + 8 + 192, 7),
                (0x4000 + 160, 16, 0x1000 + 8, 7)
            ]
        );
    }

    #[test]
    fn scatter_and_barrier_units_go_to_their_own_destinations() {
        let items: Box<[ScatterItem]> = vec![
            ScatterItem { len: 10, src_offset: 0, dst: dst(2), dst_offset: 5 },
            ScatterItem { len: 20, src_offset: 10, dst: dst(2), dst_offset: 0 },
        ]
        .into();
        let r = Request::test(Shape::Scatter { src: 0x8000, items, peer_set: None });
        assert_eq!(wrs(&r, 0), [(0x8000, 10, 0x1005, 7), (0x800a, 20, 0x1000, 7)]);
        let b = Request {
            imm: Some(1),
            ..Request::test(Shape::Barrier { dsts: vec![dst(2), dst(2)].into(), peer_set: None })
        };
        // A barrier reads nothing: zero bytes from the scratch buffer, with its descriptor.
        assert_eq!(wrs(&b, 1), [(0x99, 0, 0x2000, 8), (0x99, 0, 0x2000, 8)]);
        let s = scratch();
        assert_eq!(b.write_wr(0, 1, 3, None, (0x99 as *const u8, &s), &Dsts::new(0)).desc, s.desc);
        let src = LocalMr { desc: 0x77 as *mut _, ..s };
        assert_eq!(r.write_wr(0, 1, 3, Some(&src), (0x99 as *const u8, &s), &Dsts::new(0)).desc, src.desc);
    }
}
