//! The raw baseline: the same libfabric provider, opened by the same code
//! (`FabricEndpoint`: same `fi_info` hints, same objects) and driven through
//! the same bindings, with no engine (on the verbs backend: raw_verbs.rs): one
//! thread posts `fi_writedata`/`fi_send` straight from its loop (keeping a
//! window of operations in flight, retrying on `-FI_EAGAIN`) and polls the
//! completion queue itself; the receiver counts remote CQ data. Like the
//! engine's worker, it yields the core every 16 empty polls. Every engine
//! row of the benchmark is divided by the same row measured with this.
use fabriclib::domain::LocalMr;
use fabriclib::domain::fabric::FabricEndpoint;
use fabriclib::domain::fabric::sys::*;
use std::collections::HashMap;
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use std::time::Instant;

pub type R<T> = Result<T, String>;

fn ck(what: &str, ret: isize) -> R<()> {
    if ret >= 0 {
        return Ok(());
    }
    // SAFETY: fi_strerror returns a static string.
    let msg = unsafe { CStr::from_ptr(fi_strerror((-ret) as i32)) }.to_string_lossy();
    Err(format!("raw {what}: {msg} ({ret})"))
}

/// A registered region (`desc` for local posts; `remote` for peers).
pub type RawMr = LocalMr;

/// One write: `len` bytes from `local` to `addr` (with `key`) of `peer`.
#[derive(Clone, Copy)]
pub struct RawWrite {
    pub local: *const u8,
    pub len: usize,
    pub desc: *mut c_void,
    pub peer: fi_addr_t,
    pub addr: u64,
    pub key: u64,
    pub imm: Option<u32>,
}

pub struct FabricRaw {
    /// The endpoint (its `addr` and `provider` are what peers and reports need).
    pub fe: FabricEndpoint,
    ctx: Box<[fi_context2]>,
    free: Vec<usize>,
    cq_buf: Vec<fi_cq_data_entry>,
    /// Consecutive empty polls: every 16th yields the core (as the engine's worker does).
    empty_polls: u32,
    /// Writes and sends posted whose local completion has not been read yet.
    pub outstanding: usize,
    /// Immediates seen and not yet consumed by `wait_imm`.
    pub arrived: HashMap<u32, u64>,
    /// Receives completed (context index, length), not yet consumed by `wait_recv`.
    received: Vec<(usize, usize)>,
    /// The buffer posted with each receive context.
    recv_bufs: HashMap<usize, (*mut u8, usize, *mut c_void)>,
}

impl FabricRaw {
    pub fn open(provider: &str, bind: Option<&str>) -> R<FabricRaw> {
        // Device memory asked for where an engine of the default configuration
        // asks (same provider entry, so the same protocols: shm turns CMA
        // off with FI_HMEM).
        let hmem = fabriclib::EngineConfig::default().device_memory_mode().is_ok_and(|m| m.asks());
        let fe = FabricEndpoint::open(provider, bind, 16384, false, hmem).map_err(|e| e.message)?;
        let n = fe.depth() + 1024;
        Ok(FabricRaw {
            fe,
            ctx: vec![fi_context2::default(); n].into_boxed_slice(),
            free: (0..n).rev().collect(),
            cq_buf: vec![fi_cq_data_entry::default(); 64],
            empty_polls: 0,
            outstanding: 0,
            arrived: HashMap::new(),
            received: Vec::new(),
            recv_bufs: HashMap::new(),
        })
    }

    /// Registers `len` bytes at `ptr`; the memory must outlive the region's `deregister`.
    pub fn register(&mut self, ptr: *mut u8, len: usize) -> R<RawMr> {
        self.fe.register(ptr, len, fabriclib::domain::Memory::Host).map_err(|e| e.message)
    }

    pub fn deregister(&mut self, mr: RawMr) {
        self.fe.deregister(&mr)
    }

    pub fn insert(&mut self, addr: &[u8]) -> R<fi_addr_t> {
        let mut a: fi_addr_t = 0;
        // SAFETY: av is open; addr is the peer's fi_getname blob.
        let n = unsafe { fi_av_insert(self.fe.av, addr.as_ptr().cast(), 1, &mut a, 0, null_mut()) };
        if n != 1 {
            return Err(format!("raw fi_av_insert: {n}"));
        }
        Ok(a)
    }

