//! The raw baseline on verbs: bare libibverbs through fabriclib's bindings
//! (domain/verbs/lib.rs), no engine. The same queue pair layout a
//! hand-written program doing this job needs, and the engine uses: per peer
//! one RC queue pair for writes (its receives, zero-byte, from a shared
//! receive queue, for the immediates) and one for messages (its own
//! receive buffers). One thread posts straight from its loop, keeping a
//! window in flight, and polls the one completion queue itself; like the
//! engine's worker it yields the core every 16 empty polls.
//!
//! Connecting needs no handshake of its own: the bench's control channel
//! carries the addresses. `addr` is the queue pairs the next `insert`
//! connects (until one has: then the last connected), so the server
//! advertises its pair before the client connects, and the client reports
//! the pair it connected.
use fabriclib::domain::LocalMr;
use fabriclib::domain::verbs::device;
use fabriclib::domain::verbs::lib::{Context, Cq, Mr, Pd, Qp, Srq};
use fabriclib::domain::verbs::rc::{self, Endpoint, Path};
use fabriclib::domain::verbs::sys::*;
use fabriclib::wire::RemoteKey;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use crate::raw::{R, RawWrite};

/// Zero-byte receives for immediates, and message buffers per peer.
const IMM_RECVS: usize = 4096;
const MSG_RECVS: usize = 16;
const MSG_BUF: usize = 64 << 10;
const DEPTH: u32 = 4096;
const ADDR_LEN: usize = 32;
/// Work request id kinds (top byte).
const K_SEND: u64 = 1 << 56;
const K_IMM: u64 = 2 << 56;
const K_MSG: u64 = 3 << 56;
const KIND: u64 = 0xff << 56;

fn e(x: fabriclib::Error) -> String {
    format!("raw verbs: {}", x.message)
}

/// A peer's two queue pairs (writes, messages) and our first PSNs on them.
struct Pair {
    w: Qp,
    m: Qp,
    psn: (u32, u32),
}

pub struct VerbsRaw {
    // Drop order: queue pairs, then the queues, buffers, CQ, PD.
    peers: Vec<Pair>,
    next: Pair,
    srq: Srq,
    msg_mr: Mr,
    msg_mem: Vec<u8>,
    cq: Cq,
    pd: Pd,
    _ctx: Arc<Context>,
    path: Path,
    gid: [u8; 16],
    /// The address `addr` reports (see the module doc).
    addr: Vec<u8>,
    /// Registrations by their `LocalMr::raw` key.
    mrs: HashMap<usize, Mr>,
    wc: Vec<ibv_wc>,
    empty_polls: u32,
    pub outstanding: usize,
    pub arrived: HashMap<u32, u64>,
    /// Messages received (peer, buffer slot, length), not yet consumed.
    received: Vec<(usize, usize, usize)>,
}

impl VerbsRaw {
    pub fn open() -> R<VerbsRaw> {
        let names = fabriclib::domain::verbs::lib::Verbs::get().map_err(e)?.device_names().map_err(e)?;
        let name = names.first().ok_or("raw verbs: no verbs device")?;
        let ctx = Context::open(name).map_err(e)?;
        let dev = device::describe(&ctx).map_err(e)?;
        let port = dev.ports.iter().find(|p| p.active).ok_or("raw verbs: no active port")?;
        let gid = port.preferred_gid().ok_or("raw verbs: no GID")?.clone();
        let mtu = ctx.query_port(port.num).map_err(e)?.active_mtu;
        let path = Path::new(port.num, gid.index as u8, mtu);
        let pd = ctx.alloc_pd().map_err(e)?;
        let cq = ctx.create_cq((2 * DEPTH as usize + IMM_RECVS).min(dev.max_cqe as usize) as i32).map_err(e)?;
        let srq = pd.create_srq(IMM_RECVS as u32).map_err(e)?;
        // Buffers for 8 peers' messages at most.
        let mut msg_mem = vec![0u8; 8 * MSG_RECVS * MSG_BUF];
        let msg_mr = pd.reg_mr(msg_mem.as_mut_ptr(), msg_mem.len(), rc::REMOTE_WRITE).map_err(e)?;
        let next = Self::pair(&pd, &cq, &srq)?;
        let mut r = VerbsRaw {
            peers: Vec::new(),
            next,
            srq,
            msg_mr,
            msg_mem,
            cq,
            pd,
            _ctx: ctx,
            path,
            gid: gid.gid,
            addr: Vec::new(),
            mrs: HashMap::new(),
            wc: vec![ibv_wc::default(); 64],
            empty_polls: 0,
            outstanding: 0,
            arrived: HashMap::new(),
            received: Vec::new(),
        };
        r.addr = r.address_of(&r.next);
        for i in 0..IMM_RECVS {
            r.post_imm_recv(i)?;
        }
        Ok(r)
    }

