//! The CUDA driver API, loaded at run time (`libcuda.so.1` through
//! `libloading`): `libfabriclib.so` has no `DT_NEEDED` on any CUDA library,
//! builds without CUDA, and on a machine without a driver every GPU call
//! returns `Unsupported` saying so. Only the entry points fabriclib needs are
//! resolved, by their versioned names.
//!
//! `FABRICLIB_NO_CUDA=1` makes fabriclib behave as if no driver were
//! installed (tests of the no-driver path on a GPU machine use it).
use crate::error::{Error, Result, Status};
use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuDevicePtr = u64;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;

const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;
const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;
const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;

/// Resolved driver entry points (the library stays loaded for the process).
#[allow(clippy::type_complexity)]
pub struct Cuda {
    _lib: libloading::Library,
    /// `cuDriverGetVersion`: e.g. 13000 for CUDA 13.0.
    pub version: i32,
    get_error_string: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    device_get_pci_bus_id: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult,
    ctx_get_current: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    ctx_push: unsafe extern "C" fn(CuContext) -> CuResult,
    ctx_pop: unsafe extern "C" fn(*mut CuContext) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    mem_host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CuResult,
    mem_host_get_device_pointer: unsafe extern "C" fn(*mut CuDevicePtr, *mut c_void, c_uint) -> CuResult,
    mem_free_host: unsafe extern "C" fn(*mut c_void) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    pointer_get_attribute: unsafe extern "C" fn(*mut c_void, c_int, CuDevicePtr) -> CuResult,
    /// CUDA >= 11.7 only.
    mem_get_handle_for_address_range:
        Option<unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize, c_int, u64) -> CuResult>,
    module_load_data: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    launch_kernel: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CuStream,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    /// Primary contexts retained by fabriclib, per device (never released:
    /// the driver keeps one per device anyway).
    primaries: Mutex<Vec<(CuDevice, usize)>>,
}

// SAFETY: the driver API is thread-safe; the struct holds function pointers,
// the library handle and a mutex.
unsafe impl Send for Cuda {}
unsafe impl Sync for Cuda {}

static CUDA: OnceLock<std::result::Result<Cuda, String>> = OnceLock::new();

/// The driver, loaded and initialised on first use; `Unsupported` (with
/// why) where there is none.
pub fn cuda() -> Result<&'static Cuda> {
    CUDA.get_or_init(Cuda::load).as_ref().map_err(|why| Error::new(Status::Unsupported, why.clone()))
}

/// Whether the process has loaded the CUDA driver already (the application
/// uses CUDA), without loading it: host registrations never initialise CUDA
/// in a process that does not use it.
pub fn loaded_by_process() -> bool {
    if std::env::var_os("FABRICLIB_NO_CUDA").is_some_and(|v| v != "0") {
        return false;
    }
    if CUDA.get().is_some_and(|c| c.is_ok()) {
        return true;
    }
    // SAFETY: RTLD_NOLOAD only looks the library up; nothing is initialised.
    let lib = unsafe {
        libloading::os::unix::Library::open(Some("libcuda.so.1"), libloading::os::unix::RTLD_NOW | libc_rtld_noload())
    };
    lib.is_ok()
}

/// Whether this machine has an NVIDIA driver (its control device), read
/// without loading CUDA; false with `FABRICLIB_NO_CUDA`.
pub fn driver_installed() -> bool {
    std::env::var_os("FABRICLIB_NO_CUDA").is_none_or(|v| v == "0") && std::path::Path::new("/dev/nvidiactl").exists()
}

/// `RTLD_NOLOAD` (glibc, every Linux architecture fabriclib builds for).
const fn libc_rtld_noload() -> c_int {
    4
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the symbol is the driver's entry point of that name, with
        // the signature of the field it is assigned to (cuda.h).
        *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| format!("the CUDA driver lacks {}: {e}", $name))?
    };
}

