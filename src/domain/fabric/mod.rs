//! The libfabric domain: one `FI_EP_RDM` endpoint with its fabric, domain,
//! address vector and completion queue (on shm, also an endpoint per peer
//! for writes over the inject size: `PeerEps`).
//!
//! Provider quirks this file handles (measured, see the README's provider
//! table): `mr_mode` bits are obeyed as returned (remote base = VA only with
//! `FI_MR_VIRT_ADDR`, a unique requested key per domain, the local `desc`
//! always passed, `fi_mr_bind`/`fi_mr_enable` with `FI_MR_ENDPOINT`); a remote
//! write with immediate is recognised as `FI_REMOTE_CQ_DATA && !FI_RECV`
//! (flags and `len` of that completion differ between providers); `-FI_EAGAIN`
//! from a post means "progress, then retry"; every op gets an `fi_context2`
//! slot so providers that require `FI_CONTEXT`/`FI_CONTEXT2` (EFA) work.
// Buffers passed to the post_* methods are registered memory owned by the worker
// (the Domain contract), so these methods stay safe to call from it.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::{Chan, Completion, DeviceMemory, Domain, DomainSpec, LocalMr, Memory, Nic, PeerId, Post, SendWr, WriteWr};
use crate::error::{Error, Result, Status};
use ctx::{CtxPool, NO_PEER};
use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use sys::*;

mod ctx;
mod endpoint;
pub mod nic;
pub mod sys;
pub use endpoint::FabricEndpoint;

const CQ_BATCH: usize = 64;
/// Address formats of IP-socket providers (tcp;ofi_rxm, ...): they bind to
/// a configured host, and a restarted process can take an address again.
pub(super) const IP_FORMATS: [u32; 3] = [FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6];
/// The tag of the engine's own messages (`Chan::Engine`).
const ENGINE_TAG: u64 = 0xfab1_0000_0000_0001;

pub(super) fn fi_err(what: &str, ret: i64) -> Error {
    // SAFETY: fi_strerror returns a pointer to a static string for any value.
    let msg = unsafe { CStr::from_ptr(fi_strerror((-ret) as i32)) }.to_string_lossy();
    Error::new(Status::Provider, format!("{what}: {msg} ({ret})"))
}

pub(super) fn check(what: &str, ret: i64) -> Result<()> {
    if ret < 0 { Err(fi_err(what, ret)) } else { Ok(()) }
}

/// How shm carries a write larger than its inject size.
/// shm carries an operation up to its inject size inside the command it
/// queues at the target and completes it at once; a larger one is
/// completed when the target answers, and an endpoint takes answers in the
/// order it posted (a write without an immediate is the exception: with
/// CMA the sender copies it itself). So on one endpoint, one dead peer
/// stalls every later large write-with-immediate of the engine: measured
/// with libfabric 1.17 and 1.20 (the loopback test
/// `dead_peer_with_large_imm_writes` fails with `FABRICLIB_SHM_SPLIT=never`
/// on both).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ShmWrites {
    /// The default: such writes go on an endpoint of their peer's own
    /// (`PeerEps`), where only that peer's answers can keep them waiting;
    /// the target copies them, as it does for the raw loop.
    PeerEndpoints,
    /// `FABRICLIB_SHM_SPLIT=always`: one endpoint, and the worker splits
    /// such a write into its bytes (copied by the sender) and a zero-byte
    /// write with the immediate (`Domain::write_split_limit`). fabriclib's
    /// way before 0.4; kept to measure against and as a fallback.
    Split,
    /// `FABRICLIB_SHM_SPLIT=never`: one endpoint, nothing split. For
    /// measuring and re-checking a newer libfabric only: unsafe to deploy.
    Never,
}

fn shm_writes() -> ShmWrites {
    match std::env::var("FABRICLIB_SHM_SPLIT").as_deref() {
        Ok("never") => ShmWrites::Never,
        Ok("always") => ShmWrites::Split,
        _ => ShmWrites::PeerEndpoints,
    }
}

