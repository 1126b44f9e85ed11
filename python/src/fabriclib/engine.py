"""The engine, its memory regions and requests, over the C ABI (``fabriclib.h``).

Requests report through a completion flag word the engine stores (never a
Python callback on an engine thread): ``Request.wait`` sleeps on it in
``fabriclib_flag_await`` with the GIL released, ``await request`` waits on
the engine's event fd in the running asyncio loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from ._lib import ffi, lib
from .errors import FabricError, TimedOut, error

OK = lib.FABRICLIB_STATUS_OK
TOO_SMALL = lib.FABRICLIB_STATUS_BUFFER_TOO_SMALL
FLAG_DONE = lib.FABRICLIB_FLAG_DONE
STATUS_MASK = lib.FABRICLIB_FLAG_STATUS_MASK
NO_TIMEOUT = lib.FABRICLIB_NO_TIMEOUT
NULL = ffi.NULL
_single_write = lib.fabriclib_submit_single_write


def _check(st: int) -> None:
    if st != OK:
        raise error(st, _last_error())


def _last_error() -> str:
    p = lib.fabriclib_last_error_message()
    return ffi.string(p).decode(errors="replace") if p != NULL else ""


def _blob(fn: Callable[..., int], *head: Any) -> bytes:
    """Calls a ``(…, buf, cap, len)`` function twice if needed and returns the bytes."""
    n = ffi.new("size_t *")
    st = fn(*head, NULL, 0, n)
    if st != TOO_SMALL:
        _check(st)
    buf = ffi.new("uint8_t[]", n[0])
    _check(fn(*head, buf, n[0], n))
    return ffi.buffer(buf, n[0])[:]


def _u8(b: bytes) -> Any:
    """``bytes`` as a ``const uint8_t *`` argument (no copy)."""
    return ffi.from_buffer("uint8_t[]", b)


class _Owned:
    """Owns a C handle (``_h``), freed once by ``_free``: on ``close`` or when
    collected (a handle never made stays NULL)."""

    _h: Any = NULL
    _free: Any = None

    def close(self) -> None:
        if self._h != NULL:
            self._free(self._h)
            self._h = NULL

    def __del__(self) -> None:
        self.close()


class Region(_Owned):
    """A registered local memory region (``fabriclib_mr``). Keeps the buffer
    it was made from alive; deregistered by ``close`` or when collected (the
    engine keeps it registered until requests reading it have ended)."""

    _free = lib.fabriclib_mr_deregister

    def __init__(self, engine: "Engine", handle: Any, ptr: int, length: int, keep: Any) -> None:
        self._engine, self._h, self.ptr, self.length, self._keep = engine, handle, ptr, length, keep

    def descriptor(self) -> bytes:
        """The region's descriptor, to hand to peers (``fabriclib_mr_descriptor``)."""
        return _blob(lib.fabriclib_mr_descriptor, self._h)


class Remote(_Owned):
    """A peer's region, parsed from its descriptor bytes (``fabriclib_remote_mr``)."""

    _free = lib.fabriclib_remote_mr_free

    def __init__(self, descriptor: bytes) -> None:
        self.descriptor = bytes(descriptor)
        out = ffi.new("struct fabriclib_remote_mr **")
        _check(lib.fabriclib_remote_mr_parse(_u8(self.descriptor), len(self.descriptor), out))
        self._h = out[0]


RemoteLike = Union[Remote, bytes]


