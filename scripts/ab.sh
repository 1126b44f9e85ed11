#!/bin/bash
# Alternates two fabriclib-bench builds, PAIRS times (the order swaps every
# pair, so neither always runs first), with the same arguments, and prints
# each run's rows prefixed with its build and pair:
#   scripts/ab.sh OLD_BENCH NEW_BENCH 10 --workload host-paged --reps 5
# (build the old one from a worktree: git worktree add /tmp/old REV &&
#  (cd /tmp/old && CARGO_TARGET_DIR=$PWD/target/oldbuild cargo build --release -p fabriclib-bench)).
# Compare within pairs: the machine drifts between runs.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: scripts/ab.sh OLD NEW PAIRS [fabriclib-bench args...]" >&2; exit 2; }
old=$1 new=$2 pairs=$3; shift 3
for i in $(seq 1 "$pairs"); do
  order=("$old" "$new"); names=(old new)
  if [ $((i % 2)) = 0 ]; then order=("$new" "$old"); names=(new old); fi
  for k in 0 1; do
    "${order[$k]}" "$@" 2>/dev/null | grep -E '^(single|paged|scatter|imm|sendrecv|barrier|host-[a-z]+) ' |
      sed "s/^/${names[$k]} $i  /"
  done
done
