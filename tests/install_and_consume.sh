#!/usr/bin/env bash
# Installs fabriclib into a staging prefix, then builds and runs c_examples
# against it twice: with find_package(fabriclib) and with pkg-config; checks
# that the installed fabriclib-bench and fabriclib-info run.
# Usage: install_and_consume.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
stage=$(mktemp -d "${TMPDIR:-/tmp}/fabriclib-stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
cmake --install "$build" --prefix "$stage/usr" >/dev/null
lib=$(ls -d "$stage"/usr/lib*/ | head -1)
test -f "$stage/usr/include/fabriclib.h"
test -f "$stage/usr/include/fabriclib.hpp"
test -f "$lib/cmake/fabriclib/fabriclibConfig.cmake"
test -f "$lib/cmake/fabriclib/fabriclibConfigVersion.cmake"
test -f "$lib/pkgconfig/fabriclib.pc"
# The real file, its SONAME link and the dev link; the SONAME recorded in the file.
soname=$(objdump -p "$lib"/libfabriclib.so.*.*.* | awk '/SONAME/ {print $2}')
test -L "$lib/$soname" && test -L "$lib/libfabriclib.so"
echo "installed $(basename "$(readlink -f "$lib/libfabriclib.so")"), SONAME $soname"
# CUDA (and any GPU library), libfabric and libibverbs are loaded at run time, never linked: no DT_NEEDED on them.
needed=$(objdump -p "$lib/libfabriclib.so" | awk '/NEEDED/ {print $2}' | tr '\n' ' ')
if echo "$needed" | grep -qiE 'cuda|nvidia|gdr'; then echo "libfabriclib.so needs a GPU library: $needed" >&2; exit 1; fi
# libfabric, rdma-core and hwloc too: the library loads on any glibc machine.
for n in $needed; do
  case "$n" in
    libc.so.*|libgcc_s.so.*|ld-linux*.so.*) ;;
    *) echo "libfabriclib.so needs $n (only libc, libgcc_s and ld are allowed): $needed" >&2; exit 1 ;;
  esac
done
echo "DT_NEEDED: $needed"
# The benchmark is installed and runs from the prefix (a short shm run, bytes verified).
test -x "$stage/usr/bin/fabriclib-bench"
"$stage/usr/bin/fabriclib-bench" --workload single --sizes 64K --provider shm --reps 1 | grep -q "bytes verified: all"
echo "installed fabriclib-bench runs"
test -x "$stage/usr/bin/fabriclib-info"
"$stage/usr/bin/fabriclib-info" --provider shm | grep -q "NIC shm"
echo "installed fabriclib-info runs"

echo "== find_package(fabriclib)"
cmake -S "$src/c_examples" -B "$stage/cm" -DCMAKE_PREFIX_PATH="$stage/usr" >/dev/null
cmake --build "$stage/cm" -j2 >/dev/null
(cd "$stage/cm" && ctest --output-on-failure)
echo "== pkg-config fabriclib"
export PKG_CONFIG_PATH="$lib/pkgconfig"
pkg-config --modversion fabriclib
mkdir -p "$stage/pc"
for ex in hello kv_transfer; do
  cc -O2 -o "$stage/pc/$ex" "$src/c_examples/$ex.c" $(pkg-config --cflags --libs fabriclib)
done
c++ -std=c++17 -O2 -o "$stage/pc/hello_cxx" "$src/c_examples/hello.cpp" $(pkg-config --cflags --libs fabriclib)
export LD_LIBRARY_PATH="$lib"
FABRICLIB_PROVIDER=tcp FABRICLIB_BIND_ADDR=127.0.0.1 "$stage/pc/hello"
FABRICLIB_PROVIDER=tcp FABRICLIB_BIND_ADDR=127.0.0.1 "$stage/pc/hello_cxx"
"$stage/pc/kv_transfer" demo --layers 4 --pages 16 --page-kib 8 --provider tcp --port 18613 | tail -1
echo "== one version everywhere: Cargo.toml, CMake package, .pc, header, library"
cargo_v=$(sed -n 's/^version = "\([0-9.]*\)"$/\1/p' "$src/Cargo.toml" | head -1)
cmake_v=$(sed -n 's/^set(PACKAGE_VERSION "\([0-9.]*\)")$/\1/p' "$lib/cmake/fabriclib/fabriclibConfigVersion.cmake")
pc_v=$(pkg-config --modversion fabriclib)
hdr_v=$(sed -n 's/^#define FABRICLIB_VERSION_STRING "\(.*\)"$/\1/p' "$stage/usr/include/fabriclib.h")
printf '#include <fabriclib.h>\n#include <stdio.h>\nint main(void) { printf("%%s %%u %%u\\n", fabriclib_version(), fabriclib_version_number(), (unsigned)FABRICLIB_VERSION); return 0; }\n' > "$stage/pc/v.c"
cc -o "$stage/pc/v" "$stage/pc/v.c" $(pkg-config --cflags --libs fabriclib)
read -r lib_v lib_n hdr_n < <("$stage/pc/v")
echo "Cargo $cargo_v, CMake $cmake_v, pkg-config $pc_v, header $hdr_v ($hdr_n), library $lib_v ($lib_n), SONAME $soname"
IFS=. read -r ma mi pa <<< "$cargo_v"
test -n "$cargo_v" && test "$cmake_v" = "$cargo_v" && test "$pc_v" = "$cargo_v" && test "$hdr_v" = "$cargo_v" && test "$lib_v" = "$cargo_v"
test "$lib_n" = "$hdr_n" && test "$lib_n" = "$((ma * 1000000 + mi * 1000 + pa))"
if [ "$ma" = 0 ]; then test "$soname" = "libfabriclib.so.0.$mi"; else test "$soname" = "libfabriclib.so.$ma"; fi
echo "install_and_consume: 4 passed, 0 failed"
