#!/usr/bin/env bash
# Runs fabriclib-bench N times as separate processes (fresh engines, fresh
# connections, fresh memory each time) and reports, per row, the median and
# the spread (min..max) of the engine's and the raw baseline's throughput and
# of their ratio over the N runs. For rows whose result depends on the run
# (tcp's 64 KiB pages are bimodal per process run: about 2 or about 4 GB/s,
# engine and raw alike), one run's number says little; the median of N does.
#
#   scripts/bench-runs.sh 9 --workload paged --sizes 64K --pages 100 --provider 'tcp;ofi_rxm'
#
# The per-run JSON reports go to $OUT (default target/bench-runs).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: $0 RUNS [fabriclib-bench options]}
shift
out=${OUT:-target/bench-runs}
mkdir -p "$out"
cargo build --release -p fabriclib-bench -j2 >/dev/null 2>&1 || cargo build --release -p fabriclib-bench -j2
for i in $(seq 1 "$n"); do
    ./target/release/fabriclib-bench "$@" --json "$out/run-$i.json" >/dev/null
    echo "run $i of $n done" >&2
done
python3 - "$out" "$n" <<'PY'
import json, statistics, sys
out, n = sys.argv[1], int(sys.argv[2])
rows = {}
for i in range(1, n + 1):
    for r in json.load(open(f"{out}/run-{i}.json"))["rows"]:
        if "gbps" not in r.get("engine", {}):
            continue  # latency rows
        key = (r["workload"], r["provider"], r["pages"], r["size"])
        rows.setdefault(key, []).append((r["engine"]["gbps"]["median"], r["raw"]["gbps"]["median"], r["ratio"]))
def spread(v):
    return f"{statistics.median(v):7.3f} ({min(v):.3f}..{max(v):.3f})"
print(f"{n} process runs; median (min..max) over the runs of each run's median")
print(f"{'row':<34} {'engine GB/s':>24} {'raw GB/s':>24} {'engine/raw':>24}")
for (w, p, pages, size), v in rows.items():
    name = f"{w} {p} {pages} x {size // 1024}KiB"
    e, r, q = zip(*v)
    print(f"{name:<34} {spread(e):>24} {spread(r):>24} {spread(q):>24}")
PY
