#!/usr/bin/env bash
# Installs what building and testing fabriclib needs, if it is missing
# (Debian 12 / Ubuntu 24.04; run as root or with sudo available).
set -euo pipefail
pkgs=(libfabric-dev libfabric-bin libibverbs-dev libclang-dev libhwloc15 cmake pkg-config gcc g++ clang make binutils valgrind iproute2 python3 python3-venv)
# `deps.sh test`: also gdb, with which the loopback suite's watchdog shows
# where a hung test's threads are.
[ "${1:-}" = test ] && pkgs+=(gdb)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo (Rust >= 1.85) is required: https://rustup.rs" >&2; exit 1; }
# The test command checks formatting and lints.
for c in rustfmt clippy; do
  cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1 || rustup component add "$c"
done
