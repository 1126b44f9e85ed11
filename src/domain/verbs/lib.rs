//! libibverbs, loaded at run time (`libibverbs.so.1` through `libloading`),
//! and a thin safe layer over the objects fabriclib uses: a device context,
//! a protection domain, memory regions, completion queues, queue pairs.
//!
//! `libfabriclib.so` has no `DT_NEEDED` on rdma-core: it loads on a machine
//! without it, and there `Verbs::get` returns `Unsupported` saying what is
//! missing. Only exported entry points are resolved; the data path's inline
//! calls (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`) go through the
//! context's ops table, exactly as verbs.h's inline functions do. Entry
//! points newer than rdma-core 17 (`ibv_reg_dmabuf_mr`, `ibv_reg_mr_iova2`)
//! are optional: `None` where the library lacks them, and the caller says so.
//!
//! Why our own loader and not `rdma-mummy-sys`: the same loader style as
//! CUDA's (gpu/cuda.rs) and, later, libfabric's; the types come from the
//! system's own headers through the bindgen step the build already has; no
//! vendored C stub to build with cmake on every CI run.
use super::sys::*;
use crate::error::{Error, Result, Status};
use std::ffi::{CStr, CString, c_int, c_void};
use std::sync::{Arc, OnceLock};

mod objects;
pub use objects::*;

/// Resolved entry points (the library stays loaded for the process).
#[allow(clippy::type_complexity)]
pub struct Verbs {
    _lib: libloading::Library,
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const std::ffi::c_char,
    open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    close_device: unsafe extern "C" fn(*mut ibv_context) -> c_int,
    query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    /// The exported (compat) `ibv_query_port`: fills every field but the
    /// newest trailing ones, which fabriclib does not read.
    query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
    create_cq: unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    get_cq_event: unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, u32),
    create_srq: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
    create_ah: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah,
    destroy_ah: unsafe extern "C" fn(*mut ibv_ah) -> c_int,
    /// rdma-core >= 34 (dma-buf registration of device memory).
    pub reg_dmabuf_mr: Option<unsafe extern "C" fn(*mut ibv_pd, u64, usize, u64, c_int, c_int) -> *mut ibv_mr>,
    /// rdma-core >= 29 (takes access flags such as `IBV_ACCESS_RELAXED_ORDERING`).
    pub reg_mr_iova2: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, u64, u32) -> *mut ibv_mr>,
}

// SAFETY: function pointers and the library handle; libibverbs is thread-safe.
unsafe impl Send for Verbs {}
unsafe impl Sync for Verbs {}

static VERBS: OnceLock<std::result::Result<Verbs, String>> = OnceLock::new();

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the symbol is libibverbs' exported entry point of that
        // name, with the signature of the field it is assigned to (verbs.h).
        *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| format!("libibverbs.so.1 lacks {}: {e}", $name))?
    };
}

macro_rules! optional {
    ($lib:expr, $name:literal) => {
        // SAFETY: as in `sym!`; absent in older rdma-core.
        unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s| *s)
    };
}

