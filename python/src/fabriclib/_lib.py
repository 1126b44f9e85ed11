"""libfabriclib.so through ctypes (ABI mode: no compiler at install).

One copy of the engine per process: if a C or C++ component already loaded
``libfabriclib.so.0.4``, the same library is used (``RTLD_NOLOAD`` finds it);
else ``FABRICLIB_LIBRARY`` (a path), else the ``libfabriclib`` native wheel's
copy, else the system's (``ldconfig`` / ``LD_LIBRARY_PATH``).
"""

from __future__ import annotations

import ctypes
import os
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_int32,
    c_size_t,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

SONAME = "libfabriclib.so.0.4"
#: The C ABI this package is written against (``FABRICLIB_VERSION_NUMBER``).
ABI_MAJOR_MINOR = (0, 4)

FLAG_DONE = 0x10000
FLAG_STATUS_MASK = 0xFFFF
NO_TIMEOUT = (1 << 64) - 1
SUBMIT_DELIVERED = 1
ROUTE_SHARD, ROUTE_NIC = 0, 1
MEMORY_AUTO, MEMORY_HOST, MEMORY_CUDA_MAPPED = 0, 1, 2
METRICS_JSON, METRICS_PROMETHEUS = 0, 1
ALL_GROUPS = 0xFFFFFFFF
STATUS_OK, STATUS_BUFFER_TOO_SMALL = 0, 11


def _candidates() -> list[str]:
    out = []
    env = os.environ.get("FABRICLIB_LIBRARY")
    if env:
        out.append(env)
    try:  # the native wheel
        import libfabriclib  # type: ignore[import-not-found]

        out.append(libfabriclib.library_path())
    except ImportError:
        pass
    out.append(SONAME)
    return out


def _load() -> ctypes.CDLL:
    # Already in the process (a C++ component linked it): share that copy.
    try:
        return ctypes.CDLL(SONAME, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        pass
    errors = []
    for c in _candidates():
        try:
            return ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            errors.append(f"{c}: {e}")
    raise ImportError(
        "fabriclib: cannot load libfabriclib.so (install the libfabriclib wheel, "
        "build it with CMake and set FABRICLIB_LIBRARY, or put it on the loader's path): " + "; ".join(errors)
    )


lib = _load()

Status = c_int32
done_cb = CFUNCTYPE(None, c_void_p, Status)
watcher_cb = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)


class SubmitOpts(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("callback", c_void_p),
        ("user_data", c_void_p),
        ("flag", c_void_p),  # a uint32_t *, set as an address
        ("timeout_us", c_uint64),
        ("route", c_uint32),
        ("nic", c_uint32),
        ("flags", c_uint32),
    ]


class Pages(Structure):
    _fields_ = [("indices", POINTER(c_uint32)), ("count", c_size_t), ("stride", c_uint64), ("offset", c_uint64)]


class ScatterDst(Structure):
    _fields_ = [("len", c_uint64), ("src_offset", c_uint64), ("dst", c_void_p), ("dst_offset", c_uint64)]


class Message(Structure):
    _fields_ = [("data", POINTER(c_uint8)), ("len", c_size_t), ("from_", POINTER(c_uint8)), ("from_len", c_size_t)]


message_cb = CFUNCTYPE(None, c_void_p, Status, POINTER(Message))


class WatcherOpts(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("callback", watcher_cb),
        ("user_data", c_void_p),
        ("memory", c_uint32),
        ("device", c_int32),
    ]


HIST_BUCKETS = 48


class Histogram(Structure):
    _fields_ = [("count", c_uint64), ("sum", c_uint64), ("p50", c_uint64), ("p99", c_uint64), ("buckets", c_uint64 * HIST_BUCKETS)]


class Counters(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("wrs_posted", c_uint64),
        ("bytes_posted", c_uint64),
        ("wrs_completed", c_uint64),
        ("bytes_completed", c_uint64),
        ("errors", c_uint64),
        ("wrs_in_flight", c_uint64),
        ("errors_by_status", c_uint64 * 32),
    ]


class Metrics(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("requests", (c_uint64 * 32) * 8),
        ("requests_started", c_uint64 * 8),
        ("requests_in_flight", c_uint64),
        ("immediates_received", c_uint64),
        ("expectations_met", c_uint64),
        ("expectations_failed", c_uint64),
        ("watcher_events", c_uint64),
        ("submit_to_post", Histogram),
        ("post_to_done", Histogram),
        ("request_bytes", Histogram),
        ("request_wrs", Histogram),
        ("imm_to_expectation", Histogram),
        ("watcher_store_to_callback", Histogram),
    ]


