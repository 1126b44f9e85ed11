//! GPUs from C: watchers (a word a kernel bumps, a callback on the watcher
//! thread), memory that both a kernel and the CPU reach (for flags and
//! mirrored immediate counters), device-memory registration. CUDA is loaded
//! at run time; without a driver these calls say `FABRICLIB_STATUS_UNSUPPORTED`
//! (watchers and mapped memory fall back to host memory when asked for
//! `FABRICLIB_MEMORY_AUTO`).
use super::submit::{UserData, read_sized};
use super::{fabriclib_engine, fabriclib_status, ffi, give, handle, non_null, put, release};
use crate::gpu::MemoryKind;
use crate::watcher::Watcher;
use std::ffi::c_void;
use std::sync::atomic::AtomicU64;

#[allow(non_camel_case_types)]
type fabriclib_memory = u32; // C: enum fabriclib_memory (codes.rs)

/// Called on the engine's watcher thread when it sees a watched word change:
/// `old_value` is the value the previous call reported (0 at first),
/// `new_value` the word's value now. Values may be skipped (two changes
/// between two looks give one call), never reordered. Must not throw; keep
/// it short (one thread calls every watcher of the engine); any fabriclib
/// call may be made from it, including destroying this watcher.
pub type fabriclib_watcher_cb = Option<unsafe extern "C" fn(user_data: *mut c_void, old_value: u64, new_value: u64)>;

/// Options of a watcher. Zero-initialise, set `struct_size =
/// sizeof(fabriclib_watcher_opts)` and `callback`. `memory` is one of
/// `FABRICLIB_MEMORY_*` (0: auto); `device` the CUDA device whose context
/// allocates it when the calling thread has none (the memory is portable:
/// every context can use it).
#[repr(C)]
pub struct fabriclib_watcher_opts {
    pub struct_size: usize,
    pub callback: fabriclib_watcher_cb,
    pub user_data: *mut c_void,
    pub memory: fabriclib_memory,
    pub device: i32,
}

/// The smallest `struct_size` accepted (0.2's layout). Never grows.
const WATCHER_OPTS_V1: usize = size_of::<fabriclib_watcher_opts>();

/// A watched 64-bit word and its callback.
pub struct fabriclib_watcher {
    magic: AtomicU64,
    w: Watcher,
}

super::impl_handle!(fabriclib_watcher, 0xfab1_3a7c_0000_0007, "watcher");

/// === Watchers ===
/// `fabriclib_watcher`: a 64-bit word a GPU kernel (or a thread) bumps; the
/// engine's watcher thread calls back on each change, in order, skipping none it saw.
///
/// Creates a watcher: a 64-bit word, zero at first, that the engine's
/// watcher thread (started with the first watcher) polls, calling
/// `opts->callback(opts->user_data, old, new)` when it changes. Get the word
/// with `fabriclib_watcher_host_ptr` / `fabriclib_watcher_device_ptr`. A kernel
/// bumps it with a volatile store followed by `__threadfence_system()`; that
/// works inside a CUDA graph too:
///
/// ```c
/// __global__ void layer_done(volatile uint64_t *w, uint64_t layer) {
///     // ... the layer's outputs are written above ...
///     __threadfence_system();       // outputs visible to the CPU first
///     *w = layer + 1;               // then the signal
///     __threadfence_system();
/// }
/// ```
///
/// `user_data` must stay valid until `fabriclib_watcher_destroy` returns.
/// Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a memory kind that
/// is not a `FABRICLIB_MEMORY_*` or a callback NULL; `UNSUPPORTED` (CUDA-mapped
/// memory without a CUDA driver); `PROVIDER` (allocating the word failed);
/// `SHUTDOWN`.
/// Blocks: briefly: it allocates the word and starts the watcher thread on
/// first use; it never waits for the worker.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_watcher_create(
    engine: *const fabriclib_engine,
    opts: *const fabriclib_watcher_opts,
    out: *mut *mut fabriclib_watcher,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        non_null(opts, "opts")?;
        non_null(out, "out")?;
        let o = read_sized(opts, WATCHER_OPTS_V1, "fabriclib_watcher_opts")?;
        let Some(cb) = o.callback else {
            crate::bail!(InvalidArgument, "fabriclib_watcher_opts.callback is NULL");
        };
        let kind = MemoryKind::from_code(o.memory)?;
        let ud = UserData(o.user_data);
        let w = e.engine.watch(
            kind,
            o.device,
            Box::new(move |old, new| {
                let ud = &ud;
                // SAFETY: the caller's callback and user_data (valid until destroy).
                unsafe { cb(ud.0, old, new) }
            }),
        )?;
        give(out, fabriclib_watcher { magic: AtomicU64::new(0), w })
    })
}

/// Writes the word's address for the CPU to `*out`. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a
/// destroyed or foreign watcher).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_watcher_host_ptr(w: *const fabriclib_watcher, out: *mut *mut u64) -> fabriclib_status {
    ffi(|| put(out, handle(w)?.w.host_ptr()))
}

/// Writes the word's address for a kernel to `*out`;
/// `FABRICLIB_STATUS_UNSUPPORTED` if it is plain host memory (no CUDA, or
/// `FABRICLIB_MEMORY_HOST`). Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a
/// destroyed or foreign watcher); `UNSUPPORTED` (a watcher of plain host
/// memory).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_watcher_device_ptr(w: *const fabriclib_watcher, out: *mut u64) -> fabriclib_status {
    ffi(|| {
        let Some(d) = handle(w)?.w.device_ptr() else {
            crate::bail!(Unsupported, "this watcher's word is plain host memory: no kernel can reach it");
        };
        put(out, d)
    })
}

/// Stops the watcher and frees its word (NULL is a no-op). No callback of it
/// runs after this returns, except the one it is called from (allowed).
/// It waits for a callback of the engine's watcher thread that is running.
///
/// Returns: nothing (NULL is ignored).
/// Blocks: until a callback of this watcher that is running returns (from that
/// callback itself it does not wait).
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_watcher_destroy(w: *mut fabriclib_watcher) {
    release(w);
}