    /// Reads completions: local ones free their context, remote CQ data is
    /// counted per immediate, receives are queued. Returns local completions.
    pub fn poll(&mut self) -> R<usize> {
        // SAFETY: cq_buf holds 64 entries.
        let n = unsafe { fi_cq_read(self.fe.cq, self.cq_buf.as_mut_ptr().cast(), 64) };
        if n == -(FI_EAGAIN as isize) {
            // The engine's worker policy, so that both share a small host alike.
            self.empty_polls = self.empty_polls.wrapping_add(1);
            if self.empty_polls % 16 == 0 {
                std::thread::yield_now();
            }
            return Ok(0);
        }
        if n == -(FI_EAVAIL as isize) {
            let mut err = fi_cq_err_entry::default();
            // SAFETY: the CQ reported an error entry.
            unsafe { fi_cq_readerr(self.fe.cq, &mut err, 0) };
            return Err(format!("raw completion error: {}", fabriclib::domain::fabric::strerror(err.err)));
        }
        ck("fi_cq_read", n)?;
        let mut local = 0;
        for i in 0..n as usize {
            let e = self.cq_buf[i];
            let data = e.flags & FI_REMOTE_CQ_DATA as u64 != 0;
            if e.flags & FI_RECV as u64 != 0 {
                // The context stays with its buffer until wait_recv reposts it.
                self.received.push((self.index(e.op_context), e.len));
            } else if data {
                *self.arrived.entry(e.data as u32).or_default() += 1;
            } else {
                self.release(e.op_context);
                local += 1;
            }
        }
        self.outstanding -= local;
        Ok(local)
    }

    fn index(&self, ctx: *mut c_void) -> usize {
        (ctx as usize - self.ctx.as_ptr() as usize) / size_of::<fi_context2>()
    }

    fn release(&mut self, ctx: *mut c_void) {
        let i = self.index(ctx);
        self.free.push(i);
    }

    fn repost(&mut self, i: usize) -> R<()> {
        let (buf, len, desc) = self.recv_bufs[&i];
        let ctx = &mut self.ctx[i] as *mut fi_context2 as *mut c_void;
        // SAFETY: buf is registered memory that outlives the endpoint's use of it.
        ck("fi_recv", unsafe { fi_recv(self.fe.ep, buf.cast(), len, desc, u64::MAX, ctx) })
    }

    /// Posts one operation with a fresh context, progressing (polling) while
    /// the provider says EAGAIN; its local completion is reaped by `poll`.
    fn post(&mut self, what: &str, deadline: Instant, op: impl Fn(*mut fid_ep, *mut c_void) -> isize) -> R<()> {
        while !self.try_post(what, &op)? {
            self.poll()?;
            self.check(deadline)?;
        }
        Ok(())
    }

    /// One attempt of `post`: false if no context is free or the provider
    /// says EAGAIN.
    fn try_post(&mut self, what: &str, op: impl Fn(*mut fid_ep, *mut c_void) -> isize) -> R<bool> {
        let Some(i) = self.free.pop() else { return Ok(false) };
        let ret = op(self.fe.ep, &mut self.ctx[i] as *mut fi_context2 as *mut c_void);
        if ret == 0 {
            self.outstanding += 1;
            return Ok(true);
        }
        self.free.push(i);
        if ret == -(FI_EAGAIN as isize) { Ok(false) } else { ck(what, ret).map(|_| false) }
    }

    /// Posts one write (`fi_writedata` with an immediate, else `fi_write`).
    pub fn post_write(&mut self, w: &RawWrite, deadline: Instant) -> R<()> {
        // SAFETY: local/desc belong to a registered region that outlives the op.
        self.post("fi_writedata", deadline, |ep, ctx| unsafe {
            match w.imm {
                Some(imm) => fi_writedata(ep, w.local.cast(), w.len, w.desc, imm as u64, w.peer, w.addr, w.key, ctx),
                None => fi_write(ep, w.local.cast(), w.len, w.desc, w.peer, w.addr, w.key, ctx),
            }
        })
    }

    fn check(&self, deadline: Instant) -> R<()> {
        if Instant::now() > deadline { Err("raw: timed out".into()) } else { Ok(()) }
    }

    /// Posts a receive buffer (kept in `recv_bufs`, reposted by `wait_recv`).
    pub fn post_recv(&mut self, buf: *mut u8, len: usize, desc: *mut c_void) -> R<()> {
        let i = self.free.pop().ok_or("raw: out of contexts")?;
        self.recv_bufs.insert(i, (buf, len, desc));
        self.repost(i)
    }

    /// Sends `len` bytes (registered with `desc`) to `peer`.
    pub fn send(&mut self, peer: fi_addr_t, buf: *const u8, len: usize, desc: *mut c_void, deadline: Instant) -> R<()> {
        // SAFETY: buf is registered memory that outlives the op.
        self.post("fi_send", deadline, |ep, ctx| unsafe { fi_send(ep, buf.cast(), len, desc, peer, ctx) })
    }

    /// Sends as `send`, but returns `false` at once where the provider says
    /// EAGAIN (with the receiver in this thread, which must progress it too).
    pub fn try_send(&mut self, peer: fi_addr_t, buf: *const u8, len: usize, desc: *mut c_void) -> R<bool> {
        // SAFETY: buf is registered memory that outlives the op.
        self.try_post("fi_send", |ep, ctx| unsafe { fi_send(ep, buf.cast(), len, desc, peer, ctx) })
    }