class Request:
    """A submitted request: ``wait(timeout)``, ``done()``, ``error``, ``id``,
    ``cancel()``, and ``await request`` in asyncio. Failures raise the
    status's exception (``fabriclib.errors``) with the engine's message.
    It holds its slot (flag word, id) and what its data must outlive (the
    source region) until it is collected."""

    __slots__ = ("_engine", "_slot", "_keep", "__weakref__")

    def __init__(self, engine: "Engine", slot: int, keep: Any) -> None:
        self._engine = engine
        self._slot = slot
        self._keep = keep

    @property
    def id(self) -> int:
        """The request's id (``fabriclib_cancel``, ``fabriclib_request_error``)."""
        return self._engine._flags.ids[self._slot][0]

    def _flag(self) -> int:
        v = self._engine._flags.words[self._slot][0]
        return v if v & FLAG_DONE else 0

    def done(self) -> bool:
        """Whether the request has ended (without waiting)."""
        return bool(self._flag())

    @property
    def status(self) -> Optional[int]:
        """The request's status once it has ended (0: OK), else None."""
        v = self._flag()
        return (v & STATUS_MASK) if v else None

    @property
    def error(self) -> Optional[FabricError]:
        """The exception the request ended with (None while running or if it succeeded)."""
        st = self.status
        if not st:
            return None
        status, msg, n = ffi.new("fabriclib_status *"), ffi.new("char[1024]"), ffi.new("size_t *")
        if lib.fabriclib_request_error(self._engine._h, self.id, status, msg, 1024, n) == OK:
            text = ffi.string(msg).decode(errors="replace")
        else:
            text = ffi.string(lib.fabriclib_status_str(st)).decode()
        return error(st, text)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Sleeps (GIL released) until the request ends; raises its error, or
        ``TimedOut`` if ``timeout`` seconds pass first (the request goes on)."""
        if not self._flag():
            us = NO_TIMEOUT if timeout is None else max(0, int(timeout * 1e6))
            word = self._engine._flags.words[self._slot]
            if self._engine._manual:
                st = lib.fabriclib_engine_flag_await(self._engine._h, word, us, NULL)
            else:
                st = lib.fabriclib_flag_await(word, us, NULL)
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
            self._engine._flags.release(self._slot)
        except Exception:
            pass


class _Slots:
    """Per request in flight: its completion flag word, request id, immediate
    and submit options (pointing at the word), in chunks of 4096, so a
    submit writes no C struct. A free slot's word is 0. A slot is reused once its request has ended
    and its ``Request`` is gone (a word the engine may still store to is
    never handed out again); one whose options were changed (a timeout, a
    NIC, a delivery fence) gets the defaults back when released."""

    CHUNK = 4096

    def __init__(self) -> None:
        self._keep: list[Any] = []
        self.words: list[Any] = []
        self.ids: list[Any] = []
        self.imms: list[Any] = []
        self.opts: list[Any] = []
        self._free: list[int] = []
        self._orphans: list[int] = []
        self._custom: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int:
        """A free slot, its word 0 (``Engine.write`` spells this out)."""
        try:
            return self._free.pop()  # atomic under the GIL: the common case takes no lock
        except IndexError:
            return self._refill()

    def customize(self, s: int, timeout: Optional[float], nic: Optional[int], delivered: bool) -> None:
        o = self.opts[s]
        o.timeout_us = 0 if timeout is None else (NO_TIMEOUT if timeout == float("inf") else int(timeout * 1e6))
        if nic is not None:
            o.route, o.nic = lib.FABRICLIB_ROUTE_NIC, nic
        o.flags = lib.FABRICLIB_SUBMIT_DELIVERED if delivered else 0
        self._custom.add(s)

    def _reset(self, s: int) -> None:
        o = self.opts[s]
        o.timeout_us, o.route, o.nic, o.flags = 0, lib.FABRICLIB_ROUTE_SHARD, 0, 0
        self._custom.discard(s)

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
                    w = self.words[s]
                    if w[0] & FLAG_DONE:
                        w[0] = 0
                        self._free.append(s)
                    else:
                        still.append(s)
                self._orphans = still
            if not self._free:
                n = self.CHUNK
                base = len(self.words)
                words, ids, imms = ffi.new("uint32_t[]", n), ffi.new("uint64_t[]", n), ffi.new("uint32_t[]", n)
                opts = ffi.new("fabriclib_submit_opts[]", n)
                size = ffi.sizeof("fabriclib_submit_opts")
                for i in range(n):
                    opts[i].struct_size = size
                    opts[i].flag = words + i
                self._keep.append((words, ids, imms, opts))
                self.words.extend(words + i for i in range(n))
                self.ids.extend(ids + i for i in range(n))
                self.imms.extend(imms + i for i in range(n))
                self.opts.extend(opts + i for i in range(n))
                self._free.extend(range(base + n - 1, base - 1, -1))
            return self._free.pop()

    def release(self, s: int) -> None:
        """Slot ``s``'s request is gone: free again once the engine is done
        with its word (zeroed for the next request)."""
        if self._custom and s in self._custom:
            self._reset(s)
        w = self.words[s]
        if w[0] & FLAG_DONE:
            w[0] = 0
            self._free.append(s)
        else:
            with self._lock:
                self._orphans.append(s)


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
    with memoryview(obj) as mv:
        if mv.readonly:
            raise ValueError("a region needs a writable buffer (bytearray, numpy array, mmap), not a read-only one")
        if not mv.c_contiguous:
            raise ValueError("a region needs a contiguous buffer")
    c = ffi.from_buffer(obj, require_writable=True)  # holds the buffer (and obj) while the region lives
    return int(ffi.cast("uintptr_t", c)), len(c), c, None


class RecvPool:
    """Received messages of a receive pool (``Engine.recv_pool``): ``get(timeout)``
    returns ``(bytes, sender_address)``."""

    def __init__(self, engine: "Engine", length: int, count: int) -> None:
        self._q: "queue.Queue[tuple[int, bytes, bytes]]" = queue.Queue()

        def on_message(_ud: Any, st: int, m: Any) -> None:
            data = ffi.buffer(m.data, m.len)[:] if m != NULL and m.data != NULL else b""
            sender = ffi.buffer(getattr(m, "from"), m.from_len)[:] if m != NULL and m.from_len else b""
            self._q.put((st, data, sender))

        self._cb = ffi.callback("fabriclib_message_cb", on_message)
        out = ffi.new("uint64_t *")
        self._engine = engine
        _check(lib.fabriclib_recv_pool_add(engine._h, length, count, self._cb, NULL, out))
        self.id: int = out[0]

    def get(self, timeout: Optional[float] = None) -> tuple[bytes, bytes]:
        """The next message and its sender's address; raises its error (a
        removed pool's last call raises ``Canceled``)."""
        try:
            st, data, sender = self._q.get(timeout=timeout)
        except queue.Empty:
            raise TimedOut(f"no message within {timeout} s") from None
        if st:
            raise error(st, f"receive: {ffi.string(lib.fabriclib_status_str(st)).decode()}")
        return data, sender

    def remove(self) -> None:
        _check(lib.fabriclib_recv_pool_remove(self._engine._h, self.id))