    fn pair(pd: &Pd, cq: &Cq, srq: &Srq) -> R<Pair> {
        let w = pd.create_qp_on(IBV_QPT_RC, cq, cq, Some(srq), DEPTH, 0).map_err(e)?;
        let m = pd.create_qp(IBV_QPT_RC, cq, cq, DEPTH, MSG_RECVS as u32).map_err(e)?;
        let psn = ((fabriclib::domain::random_u64() & 0xff_ffff) as u32, 0x1000);
        Ok(Pair { w, m, psn })
    }

    fn address_of(&self, p: &Pair) -> Vec<u8> {
        let mut a = self.gid.to_vec();
        for v in [p.w.qpn(), p.psn.0, p.m.qpn(), p.psn.1] {
            a.extend_from_slice(&v.to_le_bytes());
        }
        a
    }

    pub fn addr(&self) -> &[u8] {
        &self.addr
    }

    fn post_imm_recv(&mut self, i: usize) -> R<()> {
        let mut wr = ibv_recv_wr { wr_id: K_IMM | i as u64, ..Default::default() };
        // SAFETY: a zero-byte receive names no memory.
        unsafe { self.srq.post(&mut wr) }.map_err(|rc| format!("raw verbs: ibv_post_srq_recv: {rc}"))
    }

    fn post_msg_recv(&mut self, peer: usize, slot: usize) -> R<()> {
        let at = (peer * MSG_RECVS + slot) * MSG_BUF;
        let mut sge = ibv_sge {
            addr: self.msg_mem.as_ptr() as u64 + at as u64,
            length: MSG_BUF as u32,
            lkey: self.msg_mr.lkey(),
        };
        let id = K_MSG | ((peer as u64) << 16) | slot as u64;
        let mut wr = ibv_recv_wr { wr_id: id, sg_list: &mut sge, num_sge: 1, ..Default::default() };
        // SAFETY: the buffer is registered and ours until the receive completes.
        unsafe { self.peers[peer].m.post_recv(&mut wr) }.map_err(|(rc, _)| format!("raw verbs: ibv_post_recv: {rc}"))
    }

    pub fn register(&mut self, ptr: *mut u8, len: usize) -> R<LocalMr> {
        let mr = self.pd.reg_mr(ptr, len, rc::REMOTE_WRITE).map_err(e)?;
        let key = self.mrs.len() + 1;
        let m = LocalMr {
            raw: key as *mut c_void,
            desc: mr.lkey() as usize as *mut c_void,
            remote: RemoteKey { remote_base: ptr as u64, key: mr.rkey() as u64 },
        };
        self.mrs.insert(key, mr);
        Ok(m)
    }

    pub fn deregister(&mut self, mr: LocalMr) {
        self.mrs.remove(&(mr.raw as usize));
    }

    /// Connects the advertised queue pairs to the peer at `addr`; its index.
    pub fn insert(&mut self, addr: &[u8]) -> R<u64> {
        if addr.len() != ADDR_LEN || self.peers.len() >= 8 {
            return Err(format!("raw verbs: a {}-byte address (or more than 8 peers)", addr.len()));
        }
        let gid: [u8; 16] = addr[..16].try_into().unwrap();
        let word = |k: usize| u32::from_le_bytes(addr[16 + 4 * k..20 + 4 * k].try_into().unwrap());
        let fresh = Self::pair(&self.pd, &self.cq, &self.srq)?;
        let p = std::mem::replace(&mut self.next, fresh);
        rc::connect(&p.w, &self.path, p.psn.0, &Endpoint { gid, qpn: word(0), psn: word(1) }).map_err(e)?;
        rc::connect(&p.m, &self.path, p.psn.1, &Endpoint { gid, qpn: word(2), psn: word(3) }).map_err(e)?;
        self.addr = self.address_of(&p);
        self.peers.push(p);
        let i = self.peers.len() - 1;
        for s in 0..MSG_RECVS {
            self.post_msg_recv(i, s)?;
        }
        Ok(i as u64)
    }

