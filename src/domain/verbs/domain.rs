//! The verbs `Domain`: one device port, reliable-connected queue pairs per
//! peer, connected through a handshake of its own over UD.
//!
//! Per domain: a protection domain, one completion queue for everything,
//! a UD queue pair for the handshake, and two shared receive queues. Per
//! peer, three RC queue pairs (`Q`):
//! - `W` carries writes (with and without immediates) and the engine's
//!   delivery fences (`SendWr::ordered`). Both consume a receive at the
//!   target in posting order, so its shared receive queue (`srq_w`) holds
//!   the domain's own buffers, all of one size (`ENGINE_MSG`): a write with
//!   an immediate consumes one untouched, an engine message is copied from
//!   it into a buffer the worker posted on `Chan::Engine`. Fences share
//!   this queue pair with the writes on purpose: RC delivers in order on
//!   one queue pair, so a fence answered by the target proves the writes
//!   before it delivered (`orders_sends_after_writes`).
//! - `C` carries the engine's other messages (handshake, keepalives,
//!   goodbye, fence answers) over the same `srq_w`: they must not wait
//!   behind a long transfer on `W` — a keepalive queued behind gigabytes
//!   of writes would take a live peer down.
//! - `U` carries the application's sends; its shared receive queue
//!   (`srq_u`) holds the worker's own receive buffers, so no send ever
//!   lands in an immediate's receive, nor the other way round.
//!
//! The handshake: `resolve` creates the peer's queue pairs and sends CONNECT
//! (our GID, UD QP number and incarnation, the three RC QP numbers and first
//! PSNs) over UD, again every `RETRY` until answered; the peer connects its
//! own queue pairs to ours and answers ACCEPT with theirs (a CONNECT from an
//! engine not yet resolved creates its entry). Work posted meanwhile waits in
//! the peer's backlog and goes out once connected; a peer silent for
//! `CONNECT_TIMEOUT` fails it with `PeerDown`. A queue pair in error (a
//! retry count exceeded: the peer is dead or gone) fails its work requests
//! with `PeerDown`; the next work to that peer builds fresh queue pairs and
//! connects again. A restarted peer has a new incarnation in its address:
//! another peer entry, never the old queue pairs or keys.
//!
//! Posting (domain/post.rs): the work a pass of the worker posts waits in `doorbell` and is
//! rung before the next poll (or by `flush`, at the end of a pass that
//! posted after its poll), each run to one queue pair as one chain (one
//! `ibv_post_send`, up to `CHAIN`), built on templates (domain/chain.rs);
//! only the last request of a chain is signaled, and the op table's lanes
//! (domain/ops.rs) complete the ones before it.
// Buffers passed to the post_* methods are registered memory owned by the worker
// (the Domain contract), so these methods stay safe to call from it.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::device;

mod chain;
mod complete;
mod connect;
mod ops;
mod post;
use super::lib::{Ah, Channel, Context, Cq, Mr, Pd, Qp, Srq, Verbs};
use super::rc::{self, Endpoint, Path};
use super::sys::*;
use crate::domain::{
    Chan, Choice, Completion, DeviceMemory, Domain, DomainSpec, LocalMr, Memory, Nic, PeerId, Post, SendWr, WriteWr,
};
use crate::error::{Error, Result, Status};
use crate::wire::RemoteKey;
use chain::{CHAIN, Chain, Wr};
use ops::{NO_PEER, Ops};
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One engine message at most, and the size of every `srq_w` buffer.
const ENGINE_MSG: usize = 1024;
/// `srq_w` buffers: receives for immediates and engine messages, reposted
/// as consumed (a sender finding none waits: RNR retries, never an error).
/// `FABRICLIB_VERBS_IMM_RECVS` sets another number (8..=65536).
const W_RECVS: usize = 2048;
/// Work requests (writes, sends, user receives) in flight per domain.
const DEPTH: usize = 4096;
/// UD handshake buffers (each with room for the 40-byte GRH) and sends.
const UD_RECVS: usize = 64;
const UD_SENDS: usize = 16;
const UD_BUF: usize = 40 + 128;
const QKEY: u32 = 0x0fab_1ee5;
/// How often an unanswered CONNECT is sent again, and when a peer that
/// never answers fails the work waiting for it.
const RETRY: Duration = Duration::from_millis(50);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const CQ_BATCH: usize = 64;
/// A domain address: GID, UD QP number, incarnation.
const ADDR_LEN: usize = 28;
const MAGIC: &[u8; 4] = b"FLV2";
const CONNECT: u8 = 1;
const ACCEPT: u8 = 2;
/// The kind of a work request id (its top byte); the rest is an index.
const K_OP: u64 = 1 << 56;
const K_URECV: u64 = 2 << 56;
const K_WRECV: u64 = 3 << 56;
const K_UDRECV: u64 = 4 << 56;
const K_UDSEND: u64 = 5 << 56;
/// A cover (domain/ops.rs); the rest is its lane.
const K_COVER: u64 = 6 << 56;
const KIND: u64 = 0xff << 56;