impl Verbs {
    /// libibverbs, loaded on first use; `Unsupported` (with why) where it
    /// cannot be.
    pub fn get() -> Result<&'static Verbs> {
        VERBS.get_or_init(Verbs::load).as_ref().map_err(|why| Error::new(Status::Unsupported, why.clone()))
    }

    fn load() -> std::result::Result<Verbs, String> {
        // SAFETY: loading rdma-core's library runs its constructors, which
        // only read configuration (provider drivers are loaded lazily).
        let lib = unsafe { libloading::Library::new("libibverbs.so.1") }.map_err(|e| {
            format!("the verbs backend needs rdma-core's libibverbs.so.1 (Debian/Ubuntu: apt install ibverbs-providers): {e}")
        })?;
        Ok(Verbs {
            get_device_list: sym!(lib, "ibv_get_device_list"),
            free_device_list: sym!(lib, "ibv_free_device_list"),
            get_device_name: sym!(lib, "ibv_get_device_name"),
            open_device: sym!(lib, "ibv_open_device"),
            close_device: sym!(lib, "ibv_close_device"),
            query_device: sym!(lib, "ibv_query_device"),
            query_port: sym!(lib, "ibv_query_port"),
            query_gid: sym!(lib, "ibv_query_gid"),
            alloc_pd: sym!(lib, "ibv_alloc_pd"),
            dealloc_pd: sym!(lib, "ibv_dealloc_pd"),
            reg_mr: sym!(lib, "ibv_reg_mr"),
            dereg_mr: sym!(lib, "ibv_dereg_mr"),
            create_cq: sym!(lib, "ibv_create_cq"),
            destroy_cq: sym!(lib, "ibv_destroy_cq"),
            create_qp: sym!(lib, "ibv_create_qp"),
            destroy_qp: sym!(lib, "ibv_destroy_qp"),
            modify_qp: sym!(lib, "ibv_modify_qp"),
            create_comp_channel: sym!(lib, "ibv_create_comp_channel"),
            destroy_comp_channel: sym!(lib, "ibv_destroy_comp_channel"),
            get_cq_event: sym!(lib, "ibv_get_cq_event"),
            ack_cq_events: sym!(lib, "ibv_ack_cq_events"),
            create_srq: sym!(lib, "ibv_create_srq"),
            destroy_srq: sym!(lib, "ibv_destroy_srq"),
            create_ah: sym!(lib, "ibv_create_ah"),
            destroy_ah: sym!(lib, "ibv_destroy_ah"),
            reg_dmabuf_mr: optional!(lib, "ibv_reg_dmabuf_mr"),
            reg_mr_iova2: optional!(lib, "ibv_reg_mr_iova2"),
            _lib: lib,
        })
    }

    /// The names of the verbs devices of this machine (`ibv_get_device_list`).
    pub fn device_names(&self) -> Result<Vec<String>> {
        let mut n: c_int = 0;
        // SAFETY: n is a valid out-pointer; the list is freed below.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(os_error("ibv_get_device_list"));
        }
        let names = (0..n as usize)
            // SAFETY: the list has n valid device pointers; names are C strings owned by the device.
            .map(|i| unsafe { CStr::from_ptr((self.get_device_name)(*list.add(i))) }.to_string_lossy().into_owned())
            .collect();
        // SAFETY: the list came from ibv_get_device_list and is freed once.
        unsafe { (self.free_device_list)(list) };
        Ok(names)
    }
}

/// `what` failed with errno.
fn os_error(what: &str) -> Error {
    Error::new(Status::Provider, format!("{what}: {}", std::io::Error::last_os_error()))
}

/// `what` returned `rc` (libibverbs returns the errno itself, or -1 with errno set).
fn rc_error(what: &str, rc: c_int) -> Error {
    let e = if rc > 0 { std::io::Error::from_raw_os_error(rc) } else { std::io::Error::last_os_error() };
    Error::new(Status::Provider, format!("{what}: {e}"))
}

/// An open device (`ibv_open_device`), closed when the last object made
/// from it is gone.
pub struct Context {
    verbs: &'static Verbs,
    ctx: *mut ibv_context,
    name: String,
}

// SAFETY: a device context may be used from any thread (libibverbs locks
// what it shares); fabriclib's worker owns its own.
unsafe impl Send for Context {}
unsafe impl Sync for Context {}

