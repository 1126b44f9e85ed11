//! The verbs objects made from a device context: protection (and parent)
//! domains, memory regions, completion queues, shared receive queues,
//! address handles, queue pairs. Each owns an `Arc` of its context and is
//! destroyed once, when dropped.
use super::*;

/// The extended context (rdma-core's `verbs_context`) `ctx` is the tail
/// of, if the provider made one, and whether it is large enough to hold
/// the op at `offset` (providers built against older rdma-core have a
/// shorter one: it grows towards lower addresses). `verbs_get_ctx_op`.
fn extended(ctx: *mut ibv_context, offset: usize) -> Option<*mut verbs_context> {
    // SAFETY: a valid context; `abi_compat` marks an extended one (UINTPTR_MAX).
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return None;
    }
    let v = ctx.cast::<u8>().wrapping_sub(std::mem::offset_of!(verbs_context, context)).cast::<verbs_context>();
    // SAFETY: an extended context is the last field of its verbs_context; `sz`
    // (just before it) says how much of the struct the provider has.
    (unsafe { (*v).sz } >= size_of::<verbs_context>() - offset).then_some(v)
}

/// A failed allocation: `None` if the provider has no such thing (its
/// stub's `EOPNOTSUPP`), else the error.
fn unsupported<T>(what: &str) -> Result<Option<T>> {
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP | libc::ENOSYS) => Ok(None),
        _ => Err(Error::new(Status::Provider, format!("{what}: {e}"))),
    }
}

impl Context {
    /// Whether the device has thread domains (`ibv_alloc_td`): ConnectX
    /// (mlx5) does; rxe does not. Asked by allocating one: libibverbs fills
    /// the ops a provider lacks with stubs that fail `EOPNOTSUPP`.
    pub fn has_thread_domains(&self) -> bool {
        let Some(v) = self.td_ops() else { return false };
        let mut attr = ibv_td_init_attr::default();
        // SAFETY: the ops exist (td_ops) and take a valid context and attributes.
        let td = unsafe { ((*v).alloc_td.unwrap())(self.ctx, &mut attr) };
        // SAFETY: as above; freed once.
        !td.is_null() && unsafe { ((*v).dealloc_td.unwrap())(td) } == 0
    }

    /// The extended context, if it has all three thread-domain ops.
    fn td_ops(&self) -> Option<*mut verbs_context> {
        // The newest of the three (lowest offset: the struct grows up) bounds the size needed.
        let newest = std::mem::offset_of!(verbs_context, alloc_parent_domain)
            .min(std::mem::offset_of!(verbs_context, dealloc_td))
            .min(std::mem::offset_of!(verbs_context, alloc_td));
        // SAFETY: the ops are read only from an extended context that holds them.
        extended(self.ctx, newest).filter(|&v| unsafe {
            (*v).alloc_td.is_some() && (*v).dealloc_td.is_some() && (*v).alloc_parent_domain.is_some()
        })
    }

    /// A parent domain over `pd` with a thread domain of its own
    /// (`ibv_alloc_td`, `ibv_alloc_parent_domain`): queue pairs created on
    /// it are used by one thread, so the provider may skip their locks
    /// (mlx5 gives each its own doorbell register). Memory registered on
    /// `pd` serves them. `None` where the device has no thread domains.
    pub fn thread_domain(self: &Arc<Context>, pd: &Pd) -> Result<Option<Pd>> {
        let Some(v) = self.td_ops() else { return Ok(None) };
        let mut td_attr = ibv_td_init_attr::default();
        // SAFETY: the op exists (checked above) and takes a valid context and attributes.
        let td = unsafe { ((*v).alloc_td.unwrap())(self.ctx, &mut td_attr) };
        if td.is_null() {
            return unsupported("ibv_alloc_td");
        }
        let mut attr = ibv_parent_domain_init_attr { pd: pd.pd, td, ..Default::default() };
        // SAFETY: as above; pd and td are valid.
        let parent = unsafe { ((*v).alloc_parent_domain.unwrap())(self.ctx, &mut attr) };
        if parent.is_null() {
            let r = unsupported("ibv_alloc_parent_domain");
            // SAFETY: the td came from alloc_td and is freed once.
            unsafe { ((*v).dealloc_td.unwrap())(td) };
            return r;
        }
        Ok(Some(Pd { ctx: self.clone(), pd: parent, td }))
    }