    /// Takes one message if one has arrived (reposting its buffer), after one poll.
    pub fn try_recv(&mut self) -> R<Option<usize>> {
        if self.received.is_empty() {
            self.poll()?;
        }
        match self.received.pop() {
            Some((i, len)) => self.repost(i).map(|_| Some(len)),
            None => Ok(None),
        }
    }

    /// Waits for one message and reposts a receive buffer for the next.
    pub fn wait_recv(&mut self, deadline: Instant) -> R<usize> {
        loop {
            if let Some((i, len)) = self.received.pop() {
                self.repost(i)?;
                return Ok(len);
            }
            self.poll()?;
            self.check(deadline)?;
        }
    }
}

/// The raw baseline of a backend: libfabric's (above) or bare verbs (raw_verbs.rs).
pub enum RawEp {
    Fabric(FabricRaw),
    Verbs(crate::raw_verbs::VerbsRaw),
}

/// Calls `$m` on whichever baseline `$s` is.
macro_rules! each {
    ($s:expr, $r:ident => $e:expr) => {
        match $s {
            RawEp::Fabric($r) => $e,
            RawEp::Verbs($r) => $e,
        }
    };
}

impl RawEp {
    /// The baseline for `provider` (the engine's: `verbs` is bare verbs).
    pub fn open(provider: &str, bind: Option<&str>) -> R<RawEp> {
        match provider {
            "verbs" => crate::raw_verbs::VerbsRaw::open().map(RawEp::Verbs),
            p => FabricRaw::open(p, bind).map(RawEp::Fabric),
        }
    }

    pub fn provider(&self) -> &str {
        match self {
            RawEp::Fabric(f) => &f.fe.provider,
            RawEp::Verbs(_) => "verbs",
        }
    }

    /// What a peer's `insert` takes.
    pub fn addr(&self) -> &[u8] {
        match self {
            RawEp::Fabric(f) => &f.fe.addr,
            RawEp::Verbs(v) => v.addr(),
        }
    }

    pub fn register(&mut self, ptr: *mut u8, len: usize) -> R<RawMr> {
        each!(self, r => r.register(ptr, len))
    }

    pub fn deregister(&mut self, mr: RawMr) {
        each!(self, r => r.deregister(mr))
    }

    pub fn insert(&mut self, addr: &[u8]) -> R<fi_addr_t> {
        each!(self, r => r.insert(addr))
    }

    pub fn poll(&mut self) -> R<usize> {
        each!(self, r => r.poll())
    }

    pub fn outstanding(&self) -> usize {
        each!(self, r => r.outstanding)
    }

    pub fn post_write(&mut self, w: &RawWrite, deadline: Instant) -> R<()> {
        each!(self, r => r.post_write(w, deadline))
    }

    /// Polls until `n` writes carrying `imm` have landed here (earlier arrivals count).
    pub fn wait_imm(&mut self, imm: u32, n: u64, deadline: Instant) -> R<()> {
        loop {
            let arrived = each!(self, r => &mut r.arrived);
            let have = arrived.get(&imm).copied().unwrap_or(0);
            if have >= n {
                arrived.insert(imm, have - n);
                return Ok(());
            }
            self.poll()?;
            if Instant::now() > deadline {
                return Err("raw: timed out".into());
            }
        }
    }

    /// Posts a receive buffer (bare verbs keeps buffers of its own per peer).
    pub fn post_recv(&mut self, buf: *mut u8, len: usize, desc: *mut c_void) -> R<()> {
        match self {
            RawEp::Fabric(f) => f.post_recv(buf, len, desc),
            RawEp::Verbs(_) => Ok(()),
        }
    }

    pub fn send(&mut self, peer: fi_addr_t, buf: *const u8, len: usize, desc: *mut c_void, deadline: Instant) -> R<()> {
        each!(self, r => r.send(peer, buf, len, desc, deadline))
    }

    pub fn wait_recv(&mut self, deadline: Instant) -> R<usize> {
        each!(self, r => r.wait_recv(deadline))
    }

    /// Posts every write of `ops` keeping at most `window` in flight, and
    /// returns when all have completed locally.
    pub fn write_all(&mut self, ops: impl Iterator<Item = RawWrite>, window: usize, deadline: Instant) -> R<()> {
        for w in ops {
            while self.outstanding() >= window {
                self.poll()?;
                if Instant::now() > deadline {
                    return Err("raw: timed out".into());
                }
            }
            self.post_write(&w, deadline)?;
        }
        self.drain(deadline)
    }

    /// Waits for the local completion of everything posted.
    pub fn drain(&mut self, deadline: Instant) -> R<()> {
        while self.outstanding() > 0 {
            self.poll()?;
            if Instant::now() > deadline {
                return Err("raw: timed out".into());
            }
        }
        Ok(())
    }
}
