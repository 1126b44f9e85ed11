"""One exception type per ``fabriclib_status``, all deriving from ``FabricError``."""

from __future__ import annotations


class FabricError(Exception):
    """A fabriclib call or request failed: ``status`` (the C code), ``message`` (the engine's)."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


def _make(name: str, code: int, doc: str) -> type[FabricError]:
    return type(name, (FabricError,), {"status": code, "__doc__": doc})


Again = _make("Again", 1, "A queue is full right now (max_inflight, the submit queue); try again later.")
InvalidArgument = _make("InvalidArgument", 2, "A NULL, zero or out-of-range argument.")
OutOfBounds = _make("OutOfBounds", 3, "An offset, length or page falls outside a registered region.")
BadHandle = _make("BadHandle", 4, "A destroyed or foreign handle.")
Malformed = _make("Malformed", 5, "A serialized address or descriptor is corrupt or of an unknown version.")
AlreadyExists = _make("AlreadyExists", 6, "The thing already exists (a second expectation on one immediate).")
ProviderError = _make("ProviderError", 7, "libfabric, libibverbs or the NIC reported an error.")
Unsupported = _make("Unsupported", 8, "The configuration, provider or machine does not support this.")
Shutdown = _make("Shutdown", 9, "The engine is shutting down; the request did not complete.")
Panic = _make("Panic", 10, "A bug in fabriclib, caught at the C boundary.")
BufferTooSmall = _make("BufferTooSmall", 11, "An output buffer is too small.")
Truncated = _make("Truncated", 12, "A received message did not fit its buffer.")
Canceled = _make("Canceled", 13, "The request was canceled; its buffers are free again.")
TimedOut = _make("TimedOut", 14, "The request's deadline (or a wait's timeout) passed first.")
PeerDown = _make("PeerDown", 15, "The peer is down or unreachable.")
Stale = _make("Stale", 16, "The peer engine restarted since this descriptor was made.")
RemoteAccess = _make("RemoteAccess", 17, "The remote side refused the access (key, bounds, permissions).")
LocalAccess = _make("LocalAccess", 18, "The local buffer could not be accessed.")
NotFound = _make("NotFound", 19, "No such request, pool or peer.")

BY_STATUS: dict[int, type[FabricError]] = {
    c.status: c
    for c in (
        Again, InvalidArgument, OutOfBounds, BadHandle, Malformed, AlreadyExists, ProviderError, Unsupported,
        Shutdown, Panic, BufferTooSmall, Truncated, Canceled, TimedOut, PeerDown, Stale, RemoteAccess,
        LocalAccess, NotFound,
    )
}


def error(status: int, message: str) -> FabricError:
    """The exception for ``status`` carrying ``message``."""
    return BY_STATUS.get(status, FabricError)(message, status)