    /// Reads completions; returns the local ones (writes and sends done).
    pub fn poll(&mut self) -> R<usize> {
        let mut wc = std::mem::take(&mut self.wc);
        let n = self.cq.poll(&mut wc).map_err(e)?;
        if n == 0 {
            self.wc = wc;
            self.empty_polls = self.empty_polls.wrapping_add(1);
            if self.empty_polls % 16 == 0 {
                std::thread::yield_now();
            }
            return Ok(0);
        }
        let mut local = 0;
        let mut res = Ok(());
        for w in &wc[..n] {
            if w.status != IBV_WC_SUCCESS {
                res = Err(format!("raw verbs: work completion status {} (wr {:#x})", w.status, w.wr_id));
                continue;
            }
            let (kind, i) = (w.wr_id & KIND, w.wr_id & !KIND);
            match kind {
                K_SEND => local += 1,
                K_IMM => {
                    // SAFETY: a receive with an immediate carries it in this member.
                    let imm = u32::from_be(unsafe { w.__bindgen_anon_1.imm_data });
                    *self.arrived.entry(imm).or_default() += 1;
                    res = res.and(self.post_imm_recv(i as usize));
                }
                K_MSG => self.received.push(((i >> 16) as usize, (i & 0xffff) as usize, w.byte_len as usize)),
                _ => {}
            }
        }
        self.wc = wc;
        self.outstanding -= local;
        res.map(|_| local)
    }

    /// Posts one work request on peer `peer`'s queue pair (`msg`: the
    /// messages one), polling while its send queue is full.
    fn post(&mut self, peer: usize, msg: bool, mut wr: ibv_send_wr, deadline: Instant) -> R<()> {
        const ENOMEM: i32 = 12;
        loop {
            let p = &self.peers[peer];
            let qp = if msg { &p.m } else { &p.w };
            // SAFETY: the caller's buffers are registered and outlive the work request.
            match unsafe { qp.post_send(&mut wr) } {
                Ok(()) => {
                    self.outstanding += 1;
                    return Ok(());
                }
                Err((ENOMEM, _)) => {
                    self.poll()?;
                    if Instant::now() > deadline {
                        return Err("raw: timed out".into());
                    }
                }
                Err((rc, _)) => return Err(format!("raw verbs: ibv_post_send: {rc}")),
            }
        }
    }

    pub fn post_write(&mut self, w: &RawWrite, deadline: Instant) -> R<()> {
        let mut sge = ibv_sge { addr: w.local as u64, length: w.len as u32, lkey: w.desc as usize as u32 };
        let mut wr = ibv_send_wr {
            wr_id: K_SEND,
            sg_list: &mut sge,
            num_sge: (w.len > 0) as i32,
            opcode: if w.imm.is_some() { IBV_WR_RDMA_WRITE_WITH_IMM } else { IBV_WR_RDMA_WRITE },
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        if let Some(imm) = w.imm {
            wr.__bindgen_anon_1.imm_data = imm.to_be();
        }
        wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr: w.addr, rkey: w.key as u32 };
        self.post(w.peer as usize, false, wr, deadline)
    }

    pub fn send(&mut self, peer: u64, buf: *const u8, len: usize, desc: *mut c_void, deadline: Instant) -> R<()> {
        let mut sge = ibv_sge { addr: buf as u64, length: len as u32, lkey: desc as usize as u32 };
        let wr = ibv_send_wr {
            wr_id: K_SEND,
            sg_list: &mut sge,
            num_sge: (len > 0) as i32,
            opcode: IBV_WR_SEND,
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        self.post(peer as usize, true, wr, deadline)
    }

    /// Waits for one message and reposts its buffer.
    pub fn wait_recv(&mut self, deadline: Instant) -> R<usize> {
        loop {
            if let Some((peer, slot, len)) = self.received.pop() {
                self.post_msg_recv(peer, slot)?;
                return Ok(len);
            }
            self.poll()?;
            if Instant::now() > deadline {
                return Err("raw: timed out".into());
            }
        }
    }
}
