//! Remote regions (`fabriclib_remote_mr`): a peer's registered region as
//! its descriptor blob names it, parsed once and written to by the submits.
use super::*;
use crate::wire::MrDesc;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

type fabriclib_region_memory = u32; // C: enum fabriclib_region_memory (codes.rs)

/// A peer's registered region, as parsed from its descriptor. Immutable:
/// may be used from any thread at once.
pub struct fabriclib_remote_mr {
    magic: AtomicU64,
    pub(crate) desc: Arc<MrDesc>,
}

super::impl_handle!(fabriclib_remote_mr, 0xfab1_4e30_0000_0004, "remote memory region");

/// === Remote regions ===
/// `fabriclib_remote_mr`: a peer's registered region, parsed once from its
/// descriptor blob; the destination of writes, immutable, shared by any thread.
///
/// Parses a peer's descriptor (`len` bytes at `buf`). Truncated, padded,
/// corrupt or unknown-version blobs give `FABRICLIB_STATUS_MALFORMED`: every
/// address and descriptor blob ends with a CRC-32C of its bytes, so a blob
/// damaged on its way (any single flipped bit, any truncation) is refused,
/// never used. The checksum is no defence against a deliberately forged
/// blob: descriptors must come from a channel you trust. `*out`
/// receives a handle the caller frees with `fabriclib_remote_mr_free`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `MALFORMED` (not a
/// descriptor: its version, length or checksum is wrong).
/// Blocks: no.
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
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a freed or
/// foreign descriptor).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_len(mr: *const fabriclib_remote_mr, len: *mut u64) -> fabriclib_status {
    ffi(|| put(len, handle(mr)?.desc.len))
}

/// Writes what memory a peer's region is to `*memory`: a
/// `FABRICLIB_REGION_MEMORY_*` (host, or GPU memory of the owner).
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a freed or
/// foreign descriptor).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_memory(
    mr: *const fabriclib_remote_mr,
    memory: *mut fabriclib_region_memory,
) -> fabriclib_status {
    ffi(|| put(memory, handle(mr)?.desc.memory as u32))
}

/// Frees a parsed descriptor (NULL is a no-op). Requests already submitted
/// with it are unaffected.
///
/// Returns: nothing (NULL is ignored).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_free(mr: *mut fabriclib_remote_mr) {
    release(mr);
}

/// Copies the address of the engine group that holds a peer's region (the
/// group it was registered in, as that group's `fabriclib_engine_group_address`
/// gives it) into `buf` of `cap` bytes, and its length into `*len`. With
/// DomainGroups, a peer set for scatters and barriers into this region must
/// list this address; `fabriclib_peer_add` and `fabriclib_peer_state` take
/// it too. If `cap` is too small (or `buf` is NULL), only `*len` is written.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
/// (`len` NULL); `BAD_HANDLE` (a freed or foreign descriptor).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remote_mr_owner(
    mr: *const fabriclib_remote_mr,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| write_blob(&handle(mr)?.desc.owner.to_bytes(), buf, cap, len))
}
