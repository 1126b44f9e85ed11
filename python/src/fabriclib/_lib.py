"""libfabriclib.so through cffi in ABI mode: no compiler at install, and the
declarations are the C header's own (``_cdef.h``, generated from
``fabriclib.h`` by ``python/gen_cdef.py``), so no signature is written twice.

One copy of the engine per process: if a C or C++ component already loaded
``libfabriclib.so.0.4``, the same library is used (``RTLD_NOLOAD`` finds it);
else ``FABRICLIB_LIBRARY`` (a path), else the ``libfabriclib`` native wheel's
copy, else the system's (``ldconfig`` / ``LD_LIBRARY_PATH``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cffi import FFI

from . import errors

SONAME = "libfabriclib.so.0.4"
#: The C ABI this package is written against (``FABRICLIB_VERSION_MAJOR/MINOR``).
ABI_MAJOR_MINOR = (0, 4)

ffi = FFI()
ffi.cdef((Path(__file__).parent / "_cdef.h").read_text())


def _candidates() -> list[str]:
    out = []
    env = os.environ.get("FABRICLIB_LIBRARY")
    if env:
        out.append(env)
    try:  # the native wheel
        import libfabriclib  # type: ignore[import-not-found]

        out.append(libfabriclib.library_path())
    except ImportError:
        pass
    out.append(SONAME)
    return out


def _load() -> Any:
    # Already in the process (a C++ component linked it): share that copy.
    try:
        return ffi.dlopen(SONAME, ffi.RTLD_NOW | ffi.RTLD_GLOBAL | ffi.RTLD_NOLOAD)
    except OSError:
        pass
    failed = []
    for c in _candidates():
        try:
            return ffi.dlopen(c, ffi.RTLD_NOW | ffi.RTLD_GLOBAL)
        except OSError as e:
            failed.append(f"{c}: {e}")
    raise ImportError(
        "fabriclib: cannot load libfabriclib.so (install the libfabriclib wheel, "
        "build it with CMake and set FABRICLIB_LIBRARY, or put it on the loader's path): " + "; ".join(failed)
    )


lib = _load()

_v = lib.fabriclib_version_number()
if (_v // 1_000_000, _v // 1000 % 1000) != ABI_MAJOR_MINOR:
    raise ImportError(f"fabriclib: the library is {ffi.string(lib.fabriclib_version()).decode()}, "
                      "this package needs 0.4.x")

# The exception classes' codes are the header's (fabriclib_status).
for _cls in errors.BY_STATUS.values():
    _name = "FABRICLIB_STATUS_" + "".join("_" + c if c.isupper() else c for c in _cls.__name__.removesuffix("Error")).lstrip("_").upper()
    if getattr(lib, _name) != _cls.status:
        raise ImportError(f"fabriclib: {_cls.__name__} is status {_cls.status}, the header says {_name}")


def struct_to_dict(value: Any) -> Any:
    """A cffi struct (or array, or number) as plain Python values."""
    t = ffi.typeof(value)
    if t.kind == "struct":
        return {name: struct_to_dict(getattr(value, name)) for name, _ in t.fields}
    if t.kind == "array":
        return [struct_to_dict(x) for x in value]
    return value
