/*
 * fabriclib: RDMA point-to-point transfers for LLM systems.
 *
 * Conventions
 *  - Every function returning fabriclib_status returns FABRICLIB_STATUS_OK (0)
 *    on success; FABRICLIB_STATUS_AGAIN (1) is not an error (queue full: retry).
 *    fabriclib_status_str() names a code; fabriclib_last_error_message() gives
 *    the details of the calling thread's last failure.
 *  - Out-pointers are written only on success (size out-pointers also with
 *    FABRICLIB_STATUS_BUFFER_TOO_SMALL).
 *  - Each function's comment ends with its contract. "Returns:" lists every
 *    status it can return, by the end of its name (`OK` for
 *    FABRICLIB_STATUS_OK), and when; FABRICLIB_STATUS_PANIC (a bug, caught at the boundary) can come
 *    from any of them and is not repeated. "Blocks:" says whether the call
 *    can wait (for the worker, the network, a timeout) and for how long.
 *  - Handles are opaque. *_create / *_new / *_register / *_parse make one;
 *    *_destroy / *_free / *_deregister (NULL-safe) release it. A destroyed,
 *    foreign or non-fabriclib handle gives FABRICLIB_STATUS_BAD_HANDLE where
 *    detectable.
 *  - Thread safety: engine functions may be called from any thread at once;
 *    a fabriclib_config is used by one thread at a time.
 *  - Callbacks take user_data first and run on the engine's callback thread,
 *    never inside the call that submitted them (in manual-progress mode,
 *    fabriclib_config_set_manual_progress, they run inside
 *    fabriclib_engine_progress / fabriclib_engine_flag_wait instead, and must
 *    not destroy their own engine there). A submit that returns an error
 *    never calls back; a submit that returned OK reports exactly once.
 *  - A panic inside fabriclib never unwinds into C: FABRICLIB_STATUS_PANIC.
 *
 * Callbacks (C and C++)
 *  - A callback must not throw or unwind: a C++ exception escaping a
 *    callback aborts the process. Declare C++ callbacks FABRICLIB_NOEXCEPT
 *    (noexcept in C++, nothing in C) so the compiler enforces it.
 *  - Keep them short: one thread runs every callback of an engine in turn.
 *  - Order: reports run one at a time, in the order their requests ended
 *    (not the order they were submitted: a small write submitted after a
 *    large one may end first). A report may run, and a flag turn done,
 *    before the submit call that made the request has returned to its
 *    caller: set up what the callback needs before submitting.
 *  - From inside a callback, every fabriclib call is allowed and behaves as
 *    from any other thread: submits (FABRICLIB_STATUS_AGAIN when full, as
 *    anywhere), fabriclib_cancel, fabriclib_expect_imm_count, peer calls.
 *    fabriclib_engine_destroy of the callback's own engine shuts it down
 *    and returns; the reports still queued (SHUTDOWN of the rest) then run
 *    on the same thread right after the callback returns, not before the
 *    destroy returns as they do from other threads. (Tested:
 *    calls_from_callbacks.)
 *
 * Lifetimes: who must stay valid until when
 *    what                                  valid until
 *    fabriclib_submit_opts (the struct)    the submit call returns
 *    submit_opts.user_data                 its callback has returned
 *    submit_opts.flag                      FABRICLIB_FLAG_DONE is seen in it
 *                                          (by fabriclib_flag_wait or a load)
 *    receive pool: user_data, callback     its last call (SHUTDOWN, at destroy)
 *    peer-state callback's user_data       fabriclib_engine_destroy returns
 *    a request's source/destination bytes  the request has reported
 *    a registered region's memory          deregistered, and every request
 *                                          using it has reported
 *    a fabriclib_mr                        deregister it whenever: requests
 *                                          using it keep it alive; it may
 *                                          outlive its engine (deregister it)
 *    a fabriclib_remote_mr                 the submit call (requests keep
 *                                          what they need)
 *    a fabriclib_config                    fabriclib_engine_create returns
 *    a fabriclib_watcher, its user_data    destroy it whenever (its callbacks
 *                                          stop then; they stop at engine
 *                                          destroy too); its word lives
 *                                          until fabriclib_watcher_destroy
 *    a fabriclib_imm_mirror word           the mirror is stopped (NULL) or
 *                                          the engine is destroyed
 *    fabriclib_mapped_alloc memory         fabriclib_mapped_free
 *    a flag word may be a plain uint32_t, a C11 _Atomic uint32_t or a C++
 *    std::atomic<uint32_t> (same size and representation).
 *
 * Completion semantics
 *  - An initiator's completion (callback or flag) means the source buffer may
 *    be reused. It does NOT mean the bytes have landed: on TCP they may still
 *    sit in socket buffers. The receiver's immediate (fabriclib_expect_imm_count)
 *    is the "landed" signal.
 *  - Immediates delivered to the receiver, identical on every provider and
 *    NIC count:
 *      single write with imm ........ 1
 *      paged writes with imm ........ 1 per page
 *      scatter with imm ............. 1 per destination (on that destination)
 *      barrier ...................... 1 per destination
 *      writes without imm, sends .... 0
 *    Delivery is reliable but unordered: count immediates, never rely on order.
 *
 * Failure semantics (docs/failure-semantics.md)
 *  - No request can hang. Each ends exactly once: OK, an error
 *    (PEER_DOWN, STALE, REMOTE_ACCESS, LOCAL_ACCESS, PROVIDER), CANCELED
 *    (fabriclib_cancel, fabriclib_cancel_peer), TIMED_OUT (30 s by default;
 *    fabriclib_submit_opts.timeout_us) or SHUTDOWN. After its report its buffers
 *    are the caller's again.
 *  - A peer that stops answering keepalives for 3 s, or whose connection
 *    fails, is down: its requests end with PEER_DOWN, the peer callback is
 *    told, the other peers are served as before.
 *  - Beyond max_inflight requests (or a full submission queue) submits
 *    return FABRICLIB_STATUS_AGAIN.
 */


#ifndef FABRICLIB_H
#define FABRICLIB_H

