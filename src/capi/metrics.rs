//! Metrics: an engine's counters and histograms as a versioned struct, and
//! as JSON or Prometheus text (metrics/mod.rs, metrics/export.rs).
use super::*;
use crate::metrics::{
    GROUP_HISTS, HIST_BUCKETS, HistSnap, IMM_TO_EXPECTATION, KINDS, POST_TO_DONE, REQUEST_BYTES, REQUEST_WRS, STATUSES,
    SUBMIT_TO_POST,
};

/// Room for statuses in per-status arrays (`fabriclib_metrics.requests`,
/// `fabriclib_counters.errors_by_status`): index a status code.
pub const FABRICLIB_METRICS_STATUSES: usize = 32;
/// Room for request kinds in `fabriclib_metrics.requests` (index a
/// `FABRICLIB_REQUEST_KIND_*`).
pub const FABRICLIB_METRICS_KINDS: usize = 8;
/// Buckets of a `fabriclib_histogram`.
pub const FABRICLIB_HISTOGRAM_BUCKETS: usize = 48;
/// Request kinds, as `fabriclib_metrics.requests` counts them.
pub const FABRICLIB_REQUEST_KIND_SINGLE: u32 = 0;
pub const FABRICLIB_REQUEST_KIND_PAGED: u32 = 1;
pub const FABRICLIB_REQUEST_KIND_SCATTER: u32 = 2;
pub const FABRICLIB_REQUEST_KIND_BARRIER: u32 = 3;
pub const FABRICLIB_REQUEST_KIND_SEND: u32 = 4;
/// `fabriclib_peer_connect`.
pub const FABRICLIB_REQUEST_KIND_CONNECT: u32 = 5;
/// `fabriclib_engine_metrics`'s `group`: every group's, added up.
pub const FABRICLIB_ALL_GROUPS: u32 = u32::MAX;
/// Formats of `fabriclib_engine_metrics_text`.
pub const FABRICLIB_METRICS_JSON: u32 = 0;
/// Prometheus text exposition (0.0.4).
pub const FABRICLIB_METRICS_PROMETHEUS: u32 = 1;
const _: () = {
    assert!(FABRICLIB_METRICS_STATUSES == STATUSES && FABRICLIB_HISTOGRAM_BUCKETS == HIST_BUCKETS);
    assert!(FABRICLIB_METRICS_KINDS >= KINDS.len() && FABRICLIB_REQUEST_KIND_CONNECT as usize == KINDS.len() - 1);
    assert!(GROUP_HISTS.len() == 5);
};

/// A log2-bucketed histogram: `buckets[i]` counts values in `[2^i,
/// 2^(i+1))` (bucket 0 also 0; the last, everything above); times in
/// nanoseconds. `p50` and `p99` are interpolated within their bucket.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct fabriclib_histogram {
    pub count: u64,
    pub sum: u64,
    pub p50: u64,
    pub p99: u64,
    pub buckets: [u64; FABRICLIB_HISTOGRAM_BUCKETS],
}

impl From<&HistSnap> for fabriclib_histogram {
    fn from(h: &HistSnap) -> Self {
        fabriclib_histogram {
            count: h.count(),
            sum: h.sum,
            p50: h.quantile(0.5),
            p99: h.quantile(0.99),
            buckets: h.buckets,
        }
    }
}

/// An engine's metrics (`fabriclib_engine_metrics`), always counted: the
/// worker writes them as it goes (relaxed atomics, one writer each) and a
/// read never stops it. Zero-initialise and set `struct_size =
/// sizeof(fabriclib_metrics)`; the library writes the fields that fit in
/// `struct_size` (fields a later version adds stay as they are). Per NIC and
/// peer: `fabriclib_engine_counters`.
#[repr(C)]
pub struct fabriclib_metrics {
    pub struct_size: usize,
    /// Requests ended, by kind (`FABRICLIB_REQUEST_KIND_*`) and status
    /// (`[kind][FABRICLIB_STATUS_OK]`: succeeded).
    pub requests: [[u64; FABRICLIB_METRICS_STATUSES]; FABRICLIB_METRICS_KINDS],
    /// Requests the worker took, by kind.
    pub requests_started: [u64; FABRICLIB_METRICS_KINDS],
    /// Requests taken and not yet ended.
    pub requests_in_flight: u64,
    /// Immediates received (home group).
    pub immediates_received: u64,
    /// Expectations (`fabriclib_expect_imm_count`) met, and ended
    /// otherwise (deadline, cancel, shutdown).
    pub expectations_met: u64,
    pub expectations_failed: u64,
    /// Watcher callbacks (changes seen); engine-wide.
    pub watcher_events: u64,
    /// From submit to the request's first work request posted (ns), for one
    /// request in 16 (ids that are multiples of 16: the clock is read at
    /// submit only for those).
    pub submit_to_post: fabriclib_histogram,
    /// From the first post to the last completion, requests that succeeded (ns).
    pub post_to_done: fabriclib_histogram,
    /// Bytes per request that succeeded.
    pub request_bytes: fabriclib_histogram,
    /// Work requests per request that succeeded.
    pub request_wrs: fabriclib_histogram,
    /// From the first immediate counted to its expectation met (ns).
    pub imm_to_expectation: fabriclib_histogram,
    /// From a watched store to its callback (ns), bounded above: from the
    /// watcher's last look that saw the old value. Engine-wide.
    pub watcher_store_to_callback: fabriclib_histogram,
}

