#!/usr/bin/env bash
# Runs every test: formatting and clippy lints, Rust unit tests and parser fuzzing, the multi-process
# loopback tests over tcp;ofi_rxm and shm (1 and 2 domains; shm's large
# writes also without CMA and split), a short
# fabriclib-bench run (JSON, plot, byte verification), a loopback subset
# over libfabric 2.1 built with CUDA (scripts/libfabric-cuda.sh), the C API tests
# (also under valgrind memcheck),
# the install-and-consume test (find_package + pkg-config), the Python
# package (wheels, auditwheel, pytest: scripts/test-python.sh), the header
# drift check, and the verbs tests on real verbs (Soft-RoCE in a QEMU VM:
# scripts/test-verbs.sh). Installs the apt packages it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
# shm endpoints of processes killed earlier leave files behind.
cleanup() { find /dev/shm -maxdepth 1 -user "$(id -u)" -regex '.*/[0-9]+:[0-9]+:[0-9]+' -delete 2>/dev/null || true; }
trap cleanup EXIT
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}

echo "== cargo fmt --check, cargo clippy -D warnings; header drift: include/fabriclib.h must match cbindgen's output"
cargo fmt --check
# With gen-header, the build script writes the header as it goes: the drift
# check costs no build of its own.
cargo clippy --locked --workspace --all-targets --features gen-header -- -D warnings
git diff --exit-code -- include/fabriclib.h
echo "lint: 2 passed, 0 failed"
echo "header: 1 passed, 0 failed"

echo "== cargo test (unit tests, parser fuzzing, multi-process loopback, fabriclib-bench smoke run)"
cargo test --locked --workspace

echo "== shm's large writes: a dead peer stalls no other without CMA too, and with the split of 0.3 (FABRICLIB_SHM_SPLIT=always)"
large="dead_peer_with_large_imm_writes kill9_mid_paged"
FABRICLIB_TEST_PROVIDERS=shm FI_SHM_DISABLE_CMA=1 cargo test --locked --test loopback -- $large
FABRICLIB_TEST_PROVIDERS=shm FABRICLIB_SHM_SPLIT=always cargo test --locked --test loopback -- $large

echo "== libfabric 2.1 built with CUDA (scripts/libfabric-cuda.sh, cached): a loopback subset, one test per request kind and failure path, asking for device memory and not"
# On this GPU-less machine shm then opens on its FI_HMEM entry (CMA off,
# API 1.20) with device memory asked for: the host paths of that
# configuration are the ones a GPU machine runs.
lf21=$(scripts/libfabric-cuda.sh)
subset="single_writes bundled_writes_end_one_by_one paged_writes_10000 scatter_and_barrier send_recv_round_trips
  receive_pool_on_worker delivered_means_counted deadline_with_stopped_peer kill9_mid_paged
  dead_peer_with_large_imm_writes cancel_storm destroy_with_10000_pending bad_input manual_progress"
for mode in off on; do
  echo "-- FABRICLIB_DEVICE_MEMORY=$mode"
  FABRICLIB_LIBFABRIC=$lf21 FABRICLIB_DEVICE_MEMORY=$mode FABRICLIB_TEST_NICS=1 cargo test --locked --test loopback -- $subset
done
FABRICLIB_LIBFABRIC=$lf21 cargo test --locked --lib -- fabric::tests

echo "== C API tests and install test (ctest)"
# The library and tools as `cargo test` built them (dev profile): no second,
# release build of the crate here (scripts/demo.sh and the benchmarks build
# release).
export FABRICLIB_CARGO_PROFILE=dev
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFABRICLIB_CARGO_PROFILE=dev >/dev/null
cmake --build build -j2
(cd build && ctest --output-on-failure)

echo "== Python: wheels, auditwheel, pytest (two processes over tcp and shm)"
scripts/test-python.sh


echo "== verbs: Soft-RoCE (rdma_rxe) in a VM, prebuilt binaries"
scripts/test-verbs.sh
