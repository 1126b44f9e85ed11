"""The engine, its memory regions and requests, over the C ABI (``fabriclib.h``).

Requests report through a completion flag word the engine stores (never a
Python callback on an engine thread): ``Request.wait`` sleeps on it in
``fabriclib_flag_await`` with the GIL released, ``await request`` waits on
the engine's event fd in the running asyncio loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import queue
import threading
from ctypes import POINTER, byref, c_bool, c_char_p, c_int32, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from . import _lib as L
from .errors import FabricError, TimedOut, error

lib = L.lib
_U8P = POINTER(c_uint8)


def _check(st: int) -> None:
    if st != L.STATUS_OK:
        raise error(st, (lib.fabriclib_last_error_message() or b"").decode(errors="replace"))


def _blob(fn: Callable[..., int], *head: Any) -> bytes:
    """Calls a ``(…, buf, cap, len)`` function twice if needed and returns the bytes."""
    n = c_size_t(0)
    st = fn(*head, None, 0, byref(n))
    if st != L.STATUS_BUFFER_TOO_SMALL:
        _check(st)
    buf = (c_uint8 * n.value)()
    _check(fn(*head, buf, n.value, byref(n)))
    return bytes(buf[: n.value])


def _u8(b: bytes) -> Any:
    return ctypes.cast(c_char_p(b), _U8P)


class Region:
    """A registered local memory region (``fabriclib_mr``). Keeps the buffer
    it was made from alive; deregistered by ``close`` or when collected (the
    engine keeps it registered until requests reading it have ended)."""

    def __init__(self, engine: "Engine", handle: int, ptr: int, length: int, keep: Any) -> None:
        self._engine, self._h, self.ptr, self.length, self._keep = engine, c_void_p(handle), ptr, length, keep

    def descriptor(self) -> bytes:
        """The region's descriptor, to hand to peers (``fabriclib_mr_descriptor``)."""
        return _blob(lib.fabriclib_mr_descriptor, self._h)

    def close(self) -> None:
        if self._h:
            lib.fabriclib_mr_deregister(self._h)
            self._h = c_void_p(None)

    def __del__(self) -> None:
        self.close()


class Remote:
    """A peer's region, parsed from its descriptor bytes (``fabriclib_remote_mr``)."""

    def __init__(self, descriptor: bytes) -> None:
        self._h = c_void_p()
        self.descriptor = bytes(descriptor)
        _check(lib.fabriclib_remote_mr_parse(_u8(self.descriptor), len(self.descriptor), byref(self._h)))

    def __del__(self) -> None:
        if getattr(self, "_h", None):
            lib.fabriclib_remote_mr_free(self._h)
            self._h = c_void_p(None)


RemoteLike = Union[Remote, bytes]