    pub fn alloc_pd(self: &Arc<Context>) -> Result<Pd> {
        // SAFETY: a valid context.
        let pd = unsafe { (self.verbs.alloc_pd)(self.ctx) };
        if pd.is_null() {
            return Err(os_error("ibv_alloc_pd"));
        }
        Ok(Pd { ctx: self.clone(), pd, td: std::ptr::null_mut() })
    }

    /// A completion queue of `depth` entries (no completion channel).
    pub fn create_cq(self: &Arc<Context>, depth: i32) -> Result<Cq> {
        self.create_cq_on(depth, None)
    }

    /// A completion queue of `depth` entries whose events go to `channel`.
    pub fn create_cq_on(self: &Arc<Context>, depth: i32, channel: Option<&Channel>) -> Result<Cq> {
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.ch);
        // SAFETY: a valid context (and channel); vector 0.
        let cq = unsafe { (self.verbs.create_cq)(self.ctx, depth, std::ptr::null_mut(), ch, 0) };
        if cq.is_null() {
            return Err(os_error("ibv_create_cq"));
        }
        Ok(Cq { ctx: self.clone(), cq })
    }
}

/// A protection domain, or a parent domain (one with a thread domain,
/// `Context::thread_domain`).
pub struct Pd {
    ctx: Arc<Context>,
    pd: *mut ibv_pd,
    /// A parent domain's thread domain, freed after it.
    td: *mut ibv_td,
}

// SAFETY: as Context.
unsafe impl Send for Pd {}

impl Pd {
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    pub fn raw(&self) -> *mut ibv_pd {
        self.pd
    }

    /// Registers `len` bytes at `ptr` with `access` (`IBV_ACCESS_*`).
    ///
    /// With `ibv_reg_mr_iova2` (rdma-core >= 29) the region also allows
    /// relaxed ordering (`IBV_ACCESS_RELAXED_ORDERING`, an optional flag: a
    /// device without it ignores it) — PCIe writes to it may be reordered,
    /// which ConnectX NICs need for full bandwidth on some hosts; fabriclib
    /// never relies on the order of bytes within a write.
    pub fn reg_mr(&self, ptr: *mut u8, len: usize, access: u32) -> Result<Mr> {
        let mr = match self.ctx.verbs.reg_mr_iova2 {
            // SAFETY: a valid PD; the caller keeps the memory mapped for the
            // region's life; iova = its address, as `ibv_reg_mr` does.
            Some(reg) => unsafe { reg(self.pd, ptr.cast(), len, ptr as u64, access | IBV_ACCESS_RELAXED_ORDERING) },
            // SAFETY: as above.
            None => unsafe { (self.ctx.verbs.reg_mr)(self.pd, ptr.cast(), len, access as c_int) },
        };
        if mr.is_null() {
            return Err(os_error(&format!("ibv_reg_mr({len} bytes)")));
        }
        Ok(Mr { verbs: self.ctx.verbs, mr })
    }

    /// Registers `len` bytes of device memory exported as dma-buf `fd`
    /// (the region starting `offset` bytes into it), mapped at `iova` in
    /// this process (`ibv_reg_dmabuf_mr`, rdma-core >= 34).
    pub fn reg_dmabuf_mr(&self, fd: i32, offset: u64, len: usize, iova: u64, access: u32) -> Result<Mr> {
        let Some(reg) = self.ctx.verbs.reg_dmabuf_mr else {
            crate::bail!(Unsupported, "this libibverbs has no ibv_reg_dmabuf_mr (rdma-core >= 34 has)");
        };
        // SAFETY: a valid PD; the caller's fd names the exported region.
        let mr = unsafe { reg(self.pd, offset, len, iova, fd, access as c_int) };
        if mr.is_null() {
            let e = std::io::Error::last_os_error();
            crate::bail!(Unsupported, "ibv_reg_dmabuf_mr ({len} bytes of device memory): {e}");
        }
        Ok(Mr { verbs: self.ctx.verbs, mr })
    }

    /// A queue pair of `qp_type` (`IBV_QPT_RC`, `IBV_QPT_UD`) on `send_cq` /
    /// `recv_cq`, with room for `send` and `recv` work requests of one
    /// scatter-gather entry each.
    pub fn create_qp(&self, qp_type: ibv_qp_type, send_cq: &Cq, recv_cq: &Cq, send: u32, recv: u32) -> Result<Qp> {
        self.create_qp_on(qp_type, send_cq, recv_cq, None, send, recv)
    }

