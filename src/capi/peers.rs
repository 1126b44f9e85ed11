//! Peers: other engines, greeted, watched (keepalives, liveness) and
//! grouped for scatters and barriers.
use super::*;

#[allow(non_camel_case_types)]
type fabriclib_peer_liveness = i32; // C: enum fabriclib_peer_liveness (codes.rs)

/// === Peers ===
/// Other engines, named by their address blobs: greeted before the first
/// request, watched by keepalives, reported up or down, grouped for scatters.
///
/// Greets the engine whose address is `addr` (`addr_len` bytes) now, rather
/// than at the first request to it. A peer that is down is greeted afresh
/// (for example once its link is back) and comes up if it answers; until
/// then requests to it end at once with `FABRICLIB_STATUS_PEER_DOWN`. An
/// engine restarted elsewhere has a new address: just use that one.
///
/// With `opts` NULL the greeting is all. With `opts`, it is a request that
/// reports (callback or flag, with its deadline) once the peer is up:
/// `FABRICLIB_STATUS_OK` (at once if it already is), else
/// `FABRICLIB_STATUS_PEER_DOWN` / `STALE` / `TIMED_OUT` / `CANCELED` /
/// `SHUTDOWN`; its id goes to `*request_id` (unless NULL). A serving stack
/// warms its peers up this way at admission and knows when they are ready.
/// Any thread.
///
/// Returns: `OK` (greeted; with `opts`, the request then reports once);
/// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
/// foreign engine); `MALFORMED` (an address that does not parse); `AGAIN` (with
/// `opts`: the submission queue is full); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered. It never waits for the peer: `opts` reports
/// that.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_peer_add(
    engine: *const fabriclib_engine,
    addr: *const u8,
    addr_len: usize,
    opts: *const fabriclib_submit_opts,
    request_id: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let to = super::address(addr, addr_len, "addr")?;
        if opts.is_null() {
            return e.engine.add_peer(&to);
        }
        super::submit::id_out(request_id, e.engine.connect(&to, super::submit::on_done(opts)?))
    })
}

/// Greets every group of the engine whose groups blob
/// (`fabriclib_engine_groups_address`; a plain address counts as one group)
/// is `addr`/`addr_len`, from every group of this engine with as many NICs,
/// as `fabriclib_peer_add` does. `INVALID_ARGUMENT` unless both engines
/// have as many groups and as many NICs in each (the message names both);
/// `MALFORMED` for a bad blob. Any thread.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also where the two engines'
/// groups or NIC counts differ; `MALFORMED` (a bad blob); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered. It never waits for the peer.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_peer_add_engine(
    engine: *const fabriclib_engine,
    addr: *const u8,
    addr_len: usize,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        super::non_null(addr, "addr")?;
        let peer = crate::wire::EngineAddress::parse(super::bytes(addr, addr_len, "addr")?)?;
        e.engine.add_engine_peer(&peer)
    })
}

/// Writes the state of the peer engine named by `addr` (its address, any
/// of its groups' addresses, or its groups blob) to `*state`
/// (`FABRICLIB_PEER_*`): with DomainGroups every pair of groups in contact
/// counts, `FABRICLIB_PEER_DOWN` if any is down, else
/// `FABRICLIB_PEER_CONNECTING` if any has not answered yet, else
/// `FABRICLIB_PEER_UP`. `FABRICLIB_STATUS_NOT_FOUND` if this engine has
/// never been in contact with it. Any thread, fabriclib callbacks included
/// (it waits for the worker's answer).
///
/// Returns: `OK`; `NOT_FOUND` (no group of this engine has been in contact with
/// that engine); `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `MALFORMED` (an address that does not parse);
/// `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_peer_state(
    engine: *const fabriclib_engine,
    addr: *const u8,
    addr_len: usize,
    state: *mut fabriclib_peer_liveness,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        super::non_null(state, "state")?;
        match e.engine.peer_state(&super::engine_of(addr, addr_len, "addr")?)? {
            Some(s) => put(state, s as i32),
            None => Err(Error::new(Status::NotFound, "this engine has never been in contact with that peer")),
        }
    })
}