pub struct FabricDomain {
    /// shm: writes larger than its inject size go on an endpoint of their
    /// peer's own (`ShmWrites::PeerEndpoints`); `None`: one endpoint for
    /// everything. Declared before `fe`, so that they are closed first.
    peer_eps: Option<PeerEps>,
    fe: FabricEndpoint,
    /// `Domain::answer_free_limit`: shm's inject size, else unlimited.
    answer_free: usize,
    /// `Domain::write_split_limit`: shm's inject size with `ShmWrites::Split`, else unlimited.
    split_over: usize,
    /// `Domain::addresses_come_back`: the provider uses IP addresses.
    ip: bool,
    /// `Domain::orders_sends_after_writes`.
    ordered: bool,
    peers: HashMap<Box<[u8]>, PeerId>,
    ctx: CtxPool,
    cq_buf: Vec<fi_cq_data_entry>,
}

/// The endpoints opened per peer for shm's writes larger than its inject
/// size: on first use, on the main endpoint's domain, address vector and
/// completion queue (so their completions come back with every other);
/// closed when the peer is forgotten (its process gone) or with the
/// domain. One dead peer's unanswered write then holds up only that peer's
/// endpoint. Each is a region of shm's in `/dev/shm` (named `<pid>:…` like
/// the main one): a process has one more per shm peer it writes to over
/// 4 KiB.
struct PeerEps {
    /// Writes of more bytes than this go on their peer's endpoint: shm's
    /// inject size, or 0 with device memory.
    over: usize,
    /// By peer id (an index of the `FI_AV_TABLE` address vector); null: none yet.
    eps: Vec<*mut fid_ep>,
}

impl PeerEps {
    /// `peer`'s endpoint, opened beside `fe`'s on first use.
    fn get(&mut self, peer: PeerId, fe: &mut FabricEndpoint) -> Result<*mut fid_ep> {
        let i = peer as usize;
        if let Some(&ep) = self.eps.get(i).filter(|ep| !ep.is_null()) {
            return Ok(ep);
        }
        if i >= self.eps.len() {
            self.eps.resize(i + 1, null_mut());
        }
        self.eps[i] = fe.open_sibling()?;
        Ok(self.eps[i])
    }

    fn close(&mut self, peer: PeerId) {
        if let Some(ep) = self.eps.get_mut(peer as usize).filter(|ep| !ep.is_null()) {
            // SAFETY: opened by open_sibling, closed once (nulled here).
            unsafe { fi_close(&mut (**ep).fid) };
            *ep = null_mut();
        }
    }
}

impl Drop for PeerEps {
    fn drop(&mut self) {
        for peer in 0..self.eps.len() {
            self.close(peer as PeerId);
        }
    }
}

// SAFETY: as for FabricEndpoint; the completion buffer holds plain data.
unsafe impl Send for FabricDomain {}

impl FabricDomain {
    /// `FabricEndpoint::list_nics`.
    pub fn list_nics(provider: &str) -> Result<Vec<Nic>> {
        FabricEndpoint::list_nics(provider)
    }

    fn open_with(spec: &DomainSpec, provider: &str) -> Result<FabricDomain> {
        let (bind, nic, window) = (spec.bind.as_ref(), &spec.nic, spec.peer_window);
        let fe = FabricEndpoint::open_on(provider, bind, nic, 4096, spec.wait, spec.hmem)?;
        let ctx = CtxPool::new(fe.depth().max(256), window);
        let inject = fe.host_inject;
        let shm = (fe.provider == "shm").then(shm_writes);
        let answer_free = if shm.is_some_and(|w| w != ShmWrites::Never) { inject } else { usize::MAX };
        let split_over = if shm == Some(ShmWrites::Split) { inject } else { usize::MAX };
        // With device memory every write of bytes goes on its peer's
        // endpoint: shm moves a device buffer of any size through CUDA IPC,
        // which the target answers.
        let own_ep_over = if fe.hmem() { 0 } else { inject };
        let peer_eps = (shm == Some(ShmWrites::PeerEndpoints)).then(|| PeerEps { over: own_ep_over, eps: Vec::new() });
        // SAFETY: as above.
        let ip = IP_FORMATS.contains(&unsafe { (*fe.info).addr_format });
        let cq_buf = vec![fi_cq_data_entry::default(); CQ_BATCH];
        // A send after writes arrives after them where the provider says so
        // (`FI_ORDER_SAW`: tcp;ofi_rxm, one stream per peer). shm 1.17 says so
        // only when asked, which would turn off its sender-side copies; it
        // keeps the order anyway for what fabriclib posts: a write with an
        // immediate goes as a command into the target's one FIFO queue, as a
        // send does, and a write without one is complete in the target's
        // memory (copied by the sender) before its completion is reported.
        // SAFETY: as above.
        let order = unsafe { (*(*fe.info).tx_attr).msg_order };
        let ordered = fe.provider == "shm" || order & FI_ORDER_SAW as u64 != 0;
        Ok(FabricDomain { peer_eps, fe, answer_free, split_over, ip, ordered, peers: HashMap::new(), ctx, cq_buf })
    }

