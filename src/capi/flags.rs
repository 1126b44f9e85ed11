//! Completion flags and failed requests, for callers that watch a flag
//! rather than take a callback: waiting on a flag, and why a request failed.
use super::submit::FABRICLIB_NO_TIMEOUT;
use super::{fabriclib_engine, fabriclib_status, ffi, handle, non_null, put, put_opt};
use crate::completion::notify::RequestId;
use crate::error::{Error, Result, Status};
use std::ffi::c_char;

/// Waits until the completion flag word `flag` (a request's
/// `fabriclib_submit_opts.flag`) holds `FABRICLIB_FLAG_DONE`, sleeping (a
/// futex) rather than spinning after the first 20 µs (while it spins it
/// yields the CPU on every look on a host of 4 CPUs or fewer, on every 32nd
/// on a larger one), and writes the word
/// to `*value` (unless NULL): `FABRICLIB_FLAG_DONE | status`. Returns
/// `FABRICLIB_STATUS_OK` once done; `FABRICLIB_STATUS_TIMED_OUT` if
/// `timeout_us` passed first (0: only look; `FABRICLIB_NO_TIMEOUT`: wait
/// for ever). Any thread, several at once; the flag may be a `uint32_t`, a
/// C11 `_Atomic uint32_t` or a C++ `std::atomic<uint32_t>`. (Was
/// `fabriclib_flag_wait` before 0.4, which returned `AGAIN` on a timeout.)
///
/// Returns: `OK` (the flag is done); `TIMED_OUT` (`timeout_us` passed first);
/// `INVALID_ARGUMENT` (`flag` NULL or not 4-byte aligned).
/// Blocks: up to `timeout_us` (`FABRICLIB_NO_TIMEOUT`: until the flag is done).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_flag_await(flag: *const u32, timeout_us: u64, value: *mut u32) -> fabriclib_status {
    ffi(|| {
        let f = flag_word(flag, "fabriclib_flag_await")?;
        crate::completion::notify::refuse_on_worker("fabriclib_flag_await")?;
        match crate::completion::flag::wait(f, timeout(timeout_us)) {
            Some(v) => put_opt(value, v),
            None => Err(Error::new(Status::TimedOut, "fabriclib_flag_await: the request did not end in time")),
        }
    })
}

/// A caller's completion flag word: non-null and 4-byte aligned.
pub(super) fn flag_word<'a>(flag: *const u32, what: &str) -> Result<&'a std::sync::atomic::AtomicU32> {
    non_null(flag, "flag")?;
    if flag as usize % 4 != 0 {
        crate::bail!(InvalidArgument, "{what}: flag is not 4-byte aligned");
    }
    // SAFETY: non-null, aligned; the caller keeps it valid during the call
    // and only the worker's atomic store writes it meanwhile (API contract).
    Ok(unsafe { &*(flag as *const std::sync::atomic::AtomicU32) })
}

/// A timeout in microseconds; `FABRICLIB_NO_TIMEOUT`: none.
pub(super) fn timeout(us: u64) -> Option<std::time::Duration> {
    (us != FABRICLIB_NO_TIMEOUT).then(|| std::time::Duration::from_micros(us))
}

/// Why request `request_id` (a submit's or an expectation's id) failed, for
/// callers that watch a flag rather than take a callback: writes its status
/// to `*status` and its message, NUL-terminated, into `buf` of `cap` bytes
/// (the length with the NUL to `*len`; if it does not fit, only `*len`,
/// with `FABRICLIB_STATUS_BUFFER_TOO_SMALL`). The errors of the last 1024
/// failed requests are kept, and each is there before its flag is stored;
/// `FABRICLIB_STATUS_NOT_FOUND` for a request that has not failed (still
/// running, ended OK) or failed longer ago. Any thread.
///
/// Returns: `OK`; `NOT_FOUND` (the request has not failed, or failed over 1024
/// failures ago); `BUFFER_TOO_SMALL` (only `*status` and `*len` written);
/// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
/// foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_request_error(
    engine: *const fabriclib_engine,
    request_id: u64,
    status: *mut fabriclib_status,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| {
        non_null(status, "status")?;
        let Some(err) = handle(engine)?.engine.request_error(RequestId(request_id)) else {
            crate::bail!(NotFound, "request {request_id} has not failed (or failed over 1024 failures ago)");
        };
        put(status, err.status as fabriclib_status)?;
        let mut text = err.message.replace('\0', " ").into_bytes();
        text.push(0);
        super::write_blob(&text, buf.cast(), cap, len)
    })
}
