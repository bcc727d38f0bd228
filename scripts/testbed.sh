#!/usr/bin/env bash
# Run a script in the client guest of the two-guest soft-RoCE testbed.
#
#   scripts/testbed.sh [options] SCRIPT [ARGS...]
#
# Boots a server guest (knfsd + the in-tree C svcrdma on port 20049, exporting
# a tmpfs) and a client guest from the cached test kernel, joined by a private
# QEMU socket link on 127.0.0.1 (198.18.0.0/15, 2001:db8::/32). SCRIPT runs in
# the client guest with the repository as its working directory; its output
# is printed and its exit status returned. Both guests are killed when this
# command ends, whatever the reason.
#
# While the script runs, the client guest may ask the host for faults only
# QEMU can make (selftests/lib.sh host_cmd): "link server|client on|off"
# sets that guest's virtual NIC link up or down through its QEMU monitor.
#
# Options:
#   --client-module ours|c  autoload target of proto=rdma in the client:
#                           rpcrdma_rs (default) or the in-tree C rpcrdma
#   --server-module ours|c  what serves NFS over RDMA in the server guest:
#                           the in-tree C svcrdma (default) or rpcrdma_rs
#                           loaded with server=1 (its server side; the
#                           server guest then boots the client's kernel)
#   --link rxe|siw          the RDMA device both guests make on their NIC:
#                           soft-RoCE (rdma_rxe, default) or soft-iWARP
#                           (siw, whose RDMA Read sinks must be registered)
#   --timeout SECONDS       kill everything after this long (default 900)
#   --smp N                 vCPUs per guest (default 1)
#   --count-insns           count each guest's instructions (QEMU plugin
#                           scripts/insn_count.c): the running totals are
#                           in /run/share/insns.server and insns.client,
#                           readable from either guest; those of an address
#                           range too, once written to insns.ROLE.range
#   --count-kernel-blocks   --count-insns, and also count every kernel
#                           block's runs from boot on, for an instruction
#                           profile of the whole kernel (insns.ROLE.blocks,
#                           written on request: scripts/insn_count.c)
#   --keep                  keep the run directory even on success
#
# RDMARS_SERVER_LINE=6.12|7.3 boots the server guest from that line's cached
# test kernel instead of the client's: a mixed testbed, to tell a client
# fault from a server one (the server needs nothing of ours).
# RDMARS_SERVER_KDIR=DIR boots it from the kernel build tree DIR (a vmlinux
# and a modroot, as scripts/build-kernel.sh leaves them): a patched server.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

client_module=ours server_module=c rdma_link=rxe timeout=900 smp=1 keep=0 count_insns=0 kernel_blocks=0
while [ $# -gt 0 ]; do
  case "$1" in
    --client-module) client_module=$2; shift 2 ;;
    --server-module) server_module=$2; shift 2 ;;
    --link) rdma_link=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --count-insns) count_insns=1; shift ;;
    --count-kernel-blocks) count_insns=1 kernel_blocks=1; shift ;;
    --) shift; break ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || die "usage: $0 [options] SCRIPT [ARGS...]"
case "$client_module" in ours|c) ;; *) die "--client-module takes ours or c" ;; esac
case "$server_module" in ours|c) ;; *) die "--server-module takes ours or c" ;; esac
case "$rdma_link" in rxe|siw) ;; *) die "--link takes rxe or siw" ;; esac
if [ "$server_module" = ours ] && [ -n "${RDMARS_SERVER_LINE:-}${RDMARS_SERVER_KDIR:-}" ]; then
  die "--server-module ours runs the module built for the client's kernel: no RDMARS_SERVER_LINE or RDMARS_SERVER_KDIR"
fi
script=$(printf '%q ' "$@")

# RDMARS_KO: the module to test (default: the working tree's build).
ko=${RDMARS_KO:-$repo/rpcrdma_rs.ko}
[ -f "$ko" ] || die "$ko not built: run 'make module' first"
initrd=()
if [ "${RDMARS_KERNEL:-regular}" = stock ]; then
  # Debian's stock kernel, unmodified (scripts/stock-kernel.sh): its
  # vmlinuz, an initramfs that mounts the 9p root, its own modules.
  read -r image initrd_file base_modroot < <(bash "$here/stock-kernel.sh" guest) ||
    die "the stock kernel's guest files are missing"
  kver=$(stock_release)
  initrd=(-initrd "$initrd_file")
  build_hint="run 'scripts/stock-kernel.sh module FILE' and set RDMARS_KO=FILE"
else
  kdir=$(cached_kernel) || true
  [ -n "$kdir" ] || die "no cached kernel: run 'make kernel' first"
  image="$kdir/$(kernel_boot_image)"
  [ -f "$image" ] || die "$image missing: run 'make kernel' (RDMARS_KERNEL=${RDMARS_KERNEL:-regular})"
  kver=$(cat "$kdir/include/config/kernel.release")
  base_modroot=$kdir/modroot
  build_hint="run 'make module' first"
  # Both test kernels are the same release, but a module built for one does
  # not load into the other; the debug kernel's KASAN is what tells them apart.
  # grep reads all of nm's output: with -q it would stop at the first match,
  # and nm, killed by SIGPIPE, would fail the pipeline (pipefail).
  if nm -u "$ko" 2>/dev/null | grep ' __asan_' > /dev/null; then built_for=debug; else built_for=regular; fi
  [ "$built_for" = "${RDMARS_KERNEL:-regular}" ] ||
    die "$ko was built for the $built_for kernel: run 'RDMARS_KERNEL=${RDMARS_KERNEL:-regular} make module' first"
