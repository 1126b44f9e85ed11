//! The data path: sends, receives, immediate expectations, writes, peer
//! sets, scatter and barrier.
use super::{
    address, bytes, fabriclib_engine, fabriclib_mr, fabriclib_remote_mr, fabriclib_status, ffi, handle, list, non_null,
    put_opt,
};
use crate::completion::notify::{Deadline, OnDone, RawFlag, RequestId, RequestOpts};
use crate::engine::{Pages, PeerSet, ScatterDst};
use crate::error::{Error, Result, Status};
use std::ffi::c_void;

#[allow(non_camel_case_types)]
type fabriclib_route = u32; // C: enum fabriclib_route (codes.rs)

/// Called once when a request ends: `status` is `FABRICLIB_STATUS_OK` or why
/// it failed; during a call with an error, `fabriclib_last_error_message()`
/// gives the details (for `FABRICLIB_STATUS_PROVIDER`, libfabric's error text
/// and number; a flag user reads the same with `fabriclib_request_error`).
/// Runs on the engine's callback thread; must not block for long
/// (it delays other callbacks) and must not throw (C++: declare it
/// `FABRICLIB_NOEXCEPT`). Any fabriclib call may be made from it (see the
/// header's preamble).
pub type fabriclib_done_cb = Option<unsafe extern "C" fn(user_data: *mut c_void, status: fabriclib_status)>;

/// Options of one request: how it reports its end, its deadline, and which
/// NICs carry it (later versions add fields at the end: a CUDA stream).
/// Pass NULL for no report and the engine's default deadline. Zero-initialise
/// it, set `struct_size = sizeof(fabriclib_submit_opts)`, then at most one of
/// `callback` and `flag`:
/// - `callback(user_data, status)` runs once on the callback thread;
/// - `flag` receives, with one atomic release store from the worker thread,
///   `FABRICLIB_FLAG_DONE | status` (poll it with an acquire load). It must
///   stay valid until then; initialise it to 0.
///
/// `timeout_us`: 0 takes the engine's request timeout
/// (`fabriclib_config_set_request_timeout`), `FABRICLIB_NO_TIMEOUT` means
/// none, any other value is this request's own deadline in microseconds
/// after the submit. A request that misses it ends with
/// `FABRICLIB_STATUS_TIMED_OUT`.
///
/// `route` (since 0.3): `FABRICLIB_ROUTE_SHARD` (0, the default) spreads the
/// request over the NICs of its group (all the engine's, with one group):
/// unit `k` (a page, a chunk of a single write of 256 KiB or more, a scatter
/// or barrier destination) on the group's NIC `(k + r) mod n`, `r` rotating
/// from request to request; `FABRICLIB_ROUTE_NIC` puts all of it on NIC
/// `nic` (numbered across the engine, as `fabriclib_engine_nic` lists them:
/// group 0's first), in order, and a single write is not cut into chunks.
/// Immediate counts are the same either way. `INVALID_ARGUMENT` for a NIC
/// the engine does not have or that is not in the request's group (its
/// source region's; group 0 for sends and barriers), or a send on a NIC
/// other than 0 (receive buffers are posted on NIC 0).
///
/// `flags` (since 0.4): `FABRICLIB_SUBMIT_DELIVERED` makes
/// `FABRICLIB_STATUS_OK` mean *delivered*: every byte and immediate of the
/// request has been taken in by the target engine — its immediates counted
/// there, ahead of any call its application makes after hearing of this OK
/// (`fabriclib_imm_count_reset` included). Without it OK means only that the
/// source buffer is free again (docs/failure-semantics.md, "What OK
/// means"). It costs one round trip per destination engine after the last
/// work request completes; any other outcome says what it says without the
/// flag. `FABRICLIB_STATUS_UNSUPPORTED` on a provider that does not deliver
/// a message after the writes posted before it (tcp;ofi_rxm and shm do).
/// Other bits: `FABRICLIB_STATUS_INVALID_ARGUMENT`.
///
/// `struct_size` is how the library tells which fields the caller knows: a
/// program built against this header keeps working with later libraries
/// (fields it does not know take their defaults), and one built against a
/// later header runs on this library as long as the fields this library
/// does not know are left zero (else `FABRICLIB_STATUS_UNSUPPORTED`). 0 or
/// a size below this version's is `FABRICLIB_STATUS_INVALID_ARGUMENT`.
///
/// Every accepted request reports exactly once, whatever happens (done, an
/// error, canceled, timed out, peer down, shut down); a submit that returns
/// an error never reports through its options. The struct itself is read
/// during the call only.
#[repr(C)]
pub struct fabriclib_submit_opts {
    pub struct_size: usize,
    pub callback: fabriclib_done_cb,
    pub user_data: *mut c_void,
    pub flag: *mut u32,
    pub timeout_us: u64,
    pub route: fabriclib_route,
    pub nic: u32,
    pub flags: u32,
}