impl Context {
    /// Opens the device named `name`.
    pub fn open(name: &str) -> Result<Arc<Context>> {
        let verbs = Verbs::get()?;
        let mut n: c_int = 0;
        // SAFETY: as in `device_names`.
        let list = unsafe { (verbs.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(os_error("ibv_get_device_list"));
        }
        let want = CString::new(name).map_err(|_| Error::new(Status::InvalidArgument, "a NUL in a device name"))?;
        let mut ctx = std::ptr::null_mut();
        for i in 0..n as usize {
            // SAFETY: the list has n valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a device's name is a C string it owns.
            if unsafe { CStr::from_ptr((verbs.get_device_name)(dev)) } == want.as_c_str() {
                // SAFETY: dev is valid until the list is freed; the context outlives it.
                ctx = unsafe { (verbs.open_device)(dev) };
                if ctx.is_null() {
                    let e = os_error(&format!("ibv_open_device({name})"));
                    // SAFETY: freed once.
                    unsafe { (verbs.free_device_list)(list) };
                    return Err(e);
                }
                break;
            }
        }
        // SAFETY: freed once; the open context does not need the list.
        unsafe { (verbs.free_device_list)(list) };
        if ctx.is_null() {
            crate::bail!(InvalidArgument, "no verbs device named {name:?}");
        }
        Ok(Arc::new(Context { verbs, ctx, name: name.to_string() }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn raw(&self) -> *mut ibv_context {
        self.ctx
    }

    pub fn query_device(&self) -> Result<ibv_device_attr> {
        let mut a = ibv_device_attr::default();
        // SAFETY: a valid context and out-struct.
        match unsafe { (self.verbs.query_device)(self.ctx, &mut a) } {
            0 => Ok(a),
            rc => Err(rc_error("ibv_query_device", rc)),
        }
    }

    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr> {
        let mut a = ibv_port_attr::default();
        // SAFETY: a valid context and out-struct (the compat entry point
        // writes a prefix of it).
        match unsafe { (self.verbs.query_port)(self.ctx, port, &mut a) } {
            0 => Ok(a),
            rc => Err(rc_error("ibv_query_port", rc)),
        }
    }

    /// GID `index` of `port` (16 bytes, network order); `None` past the table.
    pub fn gid(&self, port: u8, index: i32) -> Option<[u8; 16]> {
        let mut g = ibv_gid::default();
        // SAFETY: a valid context and out-union.
        if unsafe { (self.verbs.query_gid)(self.ctx, port, index, &mut g) } != 0 {
            return None;
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        Some(unsafe { g.raw })
    }

    /// A completion channel, its fd non-blocking: readable once an armed
    /// completion queue on it has a new completion.
    pub fn create_channel(self: &Arc<Context>) -> Result<Channel> {
        // SAFETY: a valid context.
        let ch = unsafe { (self.verbs.create_comp_channel)(self.ctx) };
        if ch.is_null() {
            return Err(os_error("ibv_create_comp_channel"));
        }
        let c = Channel { ctx: self.clone(), ch };
        crate::os::set_nonblocking(c.fd())
            .map_err(|e| Error::new(Status::Provider, format!("completion channel: {e}")))?;
        Ok(c)
    }
}

/// A completion channel (the fd an idle worker sleeps on).
pub struct Channel {
    ctx: Arc<Context>,
    ch: *mut ibv_comp_channel,
}

// SAFETY: as Context.
unsafe impl Send for Channel {}

impl Channel {
    pub fn fd(&self) -> i32 {
        // SAFETY: a valid channel.
        unsafe { (*self.ch).fd }
    }

    /// Takes (and acknowledges) the events waiting on the channel; how many.
    pub fn drain(&self) -> u32 {
        let mut n = 0;
        loop {
            let (mut cq, mut cq_ctx) = (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: a valid channel; its fd is non-blocking, so this returns -1 when empty.
            if unsafe { (self.ctx.verbs.get_cq_event)(self.ch, &mut cq, &mut cq_ctx) } != 0 {
                return n;
            }
            // SAFETY: cq is the queue the event was for; one event acknowledged.
            unsafe { (self.ctx.verbs.ack_cq_events)(cq, 1) };
            n += 1;
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the CQs on it are destroyed first (the owner's field order).
        unsafe { (self.ctx.verbs.destroy_comp_channel)(self.ch) };
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every object made from it holds an Arc of it, so none is left.
        unsafe { (self.verbs.close_device)(self.ctx) };
    }
}
