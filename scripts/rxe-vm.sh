#!/bin/bash
# scripts/rxe-vm.sh -- runs one command inside a throwaway QEMU VM with
# Soft-RoCE: the kernel's rdma_rxe driver gives real verbs (RC, UD, write
# with immediate) on a machine without an RDMA NIC, as CI is. fabriclib's
# verbs tests run through it: build on the host, run the prebuilt binaries
# in the VM (never compile in it: under TCG emulation it is 10-50x slower).
#
#   usage:  scripts/rxe-vm.sh [--] COMMAND [ARGS...]
#           scripts/rxe-vm.sh --setup-only    # packages, kernel and initramfs cache
#
# The VM boots Debian bookworm's stock kernel (linux-image-6.1.0-*-amd64;
# downloaded and unpacked into the cache, never installed), mounts the
# host's / read-only over 9p with a tmpfs overlay, loads rdma_rxe and adds
# `rxe0` on lo (GID index 1 is ::ffff:127.0.0.1) -- or, with
# RXEVM_DEVICES=2, also `rxe1` on a dummy interface (MTU 9000, an address
# that exists only in the VM), so that an engine has two verbs NICs. The
# command runs as root in the same directory with the same exported
# environment; what it writes is thrown away except under $RXEVM_SHARE_RW.
# The guest has no network device: nothing leaves the VM.
#
# Knobs (environment):
#   RXEVM_CACHE    kernel + initramfs cache            (/tmp/fabriclib-rxevm)
#   RXEVM_ACCEL    tcg | kvm | auto (kvm only where the CPU shows vmx/svm)
#   RXEVM_SMP      guest vCPUs                         (nproc of the host)
#   RXEVM_MEM      guest RAM in MiB                    (4096)
#   RXEVM_TIMEOUT  seconds before the VM is killed     (1800)
#   RXEVM_CPU      QEMU -cpu model under TCG           (max)
#   RXEVM_DEVICES  1 (rxe0 on lo) | 2 (and rxe1 on a dummy netdev)   (1)
#   RXEVM_SHARE_RW host dir mounted read-write at the same path (unset)
#   RXEVM_DEBUG=1  kernel messages, boot timings, the guest's dmesg
#
# Exit code: the command's; 124 if rdma_rxe could not be set up; 125 if the
# VM gave none (boot failure, timeout, crash).
#
# Measured on a 2-core CI-like machine (docs: feasibility of Soft-RoCE in a
# VM): ~45-60 s to install and prepare on a fresh machine, 13-15 s per boot;
# rxe under TCG moves tens of MB/s with 0.05-10 ms round trips, so tests
# size transfers in MB and deadlines in seconds.
set -euo pipefail

CACHE=${RXEVM_CACHE:-/tmp/fabriclib-rxevm}
MEM=${RXEVM_MEM:-4096}
SMP=${RXEVM_SMP:-$(nproc)}
TIMEOUT=${RXEVM_TIMEOUT:-1800}
DEVICES=${RXEVM_DEVICES:-1}
ACCEL=${RXEVM_ACCEL:-auto}
DEBUG=${RXEVM_DEBUG:-0}
SHARE_RW=${RXEVM_SHARE_RW:-}

log() { echo "rxevm: $*" >&2; }

# ---------------------------------------------------------------- host setup
# ibverbs-providers holds rxe's user-space driver; ibverbs-utils
# (ibv_devinfo) is for looking around when something fails.
PKGS=(qemu-system-x86 busybox-static kmod cpio xz-utils iproute2 procps
      rdma-core ibverbs-utils ibverbs-providers)

install_packages() {
    local missing=() p
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # bookworm's qemu-system-x86 (7.2) makes apt remove a newer qemu-utils (e.g. a
    # 10.x backport that provides qemu-img); put bookworm's qemu-utils back then.
    local had_qemu_img; had_qemu_img=$(command -v qemu-img || true)
    apt-get update -qq -o DPkg::Lock::Timeout=600 >&2
    apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >&2
    if [ -n "$had_qemu_img" ] && ! command -v qemu-img >/dev/null; then
        apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends qemu-utils >&2
    fi
}