/// `fabriclib_submit_opts.flags`: OK means delivered (since 0.4).
pub const FABRICLIB_SUBMIT_DELIVERED: u32 = 1;

const FABRICLIB_ROUTE_SHARD: u32 = super::codes::fabriclib_route::Shard as u32;
const FABRICLIB_ROUTE_NIC: u32 = super::codes::fabriclib_route::Nic as u32;

/// An array of address blobs (`add_peer_set`). In C it is
/// `uint8_t *const *`, so `uint8_t **` and `uint8_t *[]` pass as they are;
/// in C++ `const uint8_t *const *`, which takes those and `const uint8_t **`
/// too. The library never writes through it. (Declared in the header's
/// preamble: the two languages differ.)
pub type fabriclib_blob_list = *const *mut u8;

/// An array of descriptor handles (`submit_barrier`): `fabriclib_remote_mr
/// *const *` in C, `const fabriclib_remote_mr *const *` in C++ (see
/// `fabriclib_blob_list`).
pub type fabriclib_remote_mr_list = *const *mut fabriclib_remote_mr;

/// `fabriclib_submit_opts.timeout_us` for a request with no deadline.
pub const FABRICLIB_NO_TIMEOUT: u64 = u64::MAX;

/// Pages on one side of a paged write: page `i` starts at byte
/// `offset + indices[i] * stride` of the region.
#[repr(C)]
pub struct fabriclib_pages {
    pub indices: *const u32,
    pub count: usize,
    pub stride: u64,
    pub offset: u64,
}

/// One destination of a scatter: `len` bytes from `src_offset` of the source
/// region to `dst_offset` of `dst`.
#[repr(C)]
pub struct fabriclib_scatter_dst {
    pub len: u64,
    pub src_offset: u64,
    pub dst: *const fabriclib_remote_mr,
    pub dst_offset: u64,
}

pub(crate) struct UserData(pub(crate) *mut c_void);
// SAFETY: the caller declares user_data usable from the callback thread.
unsafe impl Send for UserData {}
unsafe impl Sync for UserData {}

fn status_of(r: &Result<()>) -> fabriclib_status {
    r.as_ref().map(|_| 0).unwrap_or_else(|e| e.status as i32)
}

/// The smallest `struct_size` accepted: the options as of 0.2 (up to
/// `timeout_us`; `route` and `nic` came in 0.3). Never grows.
const SUBMIT_OPTS_V1: usize = std::mem::offset_of!(fabriclib_submit_opts, route);

