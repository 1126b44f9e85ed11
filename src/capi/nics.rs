//! NICs and groups: the NICs an engine opened, its DomainGroups and their
//! addresses.
type fabriclib_device_path = u32; // C: enum fabriclib_device_path (codes.rs)
use super::*;

/// === NICs and groups ===
/// The NICs an engine opened (names, NUMA nodes) and its DomainGroups: one
/// worker and a set of NICs each, with an address per group and one for the engine.
///
/// Writes the name of NIC `nic` (the provider's name for it, e.g.
/// `"eth0"`, `"rdmap16s27-rdm"`, `"shm"`) to `*out`, and its NUMA node to
/// `*numa` if not NULL (-1 where the system does not say, as in most VMs);
/// the string lives as long as the engine. NICs are numbered across the
/// engine, group 0's first, then group 1's, and so on (the numbering of
/// `FABRICLIB_ROUTE_NIC` and `fabriclib_engine_counters`).
/// `INVALID_ARGUMENT` if the engine has no NIC `nic`. Any thread.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only the lengths written);
/// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
/// foreign engine); `INVALID_ARGUMENT` also for a NIC the engine does not have.
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_nic(
    engine: *const fabriclib_engine,
    nic: u32,
    out: *mut *const c_char,
    numa: *mut i32,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let Some(name) = e.nic_names.get(nic as usize) else {
            crate::bail!(InvalidArgument, "NIC {nic}: the engine has {}", e.nic_names.len());
        };
        if !numa.is_null() {
            let n = e.engine.nics()[nic as usize].numa.map_or(-1, |n| n as i32);
            // SAFETY: non-null, and the caller passes a writable int (API contract).
            unsafe { numa.write(n) };
        }
        put(out, name.as_ptr())
    })
}

/// Writes whether and how NIC `nic` (numbered as `fabriclib_engine_nic`)
/// takes CUDA device memory to `*out`: `FABRICLIB_DEVICE_PATH_NONE` (it does
/// not: `fabriclib_mr_register_device` returns `UNSUPPORTED`), `_IPC` (the
/// provider copies through CUDA IPC between processes of one host: shm),
/// `_DMABUF` (the NIC reaches GPU memory, registered as a dma-buf first) or
/// `_POINTER` (registered by device pointer). With `_DMABUF` a registration
/// the provider refuses as a dma-buf is made by device pointer. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a NIC the engine
/// does not have.
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_nic_device_memory(
    engine: *const fabriclib_engine,
    nic: u32,
    out: *mut fabriclib_device_path,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let Some(n) = e.engine.nics().get(nic as usize) else {
            crate::bail!(InvalidArgument, "NIC {nic}: the engine has {}", e.engine.nics().len());
        };
        put(out, n.device_memory as fabriclib_device_path)
    })
}

/// Writes how many DomainGroups the engine has to `*out` (1 unless
/// `fabriclib_config_add_group` added them). Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_group_count(engine: *const fabriclib_engine, out: *mut u32) -> fabriclib_status {
    ffi(|| put(out, handle(engine)?.engine.group_count() as u32))
}

/// Copies group `group`'s address (the same kind of blob as
/// `fabriclib_engine_address`, which is group 0's): the descriptors of
/// regions registered in the group carry it. Buffer rules as in
/// `fabriclib_engine_address`; `INVALID_ARGUMENT` for a group the engine
/// does not have. Any thread.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
/// (a NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `INVALID_ARGUMENT` also for a group the engine does not have.
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_group_address(
    engine: *const fabriclib_engine,
    group: u32,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let Some(a) = e.engine.group_address(group as usize) else {
            crate::bail!(InvalidArgument, "group {group}: the engine has {}", e.engine.group_count());
        };
        write_blob(&a.to_bytes(), buf, cap, len)
    })
}

/// Copies every group's address, group 0's first (a "groups" blob: the
/// engine's groups × NICs; `FABRICLIB_MAX_ENGINE_ADDRESS_LEN` bytes always
/// fit), for a peer's `fabriclib_peer_add_engine`. Buffer rules as in
/// `fabriclib_engine_address`. Any thread.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
/// (a NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_groups_address(
    engine: *const fabriclib_engine,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| write_blob(&handle(engine)?.engine.groups_address().to_bytes(), buf, cap, len))
}