/* Generated by cbindgen from src/capi/ -- do not edit; run `cargo build --features gen-header`. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The version of this header (Cargo.toml's; the library's own at run time:
// fabriclib_version(), fabriclib_version_number()).
#define FABRICLIB_VERSION_MAJOR 0
#define FABRICLIB_VERSION_MINOR 4
#define FABRICLIB_VERSION_PATCH 0
#define FABRICLIB_VERSION_STRING "0.4.0"
// One number per version, comparable: major * 1000000 + minor * 1000 + patch.
#define FABRICLIB_VERSION_NUMBER(major, minor, patch) ((major) * 1000000u + (minor) * 1000u + (patch))
#define FABRICLIB_VERSION FABRICLIB_VERSION_NUMBER(0, 4, 0)
// True when this header is at least version major.minor.patch.
#define FABRICLIB_VERSION_AT_LEAST(major, minor, patch) (FABRICLIB_VERSION >= FABRICLIB_VERSION_NUMBER(major, minor, patch))

// Declare C++ callbacks noexcept: an exception escaping a callback aborts.
#ifdef __cplusplus
#define FABRICLIB_NOEXCEPT noexcept
#else
#define FABRICLIB_NOEXCEPT
#endif

// Arrays of pointers the library only reads: in C, `uint8_t **` and
// `fabriclib_remote_mr **` pass without a cast; in C++, arrays of pointers
// to const pass too.
struct fabriclib_remote_mr;
#ifdef __cplusplus
typedef const uint8_t *const *fabriclib_blob_list;
typedef const struct fabriclib_remote_mr *const *fabriclib_remote_mr_list;
#else
typedef uint8_t *const *fabriclib_blob_list;
typedef struct fabriclib_remote_mr *const *fabriclib_remote_mr_list;
#endif


// Set in a completion flag word once its request has ended; the low 16 bits
// then hold the request's `fabriclib_status`. Test this bit only: bit 31
// may be set while a thread sleeps in `fabriclib_flag_await`.
#define FABRICLIB_FLAG_DONE 65536

// Mask for the status in a completion flag word.
#define FABRICLIB_FLAG_STATUS_MASK 65535

// Most receive buffers one `fabriclib_submit_recvs` pool may have.
#define FABRICLIB_MAX_RECV_BUFFERS 4096

// Largest message `fabriclib_submit_send` takes (some providers take less:
// `fabriclib_engine_max_send`).
#define FABRICLIB_MAX_SEND 65536

// Largest engine address blob (`fabriclib_engine_address`): a buffer this
// size always fits, whatever the provider and NIC count.
#define FABRICLIB_MAX_ADDRESS_LEN 2081

// Largest groups-address blob (`fabriclib_engine_groups_address`).
#define FABRICLIB_MAX_ENGINE_ADDRESS_LEN 33177

// Largest region descriptor blob (`fabriclib_mr_descriptor`).
#define FABRICLIB_MAX_DESCRIPTOR_LEN 2226

// The most groups `fabriclib_config_add_group` adds to one engine.
#define FABRICLIB_MAX_GROUPS 16

// `fabriclib_config_set_watcher_idle`'s `spin_us`: adapt to the gaps
// between changes (the default).
#define FABRICLIB_WATCHER_SPIN_AUTO (UINT64_MAX - 1)

// `fabriclib_submit_opts.flags`: OK means delivered (since 0.4).
#define FABRICLIB_SUBMIT_DELIVERED 1

// `fabriclib_submit_opts.timeout_us` for a request with no deadline.
#define FABRICLIB_NO_TIMEOUT UINT64_MAX

// Room for statuses in per-status arrays (`fabriclib_metrics.requests`,
// `fabriclib_counters.errors_by_status`): index a status code.
#define FABRICLIB_METRICS_STATUSES 32

// Room for request kinds in `fabriclib_metrics.requests` (index a
// `FABRICLIB_REQUEST_KIND_*`).
#define FABRICLIB_METRICS_KINDS 8

// Buckets of a `fabriclib_histogram`.
#define FABRICLIB_HISTOGRAM_BUCKETS 48

// Request kinds, as `fabriclib_metrics.requests` counts them.
#define FABRICLIB_REQUEST_KIND_SINGLE 0

#define FABRICLIB_REQUEST_KIND_PAGED 1

#define FABRICLIB_REQUEST_KIND_SCATTER 2

#define FABRICLIB_REQUEST_KIND_BARRIER 3

#define FABRICLIB_REQUEST_KIND_SEND 4

// `fabriclib_peer_connect`.
#define FABRICLIB_REQUEST_KIND_CONNECT 5

// `fabriclib_engine_metrics`'s `group`: every group's, added up.
#define FABRICLIB_ALL_GROUPS UINT32_MAX

// Formats of `fabriclib_engine_metrics_text`.
#define FABRICLIB_METRICS_JSON 0

// Prometheus text exposition (0.0.4).
#define FABRICLIB_METRICS_PROMETHEUS 1

// Which of an engine's threads (`fabriclib_config_set_thread_cpus`).
enum fabriclib_thread
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // The worker thread (of each group).
  FABRICLIB_THREAD_WORKER = 0,
  // The callback thread.
  FABRICLIB_THREAD_CALLBACK = 1,
  // The watcher thread.
  FABRICLIB_THREAD_WATCHER = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_thread fabriclib_thread;
#else
typedef uint32_t fabriclib_thread;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// What the worker does while idle with an expectation armed
// (`fabriclib_config_set_idle_policy`).
enum fabriclib_idle
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Keep spinning while an expectation is armed (the lowest first-arrival
  // latency; one core per engine): for engine threads on CPUs of their own.
  FABRICLIB_IDLE_SPIN = 0,
  // Block on the completion queues' wait object where the provider has
  // one (tcp, verbs); on shm, which has none, sleep in naps of `nap_us`
  // that a peer engine's write ends at once (a doorbell it rings). The
  // default (since 0.4).
  FABRICLIB_IDLE_AUTO = 1,
  // Sleep even with an expectation armed: as `FABRICLIB_IDLE_AUTO`, and
  // nap `nap_us` at a time where there is neither a wait object nor a
  // doorbell.
  FABRICLIB_IDLE_BLOCK = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_idle fabriclib_idle;
#else
typedef uint32_t fabriclib_idle;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// Whether an engine asks its providers for device memory
// (`fabriclib_config_set_device_memory`).
enum fabriclib_device_memory_mode
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Where device memory can move at all: the machine has an NVIDIA driver
  // and the libfabric in use was built with CUDA. The default.
  FABRICLIB_DEVICE_MEMORY_MODE_AUTO = 0,
  // Always ask (`FI_HMEM`), falling back per NIC where the provider has none.
  FABRICLIB_DEVICE_MEMORY_MODE_ON = 1,
  // Never ask: the providers' host-memory configuration.
  FABRICLIB_DEVICE_MEMORY_MODE_OFF = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_device_memory_mode fabriclib_device_memory_mode;
#else
typedef uint32_t fabriclib_device_memory_mode;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// A peer engine's state: connecting, up or down (`fabriclib_peer_state`,
// the peer-state callback).
enum fabriclib_peer_liveness
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : int32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Greeted, and it has not answered yet (`fabriclib_peer_state` only).
  FABRICLIB_PEER_CONNECTING = 0,
  // It has answered the handshake: requests to it are posted.
  FABRICLIB_PEER_UP = 1,
  // Dead, unreachable, shut down or restarted (see the status passed with it).
  FABRICLIB_PEER_DOWN = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_peer_liveness fabriclib_peer_liveness;
#else
typedef int32_t fabriclib_peer_liveness;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// What memory a peer's registered region is (`fabriclib_remote_mr_memory`).
enum fabriclib_region_memory
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Host memory (pageable, pinned or CUDA-mapped).
  FABRICLIB_REGION_MEMORY_HOST = 1,
  // GPU memory (`fabriclib_mr_register_device`, or device memory that
  // `fabriclib_mr_register` detected).
  FABRICLIB_REGION_MEMORY_DEVICE = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_region_memory fabriclib_region_memory;
#else
typedef uint32_t fabriclib_region_memory;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// Which NICs carry a request (`fabriclib_submit_opts.route`).
enum fabriclib_route
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Over all NICs (the default).
  FABRICLIB_ROUTE_SHARD = 0,
  // On NIC `nic` only.
  FABRICLIB_ROUTE_NIC = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_route fabriclib_route;
#else
typedef uint32_t fabriclib_route;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// What memory `fabriclib_mapped_alloc` and a watcher's word live in.
enum fabriclib_memory
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // CUDA-mapped host memory if a CUDA driver and the device are present,
  // else plain host memory.
  FABRICLIB_MEMORY_AUTO = 0,
  // Plain host memory (no kernel can reach it).
  FABRICLIB_MEMORY_HOST = 1,
  // Pinned host memory mapped into the GPU's address space
  // (`cuMemHostAlloc` with `PORTABLE | DEVICEMAP`); `UNSUPPORTED` without CUDA.
  FABRICLIB_MEMORY_CUDA_MAPPED = 2,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_memory fabriclib_memory;
#else
typedef uint32_t fabriclib_memory;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// Whether and how a NIC takes CUDA device memory
// (`fabriclib_engine_nic_device_memory`).
enum fabriclib_device_path
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // It does not: `fabriclib_mr_register_device` returns `UNSUPPORTED`.
  FABRICLIB_DEVICE_PATH_NONE = 0,
  // The provider copies between processes of one host through CUDA IPC
  // (libfabric's shm): regions registered by device pointer.
  FABRICLIB_DEVICE_PATH_IPC = 1,
  // The NIC reaches GPU memory (GPUDirect RDMA), registered as a dma-buf,
  // or by device pointer where the dma-buf is refused.
  FABRICLIB_DEVICE_PATH_DMABUF = 2,
  // The NIC reaches GPU memory, registered by device pointer (a
  // peer-memory driver; libfabric before 1.20).
  FABRICLIB_DEVICE_PATH_POINTER = 3,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_device_path fabriclib_device_path;
#else
typedef uint32_t fabriclib_device_path;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// How much a log message matters (`fabriclib_set_log_callback`).
enum fabriclib_log_level
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : uint32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Something failed and fabriclib could not report it as a status.
  FABRICLIB_LOG_LEVEL_ERROR = 0,
  // Something went wrong and fabriclib carried on.
  FABRICLIB_LOG_LEVEL_WARN = 1,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_log_level fabriclib_log_level;
#else
typedef uint32_t fabriclib_log_level;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// Why an operation failed (or could not be started).
enum fabriclib_status
#if defined(__cplusplus) || __STDC_VERSION__ >= 202311L
  : int32_t
#endif // defined(__cplusplus) || __STDC_VERSION__ >= 202311L
 {
  // Success.
  FABRICLIB_STATUS_OK = 0,
  // Not an error: a queue is full right now; try again later.
  FABRICLIB_STATUS_AGAIN = 1,
  // A required pointer was NULL, a length or count was zero, or an argument is out of its range.
  FABRICLIB_STATUS_INVALID_ARGUMENT = 2,
  // An offset, length or page index falls outside a registered region (local or remote).
  FABRICLIB_STATUS_OUT_OF_BOUNDS = 3,
  // A handle was destroyed, belongs to another engine, or is not a fabriclib handle.
  FABRICLIB_STATUS_BAD_HANDLE = 4,
  // A serialized address or descriptor is truncated, corrupt or of an unknown version.
  FABRICLIB_STATUS_MALFORMED = 5,
  // The thing already exists (for example a second expectation on one immediate).
  FABRICLIB_STATUS_ALREADY_EXISTS = 6,
  // The provider (libfabric, the NIC) reported an error; the error message has the details.
  FABRICLIB_STATUS_PROVIDER = 7,
  // The configuration or the provider does not support this.
  FABRICLIB_STATUS_UNSUPPORTED = 8,
  // The engine is shutting down or has shut down; the request did not complete.
  FABRICLIB_STATUS_SHUTDOWN = 9,
  // A Rust panic was caught at the C boundary (a bug in fabriclib: please report it).
  FABRICLIB_STATUS_PANIC = 10,
  // An output buffer is too small; the required size was written to the length out-pointer.
  FABRICLIB_STATUS_BUFFER_TOO_SMALL = 11,
  // A received message did not fit the receive buffer.
  FABRICLIB_STATUS_TRUNCATED = 12,
  // The request was canceled (`fabriclib_cancel`, `fabriclib_cancel_peer`,
  // `fabriclib_peer_remove`; a receive pool's last call after
  // `fabriclib_recv_pool_remove`); its buffers are free again.
  FABRICLIB_STATUS_CANCELED = 13,
  // The request's deadline passed before it completed (its buffers are
  // free again), or a wait's timeout passed first (`fabriclib_flag_await`).
  FABRICLIB_STATUS_TIMED_OUT = 14,
  // The peer is dead or unreachable (provider error, missed keepalives, or it shut down).
  FABRICLIB_STATUS_PEER_DOWN = 15,
  // A descriptor or address from an engine that has since restarted (another epoch).
  FABRICLIB_STATUS_STALE = 16,
  // The peer refused the access (bad key, protection or bounds error on the remote side).
  FABRICLIB_STATUS_REMOTE_ACCESS = 17,
  // The provider refused a local buffer or descriptor (local protection or length error).
  FABRICLIB_STATUS_LOCAL_ACCESS = 18,
  // No such request, or it has already ended (`fabriclib_cancel`); no such peer, or not failed.
  FABRICLIB_STATUS_NOT_FOUND = 19,
};
#ifndef __cplusplus
#if __STDC_VERSION__ >= 202311L
typedef enum fabriclib_status fabriclib_status;
#else
typedef int32_t fabriclib_status;
#endif // __STDC_VERSION__ >= 202311L
#endif // __cplusplus

// Engine settings. Create with `fabriclib_config_new`, free with
// `fabriclib_config_free`. Not thread-safe: one thread at a time.
typedef struct fabriclib_config fabriclib_config;

// A transfer engine: a worker thread driving its NICs and a
// callback thread. All `fabriclib_submit_*` functions may be called from any
// thread at once.
typedef struct fabriclib_engine fabriclib_engine;

// A registered local region: the source of writes, and (through its
// descriptor) the target of peers' writes.
typedef struct fabriclib_mr fabriclib_mr;

// A peer's registered region, as parsed from its descriptor. Immutable:
// may be used from any thread at once.
typedef struct fabriclib_remote_mr fabriclib_remote_mr;

// A watched 64-bit word and its callback.
typedef struct fabriclib_watcher fabriclib_watcher;

// Told when a peer engine comes up (`FABRICLIB_PEER_UP`, `why` 0) or goes
// down (`FABRICLIB_PEER_DOWN`, `why` `FABRICLIB_STATUS_PEER_DOWN` or
// `FABRICLIB_STATUS_STALE`), once each time, whatever its groups: an engine
// is up when every pair of groups in contact with it is, down as soon as
// one is. `addr` (`addr_len` bytes) is the peer's main address (what its
// `fabriclib_engine_address` gives) — or, until one of its groups has said
// it, the address of the group it was met through — valid during the call.
// Runs on the engine's callback thread.
typedef void (*fabriclib_peer_cb)(void *user_data,
                                  const uint8_t *addr,
                                  size_t addr_len,
                                  fabriclib_peer_liveness state,
                                  fabriclib_status why);

// Called once when a request ends: `status` is `FABRICLIB_STATUS_OK` or why
// it failed; during a call with an error, `fabriclib_last_error_message()`
// gives the details (for `FABRICLIB_STATUS_PROVIDER`, libfabric's error text
// and number; a flag user reads the same with `fabriclib_request_error`).
// Runs on the engine's callback thread; must not block for long
// (it delays other callbacks) and must not throw (C++: declare it
// `FABRICLIB_NOEXCEPT`). Any fabriclib call may be made from it (see the
// header's preamble).
typedef void (*fabriclib_done_cb)(void *user_data, fabriclib_status status);

// Options of one request: how it reports its end, its deadline, and which
// NICs carry it (later versions add fields at the end: a CUDA stream).
// Pass NULL for no report and the engine's default deadline. Zero-initialise
// it, set `struct_size = sizeof(fabriclib_submit_opts)`, then at most one of
// `callback` and `flag`:
// - `callback(user_data, status)` runs once on the callback thread;
// - `flag` receives, with one atomic release store from the worker thread,
//   `FABRICLIB_FLAG_DONE | status` (poll it with an acquire load). It must
//   stay valid until then; initialise it to 0.
//
// `timeout_us`: 0 takes the engine's request timeout
// (`fabriclib_config_set_request_timeout`), `FABRICLIB_NO_TIMEOUT` means
// none, any other value is this request's own deadline in microseconds
// after the submit. A request that misses it ends with
// `FABRICLIB_STATUS_TIMED_OUT`.
//
// `route` (since 0.3): `FABRICLIB_ROUTE_SHARD` (0, the default) spreads the
// request over the NICs of its group (all the engine's, with one group):
// unit `k` (a page, a chunk of a single write of 256 KiB or more, a scatter
// or barrier destination) on the group's NIC `(k + r) mod n`, `r` rotating
// from request to request; `FABRICLIB_ROUTE_NIC` puts all of it on NIC
// `nic` (numbered across the engine, as `fabriclib_engine_nic` lists them:
// group 0's first), in order, and a single write is not cut into chunks.
// Immediate counts are the same either way. `INVALID_ARGUMENT` for a NIC
// the engine does not have or that is not in the request's group (its
// source region's; group 0 for sends and barriers), or a send on a NIC
// other than 0 (receive buffers are posted on NIC 0).
//
// `flags` (since 0.4): `FABRICLIB_SUBMIT_DELIVERED` makes
// `FABRICLIB_STATUS_OK` mean *delivered*: every byte and immediate of the
// request has been taken in by the target engine — its immediates counted
// there, ahead of any call its application makes after hearing of this OK
// (`fabriclib_imm_count_reset` included). Without it OK means only that the
// source buffer is free again (docs/failure-semantics.md, "What OK
// means"). It costs one round trip per destination engine after the last
// work request completes; any other outcome says what it says without the
// flag. `FABRICLIB_STATUS_UNSUPPORTED` on a provider that does not deliver
// a message after the writes posted before it (tcp;ofi_rxm and shm do).
// Other bits: `FABRICLIB_STATUS_INVALID_ARGUMENT`.
//
// `struct_size` is how the library tells which fields the caller knows: a
// program built against this header keeps working with later libraries
// (fields it does not know take their defaults), and one built against a
// later header runs on this library as long as the fields this library
// does not know are left zero (else `FABRICLIB_STATUS_UNSUPPORTED`). 0 or
// a size below this version's is `FABRICLIB_STATUS_INVALID_ARGUMENT`.
//
// Every accepted request reports exactly once, whatever happens (done, an
// error, canceled, timed out, peer down, shut down); a submit that returns
// an error never reports through its options. The struct itself is read
// during the call only.
typedef struct fabriclib_submit_opts {
  size_t struct_size;
  fabriclib_done_cb callback;
  void *user_data;
  uint32_t *flag;
  uint64_t timeout_us;
  fabriclib_route route;
  uint32_t nic;
  uint32_t flags;
} fabriclib_submit_opts;

// One write of `fabriclib_submit_single_writes`: the arguments of
// `fabriclib_submit_single_write` but its source region, which the batch's
// writes share. `imm`: NULL or a pointer to this write's immediate; `opts`:
// NULL (no report, the engine's deadline) or this write's own options.
// (Since 0.4; its layout is fixed: later versions add functions, not fields.)
typedef struct fabriclib_single_write {
  uint64_t len;
  const uint32_t *imm;
  uint64_t src_offset;
  const struct fabriclib_remote_mr *dst;
  uint64_t dst_offset;
  const struct fabriclib_submit_opts *opts;
} fabriclib_single_write;

// Pages on one side of a paged write: page `i` starts at byte
// `offset + indices[i] * stride` of the region.
typedef struct fabriclib_pages {
  const uint32_t *indices;
  size_t count;
  uint64_t stride;
  uint64_t offset;
} fabriclib_pages;

// One destination of a scatter: `len` bytes from `src_offset` of the source
// region to `dst_offset` of `dst`.
typedef struct fabriclib_scatter_dst {
  uint64_t len;
  uint64_t src_offset;
  const struct fabriclib_remote_mr *dst;
  uint64_t dst_offset;
} fabriclib_scatter_dst;

// Called for every received message with its bytes (`data`, `len`), valid
// only during the call: the buffer returns to the pool when the callback
// returns. On error (`FABRICLIB_STATUS_TRUNCATED`, and a last call with
// `FABRICLIB_STATUS_SHUTDOWN` when the engine is destroyed) `data` is NULL
// and `len` 0. Runs on the engine's callback thread.
typedef void (*fabriclib_recv_cb)(void *user_data,
                                  fabriclib_status status,
                                  const uint8_t *data,
                                  size_t len);

// A received message, as `fabriclib_message_cb` sees it; every pointer is
// valid only during the call.
typedef struct fabriclib_message {
  // The message's bytes (NULL, and `len` 0, when the status is not `OK`).
  const uint8_t *data;
  size_t len;
  // The sender engine's address blob (`from_len` bytes; what the
  // peer-state callback names it by, and `fabriclib_submit_send` takes to
  // answer it); NULL and 0 on a pool's last call, or when the sender is
  // no longer among this engine's peers (`fabriclib_peer_remove`). Set on
  // `TRUNCATED` too.
  const uint8_t *from;
  size_t from_len;
} fabriclib_message;

// Called for every message a receive pool takes (`fabriclib_recv_pool_add`)
// with `status` `FABRICLIB_STATUS_OK` and the message in `*msg`, or:
// `FABRICLIB_STATUS_TRUNCATED` (longer than the pool's `len`: dropped, the
// sender in `msg->from`), `FABRICLIB_STATUS_MALFORMED` (not from a
// fabriclib engine), and as the pool's last call
// `FABRICLIB_STATUS_CANCELED` (`fabriclib_recv_pool_remove`) or
// `FABRICLIB_STATUS_SHUTDOWN` (the engine was destroyed): `user_data` may
// be freed after that call. `msg` is never NULL. Runs on the engine's
// callback thread; the buffer returns to the pool when it returns.
typedef void (*fabriclib_message_cb)(void *user_data,
                                     fabriclib_status status,
                                     const struct fabriclib_message *msg);

// Called on the engine's watcher thread when it sees a watched word change:
// `old_value` is the value the previous call reported (0 at first),
// `new_value` the word's value now. Values may be skipped (two changes
// between two looks give one call), never reordered. Must not throw; keep
// it short (one thread calls every watcher of the engine); any fabriclib
// call may be made from it, including destroying this watcher.
typedef void (*fabriclib_watcher_cb)(void *user_data, uint64_t old_value, uint64_t new_value);

// Options of a watcher. Zero-initialise, set `struct_size =
// sizeof(fabriclib_watcher_opts)` and `callback`. `memory` is one of
// `FABRICLIB_MEMORY_*` (0: auto); `device` the CUDA device whose context
// allocates it when the calling thread has none (the memory is portable:
// every context can use it).
typedef struct fabriclib_watcher_opts {
  size_t struct_size;
  fabriclib_watcher_cb callback;
  void *user_data;
  fabriclib_memory memory;
  int32_t device;
} fabriclib_watcher_opts;

// Work requests and bytes one NIC posted and completed for the
// application, its failed work requests (by status) and those in flight,
// since the engine started
// (`fabriclib_engine_counters`). Zero-initialise and set `struct_size =
// sizeof(fabriclib_counters)`; the library writes the fields that fit in
// `struct_size` (fields a later version adds stay as they are).
typedef struct fabriclib_counters {
  size_t struct_size;
  uint64_t wrs_posted;
  uint64_t bytes_posted;
  uint64_t wrs_completed;
  uint64_t bytes_completed;
  // Work requests that failed, or were given up with their peer.
  uint64_t errors;
  // Since 0.4: work requests posted and not yet back (completed or failed).
  uint64_t wrs_in_flight;
  // Since 0.4: `errors` by status (`errors_by_status[FABRICLIB_STATUS_PEER_DOWN]`…).
  uint64_t errors_by_status[FABRICLIB_METRICS_STATUSES];
} fabriclib_counters;

// Where fabriclib's own messages go (`fabriclib_set_log_callback`):
// `message` (UTF-8, no prefix, no newline) is valid during the call.
// Called from any fabriclib thread, several at once; must not throw (C++:
// declare it `FABRICLIB_NOEXCEPT`); may call `fabriclib_set_log_callback`.
typedef void (*fabriclib_log_cb)(void *user_data, fabriclib_log_level level, const char *message);

// What an engine can do, read without trying (`fabriclib_engine_caps`).
// Zero-initialise and set `struct_size = sizeof(fabriclib_caps)`; the
// library writes the fields that fit in `struct_size` (fields a later
// version adds stay as they are).
typedef struct fabriclib_caps {
  size_t struct_size;
  // The largest write one work request carries on every NIC: the largest
  // page of a paged write, and of a write with an immediate (a single
  // write without one is split).
  uint64_t max_msg_size;
  // The largest message `fabriclib_submit_send` takes.
  uint64_t max_send;
  // The most buffers one receive pool takes (`FABRICLIB_MAX_RECV_BUFFERS`).
  uint64_t max_recv_buffers;
  // Its NICs (every group's) and DomainGroups.
  uint32_t nic_count;
  uint32_t group_count;
  // Whether every NIC registers CUDA device memory
  // (`fabriclib_mr_register_device`; else it returns `UNSUPPORTED`).
  bool device_memory;
  // Whether requests may ask for `FABRICLIB_SUBMIT_DELIVERED` (else the
  // submit returns `UNSUPPORTED`).
  bool delivered;
  // Whether the engine runs in manual-progress mode.
  bool manual_progress;
} fabriclib_caps;

// A log2-bucketed histogram: `buckets[i]` counts values in `[2^i,
// 2^(i+1))` (bucket 0 also 0; the last, everything above); times in
// nanoseconds. `p50` and `p99` are interpolated within their bucket.
typedef struct fabriclib_histogram {
  uint64_t count;
  uint64_t sum;
  uint64_t p50;
  uint64_t p99;
  uint64_t buckets[FABRICLIB_HISTOGRAM_BUCKETS];
} fabriclib_histogram;

// An engine's metrics (`fabriclib_engine_metrics`), always counted: the
// worker writes them as it goes (relaxed atomics, one writer each) and a
// read never stops it. Zero-initialise and set `struct_size =
// sizeof(fabriclib_metrics)`; the library writes the fields that fit in
// `struct_size` (fields a later version adds stay as they are). Per NIC and
// peer: `fabriclib_engine_counters`.
typedef struct fabriclib_metrics {
  size_t struct_size;
  // Requests ended, by kind (`FABRICLIB_REQUEST_KIND_*`) and status
  // (`[kind][FABRICLIB_STATUS_OK]`: succeeded).
  uint64_t requests[FABRICLIB_METRICS_KINDS][FABRICLIB_METRICS_STATUSES];
  // Requests the worker took, by kind.
  uint64_t requests_started[FABRICLIB_METRICS_KINDS];
  // Requests taken and not yet ended.
  uint64_t requests_in_flight;
  // Immediates received (home group).
  uint64_t immediates_received;
  // Expectations (`fabriclib_expect_imm_count`) met, and ended
  // otherwise (deadline, cancel, shutdown).
  uint64_t expectations_met;
  uint64_t expectations_failed;
  // Watcher callbacks (changes seen); engine-wide.
  uint64_t watcher_events;
  // From submit to the request's first work request posted (ns), for one
  // request in 16 (ids that are multiples of 16: the clock is read at
  // submit only for those).
  struct fabriclib_histogram submit_to_post;
  // From the first post to the last completion, requests that succeeded (ns).
  struct fabriclib_histogram post_to_done;
  // Bytes per request that succeeded.
  struct fabriclib_histogram request_bytes;
  // Work requests per request that succeeded.
  struct fabriclib_histogram request_wrs;
  // From the first immediate counted to its expectation met (ns).
  struct fabriclib_histogram imm_to_expectation;
  // From a watched store to its callback (ns), bounded above: from the
  // watcher's last look that saw the old value. Engine-wide.
  struct fabriclib_histogram watcher_store_to_callback;
} fabriclib_metrics;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// === Config ===
// `fabriclib_config`: what an engine is asked for (provider, NICs, groups,
// threads, timeouts); used by one thread at a time, copied by `fabriclib_engine_create`.
//
// Creates a config with the defaults: provider from `FABRICLIB_PROVIDER`,
// else `efa`, else `tcp;ofi_rxm`; 1 NIC; no bind address. `*out` receives
// a config the caller frees with `fabriclib_config_free`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`out` NULL).
// Blocks: no.
fabriclib_status fabriclib_config_new(struct fabriclib_config **out);

// Frees a config (NULL is a no-op). Engines created from it are unaffected.
//
// Returns: nothing (NULL, or a config already freed, is ignored).
// Blocks: no.
void fabriclib_config_free(struct fabriclib_config *config);

// Sets the libfabric provider (`"efa"`, `"tcp;ofi_rxm"`, `"shm"`, ...); NULL
// restores the default. The string is copied. `FABRICLIB_PROVIDER` in the
// environment overrides it.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_provider(struct fabriclib_config *config,
                                               const char *provider);

// Sets the local address socket providers bind to (e.g. `"127.0.0.1"`, or
// with a fixed port `"127.0.0.1:7000"` / `"[::1]:7000"`: NIC i binds
// port + i);
// NULL lets the provider choose. Ignored by `shm` and `efa`. The string is
// copied. `FABRICLIB_BIND_ADDR` overrides it.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_bind_address(struct fabriclib_config *config,
                                                   const char *addr);

// Names the engine's NICs, comma-separated, by the provider's names for
// them (`"rdmap16s27-rdm,rdmap32s27-rdm"`, `"eth1,eth2"`; `fi_info`'s
// domain names), and sets the NIC count to their number (at most 8). NULL
// or `""` goes back to the default (also undoing
// `fabriclib_config_set_nics_near_gpu`): with a bind address every NIC is
// that address's, without one they spread over the provider's NICs,
// loopback last. Named NICs override the bind address. Creating the engine
// fails with `INVALID_ARGUMENT` if the provider has no NIC of a name, or if
// the NIC count was set to another number afterwards. The string is copied.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_nics(struct fabriclib_config *config, const char *nics);

// Gives the engine the `n` NICs nearest CUDA device `gpu` (1..=8; by
// PCI distance in hwloc's view of the machine, nearest first) and sets the
// NIC count to `n`; `fabriclib-info` shows that view. Creating the
// engine fails with `INVALID_ARGUMENT` if the machine has no such GPU,
// fewer than `n` NICs, or no provider offers them. NICs named with
// `fabriclib_config_set_nics` override it.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_nics_near_gpu(struct fabriclib_config *config,
                                                    uint32_t gpu,
                                                    uint32_t n);

// Pins one of the engine's threads (`FABRICLIB_THREAD_*`) to the CPUs of
// `cpus`, a list such as `"0-3,8"` (NULL or `""`: anywhere, the default;
// with `fabriclib_config_set_nics_near_gpu` the worker's default is the
// CPU hwloc's plan gives that GPU's group). The worker pins itself before
// it opens its NICs, so their memory comes from its NUMA node. Creating
// the engine fails with `INVALID_ARGUMENT` for a CPU that is not online.
// The string is copied.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_thread_cpus(struct fabriclib_config *config,
                                                  fabriclib_thread thread,
                                                  const char *cpus);

// Adds a DomainGroup to the engine: its own NICs and worker thread, and
// the memory whose registrations it takes. The first group added is group
// 0, the home group (sends, receives, immediate expectations and peer
// greetings go through it; it takes every registration no other group
// claims); without any, the engine has one group made of the settings
// above, as before.
//
// - `gpu`: registrations of this CUDA device's memory go to the group (-1: none).
// - `numa`: registrations of host memory on this NUMA node go to the group (-1: none).
// - `nic_count`: how many NICs the group drives (0: the engine's NIC
//   count, or as many as `nics` names).
// - `nics`: the group's NICs by name, comma-separated, as
//   `fabriclib_config_set_nics` (NULL or `""`: the engine's rule).
// - `worker_cpus`: the CPUs of the group's worker, as
//   `fabriclib_config_set_thread_cpus` (NULL or `""`: the engine's worker CPUs).
//
// `*index` (if not NULL) receives the group's index. A region's writes go
// from its group's NICs, NIC k to NIC k of the destination's group, so the
// two groups must have as many NICs (else the submit fails with
// `INVALID_ARGUMENT`). `INVALID_ARGUMENT` here for a bad list, more than
// 8 NICs or `FABRICLIB_MAX_GROUPS` groups; creating the engine fails for two groups on one GPU
// or NUMA node, and for CPUs or NICs that do not exist. Strings are copied.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_add_group(struct fabriclib_config *config,
                                            int32_t gpu,
                                            int32_t numa,
                                            uint32_t nic_count,
                                            const char *nics,
                                            const char *worker_cpus,
                                            uint32_t *index);

// Gives the engine one DomainGroup per GPU of the machine, each with the
// `n` NICs nearest its GPU (1..=8) and its worker on a CPU of that GPU's
// locality, after one group per NUMA node for host memory (group 0, the
// home group, is the first node's or the whole machine's), as hwloc's view
// of the machine plans it (`fabriclib-info` prints the plan). Registrations
// go to the group of their GPU or NUMA node. Groups added with
// `fabriclib_config_add_group` override it; worker CPUs set with
// `fabriclib_config_set_thread_cpus` override the plan's. Creating the
// engine fails with `INVALID_ARGUMENT` on a machine without GPUs, or when
// no provider offers the NICs.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_groups_per_gpu(struct fabriclib_config *config, uint32_t n);

// Sets how many NICs the engine drives (each group, without
// `fabriclib_config_add_group`'s own count), 1..=8 (default 1). Every peer
// must use the same number. (Before 0.4: `fabriclib_config_set_domains`.)
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_nic_count(struct fabriclib_config *config, uint32_t n);

// Sets the submission queue's capacity (default 4096 requests); when it is
// full, submits return `FABRICLIB_STATUS_AGAIN`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_submit_queue(struct fabriclib_config *config,
                                                   size_t requests);

// Sets how the worker waits when it has nothing to do. It busy-polls while
// requests are in flight or an immediate expectation is armed (unless the
// idle policy lets it sleep then: `fabriclib_config_set_idle_policy`), and
// for `spin_us` microseconds after its last activity (default 2000); then it
// sleeps in naps of up to `nap_us` microseconds (default 500). A submit ends
// a nap at once, and so does an arrival where the worker sleeps on a wait
// object (tcp, verbs, under `FABRICLIB_IDLE_AUTO` or `_BLOCK`) or a doorbell
// (shm); elsewhere data arriving for a receive pool waits out the nap. Larger
// `spin_us` lowers the latency of sporadic traffic and costs CPU; `spin_us`
// should stay above `nap_us` so that two engines exchanging requests keep
// each other awake. `nap_us` must be at least 1.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_idle(struct fabriclib_config *config,
                                           uint64_t spin_us,
                                           uint64_t nap_us);

// Manual progress (`manual` true): the engine gets no worker thread and
// no callback thread; the application drives it with
// `fabriclib_engine_progress` (or `fabriclib_engine_flag_await`), from any
// thread, one at a time doing the work. A request then goes from the
// submitting thread to the NIC with no hand-off between threads (the lowest
// latency on a small host); nothing happens between progress calls.
// Default false.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_manual_progress(struct fabriclib_config *config, bool manual);

// Sets what the worker does once it has been idle for `spin_us`
// (`fabriclib_config_set_idle`) while an immediate expectation is armed or an
// immediate is mirrored: `FABRICLIB_IDLE_AUTO` (the default since 0.4),
// `_SPIN` or `_BLOCK`. With nothing armed it always sleeps. `AUTO` saves the
// core (about 0.03 CPU s per s per idle engine instead of 1.0). On shm the
// worker sleeps on a doorbell that peer engines ring, and on verbs on the
// completion channel, neither of which costs anything on a transfer; the
// first write after a quiet spell takes 17-51 us more than with `SPIN`. On
// tcp the completion queue's wait fd costs on every transfer (the provider
// signals it per completion: about +1 us per 8-byte write-with-immediate
// half round trip) and 11-84 us on the first write after a quiet spell.
// Sleeps are cut into naps of `nap_us` (`fabriclib_config_set_idle`), which
// an arrival ends: longer naps cost less CPU and wake slower.
// `SPIN` is for engine threads on CPUs of their own, latency first.
// docs/benchmarks.md has the figures.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_idle_policy(struct fabriclib_config *config,
                                                  fabriclib_idle policy);

// Sets whether the engine asks its providers for device memory (`FI_HMEM`,
// with `FI_MR_HMEM`), which `fabriclib_mr_register_device` needs:
// `FABRICLIB_DEVICE_MEMORY_MODE_AUTO` (the default: where the machine has an
// NVIDIA driver and the libfabric in use was built with CUDA), `_ON`
// (always) or `_OFF` (never: the providers' host-memory configuration). A
// provider or NIC without `FI_HMEM` opens as it would without asking. On
// shm, `FI_HMEM` turns the single-copy path (CMA) off for host memory too:
// host writes over 4 KiB then go through the target, as with
// `FI_SHM_DISABLE_CMA=1`; an engine that moves only host memory on a GPU
// machine can set `_OFF`. The environment variable
// `FABRICLIB_DEVICE_MEMORY` (`auto`, `on`, `off`) overrides it.
// `fabriclib_engine_nic_device_memory` says what each NIC got.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_device_memory(struct fabriclib_config *config,
                                                    fabriclib_device_memory_mode mode);

// Sets how the watcher thread polls (`fabriclib_watcher_create`): it spins
// while watched words change and for `spin_us` microseconds after the last
// change, then looks every `nap_us` microseconds (default 50, at least 1)
// until one changes again; a change seen during a nap is reported up to
// `nap_us` late. `spin_us`:
// - `FABRICLIB_WATCHER_SPIN_AUTO` (the default): where the process may
//   use 5 CPUs or more, four times the recent gap between changes, from
//   50 µs to 10 ms, yielding the CPU on every look: through a layer loop
//   of changes 0.2 ms apart it stays awake (0.8 ms after each) and naps
//   soon after the loop. On fewer CPUs it never spins: measured with
//   `fabriclib-bench layers` (a layer loop whose watcher submits each
//   layer's write), on 16 CPUs spinning lands a layer 3-6× sooner than
//   napping (shm p50 12–32 µs against 69–89 µs), while on 2 CPUs the
//   spinning watcher takes the CPU the engine's workers need and napping
//   lands it sooner (p50 0.16–1.4 ms against 1.3–2.3 ms adaptive, 2.8–4.9
//   ms with the fixed 10 ms spin that was the default before 0.4).
// - a number of microseconds: a fixed spin, never yielding (the lowest
//   latency where the watcher has a core of its own);
// - `UINT64_MAX`: always spin (a whole core).
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_watcher_idle(struct fabriclib_config *config,
                                                   uint64_t spin_us,
                                                   uint64_t nap_us);

// Sets the engine's default request deadline in microseconds (default 30 s;
// 0: no deadline). Requests and immediate expectations that have not ended
// by then end with `FABRICLIB_STATUS_TIMED_OUT`; one request may set its own
// (`fabriclib_submit_opts.timeout_us`).
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_request_timeout(struct fabriclib_config *config,
                                                      uint64_t timeout_us);

// Sets how peer failure is detected: a keepalive goes to every known peer
// each `interval_us` microseconds (default 500000), and a peer not heard
// from for `peer_timeout_us` (default 3000000) is declared down: its pending requests
// end with `FABRICLIB_STATUS_PEER_DOWN` and the peer callback is told.
// Provider errors that mean "unreachable" (connection refused or reset)
// declare it down at once. On IP providers (tcp), where a restarted
// process can take the same address, a peer in use is also pinged every
// 50 ms, and one not heard from for 100 ms (or `interval_us` if smaller)
// is pinged before the next request to it is posted (a restarted peer's
// old descriptors then end with `FABRICLIB_STATUS_STALE`).
// `interval_us` must be at least 1000 (1 ms) and below `peer_timeout_us`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_keepalive_us(struct fabriclib_config *config,
                                                   uint64_t interval_us,
                                                   uint64_t peer_timeout_us);

// Sets how long (microseconds, default 1000000) a canceled, timed-out or
// peer-down request waits for the provider to give back its work requests
// already on the wire before it is reported anyway. Only providers that
// never complete operations to a dead peer (libfabric 1.17's shm) need it.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_drain_timeout_us(struct fabriclib_config *config,
                                                       uint64_t drain_us);

// Sets how many requests may be in flight at once (default 65536): submitted
// and not yet reported (a callback counts until it has returned; a flag
// request until the end of the worker pass that stored its flag, a few
// microseconds at most after the flag turned done). Beyond
// it submits return `FABRICLIB_STATUS_AGAIN`, so that a slow callback
// cannot make the engine queue completions without bound.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_max_inflight(struct fabriclib_config *config,
                                                   size_t requests);

// Sets how many work requests one peer may have in flight per NIC
// (default 256). A dead or unreachable peer then holds at most this many of
// the endpoint's (and the provider's shared) transmit resources, so the
// engine goes on serving its other peers while it waits for the keepalive
// to declare that peer down. Must be at least 1.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_peer_window(struct fabriclib_config *config,
                                                  size_t work_requests);

// Sets the peer-state callback (NULL: none) and its `user_data`, which
// must stay valid until every engine created from this config is destroyed.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
// this comment allows); `BAD_HANDLE` (a freed or foreign config).
// Blocks: no.
fabriclib_status fabriclib_config_set_peer_callback(struct fabriclib_config *config,
                                                    fabriclib_peer_cb callback,
                                                    void *user_data);

// === Engine ===
// `fabriclib_engine`: the transfer engine of a process: its NICs and worker
// threads, the requests in flight; every call on it may come from any thread.
//
// Creates an engine from `config` (NULL: defaults); the config may be freed
// afterwards. Opens the NICs and starts the worker and callback threads;
// fails with `FABRICLIB_STATUS_UNSUPPORTED` if no provider is usable.
// `*out` receives an engine the caller destroys with `fabriclib_engine_destroy`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer, or settings that do not
// fit together: the message says which); `BAD_HANDLE` (a freed or foreign
// config); `UNSUPPORTED` (no usable provider or NIC on this machine, the verbs
// backend without rdma-core, a libfabric provider without libfabric, groups
// per GPU or NICs near a GPU without hwloc or without GPUs); `PROVIDER`
// (libfabric or libibverbs refused to open a NIC).
// Blocks: yes, while it opens every NIC, registers its buffers and starts its
// threads (milliseconds; seconds where hwloc reads a large topology). It does
// not wait for any peer.
fabriclib_status fabriclib_engine_create(const struct fabriclib_config *config,
                                         struct fabriclib_engine **out);

// Destroys an engine (NULL is a no-op). Every pending request, expectation
// and receive pool ends first (with `FABRICLIB_STATUS_SHUTDOWN` where it had
// not completed; their callbacks run before this returns), then the threads
// are joined. Work requests still on the wire get `drain_timeout` (1 s by
// default) to come back; then each peer this engine contacted is told
// goodbye and answers once it has handled everything the engine sent it
// (another `drain_timeout` at most, for a dead or stopped peer), so that
// closing never hurts a live peer. It returns within 2 × `drain_timeout`
// plus the callbacks' own time; with healthy peers, in about one round
// trip. May be called from one of the engine's own callbacks (the reports
// still queued then run right after that callback returns); must not be
// called while another thread still submits to the engine. Registered regions
// (`fabriclib_mr`) outlive it and must still be deregistered.
//
// In manual-progress mode a callback runs inside `fabriclib_engine_progress`,
// which is still using the engine: destroying that engine from such a
// callback is refused (nothing happens; a message goes to the log —
// `fabriclib_set_log_callback`, stderr by default — and the last error); destroy it after the progress call has returned.
//
// Returns: nothing (NULL, or an engine already destroyed, is ignored).
// Blocks: yes: it says goodbye to its peers and waits for their answer, then
// gives work requests on the wire up to the drain timeout
// (`fabriclib_config_set_drain_timeout_us`): at most 2 × that (2 s by
// default), then joins its threads. From the engine's own callback it returns
// at once (the preamble says what runs after).
void fabriclib_engine_destroy(struct fabriclib_engine *engine);

// Manual progress (`fabriclib_config_set_manual_progress`): runs one pass of
// the engine on the calling thread — new requests and control calls,
// posting, polling, immediates, flags, deadlines, keepalives, and the
// callbacks that are due (there is no callback thread in this mode) — and
// writes to `*progressed` (unless NULL) whether anything happened. Any
// thread; one at a time does the work (a concurrent or nested call returns
// at once with `*progressed` false). Nothing moves between calls: call it
// while anything is in flight or expected. Control calls
// (`fabriclib_mr_register`, `fabriclib_expect_imm_count`, …) progress by
// themselves until answered. With a worker thread: `*progressed` false.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine).
// Blocks: no: one pass of the engine (with a worker thread it does nothing).
fabriclib_status fabriclib_engine_progress(const struct fabriclib_engine *engine, bool *progressed);

// Waits until `*flag` has `FABRICLIB_FLAG_DONE` or `timeout_us` passed
// (`FABRICLIB_NO_TIMEOUT`: for ever), writing the flag's value to `*value`
// (unless NULL): in manual-progress mode by progressing `engine` on this
// thread (`fabriclib_engine_progress`), else as `fabriclib_flag_await`
// (sleeping). Returns `FABRICLIB_STATUS_OK` once done,
// `FABRICLIB_STATUS_TIMED_OUT` if the timeout passed first. (Was
// `fabriclib_engine_flag_await` before 0.4, which returned `AGAIN` then.)
//
// Returns: `OK` (the flag is done); `TIMED_OUT` (`timeout_us` passed first);
// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
// foreign engine); `INVALID_ARGUMENT` also for a misaligned flag.
// Blocks: up to `timeout_us` (`FABRICLIB_NO_TIMEOUT`: until the flag is done).
fabriclib_status fabriclib_engine_flag_await(const struct fabriclib_engine *engine,
                                             const uint32_t *flag,
                                             uint64_t timeout_us,
                                             uint32_t *value);

// Writes the engine's event fd to `*fd`: a non-blocking eventfd that turns
// readable after the engine ended a request (stored its flag or queued its
// callback) or queued a receive or a peer event, so that an event loop —
// epoll, libuv, asyncio's `add_reader` — waits for the engine without a
// thread of its own. To use it: wait until readable, read its 8 bytes
// (clearing it), then look at the flags you are waiting on; look once right
// after the first call too, as requests that ended before it made no event.
// Made on the first call, the same fd after; the engine closes it at
// `fabriclib_engine_destroy` (do not close it yourself; take it out of
// your event loop first). With manual progress it turns readable only
// while something progresses the engine.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `PROVIDER` (the kernel refused an eventfd).
// Blocks: no.
fabriclib_status fabriclib_engine_event_fd(const struct fabriclib_engine *engine, int32_t *fd);

// Copies the engine's address (a versioned binary blob to hand to peers out
// of band) into `buf` of `cap` bytes and its length into `*len`. If `cap` is
// too small (or `buf` is NULL), only `*len` is written and
// `FABRICLIB_STATUS_BUFFER_TOO_SMALL` returned. Any thread.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
// (a NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine).
// Blocks: no.
fabriclib_status fabriclib_engine_address(const struct fabriclib_engine *engine,
                                          uint8_t *buf,
                                          size_t cap,
                                          size_t *len);

// Writes the name of the libfabric provider in use (e.g. `"tcp;ofi_rxm"`) to
// `*out`; the string lives as long as the engine. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine).
// Blocks: no.
fabriclib_status fabriclib_engine_provider(const struct fabriclib_engine *engine, const char **out);

// Writes the largest message `fabriclib_submit_send` takes on this engine
// to `*out`: 64 KiB, or 4096 bytes on `shm` (its inject size; 8 bytes less
// on a provider whose messages name their sender in a header), whose larger
// messages wait on the receiver's answer (a receiver that died would stall
// every later one; libfabric 1.17). Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine).
// Blocks: no.
fabriclib_status fabriclib_engine_max_send(const struct fabriclib_engine *engine, size_t *out);

// === Memory regions ===
// `fabriclib_mr`: local memory registered with the NICs of its group, the
// source of writes and the target of peers' writes; its descriptor goes to peers.
//
// Registers `len` bytes of host memory at `ptr` with every NIC of its
// group. The memory must stay valid until `fabriclib_mr_deregister` and
// until every request using it has completed. `*out` receives the handle.
// Any thread (registrations are serialised on the worker).
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero length;
// `PROVIDER` (the NIC refused the registration: memory locked beyond `ulimit
// -l`, or not mapped); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_mr_register(const struct fabriclib_engine *engine,
                                       void *ptr,
                                       size_t len,
                                       struct fabriclib_mr **out);

// Registers `len` bytes at `ptr` in group `group` of the engine
// (`fabriclib_config_add_group`) whatever memory it is, where
// `fabriclib_mr_register` would choose the group of the memory's GPU or
// NUMA node: host memory with `device` -1, else CUDA device memory of
// `device` (as `fabriclib_mr_register_device`). `INVALID_ARGUMENT` for a
// group the engine does not have. Otherwise as `fabriclib_mr_register`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero length or a
// group the engine does not have; `PROVIDER` (the NIC refused the
// registration); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_mr_register_in_group(const struct fabriclib_engine *engine,
                                                uint32_t group,
                                                void *ptr,
                                                size_t len,
                                                int32_t device,
                                                struct fabriclib_mr **out);

// Registers `len` bytes of CUDA device memory of GPU `device` at `ptr`
// (`fabriclib_mr_register` detects device memory by itself when the process
// uses CUDA; this says it explicitly). The region is exported as a dma-buf
// where the driver can and handed to the provider as GPU memory; a provider
// without `FI_HMEM` (tcp and shm of the distributions' libfabric) refuses with
// `FABRICLIB_STATUS_UNSUPPORTED`, naming itself. `UNSUPPORTED` too without a
// CUDA driver; `INVALID_ARGUMENT` if `ptr` is not device memory of `device`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero length or a
// pointer that is not CUDA device memory; `UNSUPPORTED` (no CUDA driver, or a
// provider or backend that cannot register device memory); `PROVIDER` (the NIC
// refused it); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_mr_register_device(const struct fabriclib_engine *engine,
                                              void *ptr,
                                              size_t len,
                                              int32_t device,
                                              struct fabriclib_mr **out);

// Writes the index of the engine's group the region is registered in
// (0 for an engine of one group) to `*out`. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a
// deregistered or foreign region).
// Blocks: no.
fabriclib_status fabriclib_mr_group(const struct fabriclib_mr *mr, uint32_t *out);

// Releases a registration (NULL is a no-op). Requests still using it keep it
// alive until they complete; the memory may be freed once they have.
//
// Returns: nothing (NULL is ignored).
// Blocks: no: the registration is released once no request uses it.
void fabriclib_mr_deregister(struct fabriclib_mr *mr);

// Copies the region's descriptor (versioned binary blob: address, length and
// one key per NIC) for a peer to parse with `fabriclib_remote_mr_parse`.
// Buffer rules as in `fabriclib_engine_address`. Any thread.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
// (a NULL pointer); `BAD_HANDLE` (a deregistered or foreign region).
// Blocks: no.
fabriclib_status fabriclib_mr_descriptor(const struct fabriclib_mr *mr,
                                         uint8_t *buf,
                                         size_t cap,
                                         size_t *len);

// === Remote regions ===
// `fabriclib_remote_mr`: a peer's registered region, parsed once from its
// descriptor blob; the destination of writes, immutable, shared by any thread.
//
// Parses a peer's descriptor (`len` bytes at `buf`). Truncated, padded,
// corrupt or unknown-version blobs give `FABRICLIB_STATUS_MALFORMED`: every
// address and descriptor blob ends with a CRC-32C of its bytes, so a blob
// damaged on its way (any single flipped bit, any truncation) is refused,
// never used. The checksum is no defence against a deliberately forged
// blob: descriptors must come from a channel you trust. `*out`
// receives a handle the caller frees with `fabriclib_remote_mr_free`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `MALFORMED` (not a
// descriptor: its version, length or checksum is wrong).
// Blocks: no.
fabriclib_status fabriclib_remote_mr_parse(const uint8_t *buf,
                                           size_t len,
                                           struct fabriclib_remote_mr **out);

// Writes the length in bytes of a peer's region to `*len`.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a freed or
// foreign descriptor).
// Blocks: no.
fabriclib_status fabriclib_remote_mr_len(const struct fabriclib_remote_mr *mr, uint64_t *len);

// Writes what memory a peer's region is to `*memory`: a
// `FABRICLIB_REGION_MEMORY_*` (host, or GPU memory of the owner).
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a freed or
// foreign descriptor).
// Blocks: no.
fabriclib_status fabriclib_remote_mr_memory(const struct fabriclib_remote_mr *mr,
                                            fabriclib_region_memory *memory);

// Frees a parsed descriptor (NULL is a no-op). Requests already submitted
// with it are unaffected.
//
// Returns: nothing (NULL is ignored).
// Blocks: no.
void fabriclib_remote_mr_free(struct fabriclib_remote_mr *mr);

// Copies the address of the engine group that holds a peer's region (the
// group it was registered in, as that group's `fabriclib_engine_group_address`
// gives it) into `buf` of `cap` bytes, and its length into `*len`. With
// DomainGroups, a peer set for scatters and barriers into this region must
// list this address; `fabriclib_peer_add` and `fabriclib_peer_state` take
// it too. If `cap` is too small (or `buf` is NULL), only `*len` is written.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
// (`len` NULL); `BAD_HANDLE` (a freed or foreign descriptor).
// Blocks: no.
fabriclib_status fabriclib_remote_mr_owner(const struct fabriclib_remote_mr *mr,
                                           uint8_t *buf,
                                           size_t cap,
                                           size_t *len);

// === Peers ===
// Other engines, named by their address blobs: greeted before the first
// request, watched by keepalives, reported up or down, grouped for scatters.
//
// Greets the engine whose address is `addr` (`addr_len` bytes) now, rather
// than at the first request to it. A peer that is down is greeted afresh
// (for example once its link is back) and comes up if it answers; until
// then requests to it end at once with `FABRICLIB_STATUS_PEER_DOWN`. An
// engine restarted elsewhere has a new address: just use that one.
//
// With `opts` NULL the greeting is all. With `opts`, it is a request that
// reports (callback or flag, with its deadline) once the peer is up:
// `FABRICLIB_STATUS_OK` (at once if it already is), else
// `FABRICLIB_STATUS_PEER_DOWN` / `STALE` / `TIMED_OUT` / `CANCELED` /
// `SHUTDOWN`; its id goes to `*request_id` (unless NULL). A serving stack
// warms its peers up this way at admission and knows when they are ready.
// Any thread.
//
// Returns: `OK` (greeted; with `opts`, the request then reports once);
// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
// foreign engine); `MALFORMED` (an address that does not parse); `AGAIN` (with
// `opts`: the submission queue is full); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered. It never waits for the peer: `opts` reports
// that.
fabriclib_status fabriclib_peer_add(const struct fabriclib_engine *engine,
                                    const uint8_t *addr,
                                    size_t addr_len,
                                    const struct fabriclib_submit_opts *opts,
                                    uint64_t *request_id);

// Greets every group of the engine whose groups blob
// (`fabriclib_engine_groups_address`; a plain address counts as one group)
// is `addr`/`addr_len`, from every group of this engine with as many NICs,
// as `fabriclib_peer_add` does. `INVALID_ARGUMENT` unless both engines
// have as many groups and as many NICs in each (the message names both);
// `MALFORMED` for a bad blob. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also where the two engines'
// groups or NIC counts differ; `MALFORMED` (a bad blob); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered. It never waits for the peer.
fabriclib_status fabriclib_peer_add_engine(const struct fabriclib_engine *engine,
                                           const uint8_t *addr,
                                           size_t addr_len);

// Writes the state of the peer engine named by `addr` (its address, any
// of its groups' addresses, or its groups blob) to `*state`
// (`FABRICLIB_PEER_*`): with DomainGroups every pair of groups in contact
// counts, `FABRICLIB_PEER_DOWN` if any is down, else
// `FABRICLIB_PEER_CONNECTING` if any has not answered yet, else
// `FABRICLIB_PEER_UP`. `FABRICLIB_STATUS_NOT_FOUND` if this engine has
// never been in contact with it. Any thread, fabriclib callbacks included
// (it waits for the worker's answer).
//
// Returns: `OK`; `NOT_FOUND` (no group of this engine has been in contact with
// that engine); `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `MALFORMED` (an address that does not parse);
// `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_peer_state(const struct fabriclib_engine *engine,
                                      const uint8_t *addr,
                                      size_t addr_len,
                                      fabriclib_peer_liveness *state);

// Forgets the peer engine named by `addr` (its address, any of its groups'
// addresses, or its groups blob) in every group of this engine, and
// writes how many requests that ended to `*ended` unless it is NULL. Its
// pending requests end with `FABRICLIB_STATUS_CANCELED`, as for
// `fabriclib_cancel_peer`; then it is no longer pinged, never reported up
// or down again, and its messages no longer name it
// (`fabriclib_message.from`) until it greets this engine again, as a new
// peer. Descriptors it owns (`fabriclib_remote_mr`) stay valid: a request
// that names one later greets the engine afresh. The provider's own state
// for it (libfabric's address entry and connection, verbs' queue pairs)
// stays until the engine is destroyed. Any thread, fabriclib callbacks
// included (it waits for the worker's answer).
//
// Returns: `OK`; `NOT_FOUND` (no group of this engine has been in contact
// with that engine, or it was removed already); `INVALID_ARGUMENT` (a NULL
// pointer argument, or a peer set lists the peer: remove the set first,
// `fabriclib_remove_peer_set`); `BAD_HANDLE` (a destroyed or foreign
// engine); `MALFORMED` (an address that does not parse); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_peer_remove(const struct fabriclib_engine *engine,
                                       const uint8_t *addr,
                                       size_t addr_len,
                                       size_t *ended);

// Resolves `count` peer engine addresses (`addrs[i]` of `addr_lens[i]`
// bytes) once, so scatters and barriers to them skip per-destination
// lookups. Writes a non-zero peer set handle to `*out`. Any thread.
// (Before 0.4: `fabriclib_add_peer_group`.)
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a count of 0;
// `MALFORMED` (an address that does not parse); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_add_peer_set(const struct fabriclib_engine *engine,
                                        fabriclib_blob_list addrs,
                                        const size_t *addr_lens,
                                        size_t count,
                                        uint64_t *out);

// Removes peer set `set` (`fabriclib_add_peer_set`): scatters and barriers
// through it are refused from now on (`FABRICLIB_STATUS_BAD_HANDLE`); one
// submitted through it that the engine has not started yet ends with
// `FABRICLIB_STATUS_BAD_HANDLE`, one already started goes on to its end.
// The peers themselves stay known. Any thread, fabriclib callbacks
// included.
//
// Returns: `OK`; `BAD_HANDLE` (no such set, or removed already; or a
// destroyed or foreign engine); `INVALID_ARGUMENT` (`engine` NULL);
// `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_remove_peer_set(const struct fabriclib_engine *engine, uint64_t set);

// === Requests ===
// Writes, scatters, barriers, sends and receive pools; each accepted request
// ends exactly once (callback or flag word), and can be canceled or waited on.
//
// Writes `len` bytes from `src_offset` of `src` to `dst_offset` of `dst`.
// `imm` is NULL or points to an immediate: then the destination counts
// exactly **one** `*imm` once every byte has landed, `len` may be 0
// (notification only), and `len` must fit the provider's max message size.
// Without an immediate, large writes are split and sharded over NICs.
// `opts` reports when the source buffer may be reused; that is not proof
// that the bytes landed (the receiver's immediate is). Any thread.
//
// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
// outside its region); `MALFORMED` (a descriptor or address that does not
// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
// submit that returns an error never reports. `INVALID_ARGUMENT` also for a
// zero length without an immediate, a write with an immediate over the
// provider's maximum message, or a NIC route outside the request's group.
// Blocks: no: it queues the request for the worker and returns; a full queue
// returns `AGAIN` rather than waiting.
fabriclib_status fabriclib_submit_single_write(const struct fabriclib_engine *engine,
                                               uint64_t len,
                                               const uint32_t *imm,
                                               const struct fabriclib_mr *src,
                                               uint64_t src_offset,
                                               const struct fabriclib_remote_mr *dst,
                                               uint64_t dst_offset,
                                               const struct fabriclib_submit_opts *opts,
                                               uint64_t *request_id);

// Submits `count` single writes from `src` in one hand-off to the engine's
// worker (since 0.4): each is a request of its own, with its own id,
// immediate, options and report, checked and carried out exactly as
// `fabriclib_submit_single_write` would; the batch costs one slot of the
// submission queue and one wake where single submits pay each per write.
// When every write is one work request (at most `max_msg_size` bytes, not
// sharded), all go to one peer, none is `FABRICLIB_SUBMIT_DELIVERED` and
// all share a deadline and route, the worker also takes, checks and times
// them together (up to 256 at a time); each still reports on its own, as
// its work request comes back, and `fabriclib_cancel` of one cancels it
// alone. Write `k`'s id is `*first_request_id + k`. All or none: every write is
// checked first, and any error submits none of them (and none reports); the
// last-error message names the first bad write by its index. The array
// and what it points to are read during the call only. Any thread.
//
// Returns: `OK` (each write then reports exactly once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
// outside its region); `MALFORMED` (a descriptor or address that does not
// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
// cannot confirm delivery); `AGAIN` (the submission queue is full, or
// `max_inflight` has no room for all `count` writes: progress, then retry);
// `SHUTDOWN` (the engine is being destroyed). A submit that returns an error
// never reports. `INVALID_ARGUMENT` also for `count` 0 or over
// `max_inflight`, and for what `fabriclib_submit_single_write` refuses.
// Blocks: no.
fabriclib_status fabriclib_submit_single_writes(const struct fabriclib_engine *engine,
                                                const struct fabriclib_mr *src,
                                                const struct fabriclib_single_write *writes,
                                                size_t count,
                                                uint64_t *first_request_id);

// Writes `src_pages->count` pages of `page_len` bytes: page `i` goes from
// source page `src_pages->indices[i]` to destination page
// `dst_pages->indices[i]` (both counts must match). Every page is checked
// against both regions before anything is posted. With `imm` non-NULL the
// destination counts **one `*imm` per page**. Pages are sharded over the
// NICs. The index arrays are copied. Any thread.
//
// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
// outside its region); `MALFORMED` (a descriptor or address that does not
// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
// submit that returns an error never reports. `INVALID_ARGUMENT` also for page
// counts that differ or a NIC route outside the request's group.
// Blocks: no: it queues the request for the worker and returns; a full queue
// returns `AGAIN` rather than waiting.
fabriclib_status fabriclib_submit_paged_writes(const struct fabriclib_engine *engine,
                                               uint64_t page_len,
                                               const uint32_t *imm,
                                               const struct fabriclib_mr *src,
                                               const struct fabriclib_pages *src_pages,
                                               const struct fabriclib_remote_mr *dst,
                                               const struct fabriclib_pages *dst_pages,
                                               const struct fabriclib_submit_opts *opts,
                                               uint64_t *request_id);

// Writes a different slice of `src` to each of `count` destinations (each
// possibly another peer). With `imm` non-NULL each destination's owner counts
// **one `*imm` per destination**. `peer_set` is 0 or a handle from
// `fabriclib_add_peer_set` whose peer `i` owns `dsts[i].dst`. The array is
// copied. Any thread.
//
// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
// outside its region); `MALFORMED` (a descriptor or address that does not
// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
// submit that returns an error never reports. `INVALID_ARGUMENT` also for no
// destination; `BAD_HANDLE` also for an unknown peer set.
// Blocks: no: it queues the request for the worker and returns; a full queue
// returns `AGAIN` rather than waiting.
fabriclib_status fabriclib_submit_scatter(const struct fabriclib_engine *engine,
                                          uint64_t peer_set,
                                          const uint32_t *imm,
                                          const struct fabriclib_mr *src,
                                          const struct fabriclib_scatter_dst *dsts,
                                          size_t count,
                                          const struct fabriclib_submit_opts *opts,
                                          uint64_t *request_id);

// Sends a zero-byte write carrying `imm` to each of `count` destination
// regions: each destination's owner counts **one `imm` per destination**.
// `peer_set` as for `fabriclib_submit_scatter`. Any thread.
//
// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
// outside its region); `MALFORMED` (a descriptor or address that does not
// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
// submit that returns an error never reports. `BAD_HANDLE` also for an unknown
// peer set.
// Blocks: no: it queues the request for the worker and returns; a full queue
// returns `AGAIN` rather than waiting.
fabriclib_status fabriclib_submit_barrier(const struct fabriclib_engine *engine,
                                          uint64_t peer_set,
                                          uint32_t imm,
                                          fabriclib_remote_mr_list dsts,
                                          size_t count,
                                          const struct fabriclib_submit_opts *opts,
                                          uint64_t *request_id);

// Sends a copy of `len` bytes at `msg` (at most 65536; 4096 on `shm`: see
// `fabriclib_engine_max_send`) to the engine whose
// address is `addr` (`addr_len` bytes); `msg` may be reused at once. The peer
// must have a receive buffer posted (`fabriclib_recv_pool_add`) at least
// `len` bytes long. Any thread; the end is reported through `opts`.
//
// Every `fabriclib_submit_*` function (and `fabriclib_expect_imm_count`)
// writes the new request's id to `*request_id` unless it is NULL: pass it
// to `fabriclib_cancel`.
//
// Returns: `OK` (the request then reports exactly once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `BAD_HANDLE` also for a region of another engine; `OUT_OF_BOUNDS` (a range
// outside its region); `MALFORMED` (a descriptor or address that does not
// parse); `UNSUPPORTED` (`FABRICLIB_SUBMIT_DELIVERED` on a provider that
// cannot confirm delivery); `AGAIN` (the submission queue or `max_inflight` is
// full: progress, then retry); `SHUTDOWN` (the engine is being destroyed). A
// submit that returns an error never reports. `INVALID_ARGUMENT` also for a
// message over `fabriclib_engine_max_send`.
// Blocks: no: it queues the request for the worker and returns; a full queue
// returns `AGAIN` rather than waiting.
fabriclib_status fabriclib_submit_send(const struct fabriclib_engine *engine,
                                       const uint8_t *addr,
                                       size_t addr_len,
                                       const void *msg,
                                       size_t len,
                                       const struct fabriclib_submit_opts *opts,
                                       uint64_t *request_id);

// Cancels request (or immediate expectation) `request_id`. Nothing more of
// it is posted; it reports `FABRICLIB_STATUS_CANCELED` once the provider has
// given back its work requests already on the wire: after that report the
// caller may reuse or free its buffers. Some, all or none of its bytes (and
// immediates) may have landed. Returns `FABRICLIB_STATUS_NOT_FOUND` if the
// request has already ended (it then reports its own outcome, if it has not
// yet). Any thread, fabriclib callbacks included (it waits for the
// worker's answer).
//
// Returns: `OK` (the request will report `CANCELED`); `NOT_FOUND` (it has
// already ended, or never existed); `INVALID_ARGUMENT` (a NULL pointer
// argument); `BAD_HANDLE` (a destroyed or foreign engine); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_cancel(const struct fabriclib_engine *engine, uint64_t request_id);

// Cancels every pending request to the engine named by `addr` (`addr_len`
// bytes: its address, the address of any of its groups, or its groups blob
// from `fabriclib_engine_groups_address`), from every group of this engine,
// including scatters and barriers with a destination there; writes how
// many to `*canceled` unless it is NULL. Each ends as for
// `fabriclib_cancel`. Any thread, fabriclib callbacks included (it waits
// for the worker's answer).
//
// Returns: `OK` (`*canceled` says how many); `INVALID_ARGUMENT` (a NULL
// pointer argument); `BAD_HANDLE` (a destroyed or foreign engine); `MALFORMED`
// (an address that does not parse); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_cancel_peer(const struct fabriclib_engine *engine,
                                       const uint8_t *addr,
                                       size_t addr_len,
                                       size_t *canceled);

// Posts `count` receive buffers (at most 4096) for messages of up to `len`
// bytes (at most 65536) as one pool. Each arriving message calls
// `callback(user_data, FABRICLIB_STATUS_OK, data, len)` on the callback
// thread; the buffer is reposted when it returns. A message longer than `len`
// is dropped and reported as `callback(user_data, FABRICLIB_STATUS_TRUNCATED,
// NULL, 0)`; the sender's connection is unaffected (each buffer is 64 KiB
// underneath, so a pool costs `count` × 64 KiB). When
// the engine is destroyed, `callback` runs once more with
// `FABRICLIB_STATUS_SHUTDOWN`; `user_data` must stay valid until then. Any
// thread. `fabriclib_recv_pool_add` does the same and also names each
// message's sender and gives the pool an id to remove it by.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a zero buffer size
// or count, or a callback NULL; `PROVIDER` (registering the pool's buffers
// failed); `SHUTDOWN`.
// Blocks: until the engine's worker answers: microseconds while it runs; in
// manual-progress mode the call progresses the engine itself until answered.
fabriclib_status fabriclib_submit_recvs(const struct fabriclib_engine *engine,
                                        size_t len,
                                        size_t count,
                                        fabriclib_recv_cb callback,
                                        void *user_data);

// Posts `count` receive buffers (at most 4096) for messages of up to `len`
// bytes (at most 65536) as one pool, and writes its id to `*pool` (unless
// NULL). Each arriving message calls `callback(user_data,
// FABRICLIB_STATUS_OK, msg)` on the callback thread with its bytes and its
// sender (`fabriclib_message`); the buffer is reposted when the callback
// returns. A message longer than `len` is dropped and reported as
// `FABRICLIB_STATUS_TRUNCATED` (the sender's connection is unaffected; each
// buffer is 64 KiB underneath, so a pool costs `count` × 64 KiB). The
// callback's last call says `FABRICLIB_STATUS_CANCELED` after
// `fabriclib_recv_pool_remove`, `FABRICLIB_STATUS_SHUTDOWN` when the engine
// is destroyed; `user_data` must stay valid until then. A message lands in
// a buffer of any of the engine's pools. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`engine` or `callback` NULL, a zero
// `len` or `count`, more than 4096 buffers or 65536 bytes); `BAD_HANDLE` (a destroyed
// or foreign engine); `PROVIDER` (registering the pool's buffers failed);
// `SHUTDOWN`.
// Blocks: until the engine's worker answers: microseconds while it runs; in
// manual-progress mode the call progresses the engine itself until answered.
fabriclib_status fabriclib_recv_pool_add(const struct fabriclib_engine *engine,
                                         size_t len,
                                         size_t count,
                                         fabriclib_message_cb callback,
                                         void *user_data,
                                         uint64_t *pool);

// As `fabriclib_recv_pool_add`, but `callback` runs on the engine's worker
// thread itself, as each message is taken from the NIC: no hand-off to the
// callback thread and back, so answering a message from its callback
// (request/response, a ping) saves two thread hops each way. The callback
// must be short and must not block: it may submit (`AGAIN` when the queue
// is full), count and copy; a call that waits for the worker (adding or
// removing pools, peers or expectations, `fabriclib_flag_await`…) returns
// `INVALID_ARGUMENT` from it, and it must not destroy the engine. With
// manual progress it runs inside the pass that takes the message, on the
// thread in `fabriclib_engine_progress`, under the same rules (a nested
// `fabriclib_engine_progress` does nothing); `fabriclib_recv_pool_add`'s
// callbacks run after the pass instead, through a queue. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`engine` or `callback` NULL, a zero
// `len` or `count`, more than 4096 buffers or 65536 bytes); `BAD_HANDLE` (a
// destroyed or foreign engine); `PROVIDER` (registering the pool's buffers
// failed); `SHUTDOWN`.
// Blocks: until the engine's worker answers: microseconds while it runs; in
// manual-progress mode the call progresses the engine itself until answered.
fabriclib_status fabriclib_recv_pool_add_on_worker(const struct fabriclib_engine *engine,
                                                   size_t len,
                                                   size_t count,
                                                   fabriclib_message_cb callback,
                                                   void *user_data,
                                                   uint64_t *pool);

// Removes receive pool `pool` (`fabriclib_recv_pool_add`'s id): its
// callback's last call, `FABRICLIB_STATUS_CANCELED`, runs after the
// messages already handed to it, and no call follows. Its buffers are
// withdrawn from the provider where it can (libfabric); a message that
// still lands in one (verbs cannot withdraw a posted receive) goes to the
// engine's oldest remaining pool, or waits for the next pool added. Its
// memory is freed once every buffer is back. Any thread, fabriclib
// callbacks included (its own callback's too).
//
// Returns: `OK`; `NOT_FOUND` (no such pool, or removed already);
// `INVALID_ARGUMENT` (`engine` NULL); `BAD_HANDLE` (a destroyed or foreign
// engine); `SHUTDOWN`.
// Blocks: until the engine's worker answers: microseconds while it runs; in
// manual-progress mode the call progresses the engine itself until answered.
fabriclib_status fabriclib_recv_pool_remove(const struct fabriclib_engine *engine, uint64_t pool);

// Waits until the completion flag word `flag` (a request's
// `fabriclib_submit_opts.flag`) holds `FABRICLIB_FLAG_DONE`, sleeping (a
// futex) rather than spinning after the first 20 µs (while it spins it
// yields the CPU on every look on a host of 4 CPUs or fewer, on every 32nd
// on a larger one), and writes the word
// to `*value` (unless NULL): `FABRICLIB_FLAG_DONE | status`. Returns
// `FABRICLIB_STATUS_OK` once done; `FABRICLIB_STATUS_TIMED_OUT` if
// `timeout_us` passed first (0: only look; `FABRICLIB_NO_TIMEOUT`: wait
// for ever). Any thread, several at once; the flag may be a `uint32_t`, a
// C11 `_Atomic uint32_t` or a C++ `std::atomic<uint32_t>`. (Was
// `fabriclib_flag_wait` before 0.4, which returned `AGAIN` on a timeout.)
//
// Returns: `OK` (the flag is done); `TIMED_OUT` (`timeout_us` passed first);
// `INVALID_ARGUMENT` (`flag` NULL or not 4-byte aligned).
// Blocks: up to `timeout_us` (`FABRICLIB_NO_TIMEOUT`: until the flag is done).
fabriclib_status fabriclib_flag_await(const uint32_t *flag, uint64_t timeout_us, uint32_t *value);

// Why request `request_id` (a submit's or an expectation's id) failed, for
// callers that watch a flag rather than take a callback: writes its status
// to `*status` and its message, NUL-terminated, into `buf` of `cap` bytes
// (the length with the NUL to `*len`; if it does not fit, only `*len`,
// with `FABRICLIB_STATUS_BUFFER_TOO_SMALL`). The errors of the last 1024
// failed requests are kept, and each is there before its flag is stored;
// `FABRICLIB_STATUS_NOT_FOUND` for a request that has not failed (still
// running, ended OK) or failed longer ago. Any thread.
//
// Returns: `OK`; `NOT_FOUND` (the request has not failed, or failed over 1024
// failures ago); `BUFFER_TOO_SMALL` (only `*status` and `*len` written);
// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
// foreign engine).
// Blocks: no.
fabriclib_status fabriclib_request_error(const struct fabriclib_engine *engine,
                                         uint64_t request_id,
                                         fabriclib_status *status,
                                         char *buf,
                                         size_t cap,
                                         size_t *len);

// === Immediates ===
// The 32-bit values writes carry, counted per value on the receiver:
// an expectation fires when its count has landed; a mirror copies the count to a word.
//
// Reports through `opts` once `count` (>= 1) writes carrying immediate `imm`
// have landed in this engine's memory. Immediates that arrived before the
// call count too; a surplus is kept for the next expectation. At most one
// expectation per immediate value at a time (`FABRICLIB_STATUS_ALREADY_EXISTS`).
// An expectation that fails (timed out, canceled, shut down) discards the
// immediates it had counted: they can never complete a later expectation.
// Immediates of that transfer that land after it failed count afresh, even
// after its writer reported OK (OK frees the source; it does not mean the
// target counted): use a new value after a failure rather than resetting
// this one (docs/failure-semantics.md, "OK is not landed"). Any thread.
//
// Returns: `OK` (the expectation then reports once); `INVALID_ARGUMENT` (a
// NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `INVALID_ARGUMENT` also for a count of 0; `ALREADY_EXISTS` (that immediate
// already has an expectation armed); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_expect_imm_count(const struct fabriclib_engine *engine,
                                            uint32_t imm,
                                            uint32_t count,
                                            const struct fabriclib_submit_opts *opts,
                                            uint64_t *request_id);

// Writes to `*count` how many writes carrying immediate `imm` have landed
// and are not yet taken by an expectation. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_imm_count_get(const struct fabriclib_engine *engine,
                                         uint32_t imm,
                                         uint64_t *count);

// Sets the count of immediate `imm` to 0 and writes what it was to
// `*previous` (unless NULL). An armed expectation on `imm` stays armed and
// counts from 0. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_imm_count_reset(const struct fabriclib_engine *engine,
                                           uint32_t imm,
                                           uint64_t *previous);

// Mirrors immediate `imm` into `*word` (NULL: stops mirroring): the worker
// sets the word at once to what `fabriclib_imm_count_get` would report, then
// adds one, with a release store, for every later arrival of `imm`.
// Expectations and resets do not lower it, so a kernel (or a thread) waits
// for "at least n" with a volatile load, then `__threadfence_system()`
// before it reads the data. Put the word in `fabriclib_mapped_alloc` memory
// for a kernel. The word must be 8-byte aligned and stay valid until this
// is called again for `imm` (another word, or NULL) and has returned, or
// the engine is destroyed. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a misaligned word;
// `SHUTDOWN`.
// Blocks: until the engine's worker answers (each group's, in turn):
// microseconds while it runs; in manual-progress mode the call progresses the
// engine itself until answered.
fabriclib_status fabriclib_imm_mirror(const struct fabriclib_engine *engine,
                                      uint32_t imm,
                                      uint64_t *word);

// === Watchers ===
// `fabriclib_watcher`: a 64-bit word a GPU kernel (or a thread) bumps; the
// engine's watcher thread calls back on each change, in order, skipping none it saw.
//
// Creates a watcher: a 64-bit word, zero at first, that the engine's
// watcher thread (started with the first watcher) polls, calling
// `opts->callback(opts->user_data, old, new)` when it changes. Get the word
// with `fabriclib_watcher_host_ptr` / `fabriclib_watcher_device_ptr`. A kernel
// bumps it with a volatile store followed by `__threadfence_system()`; that
// works inside a CUDA graph too:
//
// ```c
// __global__ void layer_done(volatile uint64_t *w, uint64_t layer) {
//     // ... the layer's outputs are written above ...
//     __threadfence_system();       // outputs visible to the CPU first
//     *w = layer + 1;               // then the signal
//     __threadfence_system();
// }
// ```
//
// `user_data` must stay valid until `fabriclib_watcher_destroy` returns.
// Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a memory kind that
// is not a `FABRICLIB_MEMORY_*` or a callback NULL; `UNSUPPORTED` (CUDA-mapped
// memory without a CUDA driver); `PROVIDER` (allocating the word failed);
// `SHUTDOWN`.
// Blocks: briefly: it allocates the word and starts the watcher thread on
// first use; it never waits for the worker.
fabriclib_status fabriclib_watcher_create(const struct fabriclib_engine *engine,
                                          const struct fabriclib_watcher_opts *opts,
                                          struct fabriclib_watcher **out);

// Writes the word's address for the CPU to `*out`. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a
// destroyed or foreign watcher).
// Blocks: no.
fabriclib_status fabriclib_watcher_host_ptr(const struct fabriclib_watcher *w, uint64_t **out);

// Writes the word's address for a kernel to `*out`;
// `FABRICLIB_STATUS_UNSUPPORTED` if it is plain host memory (no CUDA, or
// `FABRICLIB_MEMORY_HOST`). Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer); `BAD_HANDLE` (a
// destroyed or foreign watcher); `UNSUPPORTED` (a watcher of plain host
// memory).
// Blocks: no.
fabriclib_status fabriclib_watcher_device_ptr(const struct fabriclib_watcher *w, uint64_t *out);

// Stops the watcher and frees its word (NULL is a no-op). No callback of it
// runs after this returns, except the one it is called from (allowed).
// It waits for a callback of the engine's watcher thread that is running.
//
// Returns: nothing (NULL is ignored).
// Blocks: until a callback of this watcher that is running returns (from that
// callback itself it does not wait).
void fabriclib_watcher_destroy(struct fabriclib_watcher *w);

// === Mapped memory ===
// Host memory that both the CPU and a CUDA kernel reach (watcher words,
// completion flags), and the CUDA driver fabriclib loads at run time.
//
// Allocates `len` bytes, zeroed and 64-byte aligned, of `memory`
// (`FABRICLIB_MEMORY_*`) that the CPU reaches at `*host` and a kernel at
// `*device_ptr` (0 for plain host memory; `device_ptr` may be NULL): the
// place for completion flags and mirrored immediate counters that a kernel
// polls. Free with `fabriclib_mapped_free`. Needs no engine. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer, a zero length, or a kind
// that is not a `FABRICLIB_MEMORY_*`); `UNSUPPORTED` (CUDA-mapped memory
// without a CUDA driver); `PROVIDER` (the allocation failed).
// Blocks: briefly (an allocation; CUDA's `cuMemHostAlloc` for mapped memory).
fabriclib_status fabriclib_mapped_alloc(size_t len,
                                        fabriclib_memory memory,
                                        int32_t device,
                                        void **host,
                                        uint64_t *device_ptr);

// Frees what `fabriclib_mapped_alloc` returned (NULL is a no-op; another
// pointer is refused with `FABRICLIB_STATUS_INVALID_ARGUMENT`).
//
// Returns: `OK`; `INVALID_ARGUMENT` (a pointer `fabriclib_mapped_alloc` did
// not return, or already freed).
// Blocks: no.
fabriclib_status fabriclib_mapped_free(void *host);

// Writes the CUDA driver's version (e.g. 13000) to `*version`;
// `FABRICLIB_STATUS_UNSUPPORTED` (with why in the last error message) if
// there is no usable driver. Loads the driver on first use.
//
// Returns: `OK`; `INVALID_ARGUMENT` (`version` NULL); `UNSUPPORTED` (no CUDA
// driver: the message says why).
// Blocks: the first call loads the CUDA driver library (milliseconds); later
// calls do not.
fabriclib_status fabriclib_cuda_driver_version(int32_t *version);

// === NICs and groups ===
// The NICs an engine opened (names, NUMA nodes) and its DomainGroups: one
// worker and a set of NICs each, with an address per group and one for the engine.
//
// Writes the name of NIC `nic` (the provider's name for it, e.g.
// `"eth0"`, `"rdmap16s27-rdm"`, `"shm"`) to `*out`, and its NUMA node to
// `*numa` if not NULL (-1 where the system does not say, as in most VMs);
// the string lives as long as the engine. NICs are numbered across the
// engine, group 0's first, then group 1's, and so on (the numbering of
// `FABRICLIB_ROUTE_NIC` and `fabriclib_engine_counters`).
// `INVALID_ARGUMENT` if the engine has no NIC `nic`. Any thread.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only the lengths written);
// `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a destroyed or
// foreign engine); `INVALID_ARGUMENT` also for a NIC the engine does not have.
// Blocks: no.
fabriclib_status fabriclib_engine_nic(const struct fabriclib_engine *engine,
                                      uint32_t nic,
                                      const char **out,
                                      int32_t *numa);

// Writes whether and how NIC `nic` (numbered as `fabriclib_engine_nic`)
// takes CUDA device memory to `*out`: `FABRICLIB_DEVICE_PATH_NONE` (it does
// not: `fabriclib_mr_register_device` returns `UNSUPPORTED`), `_IPC` (the
// provider copies through CUDA IPC between processes of one host: shm),
// `_DMABUF` (the NIC reaches GPU memory, registered as a dma-buf first) or
// `_POINTER` (registered by device pointer). With `_DMABUF` a registration
// the provider refuses as a dma-buf is made by device pointer. Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a NIC the engine
// does not have.
// Blocks: no.
fabriclib_status fabriclib_engine_nic_device_memory(const struct fabriclib_engine *engine,
                                                    uint32_t nic,
                                                    fabriclib_device_path *out);

// Writes how many DomainGroups the engine has to `*out` (1 unless
// `fabriclib_config_add_group` added them). Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine).
// Blocks: no.
fabriclib_status fabriclib_engine_group_count(const struct fabriclib_engine *engine, uint32_t *out);

// Copies group `group`'s address (the same kind of blob as
// `fabriclib_engine_address`, which is group 0's): the descriptors of
// regions registered in the group carry it. Buffer rules as in
// `fabriclib_engine_address`; `INVALID_ARGUMENT` for a group the engine
// does not have. Any thread.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
// (a NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine);
// `INVALID_ARGUMENT` also for a group the engine does not have.
// Blocks: no.
fabriclib_status fabriclib_engine_group_address(const struct fabriclib_engine *engine,
                                                uint32_t group,
                                                uint8_t *buf,
                                                size_t cap,
                                                size_t *len);

// Copies every group's address, group 0's first (a "groups" blob: the
// engine's groups × NICs; `FABRICLIB_MAX_ENGINE_ADDRESS_LEN` bytes always
// fit), for a peer's `fabriclib_peer_add_engine`. Buffer rules as in
// `fabriclib_engine_address`. Any thread.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
// (a NULL pointer argument); `BAD_HANDLE` (a destroyed or foreign engine).
// Blocks: no.
fabriclib_status fabriclib_engine_groups_address(const struct fabriclib_engine *engine,
                                                 uint8_t *buf,
                                                 size_t cap,
                                                 size_t *len);

// === Diagnostics ===
// The library's version, the names of status codes, the calling thread's
// last error message, and an engine's counters per NIC and peer.
//
// The library's version, e.g. `"0.4.0"` (the header's is
// `FABRICLIB_VERSION_STRING`). Static string; never fails.
//
// Returns: the version string (static).
// Blocks: no.
const char *fabriclib_version(void);

// The library's version as one number, `FABRICLIB_VERSION_NUMBER(major,
// minor, patch)`: compare it with the header's `FABRICLIB_VERSION`.
//
// Returns: the version as a number (`FABRICLIB_VERSION_NUMBER`'s scheme).
// Blocks: no.
uint32_t fabriclib_version_number(void);

// A static, human-readable description of a status code (never NULL;
// unknown codes give "unknown status"). Takes a plain `int32_t`, so that a
// status taken from a flag word (`flag & FABRICLIB_FLAG_STATUS_MASK`) needs
// no cast in C++.
//
// Returns: a static description of `status` (an unknown code has one too).
// Blocks: no.
const char *fabriclib_status_str(int32_t status);

// The message of the last call that failed on the calling thread (empty if
// none). Successful calls do not clear it. The pointer stays valid until the
// next failing fabriclib call on this thread.
//
// Returns: the calling thread's last error message, or an empty string (valid
// until its next fabriclib call).
// Blocks: no.
const char *fabriclib_last_error_message(void);

// Reads the counters of NIC `nic` (numbered as `fabriclib_engine_nic`
// numbers them) into `*out`: its totals
// with `peer` NULL, else what it did for the peer whose engine address
// (`fabriclib_engine_address`'s blob) is `peer`/`peer_len` (zeros if
// none). The application's requests only, not the engine's own messages.
// `INVALID_ARGUMENT` for a NIC the engine does not have, a
// `struct_size` below 0.3's (48), NULL `out`; `MALFORMED` for a bad
// address. Any thread; read without stopping the worker (the counters are
// its atomics), so a manual-progress engine need not be progressed.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument); `BAD_HANDLE` (a
// destroyed or foreign engine); `INVALID_ARGUMENT` also for a NIC the engine
// does not have or a `struct_size` below this version's; `MALFORMED` (a
// `peer` address that does not parse); `SHUTDOWN`.
// Blocks: no.
fabriclib_status fabriclib_engine_counters(const struct fabriclib_engine *engine,
                                           uint32_t nic,
                                           const uint8_t *peer,
                                           size_t peer_len,
                                           struct fabriclib_counters *out);

// Sends fabriclib's own messages — a callback that panicked, a receive
// buffer that could not be reposted, a call refused where no status can
// say so — to `callback(user_data, level, message)` (`level` a
// `FABRICLIB_LOG_LEVEL_*`) instead of standard error; `callback` NULL: back to
// standard error (each message prefixed `fabriclib: `). Process-wide, for
// every engine, from the next message on; `user_data` must stay valid until
// another call replaces it. Errors of calls are not logged: they are
// returned (`fabriclib_last_error_message`).
//
// Returns: `OK`.
// Blocks: until a message being delivered to the old callback has been
// handed over (not until it returns).
fabriclib_status fabriclib_set_log_callback(fabriclib_log_cb callback, void *user_data);

// Writes what the engine can do into `*caps`: its limits (the largest
// write per work request, the largest message, the most receive buffers
// per pool), its NIC and group counts, whether its NICs register device
// memory and whether requests may ask for confirmed delivery. Paged writes
// take any number of pages (the index arrays are copied). The provider's
// name: `fabriclib_engine_provider`; each NIC: `fabriclib_engine_nic`.
// Any thread.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument, or a
// `struct_size` below this version's); `BAD_HANDLE` (a destroyed or foreign
// engine).
// Blocks: no.
fabriclib_status fabriclib_engine_caps(const struct fabriclib_engine *engine,
                                       struct fabriclib_caps *caps);

// === Metrics ===
// Always-on counters and histograms, read without stopping the engine:
// per NIC and peer (`fabriclib_engine_counters`), per engine or group
// (`fabriclib_engine_metrics`), and everything as JSON or Prometheus text
// with `group`, `nic` and `peer` labels (`fabriclib_engine_metrics_text`).
//
// Reads group `group`'s metrics (`FABRICLIB_ALL_GROUPS`: every group's
// added up) into `*out`; the watcher's are the engine's whichever group is
// read. Any thread; it reads the counters as they are and never waits.
//
// Returns: `OK`; `INVALID_ARGUMENT` (a NULL pointer argument, a
// `struct_size` below this version's, a group the engine does not have);
// `BAD_HANDLE` (a destroyed or foreign engine).
// Blocks: no.
fabriclib_status fabriclib_engine_metrics(const struct fabriclib_engine *engine,
                                          uint32_t group,
                                          struct fabriclib_metrics *out);

// Writes every metric of the engine as text into `buf` of `cap` bytes,
// NUL-terminated, and its length with the NUL into `*len`: `format`
// `FABRICLIB_METRICS_JSON` (one object: groups, their NICs and peers,
// histograms with p50/p99) or `FABRICLIB_METRICS_PROMETHEUS` (text
// exposition 0.0.4, series `fabriclib_*` with `group`, `nic` and `peer`
// labels; docs/metrics.md lists them and maps vLLM's NIXL series onto
// them). If `cap` is too small (or `buf` is NULL), only `*len` is written
// and `FABRICLIB_STATUS_BUFFER_TOO_SMALL` returned: call again with that
// much (a little more: the counters move). Any thread.
//
// Returns: `OK`; `BUFFER_TOO_SMALL` (only `*len` written); `INVALID_ARGUMENT`
// (a NULL `len`, an unknown `format`); `BAD_HANDLE` (a destroyed or foreign
// engine).
// Blocks: no.
fabriclib_status fabriclib_engine_metrics_text(const struct fabriclib_engine *engine,
                                               uint32_t format,
                                               char *buf,
                                               size_t cap,
                                               size_t *len);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* FABRICLIB_H */