/// Memory the domain allocates and registers itself.
struct Buffers {
    mem: Vec<u8>,
    mr: Mr,
    size: usize,
}

impl Buffers {
    fn new(pd: &Pd, count: usize, size: usize) -> Result<Buffers> {
        let mut mem = vec![0u8; count * size];
        let mr = pd.reg_mr(mem.as_mut_ptr(), mem.len(), rc::REMOTE_WRITE)?;
        Ok(Buffers { mem, mr, size })
    }
    fn ptr(&self, i: usize) -> *mut u8 {
        self.mem.as_ptr().wrapping_add(i * self.size).cast_mut()
    }
    fn sge(&self, i: usize, len: usize) -> ibv_sge {
        ibv_sge { addr: self.ptr(i) as u64, length: len as u32, lkey: self.mr.lkey() }
    }
}

/// A write or a send (to a peer whose queue pairs are not connected yet it
/// waits in its backlog, its op taken).
#[derive(Clone, Copy)]
enum Work {
    Write(WriteWr),
    Send(SendWr),
}

impl Work {
    /// Its peer and bytes.
    fn target(&self) -> (PeerId, usize) {
        match self {
            Work::Write(w) => (w.peer, w.len),
            Work::Send(s) => (s.peer, s.len),
        }
    }

    /// Its peer and the queue pair it goes on.
    fn route(&self) -> (PeerId, Q) {
        match self {
            Work::Write(w) => (w.peer, Q::W),
            Work::Send(s) if s.chan == Chan::User => (s.peer, Q::U),
            Work::Send(s) if s.ordered => (s.peer, Q::W),
            Work::Send(s) => (s.peer, Q::C),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// CONNECT sent (first at `since`), no answer yet.
    Connecting {
        since: Instant,
        last: Instant,
    },
    Up,
    /// A queue pair went to error: the next work builds new ones.
    Broken,
}

/// A peer's RC queue pairs, by what they carry (the module doc).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Q {
    /// Writes and delivery fences.
    W = 0,
    /// The application's sends.
    U = 1,
    /// The engine's other messages.
    C = 2,
}

/// One RC queue pair of a peer: its lane in the op table, its first PSN.
struct Rc {
    qp: Qp,
    lane: u32,
    psn: u32,
}

struct Peer {
    gid: [u8; 16],
    ud_qpn: u32,
    nonce: u64,
    ah: Option<Ah>,
    /// Indexed by `Q`.
    qps: [Rc; 3],
    /// The peer's queue pair numbers ours are connected to, by `Q`.
    remote: Option<[u32; 3]>,
    /// The status that put its queue pairs in error, until rebuilt; and the
    /// one that broke the queue pairs before them (their late flushes).
    broke: Option<u32>,
    old_broke: Option<u32>,
    /// Which queue pairs (bumped by each rebuild) an op was posted on.
    era: u32,
    state: State,
    backlog: VecDeque<(Work, u32)>,
}

pub struct VerbsDomain {
    // Field order is drop order: queue pairs before the queues, CQ and PD.
    peers: Vec<Peer>,
    /// Queue pairs replaced after an error, kept until the domain closes
    /// (their flushed work requests still complete on the CQ).
    retired: Vec<Qp>,
    ud: Qp,
    srq_w: Srq,
    srq_u: Srq,
    w_bufs: Buffers,
    ud_bufs: Buffers,
    cq: Cq,
    /// The completion channel an idle worker sleeps on (`wait_fd`), when it may.
    channel: Option<Channel>,
    /// A parent domain with a thread domain, for the RC queue pairs, where
    /// the device has them (ConnectX; not rxe: plain queue pairs there).
    td_pd: Option<Pd>,
    pd: Pd,
    _ctx: Arc<Context>,
    by_addr: HashMap<Box<[u8]>, PeerId>,
    addr: Vec<u8>,
    nonce: u64,
    path: Path,
    nic: Nic,
    max_msg: usize,
    ops: Ops,
    /// The worker's `Chan::Engine` receive buffers, (token, buffer, length).
    engine_bufs: VecDeque<(u64, *mut u8, usize)>,
    /// Engine messages that came before a buffer to copy them into.
    engine_early: VecDeque<Vec<u8>>,
    /// Work posted and not yet rung (`ring`), and the chain it is rung as
    /// (kept between rings, so that posting allocates nothing).
    doorbell: Vec<(Work, u32)>,
    chain: Chain,
    /// Completions made without the CQ (copies, failed backlogs).
    ready: VecDeque<Completion>,
    ud_free: Vec<u32>,
    connecting: Vec<PeerId>,
    wc: Vec<ibv_wc>,
}

// SAFETY: the domain's objects are used by one thread at a time (the worker's).
unsafe impl Send for VerbsDomain {}

/// 24 random bits: a first packet sequence number.
fn psn() -> u32 {
    (crate::domain::random_u64() & 0xff_ffff) as u32
}

impl VerbsDomain {
    fn device_for(spec: &DomainSpec) -> Result<String> {
        let names = Verbs::get()?.device_names()?;
        if names.is_empty() {
            crate::bail!(Unsupported, "no verbs device on this machine (fabriclib-info lists what there is)");
        }
        match &spec.nic {
            Choice::Named(n) if names.contains(n) => Ok(n.clone()),
            Choice::Named(n) => {
                crate::bail!(InvalidArgument, "no NIC named {n:?}; the provider has: {}", names.join(", "))
            }
            Choice::First => Ok(names[0].clone()),
            Choice::Spread(i) => Ok(names[i % names.len()].clone()),
        }
    }