/// Forgets the peer engine named by `addr` (its address, any of its groups'
/// addresses, or its groups blob) in every group of this engine, and
/// writes how many requests that ended to `*ended` unless it is NULL. Its
/// pending requests end with `FABRICLIB_STATUS_CANCELED`, as for
/// `fabriclib_cancel_peer`; then it is no longer pinged, never reported up
/// or down again, and its messages no longer name it
/// (`fabriclib_message.from`) until it greets this engine again, as a new
/// peer. Descriptors it owns (`fabriclib_remote_mr`) stay valid: a request
/// that names one later greets the engine afresh. The provider's own state
/// for it (libfabric's address entry and connection, verbs' queue pairs)
/// stays until the engine is destroyed. Any thread, fabriclib callbacks
/// included (it waits for the worker's answer).
///
/// Returns: `OK`; `NOT_FOUND` (no group of this engine has been in contact
/// with that engine, or it was removed already); `INVALID_ARGUMENT` (a NULL
/// pointer argument, or a peer set lists the peer: remove the set first,
/// `fabriclib_remove_peer_set`); `BAD_HANDLE` (a destroyed or foreign
/// engine); `MALFORMED` (an address that does not parse); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_peer_remove(
    engine: *const fabriclib_engine,
    addr: *const u8,
    addr_len: usize,
    ended: *mut usize,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        let n = e.engine.remove_peer(&super::engine_of(addr, addr_len, "addr")?)?;
        put_opt(ended, n)
    })
}

/// Resolves `count` peer engine addresses (`addrs[i]` of `addr_lens[i]`
/// bytes) once, so scatters and barriers to them skip per-destination
/// lookups. Writes a non-zero peer set handle to `*out`. Any thread.
/// (Before 0.4: `fabriclib_add_peer_group`.)
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
/// destroyed or foreign engine); `INVALID_ARGUMENT` also for a count of 0;
/// `MALFORMED` (an address that does not parse); `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_add_peer_set(
    engine: *const fabriclib_engine,
    addrs: fabriclib_blob_list,
    addr_lens: *const usize,
    count: usize,
    out: *mut u64,
) -> fabriclib_status {
    ffi(|| {
        let e = handle(engine)?;
        non_null(addrs, "addrs")?;
        non_null(addr_lens, "addr_lens")?;
        non_null(out, "out")?;
        let parsed = (0..count)
            .map(|i| {
                // SAFETY: addrs and addr_lens have count entries (API contract).
                let (p, l) = unsafe { (*addrs.add(i), *addr_lens.add(i)) };
                address(p, l, "addrs[i]")
            })
            .collect::<Result<Vec<_>>>()?;
        put(out, e.engine.add_peer_set(&parsed)?.0)
    })
}

/// Removes peer set `set` (`fabriclib_add_peer_set`): scatters and barriers
/// through it are refused from now on (`FABRICLIB_STATUS_BAD_HANDLE`); one
/// submitted through it that the engine has not started yet ends with
/// `FABRICLIB_STATUS_BAD_HANDLE`, one already started goes on to its end.
/// The peers themselves stay known. Any thread, fabriclib callbacks
/// included.
///
/// Returns: `OK`; `BAD_HANDLE` (no such set, or removed already; or a
/// destroyed or foreign engine); `INVALID_ARGUMENT` (`engine` NULL);
/// `SHUTDOWN`.
/// Blocks: until the engine's worker answers (each group's, in turn):
/// microseconds while it runs; in manual-progress mode the call progresses the
/// engine itself until answered.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_remove_peer_set(engine: *const fabriclib_engine, set: u64) -> fabriclib_status {
    ffi(|| handle(engine)?.engine.remove_peer_set(crate::engine::PeerSet(set)))
}
