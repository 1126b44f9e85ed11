#!/bin/bash
# Packs this machine's `perf` and the shared libraries it needs (all but
# glibc's, libstdc++ and libgcc_s, which the target's newer ones replace)
# into DIR, with a wrapper DIR/perf.sh that runs it from there: for profiling
# on a machine that has no perf (the lent GPU machine), e.g.
#   scripts/carry-perf.sh target/devcarry/perf
#   (there) target/devcarry/perf/perf.sh record -a -F 5000 -e cpu-clock -- CMD
# Only perf sees the packed libraries (the command it runs does not).
set -euo pipefail
dir=${1:?usage: scripts/carry-perf.sh DIR}
perf=$(command -v perf) || { echo "carry-perf: no perf here (apt-get install linux-perf)" >&2; exit 1; }
mkdir -p "$dir/lib"
cp -L "$perf" "$dir/perf.bin"
libs() { ldd "$1" | awk '$3 ~ /^\// {print $3}'; }
keep() { case $(basename "$1") in libc.so.*|libm.so.*|libstdc++.so.*|libgcc_s.so.*|ld-linux*) return 1;; esac; }
for l in $(libs "$perf"); do keep "$l" && cp -L "$l" "$dir/lib/"; done
for l in "$dir"/lib/*; do for d in $(libs "$l"); do [ -e "$dir/lib/$(basename "$d")" ] || { keep "$d" && cp -L "$d" "$dir/lib/"; }; done; done
cat > "$dir/perf.sh" <<'WRAP'
#!/bin/bash
# perf with its own libraries; the profiled command gets the caller's environment.
here=$(cd "$(dirname "$0")" && pwd)
if [ "${1:-}" = record ]; then
  args=(); for a in "$@"; do args+=("$a"); [ "$a" = -- ] && args+=(env "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"); done
  set -- "${args[@]}"
fi
LD_LIBRARY_PATH="$here/lib" exec "$here/perf.bin" "$@"
WRAP
chmod +x "$dir/perf.sh"
du -sh "$dir"
