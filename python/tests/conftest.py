import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(__file__)
PROVIDERS = ["tcp;ofi_rxm", "shm"]


class Peer:
    """A peer process (peer.py) with one region of `size` bytes."""

    def __init__(self, provider: str, size: int) -> None:
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), provider, str(size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        words = self.line().split()
        assert words[0] == "ready", words
        self.address, self.descriptor = bytes.fromhex(words[1]), bytes.fromhex(words[2])

    def line(self) -> str:
        out = self.p.stdout.readline()
        assert out, f"the peer exited ({self.p.poll()})"
        return out.strip()

    def call(self, cmd: str) -> str:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.line()

    def kill(self) -> None:
        self.p.kill()
        self.p.wait()

    def close(self) -> None:
        if self.p.poll() is None:
            try:
                self.p.stdin.write("exit\n")
                self.p.stdin.flush()
                self.p.wait(10)
            except Exception:
                self.p.kill()
                self.p.wait()


@pytest.fixture(params=PROVIDERS)
def provider(request):
    return request.param


@pytest.fixture
def engine_kw(provider):
    return {"provider": provider, **({"bind_address": "127.0.0.1"} if provider.startswith("tcp") else {})}


@pytest.fixture
def peer_factory(provider):
    peers = []

    def make(size: int) -> Peer:
        p = Peer(provider, size)
        peers.append(p)
        return p

    yield make
    for p in peers:
        p.close()