    fn post_result(&mut self, what: &str, ret: isize, ctx: *mut c_void) -> Result<Post> {
        if ret == 0 {
            return Ok(Post::Posted);
        }
        self.ctx.release(ctx);
        if ret == -(FI_EAGAIN as isize) { Ok(Post::Again) } else { Err(fi_err(what, ret as i64)) }
    }
}

impl Domain for FabricDomain {
    fn open(spec: &DomainSpec) -> Result<Self> {
        let mut errors = Vec::new();
        for p in &spec.providers {
            match Self::open_with(spec, p) {
                Ok(d) => return Ok(d),
                // The provider is there; the NIC asked for is not.
                Err(e) if e.status == Status::InvalidArgument => return Err(e),
                Err(e) => errors.push(format!("{p}: {}", e.message)),
            }
        }
        Err(Error::new(Status::Unsupported, format!("no usable libfabric provider: {}", errors.join("; "))))
    }

    fn provider(&self) -> &str {
        &self.fe.provider
    }

    fn nic(&self) -> Nic {
        self.fe.nic.clone()
    }

    fn address(&self) -> &[u8] {
        &self.fe.addr
    }

    fn max_msg_size(&self) -> usize {
        self.fe.max_msg
    }

    fn answer_free_limit(&self) -> usize {
        self.answer_free
    }

    fn write_split_limit(&self) -> usize {
        self.split_over
    }

    fn addresses_come_back(&self) -> bool {
        self.ip
    }

    fn orders_sends_after_writes(&self) -> bool {
        self.ordered
    }

    fn sender_in_data(&self) -> bool {
        // tcp;ofi_rxm and shm carry 8 bytes; efa 4 (the header then).
        self.fe.cq_data_size >= 8
    }

    fn keys_checked_by_target(&self) -> bool {
        // shm 1.17 writes without an immediate by process_vm_writev from the
        // sender (its "fast RMA"): no key is looked at anywhere.
        self.fe.provider != "shm"
    }

    fn register(&mut self, ptr: *mut u8, len: usize, mem: Memory) -> Result<LocalMr> {
        self.fe.register(ptr, len, mem)
    }

    fn device_memory(&self) -> DeviceMemory {
        self.fe.device_path()
    }

    fn wait_fd(&self) -> Option<i32> {
        self.fe.wait_fd
    }

    fn try_wait(&mut self) -> bool {
        self.fe.try_wait()
    }

    fn deregister(&mut self, mr: &LocalMr) {
        self.fe.deregister(mr)
    }

    fn resolve(&mut self, addr: &[u8]) -> Result<PeerId> {
        if let Some(p) = self.peers.get(addr) {
            return Ok(*p);
        }
        let mut fi_addr: fi_addr_t = FI_ADDR_UNSPEC_;
        // SAFETY: av is open; addr is a provider address blob of addr.len() bytes.
        let n = unsafe { fi_av_insert(self.fe.av, addr.as_ptr().cast(), 1, &mut fi_addr, 0, null_mut()) };
        if n != 1 {
            return Err(Error::new(
                Status::Malformed,
                format!("{}: fi_av_insert refused a peer address of {} bytes ({n})", self.fe.provider, addr.len()),
            ));
        }
        self.peers.insert(addr.into(), fi_addr);
        Ok(fi_addr)
    }

