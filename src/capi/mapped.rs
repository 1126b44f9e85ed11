//! Mapped memory: host memory a CUDA kernel and the CPU both reach (for
//! watcher words and completion flags), and the CUDA driver behind it.
use super::*;
use crate::gpu::{Mapped, MemoryKind};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

#[allow(non_camel_case_types)]
type fabriclib_memory = u32; // C: enum fabriclib_memory (codes.rs)

/// Mapped allocations by host address (for `fabriclib_mapped_free`).
static MAPPED: LazyLock<Mutex<HashMap<usize, Mapped>>> = LazyLock::new(Default::default);

/// === Mapped memory ===
/// Host memory that both the CPU and a CUDA kernel reach (watcher words,
/// completion flags), and the CUDA driver fabriclib loads at run time.
///
/// Allocates `len` bytes, zeroed and 64-byte aligned, of `memory`
/// (`FABRICLIB_MEMORY_*`) that the CPU reaches at `*host` and a kernel at
/// `*device_ptr` (0 for plain host memory; `device_ptr` may be NULL): the
/// place for completion flags and mirrored immediate counters that a kernel
/// polls. Free with `fabriclib_mapped_free`. Needs no engine. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer, a zero length, or a kind
/// that is not a `FABRICLIB_MEMORY_*`); `UNSUPPORTED` (CUDA-mapped memory
/// without a CUDA driver); `PROVIDER` (the allocation failed).
/// Blocks: briefly (an allocation; CUDA's `cuMemHostAlloc` for mapped memory).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mapped_alloc(
    len: usize,
    memory: fabriclib_memory,
    device: i32,
    host: *mut *mut c_void,
    device_ptr: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        non_null(host, "host")?;
        let m = Mapped::new(MemoryKind::from_code(memory)?, device, len)?;
        let (h, d) = (m.host(), m.device().unwrap_or(0));
        MAPPED.lock().unwrap_or_else(|e| e.into_inner()).insert(h as usize, m);
        put_opt(device_ptr, d)?;
        put(host, h.cast())
    })
}

/// Frees what `fabriclib_mapped_alloc` returned (NULL is a no-op; another
/// pointer is refused with `FABRICLIB_STATUS_INVALID_ARGUMENT`).
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a pointer `fabriclib_mapped_alloc` did
/// not return, or already freed).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mapped_free(host: *mut c_void) -> fabriclib_status {
    ffi(|| {
        if host.is_null() {
            return Ok(());
        }
        match MAPPED.lock().unwrap_or_else(|e| e.into_inner()).remove(&(host as usize)) {
            Some(_) => Ok(()),
            None => crate::bail!(InvalidArgument, "fabriclib_mapped_free: {host:p} is not from fabriclib_mapped_alloc"),
        }
    })
}

/// Writes the CUDA driver's version (e.g. 13000) to `*version`;
/// `FABRICLIB_STATUS_UNSUPPORTED` (with why in the last error message) if
/// there is no usable driver. Loads the driver on first use.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`version` NULL); `UNSUPPORTED` (no CUDA
/// driver: the message says why).
/// Blocks: the first call loads the CUDA driver library (milliseconds); later
/// calls do not.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_cuda_driver_version(version: *mut i32) -> fabriclib_status {
    ffi(|| put(version, crate::gpu::cuda::cuda()?.version))
}
