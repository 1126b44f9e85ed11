//! The C ABI. Thin by design: every function checks its pointers and
//! handles, converts types and calls the Rust API (`crate::engine`); no
//! logic lives here. Conventions (also in the header's preamble):
//! - every function returns a `fabriclib_status` (0 = OK) unless it cannot fail;
//! - out-pointers are written only on success;
//! - details of the last failure on this thread: `fabriclib_last_error_message()`;
//! - panics never cross the boundary (they become `FABRICLIB_STATUS_PANIC`);
//! - callbacks take `void *user_data` first and run on the engine's callback
//!   thread, never inside the submit call.
#![allow(non_camel_case_types)]
// C entry points take raw pointers by nature; each one documents its contract.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::error::{Error, Result, Status};
use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};

/// A status code, as every entry point returns it: `Status` as its `i32`
/// code. The header declares it from `Status` itself (error.rs): `enum
/// fabriclib_status` with the `FABRICLIB_STATUS_*` enumerators, and
/// `fabriclib_status` an `int32_t` in C before C23, the enum (of underlying
/// type `int32_t`) in C23 and C++.
pub type fabriclib_status = i32;

/// Set in a completion flag word once its request has ended; the low 16 bits
/// then hold the request's `fabriclib_status`. Test this bit only: bit 31
/// may be set while a thread sleeps in `fabriclib_flag_await`.
pub const FABRICLIB_FLAG_DONE: u32 = 0x1_0000;
/// Mask for the status in a completion flag word.
pub const FABRICLIB_FLAG_STATUS_MASK: u32 = 0xffff;
const _: () = assert!(FABRICLIB_FLAG_DONE == crate::completion::flag::FLAG_DONE);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f` behind the panic boundary and turns its outcome into a status.
pub(crate) fn ffi(f: impl FnOnce() -> Result<()>) -> fabriclib_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => Status::Ok as fabriclib_status,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status as i32
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last_error(&format!("panic inside fabriclib: {what}"));
            Status::Panic as fabriclib_status
        }
    }
}

/// `Err(InvalidArgument)` naming `what` if `p` is NULL.
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<()> {
    if p.is_null() { Err(Error::new(Status::InvalidArgument, format!("{what} is NULL"))) } else { Ok(()) }
}

/// A handle's first field: identifies the type and whether it is still alive.
pub(crate) trait Handle: Sized {
    const MAGIC: u64;
    const NAME: &'static str;
    /// The handle's magic word: `MAGIC` while alive, 0 once destroyed.
    fn magic(&self) -> &AtomicU64;
}

/// Implements `Handle` for a handle struct with a `magic: AtomicU64` field.
macro_rules! impl_handle {
    ($t:ident, $magic:expr, $name:expr) => {
        impl $crate::capi::Handle for $t {
            const MAGIC: u64 = $magic;
            const NAME: &'static str = $name;
            fn magic(&self) -> &std::sync::atomic::AtomicU64 {
                &self.magic
            }
        }
    };
}
pub(crate) use impl_handle;

/// Writes `v` through the out-pointer `out` (checked for NULL).
pub(crate) fn put<T>(out: *mut T, v: T) -> Result<()> {
    non_null(out, "out")?;
    // SAFETY: non-null; the caller passes a pointer to writable storage for a T.
    unsafe { out.write(v) };
    Ok(())
}

/// Writes `v` to `out` unless `out` is NULL (an optional out-pointer).
pub(crate) fn put_opt<T>(out: *mut T, v: T) -> Result<()> {
    if out.is_null() { Ok(()) } else { put(out, v) }
}

/// Boxes a new handle and writes it to `out`. A NULL `out` is refused before
/// anything is boxed (the value is dropped, not leaked).
pub(crate) fn give<T: Handle>(out: *mut *mut T, h: T) -> Result<()> {
    non_null(out, "out")?;
    h.magic().store(T::MAGIC, Ordering::Relaxed);
    put(out, Box::into_raw(Box::new(h)))
}

/// Destroys a handle made by `give` (NULL is a no-op): clears its magic so a
/// later use is detected, then drops it.
pub(crate) fn release<T: Handle>(p: *mut T) -> fabriclib_status {
    ffi(|| {
        if p.is_null() {
            return Ok(());
        }
        handle(p as *const T)?;
        // SAFETY: a live handle from `give` (checked above), released once.
        let b = unsafe { Box::from_raw(p) };
        b.magic().store(0, Ordering::Relaxed);
        drop(b);
        Ok(())
    })
}

/// Checks a handle pointer: NULL, destroyed or of another type give an error.
/// (A freed handle is detected as long as its memory was not reused.)
pub(crate) fn handle<'a, T: Handle>(p: *const T) -> Result<&'a T> {
    non_null(p, T::NAME)?;
    // SAFETY: non-null; the caller passes a pointer obtained from fabriclib.
    // A stale pointer is detected through the magic word, which destroy clears.
    let h = unsafe { &*p };
    if h.magic().load(Ordering::Relaxed) != T::MAGIC {
        return Err(Error::new(Status::BadHandle, format!("{} is destroyed or not a {}", T::NAME, T::NAME)));
    }
    Ok(h)
}

/// Writes `bytes` to `buf` (capacity `cap`) and its length to `len`. If it
/// does not fit, only `len` is written, with `BufferTooSmall`.
pub(crate) fn write_blob(bytes: &[u8], buf: *mut u8, cap: usize, len: *mut usize) -> Result<()> {
    non_null(len, "len")?;
    // SAFETY: len is non-null and points to a size_t the caller owns.
    unsafe { *len = bytes.len() };
    if bytes.len() > cap || buf.is_null() {
        return Err(Error::new(Status::BufferTooSmall, format!("{} bytes needed, {cap} given", bytes.len())));
    }
    // SAFETY: buf has room for cap >= bytes.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    Ok(())
}

/// The `struct_size` a caller's versioned struct `p` (named `what`) starts
/// with: non-null, at least `min` (the first version's size).
pub(crate) fn struct_size<T>(p: *mut T, min: usize, what: &str) -> crate::error::Result<usize> {
    non_null(p, what)?;
    // SAFETY: non-null; the caller's struct starts with its size (API contract).
    let size = unsafe { p.cast::<usize>().read_unaligned() };
    if size < min {
        crate::bail!(InvalidArgument, "{what}.struct_size is {size}: set it to sizeof (at least {min})");
    }
    Ok(size)
}

/// Writes the first `size` bytes of `v` (all of it if `size` is larger) to
/// the caller's versioned struct `out`, whose `struct_size` is `size`:
/// fields a later version adds stay as the caller set them.
pub(crate) fn write_versioned<T>(out: *mut T, v: T, size: usize) {
    let n = size.min(size_of::<T>());
    // SAFETY: `out` is non-null (struct_size checked it) and the caller's
    // struct has `size` bytes (API contract); `v` is plain data.
    unsafe { std::ptr::copy_nonoverlapping((&v as *const T).cast::<u8>(), out.cast::<u8>(), n) };
}

/// Borrows `len` bytes at `p` (NULL only if `len` is 0).
pub(crate) fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    non_null(p, what)?;
    // SAFETY: the caller guarantees p points to len readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Borrows the `count` items at `p`, a list that may not be empty (`call`
/// names the function, `what` the list, in errors).
pub(crate) fn list<'a, T>(p: *const T, count: usize, call: &str, what: &str) -> Result<&'a [T]> {
    if count == 0 {
        return Err(Error::new(Status::InvalidArgument, format!("{call}: count is 0")));
    }
    non_null(p, what)?;
    // SAFETY: the caller guarantees p points to count readable items (API contract).
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

/// Parses an engine address blob of `len` bytes at `p` (`what` names it in errors).
pub(crate) fn address(p: *const u8, len: usize, what: &str) -> Result<crate::wire::NetAddr> {
    non_null(p, what)?;
    crate::wire::NetAddr::parse(bytes(p, len, what)?)
}

/// An address blob or a groups blob: the engine it names (by its first
/// group's address: every group's address names the same engine).
pub(crate) fn engine_of(p: *const u8, len: usize, what: &str) -> Result<crate::wire::NetAddr> {
    non_null(p, what)?;
    Ok(crate::wire::EngineAddress::parse(bytes(p, len, what)?)?.groups.swap_remove(0))
}

/// Most receive buffers one `fabriclib_submit_recvs` pool may have.
pub const FABRICLIB_MAX_RECV_BUFFERS: usize = 4096;
/// Largest message `fabriclib_submit_send` takes (some providers take less:
/// `fabriclib_engine_max_send`).
pub const FABRICLIB_MAX_SEND: usize = 65536;
/// Largest engine address blob (`fabriclib_engine_address`): a buffer this
/// size always fits, whatever the provider and NIC count.
pub const FABRICLIB_MAX_ADDRESS_LEN: usize = 2081;
/// Largest groups-address blob (`fabriclib_engine_groups_address`).
pub const FABRICLIB_MAX_ENGINE_ADDRESS_LEN: usize = 33177;
/// Largest region descriptor blob (`fabriclib_mr_descriptor`).
pub const FABRICLIB_MAX_DESCRIPTOR_LEN: usize = 2226;
const _: () = {
    assert!(FABRICLIB_MAX_RECV_BUFFERS == crate::engine::MAX_RECV_BUFFERS);
    assert!(FABRICLIB_MAX_SEND == crate::worker::MAX_SEND);
    assert!(FABRICLIB_MAX_ADDRESS_LEN == crate::wire::MAX_ADDRESS_LEN);
    assert!(FABRICLIB_MAX_ENGINE_ADDRESS_LEN == crate::wire::MAX_ENGINE_ADDRESS_LEN);
    assert!(FABRICLIB_MAX_DESCRIPTOR_LEN == crate::wire::MAX_DESCRIPTOR_LEN);
};

// One file per C object, in the header's order: cbindgen keeps source order,
// and each declaration stands alone so that rustfmt keeps this order too.
mod codes;

mod config;
mod config_limits;

mod engine;

mod memory;

mod remote;

mod peers;

mod submit;

mod recv;

mod flags;

mod imm;

mod watcher;

mod mapped;

mod nics;

mod diag;

mod metrics;

pub use config::*;
pub use diag::*;
pub use engine::*;
pub use flags::*;
pub use imm::*;
pub use mapped::*;
pub use memory::*;
pub use metrics::*;
pub use nics::*;
pub use peers::*;
pub use recv::*;
pub use remote::*;
pub(crate) use submit::UserData;
pub use submit::*;
pub use watcher::*;