class Request:
    """A submitted request: ``wait(timeout)``, ``done()``, ``error``, ``id``,
    ``cancel()``, and ``await request`` in asyncio. Failures raise the
    status's exception (``fabriclib.errors``) with the engine's message."""

    __slots__ = ("_engine", "_slot", "_keep", "id", "_value", "__weakref__")

    def __init__(self, engine: "Engine", slot: int, keep: Any) -> None:
        self._engine, self._slot, self._keep, self.id, self._value = engine, slot, keep, 0, 0

    def _flag(self) -> int:
        if not self._value:
            v = self._engine._flags.value(self._slot)
            if v & L.FLAG_DONE:
                self._value = v
                self._keep = None
        return self._value

    def done(self) -> bool:
        """Whether the request has ended (without waiting)."""
        return bool(self._flag())

    @property
    def status(self) -> Optional[int]:
        """The request's status once it has ended (0: OK), else None."""
        v = self._flag()
        return (v & L.FLAG_STATUS_MASK) if v else None

    @property
    def error(self) -> Optional[FabricError]:
        """The exception the request ended with (None while running or if it succeeded)."""
        st = self.status
        if not st:
            return None
        status, msg, n = c_int32(st), ctypes.create_string_buffer(1024), c_size_t(0)
        r = lib.fabriclib_request_error(self._engine._h, self.id, byref(status), msg, 1024, byref(n))
        text = msg.value.decode(errors="replace") if r == L.STATUS_OK else lib.fabriclib_status_str(st).decode()
        return error(st, text)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Sleeps (GIL released) until the request ends; raises its error, or
        ``TimedOut`` if ``timeout`` seconds pass first (the request goes on)."""
        if not self._flag():
            us = L.NO_TIMEOUT if timeout is None else max(0, int(timeout * 1e6))
            ptr = self._engine._flags.ptr(self._slot)
            if self._engine._manual:
                st = lib.fabriclib_engine_flag_await(self._engine._h, ptr, us, None)
            else:
                st = lib.fabriclib_flag_await(ptr, us, None)
            if st == TimedOut.status:
                raise TimedOut(f"request {self.id} still running after {timeout} s")
            _check(st)
        err = self.error
        if err is not None:
            raise err

    def cancel(self) -> None:
        """Cancels the request (it ends ``Canceled`` unless it ended first)."""
        _check(lib.fabriclib_cancel(self._engine._h, self.id))

    def __await__(self) -> Any:
        return self._engine._future(self).__await__()

    def __del__(self) -> None:
        try:
            self._engine._flags.release(self._slot, bool(self._flag()))
        except Exception:
            pass


class _Flags:
    """Completion flag words in chunks of 4096, reused once their request has
    ended and its ``Request`` is gone (a word the engine may still store to
    is never handed out again)."""

    CHUNK = 4096

    def __init__(self) -> None:
        self._chunks: list[Any] = []
        self._bases: list[int] = []
        self._views: list[memoryview] = []
        self._free: list[int] = []
        self._orphans: list[int] = []
        self._lock = threading.Lock()

    def take(self) -> int:
        try:
            s = self._free.pop()  # atomic under the GIL: the common case takes no lock
        except IndexError:
            s = self._refill()
        self._views[s // self.CHUNK][s % self.CHUNK] = 0
        return s

    def _refill(self) -> int:
        while True:
            try:
                return self._grow()
            except IndexError:  # another thread took what was added
                continue

    def _grow(self) -> int:
        with self._lock:
            if not self._free and self._orphans:
                still = []
                for s in self._orphans:
                    (self._free if self.value(s) & L.FLAG_DONE else still).append(s)
                self._orphans = still
            if not self._free:
                base = len(self._chunks) * self.CHUNK
                arr = (c_uint32 * self.CHUNK)()
                self._chunks.append(arr)
                self._bases.append(ctypes.addressof(arr))
                self._views.append(memoryview(arr).cast("B").cast("I"))
                self._free.extend(range(base + self.CHUNK - 1, base - 1, -1))
            return self._free.pop()

    def value(self, s: int) -> int:
        return self._views[s // self.CHUNK][s % self.CHUNK]

    def addr(self, s: int) -> int:
        return self._bases[s // self.CHUNK] + 4 * (s % self.CHUNK)

    def ptr(self, s: int) -> Any:
        return ctypes.cast(self.addr(s), POINTER(c_uint32))

    def release(self, s: int, done: bool) -> None:
        if done:
            self._free.append(s)
        else:
            with self._lock:
                self._orphans.append(s)


class _Local(threading.local):
    def __init__(self) -> None:
        self.opts = L.SubmitOpts(struct_size=ctypes.sizeof(L.SubmitOpts))
        self.opts_p = ctypes.pointer(self.opts)
        self.rid = c_uint64(0)
        self.rid_p = ctypes.pointer(self.rid)
        self.imm = c_uint32(0)
        self.imm_p = ctypes.pointer(self.imm)
        # Whether `opts` holds anything but the defaults (reset on the next plain submit).
        self.custom = False


def _buffer(obj: Any) -> tuple[int, int, Any, Optional[int]]:
    """(address, length, what keeps it alive, CUDA device or None) of a buffer,
    a ``__cuda_array_interface__`` object or a DLPack device tensor."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        shape, strides = cai["shape"], cai.get("strides")
        itemsize = int(cai["typestr"][2:])
        n = itemsize
        for d in shape:
            n *= d
        if strides is not None:
            want, expect = list(strides), []
            acc = itemsize
            for d in reversed(shape):
                expect.insert(0, acc)
                acc *= d
            if want != expect:
                raise ValueError("a CUDA array must be contiguous to be registered")
        device = 0
        if hasattr(obj, "__dlpack_device__"):
            device = int(obj.__dlpack_device__()[1])
        elif hasattr(obj, "device") and getattr(obj.device, "index", None) is not None:
            device = int(obj.device.index)
        return int(cai["data"][0]), n, obj, device
    mv = memoryview(obj)
    if mv.readonly:
        raise ValueError("a region needs a writable buffer (bytearray, numpy array, mmap), not a read-only one")
    if not mv.c_contiguous:
        raise ValueError("a region needs a contiguous buffer")
    flat = mv.cast("B")
    arr = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return ctypes.addressof(arr), flat.nbytes, (obj, flat, arr), None


