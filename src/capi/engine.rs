//! `fabriclib_engine`: create, destroy, address.
use super::{fabriclib_config, fabriclib_status, ffi, give, handle, put, put_opt, release, write_blob};
use crate::config::EngineConfig;
use crate::engine::TransferEngine;

use std::ffi::{CString, c_char};
use std::sync::atomic::AtomicU64;

/// A transfer engine: a worker thread driving its NICs and a
/// callback thread. All `fabriclib_submit_*` functions may be called from any
/// thread at once.
pub struct fabriclib_engine {
    magic: AtomicU64,
    pub(crate) engine: TransferEngine,
    provider: CString,
    /// Each NIC's name, for `fabriclib_engine_nic`.
    pub(super) nic_names: Vec<CString>,
}

super::impl_handle!(fabriclib_engine, 0xfab1_e9e1_0000_0002, "engine");

std::thread_local! {
    /// The engine this thread is inside `fabriclib_engine_progress` of (0: none).
    static PROGRESSING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Runs `f` with `engine` marked as progressed by this thread (its callbacks
/// may then run here, and must not destroy it).
fn progressing<T>(engine: *const fabriclib_engine, f: impl FnOnce() -> T) -> T {
    let outer = PROGRESSING.with(|p| p.replace(engine as usize));
    let r = f();
    PROGRESSING.with(|p| p.set(outer));
    r
}

/// Work requests and bytes one NIC posted and completed for the
/// application, its failed work requests (by status) and those in flight,
/// since the engine started
/// (`fabriclib_engine_counters`). Zero-initialise and set `struct_size =
/// sizeof(fabriclib_counters)`; the library writes the fields that fit in
/// `struct_size` (fields a later version adds stay as they are).
#[repr(C)]
pub struct fabriclib_counters {
    pub struct_size: usize,
    pub wrs_posted: u64,
    pub bytes_posted: u64,
    pub wrs_completed: u64,
    pub bytes_completed: u64,
    /// Work requests that failed, or were given up with their peer.
    pub errors: u64,
    /// Since 0.4: work requests posted and not yet back (completed or failed).
    pub wrs_in_flight: u64,
    /// Since 0.4: `errors` by status (`errors_by_status[FABRICLIB_STATUS_PEER_DOWN]`…).
    pub errors_by_status: [u64; super::FABRICLIB_METRICS_STATUSES],
}

/// === Engine ===
/// `fabriclib_engine`: the transfer engine of a process: its NICs and worker
/// threads, the requests in flight; every call on it may come from any thread.
///
/// Creates an engine from `config` (NULL: defaults); the config may be freed
/// afterwards. Opens the NICs and starts the worker and callback threads;
/// fails with `FABRICLIB_STATUS_UNSUPPORTED` if no provider is usable.
/// `*out` receives an engine the caller destroys with `fabriclib_engine_destroy`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer, or settings that do not
/// fit together: the message says which); `BAD_HANDLE` (a freed or foreign
/// config); `UNSUPPORTED` (no usable provider or NIC on this machine, the verbs
/// backend without rdma-core, a libfabric provider without libfabric, groups
/// per GPU or NICs near a GPU without hwloc or without GPUs); `PROVIDER`
/// (libfabric or libibverbs refused to open a NIC).
/// Blocks: yes, while it opens every NIC, registers its buffers and starts its
/// threads (milliseconds; seconds where hwloc reads a large topology). It does
/// not wait for any peer.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_create(
    config: *const fabriclib_config,
    out: *mut *mut fabriclib_engine,
) -> fabriclib_status {
    ffi(|| {
        super::non_null(out, "out")?;
        let cfg = if config.is_null() { EngineConfig::default() } else { handle(config)?.cfg.clone() };
        let engine = TransferEngine::new(&cfg)?;
        let provider = CString::new(engine.provider()).unwrap_or_default();
        let nic_names = engine.nics().iter().map(|n| CString::new(n.name.as_str()).unwrap_or_default()).collect();
        give(out, fabriclib_engine { magic: AtomicU64::new(0), engine, provider, nic_names })
    })
}

/// Destroys an engine (NULL is a no-op). Every pending request, expectation
/// and receive pool ends first (with `FABRICLIB_STATUS_SHUTDOWN` where it had
/// not completed; their callbacks run before this returns), then the threads
/// are joined. Work requests still on the wire get `drain_timeout` (1 s by
/// default) to come back; then each peer this engine contacted is told
/// goodbye and answers once it has handled everything the engine sent it
/// (another `drain_timeout` at most, for a dead or stopped peer), so that
/// closing never hurts a live peer. It returns within 2 × `drain_timeout`
/// plus the callbacks' own time; with healthy peers, in about one round
/// trip. May be called from one of the engine's own callbacks (the reports
/// still queued then run right after that callback returns); must not be
/// called while another thread still submits to the engine. Registered regions
/// (`fabriclib_mr`) outlive it and must still be deregistered.
///
/// In manual-progress mode a callback runs inside `fabriclib_engine_progress`,
/// which is still using the engine: destroying that engine from such a
/// callback is refused (nothing happens; a message goes to the log —
/// `fabriclib_set_log_callback`, stderr by default — and the last error); destroy it after the progress call has returned.
///
/// Returns: nothing (NULL, or an engine already destroyed, is ignored).
/// Blocks: yes: it says goodbye to its peers and waits for their answer, then
/// gives work requests on the wire up to the drain timeout
/// (`fabriclib_config_set_drain_timeout_us`): at most 2 × that (2 s by
/// default), then joins its threads. From the engine's own callback it returns
/// at once (the preamble says what runs after).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_destroy(engine: *mut fabriclib_engine) {
    if !engine.is_null() && PROGRESSING.with(|p| p.get()) == engine as usize {
        let msg = "fabriclib_engine_destroy from a callback inside fabriclib_engine_progress of the same engine: \
                   refused; destroy it after fabriclib_engine_progress returns";
        crate::log!(Error, "{msg}");
        super::set_last_error(msg);
        return;
    }
    // Dropping the engine shuts it down (TransferEngine's Drop).
    release(engine);
}

