//! The status codes of every fabriclib call and request: `Status` alone, the
//! source of the C header's `enum fabriclib_status` (`FABRICLIB_STATUS_*`,
//! with these doc comments). The header is generated from `src/capi/` and
//! this file only (build.rs), so nothing else of the crate can reach it.
//! The numeric codes are ABI: keep them stable, add new ones at the end.
//! `Status::ALL`, `as_str` and the `Error` type are in error.rs.

/// Why an operation failed (or could not be started).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// Not an error: a queue is full right now; try again later.
    Again = 1,
    /// A required pointer was NULL, a length or count was zero, or an argument is out of its range.
    InvalidArgument = 2,
    /// An offset, length or page index falls outside a registered region (local or remote).
    OutOfBounds = 3,
    /// A handle was destroyed, belongs to another engine, or is not a fabriclib handle.
    BadHandle = 4,
    /// A serialized address or descriptor is truncated, corrupt or of an unknown version.
    Malformed = 5,
    /// The thing already exists (for example a second expectation on one immediate).
    AlreadyExists = 6,
    /// The provider (libfabric, the NIC) reported an error; the error message has the details.
    Provider = 7,
    /// The configuration or the provider does not support this.
    Unsupported = 8,
    /// The engine is shutting down or has shut down; the request did not complete.
    Shutdown = 9,
    /// A Rust panic was caught at the C boundary (a bug in fabriclib: please report it).
    Panic = 10,
    /// An output buffer is too small; the required size was written to the length out-pointer.
    BufferTooSmall = 11,
    /// A received message did not fit the receive buffer.
    Truncated = 12,
    /// The request was canceled (`fabriclib_cancel`, `fabriclib_cancel_peer`,
    /// `fabriclib_peer_remove`; a receive pool's last call after
    /// `fabriclib_recv_pool_remove`); its buffers are free again.
    Canceled = 13,
    /// The request's deadline passed before it completed (its buffers are
    /// free again), or a wait's timeout passed first (`fabriclib_flag_await`).
    TimedOut = 14,
    /// The peer is dead or unreachable (provider error, missed keepalives, or it shut down).
    PeerDown = 15,
    /// A descriptor or address from an engine that has since restarted (another epoch).
    Stale = 16,
    /// The peer refused the access (bad key, protection or bounds error on the remote side).
    RemoteAccess = 17,
    /// The provider refused a local buffer or descriptor (local protection or length error).
    LocalAccess = 18,
    /// No such request, or it has already ended (`fabriclib_cancel`); no such peer, or not failed.
    NotFound = 19,
}
