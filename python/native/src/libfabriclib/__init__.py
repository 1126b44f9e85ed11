"""The native fabriclib library, for the `fabriclib` package and for C/C++
builds (`prefix()` holds include/, lib/cmake/fabriclib and lib/pkgconfig).

`library_path()` is the library `fabriclib` loads: this wheel's copy, or,
with `FABRICLIB_PREFER_SYSTEM=1`, the system's `libfabriclib.so.0.4` when
the loader finds one (a distribution package, a CMake install).
"""

import ctypes.util
import glob
import os

SONAME = "libfabriclib.so.0.4"


def prefix() -> str:
    """The directory holding this wheel's include/ and lib/."""
    return os.path.dirname(os.path.abspath(__file__))


def bundled_path() -> str:
    """This wheel's libfabriclib.so.X.Y.Z."""
    found = sorted(glob.glob(os.path.join(prefix(), "lib", "libfabriclib.so.*")))
    if not found:
        raise FileNotFoundError("libfabriclib wheel without its library")
    return found[-1]


def library_path() -> str:
    """The library to load (see the module doc)."""
    if os.environ.get("FABRICLIB_PREFER_SYSTEM") == "1":
        try:
            ctypes.CDLL(SONAME)
            return SONAME
        except OSError:
            pass
    return bundled_path()

