#!/usr/bin/env bash
# The verbs suite on real verbs: builds the verbs test binary (and
# fabriclib-info) on the host, then runs them inside a VM with Soft-RoCE
# (scripts/rxe-vm.sh: rdma_rxe on the guest's lo), where a missing device is
# a failure (FABRICLIB_VERBS_REQUIRED=1). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
scripts/rxe-vm.sh --setup-only
bin=$(cargo test --locked --test verbs --no-run --message-format=json 2>/dev/null |
      sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$bin" ] || { echo "test-verbs: no verbs test binary" >&2; exit 1; }
cargo build --locked --release -p fabriclib-bench --bin fabriclib-info
start=$(date +%s)
FABRICLIB_VERBS_REQUIRED=1 scripts/rxe-vm.sh bash -c "
  target/release/fabriclib-info --verbs-only &&
  $bin --test-threads 1 2>&1
"
echo "verbs VM suite: $(( $(date +%s) - start )) s including the boot"
