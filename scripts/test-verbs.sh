#!/usr/bin/env bash
# The verbs suites on real verbs: builds the test binaries (and
# fabriclib-info) on the host, then runs them in one VM with Soft-RoCE
# (scripts/rxe-vm.sh) and two devices — rxe0 on the guest's lo, rxe1 on a
# dummy interface — so that an engine of two NICs puts each on its own
# device. In the VM a missing device is a failure (FABRICLIB_VERBS_REQUIRED=1).
# Runs: tests/verbs.rs (one NIC), the two-process C API test, the KV-cache
# demo (c_examples/kv_transfer.c) and fabriclib-bench's smoke suite (engine
# against bare verbs) on verbs, then the whole loopback suite
# (tests/loopback) on the verbs backend with 2 NICs — one per device — and a
# shorter soak (rxe under emulation moves tens of MB/s; the 1-NIC round adds
# ~2 min: FABRICLIB_TEST_NICS=1,2 scripts/test-verbs.sh runs it too).
# scripts/test.sh runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2}
scripts/rxe-vm.sh --setup-only
binary() {
  cargo test --locked --test "$1" --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}
verbs=$(binary verbs)
loopback=$(binary loopback)
for b in "$verbs" "$loopback"; do [ -x "$b" ] || { echo "test-verbs: a test binary is missing" >&2; exit 1; }; done
# The tools in the cargo profile asked for (scripts/test.sh: dev, what
# `cargo test` built; release by default).
profile=${FABRICLIB_CARGO_PROFILE:-release}
tools=target/$([ "$profile" = dev ] && echo debug || echo "$profile")
cargo build --locked --profile "$profile" -p fabriclib-bench
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFABRICLIB_CARGO_PROFILE="$profile" >/dev/null
cmake --build build -j2 --target capi_two_process kv_transfer >/dev/null
start=$(date +%s)
FABRICLIB_VERBS_REQUIRED=1 FABRICLIB_TEST_PROVIDERS=verbs FABRICLIB_TEST_NICS=${FABRICLIB_TEST_NICS:-2} \
FABRICLIB_SOAK_OPS=${FABRICLIB_VERBS_SOAK_OPS:-6000} \
RXEVM_DEVICES=2 scripts/rxe-vm.sh bash -c "
  set -e
  $tools/fabriclib-info --verbs-only
  echo '== tests/verbs.rs'
  $verbs --test-threads 1 --nocapture 2>&1
  echo '== the C API between two processes, and the KV-cache demo, on verbs'
  build/capi_two_process verbs
  build/kv_transfer demo --provider verbs --layers 4 --pages 64
  echo '== fabriclib-bench on verbs against bare verbs (smoke: every row runs, every byte verified)'
  $tools/fabriclib-bench --suite smoke --provider verbs
  echo '== tests/loopback on the verbs backend'
  $loopback 2>&1
"
echo "verbs VM suites: $(( $(date +%s) - start )) s including the boot"