/// Manual progress (`fabriclib_config_set_manual_progress`): runs one pass of
/// the engine on the calling thread — new requests and control calls,
/// posting, polling, immediates, flags, deadlines, keepalives, and the
/// callbacks that are due (there is no callback thread in this mode) — and
/// writes to `*progressed` (unless NULL) whether anything happened. Any
/// thread; one at a time does the work (a concurrent or nested call returns
/// at once with `*progressed` false). Nothing moves between calls: call it
/// while anything is in flight or expected. Control calls
/// (`fabriclib_mr_register`, `fabriclib_expect_imm_count`, …) progress by
/// themselves until answered. With a worker thread: `*progressed` false.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine).
/// Blocks: no: one pass of the engine (with a worker thread it does nothing).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_progress(
    engine: *const fabriclib_engine,
    progressed: *mut bool,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let busy = progressing(engine, || e.engine.progress());
        put_opt(progressed, busy)
    })
}

/// Waits until `*flag` has `FABRICLIB_FLAG_DONE` or `timeout_us` passed
/// (`FABRICLIB_NO_TIMEOUT`: for ever), writing the flag's value to `*value`
/// (unless NULL): in manual-progress mode by progressing `engine` on this
/// thread (`fabriclib_engine_progress`), else as `fabriclib_flag_await`
/// (sleeping). Returns `FABRICLIB_STATUS_OK` once done,
/// `FABRICLIB_STATUS_TIMED_OUT` if the timeout passed first. (Was
/// `fabriclib_engine_flag_await` before 0.4, which returned `AGAIN` then.)
///
/// Returns: `OK` (the flag is done); `TIMED_OUT` (`timeout_us` passed first);
/// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
/// foreign engine); `INVALID_ARGUMENT` also for a misaligned flag.
/// Blocks: up to `timeout_us` (`FABRICLIB_NO_TIMEOUT`: until the flag is done).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_flag_await(
    engine: *const fabriclib_engine,
    flag: *const u32,
    timeout_us: u64,
    value: *mut u32,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let f = super::flags::flag_word(flag, "fabriclib_engine_flag_await")?;
        let timeout = super::flags::timeout(timeout_us);
        let v = progressing(engine, || e.engine.await_flag(f, timeout))?;
        put_opt(value, v)
    })
}

/// Writes the engine's event fd to `*fd`: a non-blocking eventfd that turns
/// readable after the engine ended a request (stored its flag or queued its
/// callback) or queued a receive or a peer event, so that an event loop —
/// epoll, libuv, asyncio's `add_reader` — waits for the engine without a
/// thread of its own. To use it: wait until readable, read its 8 bytes
/// (clearing it), then look at the flags you are waiting on; look once right
/// after the first call too, as requests that ended before it made no event.
/// Made on the first call, the same fd after; the engine closes it at
/// `fabriclib_engine_destroy` (do not close it yourself; take it out of
/// your event loop first). With manual progress it turns readable only
/// while something progresses the engine.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `PROVIDER` (the kernel refused an eventfd).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_event_fd(engine: *const fabriclib_engine, fd: *mut i32) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        super::non_null(fd, "fd")?;
        put(fd, e.engine.event_fd()?)
    })
}

/// Copies the engine's address (a versioned binary blob to hand to peers out
/// of band) into `buf` of `cap` bytes and its length into `*len`. If `cap` is
/// too small (or `buf` is NULL), only `*len` is written and
/// `FABRICLIB_STATUS_BUFFER_TOO_SMALL` returned. Any thread.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
/// (a NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_address(
    engine: *const fabriclib_engine,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| write_blob(&handle(engine)?.engine.address().to_bytes(), buf, cap, len))
}

/// Writes the name of the libfabric provider in use (e.g. `"tcp;ofi_rxm"`) to
/// `*out`; the string lives as long as the engine. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_provider(
    engine: *const fabriclib_engine,
    out: *mut *const c_char,
) -> fabriclib_status {
    ffi(|| put(out, handle(engine)?.provider.as_ptr()))
}

/// Writes the largest message `fabriclib_submit_send` takes on this engine
/// to `*out`: 64 KiB, or 4096 bytes on `shm` (its inject size; 8 bytes less
/// on a provider whose messages name their sender in a header), whose larger
/// messages wait on the receiver's answer (a receiver that died would stall
/// every later one; libfabric 1.17). Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_max_send(engine: *const fabriclib_engine, out: *mut usize) -> fabriclib_status {
    ffi(|| put(out, handle(engine)?.engine.max_send_size()))
}
