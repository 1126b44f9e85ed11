#!/usr/bin/env bash
# Builds libfabriclib and runs the KV-cache demo: a prefill and a decode
# process on this machine; extra arguments go to kv_transfer (see --help in
# c_examples/kv_transfer.c), e.g. --provider shm --layers 8.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFABRICLIB_CARGO_PROFILE=release >/dev/null
cmake --build build -j2 --target kv_transfer
exec build/kv_transfer demo "$@"
