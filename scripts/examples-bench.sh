#!/usr/bin/env bash
# The figures docs/examples.md quotes for the application examples: each
# run measures the engine against raw libfabric in the same run (the
# examples' raw passes) and writes its JSON.
#
#   scripts/examples-bench.sh rl  [DIR]    rl_weight_push: dense and MoE, 2x2 and 4x4, shm and tcp
#   scripts/examples-bench.sh moe [DIR]    moe_proxy: EP 2, 4 and 8, decode (1000 steps) and
#                                          prefill (4096 tokens, MOE_PREFILL_STEPS: 100), shm and tcp
#
# DIR holds the binaries (default: build/; scripts/gpu-test.sh --bundle puts
# release builds of them in its bundle). JSON goes to $OUT (default
# bench-results/examples).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: $0 rl|moe [DIR]}
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
                    --provider "$p" --idle "$idle" --json "$out/rl-$model-$tr-$p.json" | grep -v "^version "
            done
        done
    done
    ;;
moe)
    for p in shm tcp; do
        for ep in 2 4 8; do
            idle=block; (( ncpu >= 2 * ep )) && idle=spin
            echo "== moe_proxy EP $ep decode $p (idle $idle)"
            "$dir/moe_proxy" demo --ep "$ep" --steps "${MOE_STEPS:-1000}" --provider "$p" --idle "$idle" \
                --json "$out/moe-ep$ep-decode-$p.json" | tail -n +2
        done
        echo "== moe_proxy EP 8 prefill $p"
        "$dir/moe_proxy" demo --ep 8 --tokens 4096 --steps "${MOE_PREFILL_STEPS:-100}" --warmup 5 --provider "$p" \
            --idle "$( (( ncpu >= 16 )) && echo spin || echo block)" --json "$out/moe-ep8-prefill-$p.json" | tail -n +2
    done
    ;;
*) echo "usage: $0 rl|moe [DIR]" >&2; exit 2 ;;
esac
