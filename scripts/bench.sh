#!/usr/bin/env bash
# Builds fabriclib-bench and runs the standard suite (engine vs. raw libfabric
# over tcp;ofi_rxm and shm, under 5 minutes on 2 cores); writes
# bench-results/quick.json and bench-results/quick.svg. Extra arguments go to
# fabriclib-bench (see --help), e.g. --suite full or --provider shm.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cargo build --release --locked -p fabriclib-bench
mkdir -p bench-results
exec target/release/fabriclib-bench --suite quick --json bench-results/quick.json --plot bench-results/quick.svg "$@"