    /// As `create_qp`, its receives taken from `srq` if given.
    pub fn create_qp_on(
        &self,
        qp_type: ibv_qp_type,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&Srq>,
        send: u32,
        recv: u32,
    ) -> Result<Qp> {
        let recv = if srq.is_some() { 0 } else { recv };
        let mut init = ibv_qp_init_attr {
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            srq: srq.map_or(std::ptr::null_mut(), |s| s.srq),
            cap: ibv_qp_cap {
                max_send_wr: send,
                max_recv_wr: recv,
                max_send_sge: 1,
                max_recv_sge: 1,
                ..Default::default()
            },
            qp_type,
            ..Default::default()
        };
        // SAFETY: a valid PD and init struct naming live CQs.
        let qp = unsafe { (self.ctx.verbs.create_qp)(self.pd, &mut init) };
        if qp.is_null() {
            return Err(os_error("ibv_create_qp"));
        }
        Ok(Qp { verbs: self.ctx.verbs, qp })
    }
}

impl Pd {
    /// A shared receive queue of `depth` work requests of one entry each.
    pub fn create_srq(&self, depth: u32) -> Result<Srq> {
        let mut init =
            ibv_srq_init_attr { attr: ibv_srq_attr { max_wr: depth, max_sge: 1, srq_limit: 0 }, ..Default::default() };
        // SAFETY: a valid PD and init struct.
        let srq = unsafe { (self.ctx.verbs.create_srq)(self.pd, &mut init) };
        if srq.is_null() {
            return Err(os_error("ibv_create_srq"));
        }
        Ok(Srq { verbs: self.ctx.verbs, srq })
    }

    /// An address handle to `gid` through local `port` and `gid_index` (UD sends).
    pub fn create_ah(&self, port: u8, gid_index: u8, gid: [u8; 16]) -> Result<Ah> {
        let mut a = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: gid },
                sgid_index: gid_index,
                hop_limit: 64,
                ..Default::default()
            },
            is_global: 1,
            port_num: port,
            ..Default::default()
        };
        // SAFETY: a valid PD and attribute struct.
        let ah = unsafe { (self.ctx.verbs.create_ah)(self.pd, &mut a) };
        if ah.is_null() {
            return Err(os_error("ibv_create_ah"));
        }
        Ok(Ah { verbs: self.ctx.verbs, ah })
    }
}

/// A shared receive queue.
pub struct Srq {
    verbs: &'static Verbs,
    srq: *mut ibv_srq,
}

// SAFETY: as Context; one thread posts to it.
unsafe impl Send for Srq {}

impl Srq {
    /// Posts a chain of receive work requests (`ibv_post_srq_recv`).
    ///
    /// # Safety
    /// As `Qp::post_send`, for the receive buffers.
    pub unsafe fn post(&self, wr: *mut ibv_recv_wr) -> std::result::Result<(), c_int> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid SRQ; post_srq_recv is set by every provider with SRQs.
        let post = unsafe { (*(*self.srq).context).ops.post_srq_recv }.expect("a provider without post_srq_recv");
        // SAFETY: the caller's work requests are valid (see above).
        match unsafe { post(self.srq, wr, &mut bad) } {
            0 => Ok(()),
            rc => Err(rc),
        }
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: the QPs on it are destroyed first (the owner's field order).
        unsafe { (self.verbs.destroy_srq)(self.srq) };
    }
}

/// An address handle (where a UD datagram goes).
pub struct Ah {
    verbs: &'static Verbs,
    ah: *mut ibv_ah,
}

// SAFETY: an immutable handle.
unsafe impl Send for Ah {}

impl Ah {
    pub fn raw(&self) -> *mut ibv_ah {
        self.ah
    }
}

impl Drop for Ah {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        unsafe { (self.verbs.destroy_ah)(self.ah) };
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: the caller drops what was made from it first (Mr, Qp, parent domains).
        unsafe { (self.ctx.verbs.dealloc_pd)(self.pd) };
        if !self.td.is_null() {
            if let Some(v) = extended(self.ctx.ctx, std::mem::offset_of!(verbs_context, dealloc_td)) {
                // SAFETY: the td came from alloc_td, its parent domain is gone, freed once.
                unsafe { (*v).dealloc_td.map(|f| f(self.td)) };
            }
        }
    }
}

