//! Receive pools: the buffers that `fabriclib_submit_send` messages land
//! in, each message handed to a callback with its sender.
use super::submit::UserData;
use super::{fabriclib_engine, fabriclib_status, ffi, handle, put_opt};
use crate::engine::RecvPoolId;
use crate::error::{Error, Result, Status};
use crate::worker::recv::Received;
use std::ffi::c_void;

/// Called for every received message with its bytes (`data`, `len`), valid
/// only during the call: the buffer returns to the pool when the callback
/// returns. On error (`FABRICLIB_STATUS_TRUNCATED`, and a last call with
/// `FABRICLIB_STATUS_SHUTDOWN` when the engine is destroyed) `data` is NULL
/// and `len` 0. Runs on the engine's callback thread.
pub type fabriclib_recv_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, status: fabriclib_status, data: *const u8, len: usize)>;

/// A received message, as `fabriclib_message_cb` sees it; every pointer is
/// valid only during the call.
#[repr(C)]
pub struct fabriclib_message {
    /// The message's bytes (NULL, and `len` 0, when the status is not `OK`).
    pub data: *const u8,
    pub len: usize,
    /// The sender engine's address blob (`from_len` bytes; what the
    /// peer-state callback names it by, and `fabriclib_submit_send` takes to
    /// answer it); NULL and 0 on a pool's last call, or when the sender is
    /// no longer among this engine's peers (`fabriclib_peer_remove`). Set on
    /// `TRUNCATED` too.
    pub from: *const u8,
    pub from_len: usize,
}

/// Called for every message a receive pool takes (`fabriclib_recv_pool_add`)
/// with `status` `FABRICLIB_STATUS_OK` and the message in `*msg`, or:
/// `FABRICLIB_STATUS_TRUNCATED` (longer than the pool's `len`: dropped, the
/// sender in `msg->from`), `FABRICLIB_STATUS_MALFORMED` (not from a
/// fabriclib engine), and as the pool's last call
/// `FABRICLIB_STATUS_CANCELED` (`fabriclib_recv_pool_remove`) or
/// `FABRICLIB_STATUS_SHUTDOWN` (the engine was destroyed): `user_data` may
/// be freed after that call. `msg` is never NULL. Runs on the engine's
/// callback thread; the buffer returns to the pool when it returns.
pub type fabriclib_message_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, status: fabriclib_status, msg: *const fabriclib_message)>;

/// `fabriclib_recv_pool_add`'s checks and call, for either callback.
fn add_pool(
    engine: *const fabriclib_engine,
    len: usize,
    count: usize,
    on_worker: bool,
    cb: impl Fn(Received<'_>) + Send + Sync + 'static,
) -> Result<RecvPoolId> {
    let e = &handle(engine)?.engine;
    if on_worker { e.add_recv_pool_on_worker(len, count, cb) } else { e.add_recv_pool(len, count, cb) }
}

/// `fabriclib_recv_pool_add` and `fabriclib_recv_pool_add_on_worker`.
fn add_message_pool(
    engine: *const fabriclib_engine,
    len: usize,
    count: usize,
    on_worker: bool,
    callback: fabriclib_message_cb,
    user_data: *mut c_void,
    pool: *mut u64,
) -> Result<()> {
    let cb = callback.ok_or_else(|| Error::new(Status::InvalidArgument, "callback is NULL"))?;
    let ud = UserData(user_data);
    let id = add_pool(engine, len, count, on_worker, move |m| {
        let ud = &ud;
        let (data, len, status) = match m.data {
            Ok(b) => (b.as_ptr(), b.len(), Status::Ok),
            Err(e) => (std::ptr::null(), 0, e.status),
        };
        let (from, from_len) = m.from.map_or((std::ptr::null(), 0), |o| (o.blob.as_ptr(), o.blob.len()));
        let msg = fabriclib_message { data, len, from, from_len };
        // SAFETY: the caller's callback with its user_data; msg and what it points to live during the call.
        unsafe { cb(ud.0, status as i32, &msg) }
    })?;
    put_opt(pool, id.0)
}

/// Posts `count` receive buffers (at most 4096) for messages of up to `len`
/// bytes (at most 65536) as one pool. Each arriving message calls
/// `callback(user_data, FABRICLIB_STATUS_OK, data, len)` on the callback
/// thread; the buffer is reposted when it returns. A message longer than `len`
/// is dropped and reported as `callback(user_data, FABRICLIB_STATUS_TRUNCATED,
/// NULL, 0)`; the sender's connection is unaffected (each buffer is 64 KiB
/// underneath, so a pool costs `count` × 64 KiB). When
/// the engine is destroyed, `callback` runs once more with
/// `FABRICLIB_STATUS_SHUTDOWN`; `user_data` must stay valid until then. Any
/// thread. `fabriclib_recv_pool_add` does the same and also names each
/// message's sender and gives the pool an id to remove it by.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero buffer size
/// or count, or a callback NULL; `PROVIDER` (registering the pool's buffers
/// failed); `SHUTDOWN`.
/// Blocks: until the engine's worker answers: microseconds while it runs; in
/// manual-progress mode the call progresses the engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_submit_recvs(
    engine: *const fabriclib_engine,
    len: usize,
    count: usize,
    callback: fabriclib_recv_cb,
    user_data: *mut c_void,
) -> fabriclib_status {
    ffi(|| {
        let cb = callback.ok_or_else(|| Error::new(Status::InvalidArgument, "callback is NULL"))?;
        let ud = UserData(user_data);
        add_pool(engine, len, count, false, move |m| {
            let ud = &ud;
            // SAFETY: the caller's callback with its user_data; data is valid during the call.
            unsafe {
                match m.data {
                    Ok(b) => cb(ud.0, 0, b.as_ptr(), b.len()),
                    Err(err) => cb(ud.0, err.status as i32, std::ptr::null(), 0),
                }
            }
        })
        .map(drop)
    })
}

