//! Errors and status codes. `Status` is declared here once: the C header's
//! `enum fabriclib_status` (`FABRICLIB_STATUS_*`, with these doc comments) is
//! generated from it, `as_str` is an exhaustive match, and tests/header.rs
//! checks that `Status::ALL` lists exactly the header's enumerators, in code
//! order. The numeric codes are ABI: keep them stable, add new ones at the end.
use std::fmt;

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
    /// The request was canceled (`fabriclib_cancel`, `fabriclib_cancel_peer`); its buffers are free again.
    Canceled = 13,
    /// The request's deadline passed before it completed; its buffers are free again.
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

impl Status {
    /// Every status, in code order (codes are 0..N without gaps).
    pub const ALL: [Status; 20] = [
        Status::Ok,
        Status::Again,
        Status::InvalidArgument,
        Status::OutOfBounds,
        Status::BadHandle,
        Status::Malformed,
        Status::AlreadyExists,
        Status::Provider,
        Status::Unsupported,
        Status::Shutdown,
        Status::Panic,
        Status::BufferTooSmall,
        Status::Truncated,
        Status::Canceled,
        Status::TimedOut,
        Status::PeerDown,
        Status::Stale,
        Status::RemoteAccess,
        Status::LocalAccess,
        Status::NotFound,
    ];

    /// A short static description.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Again => "try again: queue full",
            Status::InvalidArgument => "invalid argument",
            Status::OutOfBounds => "out of bounds of a registered region",
            Status::BadHandle => "bad handle (destroyed, foreign or not a fabriclib handle)",
            Status::Malformed => "malformed serialized address or descriptor",
            Status::AlreadyExists => "already exists",
            Status::Provider => "provider (libfabric) error",
            Status::Unsupported => "unsupported",
            Status::Shutdown => "engine shut down",
            Status::Panic => "internal panic caught at the C boundary",
            Status::BufferTooSmall => "buffer too small",
            Status::Truncated => "message truncated: receive buffer too small",
            Status::Canceled => "canceled",
            Status::TimedOut => "timed out",
            Status::PeerDown => "peer down or unreachable",
            Status::Stale => "stale: the peer engine restarted since this descriptor was made",
            Status::RemoteAccess => "remote access error",
            Status::LocalAccess => "local access error",
            Status::NotFound => "no such request (or it has already ended)",
        }
    }

    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.iter().copied().find(|s| *s as i32 == code)
    }
}

/// An error: a status plus a human-readable message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.as_str(), self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand for `Err(Error::new(status, format!(...)))`.
#[macro_export]
macro_rules! bail {
    ($status:ident, $($fmt:tt)+) => {
        return Err($crate::error::Error::new($crate::error::Status::$status, format!($($fmt)+)))
    };
}
