//! Memory regions (`fabriclib_mr`): local memory registered with every NIC
//! of its group, the source of writes and the target of peers' writes.
use super::{fabriclib_engine, fabriclib_status, ffi, give, handle, non_null, put, release, write_blob};
use crate::engine::MrHandle;
use std::ffi::c_void;
use std::sync::atomic::AtomicU64;

/// A registered local region: the source of writes, and (through its
/// descriptor) the target of peers' writes.
pub struct fabriclib_mr {
    magic: AtomicU64,
    pub(crate) mr: MrHandle,
}

super::impl_handle!(fabriclib_mr, 0xfab1_0e90_0000_0003, "memory region");

impl fabriclib_mr {
    pub(crate) fn new(mr: MrHandle) -> fabriclib_mr {
        fabriclib_mr { magic: AtomicU64::new(0), mr }
    }
}

/// The body of every `fabriclib_mr_register*`: checks the engine and `out`,
/// registers with `reg`, hands out the handle.
pub(crate) fn register_with(
    engine: *const fabriclib_engine,
    out: *mut *mut fabriclib_mr,
    reg: impl FnOnce(&crate::engine::TransferEngine) -> crate::error::Result<MrHandle>,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        non_null(out, "out")?;
        give(out, fabriclib_mr::new(reg(&e.engine)?))
    })
}

/// === Memory regions ===
/// `fabriclib_mr`: local memory registered with the NICs of its group, the
/// source of writes and the target of peers' writes; its descriptor goes to peers.
///
/// Registers `len` bytes of host memory at `ptr` with every NIC of its
/// group. The memory must stay valid until `fabriclib_mr_deregister` and
/// until every request using it has completed. `*out` receives the handle.
/// Any thread (registrations are serialised on the worker).
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero length;
/// `PROVIDER` (the NIC refused the registration: memory locked beyond `ulimit
/// -l`, or not mapped); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_register(
    engine: *const fabriclib_engine,
    ptr: *mut c_void,
    len: usize,
    out: *mut *mut fabriclib_mr,
) -> fabriclib_status {
    // SAFETY: the caller guarantees ptr..ptr+len is valid memory (API contract).
    register_with(engine, out, |e| unsafe { e.register(ptr.cast(), len) })
}

/// Registers `len` bytes at `ptr` in group `group` of the engine
/// (`fabriclib_config_add_group`) whatever memory it is, where
/// `fabriclib_mr_register` would choose the group of the memory's GPU or
/// NUMA node: host memory with `device` -1, else CUDA device memory of
/// `device` (as `fabriclib_mr_register_device`). `INVALID_ARGUMENT` for a
/// group the engine does not have. Otherwise as `fabriclib_mr_register`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero length or a
/// group the engine does not have; `PROVIDER` (the NIC refused the
/// registration); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_register_in_group(
    engine: *const fabriclib_engine,
    group: u32,
    ptr: *mut c_void,
    len: usize,
    device: i32,
    out: *mut *mut fabriclib_mr,
) -> fabriclib_status {
    let device = (device >= 0).then_some(device);
    // SAFETY: the caller guarantees ptr..ptr+len is valid memory (API contract).
    register_with(engine, out, |e| unsafe { e.register_in_group(group as usize, ptr.cast(), len, device) })
}

/// Registers `len` bytes of CUDA device memory of GPU `device` at `ptr`
/// (`fabriclib_mr_register` detects device memory by itself when the process
/// uses CUDA; this says it explicitly). The region is exported as a dma-buf
/// where the driver can and handed to the provider as GPU memory; a provider
/// without `FI_HMEM` (tcp and shm of the distributions' libfabric) refuses with
/// `FABRICLIB_STATUS_UNSUPPORTED`, naming itself. `UNSUPPORTED` too without a
/// CUDA driver; `INVALID_ARGUMENT` if `ptr` is not device memory of `device`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero length or a
/// pointer that is not CUDA device memory; `UNSUPPORTED` (no CUDA driver, or a
/// provider or backend that cannot register device memory); `PROVIDER` (the NIC
/// refused it); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_register_device(
    engine: *const fabriclib_engine,
    ptr: *mut c_void,
    len: usize,
    device: i32,
    out: *mut *mut fabriclib_mr,
) -> fabriclib_status {
    // SAFETY: the caller guarantees ptr..ptr+len is its device memory (API contract).
    super::memory::register_with(engine, out, |e| unsafe { e.register_memory(ptr.cast(), len, Some(device)) })
}

/// Writes the index of the engine's group the region is registered in
/// (0 for an engine of one group) to `*out`. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a
/// deregistered or foreign region).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_group(mr: *const fabriclib_mr, out: *mut u32) -> fabriclib_status {
    ffi(|| put(out, handle(mr)?.mr.group() as u32))
}

/// Releases a registration (NULL is a no-op). Requests still using it keep it
/// alive until they complete; the memory may be freed once they have.
///
/// Returns: nothing (NULL is ignored).
/// Blocks: no: the registration is released once no request uses it.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_deregister(mr: *mut fabriclib_mr) {
    release(mr);
}

/// Copies the region's descriptor (versioned binary blob: address, length and
/// one key per NIC) for a peer to parse with `fabriclib_remote_mr_parse`.
/// Buffer rules as in `fabriclib_engine_address`. Any thread.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
/// (a NULL pointer); `BAD_HANDLE` (a deregistered or foreign region).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_descriptor(
    mr: *const fabriclib_mr,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| write_blob(&handle(mr)?.mr.descriptor().to_bytes(), buf, cap, len))
}
