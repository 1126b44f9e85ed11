#!/usr/bin/env bash
# Builds libfabric 2.1.0 with CUDA support (shm and tcp;ofi_rxm, CUDA loaded
# at run time), once per machine, and prints the path of its
# `libfabric.so.1`: what `FABRICLIB_LIBFABRIC` takes.
#
#   scripts/libfabric-cuda.sh            build if not cached; print the library's path
#   scripts/libfabric-cuda.sh --prefix   print the install prefix instead
#
# Everything comes from the package registries: the source is Debian's
# (trixie's libfabric 2.1.0 orig tarball, through a private apt
# configuration that leaves the system's apt state alone), the CUDA headers
# are NVIDIA's wheels on PyPI (no CUDA toolkit is installed). With
# `--enable-cuda-dlopen` libcuda is no DT_NEEDED of the result, so the same
# build loads on a machine without a GPU (no provider offers device memory
# there) and on the GPU machine (shm then moves device memory through CUDA
# IPC). About 4 minutes on 2 cores; cached under
# ${FABRICLIB_CACHE:-~/.cache/fabriclib}, keyed by this script's content.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=2.1.0
debian_version=2.1.0-1.1
cuda=13.0
key=$(sha256sum "$here/libfabric-cuda.sh" | cut -c1-12)
cache=${FABRICLIB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fabriclib}
prefix=$cache/libfabric-$version-cuda$cuda-$key
lib=$prefix/lib/libfabric.so.1
# Written last: a build that was cut short is built again.
done_stamp=$prefix/.built

say() { if [ "${1:-}" = --prefix ]; then echo "$prefix"; else echo "$lib"; fi; }
if [ -e "$done_stamp" ]; then
    say "${1:-}"
    exit 0
fi

log() { echo "libfabric-cuda: $*" >&2; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
need=()
for p in autoconf automake libtool make gcc xz-utils python3-pip unzip; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
    log "installing ${need[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# The source: Debian's orig tarball. apt checks it against the signed Sources
# index; the .dsc and .debian.tar.xz of this version are gone from the pool
# (404), which is why apt-get's status is not looked at, only the tarball.
log "fetching libfabric_$version.orig.tar.xz (Debian trixie's source)"
mkdir -p apt/lists/partial apt/cache/archives/partial
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >apt/sources.list
apt=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache" -o APT::Sandbox::User=root)
apt-get "${apt[@]}" -qq update
apt-get "${apt[@]}" -qq source --download-only "libfabric=$debian_version" >/dev/null 2>&1 || true
[ -s "libfabric_$version.orig.tar.xz" ] || { log "apt-get source gave no libfabric_$version.orig.tar.xz"; exit 1; }

# CUDA's headers (cuda.h, cuda_runtime.h, crt/, nvml.h), merged into one include/.
log "fetching CUDA $cuda headers (nvidia-cuda-runtime, nvidia-cuda-crt, nvidia-nvml-dev wheels)"
python3 -m pip download -q --no-deps --only-binary=:all: -d wheels \
    "nvidia-cuda-runtime==$cuda.*" "nvidia-cuda-crt==$cuda.*" "nvidia-nvml-dev==$cuda.*"
mkdir -p cuda/include
for w in wheels/*.whl; do
    unzip -q -o "$w" -d unpacked
done
find unpacked -type d -name include -path '*nvidia*' | while read -r inc; do cp -r "$inc"/. cuda/include/; done
for h in cuda.h cuda_runtime.h crt/host_config.h nvml.h; do
    [ -e "cuda/include/$h" ] || { log "no $h in the CUDA wheels"; exit 1; }
done

log "building (configure, make -j${CARGO_BUILD_JOBS:-2})"
tar -xf "libfabric_$version.orig.tar.xz"
cd "$(find . -maxdepth 1 -type d -name 'libfabric*' | head -1)"
{
    ./autogen.sh
    ./configure --prefix="$prefix" --with-cuda="$work/cuda" --enable-cuda-dlopen \
        --enable-shm --enable-tcp --enable-rxm --enable-sockets=no --enable-udp=no \
        --enable-verbs=no --enable-efa=no --enable-psm2=no --enable-psm3=no --enable-opx=no \
        --enable-usnic=no --enable-ucx=no --enable-lpp=no --enable-cxi=no
    make -j"${CARGO_BUILD_JOBS:-2}"
    rm -rf "$prefix"
    make install
} >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; log "build failed"; exit 1; }
# The build's own check: CUDA support is compiled in and libcuda is no DT_NEEDED.
grep -q '^#define HAVE_CUDA 1' config.h || { log "configure did not enable CUDA"; exit 1; }
if readelf -d "$lib" | grep -q 'libcuda'; then
    log "libcuda is a DT_NEEDED of the build (expected dlopen)"
    exit 1
fi
touch "$done_stamp"
log "installed in $prefix"
say "${1:-}"