class Watcher(_Owned):
    """A watched 64-bit word (``Engine.watch``): ``callback(old, new)`` runs on
    the engine's watcher thread (it takes the GIL: keep it short). ``store``
    writes the word from Python; ``address`` is its host address."""

    _free = lib.fabriclib_watcher_destroy

    def __init__(self, engine: "Engine", callback: Callable[[int, int], None]) -> None:
        self._cb = ffi.callback("fabriclib_watcher_cb", lambda _ud, old, new: callback(old, new))
        opts = ffi.new("fabriclib_watcher_opts *", {"struct_size": ffi.sizeof("fabriclib_watcher_opts"),
                                                    "callback": self._cb, "memory": lib.FABRICLIB_MEMORY_HOST})
        out = ffi.new("struct fabriclib_watcher **")
        _check(lib.fabriclib_watcher_create(engine._h, opts, out))
        self._h = out[0]
        p = ffi.new("uint64_t **")
        _check(lib.fabriclib_watcher_host_ptr(self._h, p))
        self._word = p[0]
        self.address: int = int(ffi.cast("uintptr_t", self._word))

    def store(self, value: int) -> None:
        self._word[0] = value


class Engine:
    """A transfer engine (``fabriclib_engine``). Keyword arguments configure
    it: ``provider`` ("tcp;ofi_rxm", "shm", "verbs"…), ``bind_address``,
    ``nics`` (comma-separated names), ``nic_count``, ``request_timeout``
    (seconds), ``max_inflight``, ``idle_policy`` ("auto", the default: a
    waiting engine sleeps; "spin": it keeps a core; "block"),
    ``manual_progress``, ``keepalive`` ((interval, peer timeout) in seconds).
    Use it as a context manager, or ``close()`` it."""

    def __init__(self, **config: Any) -> None:
        self._h = NULL
        cfg_p = ffi.new("struct fabriclib_config **")
        _check(lib.fabriclib_config_new(cfg_p))
        cfg = cfg_p[0]
        try:
            for k, v in config.items():
                self._set(cfg, k, v)
            out = ffi.new("struct fabriclib_engine **")
            _check(lib.fabriclib_engine_create(cfg, out))
            self._h = out[0]
        finally:
            lib.fabriclib_config_free(cfg)
        self._manual = bool(config.get("manual_progress", False))
        self._flags = _Slots()
        self._remotes: dict[bytes, Remote] = {}
        self._mirrors: dict[int, Any] = {}
        self._waiting: dict[Any, list[tuple[Request, "asyncio.Future[None]"]]] = {}
        self._fd = -1
        self.address: bytes = _blob(lib.fabriclib_engine_address, self._h)
        p = ffi.new("char **")
        _check(lib.fabriclib_engine_provider(self._h, p))
        self.provider: str = ffi.string(p[0]).decode() if p[0] != NULL else ""

    @staticmethod
    def _set(cfg: Any, k: str, v: Any) -> None:
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
            _check(lib.fabriclib_config_set_request_timeout(cfg, NO_TIMEOUT if v is None else int(v * 1e6)))
        elif k == "max_inflight":
            _check(lib.fabriclib_config_set_max_inflight(cfg, int(v)))
        elif k == "idle_policy":
            policies = {"spin": lib.FABRICLIB_IDLE_SPIN, "auto": lib.FABRICLIB_IDLE_AUTO,
                        "block": lib.FABRICLIB_IDLE_BLOCK}
            _check(lib.fabriclib_config_set_idle_policy(cfg, policies[v]))
        elif k == "manual_progress":
            _check(lib.fabriclib_config_set_manual_progress(cfg, bool(v)))
        elif k == "keepalive":
            _check(lib.fabriclib_config_set_keepalive_us(cfg, int(v[0] * 1e6), int(v[1] * 1e6)))
        else:
            raise TypeError(f"Engine: unknown setting {k!r}")

    # --- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Destroys the engine: requests still running end ``Shutdown``."""
        if getattr(self, "_h", NULL) != NULL:
            for loop in list(self._waiting):
                try:
                    loop.remove_reader(self._fd)
                except Exception:
                    pass
            lib.fabriclib_engine_destroy(self._h)
            self._h = NULL

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
        out = ffi.new("struct fabriclib_mr **")
        if device is None:
            _check(lib.fabriclib_mr_register(self._h, ffi.cast("void *", ptr), n, out))
        else:
            _check(lib.fabriclib_mr_register_device(self._h, ffi.cast("void *", ptr), n, device, out))
        return Region(self, out[0], ptr, n, keep)

    def remote(self, descriptor: RemoteLike) -> Remote:
        """A peer's region from its descriptor bytes (cached per descriptor)."""
        if type(descriptor) is Remote:
            return descriptor
        r = self._remotes.get(descriptor)  # type: ignore[arg-type]
        if r is None:
            r = self._remotes[descriptor] = Remote(descriptor)  # type: ignore[index,arg-type]
        return r

    # --- submitting -----------------------------------------------------------
    def _start(self, keep: Any, imm: Optional[int], timeout: Optional[float], nic: Optional[int],
               delivered: bool) -> tuple[Request, Any]:
        """A slot for a new request: its ``Request`` (keeping ``keep`` alive until
        it ends) and its immediate's pointer (NULL without one); the slot's
        options get ``timeout``, ``nic`` and ``delivered`` if any is given."""
        slots = self._flags
        s = slots.take()
        req = Request(self, s, keep)
        if timeout is not None or nic is not None or delivered:
            slots.customize(s, timeout, nic, delivered)
        if imm is None:
            return req, NULL
        ip = slots.imms[s]
        ip[0] = imm
        return req, ip

    def _failed(self, req: Request, st: int) -> Request:
        """A submit that returned ``st``: its request ended (the slot is free
        again once ``req`` is gone) and ``st``'s exception is raised."""
        self._flags.words[req._slot][0] = FLAG_DONE | st
        _check(st)
        return req

    def _started(self, req: Request, st: int) -> Request:
        return req if st == OK else self._failed(req, st)

    def write(self, src: Region, dst: RemoteLike, length: int, *, src_offset: int = 0, dst_offset: int = 0,
              imm: Optional[int] = None, timeout: Optional[float] = None, nic: Optional[int] = None,
              delivered: bool = False) -> Request:
        """One write of ``length`` bytes (``fabriclib_submit_single_write``)."""
        # The hot path, spelled out: _start's work without its calls.
        r = dst if type(dst) is Remote else self.remote(dst)
        slots = self._flags
        try:
            s = slots._free.pop()
        except IndexError:
            s = slots._refill()
        # The source region (its buffer) lives until the write ends; the engine
        # keeps what the descriptor names itself.
        req = Request(self, s, src)
        if timeout is not None or nic is not None or delivered:
            slots.customize(s, timeout, nic, delivered)
        if imm is None:
            ip = NULL
        else:
            ip = slots.imms[s]
            ip[0] = imm
        st = _single_write(self._h, length, ip, src._h, src_offset, r._h, dst_offset, slots.opts[s], slots.ids[s])
        return req if st == OK else self._failed(req, st)

    def write_batch(self, src: Region, writes: Iterable[tuple[RemoteLike, int, int, int, Optional[int]]], *,
                    timeout: Optional[float] = None) -> list[Request]:
        """Writes ``(dst, length, src_offset, dst_offset, imm)`` items from
        ``src`` in one hand-off to the engine (``fabriclib_submit_single_writes``):
        each is a request of its own (its own immediate, ``imm`` None for none),
        returned in order. All or none: a bad item raises and submits none."""
        items = [(self.remote(d), n, so, do, imm) for d, n, so, do, imm in writes]
        started = [self._start(src, imm, timeout, None, False) for _, _, _, _, imm in items]
        slots = self._flags
        arr = ffi.new("fabriclib_single_write[]", [
            (n, ip, so, r._h, do, slots.opts[req._slot]) for (r, n, so, do, _), (req, ip) in zip(items, started)])
        first = ffi.new("uint64_t *")
        st = lib.fabriclib_submit_single_writes(self._h, src._h, arr, len(items), first)
        reqs = [req for req, _ in started]
        if st != OK:
            for req in reqs:
                slots.words[req._slot][0] = FLAG_DONE | st
            _check(st)
        for k, req in enumerate(reqs):
            slots.ids[req._slot][0] = first[0] + k
        return reqs

    def write_pages(self, src: Region, src_pages: Iterable[int], dst: RemoteLike, dst_pages: Iterable[int],
                    page_len: int, *, src_stride: Optional[int] = None, dst_stride: Optional[int] = None,
                    src_offset: int = 0, dst_offset: int = 0, imm: Optional[int] = None,
                    timeout: Optional[float] = None, nic: Optional[int] = None, delivered: bool = False) -> Request:
        """Page ``src_pages[k]`` of ``src`` to page ``dst_pages[k]`` of ``dst``
        (``fabriclib_submit_paged_writes``); one immediate per page."""
        r = self.remote(dst)
        si, di = _u32s(src_pages), _u32s(dst_pages)
        sp = ffi.new("fabriclib_pages *", (si, len(si), src_stride or page_len, src_offset))
        dp = ffi.new("fabriclib_pages *", (di, len(di), dst_stride or page_len, dst_offset))
        req, ip = self._start((src, r), imm, timeout, nic, delivered)
        s, slots = req._slot, self._flags
        return self._started(req, lib.fabriclib_submit_paged_writes(
            self._h, page_len, ip, src._h, sp, r._h, dp, slots.opts[s], slots.ids[s]))

    def scatter(self, src: Region, dsts: Iterable[tuple[RemoteLike, int, int, int]], *, imm: Optional[int] = None,
                peer_set: int = 0, timeout: Optional[float] = None, delivered: bool = False) -> Request:
        """Writes ``(dst, length, src_offset, dst_offset)`` items from ``src``
        (``fabriclib_submit_scatter``)."""
        items = [(self.remote(d), n, so, do) for d, n, so, do in dsts]
        arr = ffi.new("fabriclib_scatter_dst[]", [(n, so, r._h, do) for r, n, so, do in items])
        req, ip = self._start((src, items), imm, timeout, None, delivered)
        s, slots = req._slot, self._flags
        return self._started(req, lib.fabriclib_submit_scatter(
            self._h, peer_set, ip, src._h, arr, len(items), slots.opts[s], slots.ids[s]))

    def barrier(self, imm: int, dsts: Sequence[RemoteLike], *, peer_set: int = 0,
                timeout: Optional[float] = None, delivered: bool = False) -> Request:
        """A zero-byte write with ``imm`` to each destination (``fabriclib_submit_barrier``)."""
        rs = [self.remote(d) for d in dsts]
        arr = ffi.new("struct fabriclib_remote_mr *[]", [r._h for r in rs])
        req, _ = self._start(rs, None, timeout, None, delivered)
        s, slots = req._slot, self._flags
        return self._started(req, lib.fabriclib_submit_barrier(
            self._h, peer_set, imm, arr, len(rs), slots.opts[s], slots.ids[s]))

    def send(self, address: bytes, message: bytes, *, timeout: Optional[float] = None) -> Request:
        """Sends ``message`` to the engine at ``address`` (``fabriclib_submit_send``)."""
        req, _ = self._start(None, None, timeout, None, False)
        s, slots = req._slot, self._flags
        return self._started(req, lib.fabriclib_submit_send(
            self._h, _u8(address), len(address), ffi.from_buffer(message), len(message), slots.opts[s],
            slots.ids[s]))

    def recv_pool(self, length: int, count: int) -> RecvPool:
        """A receive pool of ``count`` buffers of ``length`` bytes."""
        return RecvPool(self, length, count)

    # --- immediates -----------------------------------------------------------
    def expect(self, imm: int, count: int, *, timeout: Optional[float] = None) -> Request:
        """A request that ends once ``count`` immediates ``imm`` have arrived
        (``fabriclib_expect_imm_count``)."""
        req, _ = self._start(None, None, timeout, None, False)
        s, slots = req._slot, self._flags
        return self._started(req, lib.fabriclib_expect_imm_count(self._h, imm, count, slots.opts[s], slots.ids[s]))

    def imm_count(self, imm: int, *, reset: bool = False) -> int:
        """Immediates ``imm`` counted and not taken by an expectation."""
        n = ffi.new("uint64_t *")
        fn = lib.fabriclib_imm_count_reset if reset else lib.fabriclib_imm_count_get
        _check(fn(self._h, imm, n))
        return n[0]

    def mirror(self, imm: int, word: Any) -> None:
        """Mirrors immediate ``imm``'s count into ``word`` (``fabriclib_imm_mirror``):
        the first 8 bytes of a writable, 8-byte aligned buffer
        (``numpy.zeros(1, numpy.uint64)``, a slice of a larger array), set at
        once to the count so far, then one more per arrival; expectations do
        not lower it. This engine keeps ``word`` alive until
        ``mirror(imm, None)`` stops it (``InvalidArgument`` if misaligned)."""
        if word is None:
            _check(lib.fabriclib_imm_mirror(self._h, imm, NULL))
            self._mirrors.pop(imm, None)
            return
        c = ffi.from_buffer(word, require_writable=True)
        if len(c) < 8:
            raise ValueError(f"a mirror needs 8 writable bytes, not {len(c)}")
        _check(lib.fabriclib_imm_mirror(self._h, imm, ffi.cast("uint64_t *", c)))
        self._mirrors[imm] = (word, c)

    # --- peers ------------------------------------------------------------------
    def connect(self, address: bytes, *, timeout: Optional[float] = None) -> Request:
        """Adds the peer at ``address`` and connects (``fabriclib_peer_add``)."""
        req, _ = self._start(None, None, timeout, None, False)
        s, slots = req._slot, self._flags
        return self._started(req, lib.fabriclib_peer_add(self._h, _u8(address), len(address), slots.opts[s],
                                                         slots.ids[s]))

    def remove_peer(self, address: bytes) -> int:
        """Removes a peer: its requests end ``Canceled``; returns how many."""
        n = ffi.new("size_t *")
        _check(lib.fabriclib_peer_remove(self._h, _u8(address), len(address), n))
        return n[0]

    def cancel_peer(self, address: bytes) -> int:
        """Cancels every request to a peer; returns how many."""
        n = ffi.new("size_t *")
        _check(lib.fabriclib_cancel_peer(self._h, _u8(address), len(address), n))
        return n[0]

    def peer_state(self, address: bytes) -> str:
        """"connecting", "up" or "down"."""
        st = ffi.new("fabriclib_peer_liveness *")
        _check(lib.fabriclib_peer_state(self._h, _u8(address), len(address), st))
        return {lib.FABRICLIB_PEER_CONNECTING: "connecting", lib.FABRICLIB_PEER_UP: "up",
                lib.FABRICLIB_PEER_DOWN: "down"}[st[0]]

    def peer_set(self, addresses: Sequence[bytes]) -> int:
        """A peer set for scatter and barrier (``fabriclib_add_peer_set``); its id."""
        bufs = [_u8(a) for a in addresses]
        ptrs = ffi.new("uint8_t *[]", bufs)
        lens = ffi.new("size_t[]", [len(a) for a in addresses])
        out = ffi.new("uint64_t *")
        _check(lib.fabriclib_add_peer_set(self._h, ptrs, lens, len(bufs), out))
        return out[0]

    def watch(self, callback: Callable[[int, int], None]) -> Watcher:
        """A watched word whose changes call ``callback(old, new)``."""
        return Watcher(self, callback)

    def progress(self) -> bool:
        """Progresses a manual-progress engine once; whether anything happened."""
        b = ffi.new("bool *")
        _check(lib.fabriclib_engine_progress(self._h, b))
        return bool(b[0])

    # --- metrics ------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """Every metric as a dict (the JSON of ``fabriclib_engine_metrics_text``)."""
        return json.loads(self.metrics_text("json"))

    def metrics_text(self, fmt: str = "prometheus") -> str:
        """Every metric as Prometheus text (``fmt="prometheus"``) or JSON."""
        f = {"json": lib.FABRICLIB_METRICS_JSON, "prometheus": lib.FABRICLIB_METRICS_PROMETHEUS}[fmt]
        n = ffi.new("size_t *")
        st = lib.fabriclib_engine_metrics_text(self._h, f, NULL, 0, n)
        while True:
            cap = n[0] + 4096
            buf = ffi.new("char[]", cap)
            st = lib.fabriclib_engine_metrics_text(self._h, f, buf, cap, n)
            if st != TOO_SMALL:
                _check(st)
                return ffi.string(buf).decode()

    # --- asyncio ------------------------------------------------------------------
    def _future(self, req: Request) -> "asyncio.Future[None]":
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self._fd < 0:
            fd = ffi.new("int32_t *", -1)
            _check(lib.fabriclib_engine_event_fd(self._h, fd))
            self._fd = fd[0]
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
            a = ffi.new("uint32_t[]", len(mv))
            ffi.memmove(a, mv, mv.nbytes)
            return a
    xs = xs if isinstance(xs, (list, tuple, range)) else list(xs)
    return ffi.new("uint32_t[]", list(xs) if isinstance(xs, range) else xs)