class RecvPool:
    """Received messages of a receive pool (``Engine.recv_pool``): ``get(timeout)``
    returns ``(bytes, sender_address)``."""

    def __init__(self, engine: "Engine", length: int, count: int) -> None:
        self._q: "queue.Queue[tuple[int, bytes, bytes]]" = queue.Queue()

        def on_message(_ud: Any, st: int, msg: Any) -> None:
            m = msg.contents if msg else None
            data = ctypes.string_at(m.data, m.len) if m and m.data else b""
            sender = ctypes.string_at(m.from_, m.from_len) if m and m.from_ else b""
            self._q.put((st, data, sender))

        self._cb = L.message_cb(on_message)
        self.id = c_uint64(0)
        self._engine = engine
        _check(lib.fabriclib_recv_pool_add(engine._h, length, count, self._cb, None, byref(self.id)))

    def get(self, timeout: Optional[float] = None) -> tuple[bytes, bytes]:
        """The next message and its sender's address; raises its error (a
        removed pool's last call raises ``Canceled``)."""
        try:
            st, data, sender = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimedOut(f"no message within {timeout} s") from None
        if st:
            raise error(st, f"receive: {lib.fabriclib_status_str(st).decode()}")
        return data, sender

    def remove(self) -> None:
        _check(lib.fabriclib_recv_pool_remove(self._engine._h, self.id.value))


class Watcher:
    """A watched 64-bit word (``Engine.watch``): ``callback(old, new)`` runs on
    the engine's watcher thread (it takes the GIL: keep it short). ``store``
    writes the word from Python; ``address`` is its host address."""

    def __init__(self, engine: "Engine", callback: Callable[[int, int], None]) -> None:
        self._cb = L.watcher_cb(lambda _ud, old, new: callback(old, new))
        opts = L.WatcherOpts(struct_size=ctypes.sizeof(L.WatcherOpts), callback=self._cb, memory=L.MEMORY_HOST)
        self._h = c_void_p()
        _check(lib.fabriclib_watcher_create(engine._h, byref(opts), byref(self._h)))
        p = POINTER(c_uint64)()
        _check(lib.fabriclib_watcher_host_ptr(self._h, byref(p)))
        self._word = p
        self.address = ctypes.cast(p, c_void_p).value

    def store(self, value: int) -> None:
        self._word[0] = value

    def close(self) -> None:
        if self._h:
            lib.fabriclib_watcher_destroy(self._h)
            self._h = c_void_p(None)

    def __del__(self) -> None:
        self.close()