impl Cuda {
    fn load() -> std::result::Result<Cuda, String> {
        if std::env::var_os("FABRICLIB_NO_CUDA").is_some_and(|v| v != "0") {
            return Err("CUDA is disabled (FABRICLIB_NO_CUDA is set)".into());
        }
        // SAFETY: loading the CUDA driver runs its initialisers, which is what using CUDA means.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }
            .map_err(|e| format!("no CUDA driver: libcuda.so.1 could not be loaded ({e})"))?;
        let init: unsafe extern "C" fn(c_uint) -> CuResult = sym!(lib, "cuInit");
        let driver_version: unsafe extern "C" fn(*mut c_int) -> CuResult = sym!(lib, "cuDriverGetVersion");
        // SAFETY: entry points resolved above, called as documented.
        let r = unsafe { init(0) };
        if r != 0 {
            return Err(format!("the CUDA driver is present but cuInit failed (CUresult {r}): no usable GPU"));
        }
        let mut version = 0;
        // SAFETY: as above.
        unsafe { driver_version(&mut version) };
        // SAFETY: the symbol, if present, has this signature (CUDA >= 11.7).
        let mem_get_handle_for_address_range = unsafe { lib.get(b"cuMemGetHandleForAddressRange\0") }.ok().map(|s| *s);
        Ok(Cuda {
            version,
            get_error_string: sym!(lib, "cuGetErrorString"),
            device_get: sym!(lib, "cuDeviceGet"),
            device_get_count: sym!(lib, "cuDeviceGetCount"),
            device_get_attribute: sym!(lib, "cuDeviceGetAttribute"),
            device_get_pci_bus_id: sym!(lib, "cuDeviceGetPCIBusId"),
            primary_ctx_retain: sym!(lib, "cuDevicePrimaryCtxRetain"),
            ctx_get_current: sym!(lib, "cuCtxGetCurrent"),
            ctx_push: sym!(lib, "cuCtxPushCurrent_v2"),
            ctx_pop: sym!(lib, "cuCtxPopCurrent_v2"),
            ctx_synchronize: sym!(lib, "cuCtxSynchronize"),
            mem_host_alloc: sym!(lib, "cuMemHostAlloc"),
            mem_host_get_device_pointer: sym!(lib, "cuMemHostGetDevicePointer_v2"),
            mem_free_host: sym!(lib, "cuMemFreeHost"),
            mem_alloc: sym!(lib, "cuMemAlloc_v2"),
            mem_free: sym!(lib, "cuMemFree_v2"),
            memcpy_htod: sym!(lib, "cuMemcpyHtoD_v2"),
            memcpy_dtoh: sym!(lib, "cuMemcpyDtoH_v2"),
            pointer_get_attribute: sym!(lib, "cuPointerGetAttribute"),
            mem_get_handle_for_address_range,
            module_load_data: sym!(lib, "cuModuleLoadData"),
            module_get_function: sym!(lib, "cuModuleGetFunction"),
            launch_kernel: sym!(lib, "cuLaunchKernel"),
            primaries: Mutex::new(Vec::new()),
            _lib: lib,
        })
    }

    /// `Ok` for `CUDA_SUCCESS`, else `Provider` naming the call and the driver's words.
    fn check(&self, what: &str, r: CuResult) -> Result<()> {
        if r == 0 {
            return Ok(());
        }
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorString writes a pointer to a static string (or fails).
        let text = if unsafe { (self.get_error_string)(r, &mut s) } == 0 && !s.is_null() {
            // SAFETY: a static NUL-terminated string from the driver.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            "unknown error".into()
        };
        Err(Error::new(Status::Provider, format!("{what} failed: {text} (CUresult {r})")))
    }

    pub fn device_count(&self) -> Result<i32> {
        let mut n = 0;
        // SAFETY: driver entry point with a valid out-pointer.
        self.check("cuDeviceGetCount", unsafe { (self.device_get_count)(&mut n) })?;
        Ok(n)
    }

    fn device(&self, ordinal: i32) -> Result<CuDevice> {
        let n = self.device_count()?;
        if ordinal < 0 || ordinal >= n {
            crate::bail!(InvalidArgument, "CUDA device {ordinal} does not exist ({n} device(s))");
        }
        let mut d = 0;
        // SAFETY: as above.
        self.check("cuDeviceGet", unsafe { (self.device_get)(&mut d, ordinal) })?;
        Ok(d)
    }