/// Reads a caller's size-prefixed options struct `p` (whose first field is
/// its `struct_size`) into this version's `T`: sizes below `min` are
/// refused, and so are bytes past this version's end that are not zero
/// (options of a later version this library cannot honour).
pub(crate) fn read_sized<T>(p: *const T, min: usize, what: &str) -> Result<T> {
    // SAFETY: the caller passes a struct whose first field is a size_t.
    let size = unsafe { p.cast::<usize>().read_unaligned() };
    if size < min {
        crate::bail!(InvalidArgument, "{what}.struct_size is {size}: set it to sizeof({what}) ({min} here)");
    }
    let ours = size_of::<T>();
    // SAFETY: the caller's struct is `size` bytes long (its own declaration).
    let tail = unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(ours.min(size)), size.saturating_sub(ours)) };
    if let Some(at) = tail.iter().position(|&b| b != 0) {
        crate::bail!(
            Unsupported,
            "{what}: byte {} is set, but this library ({}) knows only the first {ours} bytes: a later version's option",
            ours + at,
            env!("CARGO_PKG_VERSION")
        );
    }
    // SAFETY: min(size, ours) bytes are the caller's; the rest take the
    // zeroes `T`'s defaults are (every field of these structs is valid as 0).
    unsafe {
        let mut v = std::mem::MaybeUninit::<T>::zeroed();
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), ours.min(size));
        Ok(v.assume_init())
    }
}

pub(crate) fn on_done(d: *const fabriclib_submit_opts) -> Result<RequestOpts> {
    if d.is_null() {
        return Ok(OnDone::Nothing.into());
    }
    let d = &read_sized(d, SUBMIT_OPTS_V1, "fabriclib_submit_opts")?;
    let deadline = match d.timeout_us {
        0 => Deadline::EngineDefault,
        FABRICLIB_NO_TIMEOUT => Deadline::Never,
        us => Deadline::After(std::time::Duration::from_micros(us)),
    };
    let mut opts = notify_of(d)?.deadline(deadline);
    match d.flags {
        0 => {}
        FABRICLIB_SUBMIT_DELIVERED => opts = opts.delivered(),
        f => crate::bail!(InvalidArgument, "fabriclib_submit_opts.flags {f:#x}: not FABRICLIB_SUBMIT_* bits"),
    }
    match d.route {
        FABRICLIB_ROUTE_SHARD => Ok(opts),
        FABRICLIB_ROUTE_NIC => Ok(opts.on_nic(d.nic as usize)),
        r => Err(Error::new(
            Status::InvalidArgument,
            format!("fabriclib_submit_opts.route {r}: not a FABRICLIB_ROUTE_*"),
        )),
    }
}

fn notify_of(d: &fabriclib_submit_opts) -> Result<OnDone> {
    match (d.callback, d.flag.is_null()) {
        (Some(_), false) => {
            Err(Error::new(Status::InvalidArgument, "fabriclib_submit_opts: set either callback or flag, not both"))
        }
        (Some(cb), true) => {
            let ud = UserData(d.user_data);
            Ok(OnDone::callback(move |r| {
                let ud = ud;
                // The details (e.g. libfabric's error text and number) are the
                // callback thread's last-error message during the call.
                if let Err(e) = &r {
                    super::set_last_error(&e.message);
                }
                // SAFETY: a C function pointer the caller registered, with its user_data.
                unsafe { cb(ud.0, status_of(&r)) }
            }))
        }
        (None, false) => {
            if d.flag as usize % 4 != 0 {
                return Err(Error::new(Status::InvalidArgument, "fabriclib_submit_opts: flag is not 4-byte aligned"));
            }
            // SAFETY: non-null, aligned; the caller keeps it valid until the store.
            Ok(OnDone::RawFlag(unsafe { RawFlag::new(d.flag) }))
        }
        (None, true) => Ok(OnDone::Nothing),
    }
}

/// Writes a submitted request's id to `out` (if not NULL).
pub(crate) fn id_out(out: *mut u64, id: Result<RequestId>) -> Result<()> {
    put_opt(out, id?.0)
}

fn imm_opt(imm: *const u32) -> Option<u32> {
    // SAFETY: NULL or a pointer to a uint32_t for the duration of the call.
    (!imm.is_null()).then(|| unsafe { *imm })
}

fn pages<'a>(p: *const fabriclib_pages, what: &str) -> Result<Pages<'a>> {
    non_null(p, what)?;
    // SAFETY: non-null; read during the call only.
    let p = unsafe { &*p };
    let indices = list(p.indices, p.count, what, what)?;
    Ok(Pages { indices, stride: p.stride, offset: p.offset })
}