    fn forget(&mut self, peer: PeerId) {
        // IP providers reconnect to whatever listens at an address by
        // themselves, and removing an address with operations queued on its
        // connection crashed tcp;ofi_rxm 1.17 (see `abandon`).
        if self.ip {
            return;
        }
        self.peers.retain(|_, p| *p != peer);
        if let Some(p) = self.peer_eps.as_mut() {
            p.close(peer);
        }
        let mut a = peer;
        // SAFETY: av is open and `a` one of its addresses. shm 1.17 unmaps
        // the old process's region here, and maps the new one at the next insert.
        unsafe { fi_av_remove(self.fe.av, &mut a, 1, 0) };
    }

    fn post_write(&mut self, wr: &WriteWr, token: u64) -> Result<Post> {
        let ep = match &mut self.peer_eps {
            // Without an immediate too: shm copies those itself with CMA (no
            // answer, any endpoint), but through the target where CMA is off.
            Some(p) if wr.len > p.over => p.get(wr.peer, &mut self.fe)?,
            _ => self.fe.ep,
        };
        let ctx = match self.ctx.take(token, wr.peer, wr.len as u64) {
            Ok(c) => c,
            Err(p) => return Ok(p),
        };
        // SAFETY: the local buffer and desc belong to a registered region that the
        // request keeps alive until this op completes; ctx is a stable pool slot.
        let ret = unsafe {
            match wr.imm {
                Some(imm) => {
                    fi_writedata(ep, wr.local.cast(), wr.len, wr.desc, imm as u64, wr.peer, wr.remote_addr, wr.key, ctx)
                }
                None => fi_write(ep, wr.local.cast(), wr.len, wr.desc, wr.peer, wr.remote_addr, wr.key, ctx),
            }
        };
        self.post_result("fi_write", ret, ctx)
    }

    fn post_send(&mut self, wr: &SendWr, token: u64) -> Result<Post> {
        // `ordered` needs nothing here: the providers fenced on order all sends after writes.
        let SendWr { chan, peer, buf, len, desc, data, .. } = *wr;
        let ctx = match self.ctx.take(token, peer, len as u64) {
            Ok(c) => c,
            Err(p) => return Ok(p),
        };
        // SAFETY: buf is a registered staging buffer owned by the worker until completion.
        let ret = unsafe {
            match chan {
                Chan::User => match data {
                    Some(data) => fi_senddata(self.fe.ep, buf.cast(), len, desc, data, peer, ctx),
                    None => fi_send(self.fe.ep, buf.cast(), len, desc, peer, ctx),
                },
                Chan::Engine => fi_tsend(self.fe.ep, buf.cast(), len, desc, peer, ENGINE_TAG, ctx),
            }
        };
        self.post_result("fi_send", ret, ctx)
    }

