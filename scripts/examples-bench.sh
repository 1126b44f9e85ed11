#!/usr/bin/env bash
# The figures docs/examples.md quotes for the application examples: each
# run measures the engine against raw libfabric in the same run (the
# examples' raw passes) and writes its JSON.
#
#   scripts/examples-bench.sh rl  [DIR]    rl_weight_push: dense and MoE, 2x2 and 4x4, shm and tcp
#
# DIR holds the binaries (default: build/; scripts/gpu-test.sh --bundle puts
# release builds of them in its bundle). JSON goes to $OUT (default
# bench-results/examples).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: $0 rl [DIR]}
dir=${2:-build}
out=${OUT:-bench-results/examples}
mkdir -p "$out"
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ncpu=$(nproc)
case "$what" in
rl)
    # Spinning workers where every process has cores of its own; else they sleep when idle.
    for p in shm tcp; do
        for model in dense moe; do
            for tr in 2x2 4x4; do
                t=${tr%x*} r=${tr#*x}
                idle=block; (( ncpu >= 4 * (t + r) )) && idle=spin
                echo "== rl_weight_push $model $tr $p (idle $idle)"
                "$dir/rl_weight_push" demo --model "$model" --trainers "$t" --ranks "$r" --scale 4 --versions 5 \
                    --provider "$p" --idle "$idle" --json "$out/rl-$model-$tr-$p.json" | grep -v '^version'
            done
        done
    done
    ;;
*) echo "usage: $0 rl [DIR]" >&2; exit 2 ;;
esac