fn mr_of<'a>(e: &fabriclib_engine, mr: *const fabriclib_mr) -> Result<&'a crate::engine::MrHandle> {
    let m = &handle(mr)?.mr;
    if m.engine_id() != e.engine.id() {
        return Err(Error::new(Status::BadHandle, "memory region was registered with another engine"));
    }
    Ok(m)
}

fn peer_set_of(g: u64) -> Option<PeerSet> {
    (g != 0).then_some(PeerSet(g))
}

/// === Requests ===
/// Writes, scatters, barriers, sends and receive pools; each accepted request
/// ends exactly once (callback or flag word), and can be canceled or waited on.
///
/// Writes `len` bytes from `src_offset` of `src` to `dst_offset` of `dst`.
/// `imm` is NULL or points to an immediate: then the destination counts
/// exactly **one** `*imm` once every byte has landed, `len` may be 0
/// (notification only), and `len` must fit the provider's max message size.
/// Without an immediate, large writes are split and sharded over NICs.
/// `opts` reports when the source buffer may be reused; that is not proof
/// that the bytes landed (the receiver's immediate is). Any thread.
///
/// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
/// outside its region); `MALFORMED` (a descriptor or address that does not
/// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
/// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
/// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
/// submit that returns an error never reports. `INVALID_ARGUMENT` also for a
/// zero length without an immediate, a write with an immediate over the
/// provider's maximum message, or a NIC route outside the request's group.
/// Blocks: no: it queues the request for the worker and returns; a full queue
/// returns `AGAIN` rather than waiting.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_single_write(
    engine: *const fabriclib_engine,
    len: u64,
    imm: *const u32,
    src: *const fabriclib_mr,
    src_offset: u64,
    dst: *const fabriclib_remote_mr,
    dst_offset: u64,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let (src, dst) = (mr_of(e, src)?, &handle(dst)?.desc);
        id_out(
            request_id,
            e.engine.submit_single_write(len, imm_opt(imm), src, src_offset, dst, dst_offset, on_done(opts)?),
        )
    })
}

/// One write of `fabriclib_submit_single_writes`: the arguments of
/// `fabriclib_submit_single_write` but its source region, which the batch's
/// writes share. `imm`: NULL or a pointer to this write's immediate; `opts`:
/// NULL (no report, the engine's deadline) or this write's own options.
/// (Since 0.4; its layout is fixed: later versions add functions, not fields.)
#[repr(C)]
pub struct fabriclib_single_write {
    pub len: u64,
    pub imm: *const u32,
    pub src_offset: u64,
    pub dst: *const fabriclib_remote_mr,
    pub dst_offset: u64,
    pub opts: *const fabriclib_submit_opts,
}