    /// The PCI bus id of device `ordinal` (`0000:3b:00.0`).
    pub fn pci_bus_id(&self, ordinal: i32) -> Result<String> {
        let d = self.device(ordinal)?;
        let mut buf = [0 as c_char; 32];
        // SAFETY: the driver writes a NUL-terminated string of at most buf.len() bytes.
        self.check("cuDeviceGetPCIBusId", unsafe { (self.device_get_pci_bus_id)(buf.as_mut_ptr(), 32, d) })?;
        // SAFETY: NUL-terminated (above).
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    /// Whether device `ordinal` can export dma-bufs.
    pub fn dmabuf_supported(&self, ordinal: i32) -> Result<bool> {
        let d = self.device(ordinal)?;
        let mut v = 0;
        // SAFETY: as above.
        let r = unsafe { (self.device_get_attribute)(&mut v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, d) };
        Ok(r == 0 && v != 0 && self.mem_get_handle_for_address_range.is_some())
    }

    /// Runs `f` with a current context: the caller's if its thread has one,
    /// else device `ordinal`'s primary context (the one the CUDA runtime
    /// uses), pushed for the call and popped after.
    pub fn with_context<T>(&self, ordinal: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let mut cur: CuContext = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        self.check("cuCtxGetCurrent", unsafe { (self.ctx_get_current)(&mut cur) })?;
        if !cur.is_null() {
            return f();
        }
        let ctx = {
            let mut p = self.primaries.lock().unwrap_or_else(|e| e.into_inner());
            match p.iter().find(|(d, _)| *d == ordinal) {
                Some(&(_, c)) => c as CuContext,
                None => {
                    let dev = self.device(ordinal)?;
                    let mut c: CuContext = std::ptr::null_mut();
                    // SAFETY: valid out-pointer and device.
                    self.check("cuDevicePrimaryCtxRetain", unsafe { (self.primary_ctx_retain)(&mut c, dev) })?;
                    p.push((ordinal, c as usize));
                    c
                }
            }
        };
        // SAFETY: a retained primary context.
        self.check("cuCtxPushCurrent", unsafe { (self.ctx_push)(ctx) })?;
        let r = f();
        let mut popped: CuContext = std::ptr::null_mut();
        // SAFETY: pops what was pushed above.
        unsafe { (self.ctx_pop)(&mut popped) };
        r
    }

    /// The device that owns `ptr` if it is CUDA device memory (`cuMemAlloc`,
    /// `cudaMalloc`); `None` for host memory of any kind (pageable, pinned,
    /// mapped) and for managed memory, which the CPU can touch.
    pub fn device_of(&self, ptr: *const u8) -> Option<i32> {
        let mut kind: c_uint = 0;
        // SAFETY: the driver only reads the pointer's attributes; unknown pointers give an error.
        let r = unsafe {
            (self.pointer_get_attribute)(
                (&mut kind as *mut c_uint).cast(),
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr as u64,
            )
        };
        if r != 0 || kind != CU_MEMORYTYPE_DEVICE {
            return None;
        }
        let mut ordinal: c_int = 0;
        // SAFETY: as above.
        let r = unsafe {
            (self.pointer_get_attribute)(
                (&mut ordinal as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr as u64,
            )
        };
        (r == 0).then_some(ordinal)
    }

    /// Pinned host memory mapped into the device address space of every
    /// context (`cuMemHostAlloc(PORTABLE | DEVICEMAP)`): returns the host
    /// pointer and the device pointer a kernel uses.
    pub fn host_alloc_mapped(&self, ordinal: i32, len: usize) -> Result<(*mut u8, CuDevicePtr)> {
        self.with_context(ordinal, || {
            let mut host: *mut c_void = std::ptr::null_mut();
            let flags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP;
            // SAFETY: valid out-pointer; a current context (with_context).
            self.check("cuMemHostAlloc", unsafe { (self.mem_host_alloc)(&mut host, len, flags) })?;
            let mut dev: CuDevicePtr = 0;
            if let Err(e) = self.check(
                "cuMemHostGetDevicePointer",
                // SAFETY: host came from cuMemHostAlloc with DEVICEMAP; dev is a writable CuDevicePtr.
                unsafe { (self.mem_host_get_device_pointer)(&mut dev, host, 0) },
            ) {
                // SAFETY: allocated above.
                unsafe { (self.mem_free_host)(host) };
                return Err(e);
            }
            Ok((host.cast(), dev))
        })
    }

    /// Frees what `host_alloc_mapped` returned.
    ///
    /// # Safety
    /// `host` came from `host_alloc_mapped` and is not used afterwards.
    pub unsafe fn free_host(&self, host: *mut u8) {
        // SAFETY: the caller's contract.
        unsafe { (self.mem_free_host)(host.cast()) };
    }

    /// Exports `[ptr, ptr+len)` of device memory as a dma-buf
    /// (`cuMemGetHandleForAddressRange`, `DMA_BUF_FD`): returns the fd (the
    /// caller closes it) and the offset of `ptr` in it. The exported range
    /// is `ptr..ptr+len` widened to host pages, as the driver requires.
    pub fn export_dmabuf(&self, ordinal: i32, ptr: *const u8, len: usize) -> Result<(i32, u64)> {
        let Some(get) = self.mem_get_handle_for_address_range else {
            crate::bail!(Unsupported, "this CUDA driver ({}) cannot export dma-bufs (CUDA >= 11.7 can)", self.version);
        };
        if !self.dmabuf_supported(ordinal)? {
            crate::bail!(Unsupported, "CUDA device {ordinal} does not support dma-buf export");
        }
        let page = 4096u64;
        let start = ptr as u64 & !(page - 1);
        let end = (ptr as u64 + len as u64).div_ceil(page) * page;
        self.with_context(ordinal, || {
            let mut fd: c_int = -1;
            // SAFETY: valid out-pointer; the range is device memory of a current context.
            let r = unsafe {
                get(
                    (&mut fd as *mut c_int).cast(),
                    start,
                    (end - start) as usize,
                    CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                    0,
                )
            };
            self.check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", r)?;
            Ok((fd, ptr as u64 - start))
        })
    }

    /// Device memory (`cuMemAlloc`), for tests and the benchmark.
    pub fn mem_alloc(&self, ordinal: i32, len: usize) -> Result<CuDevicePtr> {
        self.with_context(ordinal, || {
            let mut p: CuDevicePtr = 0;
            // SAFETY: valid out-pointer.
            self.check("cuMemAlloc", unsafe { (self.mem_alloc)(&mut p, len) })?;
            Ok(p)
        })
    }

    /// # Safety
    /// `p` came from `mem_alloc` and is not used afterwards.
    pub unsafe fn mem_free(&self, ordinal: i32, p: CuDevicePtr) -> Result<()> {
        // SAFETY: the caller's contract.
        self.with_context(ordinal, || self.check("cuMemFree", unsafe { (self.mem_free)(p) }))
    }

    /// Copies host bytes to device memory (synchronous).
    pub fn copy_to_device(&self, ordinal: i32, dst: CuDevicePtr, src: &[u8]) -> Result<()> {
        self.with_context(ordinal, || {
            // SAFETY: src is valid for its length; dst is the caller's device memory.
            self.check("cuMemcpyHtoD", unsafe { (self.memcpy_htod)(dst, src.as_ptr().cast(), src.len()) })
        })
    }

    /// Copies device memory to host bytes (synchronous).
    pub fn copy_from_device(&self, ordinal: i32, dst: &mut [u8], src: CuDevicePtr) -> Result<()> {
        self.with_context(ordinal, || {
            // SAFETY: dst is valid for its length; src is the caller's device memory.
            self.check("cuMemcpyDtoH", unsafe { (self.memcpy_dtoh)(dst.as_mut_ptr().cast(), src, dst.len()) })
        })
    }

    /// Loads a PTX (or cubin) image and returns its function `name`, for
    /// tests and the benchmark (their kernels ship as PTX text).
    pub fn function(&self, ordinal: i32, image: &CStr, name: &CStr) -> Result<CuFunction> {
        self.with_context(ordinal, || {
            let mut m: CuModule = std::ptr::null_mut();
            // SAFETY: a NUL-terminated image.
            self.check("cuModuleLoadData", unsafe { (self.module_load_data)(&mut m, image.as_ptr().cast()) })?;
            let mut f: CuFunction = std::ptr::null_mut();
            // SAFETY: a loaded module and a NUL-terminated name.
            self.check("cuModuleGetFunction", unsafe { (self.module_get_function)(&mut f, m, name.as_ptr()) })?;
            Ok(f)
        })
    }

    /// Launches `f` on one block of `threads` threads on the default stream
    /// of device `ordinal`'s context; `params` point at the kernel's
    /// arguments, in order.
    ///
    /// # Safety
    /// `f` came from `function`, and `params` match its parameters.
    pub unsafe fn launch(&self, ordinal: i32, f: CuFunction, threads: u32, params: &mut [*mut c_void]) -> Result<()> {
        self.with_context(ordinal, || {
            // SAFETY: a function of a loaded module; params match its signature (the caller's contract).
            let r = unsafe {
                (self.launch_kernel)(
                    f,
                    1,
                    1,
                    1,
                    threads,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            self.check("cuLaunchKernel", r)
        })
    }

    /// Waits for every kernel launched in device `ordinal`'s context.
    pub fn synchronize(&self, ordinal: i32) -> Result<()> {
        // SAFETY: a current context (with_context).
        self.with_context(ordinal, || self.check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_gpu_calls_say_unsupported() {
        // CI has no driver; on a GPU machine this checks the loaded driver instead.
        match cuda() {
            Err(e) => {
                assert_eq!(e.status, Status::Unsupported);
                assert!(e.message.contains("CUDA"), "{e}");
                assert!(!loaded_by_process());
            }
            Ok(c) => assert!(c.version > 0),
        }
    }
}
