//! `FabricEndpoint`: the libfabric objects of one endpoint, the `fi_info`
//! fabriclib asks for, NIC choice, and memory registration.
use super::super::{DeviceMemory, LocalMr, Memory};
use super::sys::*;
use super::{IP_FORMATS, check, fi_err};
use crate::config::Bind;
use crate::domain::Choice;
use crate::domain::Nic;
use crate::error::{Error, Result, Status};
use crate::wire::RemoteKey;
use std::ffi::{CStr, CString, c_void};
use std::ptr::null_mut;

/// The libfabric objects of one `FI_EP_RDM` endpoint (fabric, domain,
/// completion queue, address vector, endpoint), opened from the `fi_info`
/// fabriclib always asks for, with memory registration. `FabricDomain` drives
/// its data path; so does the benchmark's raw baseline, which is why the
/// handles are public: both run on exactly the same provider configuration.
pub struct FabricEndpoint {
    pub info: *mut fi_info,
    pub fabric: *mut fid_fabric,
    pub domain: *mut fid_domain,
    pub av: *mut fid_av,
    pub cq: *mut fid_cq,
    pub ep: *mut fid_ep,
    /// The provider actually opened (e.g. `tcp;ofi_rxm`).
    pub provider: String,
    /// This endpoint's address (`fi_getname`).
    pub addr: Vec<u8>,
    pub mr_mode: u64,
    pub max_msg: usize,
    /// The inject size of host memory: what the provider sends without the
    /// target's answer (shm: 4 KiB, also on its `FI_HMEM` entry, whose
    /// `inject_size` says 0 for device buffers' sake).
    pub host_inject: usize,
    /// Bytes of completion data an operation may carry (`cq_data_size`).
    pub cq_data_size: usize,
    /// Requested keys stay within the provider's `mr_key_size`, below FI_KEY_NOTAVAIL.
    key_mask: u64,
    next_key: u64,
    /// The completion queue's wait fd (`FI_WAIT_FD`), when asked for and the
    /// provider has one.
    pub wait_fd: Option<i32>,
    /// The NIC it is open on.
    pub nic: crate::domain::Nic,
}

// SAFETY: the libfabric objects are owned by this value and used by one
// thread at a time (FI_THREAD_DOMAIN).
unsafe impl Send for FabricEndpoint {}