fi
[ "$(modinfo -F vermagic "$ko" | cut -d' ' -f1)" = "$kver" ] || die "$ko is not built for $kver: $build_hint"
server_image=$image server_kver=$kver server_initrd=("${initrd[@]}") server_modroot=
if [ -n "${RDMARS_SERVER_LINE:-}${RDMARS_SERVER_KDIR:-}" ]; then
  # The server boots a regular test kernel, whatever the client boots.
  [ "${RDMARS_KERNEL:-regular}" != debug ] || die "RDMARS_SERVER_LINE and _KDIR are not for the debug kernel"
  if [ -n "${RDMARS_SERVER_KDIR:-}" ]; then
    sdir=$RDMARS_SERVER_KDIR
  else
    sdir=$(RDMARS_KERNEL=regular RDMARS_LINE=$RDMARS_SERVER_LINE cached_kernel) || true
    [ -n "$sdir" ] || die "no cached $RDMARS_SERVER_LINE kernel: run 'make KERNEL=$RDMARS_SERVER_LINE kernel' first"
  fi
  [ -f "$sdir/vmlinux" ] && [ -d "$sdir/modroot" ] || die "$sdir is not a kernel build tree with a modroot"
  server_image=$sdir/vmlinux server_kver=$(cat "$sdir/include/config/kernel.release")
  server_initrd=() server_modroot=$sdir/modroot
  log "server guest: $server_kver from $sdir"
fi

mkdir -p "$CACHE_DIR/runs"
# Keep the ten most recent run directories for post-mortems.
find "$CACHE_DIR/runs" -mindepth 1 -maxdepth 1 -type d | sort -r | tail -n +11 | xargs -r rm -rf
run=$(mktemp -d "$CACHE_DIR/runs/$(date +%Y%m%d-%H%M%S)-XXXX")
mkdir -p "$run/share"

# The guests' module tree: the kernel's modules plus ours, indexed by depmod.
# Hard links into the cache (the stock tree alone is 130 MB): nothing writes
# to those files, and depmod replaces its indexes rather than rewriting them.
cp -al "$base_modroot" "$run/modroot"
mkdir -p "$run/modroot/lib/modules/$kver/extra"
cp "$ko" "$run/modroot/lib/modules/$kver/extra/rpcrdma_rs.ko"
depmod -b "$run/modroot" "$kver"
if [ -n "$server_modroot" ]; then
  cp -al "$server_modroot" "$run/server-modroot"
  depmod -b "$run/server-modroot" "$server_kver"
fi

accel=tcg,thread=multi
plugin=
if [ $count_insns = 1 ]; then
  [ "$smp" = 1 ] || die "--count-insns counts one vCPU per guest (not --smp $smp)"
  plugin=$(insn_plugin)
fi
if [ -e /dev/kvm ] && grep -qE '^(kvm_intel|kvm_amd) ' /proc/modules 2>/dev/null; then accel=kvm; fi

pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ $rc -eq 0 ] && [ $keep = 0 ]; then rm -rf "$run"; else log "run directory kept: $run"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The guests' link: a QEMU stream netdev over a Unix socket in the run
# directory. Not TCP: QEMU 7.2 leaves Nagle's algorithm on for its TCP
# netdevs, and soft-RoCE's pattern (an ACK frame, then the reply frame)
# made every reply wait for the host's delayed ACK, some 40 ms per round
# trip. A Unix socket has no such delay.
link="$run/link.sock"
server4=198.18.0.1 client4=198.18.0.2 server6=2001:db8::1 client6=2001:db8::2

