//! `fabriclib_config`'s deadlines, limits and peer settings (config.rs has
//! the handle, its helpers and the other setters; split only for size: the
//! header lists these after them, as before).
use super::config::{config_mut, fabriclib_config, set_count};
use super::{fabriclib_status, ffi};
use crate::config::{PeerCallback, PeerState};
use crate::error::{Error, Status};
use crate::wire::NetAddr;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;
#[allow(non_camel_case_types)]
type fabriclib_peer_liveness = i32; // C: enum fabriclib_peer_liveness (codes.rs)

/// Sets the engine's default request deadline in microseconds (default 30 s;
/// 0: no deadline). Requests and immediate expectations that have not ended
/// by then end with `FABRICLIB_STATUS_TIMED_OUT`; one request may set its own
/// (`fabriclib_submit_opts.timeout_us`).
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_request_timeout(
    config: *mut fabriclib_config,
    timeout_us: u64,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.request_timeout = (timeout_us > 0).then(|| Duration::from_micros(timeout_us));
        Ok(())
    })
}

/// Sets how peer failure is detected: a keepalive goes to every known peer
/// each `interval_us` microseconds (default 500000), and a peer not heard
/// from for `peer_timeout_us` (default 3000000) is declared down: its pending requests
/// end with `FABRICLIB_STATUS_PEER_DOWN` and the peer callback is told.
/// Provider errors that mean "unreachable" (connection refused or reset)
/// declare it down at once. On IP providers (tcp), where a restarted
/// process can take the same address, a peer in use is also pinged every
/// 50 ms, and one not heard from for 100 ms (or `interval_us` if smaller)
/// is pinged before the next request to it is posted (a restarted peer's
/// old descriptors then end with `FABRICLIB_STATUS_STALE`).
/// `interval_us` must be at least 1000 (1 ms) and below `peer_timeout_us`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_keepalive_us(
    config: *mut fabriclib_config,
    interval_us: u64,
    peer_timeout_us: u64,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        if interval_us < 1000 || interval_us >= peer_timeout_us {
            return Err(Error::new(Status::InvalidArgument, "keepalive: need 1000 <= interval_us < peer_timeout_us"));
        }
        c.cfg.keepalive_interval = Duration::from_micros(interval_us);
        c.cfg.peer_timeout = Duration::from_micros(peer_timeout_us);
        Ok(())
    })
}

/// Sets how long (microseconds, default 1000000) a canceled, timed-out or
/// peer-down request waits for the provider to give back its work requests
/// already on the wire before it is reported anyway. Only providers that
/// never complete operations to a dead peer (libfabric 1.17's shm) need it.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_drain_timeout_us(
    config: *mut fabriclib_config,
    drain_us: u64,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.drain_timeout = Duration::from_micros(drain_us);
        Ok(())
    })
}

/// Sets how many requests may be in flight at once (default 65536): submitted
/// and not yet reported (a callback counts until it has returned; a flag
/// request until the end of the worker pass that stored its flag, a few
/// microseconds at most after the flag turned done). Beyond
/// it submits return `FABRICLIB_STATUS_AGAIN`, so that a slow callback
/// cannot make the engine queue completions without bound.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_max_inflight(
    config: *mut fabriclib_config,
    requests: usize,
) -> fabriclib_status {
    set_count(config, requests, "max_inflight", |c, n| c.max_inflight = n)
}

/// Sets how many work requests one peer may have in flight per NIC
/// (default 256). A dead or unreachable peer then holds at most this many of
/// the endpoint's (and the provider's shared) transmit resources, so the
/// engine goes on serving its other peers while it waits for the keepalive
/// to declare that peer down. Must be at least 1.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_peer_window(
    config: *mut fabriclib_config,
    work_requests: usize,
) -> fabriclib_status {
    set_count(config, work_requests, "peer_window", |c, n| c.peer_window = n)
}

/// Told when a peer engine comes up (`FABRICLIB_PEER_UP`, `why` 0) or goes
/// down (`FABRICLIB_PEER_DOWN`, `why` `FABRICLIB_STATUS_PEER_DOWN` or
/// `FABRICLIB_STATUS_STALE`), once each time, whatever its groups: an engine
/// is up when every pair of groups in contact with it is, down as soon as
/// one is. `addr` (`addr_len` bytes) is the peer's main address (what its
/// `fabriclib_engine_address` gives) — or, until one of its groups has said
/// it, the address of the group it was met through — valid during the call.
/// Runs on the engine's callback thread.
pub type fabriclib_peer_cb = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        addr: *const u8,
        addr_len: usize,
        state: fabriclib_peer_liveness,
        why: fabriclib_status,
    ),
>;

/// Sets the peer-state callback (NULL: none) and its `user_data`, which
/// must stay valid until every engine created from this config is destroyed.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_peer_callback(
    config: *mut fabriclib_config,
    callback: fabriclib_peer_cb,
    user_data: *mut c_void,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.on_peer_state = callback.map(|cb| {
            let ud = super::UserData(user_data);
            PeerCallback(Arc::new(move |addr: &NetAddr, state: PeerState, why: Option<&Error>| {
                let ud = &ud;
                let bytes = addr.to_bytes();
                let why = why.map_or(0, |e| e.status as i32);
                // SAFETY: the caller's callback with its user_data; addr is valid during the call.
                unsafe { cb(ud.0, bytes.as_ptr(), bytes.len(), state as i32, why) }
            }) as Arc<crate::config::PeerStateFn>)
        });
        Ok(())
    })
}
