"""kv_transfer: move a paged KV cache from a "prefill" process to a "decode"
process, layer by layer (the Python twin of c_examples/kv_transfer.c).

    python kv_transfer.py demo    [opts]   runs decode and prefill on this machine
    python kv_transfer.py decode  [opts]   listens on --port, verifies every byte
    python kv_transfer.py prefill [opts]   connects to --port, writes the cache
    opts: --layers N (32) --pages N (64 per layer) --page-kib N (32)
          --provider P (tcp;ofi_rxm) --port N (18515)

The address and the descriptor go out of band over a TCP socket on
127.0.0.1. Prefill writes each layer with one paged write whose immediate
is the layer number; decode waits with Engine.expect(layer, pages) (one
immediate per page), then checks every byte.
"""

import argparse
import socket
import struct
import subprocess
import sys
import time

import numpy as np

from fabriclib import Engine


def kv_page(l: int, p: int, n: int) -> np.ndarray:
    """Prefill's page p of layer l (decode recomputes it to verify)."""
    i = np.arange(n, dtype=np.uint32)
    return ((l * 37 + p * 11 + i * 7 + (i >> 8)) & 0xFF).astype(np.uint8)


def slot_of(a, l: int, p: int) -> int:
    """Decode's page slot for prefill's page p of layer l: a scrambled page table."""
    return l * a.pages + (p * 29 + l) % a.pages


def engine(a) -> Engine:
    return Engine(provider=a.provider, **({"bind_address": "127.0.0.1"} if a.provider.startswith("tcp") else {}))


def send_blob(s: socket.socket, b: bytes) -> None:
    s.sendall(struct.pack("<I", len(b)) + b)


def recv_blob(s: socket.socket) -> bytes:
    n = struct.unpack("<I", s.recv(4, socket.MSG_WAITALL))[0]
    return s.recv(n, socket.MSG_WAITALL)


def decode(a) -> int:
    page = a.page_kib * 1024
    with engine(a) as e:
        cache = np.zeros(a.layers * a.pages * page, dtype=np.uint8)
        region = e.register(cache)
        expects = [e.expect(l, a.pages, timeout=60) for l in range(a.layers)]
        with socket.create_server(("127.0.0.1", a.port)) as srv:
            if a.ready:
                a.ready()
            conn, _ = srv.accept()
            with conn:
                send_blob(conn, e.address)
                send_blob(conn, region.descriptor())
                start = time.monotonic()
                for r in expects:
                    r.wait(60)
                took = time.monotonic() - start
                view = cache.reshape(a.layers * a.pages, page)
                bad = sum(
                    1
                    for l in range(a.layers)
                    for p in range(a.pages)
                    if not np.array_equal(view[slot_of(a, l, p)], kv_page(l, p, page))
                )
                conn.sendall(b"k")
        total = a.layers * a.pages * page
        print(f"decode: {a.layers} layers x {a.pages} pages x {a.page_kib} KiB in {took * 1e3:.1f} ms "
              f"({total / took / 1e9:.2f} GB/s), {bad} bad pages")
        return 1 if bad else 0


def prefill(a) -> int:
    page = a.page_kib * 1024
    with engine(a) as e:
        cache = np.concatenate([kv_page(l, p, page) for l in range(a.layers) for p in range(a.pages)])
        region = e.register(cache)
        for _ in range(200):
            try:
                s = socket.create_connection(("127.0.0.1", a.port))
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        with s:
            peer, desc = recv_blob(s), recv_blob(s)
            e.connect(peer).wait(30)
            remote = e.remote(desc)
            reqs = []
            for l in range(a.layers):
                src = [l * a.pages + p for p in range(a.pages)]
                dst = [slot_of(a, l, p) for p in range(a.pages)]
                reqs.append(e.write_pages(region, src, remote, dst, page, imm=l))
            for r in reqs:
                r.wait(60)
            s.recv(1)  # decode has checked
        return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["demo", "decode", "prefill"])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--pages", type=int, default=64)
    ap.add_argument("--page-kib", type=int, default=32)
    ap.add_argument("--provider", default="tcp;ofi_rxm")
    ap.add_argument("--port", type=int, default=18515)
    a = ap.parse_args()
    a.ready = None
    if a.role == "decode":
        return decode(a)
    if a.role == "prefill":
        return prefill(a)
    opts = [f"--layers={a.layers}", f"--pages={a.pages}", f"--page-kib={a.page_kib}",
            f"--provider={a.provider}", f"--port={a.port}"]
    d = subprocess.Popen([sys.executable, __file__, "decode", *opts])
    p = subprocess.Popen([sys.executable, __file__, "prefill", *opts])
    rp, rd = p.wait(120), d.wait(120)
    return rp or rd


if __name__ == "__main__":
    sys.exit(main())