/// The smallest `fabriclib_metrics.struct_size` accepted (0.4's layout). Never grows.
const METRICS_V1: usize = size_of::<fabriclib_metrics>();

/// === Metrics ===
/// Always-on counters and histograms, read without stopping the engine:
/// per NIC and peer (`fabriclib_engine_counters`), per engine or group
/// (`fabriclib_engine_metrics`), and everything as JSON or Prometheus text
/// with `group`, `nic` and `peer` labels (`fabriclib_engine_metrics_text`).
///
/// Reads group `group`'s metrics (`FABRICLIB_ALL_GROUPS`: every group's
/// added up) into `*out`; the watcher's are the engine's whichever group is
/// read. Any thread; it reads the counters as they are and never waits.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument, a
/// `struct_size` below this version's, a group the engine does not have);
/// `BAD_HANDLE` (a destroyed or foreign engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_metrics(
    engine: *const fabriclib_engine,
    group: u32,
    out: *mut fabriclib_metrics,
) -> fabriclib_status {
    ffi(|| {
        let e = &handle(engine)?.engine;
        let size = struct_size(out, METRICS_V1, "fabriclib_metrics")?;
        let m = e.metrics();
        let g = match group {
            FABRICLIB_ALL_GROUPS => m.total(),
            g => m.groups.get(g as usize).map(|(s, _)| s.clone()).ok_or_else(|| {
                Error::new(Status::InvalidArgument, format!("group {g}: the engine has {}", m.groups.len()))
            })?,
        };
        let mut requests = [[0; FABRICLIB_METRICS_STATUSES]; FABRICLIB_METRICS_KINDS];
        requests[..KINDS.len()].copy_from_slice(&g.requests);
        let mut requests_started = [0; FABRICLIB_METRICS_KINDS];
        requests_started[..KINDS.len()].copy_from_slice(&g.started);
        let v = fabriclib_metrics {
            struct_size: size,
            requests,
            requests_started,
            requests_in_flight: g.in_flight(),
            immediates_received: g.imm_received,
            expectations_met: g.expectations_met,
            expectations_failed: g.expectations_failed,
            watcher_events: m.watcher_events,
            submit_to_post: (&g.hists[SUBMIT_TO_POST]).into(),
            post_to_done: (&g.hists[POST_TO_DONE]).into(),
            request_bytes: (&g.hists[REQUEST_BYTES]).into(),
            request_wrs: (&g.hists[REQUEST_WRS]).into(),
            imm_to_expectation: (&g.hists[IMM_TO_EXPECTATION]).into(),
            watcher_store_to_callback: (&m.watcher_store_to_callback_ns).into(),
        };
        write_versioned(out, v, size);
        Ok(())
    })
}

/// Writes every metric of the engine as text into `buf` of `cap` bytes,
/// NUL-terminated, and its length with the NUL into `*len`: `format`
/// `FABRICLIB_METRICS_JSON` (one object: groups, their NICs and peers,
/// histograms with p50/p99) or `FABRICLIB_METRICS_PROMETHEUS` (text
/// exposition 0.0.4, series `fabriclib_*` with `group`, `nic` and `peer`
/// labels; docs/metrics.md lists them and maps vLLM's NIXL series onto
/// them). If `cap` is too small (or `buf` is NULL), only `*len` is written
/// and `FABRICLIB_STATUS_BUFFER_TOO_SMALL` returned: call again with that
/// much (a little more: the counters move). Any thread.
///
/// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
/// (a NULL `len`, an unknown `format`); `BAD_HANDLE` (a destroyed or foreign
/// engine).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_engine_metrics_text(
    engine: *const fabriclib_engine,
    format: u32,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> fabriclib_status {
    ffi(|| {
        let m = handle(engine)?.engine.metrics();
        let mut text = match format {
            FABRICLIB_METRICS_JSON => crate::metrics::export::json(&m),
            FABRICLIB_METRICS_PROMETHEUS => crate::metrics::export::prometheus(&m),
            f => crate::bail!(InvalidArgument, "metrics format {f}: FABRICLIB_METRICS_JSON or _PROMETHEUS"),
        };
        text.push('\0');
        write_blob(text.as_bytes(), buf.cast(), cap, len)
    })
}