    fn post_recv(&mut self, chan: Chan, buf: *mut u8, len: usize, desc: *mut c_void, token: u64) -> Result<Post> {
        let ctx = match self.ctx.take(token, NO_PEER, 0) {
            Ok(c) => c,
            Err(p) => return Ok(p),
        };
        // SAFETY: buf is a registered receive buffer owned by the worker until completion.
        let ret = unsafe {
            match chan {
                Chan::User => fi_recv(self.fe.ep, buf.cast(), len, desc, FI_ADDR_UNSPEC_, ctx),
                Chan::Engine => fi_trecv(self.fe.ep, buf.cast(), len, desc, FI_ADDR_UNSPEC_, ENGINE_TAG, 0, ctx),
            }
        };
        self.post_result("fi_recv", ret, ctx)
    }

    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        // SAFETY: cq_buf has CQ_BATCH entries; fi_cq_read writes at most that many.
        let n = unsafe { fi_cq_read(self.fe.cq, self.cq_buf.as_mut_ptr().cast(), CQ_BATCH) };
        if n > 0 {
            for i in 0..n as usize {
                let e = self.cq_buf[i];
                let has_data = e.flags & FI_REMOTE_CQ_DATA as u64 != 0;
                if e.flags & FI_RECV as u64 != 0 {
                    if let Some((token, ..)) = self.ctx.release(e.op_context) {
                        let data = has_data.then_some(e.data);
                        out.push(Completion::Recv { token, len: e.len, data });
                    }
                } else if has_data {
                    out.push(Completion::RemoteWrite { imm: e.data as u32 });
                } else if let Some((token, peer, bytes)) = self.ctx.release(e.op_context) {
                    out.push(Completion::Done { token, peer, bytes });
                }
            }
            return Ok(n as usize);
        }
        if n == -(FI_EAVAIL as isize) {
            let mut err = fi_cq_err_entry::default();
            // SAFETY: cq is open and reported an error entry.
            let r = unsafe { fi_cq_readerr(self.fe.cq, &mut err, 0) };
            if r == 1 {
                // A failed remote-side event has no context of ours: nothing to fail locally.
                if let Some((token, peer, _)) = self.ctx.release(err.op_context) {
                    out.push(Completion::Failed { token, peer, error: failure(err.err) });
                }
            }
            return Ok(1);
        }
        if n == -(FI_EAGAIN as isize) { Ok(0) } else { Err(fi_err("fi_cq_read", n as i64)) }
    }

    fn in_flight(&self) -> usize {
        self.ctx.in_use()
    }

    fn cancel_recvs(&mut self, which: &mut dyn FnMut(u64) -> bool) {
        for ctx in self.ctx.receives(which) {
            // A canceled receive completes with FI_ECANCELED (or with its message,
            // if one raced the cancel), which frees the slot as any completion does.
            // SAFETY: ep is open and ctx is the context of a receive posted on it.
            let r = unsafe { fi_cancel(&mut (*self.fe.ep).fid, ctx) };
            if r != 0 {
                crate::log!(Warn, "fi_cancel of a receive: {}", strerror(r as i32));
            }
        }
    }

    fn abandon(&mut self, peer: PeerId, out: &mut Vec<u64>) {
        self.ctx.abandon(peer, out);
        // Its shm endpoint stays open (closed when the peer is forgotten, or
        // with the engine): a peer declared down while only stopped handles
        // our queued commands when it resumes, and shm crashes a process that
        // handles a command from an endpoint closed since (docs/failure-semantics.md).
        // The peer stays in the address vector: removing it with operations
        // queued on its connection crashed tcp;ofi_rxm 1.17 (measured). The
        // per-peer window (`peer_window`) is what keeps a dead peer's stuck
        // operations from starving the others.
    }
}

/// The status a failed work request reports, from its libfabric error number.
fn classify(errno: i32) -> Status {
    const EPIPE: u32 = 32; // libfabric passes some socket errors through as plain errno
    // FI_ECANCELED too: fabriclib never cancels a write or send itself, so a
    // canceled one is the provider flushing a dead connection (tcp;ofi_rxm
    // reports most of a killed peer's work requests so, before ENOTCONN).
    const PEER: [u32; 11] = [
        FI_ENOTCONN,
        FI_ECONNRESET,
        FI_ECONNREFUSED,
        FI_ECONNABORTED,
        FI_EHOSTUNREACH,
        FI_ENETUNREACH,
        FI_ENETDOWN,
        FI_ETIMEDOUT,
        EPIPE,
        FI_ESHUTDOWN,
        FI_ECANCELED,
    ];
    let e = errno.unsigned_abs();
    if e == FI_ETRUNC {
        Status::Truncated
    } else if PEER.contains(&e) {
        Status::PeerDown
    } else if [FI_EACCES, FI_EKEYREJECTED, FI_EPERM, FI_EREMOTEIO].contains(&e) {
        Status::RemoteAccess
    } else if [FI_EFAULT, FI_EMSGSIZE, FI_EINVAL, FI_ETOOSMALL, FI_ENOMEM, FI_EMFILE].contains(&e) {
        Status::LocalAccess
    } else {
        Status::Provider
    }
}

