//! Diagnostics: the library's version, status names, the last error
//! message of a thread, and an engine's counters.
use super::*;

type fabriclib_log_level = u32; // C: enum fabriclib_log_level (codes.rs)
use std::ffi::c_void;

/// The smallest `fabriclib_counters.struct_size` accepted (0.3's layout:
/// six words). Never grows.
const COUNTERS_V1: usize = 48;

/// === Diagnostics ===
/// The library's version, the names of status codes, the calling thread's
/// last error message, and an engine's counters per NIC and peer.
///
/// The library's version, e.g. `"0.4.0"` (the header's is
/// `FABRICLIB_VERSION_STRING`). Static string; never fails.
///
/// Returns: the version string (static).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library's version as one number, `FABRICLIB_VERSION_NUMBER(major,
/// minor, patch)`: compare it with the header's `FABRICLIB_VERSION`.
///
/// Returns: the version as a number (`FABRICLIB_VERSION_NUMBER`'s scheme).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_version_number() -> u32 {
    let n = |s: &str| s.parse::<u32>().unwrap_or(0);
    n(env!("CARGO_PKG_VERSION_MAJOR")) * 1_000_000
        + n(env!("CARGO_PKG_VERSION_MINOR")) * 1_000
        + n(env!("CARGO_PKG_VERSION_PATCH"))
}

/// A static, human-readable description of a status code (never NULL;
/// unknown codes give "unknown status"). Takes a plain `int32_t`, so that a
/// status taken from a flag word (`flag & FABRICLIB_FLAG_STATUS_MASK`) needs
/// no cast in C++.
///
/// Returns: a static description of `status` (an unknown code has one too).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_status_str(status: i32) -> *const c_char {
    static NAMES: std::sync::LazyLock<Vec<CString>> =
        std::sync::LazyLock::new(|| Status::ALL.iter().map(|s| CString::new(s.as_str()).unwrap()).collect());
    match Status::from_code(status) {
        Some(s) => NAMES[s as usize].as_ptr(),
        None => c"unknown status".as_ptr(),
    }
}

/// The message of the last call that failed on the calling thread (empty if
/// none). Successful calls do not clear it. The pointer stays valid until the
/// next failing fabriclib call on this thread.
///
/// Returns: the calling thread's last error message, or an empty string (valid
/// until its next fabriclib call).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_last_error_message() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Reads the counters of NIC `nic` (numbered as `fabriclib_engine_nic`
/// numbers them) into `*out`: its totals
/// with `peer` NULL, else what it did for the peer whose engine address
/// (`fabriclib_engine_address`'s blob) is `peer`/`peer_len` (zeros if
/// none). The application's requests only, not the engine's own messages.
/// `INVALID_ARGUMENT` for a NIC the engine does not have, a
/// `struct_size` below 0.3's (48), NULL `out`; `MALFORMED` for a bad
/// address. Any thread; read without stopping the worker (the counters are
/// its atomics), so a manual-progress engine need not be progressed.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a NIC the engine
/// does not have or a `struct_size` below this version's; `MALFORMED` (a
/// `peer` address that does not parse); `SHUTDOWN`.
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_counters(
    engine: *const fabriclib_engine,
    nic: u32,
    peer: *const u8,
    peer_len: usize,
    out: *mut fabriclib_counters,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let size = struct_size(out, COUNTERS_V1, "fabriclib_counters")?;
        let want = match peer.is_null() {
            true => None,
            // SAFETY: the caller passes peer_len readable bytes (API contract).
            false => Some(crate::wire::NetAddr::parse(unsafe { std::slice::from_raw_parts(peer, peer_len) })?),
        };
        let all = e.engine.counters()?;
        let Some(one) = all.nics.get(nic as usize) else {
            crate::bail!(InvalidArgument, "NIC {nic}: the engine has {}", all.nics.len());
        };
        let c = match &want {
            None => one.total,
            Some(a) => one.peers.iter().find(|(p, _)| *p == a.epoch).map(|(_, c)| *c).unwrap_or_default(),
        };
        let v = fabriclib_counters {
            struct_size: size,
            wrs_posted: c.wrs_posted,
            bytes_posted: c.bytes_posted,
            wrs_completed: c.wrs_completed,
            bytes_completed: c.bytes_completed,
            errors: c.errors,
            wrs_in_flight: c.wrs_in_flight(),
            errors_by_status: c.errors_by_status,
        };
        write_versioned(out, v, size);
        Ok(())
    })
}

/// Where fabriclib's own messages go (`fabriclib_set_log_callback`):
/// `message` (UTF-8, no prefix, no newline) is valid during the call.
/// Called from any fabriclib thread, several at once; must not throw (C++:
/// declare it `FABRICLIB_NOEXCEPT`); may call `fabriclib_set_log_callback`.
pub type fabriclib_log_cb =
    Option<unsafe extern "C" fn(user_data: *mut c_void, level: fabriclib_log_level, message: *const c_char)>;