/// Submits `count` single writes from `src` in one hand-off to the engine's
/// worker (since 0.4): each is a request of its own, with its own id,
/// immediate, options and report, checked and carried out exactly as
/// `fabriclib_submit_single_write` would; the batch costs one slot of the
/// submission queue and one wake where single submits pay each per write.
/// When every write is one work request (at most `max_msg_size` bytes, not
/// sharded), all go to one peer, none is `FABRICLIB_SUBMIT_DELIVERED` and
/// all share a deadline and route, the worker also takes, checks and times
/// them together (up to 256 at a time); each still reports on its own, as
/// its work request comes back, and `fabriclib_cancel` of one cancels it
/// alone. Write `k`'s id is `*first_request_id + k`. All or none: every write is
/// checked first, and any error submits none of them (and none reports); the
/// last-error message names the first bad write by its index. The array
/// and what it points to are read during the call only. Any thread.
///
/// Returns: `OK` (each write then reports exactly once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
/// outside its region); `MALFORMED` (a descriptor or address that does not
/// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
/// cannot confirm delivery); `AGAIN` (the submission queue is full, or
/// `max_inflight` has no room for all `count` writes: progress, then retry);
/// `SHUTDOWN` (the engine is being destroyed). A submit that returns an error
/// never reports. `INVALID_ARGUMENT` also for `count` 0 or over
/// `max_inflight`, and for what `fabriclib_submit_single_write` refuses.
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_single_writes(
    engine: *const fabriclib_engine,
    src: *const fabriclib_mr,
    writes: *const fabriclib_single_write,
    count: usize,
    first_request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let src = mr_of(e, src)?;
        let writes = list(writes, count, "submit_single_writes", "writes")?;
        let batch = writes
            .iter()
            .enumerate()
            .map(|(k, w)| {
                let named = |e| crate::engine::in_batch(k, e);
                Ok(crate::engine::SingleWrite {
                    len: w.len,
                    imm: imm_opt(w.imm),
                    src_offset: w.src_offset,
                    dst: &handle(w.dst).map_err(named)?.desc,
                    dst_offset: w.dst_offset,
                    done: on_done(w.opts).map_err(named)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        id_out(first_request_id, e.engine.submit_single_writes(src, batch))
    })
}

/// Writes `src_pages->count` pages of `page_len` bytes: page `i` goes from
/// source page `src_pages->indices[i]` to destination page
/// `dst_pages->indices[i]` (both counts must match). Every page is checked
/// against both regions before anything is posted. With `imm` non-NULL the
/// destination counts **one `*imm` per page**. Pages are sharded over the
/// NICs. The index arrays are copied. Any thread.
///
/// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
/// outside its region); `MALFORMED` (a descriptor or address that does not
/// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
/// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
/// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
/// submit that returns an error never reports. `INVALID_ARGUMENT` also for page
/// counts that differ or a NIC route outside the request's group.
/// Blocks: no: it queues the request for the worker and returns; a full queue
/// returns `AGAIN` rather than waiting.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_paged_writes(
    engine: *const fabriclib_engine,
    page_len: u64,
    imm: *const u32,
    src: *const fabriclib_mr,
    src_pages: *const fabriclib_pages,
    dst: *const fabriclib_remote_mr,
    dst_pages: *const fabriclib_pages,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let (src, dst) = (mr_of(e, src)?, &handle(dst)?.desc);
        let (sp, dp) = (pages(src_pages, "src_pages")?, pages(dst_pages, "dst_pages")?);
        id_out(request_id, e.engine.submit_paged_writes(page_len, imm_opt(imm), src, sp, dst, dp, on_done(opts)?))
    })
}

/// Writes a different slice of `src` to each of `count` destinations (each
/// possibly another peer). With `imm` non-NULL each destination's owner counts
/// **one `*imm` per destination**. `peer_set` is 0 or a handle from
/// `fabriclib_add_peer_set` whose peer `i` owns `dsts[i].dst`. The array is
/// copied. Any thread.
///
/// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
/// outside its region); `MALFORMED` (a descriptor or address that does not
/// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
/// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
/// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
/// submit that returns an error never reports. `INVALID_ARGUMENT` also for no
/// destination; `BAD_HANDLE` also for an unknown peer set.
/// Blocks: no: it queues the request for the worker and returns; a full queue
/// returns `AGAIN` rather than waiting.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_scatter(
    engine: *const fabriclib_engine,
    peer_set: u64,
    imm: *const u32,
    src: *const fabriclib_mr,
    dsts: *const fabriclib_scatter_dst,
    count: usize,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let src = mr_of(e, src)?;
        let dsts = list(dsts, count, "submit_scatter", "dsts")?
            .iter()
            .map(|d| {
                let dst = handle(d.dst)?.desc.clone();
                Ok(ScatterDst { len: d.len, src_offset: d.src_offset, dst, dst_offset: d.dst_offset })
            })
            .collect::<Result<Vec<_>>>()?;
        id_out(request_id, e.engine.submit_scatter(peer_set_of(peer_set), imm_opt(imm), src, &dsts, on_done(opts)?))
    })
}

