"""fabriclib: RDMA point-to-point transfers for LLM systems, over the C ABI of
``libfabriclib.so`` (the same library a C or C++ component in the process
uses). See ``Engine``.

    from fabriclib import Engine
    with Engine(provider="tcp;ofi_rxm", bind_address="127.0.0.1") as e:
        buf = bytearray(1 << 20)
        region = e.register(buf)
        ...
"""

from . import errors
from ._lib import ffi as _ffi
from ._lib import lib as _lib
from .engine import Engine, RecvPool, Region, Remote, Request, Watcher
from .errors import FabricError

__version__ = "0.4.0"
#: The library's version (``fabriclib_version``).
library_version: str = _ffi.string(_lib.fabriclib_version()).decode()

__all__ = ["Engine", "Region", "Remote", "Request", "RecvPool", "Watcher", "FabricError", "errors", "library_version"]
