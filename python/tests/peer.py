"""The other process of the two-process tests: an engine with one region,
driven by lines on stdin, answering on stdout.

    expect IMM COUNT   -> "fired IMM" once COUNT immediates IMM arrived (or "error ...")
    hash               -> "hash HEX" (sha256 of the region)
    metrics            -> "metrics JSON"
    exit
"""

import hashlib
import sys

from fabriclib import Engine

provider, size = sys.argv[1], int(sys.argv[2])
kw = {"bind_address": "127.0.0.1"} if provider.startswith("tcp") else {}
with Engine(provider=provider, **kw) as e:
    buf = bytearray(size)
    region = e.register(buf)
    print("ready", e.address.hex(), region.descriptor().hex(), flush=True)
    pending = {}
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "expect":
            imm, count = int(cmd[1]), int(cmd[2])
            pending[imm] = e.expect(imm, count, timeout=float("inf"))
            print("armed", imm, flush=True)
        elif cmd[0] == "wait":
            imm = int(cmd[1])
            try:
                pending.pop(imm).wait(30)
                print("fired", imm, flush=True)
            except Exception as x:  # reported to the test
                print("error", type(x).__name__, x, flush=True)
        elif cmd[0] == "hash":
            print("hash", hashlib.sha256(buf).hexdigest(), flush=True)
        elif cmd[0] == "metrics":
            print("metrics", e.metrics_text("json"), flush=True)
        elif cmd[0] == "exit":
            break