boot() { # role ip4 ip6 mac netdev-args
  local role=$1 image=$image kver=$kver modroot=$run/modroot initrd=("${initrd[@]}")
  if [ "$role" = server ] && [ -n "$server_modroot" ]; then
    image=$server_image kver=$server_kver modroot=$run/server-modroot initrd=("${server_initrd[@]}")
  fi
  local append="console=ttyS0 panic=-1 oops=panic loglevel=7 root=hostroot rootfstype=9p"
  append+=" rootflags=trans=virtio,version=9p2000.L,msize=262144,cache=loose ro"
  append+=" init=$repo/scripts/guest/init.sh RDMARS_ROLE=$role RDMARS_MODROOT=$modroot"
  append+=" RDMARS_IP4=$2 RDMARS_IP6=$3 RDMARS_SERVER4=$server4 RDMARS_SERVER6=$server6"
  append+=" RDMARS_CLIENT4=$client4 RDMARS_CLIENT6=$client6 RDMARS_REPO=$repo RDMARS_KVER=$kver"
  append+=" RDMARS_CLIENT_MODULE=$client_module RDMARS_SERVER_MODULE=$server_module RDMARS_KERNEL=${RDMARS_KERNEL:-regular} RDMARS_SERVER_KVER=$server_kver"
  append+=" RDMARS_LINK=$rdma_link"
  local extra=()
  # Under KVM no translated code runs, so there is nothing to count.
  if [ -n "$plugin" ] && [ "$accel" != kvm ]; then
    extra=(-plugin "$plugin,out=$run/share/insns.$role,range=$run/share/insns.$role.range,kernel=$kernel_blocks")
  fi
  # The script's command line is passed through a file: it may contain spaces.
  qemu-system-x86_64 "${extra[@]}" -machine q35 -accel "$accel" -cpu max -smp "$smp" -m 2G \
    -display none -monitor "unix:$run/$role.mon,server=on,wait=off" -serial "file:$run/$role.console" -no-reboot \
    -kernel "$image" "${initrd[@]}" -append "$append" \
    -fsdev local,id=root,path=/,security_model=none,readonly=on,multidevs=remap \
    -device virtio-9p-pci,fsdev=root,mount_tag=hostroot \
    -fsdev "local,id=share,path=$run/share,security_model=none" \
    -device virtio-9p-pci,fsdev=share,mount_tag=share \
    -netdev "stream,id=n0,$5,addr.type=unix,addr.path=$link" -device "virtio-net-pci,netdev=n0,mac=$4" \
    </dev/null >"$run/$role.qemu.log" 2>&1 &
  pids+=($!)
}

# monitor ROLE COMMAND: one HMP command to ROLE's QEMU; prints its output.
monitor() {
  python3 - "$run/$1.mon" "$2" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
s.connect(sys.argv[1])
def until_prompt():
    buf = b""
    while not buf.rstrip().endswith(b"(qemu)"):
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace")
until_prompt()
s.sendall(sys.argv[2].encode() + b"\n")
out = until_prompt().replace("\r", "").splitlines()
# Drop the echoed command and the closing prompt.
print("\n".join(l for l in out[1:] if not l.startswith("(qemu)")))
PY
}

# host_requests: runs the client guest's pending host requests (hostcmd.ID,
# answered in hostres.ID; see selftests/lib.sh host_cmd).
host_requests() {
  local req id cmd out rc
  for req in "$run/share"/hostcmd.*; do
    case "$req" in *.tmp) continue ;; esac
    [ -e "$req" ] || continue
    id=${req##*/hostcmd.}; cmd=$(cat "$req"); rm -f "$req"
    rc=0
    case "$cmd" in
      "link server on"|"link server off"|"link client on"|"link client off")
        set -- $cmd
        out=$(monitor "$2" "set_link n0 $3" 2>&1) || rc=$? ;;
      "pause server "[0-9]*|"pause client "[0-9]*)
        # The guest stops for MS milliseconds, its link and timers with it:
        # its peer sees every frame to it go unanswered for that long.
        set -- $cmd
        out=$(monitor "$2" stop 2>&1) || rc=$?
        sleep "$(awk -v ms="$3" 'BEGIN { printf "%.3f", ms / 1000 }')"
        out+=$(monitor "$2" cont 2>&1) || rc=$? ;;
      *) out="unknown host command: $cmd"; rc=1 ;;
    esac
    printf '%s\nrc=%s\n' "$out" "$rc" > "$run/share/hostres.$id.tmp"
    mv "$run/share/hostres.$id.tmp" "$run/share/hostres.$id"
    log "host request '$cmd': rc=$rc"
  done
}

printf '%s\n' "$script" > "$run/share/script"
start=$(date +%s)
boot server $server4 $server6 52:54:00:52:44:01 server=on
for _ in $(seq 1 100); do
  [ -S "$link" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || die "server QEMU exited: $(cat "$run/server.qemu.log")"
  sleep 0.1
done
boot client $client4 $client6 52:54:00:52:44:02 server=off

deadline=$((start + timeout))
while kill -0 "${pids[1]}" 2>/dev/null; do
  if [ "$(date +%s)" -ge $deadline ]; then
    log "timeout after ${timeout}s; client console tail:"; tail -30 "$run/client.console" >&2 || true
    # What the client's script printed so far (the selftests' TAP: which
    # test was running).
    if [ -s "$run/share/client.out" ]; then
      log "client output so far:"; cat "$run/share/client.out"
    fi
    exit 124
  fi
  [ -e "$run/share/client.rc" ] && break
  host_requests
  sleep 0.5
done
[ -e "$run/share/client.out" ] && cat "$run/share/client.out"
for role in server client; do
  if [ -e "$run/share/$role.setup-error" ]; then
    log "$role guest: $(cat "$run/share/$role.setup-error")"; tail -30 "$run/$role.console" >&2 || true
  fi
done
if [ ! -e "$run/share/client.rc" ]; then
  log "client guest ended without a result; console tail:"; tail -30 "$run/client.console" >&2 || true
  exit 125
fi
rc=$(cat "$run/share/client.rc")
log "client script exited $rc after $(( $(date +%s) - start ))s"
exit "$rc"