/// Sends a zero-byte write carrying `imm` to each of `count` destination
/// regions: each destination's owner counts **one `imm` per destination**.
/// `peer_set` as for `fabriclib_submit_scatter`. Any thread.
///
/// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
/// outside its region); `MALFORMED` (a descriptor or address that does not
/// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
/// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
/// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
/// submit that returns an error never reports. `BAD_HANDLE` also for an unknown
/// peer set.
/// Blocks: no: it queues the request for the worker and returns; a full queue
/// returns `AGAIN` rather than waiting.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_barrier(
    engine: *const fabriclib_engine,
    peer_set: u64,
    imm: u32,
    dsts: fabriclib_remote_mr_list,
    count: usize,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let descs = list(dsts, count, "submit_barrier", "dsts")?
            .iter()
            .map(|d| Ok(handle(*d)?.desc.clone()))
            .collect::<Result<Vec<_>>>()?;
        id_out(request_id, e.engine.submit_barrier(peer_set_of(peer_set), imm, &descs, on_done(opts)?))
    })
}

/// Sends a copy of `len` bytes at `msg` (at most 65536; 4096 on `shm`: see
/// `fabriclib_engine_max_send`) to the engine whose
/// address is `addr` (`addr_len` bytes); `msg` may be reused at once. The peer
/// must have a receive buffer posted (`fabriclib_recv_pool_add`) at least
/// `len` bytes long. Any thread; the end is reported through `opts`.
///
/// Every `fabriclib_submit_*` function (and `fabriclib_expect_imm_count`)
/// writes the new request's id to `*request_id` unless it is NULL: pass it
/// to `fabriclib_cancel`.
///
/// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
/// outside its region); `MALFORMED` (a descriptor or address that does not
/// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
/// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
/// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
/// submit that returns an error never reports. `INVALID_ARGUMENT` also for a
/// message over `fabriclib_engine_max_send`.
/// Blocks: no: it queues the request for the worker and returns; a full queue
/// returns `AGAIN` rather than waiting.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_send(
    engine: *const fabriclib_engine,
    addr: *const u8,
    addr_len: usize,
    msg: *const c_void,
    len: usize,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let to = address(addr, addr_len, "addr")?;
        let msg = bytes(msg.cast(), len, "msg")?;
        id_out(request_id, e.engine.submit_send(&to, msg, on_done(opts)?))
    })
}

/// Cancels request (or immediate expectation) `request_id`. Nothing more of
/// it is posted; it reports `FABRICLIB_STATUS_CANCELED` once the provider has
/// given back its work requests already on the wire: after that report the
/// caller may reuse or free its buffers. Some, all or none of its bytes (and
/// immediates) may have landed. Returns `FABRICLIB_STATUS_NOT_FOUND` if the
/// request has already ended (it then reports its own outcome, if it has not
/// yet). Any thread, fabriclib callbacks included (it waits for the
/// worker's answer).
///
/// Returns: `OK` (the request will report `CANCELED`); `NOT_FOUND` (it has
/// already ended, or never existed); `INVALID_ARGUMENT` (a NULL pointer
/// argument); `BAD_HANDLE` (a destroyed or foreign engine); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_cancel(engine: *const fabriclib_engine, request_id: u64) -> fabriclib_status {
    ffi(|| handle(engine)?.engine.cancel(RequestId(request_id)))
}

/// Cancels every pending request to the engine named by `addr` (`addr_len`
/// bytes: its address, the address of any of its groups, or its groups blob
/// from `fabriclib_engine_groups_address`), from every group of this engine,
/// including scatters and barriers with a destination there; writes how
/// many to `*canceled` unless it is NULL. Each ends as for
/// `fabriclib_cancel`. Any thread, fabriclib callbacks included (it waits
/// for the worker's answer).
///
/// Returns: `OK` (`*canceled` says how many); `INVALID_ARGUMENT` (a NULL
/// pointer argument); `BAD_HANDLE` (a destroyed or foreign engine); `MALFORMED`
/// (an address that does not parse); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_cancel_peer(
    engine: *const fabriclib_engine,
    addr: *const u8,
    addr_len: usize,
    canceled: *mut usize,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let n = e.engine.cancel_peer(&super::engine_of(addr, addr_len, "addr")?)?;
        put_opt(canceled, n)
    })
}
