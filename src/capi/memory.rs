//! `fabriclib_mr` (a local registered region) and `fabriclib_remote_mr` (a
//! peer's region, parsed from its descriptor).
use super::{bytes, fabriclib_engine, fabriclib_status, ffi, give, handle, non_null, put, release, write_blob};
use crate::engine::MrHandle;
use crate::wire::MrDesc;
use std::ffi::c_void;
use std::sync::Arc;
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

/// A peer's registered region, as parsed from its descriptor. Immutable:
/// may be used from any thread at once.
pub struct fabriclib_remote_mr {
    magic: AtomicU64,
    pub(crate) desc: Arc<MrDesc>,
}

super::impl_handle!(fabriclib_remote_mr, 0xfab1_4e30_0000_0004, "remote memory region");

/// Registers `len` bytes of host memory at `ptr` with every domain of the
/// engine. The memory must stay valid until `fabriclib_mr_deregister` and
/// until every request using it has completed. `*out` receives the handle.
/// Any thread (registrations are serialised on the worker).
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

/// Registers `len` bytes at `ptr` in group `group` of the engine
/// (`fabriclib_config_add_group`) whatever memory it is, where
/// `fabriclib_mr_register` would choose the group of the memory's GPU or
/// NUMA node: host memory with `device` -1, else CUDA device memory of
/// `device` (as `fabriclib_mr_register_device`). `INVALID_ARGUMENT` for a
/// group the engine does not have. Otherwise as `fabriclib_mr_register`.
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

/// Writes the index of the engine's group the region is registered in
/// (0 for an engine of one group) to `*out`. Any thread.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_group(mr: *const fabriclib_mr, out: *mut u32) -> fabriclib_status {
    ffi(|| put(out, handle(mr)?.mr.group() as u32))
}

/// Releases a registration (NULL is a no-op). Requests still using it keep it
/// alive until they complete; the memory may be freed once they have.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_deregister(mr: *mut fabriclib_mr) {
    release(mr);
}

/// Copies the region's descriptor (versioned binary blob: address, length and
/// one key per domain) for a peer to parse with `fabriclib_remote_mr_parse`.
/// Buffer rules as in `fabriclib_engine_address`. Any thread.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_mr_descriptor(
    mr: *const fabriclib_mr,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| write_blob(&handle(mr)?.mr.descriptor().to_bytes(), buf, cap, len))
}

/// Parses a peer's descriptor (`len` bytes at `buf`). Truncated, padded,
/// corrupt or unknown-version blobs give `FABRICLIB_STATUS_MALFORMED`: every
/// address and descriptor blob ends with a CRC-32C of its bytes, so a blob
/// damaged on its way (any single flipped bit, any truncation) is refused,
/// never used. The checksum is no defence against a deliberately forged
/// blob: descriptors must come from a channel you trust. `*out`
/// receives a handle the caller frees with `fabriclib_remote_mr_free`.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_parse(
    buf: *const u8,
    len: usize,
    out: *mut *mut fabriclib_remote_mr,
) -> fabriclib_status {
    ffi(|| {
        non_null(buf, "buf")?;
        non_null(out, "out")?;
        let desc = Arc::new(MrDesc::parse(bytes(buf, len, "buf")?)?);
        give(out, fabriclib_remote_mr { magic: AtomicU64::new(0), desc })
    })
}

/// Writes the length in bytes of a peer's region to `*len`.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_len(mr: *const fabriclib_remote_mr, len: *mut u64) -> fabriclib_status {
    ffi(|| put(len, handle(mr)?.desc.len))
}

/// Frees a parsed descriptor (NULL is a no-op). Requests already submitted
/// with it are unaffected.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_free(mr: *mut fabriclib_remote_mr) {
    release(mr);
}