# Debian kernel: downloaded and unpacked only (not installed: no initramfs-tools,
# no postinst hooks), then depmod'ed in place.
prepare_kernel() {
    if [ -f "$CACHE/kver" ] && [ -f "$CACHE/vmlinux" ] && [ -f "$CACHE/initrd.gz" ]; then
        KVER=$(cat "$CACHE/kver"); return 0
    fi
    mkdir -p "$CACHE"
    local kpkg
    kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
           sed -n '/^ *Depends: linux-image-[0-9][^ ]*-amd64$/{s/^ *Depends: //p;q}') || true
    if [ -z "$kpkg" ]; then apt-get update -qq >&2
        kpkg=$(apt-cache depends linux-image-amd64 |
               sed -n '/^ *Depends: linux-image-[0-9][^ ]*-amd64$/{s/^ *Depends: //p;q}') || true
    fi
    [ -n "$kpkg" ] || { log "cannot resolve linux-image-amd64"; exit 125; }
    KVER=${kpkg#linux-image-}
    log "fetching $kpkg"
    rm -rf "$CACHE/kernel" "$CACHE"/*.deb
    (cd "$CACHE" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >&2)
    dpkg-deb -x "$CACHE"/linux-image-*.deb "$CACHE/kernel"
    rm -f "$CACHE"/linux-image-*.deb
    depmod -b "$CACHE/kernel" "$KVER"

    # Uncompressed vmlinux, booted through its PVH entry point: skips SeaBIOS's
    # real-mode loader and the in-guest xz decompression (~7 s under TCG).
    local vmlinuz=$CACHE/kernel/boot/vmlinuz-$KVER off
    off=$(LC_ALL=C grep -m1 -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$vmlinuz" | LC_ALL=C sed -n '1s/:.*//p')
    xz -dc --single-stream < <(tail -c +$((off + 1)) "$vmlinuz") > "$CACHE/vmlinux.tmp"
    [ "$(head -c4 "$CACHE/vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] ||
        { log "could not extract vmlinux from $vmlinuz"; exit 125; }
    mv "$CACHE/vmlinux.tmp" "$CACHE/vmlinux"

    build_initramfs
    echo "$KVER" > "$CACHE/kver"
}

# Tiny initramfs: static busybox + the modules needed to mount a 9p root with an
# overlay (all =m in Debian's config), and an /init that switch_roots into it.
build_initramfs() {
    local ir=$CACHE/initramfs m
    rm -rf "$ir"; mkdir -p "$ir"/{bin,dev,proc,sys,lower,rw,newroot}
    cp /bin/busybox "$ir/bin/busybox"
    : > "$ir/modules.list"
    for m in $(for mod in virtio_pci 9pnet_virtio 9p overlay; do
                 modprobe -d "$CACHE/kernel" -S "$KVER" --show-depends "$mod"
               done | awk '$1=="insmod"{print $2}' | awk '!seen[$0]++'); do
        cp "$m" "$ir/bin/"; echo "/bin/$(basename "$m")" >> "$ir/modules.list"
    done
    cat > "$ir/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.list); do insmod "$m" || echo "rxevm-init: insmod $m failed"; done
run=; for a in $(cat /proc/cmdline); do case "$a" in rxevm.run=*) run=${a#rxevm.run=};; esac; done
fail() { echo "rxevm-init: $*"; echo o > /proc/sysrq-trigger; sleep 10; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /lower || fail "9p root mount failed"
mount -t tmpfs -o mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || fail "overlay mount failed"
mkdir -p "/newroot$run"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 rxevmrun "/newroot$run" || fail "run dir mount failed"
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /bin/bash "$run/stage2.sh"
EOF
    chmod +x "$ir/init"
    (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1 > "$CACHE/initrd.gz.tmp")
    mv "$CACHE/initrd.gz.tmp" "$CACHE/initrd.gz"
}

install_packages
prepare_kernel
[ "${1:-}" = "--setup-only" ] && { log "setup done (kernel $KVER, cache $CACHE)"; exit 0; }
[ "${1:-}" = "--" ] && shift
[ $# -ge 1 ] || { echo "usage: $0 [--] COMMAND [ARGS...]" >&2; exit 2; }

if [ "$ACCEL" = auto ]; then
    if [ -w /dev/kvm ] && grep -qw -E 'vmx|svm' /proc/cpuinfo; then ACCEL=kvm; else ACCEL=tcg; fi
fi
case $ACCEL in
    kvm) ACCEL_ARGS=(-accel kvm -cpu host) ;;
    tcg) ACCEL_ARGS=(-accel tcg,thread=multi -cpu "${RXEVM_CPU:-max}") ;;
    *) log "bad RXEVM_ACCEL=$ACCEL"; exit 2 ;;
esac

