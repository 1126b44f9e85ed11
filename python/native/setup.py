"""The native wheel: copies a CMake install of fabriclib (FABRICLIB_PREFIX, a
`cmake --install build --prefix DIR`) into the package, and marks the wheel
platform-specific. The library is the only binary: libfabric, rdma-core,
hwloc and CUDA are loaded at run time from the system, never bundled."""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


class CopyInstall(build_py):
    def run(self):
        super().run()
        prefix = os.environ.get("FABRICLIB_PREFIX")
        if not prefix:
            raise SystemExit("set FABRICLIB_PREFIX to a `cmake --install build --prefix DIR` of fabriclib")
        out = os.path.join(self.build_lib, "libfabriclib")
        libdir = next(d for d in ("lib", "lib64") if os.path.isdir(os.path.join(prefix, d)))
        real = [f for f in glob.glob(os.path.join(prefix, libdir, "libfabriclib.so.*.*.*")) if not os.path.islink(f)]
        if len(real) != 1:
            raise SystemExit(f"expected one libfabriclib.so.X.Y.Z in {prefix}/{libdir}, found {real}")
        os.makedirs(os.path.join(out, "lib"), exist_ok=True)
        shutil.copy2(real[0], os.path.join(out, "lib"))
        for sub in ("cmake", "pkgconfig"):
            src = os.path.join(prefix, libdir, sub)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(out, "lib", sub), dirs_exist_ok=True)
        shutil.copytree(os.path.join(prefix, "include"), os.path.join(out, "include"), dirs_exist_ok=True)


class Binary(Distribution):
    def has_ext_modules(self):
        return True


try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel


class AnyPython(bdist_wheel):
    """No Python extension inside: any Python 3, this platform (py3-none-linux_*)."""

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(cmdclass={"build_py": CopyInstall, "bdist_wheel": AnyPython}, distclass=Binary)
