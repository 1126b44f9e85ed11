#!/usr/bin/env bash
# The GPU suite and the `gpu` benchmark, on a machine with an NVIDIA GPU and
# its driver (libcuda.so.1). Nothing here needs nvcc: the kernels are PTX
# that the driver compiles.
#
#   scripts/gpu-test.sh                 build here (cargo, cmake), then run
#   scripts/gpu-test.sh --bundle DIR    only build, and copy what runs into DIR
#   scripts/gpu-test.sh --run DIR       run a bundle made elsewhere (a GPU
#                                       machine without Rust: build on a
#                                       compatible-glibc machine, carry DIR)
#
# The bundle carries a libfabric built with CUDA (scripts/libfabric-cuda.sh,
# libfabric-cuda/): the suite runs over the machine's libfabric and over it
# (shm then moves device memory through CUDA IPC), the examples and the
# benchmark over it.
#
# Output: the suite's lines (ok / skipped / FAILED), the C watcher test, and
# the benchmark table; with OUT set, gpu.json and gpu-test.log go there.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-all}
dir=${2:-target/gpu-bundle}

bundle() {
    cargo build --release -p fabriclib-bench -j2
    local t
    t=$(cargo test --release --test gpu --no-run --message-format=json -j2 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "gpu" and m.get("executable"):
        print(m["executable"])' | tail -1)
    # A build directory of its own: the test command's build/ takes the dev
    # profile, and what runs on the GPU machine is measured.
    cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DFABRICLIB_CARGO_PROFILE=release >/dev/null
    cmake --build build-gpu -j2 --target capi_watchers rl_weight_push moe_proxy >/dev/null
    mkdir -p "$dir"
    cp "$t" "$dir/gpu-suite"
    cp target/release/fabriclib-bench build-gpu/capi_watchers build-gpu/rl_weight_push build-gpu/moe_proxy "$dir/"
    local soname
    soname=$(readelf -d build-gpu/lib/libfabriclib.so | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    cp -L build-gpu/lib/libfabriclib.so "$dir/$soname"
    mkdir -p "$dir/libfabric-cuda"
    cp -L "$(scripts/libfabric-cuda.sh)" "$dir/libfabric-cuda/libfabric.so.1"
    # hwloc (topology) is a run-time dependency; the GPU machine may lack it.
    cp -L "$(ldconfig -p | sed -n 's/.*libhwloc.so.15 .*=> //p' | head -1)" "$dir/"
    # Without debug info the bundle stays well under what a device run carries.
    strip "$dir/gpu-suite" "$dir/fabriclib-bench" 2>/dev/null || true
    echo "bundle in $dir: $(du -sh "$dir" | cut -f1)"
}

run() {
    local out=${OUT:-$dir}
    mkdir -p "$out"
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    rm -f /dev/shm/fi_* 2>/dev/null || true
    local cuda_lf=$dir/libfabric-cuda/libfabric.so.1
    {
        echo "== GPU suite, the machine's libfabric"
        FABRICLIB_LIBFABRIC= "$dir/gpu-suite"
        if [ -e "$cuda_lf" ]; then
            echo "== GPU suite, libfabric 2.1 built with CUDA"
            FABRICLIB_LIBFABRIC=$cuda_lf "$dir/gpu-suite"
            export FABRICLIB_LIBFABRIC=$cuda_lf
        fi
        echo "== C watchers"
        "$dir/capi_watchers"
        echo "== cuda_kv_proxy and moe_proxy_gpu (c_examples/*.cu)"
        if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
            local nvcc so tmp=${TMPDIR:-/tmp}
            nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
            so=$(basename "$(ls "$dir"/libfabriclib.so.* | head -1)")
            for ex in cuda_kv_proxy moe_proxy_gpu; do
                "$nvcc" -O2 -std=c++17 -arch=native -Iinclude "c_examples/$ex.cu" -L"$dir" -l:"$so" -o "$tmp/$ex"
            done
            # Under MPS where there is one: the processes' kernels then run at once.
            local mps=0
            if command -v nvidia-cuda-mps-control >/dev/null; then
                export CUDA_MPS_PIPE_DIRECTORY=$tmp/fabriclib-mps CUDA_MPS_LOG_DIRECTORY=$tmp/fabriclib-mps-log
                mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
                nvidia-cuda-mps-control -d && mps=1 && echo "(under MPS)"
            fi
            "$tmp/cuda_kv_proxy" demo
            echo "== moe_proxy_gpu: EP 2, 4 and 8, decode (128 tokens) and prefill (4096 tokens)"
            for ep in 2 4 8; do
                "$tmp/moe_proxy_gpu" demo --ep "$ep" --steps "${MOE_STEPS:-1000}" --json "$out/moe-gpu-ep$ep-decode.json"
            done
            "$tmp/moe_proxy_gpu" demo --ep 8 --tokens 4096 --steps "${MOE_PREFILL_STEPS:-100}" --json "$out/moe-gpu-ep8-prefill.json"
            if [ $mps = 1 ]; then echo quit | nvidia-cuda-mps-control; fi
        else
            echo "skipped: no nvcc"
        fi
        echo "== fabriclib-bench gpu"
        "$dir/fabriclib-bench" gpu --json "$out/gpu.json" ${GPU_BENCH_ARGS:-}
    } 2>&1 | tee "$out/gpu-test.log"
}

case "$mode" in
    --bundle) bundle ;;
    --run) run ;;
    all) bundle && run ;;
    *) echo "usage: $0 [--bundle DIR | --run DIR]" >&2; exit 2 ;;
esac