/// Sends fabriclib's own messages — a callback that panicked, a receive
/// buffer that could not be reposted, a call refused where no status can
/// say so — to `callback(user_data, level, message)` (`level` a
/// `FABRICLIB_LOG_LEVEL_*`) instead of standard error; `callback` NULL: back to
/// standard error (each message prefixed `fabriclib: `). Process-wide, for
/// every engine, from the next message on; `user_data` must stay valid until
/// another call replaces it. Errors of calls are not logged: they are
/// returned (`fabriclib_last_error_message`).
///
/// Returns: `OK`.
/// Blocks: until a message being delivered to the old callback has been
/// handed over (not until it returns).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_set_log_callback(callback: fabriclib_log_cb, user_data: *mut c_void) -> fabriclib_status {
    ffi(|| {
        struct UserData(*mut c_void);
        // SAFETY: the caller's pointer, handed back to the caller's callback;
        // the callback is documented to be called from any thread.
        unsafe impl Send for UserData {}
        unsafe impl Sync for UserData {}
        impl UserData {
            // A method, so that the closure captures the whole (Send) struct.
            fn get(&self) -> *mut c_void {
                self.0
            }
        }
        let sink: Option<crate::log::Sink> = callback.map(|cb| {
            let ud = UserData(user_data);
            std::sync::Arc::new(move |level: crate::log::Level, msg: &str| {
                let m = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
                // SAFETY: the caller's callback, with its user_data and a string valid during the call.
                unsafe { cb(ud.get(), level as fabriclib_log_level, m.as_ptr()) }
            }) as crate::log::Sink
        });
        crate::log::set_sink(sink);
        Ok(())
    })
}

/// What an engine can do, read without trying (`fabriclib_engine_caps`).
/// Zero-initialise and set `struct_size = sizeof(fabriclib_caps)`; the
/// library writes the fields that fit in `struct_size` (fields a later
/// version adds stay as they are).
#[repr(C)]
pub struct fabriclib_caps {
    pub struct_size: usize,
    /// The largest write one work request carries on every NIC: the largest
    /// page of a paged write, and of a write with an immediate (a single
    /// write without one is split).
    pub max_msg_size: u64,
    /// The largest message `fabriclib_submit_send` takes.
    pub max_send: u64,
    /// The most buffers one receive pool takes (`FABRICLIB_MAX_RECV_BUFFERS`).
    pub max_recv_buffers: u64,
    /// Its NICs (every group's) and DomainGroups.
    pub nic_count: u32,
    pub group_count: u32,
    /// Whether every NIC registers CUDA device memory
    /// (`fabriclib_mr_register_device`; else it returns `UNSUPPORTED`).
    pub device_memory: bool,
    /// Whether requests may ask for `FABRICLIB_SUBMIT_DELIVERED` (else the
    /// submit returns `UNSUPPORTED`).
    pub delivered: bool,
    /// Whether the engine runs in manual-progress mode.
    pub manual_progress: bool,
}

/// The smallest `fabriclib_caps.struct_size` accepted (0.4's layout). Never grows.
const CAPS_V1: usize = size_of::<fabriclib_caps>();

/// Writes what the engine can do into `*caps`: its limits (the largest
/// write per work request, the largest message, the most receive buffers
/// per pool), its NIC and group counts, whether its NICs register device
/// memory and whether requests may ask for confirmed delivery. Paged writes
/// take any number of pages (the index arrays are copied). The provider's
/// name: `fabriclib_engine_provider`; each NIC: `fabriclib_engine_nic`.
/// Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument, or a
/// `struct_size` below this version's); `BAD_HANDLE` (a destroyed or foreign
/// engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_caps(
    engine: *const fabriclib_engine,
    caps: *mut fabriclib_caps,
) -> fabriclib_status {
    ffi(|| {
        let e = &handle(engine)?.engine;
        let size = struct_size(caps, CAPS_V1, "fabriclib_caps")?;
        let c = fabriclib_caps {
            struct_size: size,
            max_msg_size: e.max_msg_size() as u64,
            max_send: e.max_send_size() as u64,
            max_recv_buffers: crate::engine::MAX_RECV_BUFFERS as u64,
            nic_count: e.nics().len() as u32,
            group_count: e.group_count() as u32,
            device_memory: e.device_memory(),
            delivered: e.delivery_fences(),
            manual_progress: e.is_manual(),
        };
        // SAFETY: the caller's struct has at least CAPS_V1 (= size_of) bytes.
        unsafe { caps.write_unaligned(c) };
        Ok(())
    })
}