/// A registered memory region.
pub struct Mr {
    verbs: &'static Verbs,
    mr: *mut ibv_mr,
}

// SAFETY: the handle is only read (keys) or released.
unsafe impl Send for Mr {}

impl Mr {
    pub fn lkey(&self) -> u32 {
        // SAFETY: a valid MR.
        unsafe { (*self.mr).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: a valid MR.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered once, deregistered once.
        unsafe { (self.verbs.dereg_mr)(self.mr) };
    }
}

/// A completion queue.
pub struct Cq {
    ctx: Arc<Context>,
    cq: *mut ibv_cq,
}

// SAFETY: as Context.
unsafe impl Send for Cq {}

impl Cq {
    /// Reads up to `out.len()` completions (`ibv_poll_cq`, through the ops table).
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize> {
        // SAFETY: a valid CQ; poll_cq is always set by a provider.
        let poll = unsafe { (*(*self.cq).context).ops.poll_cq }.expect("a provider without poll_cq");
        // SAFETY: out has out.len() writable entries.
        let n = unsafe { poll(self.cq, out.len() as c_int, out.as_mut_ptr()) };
        if n < 0 {
            return Err(rc_error("ibv_poll_cq", n));
        }
        Ok(n as usize)
    }
}

impl Cq {
    /// Arms the queue: its next completion raises an event on its channel
    /// (`ibv_req_notify_cq`, through the ops table).
    pub fn arm(&self) -> Result<()> {
        // SAFETY: a valid CQ; req_notify_cq is set by every provider.
        let arm = unsafe { (*(*self.cq).context).ops.req_notify_cq }.expect("a provider without req_notify_cq");
        // SAFETY: as above; 0: any completion, not only solicited ones.
        match unsafe { arm(self.cq, 0) } {
            0 => Ok(()),
            rc => Err(rc_error("ibv_req_notify_cq", rc)),
        }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the caller destroys the QPs on it first.
        unsafe { (self.ctx.verbs.destroy_cq)(self.cq) };
    }
}

/// A queue pair.
pub struct Qp {
    verbs: &'static Verbs,
    qp: *mut ibv_qp,
}

// SAFETY: as Context; one thread posts to a QP at a time (the worker's).
unsafe impl Send for Qp {}

impl Qp {
    pub fn qpn(&self) -> u32 {
        // SAFETY: a valid QP.
        unsafe { (*self.qp).qp_num }
    }

    /// `ibv_modify_qp` with `attr` for the fields in `mask` (`IBV_QP_*`).
    pub fn modify(&self, attr: &mut ibv_qp_attr, mask: u32) -> Result<()> {
        // SAFETY: a valid QP and attribute struct.
        match unsafe { (self.verbs.modify_qp)(self.qp, attr, mask as c_int) } {
            0 => Ok(()),
            rc => Err(rc_error("ibv_modify_qp", rc)),
        }
    }

    /// Posts a chain of send work requests (`ibv_post_send`, through the ops
    /// table); on failure, the error and the first work request not posted.
    ///
    /// # Safety
    /// Every work request's scatter-gather list names registered memory that
    /// stays valid until its completion.
    pub unsafe fn post_send(&self, wr: *mut ibv_send_wr) -> std::result::Result<(), (c_int, *mut ibv_send_wr)> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid QP; post_send is always set by a provider.
        let post = unsafe { (*(*self.qp).context).ops.post_send }.expect("a provider without post_send");
        // SAFETY: the caller's work requests are valid (see above).
        match unsafe { post(self.qp, wr, &mut bad) } {
            0 => Ok(()),
            rc => Err((rc, bad)),
        }
    }

    /// Posts a chain of receive work requests (`ibv_post_recv`).
    ///
    /// # Safety
    /// As `post_send`, for the receive buffers.
    pub unsafe fn post_recv(&self, wr: *mut ibv_recv_wr) -> std::result::Result<(), (c_int, *mut ibv_recv_wr)> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid QP; post_recv is always set by a provider.
        let post = unsafe { (*(*self.qp).context).ops.post_recv }.expect("a provider without post_recv");
        // SAFETY: the caller's work requests are valid (see above).
        match unsafe { post(self.qp, wr, &mut bad) } {
            0 => Ok(()),
            rc => Err((rc, bad)),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created once, destroyed once.
        unsafe { (self.verbs.destroy_qp)(self.qp) };
    }
}