/// A failed work request's error: its class and libfabric's words for it.
fn failure(errno: i32) -> Error {
    Error::new(classify(errno), format!("{} (libfabric error {})", strerror(errno), errno.abs()))
}

/// Human-readable text for a libfabric error number (positive errno).
pub fn strerror(errno: i32) -> String {
    // SAFETY: fi_strerror returns a static string.
    unsafe { CStr::from_ptr(fi_strerror(errno.abs())) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Bind;
    use crate::domain::Memory;

    /// Asked for device memory, shm opens on its `FI_HMEM` entry (every
    /// libfabric lists one, with or without CUDA), keeps its host inject
    /// size (the entry's own says 0), and says it moves device memory
    /// through CUDA IPC exactly where this libfabric was built with CUDA;
    /// tcp has no such entry and opens as without asking.
    #[test]
    fn asking_for_device_memory_falls_back_per_provider() {
        let spec =
            |hmem| DomainSpec { bind: Some(Bind::parse("127.0.0.1")), peer_window: 16, hmem, ..Default::default() };
        let plain = FabricDomain::open_with(&spec(false), "shm").unwrap();
        let d = FabricDomain::open_with(&spec(true), "shm").unwrap();
        // SAFETY: info is valid for the endpoint's life.
        assert_ne!(unsafe { (*d.fe.info).caps } & FI_HMEM, 0, "shm's FI_HMEM entry");
        assert_eq!(plain.device_memory(), DeviceMemory::None);
        assert_eq!(d.answer_free, plain.answer_free, "host memory is still injected");
        assert_eq!(d.answer_free, 4096);
        let cuda = sys::cuda_support();
        assert_eq!(d.device_memory(), if cuda { DeviceMemory::Ipc } else { DeviceMemory::None });
        assert_eq!(d.nic().device_memory, d.device_memory());
        let t = FabricDomain::open_with(&spec(true), "tcp;ofi_rxm").unwrap();
        assert_eq!(t.device_memory(), DeviceMemory::None, "tcp has no FI_HMEM");
        // SAFETY: as above.
        assert_eq!(unsafe { (*t.fe.info).caps } & FI_HMEM, 0);
        // SAFETY: fi_version only reads a constant.
        let v = unsafe { fi_version() };
        eprintln!("libfabric {v:#x}: CUDA support {cuda}");
    }

    /// A withdrawn receive (a removed pool's buffer) comes back as a failed
    /// completion of its token, on both software providers, and leaves
    /// nothing in flight.
    #[test]
    fn withdrawn_receives_come_back_failed() {
        for prov in ["tcp;ofi_rxm", "shm"] {
            let spec = DomainSpec { bind: Some(Bind::parse("127.0.0.1")), peer_window: 16, ..Default::default() };
            let mut d = FabricDomain::open_with(&spec, prov).unwrap();
            let mut buf = vec![0u8; 4 * 256];
            let mr = d.register(buf.as_mut_ptr(), buf.len(), Memory::Host).unwrap();
            for t in 0..4u64 {
                // SAFETY: slot t of buf, registered, outlives the receive (it is polled back below).
                let at = unsafe { buf.as_mut_ptr().add(t as usize * 256) };
                assert_eq!(d.post_recv(Chan::User, at, 256, mr.desc, 100 + t).unwrap(), Post::Posted);
            }
            d.cancel_recvs(&mut |t| t % 2 == 0);
            let (mut back, start) = (Vec::new(), std::time::Instant::now());
            while back.len() < 2 && start.elapsed() < std::time::Duration::from_secs(5) {
                let mut out = Vec::new();
                d.poll(&mut out).unwrap();
                back.extend(out.into_iter().map(|c| match c {
                    Completion::Failed { token, .. } => token,
                    other => panic!("{prov}: {other:?}"),
                }));
            }
            back.sort();
            assert_eq!(back, [100, 102], "{prov}: the withdrawn receives");
            assert_eq!(d.in_flight(), 2, "{prov}: the other two stay posted");
            d.deregister(&mr);
        }
    }
}