# ---------------------------------------------------------------- per-run dir
RUN=$(mktemp -d /tmp/rxevm-run.XXXXXX)
QPID=
cleanup() { [ -n "$QPID" ] && kill "$QPID" 2>/dev/null; rm -rf "$RUN"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# The command, with the caller's cwd and exported environment.
{
    echo '#!/bin/bash'
    export -p | grep -v -E '^declare -x (BASH[A-Z_]*|SHELLOPTS|PWD|OLDPWD|SHLVL|_|TERM)(=|$)' || true
    printf 'cd %q || exit 126\n' "$PWD"
    printf 'exec'; printf ' %q' "$@"; printf '\n'
} > "$RUN/cmd.sh"

{
    echo '#!/bin/bash'
    echo '# second stage, runs as PID 1 on the overlay root'
    printf 'RUN=%q KVER=%q CACHE=%q DEVICES=%q DEBUG=%q SHARE_RW=%q\n' \
        "$RUN" "$KVER" "$CACHE" "$DEVICES" "$DEBUG" "$SHARE_RW"
} > "$RUN/stage2.sh"
cat >> "$RUN/stage2.sh" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
t() { [ "$DEBUG" != 1 ] || echo "rxevm: t=$(cut -d' ' -f1 /proc/uptime)s $*"; }
t stage2 start
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=0755 tmpfs /run
[ "$DEBUG" = 1 ] || dmesg -n 1
stty -F /dev/console -opost 2>/dev/null   # no \n -> \r\n on the serial console
hostname rxevm
mkdir -p "/lib/modules/$KVER"
mount --bind "$CACHE/kernel/lib/modules/$KVER" "/lib/modules/$KVER"
if [ -n "$SHARE_RW" ]; then
    mkdir -p "$SHARE_RW"
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 rxevmrw "$SHARE_RW"
fi
ulimit -l unlimited
t mounts done
ip link set lo up
setup_rxe() {
    modprobe rdma_rxe && t rdma_rxe loaded && modprobe rdma_ucm || return 1
    t rdma_ucm loaded
    rdma link add rxe0 type rxe netdev lo || return 1
    if [ "$DEVICES" = 2 ]; then
        # A second device on a dummy interface with a guest-only address
        # (the VM has no NIC); MTU 9000 gives rxe an MTU of 4096.
        ip link add rxedummy0 type dummy && ip addr add 192.0.2.1/32 dev rxedummy0 &&
            ip link set rxedummy0 mtu 9000 up && rdma link add rxe1 type rxe netdev rxedummy0 || return 1
    fi
    t rxe devices added
    local n=$((DEVICES - 1))
    for i in $(seq 50); do [ -e "/dev/infiniband/uverbs$n" ] && return 0; sleep 0.1; done
    return 1
}
if setup_rxe; then
    t running command
    # through a pipe, so that the command sees no tty (as in CI) and stderr is merged
    bash "$RUN/cmd.sh" </dev/null 2>&1 | cat
    rc=${PIPESTATUS[0]}
else
    echo "rxevm: rdma_rxe setup failed"; dmesg | tail -30; rc=124
fi
echo "$rc" > "$RUN/exit_code"
if [ "$DEBUG" = 1 ] || [ "$rc" != 0 ]; then dmesg > "$RUN/dmesg" 2>/dev/null; fi
sync
# Leave through QEMU's isa-debug-exit port (no kernel shutdown chatter on the
# console); fall back to a sysrq power-off.
printf '\0' | dd of=/dev/port bs=1 seek=244 count=1 conv=notrunc status=none 2>/dev/null
echo o > /proc/sysrq-trigger
{ sleep 30; } 2>/dev/null   # power-off is asynchronous; the 9p root goes away under us
EOF

# ---------------------------------------------------------------- boot
APPEND="console=ttyS0 panic=-1 rdinit=/init rxevm.run=$RUN"
[ "$DEBUG" = 1 ] || APPEND="$APPEND quiet loglevel=1"
FSDEVS=(-fsdev "local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap"
        -device virtio-9p-pci,fsdev=fsroot,mount_tag=hostroot
        -fsdev "local,id=fsrun,path=$RUN,security_model=none"
        -device virtio-9p-pci,fsdev=fsrun,mount_tag=rxevmrun)
if [ -n "$SHARE_RW" ]; then
    FSDEVS+=(-fsdev "local,id=fsrw,path=$SHARE_RW,security_model=none"
             -device virtio-9p-pci,fsdev=fsrw,mount_tag=rxevmrw)
fi
[ "$DEBUG" = 1 ] && log "accel=$ACCEL smp=$SMP mem=${MEM}M kernel=$KVER run=$RUN"
timeout -k 5 "$TIMEOUT" qemu-system-x86_64 "${ACCEL_ARGS[@]}" -smp "$SMP" -m "$MEM" \
    -nodefaults -no-user-config -display none -nic none -no-reboot \
    -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
    -serial stdio -kernel "$CACHE/vmlinux" -initrd "$CACHE/initrd.gz" -append "$APPEND" \
    "${FSDEVS[@]}" </dev/null &
QPID=$!
wait "$QPID" || true
QPID=
if [ -f "$RUN/exit_code" ]; then
    rc=$(cat "$RUN/exit_code")
else
    log "VM exited without an exit code (boot failure or timeout after ${TIMEOUT}s)"; rc=125
fi
if [ -f "$RUN/dmesg" ] && { [ "$DEBUG" = 1 ] || [ "$rc" = 124 ]; }; then
    log "guest dmesg (tail):"; tail -40 "$RUN/dmesg" >&2
fi
exit "$rc"
