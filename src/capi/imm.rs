//! Immediates: the 32-bit values writes carry, counted per value on the
//! receiver; expectations fire when a count is reached, mirrors copy it to a word.
use super::*;

/// === Immediates ===
/// The 32-bit values writes carry, counted per value on the receiver:
/// an expectation fires when its count has landed; a mirror copies the count to a word.
///
/// Reports through `opts` once `count` (>= 1) writes carrying immediate `imm`
/// have landed in this engine's memory. Immediates that arrived before the
/// call count too; a surplus is kept for the next expectation. At most one
/// expectation per immediate value at a time (`FABRICLIB_STATUS_ALREADY_EXISTS`).
/// An expectation that fails (timed out, canceled, shut down) discards the
/// immediates it had counted: they can never complete a later expectation.
/// Immediates of that transfer that land after it failed count afresh, even
/// after its writer reported OK (OK frees the source; it does not mean the
/// target counted): use a new value after a failure rather than resetting
/// this one (docs/failure-semantics.md, "OK is not landed"). Any thread.
///
/// Returns: `OK` (the expectation then reports once); `INVALID_ARGUMENT` (a
/// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
/// `INVALID_ARGUMENT` also for a count of 0; `ALREADY_EXISTS` (that immediate
/// already has an expectation armed); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_expect_imm_count(
    engine: *const fabriclib_engine,
    imm: u32,
    count: u32,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| id_out(request_id, handle(engine)?.engine.expect_imm_count(imm, count, on_done(opts)?)))
}

/// Writes to `*count` how many writes carrying immediate `imm` have landed
/// and are not yet taken by an expectation. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_imm_count_get(
    engine: *const fabriclib_engine,
    imm: u32,
    count: *mut u64,
) -> fabriclib_status {
    ffi(|| put(count, handle(engine)?.engine.imm_count(imm, false)?))
}

/// Sets the count of immediate `imm` to 0 and writes what it was to
/// `*previous` (unless NULL). An armed expectation on `imm` stays armed and
/// counts from 0. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_imm_count_reset(
    engine: *const fabriclib_engine,
    imm: u32,
    previous: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let n = handle(engine)?.engine.imm_count(imm, true)?;
        put_opt(previous, n)
    })
}

/// Mirrors immediate `imm` into `*word` (NULL: stops mirroring): the worker
/// sets the word at once to what `fabriclib_imm_count_get` would report, then
/// adds one, with a release store, for every later arrival of `imm`.
/// Expectations and resets do not lower it, so a kernel (or a thread) waits
/// for "at least n" with a volatile load, then `__threadfence_system()`
/// before it reads the data. Put the word in `fabriclib_mapped_alloc` memory
/// for a kernel. The word must be 8-byte aligned and stay valid until this
/// is called again for `imm` (another word, or NULL) and has returned, or
/// the engine is destroyed. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a misaligned word;
/// `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_imm_mirror(engine: *const fabriclib_engine, imm: u32, word: *mut u64) -> fabriclib_status {
    // SAFETY: the caller's contract above.
    ffi(|| unsafe { handle(engine)?.engine.mirror_imm_count(imm, word as *const AtomicU64) })
}