    fn release(&mut self, i: u32) -> Option<ops::Taken> {
        self.ops.release(i)
    }

    fn post_w_recv(&mut self, i: usize) -> Result<()> {
        let mut sge = self.w_bufs.sge(i, ENGINE_MSG);
        let mut wr = ibv_recv_wr { wr_id: K_WRECV | i as u64, sg_list: &mut sge, num_sge: 1, ..Default::default() };
        // SAFETY: the buffer is the domain's registered memory.
        unsafe { self.srq_w.post(&mut wr) }
            .map_err(|rc| Error::new(Status::Provider, format!("ibv_post_srq_recv: {rc}")))
    }

    fn post_ud_recv(&mut self, i: usize) -> Result<()> {
        let mut sge = self.ud_bufs.sge(i, UD_BUF);
        let mut wr = ibv_recv_wr { wr_id: K_UDRECV | i as u64, sg_list: &mut sge, num_sge: 1, ..Default::default() };
        // SAFETY: as above.
        unsafe { self.ud.post_recv(&mut wr) }
            .map_err(|(rc, _)| Error::new(Status::Provider, format!("ibv_post_recv (UD): {rc}")))
    }

    /// Fresh queue pairs for a peer (by `Q`), with their lanes and first PSNs.
    fn new_qps(&mut self) -> Result<[Rc; 3]> {
        let depth = self.ops.window() + 64;
        // The worker is the only thread on them: a thread domain's lock-free doorbells.
        let pd = self.td_pd.as_ref().unwrap_or(&self.pd);
        let mut rc = |srq: &Srq| -> Result<Rc> {
            let qp = pd.create_qp_on(IBV_QPT_RC, &self.cq, &self.cq, Some(srq), depth, 0)?;
            Ok(Rc { qp, lane: self.ops.new_lane(), psn: psn() })
        };
        Ok([rc(&self.srq_w)?, rc(&self.srq_u)?, rc(&self.srq_w)?])
    }
}

/// A refused post as an error.
fn posting_error(what: &str, rc: i32) -> Error {
    Error::new(Status::Provider, format!("verbs {what}: {}", std::io::Error::from_raw_os_error(rc)))
}

impl Domain for VerbsDomain {
    fn open(spec: &DomainSpec) -> Result<Self> {
        let name = Self::device_for(spec)?;
        let ctx = Context::open(&name)?;
        let dev = device::describe(&ctx)?;
        let port = dev
            .ports
            .iter()
            .find(|p| p.active)
            .ok_or_else(|| Error::new(Status::Unsupported, format!("verbs device {name} has no active port")))?;
        let gid = match std::env::var("FABRICLIB_VERBS_GID_INDEX").ok().and_then(|v| v.parse::<i32>().ok()) {
            Some(i) => port.gids.iter().find(|g| g.index == i).cloned(),
            None => port.preferred_gid().cloned(),
        }
        .ok_or_else(|| {
            Error::new(Status::Unsupported, format!("verbs device {name} port {}: no usable GID", port.num))
        })?;
        let attr = ctx.query_port(port.num)?;
        let path = Path::new(port.num, gid.index as u8, attr.active_mtu);
        let pd = ctx.alloc_pd()?;
        // Where the device has thread domains but refuses one: plain queue pairs.
        let td_pd = ctx.thread_domain(&pd).ok().flatten();
        let w_recvs = std::env::var("FABRICLIB_VERBS_IMM_RECVS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(W_RECVS, |n| n.clamp(8, 1 << 16));
        let cq_depth = (DEPTH + w_recvs + UD_RECVS + UD_SENDS).min(dev.max_cqe as usize) as i32;
        let channel = if spec.wait { Some(ctx.create_channel()?) } else { None };
        let cq = ctx.create_cq_on(cq_depth, channel.as_ref())?;
        let srq_w = pd.create_srq(w_recvs as u32)?;
        let srq_u = pd.create_srq(DEPTH as u32)?;
        let ud = pd.create_qp(IBV_QPT_UD, &cq, &cq, UD_SENDS as u32, UD_RECVS as u32)?;
        rc::ud_ready(&ud, port.num, QKEY)?;
        let w_bufs = Buffers::new(&pd, w_recvs, ENGINE_MSG)?;
        let ud_bufs = Buffers::new(&pd, UD_RECVS + UD_SENDS, UD_BUF)?;
        let nonce = crate::domain::random_u64();
        let mut addr = gid.gid.to_vec();
        addr.extend_from_slice(&ud.qpn().to_le_bytes());
        addr.extend_from_slice(&nonce.to_le_bytes());
        let max_msg = (attr.max_msg_sz as usize).clamp(1, 1 << 30);
        let mut d = VerbsDomain {
            peers: Vec::new(),
            retired: Vec::new(),
            ud,
            srq_w,
            srq_u,
            w_bufs,
            ud_bufs,
            cq,
            channel,
            td_pd,
            pd,
            _ctx: ctx,
            by_addr: HashMap::new(),
            addr,
            nonce,
            path,
            nic: Nic { name: name.clone(), pci: dev.pci.clone(), numa: dev.numa, device_memory: DeviceMemory::DmaBuf },
            max_msg,
            ops: Ops::new(DEPTH, spec.peer_window.clamp(1, 1 << 16) as u32),
            engine_bufs: VecDeque::new(),
            engine_early: VecDeque::new(),
            ready: VecDeque::new(),
            doorbell: Vec::with_capacity(CHAIN),
            chain: Chain::new(),
            ud_free: (0..UD_SENDS as u32).collect(),
            connecting: Vec::new(),
            wc: vec![ibv_wc::default(); CQ_BATCH],
        };
        for i in 0..w_recvs {
            d.post_w_recv(i)?;
        }
        for i in 0..UD_RECVS {
            d.post_ud_recv(i)?;
        }
        Ok(d)
    }

    fn provider(&self) -> &str {
        "verbs"
    }

    fn nic(&self) -> Nic {
        self.nic.clone()
    }

    fn address(&self) -> &[u8] {
        &self.addr
    }

    fn max_msg_size(&self) -> usize {
        self.max_msg
    }

    fn wait_fd(&self) -> Option<i32> {
        self.channel.as_ref().map(|c| c.fd())
    }

    fn try_wait(&mut self) -> bool {
        if self.channel.is_none() || self.ring() {
            return false;
        }
        let Some(ch) = &self.channel else { return false };
        ch.drain();
        // Handshakes still going are retried by polling (the worker's
        // longest block, 10 ms, is well within the retry period).
        if !self.ready.is_empty() || self.cq.arm().is_err() {
            return false;
        }
        // A completion that came between the last poll and the arming
        // raised no event: look once more, and keep what is there.
        let mut wc = std::mem::take(&mut self.wc);
        let n = self.cq.poll(&mut wc).unwrap_or(0);
        let mut out = Vec::new();
        for w in &wc[..n] {
            self.complete(w, &mut out);
        }
        self.wc = wc;
        self.ready.extend(out);
        n == 0 && self.ready.is_empty()
    }

    fn device_memory(&self) -> DeviceMemory {
        // Registration tries dma-buf first, then the device pointer (a
        // peer-memory driver); the device may still refuse both (rxe does).
        self.nic.device_memory
    }

    fn orders_sends_after_writes(&self) -> bool {
        true // engine messages share the writes' queue pair (see the module doc)
    }

    fn register(&mut self, ptr: *mut u8, len: usize, mem: Memory) -> Result<LocalMr> {
        let mr = match mem {
            Memory::Host => self.pd.reg_mr(ptr, len, rc::REMOTE_WRITE)?,
            // Device memory: the NIC reads and writes the GPU's memory
            // directly (GPUDirect RDMA), through the region's dma-buf where
            // the driver exported one and this rdma-core and device import
            // it, else by its device pointer (`ibv_reg_mr`, which a
            // peer-memory driver such as nvidia-peermem resolves). A refused
            // dma-buf never fails what the pointer path takes.
            Memory::Cuda { device, dmabuf } => {
                let by_dmabuf = match dmabuf {
                    Some((fd, offset)) => {
                        self.pd.reg_dmabuf_mr(fd, offset, len, ptr as u64, rc::REMOTE_WRITE).map_err(|e| e.message)
                    }
                    None => Err("the CUDA driver exported no dma-buf of the region".to_string()),
                };
                match by_dmabuf {
                    Ok(mr) => mr,
                    Err(why) => {
                        let mr = self.pd.reg_mr(ptr, len, rc::REMOTE_WRITE).map_err(|e| {
                            let name = &self.nic.name;
                            Error::new(
                                Status::Unsupported,
                                format!(
                                    "verbs device {name}: cannot register memory of CUDA device {device}: as a \
                                     dma-buf: {why}; by its device pointer: {} (needs a peer-memory driver: \
                                     nvidia-peermem)",
                                    e.message
                                ),
                            )
                        })?;
                        crate::log!(
                            Warn,
                            "verbs device {}: a dma-buf was refused ({why}); registered by device pointer",
                            self.nic.name
                        );
                        mr
                    }
                }
            }
        };
        let (lkey, rkey) = (mr.lkey(), mr.rkey());
        Ok(LocalMr {
            raw: Box::into_raw(Box::new(mr)).cast(),
            desc: lkey as usize as *mut c_void,
            remote: RemoteKey { remote_base: ptr as u64, key: rkey as u64 },
        })
    }

    fn deregister(&mut self, mr: &LocalMr) {
        if !mr.raw.is_null() {
            // SAFETY: raw came from Box::into_raw in `register`, released once.
            drop(unsafe { Box::from_raw(mr.raw.cast::<Mr>()) });
        }
    }

    fn resolve(&mut self, addr: &[u8]) -> Result<PeerId> {
        self.peer_at(addr)
    }

    fn post_write(&mut self, wr: &WriteWr, token: u64) -> Result<Post> {
        self.post_work(Work::Write(*wr), token)
    }

    fn post_send(&mut self, wr: &SendWr, token: u64) -> Result<Post> {
        if wr.chan == Chan::Engine && wr.len > ENGINE_MSG {
            let len = wr.len;
            crate::bail!(Provider, "an engine message of {len} bytes: the verbs backend takes {ENGINE_MSG} at most");
        }
        self.post_work(Work::Send(*wr), token)
    }

    fn post_recv(&mut self, chan: Chan, buf: *mut u8, len: usize, desc: *mut c_void, token: u64) -> Result<Post> {
        if chan == Chan::Engine {
            match self.engine_early.pop_front() {
                Some(m) => {
                    let n = m.len().min(len);
                    // SAFETY: the worker's buffer has len bytes and is ours until its completion.
                    unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), buf, n) };
                    self.ready.push_back(Completion::Recv { token, len: n, data: None });
                }
                None => self.engine_bufs.push_back((token, buf, len)),
            }
            return Ok(Post::Posted);
        }
        let op = match self.ops.take(token, NO_PEER, 0) {
            Ok(op) => op,
            Err(p) => return Ok(p),
        };
        let mut sge = ibv_sge { addr: buf as u64, length: len as u32, lkey: desc as usize as u32 };
        let mut wr = ibv_recv_wr { wr_id: K_URECV | op as u64, sg_list: &mut sge, num_sge: 1, ..Default::default() };
        // SAFETY: the buffer is registered memory the worker keeps until the completion.
        match unsafe { self.srq_u.post(&mut wr) } {
            Ok(()) => Ok(Post::Posted),
            Err(rc) => {
                self.release(op);
                Err(posting_error("receive", rc))
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let before = out.len();
        self.ring();
        self.drive_handshakes();
        out.extend(self.ready.drain(..));
        let mut wc = std::mem::take(&mut self.wc);
        let n = self.cq.poll(&mut wc)?;
        for w in &wc[..n] {
            self.complete(w, out);
        }
        self.wc = wc;
        // Work queued while polling (a connection's backlog) goes out now.
        self.ring();
        out.extend(self.ready.drain(..));
        Ok((out.len() - before).max(n))
    }

    fn flush(&mut self) {
        self.ring();
    }

    fn in_flight(&self) -> usize {
        self.ops.busy()
    }

    fn abandon(&mut self, peer: PeerId, out: &mut Vec<u64>) {
        // Work still waiting for the connection or the doorbell was never posted: freed now.
        let (mine, rest): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.doorbell).into_iter().partition(|(w, _)| w.target().0 == peer);
        self.doorbell = rest;
        for (_, op) in mine {
            if let Some((token, ..)) = self.release(op) {
                out.push(token);
            }
        }
        if let Some(p) = self.peers.get_mut(peer as usize) {
            for (_, op) in std::mem::take(&mut p.backlog) {
                if let Some((token, ..)) = self.release(op) {
                    out.push(token);
                }
            }
        }
        // Work on the wire: its late completion is swallowed.
        self.ops.abandon(peer, out);
    }
}
