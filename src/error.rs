//! Errors and status codes. `Status` is declared once, in status.rs (the
//! C header's `enum fabriclib_status` is generated from it); here are its
//! list (`Status::ALL`: tests/header.rs checks it is exactly the header's
//! enumerators, in code order), its names (`as_str`, an exhaustive match)
//! and the `Error` it travels in.
use std::fmt;

pub use crate::status::Status;

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
            Status::NotFound => "not found: no such request (or it has ended), or a peer never in contact",
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