P = c_void_p
U8P = POINTER(c_uint8)
_SIGS = {
    "fabriclib_version": (c_char_p, []),
    "fabriclib_version_number": (c_uint32, []),
    "fabriclib_status_str": (c_char_p, [c_int32]),
    "fabriclib_last_error_message": (c_char_p, []),
    "fabriclib_config_new": (Status, [POINTER(P)]),
    "fabriclib_config_free": (None, [P]),
    "fabriclib_config_set_provider": (Status, [P, c_char_p]),
    "fabriclib_config_set_bind_address": (Status, [P, c_char_p]),
    "fabriclib_config_set_nics": (Status, [P, c_char_p]),
    "fabriclib_config_set_nic_count": (Status, [P, c_uint32]),
    "fabriclib_config_set_request_timeout": (Status, [P, c_uint64]),
    "fabriclib_config_set_max_inflight": (Status, [P, c_size_t]),
    "fabriclib_config_set_idle_policy": (Status, [P, c_uint32]),
    "fabriclib_config_set_manual_progress": (Status, [P, c_bool]),
    "fabriclib_config_set_keepalive_us": (Status, [P, c_uint64, c_uint64]),
    "fabriclib_engine_create": (Status, [P, POINTER(P)]),
    "fabriclib_engine_destroy": (None, [P]),
    "fabriclib_engine_address": (Status, [P, U8P, c_size_t, POINTER(c_size_t)]),
    "fabriclib_engine_provider": (Status, [P, POINTER(c_char_p)]),
    "fabriclib_engine_max_send": (Status, [P, POINTER(c_size_t)]),
    "fabriclib_engine_event_fd": (Status, [P, POINTER(c_int32)]),
    "fabriclib_engine_progress": (Status, [P, POINTER(c_bool)]),
    "fabriclib_engine_flag_await": (Status, [P, POINTER(c_uint32), c_uint64, POINTER(c_uint32)]),
    "fabriclib_mr_register": (Status, [P, P, c_size_t, POINTER(P)]),
    "fabriclib_mr_register_device": (Status, [P, P, c_size_t, c_int32, POINTER(P)]),
    "fabriclib_mr_deregister": (None, [P]),
    "fabriclib_mr_descriptor": (Status, [P, U8P, c_size_t, POINTER(c_size_t)]),
    "fabriclib_remote_mr_parse": (Status, [U8P, c_size_t, POINTER(P)]),
    "fabriclib_remote_mr_free": (None, [P]),
    "fabriclib_peer_add": (Status, [P, U8P, c_size_t, POINTER(SubmitOpts), POINTER(c_uint64)]),
    "fabriclib_peer_remove": (Status, [P, U8P, c_size_t, POINTER(c_size_t)]),
    "fabriclib_peer_state": (Status, [P, U8P, c_size_t, POINTER(c_int32)]),
    "fabriclib_add_peer_set": (Status, [P, POINTER(U8P), POINTER(c_size_t), c_size_t, POINTER(c_uint64)]),
    "fabriclib_remove_peer_set": (Status, [P, c_uint64]),
    "fabriclib_submit_single_write": (
        Status,
        [P, c_uint64, POINTER(c_uint32), P, c_uint64, P, c_uint64, POINTER(SubmitOpts), POINTER(c_uint64)],
    ),
    "fabriclib_submit_paged_writes": (
        Status,
        [P, c_uint64, POINTER(c_uint32), P, POINTER(Pages), P, POINTER(Pages), POINTER(SubmitOpts), POINTER(c_uint64)],
    ),
    "fabriclib_submit_scatter": (
        Status,
        [P, c_uint64, POINTER(c_uint32), P, POINTER(ScatterDst), c_size_t, POINTER(SubmitOpts), POINTER(c_uint64)],
    ),
    "fabriclib_submit_barrier": (
        Status,
        [P, c_uint64, c_uint32, POINTER(P), c_size_t, POINTER(SubmitOpts), POINTER(c_uint64)],
    ),
    "fabriclib_submit_send": (Status, [P, U8P, c_size_t, c_char_p, c_size_t, POINTER(SubmitOpts), POINTER(c_uint64)]),
    "fabriclib_cancel": (Status, [P, c_uint64]),
    "fabriclib_cancel_peer": (Status, [P, U8P, c_size_t, POINTER(c_size_t)]),
    "fabriclib_recv_pool_add": (Status, [P, c_size_t, c_size_t, message_cb, P, POINTER(c_uint64)]),
    "fabriclib_recv_pool_remove": (Status, [P, c_uint64]),
    "fabriclib_flag_await": (Status, [POINTER(c_uint32), c_uint64, POINTER(c_uint32)]),
    "fabriclib_request_error": (Status, [P, c_uint64, POINTER(c_int32), c_char_p, c_size_t, POINTER(c_size_t)]),
    "fabriclib_expect_imm_count": (Status, [P, c_uint32, c_uint32, POINTER(SubmitOpts), POINTER(c_uint64)]),
    "fabriclib_imm_count_get": (Status, [P, c_uint32, POINTER(c_uint64)]),
    "fabriclib_imm_count_reset": (Status, [P, c_uint32, POINTER(c_uint64)]),
    "fabriclib_imm_mirror": (Status, [P, c_uint32, POINTER(c_uint64)]),
    "fabriclib_watcher_create": (Status, [P, POINTER(WatcherOpts), POINTER(P)]),
    "fabriclib_watcher_host_ptr": (Status, [P, POINTER(POINTER(c_uint64))]),
    "fabriclib_watcher_destroy": (None, [P]),
    "fabriclib_engine_counters": (Status, [P, c_uint32, U8P, c_size_t, POINTER(Counters)]),
    "fabriclib_engine_metrics": (Status, [P, c_uint32, POINTER(Metrics)]),
    "fabriclib_engine_metrics_text": (Status, [P, c_uint32, c_char_p, c_size_t, POINTER(c_size_t)]),
}

for _name, (_res, _args) in _SIGS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

_v = lib.fabriclib_version_number()
if (_v // 1_000_000, _v // 1000 % 1000) != ABI_MAJOR_MINOR:
    raise ImportError(f"fabriclib: the library is {lib.fabriclib_version().decode()}, this package needs 0.4.x")
