#!/usr/bin/env bash
# The Python package: builds both wheels (pure `fabriclib`, native
# `libfabriclib` from a CMake install of build/), checks with auditwheel that
# the native one bundles no RDMA, fabric, hwloc or GPU library, installs them
# into a venv (target/pyenv) and runs pytest there: two processes over tcp
# and shm, the library loaded from the wheel. Needs build/ (scripts/test.sh
# builds it first).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyenv stage=target/pystage wheels=target/wheels
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check pytest build auditwheel numpy cffi
rm -rf "$stage" "$wheels"
cmake --install build --prefix "$stage" >/dev/null
FABRICLIB_PREFIX="$PWD/$stage" "$venv/bin/python" -m pip wheel -q --no-deps -w "$wheels" ./python/native
"$venv/bin/python" -m pip wheel -q --no-deps -w "$wheels" ./python
ls "$wheels"
native=$(ls "$wheels"/libfabriclib-*.whl)
shown=$("$venv/bin/auditwheel" show "$native" 2>&1) || true
echo "$shown"
# Only the loader's and libc's symbols are external; nothing RDMA-, fabric- or GPU-related is needed or bundled.
if echo "$shown" | grep -qiE 'fabric\.so|ibverbs|rdmacm|hwloc|efa|mlx|cuda'; then
  echo "the native wheel needs or bundles an RDMA/GPU library" >&2; exit 1
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheels"/*.whl
# The library comes from the libfabriclib wheel (no FABRICLIB_LIBRARY).
# A test still running after 300 s has every thread's traceback printed
# (pytest's faulthandler_timeout); the run is killed after 900 s, so a hang
# fails here instead of holding CI until its own limit (the suite takes ~10 s).
(cd python && env -u FABRICLIB_LIBRARY timeout -k 10 900 ../"$venv"/bin/python -m pytest -q -s \
  -o faulthandler_timeout=300 tests)