/// Posts `count` receive buffers (at most 4096) for messages of up to `len`
/// bytes (at most 65536) as one pool, and writes its id to `*pool` (unless
/// NULL). Each arriving message calls `callback(user_data,
/// FABRICLIB_STATUS_OK, msg)` on the callback thread with its bytes and its
/// sender (`fabriclib_message`); the buffer is reposted when the callback
/// returns. A message longer than `len` is dropped and reported as
/// `FABRICLIB_STATUS_TRUNCATED` (the sender's connection is unaffected; each
/// buffer is 64 KiB underneath, so a pool costs `count` × 64 KiB). The
/// callback's last call says `FABRICLIB_STATUS_CANCELED` after
/// `fabriclib_recv_pool_remove`, `FABRICLIB_STATUS_SHUTDOWN` when the engine
/// is destroyed; `user_data` must stay valid until then. A message lands in
/// a buffer of any of the engine's pools. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`engine` or `callback` NULL, a zero
/// `len` or `count`, more than 4096 buffers or 65536 bytes); `BAD_HANDLE` (a destroyed
/// or foreign engine); `PROVIDER` (registering the pool's buffers failed);
/// `SHUTDOWN`.
/// Blocks: until the engine's worker answers: microseconds while it runs; in
/// manual-progress mode the call progresses the engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_recv_pool_add(
    engine: *const fabriclib_engine,
    len: usize,
    count: usize,
    callback: fabriclib_message_cb,
    user_data: *mut c_void,
    pool: *mut u64,
) -> fabriclib_status {
    ffi(|| add_message_pool(engine, len, count, false, callback, user_data, pool))
}

/// As `fabriclib_recv_pool_add`, but `callback` runs on the engine's worker
/// thread itself, as each message is taken from the NIC: no hand-off to the
/// callback thread and back, so answering a message from its callback
/// (request/response, a ping) saves two thread hops each way. The callback
/// must be short and must not block: it may submit (`AGAIN` when the queue
/// is full), count and copy; a call that waits for the worker (adding or
/// removing pools, peers or expectations, `fabriclib_flag_await`…) returns
/// `INVALID_ARGUMENT` from it, and it must not destroy the engine. With
/// manual progress it runs inside the pass that takes the message, on the
/// thread in `fabriclib_engine_progress`, under the same rules (a nested
/// `fabriclib_engine_progress` does nothing); `fabriclib_recv_pool_add`'s
/// callbacks run after the pass instead, through a queue. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`engine` or `callback` NULL, a zero
/// `len` or `count`, more than 4096 buffers or 65536 bytes); `BAD_HANDLE` (a
/// destroyed or foreign engine); `PROVIDER` (registering the pool's buffers
/// failed); `SHUTDOWN`.
/// Blocks: until the engine's worker answers: microseconds while it runs; in
/// manual-progress mode the call progresses the engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_recv_pool_add_on_worker(
    engine: *const fabriclib_engine,
    len: usize,
    count: usize,
    callback: fabriclib_message_cb,
    user_data: *mut c_void,
    pool: *mut u64,
) -> fabriclib_status {
    ffi(|| add_message_pool(engine, len, count, true, callback, user_data, pool))
}

/// Removes receive pool `pool` (`fabriclib_recv_pool_add`'s id): its
/// callback's last call, `FABRICLIB_STATUS_CANCELED`, runs after the
/// messages already handed to it, and no call follows. Its buffers are
/// withdrawn from the provider where it can (libfabric); a message that
/// still lands in one (verbs cannot withdraw a posted receive) goes to the
/// engine's oldest remaining pool, or waits for the next pool added. Its
/// memory is freed once every buffer is back. Any thread, fabriclib
/// callbacks included (its own callback's too).
///
/// Returns: `OK`; `NOT_FOUND` (no such pool, or removed already);
/// `INVALID_ARGUMENT` (`engine` NULL); `BAD_HANDLE` (a destroyed or foreign
/// engine); `SHUTDOWN`.
/// Blocks: until the engine's worker answers: microseconds while it runs; in
/// manual-progress mode the call progresses the engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_recv_pool_remove(engine: *const fabriclib_engine, pool: u64) -> fabriclib_status {
    ffi(|| handle(engine)?.engine.remove_recv_pool(RecvPoolId(pool)))
}