impl FabricEndpoint {
    /// The `fi_info` every fabriclib endpoint is opened from (`FI_EP_RDM`,
    /// `FI_MSG|FI_RMA`, the mr_mode bits we handle, `FI_THREAD_DOMAIN`),
    /// bound to `bind` (`host` or `host:port`) for IP-addressed providers;
    /// with `hmem`, also `FI_HMEM` (and `FI_MR_HMEM` in `mr_mode`, which EFA
    /// wants before it offers `FI_HMEM`) at API 1.20 where this libfabric
    /// has it (dma-buf registration is read only at 1.20 and later).
    fn getinfo(provider: &str, bind: Option<&Bind>, hmem: bool) -> Result<*mut fi_info> {
        let (node, port) = (bind.map(|b| b.host.as_str()), bind.and_then(|b| b.port));
        if let Some(why) = load_error() {
            return Err(Error::new(Status::Unsupported, format!("provider \"{provider}\": {why}")));
        }
        // SAFETY: fi_version only reads a constant.
        let version =
            if hmem { FI_API_VERSION.max(unsafe { fi_version() }.min(FI_VERSION_DMABUF)) } else { FI_API_VERSION };
        // SAFETY: hints is a fresh fi_info from fi_allocinfo with all attr
        // structs allocated; strings we put in it are malloc'ed (fi_freeinfo frees them).
        unsafe {
            let hints = fi_allocinfo();
            if hints.is_null() {
                return Err(Error::new(Status::Provider, "fi_allocinfo failed"));
            }
            // FI_TAGGED: the engine's own messages (handshake, keepalive) travel
            // tagged, apart from the application's untagged ones.
            (*hints).caps =
                (FI_MSG | FI_TAGGED | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_WRITE | FI_SEND | FI_RECV) as u64;
            (*hints).mode = FI_CONTEXT | FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = fi_ep_type_FI_EP_RDM;
            let d = &mut *(*hints).domain_attr;
            d.mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT) as i32;
            if hmem {
                (*hints).caps |= FI_HMEM;
                d.mr_mode |= FI_MR_HMEM as i32;
            }
            d.threading = fi_threading_FI_THREAD_DOMAIN;
            let name = CString::new(provider)
                .map_err(|_| Error::new(Status::InvalidArgument, "provider name contains NUL"))?;
            (*(*hints).fabric_attr).prov_name = crate::os::strdup(&name);
            let mut info = null_mut();
            let mut ret = fi_getinfo(version, std::ptr::null(), std::ptr::null(), 0, hints, &mut info) as i64;
            // Bind socket providers to the configured address; providers that do
            // not use IP addresses (shm, efa) would derive a clashing name from it.
            if let (Some(n), true) = (node, ret == 0 && IP_FORMATS.contains(&(*info).addr_format)) {
                fi_freeinfo(info);
                info = null_mut();
                let n =
                    CString::new(n).map_err(|_| Error::new(Status::InvalidArgument, "bind address contains NUL"))?;
                let service = port.map(|p| CString::new(p.to_string()).unwrap());
                let sp = service.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
                ret = fi_getinfo(version, n.as_ptr(), sp, FI_SOURCE, hints, &mut info) as i64;
            }
            fi_freeinfo(hints);
            if ret < 0 || info.is_null() {
                let what = if hmem { "FI_MSG|FI_RMA|FI_HMEM" } else { "FI_MSG|FI_RMA" };
                let mut e = fi_err(&format!("fi_getinfo(provider \"{provider}\", FI_EP_RDM, {what})"), ret.min(-1));
                e.status = Status::Unsupported;
                return Err(e);
            }
            Ok(info)
        }
    }

    /// The entry of `provider`'s list that `nic` chooses, duplicated (the
    /// caller frees it): with `hmem`, the `FI_HMEM` entry of that NIC where
    /// the provider lists one, else the entry of today's hints. The NIC is
    /// chosen from the list without `FI_HMEM`, so that an engine opens on the
    /// same NICs whether it asks for device memory or not. Also returns the
    /// inject size of the host-memory entry (shm's `FI_HMEM` entry says 0, so
    /// that no device buffer is injected; host buffers still are).
    fn choose_info(provider: &str, bind: Option<&Bind>, nic: &Choice, hmem: bool) -> Result<(*mut fi_info, usize)> {
        let list = Self::getinfo(provider, bind, false)?;
        // SAFETY: list (and hlist) are valid fi_info lists from fi_getinfo; the
        // chosen entry is duplicated before they are freed.
        unsafe {
            let chosen = match crate::domain::fabric::nic::choose(list, nic) {
                Ok(e) => e,
                Err(m) => {
                    fi_freeinfo(list);
                    return Err(Error::new(Status::InvalidArgument, format!("{provider}: {m}")));
                }
            };
            let inject = (*(*chosen).tx_attr).inject_size;
            let hlist = if hmem { Self::getinfo(provider, bind, true).unwrap_or(null_mut()) } else { null_mut() };
            let with_hmem = crate::domain::fabric::nic::pick(hlist, &crate::domain::fabric::nic::name(chosen))
                .filter(|&e| (*e).caps & FI_HMEM != 0);
            let info = fi_dupinfo(with_hmem.unwrap_or(chosen));
            fi_freeinfo(list);
            if !hlist.is_null() {
                fi_freeinfo(hlist);
            }
            if info.is_null() {
                return Err(Error::new(Status::Provider, "fi_dupinfo failed"));
            }
            Ok((info, inject))
        }
    }

    /// The NICs `provider` offers here (`fi_getinfo` with fabriclib's hints,
    /// no address), each once, in its order; `Unsupported` if it offers none.
    pub fn list_nics(provider: &str) -> Result<Vec<Nic>> {
        let list = Self::getinfo(provider, None, false)?;
        // SAFETY: list is a valid fi_info list until freed below; `pick`
        // returns entries of it.
        unsafe {
            let nics = crate::domain::fabric::nic::names(list)
                .iter()
                .filter_map(|n| crate::domain::fabric::nic::pick(list, n))
                .map(|e| crate::domain::fabric::nic::describe(e))
                .collect();
            fi_freeinfo(list);
            Ok(nics)
        }
    }

    /// Work requests the endpoint's transmit and receive queues hold.
    pub fn depth(&self) -> usize {
        // SAFETY: info is valid for the endpoint's life.
        unsafe { (*(*self.info).tx_attr).size + (*(*self.info).rx_attr).size }
    }

    /// Opens an endpoint of `provider` (bound to `node`, `host` or
    /// `host:port`, for IP providers) with
    /// a completion queue of at least `cq_min` entries; with `wait`, the
    /// queue gets an `FI_WAIT_FD` wait object if the provider has one (tcp;ofi_rxm
    /// does, shm 1.17 does not: `wait_fd` stays `None`).
    /// With `hmem`, asks for device memory (`FI_HMEM`), on the NIC's plain
    /// entry where the provider has none (`hmem()` then says false).
    pub fn open(provider: &str, node: Option<&str>, cq_min: usize, wait: bool, hmem: bool) -> Result<FabricEndpoint> {
        Self::open_on(provider, node.map(Bind::parse).as_ref(), &Choice::First, cq_min, wait, hmem)
    }

    /// `open`, on the NIC `nic` chooses (a named NIC ignores `bind`).
    pub fn open_on(
        provider: &str,
        bind: Option<&Bind>,
        nic: &Choice,
        cq_min: usize,
        wait: bool,
        hmem: bool,
    ) -> Result<FabricEndpoint> {
        let bind = if matches!(nic, Choice::First) { bind } else { None };
        let (info, host_inject) = Self::choose_info(provider, bind, nic, hmem)?;
        // SAFETY: info is a valid single fi_info, and every object opened below
        // is closed in Drop (fields start null).
        unsafe {
            let mut d = FabricEndpoint {
                info,
                fabric: null_mut(),
                domain: null_mut(),
                av: null_mut(),
                cq: null_mut(),
                ep: null_mut(),
                provider: CStr::from_ptr((*(*info).fabric_attr).prov_name).to_string_lossy().into_owned(),
                addr: Vec::new(),
                mr_mode: (*(*info).domain_attr).mr_mode as u64,
                max_msg: (*(*info).ep_attr).max_msg_size,
                host_inject,
                cq_data_size: (*(*info).domain_attr).cq_data_size,
                key_mask: key_mask((*(*info).domain_attr).mr_key_size),
                next_key: 0,
                wait_fd: None,
                nic: crate::domain::fabric::nic::describe(info),
            };
            d.nic.device_memory = d.path_at_open();
            // Requested keys start at a random point: an engine restarted at the
            // same address registers other keys, so a descriptor of its earlier
            // incarnation names no region of the new one (providers that check
            // keys, tcp among them, drop such a write at the target).
            d.next_key = crate::domain::random_u64() & d.key_mask;
            check("fi_fabric", fi_fabric((*info).fabric_attr, &mut d.fabric, null_mut()) as i64)?;
            check("fi_domain", fi_domain(d.fabric, info, &mut d.domain, null_mut()) as i64)?;
            let mut cq_attr = fi_cq_attr {
                size: (d.depth() * 2).max(cq_min),
                format: fi_cq_format_FI_CQ_FORMAT_DATA,
                wait_obj: fi_wait_obj_FI_WAIT_NONE,
                ..Default::default()
            };
            let waitable = wait && {
                let mut a = fi_cq_attr { wait_obj: fi_wait_obj_FI_WAIT_FD, ..cq_attr };
                fi_cq_open(d.domain, &mut a, &mut d.cq, null_mut()) == 0
            };
            if waitable {
                let mut fd: i32 = -1;
                let r = fi_control(&mut (*d.cq).fid, FI_GETWAIT as i32, (&mut fd as *mut i32).cast());
                d.wait_fd = (r == 0 && fd >= 0).then_some(fd);
            } else {
                check("fi_cq_open", fi_cq_open(d.domain, &mut cq_attr, &mut d.cq, null_mut()) as i64)?;
            }
            let mut av_attr = fi_av_attr { type_: fi_av_type_FI_AV_TABLE, count: 64, ..Default::default() };
            check("fi_av_open", fi_av_open(d.domain, &mut av_attr, &mut d.av, null_mut()) as i64)?;
            check("fi_endpoint", fi_endpoint(d.domain, info, &mut d.ep, null_mut()) as i64)?;
            check("fi_ep_bind(av)", fi_ep_bind(d.ep, &mut (*d.av).fid, 0) as i64)?;
            check("fi_ep_bind(cq)", fi_ep_bind(d.ep, &mut (*d.cq).fid, (FI_TRANSMIT | FI_RECV) as u64) as i64)?;
            check("fi_enable", fi_enable(d.ep) as i64)?;
            let mut buf = vec![0u8; 256];
            let mut len = buf.len();
            check("fi_getname", fi_getname(&mut (*d.ep).fid, buf.as_mut_ptr().cast(), &mut len) as i64)?;
            buf.truncate(len);
            d.addr = buf;
            Ok(d)
        }
    }

    /// Another endpoint on this one's domain, address vector and completion
    /// queue (shm's per-peer write endpoints); the caller closes it before
    /// this value is dropped.
    pub fn open_sibling(&mut self) -> Result<*mut fid_ep> {
        let mut ep: *mut fid_ep = null_mut();
        // SAFETY: domain, info, av and cq are open for this value's life; ep is
        // closed on every error path.
        unsafe {
            check("fi_endpoint", fi_endpoint(self.domain, self.info, &mut ep, null_mut()) as i64)?;
            let r = fi_ep_bind(ep, &mut (*self.av).fid, 0);
            let r = if r == 0 { fi_ep_bind(ep, &mut (*self.cq).fid, (FI_TRANSMIT | FI_RECV) as u64) } else { r };
            let r = if r == 0 { fi_enable(ep) } else { r };
            if r != 0 {
                fi_close(&mut (*ep).fid);
                return Err(fi_err("a peer's endpoint", r as i64));
            }
        }
        Ok(ep)
    }

    /// Whether the worker may block on `wait_fd` now (`fi_trywait`): false
    /// if completions are pending or progress is needed first (poll, retry).
    pub fn try_wait(&mut self) -> bool {
        if self.wait_fd.is_none() {
            return false;
        }
        // SAFETY: fabric and cq are open for the endpoint's life (closed only in
        // Drop); the array holds the one fid fi_trywait is told about.
        unsafe {
            let mut fids = [&mut (*self.cq).fid as *mut fid];
            fi_trywait(self.fabric, fids.as_mut_ptr(), 1) == 0
        }
    }

    /// Whether the provider reaches device memory: `FI_HMEM` in the caps of
    /// the entry it opened on, and a libfabric built with CUDA.
    pub fn hmem(&self) -> bool {
        // SAFETY: info is valid for the endpoint's life.
        unsafe { (*self.info).caps & FI_HMEM != 0 && cuda_support() }
    }

    /// How device memory reaches this provider (`DeviceMemory`, kept in
    /// `nic`): shm copies through CUDA IPC; a NIC takes a dma-buf where the
    /// endpoint opened at API 1.20 or later, else (and once a dma-buf was
    /// refused) the device pointer.
    pub fn device_path(&self) -> DeviceMemory {
        self.nic.device_memory
    }

    /// `device_path` as the endpoint opens.
    fn path_at_open(&self) -> DeviceMemory {
        // SAFETY: info is valid for the endpoint's life.
        let api = unsafe { (*(*self.info).fabric_attr).api_version };
        match (self.hmem(), self.provider == "shm") {
            (false, _) => DeviceMemory::None,
            (true, true) => DeviceMemory::Ipc,
            (true, false) if api >= FI_VERSION_DMABUF => DeviceMemory::DmaBuf,
            (true, false) => DeviceMemory::Pointer,
        }
    }

    /// Registers `len` bytes at `ptr` of `mem` memory for local use and remote writes.
    pub fn register(&mut self, ptr: *mut u8, len: usize, mem: Memory) -> Result<LocalMr> {
        let access = (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV) as u64;
        let mut mr: *mut fid_mr = null_mut();
        // SAFETY: domain is open; ptr/len describe memory the caller keeps alive
        // until deregister; mr is closed on every error path.
        unsafe {
            match mem {
                Memory::Host => {
                    let key = self.take_key();
                    let ret = fi_mr_reg(self.domain, ptr as *const c_void, len, access, 0, key, 0, &mut mr, null_mut());
                    check("fi_mr_reg", ret as i64)?;
                }
                Memory::Cuda { device, dmabuf } => self.register_cuda(ptr, len, access, device, dmabuf, &mut mr)?,
            }
            if self.mr_mode & FI_MR_ENDPOINT as u64 != 0 {
                let r = fi_mr_bind(mr, &mut (*self.ep).fid, 0);
                let r = if r == 0 { fi_mr_enable(mr) } else { r };
                if r != 0 {
                    fi_close(&mut (*mr).fid);
                    return Err(fi_err("fi_mr_bind/fi_mr_enable", r as i64));
                }
            }
            let rkey = fi_mr_key(mr);
            if rkey == u64::MAX {
                fi_close(&mut (*mr).fid);
                return Err(Error::new(
                    Status::Unsupported,
                    "fi_mr_key: key not available (FI_MR_RAW is not supported)",
                ));
            }
            let remote_base = if self.mr_mode & FI_MR_VIRT_ADDR as u64 != 0 { ptr as u64 } else { 0 };
            Ok(LocalMr { raw: mr.cast(), desc: fi_mr_desc(mr), remote: RemoteKey { remote_base, key: rkey } })
        }
    }

    /// The next requested key: unique per domain, as providers without
    /// `FI_MR_PROV_KEY` need.
    fn take_key(&mut self) -> u64 {
        let key = self.next_key;
        self.next_key = (self.next_key + 1) & self.key_mask;
        key
    }

    /// `fi_mr_regattr` of CUDA device memory of `device`, with
    /// `FI_HMEM_DEVICE_ONLY` (shm moves a region through CUDA IPC only when
    /// it is registered so; without it, shm bounces every byte through host
    /// memory): from its dma-buf (`FI_MR_DMABUF`) where `device_path` says
    /// dma-buf and the driver exported one, and by the device pointer
    /// (`FI_HMEM_CUDA`) otherwise — also after a refused dma-buf, which never
    /// fails a registration the pointer path takes. A refusal of both names
    /// the provider and what each said.
    unsafe fn register_cuda(
        &mut self,
        ptr: *mut u8,
        len: usize,
        access: u64,
        device: i32,
        dmabuf: Option<(i32, u64)>,
        mr: &mut *mut fid_mr,
    ) -> Result<()> {
        /// `struct fi_mr_dmabuf` (libfabric 1.20).
        #[repr(C)]
        struct FiMrDmabuf {
            fd: i32,
            offset: u64,
            len: usize,
            base_addr: *mut c_void,
        }
        /// `struct fi_mr_attr` as of 1.20: 1.17's, then fields that stay zero.
        #[repr(C)]
        struct MrAttr {
            base: fi_mr_attr,
            hmem_data: *mut c_void,
            page_size: usize,
            base_mr: *const c_void,
            sub_mr_cnt: usize,
        }
        const FI_MR_DMABUF: u64 = 1 << 40;
        const FI_HMEM_DEVICE_ONLY: u64 = 1 << 46;
        if !self.hmem() {
            return Err(crate::domain::no_device_memory(&self.provider, device));
        }
        let iov = iovec { iov_base: ptr.cast(), iov_len: len };
        let attr = |key| {
            let mut a = MrAttr {
                base: fi_mr_attr {
                    mr_iov: &iov,
                    iov_count: 1,
                    access,
                    requested_key: key,
                    iface: fi_hmem_iface_FI_HMEM_CUDA,
                    ..Default::default()
                },
                hmem_data: null_mut(),
                page_size: 0,
                base_mr: std::ptr::null(),
                sub_mr_cnt: 0,
            };
            a.base.device.cuda = device;
            a
        };
        let mut refused = None;
        if let (Some((fd, offset)), DeviceMemory::DmaBuf) = (dmabuf, self.device_path()) {
            let buf = FiMrDmabuf { fd, offset, len, base_addr: ptr.cast() };
            let mut a = attr(self.take_key());
            a.base.mr_iov = (&buf as *const FiMrDmabuf).cast();
            // SAFETY: domain is open; a (and what it points at) lives across the call.
            let ret = unsafe { fi_mr_regattr(self.domain, &a.base, FI_MR_DMABUF | FI_HMEM_DEVICE_ONLY, mr) };
            if ret == 0 {
                return Ok(());
            }
            *mr = null_mut();
            self.nic.device_memory = DeviceMemory::Pointer;
            crate::log!(
                Warn,
                "{}: a dma-buf registration was refused ({}); registering device pointers",
                self.provider,
                super::strerror(ret)
            );
            refused = Some(ret);
        }
        let a = attr(self.take_key());
        // SAFETY: as above.
        let ret = unsafe { fi_mr_regattr(self.domain, &a.base, FI_HMEM_DEVICE_ONLY, mr) };
        if ret == 0 {
            return Ok(());
        }
        *mr = null_mut();
        let dmabuf_said = refused.map_or(String::new(), |r| format!("as a dma-buf: {} ({r}); ", super::strerror(r)));
        Err(Error::new(
            if ret == -(FI_ENOSYS as i32) { Status::Unsupported } else { Status::Provider },
            format!(
                "the {} provider refused memory of CUDA device {device}: {dmabuf_said}by device pointer \
                 (fi_mr_regattr FI_HMEM_CUDA): {} ({ret})",
                self.provider,
                super::strerror(ret)
            ),
        ))
    }

    pub fn deregister(&mut self, mr: &LocalMr) {
        // SAFETY: raw is an fid_mr from register, closed exactly once (the worker drops LocalMr after this).
        unsafe {
            fi_close(&mut (*(mr.raw as *mut fid_mr)).fid);
        }
    }
}

/// The requested keys an `mr_key_size`-byte key holds, less the top bit
/// (so never `FI_KEY_NOTAVAIL`).
fn key_mask(mr_key_size: usize) -> u64 {
    match mr_key_size {
        0 | 8.. => u64::MAX >> 1,
        n => (1u64 << (8 * n - 1)) - 1,
    }
}

impl Drop for FabricEndpoint {
    fn drop(&mut self) {
        // SAFETY: each object was opened by open (or is null) and is closed
        // once, endpoint first, as libfabric requires.
        unsafe {
            if !self.ep.is_null() {
                fi_close(&mut (*self.ep).fid);
            }
            if !self.av.is_null() {
                fi_close(&mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                fi_close(&mut (*self.cq).fid);
            }
            if !self.domain.is_null() {
                fi_close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                fi_close(&mut (*self.fabric).fid);
            }
            fi_freeinfo(self.info);
        }
    }
}