class Engine:
    """A transfer engine (``fabriclib_engine``). Keyword arguments configure
    it: ``provider`` ("tcp;ofi_rxm", "shm", "verbs"…), ``bind_address``,
    ``nics`` (comma-separated names), ``nic_count``, ``request_timeout``
    (seconds), ``max_inflight``, ``idle_policy`` ("spin", "auto", "block"),
    ``manual_progress``, ``keepalive`` ((interval, peer timeout) in seconds).
    Use it as a context manager, or ``close()`` it."""

    def __init__(self, **config: Any) -> None:
        cfg = c_void_p()
        _check(lib.fabriclib_config_new(byref(cfg)))
        try:
            for k, v in config.items():
                self._set(cfg, k, v)
            self._h = c_void_p()
            _check(lib.fabriclib_engine_create(cfg, byref(self._h)))
        finally:
            lib.fabriclib_config_free(cfg)
        self._manual = bool(config.get("manual_progress", False))
        self._flags = _Flags()
        self._tls = _Local()
        self._remotes: dict[bytes, Remote] = {}
        self._waiting: dict[Any, list[tuple[Request, "asyncio.Future[None]"]]] = {}
        self._fd = -1
        self.address: bytes = _blob(lib.fabriclib_engine_address, self._h)
        p = c_char_p()
        _check(lib.fabriclib_engine_provider(self._h, byref(p)))
        self.provider: str = (p.value or b"").decode()

    @staticmethod
    def _set(cfg: c_void_p, k: str, v: Any) -> None:
        s = lambda x: str(x).encode()  # noqa: E731
        if k == "provider":
            _check(lib.fabriclib_config_set_provider(cfg, s(v)))
        elif k == "bind_address":
            _check(lib.fabriclib_config_set_bind_address(cfg, s(v)))
        elif k == "nics":
            _check(lib.fabriclib_config_set_nics(cfg, s(v if isinstance(v, str) else ",".join(v))))
        elif k == "nic_count":
            _check(lib.fabriclib_config_set_nic_count(cfg, int(v)))
        elif k == "request_timeout":
            _check(lib.fabriclib_config_set_request_timeout(cfg, L.NO_TIMEOUT if v is None else int(v * 1e6)))
        elif k == "max_inflight":
            _check(lib.fabriclib_config_set_max_inflight(cfg, int(v)))
        elif k == "idle_policy":
            _check(lib.fabriclib_config_set_idle_policy(cfg, {"spin": 0, "auto": 1, "block": 2}[v]))
        elif k == "manual_progress":
            _check(lib.fabriclib_config_set_manual_progress(cfg, bool(v)))
        elif k == "keepalive":
            _check(lib.fabriclib_config_set_keepalive_us(cfg, int(v[0] * 1e6), int(v[1] * 1e6)))
        else:
            raise TypeError(f"Engine: unknown setting {k!r}")

    # --- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Destroys the engine: requests still running end ``Shutdown``."""
        if getattr(self, "_h", None):
            for loop in list(self._waiting):
                try:
                    loop.remove_reader(self._fd)
                except Exception:
                    pass
            lib.fabriclib_engine_destroy(self._h)
            self._h = c_void_p(None)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # --- memory -------------------------------------------------------------
    def register(self, buffer: Any) -> Region:
        """Registers a writable buffer (bytearray, numpy array, mmap…) or a CUDA
        array (``__cuda_array_interface__``: torch tensors, CuPy; device memory
        registration) and returns its ``Region``."""
        ptr, n, keep, device = _buffer(buffer)
        h = c_void_p()
        if device is None:
            _check(lib.fabriclib_mr_register(self._h, ptr, n, byref(h)))
        else:
            _check(lib.fabriclib_mr_register_device(self._h, ptr, n, device, byref(h)))
        return Region(self, h.value or 0, ptr, n, keep)

    def remote(self, descriptor: RemoteLike) -> Remote:
        """A peer's region from its descriptor bytes (cached per descriptor)."""
        if isinstance(descriptor, Remote):
            return descriptor
        r = self._remotes.get(descriptor)
        if r is None:
            r = self._remotes[descriptor] = Remote(descriptor)
        return r

    # --- submitting -----------------------------------------------------------
    def _opts(self, slot: int, timeout: Optional[float], nic: Optional[int], delivered: bool) -> Any:
        t = self._tls
        o = t.opts
        o.flag = self._flags.addr(slot)
        if timeout is not None or nic is not None or delivered or t.custom:
            o.timeout_us = 0 if timeout is None else (L.NO_TIMEOUT if timeout == float("inf") else int(timeout * 1e6))
            o.route, o.nic = (L.ROUTE_SHARD, 0) if nic is None else (L.ROUTE_NIC, nic)
            o.flags = L.SUBMIT_DELIVERED if delivered else 0
            t.custom = timeout is not None or nic is not None or delivered
        return t.opts_p

    def _imm(self, imm: Optional[int]) -> Any:
        if imm is None:
            return None
        self._tls.imm.value = imm
        return self._tls.imm_p

    def _submit(self, fn: Callable[..., int], keep: Any, timeout: Optional[float], nic: Optional[int],
                delivered: bool, *args: Any) -> Request:
        slot = self._flags.take()
        req = Request(self, slot, keep)
        st = fn(self._h, *args, self._opts(slot, timeout, nic, delivered), self._tls.rid_p)
        if st != L.STATUS_OK:
            req._value = L.FLAG_DONE | st
            _check(st)
        req.id = self._tls.rid.value
        return req

    def write(self, src: Region, dst: RemoteLike, length: int, *, src_offset: int = 0, dst_offset: int = 0,
              imm: Optional[int] = None, timeout: Optional[float] = None, nic: Optional[int] = None,
              delivered: bool = False) -> Request:
        """One write of ``length`` bytes (``fabriclib_submit_single_write``)."""
        r = self.remote(dst)
        return self._submit(lib.fabriclib_submit_single_write, (src, r), timeout, nic, delivered,
                            length, self._imm(imm), src._h, src_offset, r._h, dst_offset)

    def write_pages(self, src: Region, src_pages: Iterable[int], dst: RemoteLike, dst_pages: Iterable[int],
                    page_len: int, *, src_stride: Optional[int] = None, dst_stride: Optional[int] = None,
                    src_offset: int = 0, dst_offset: int = 0, imm: Optional[int] = None,
                    timeout: Optional[float] = None, nic: Optional[int] = None, delivered: bool = False) -> Request:
        """Page ``src_pages[k]`` of ``src`` to page ``dst_pages[k]`` of ``dst``
        (``fabriclib_submit_paged_writes``); one immediate per page."""
        r = self.remote(dst)
        si, di = _u32s(src_pages), _u32s(dst_pages)
        sp = L.Pages(si, len(si), src_stride or page_len, src_offset)
        dp = L.Pages(di, len(di), dst_stride or page_len, dst_offset)
        return self._submit(lib.fabriclib_submit_paged_writes, (src, r), timeout, nic, delivered,
                            page_len, self._imm(imm), src._h, byref(sp), r._h, byref(dp))

    def scatter(self, src: Region, dsts: Iterable[tuple[RemoteLike, int, int, int]], *, imm: Optional[int] = None,
                peer_set: int = 0, timeout: Optional[float] = None, delivered: bool = False) -> Request:
        """Writes ``(dst, length, src_offset, dst_offset)`` items from ``src``
        (``fabriclib_submit_scatter``)."""
        items = [(self.remote(d), n, so, do) for d, n, so, do in dsts]
        arr = (L.ScatterDst * len(items))(*[L.ScatterDst(n, so, r._h.value, do) for r, n, so, do in items])
        return self._submit(lib.fabriclib_submit_scatter, (src, items, arr), timeout, None, delivered,
                            peer_set, self._imm(imm), src._h, arr, len(items))

    def barrier(self, imm: int, dsts: Sequence[RemoteLike], *, peer_set: int = 0,
                timeout: Optional[float] = None, delivered: bool = False) -> Request:
        """A zero-byte write with ``imm`` to each destination (``fabriclib_submit_barrier``)."""
        rs = [self.remote(d) for d in dsts]
        arr = (c_void_p * len(rs))(*[r._h.value for r in rs])
        return self._submit(lib.fabriclib_submit_barrier, (rs, arr), timeout, None, delivered,
                            peer_set, imm, arr, len(rs))

    def send(self, address: bytes, message: bytes, *, timeout: Optional[float] = None) -> Request:
        """Sends ``message`` to the engine at ``address`` (``fabriclib_submit_send``)."""
        return self._submit(lib.fabriclib_submit_send, (address, message), timeout, None, False,
                            _u8(address), len(address), message, len(message))

    def recv_pool(self, length: int, count: int) -> RecvPool:
        """A receive pool of ``count`` buffers of ``length`` bytes."""
        return RecvPool(self, length, count)

    # --- immediates -----------------------------------------------------------
    def expect(self, imm: int, count: int, *, timeout: Optional[float] = None) -> Request:
        """A request that ends once ``count`` immediates ``imm`` have arrived
        (``fabriclib_expect_imm_count``)."""
        return self._submit(lib.fabriclib_expect_imm_count, None, timeout, None, False, imm, count)

    def imm_count(self, imm: int, *, reset: bool = False) -> int:
        """Immediates ``imm`` counted and not taken by an expectation."""
        n = c_uint64(0)
        fn = lib.fabriclib_imm_count_reset if reset else lib.fabriclib_imm_count_get
        _check(fn(self._h, imm, byref(n)))
        return n.value

    def mirror(self, imm: int, word: Any) -> None:
        """Mirrors immediate ``imm``'s count into the 8-byte ``word`` (a ctypes
        ``c_uint64`` the caller keeps alive; None stops it)."""
        _check(lib.fabriclib_imm_mirror(self._h, imm, None if word is None else byref(word)))

    # --- peers ------------------------------------------------------------------
    def connect(self, address: bytes, *, timeout: Optional[float] = None) -> Request:
        """Adds the peer at ``address`` and connects (``fabriclib_peer_add``)."""
        return self._submit(lib.fabriclib_peer_add, address, timeout, None, False, _u8(address), len(address))

    def remove_peer(self, address: bytes) -> int:
        """Removes a peer: its requests end ``Canceled``; returns how many."""
        n = c_size_t(0)
        _check(lib.fabriclib_peer_remove(self._h, _u8(address), len(address), byref(n)))
        return n.value

    def cancel_peer(self, address: bytes) -> int:
        """Cancels every request to a peer; returns how many."""
        n = c_size_t(0)
        _check(lib.fabriclib_cancel_peer(self._h, _u8(address), len(address), byref(n)))
        return n.value

    def peer_state(self, address: bytes) -> str:
        """"connecting", "up" or "down"."""
        s = c_int32(0)
        _check(lib.fabriclib_peer_state(self._h, _u8(address), len(address), byref(s)))
        return ("connecting", "up", "down")[s.value]

    def peer_set(self, addresses: Sequence[bytes]) -> int:
        """A peer set for scatter and barrier (``fabriclib_add_peer_set``); its id."""
        bufs = [(c_uint8 * len(a)).from_buffer_copy(a) for a in addresses]
        ptrs = (_U8P * len(bufs))(*[ctypes.cast(b, _U8P) for b in bufs])
        lens = (c_size_t * len(bufs))(*[len(a) for a in addresses])
        out = c_uint64(0)
        _check(lib.fabriclib_add_peer_set(self._h, ptrs, lens, len(bufs), byref(out)))
        return out.value

    def watch(self, callback: Callable[[int, int], None]) -> Watcher:
        """A watched word whose changes call ``callback(old, new)``."""
        return Watcher(self, callback)

    def progress(self) -> bool:
        """Progresses a manual-progress engine once; whether anything happened."""
        b = c_bool(False)
        _check(lib.fabriclib_engine_progress(self._h, byref(b)))
        return b.value

    # --- metrics ------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """Every metric as a dict (the JSON of ``fabriclib_engine_metrics_text``)."""
        return json.loads(self.metrics_text("json"))

    def metrics_text(self, fmt: str = "prometheus") -> str:
        """Every metric as Prometheus text (``fmt="prometheus"``) or JSON."""
        f = {"json": L.METRICS_JSON, "prometheus": L.METRICS_PROMETHEUS}[fmt]
        n = c_size_t(0)
        st = lib.fabriclib_engine_metrics_text(self._h, f, None, 0, byref(n))
        while True:
            buf = ctypes.create_string_buffer(n.value + 4096)
            st = lib.fabriclib_engine_metrics_text(self._h, f, buf, len(buf), byref(n))
            if st != L.STATUS_BUFFER_TOO_SMALL:
                _check(st)
                return buf.value.decode()

    # --- asyncio ------------------------------------------------------------------
    def _future(self, req: Request) -> "asyncio.Future[None]":
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self._fd < 0:
            fd = c_int32(-1)
            _check(lib.fabriclib_engine_event_fd(self._h, byref(fd)))
            self._fd = fd.value
        waiting = self._waiting.get(loop)
        if waiting is None:
            waiting = self._waiting[loop] = []
            loop.add_reader(self._fd, self._on_event, loop)
        waiting.append((req, fut))
        self._settle(loop)
        return fut

    def _on_event(self, loop: Any) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass
        self._settle(loop)

    def _settle(self, loop: Any) -> None:
        still = []
        for req, fut in self._waiting.get(loop, []):
            if fut.done():
                continue
            if req.done():
                e = req.error
                if e is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(e)
            else:
                still.append((req, fut))
        if still:
            self._waiting[loop] = still
        elif loop in self._waiting:
            del self._waiting[loop]
            loop.remove_reader(self._fd)


def _u32s(xs: Iterable[int]) -> Any:
    """Page indices as a uint32 array (numpy uint32 arrays are copied as they are)."""
    if isinstance(xs, memoryview) or hasattr(xs, "__array_interface__"):
        mv = memoryview(xs)  # type: ignore[arg-type]
        if mv.format in ("I", "=I", "<I") and mv.c_contiguous:
            return (c_uint32 * len(mv)).from_buffer_copy(mv)
    xs = xs if isinstance(xs, (list, tuple, range)) else list(xs)
    return (c_uint32 * len(xs))(*xs)
