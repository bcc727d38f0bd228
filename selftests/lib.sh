# SPDX-License-Identifier: GPL-2.0
# Helpers for rpcrdma_rs selftests (sourced). A test prints diagnostics as
# "# ..." lines and exits with 0 (pass), 1 (fail) or 4 (skip), as kselftest
# tests do.
# shellcheck shell=bash

KSFT_PASS=0 KSFT_FAIL=1 KSFT_SKIP=4
# RDMA_LINK, RDMA_DEV: soft-RoCE (rxe0) or soft-iWARP (siw0).
. "$(dirname "${BASH_SOURCE[0]}")/link.sh"
SERVER4=${RDMARS_SERVER4:-198.18.0.1}
SERVER6=${RDMARS_SERVER6:-2001:db8::1}
MNT=${MNT:-/mnt/nfs}
# The transport module under test: ours, or the in-tree C client when the
# testbed runs the baseline (--client-module c).
if [ "${RDMARS_CLIENT_MODULE:-ours}" = c ]; then XPRT_MOD=rpcrdma; else XPRT_MOD=rpcrdma_rs; fi

# Tests of rpcrdma_rs itself (not of NFS/RDMA data movement) skip the baseline.
only_ours() { [ "$XPRT_MOD" = rpcrdma_rs ] || skip "tests rpcrdma_rs itself, not the C baseline"; }
mkdir -p "$MNT"

diag() { printf '# %s\n' "$*"; }
fail() { diag "FAIL: $*"; exit $KSFT_FAIL; }
skip() { diag "SKIP: $*"; exit $KSFT_SKIP; }

# dmesg_mark; ...; dmesg_since_mark: the kernel messages printed in between.
dmesg_mark() { DMESG_MARK=$(dmesg | wc -l); }
dmesg_since_mark() { dmesg | tail -n +"$((DMESG_MARK + 1))"; }

# Fails the test if the kernel warned, oopsed, reported a leak or a hung
# task since the mark.
dmesg_assert_clean() {
  local bad
  bad=$(dmesg_since_mark | grep -E 'WARNING:|BUG:|Oops|Call Trace|general protection|refcount_t:|kernel BUG|UBSAN|KASAN|leak|blocked for more than' || true)
  if [ -n "$bad" ]; then
    diag "kernel complained:"; printf '%s\n' "$bad" | sed 's/^/#   /'
    fail "dmesg is not clean"
  fi
}

module_loaded() { grep -q "^$1 " /proc/modules; }

# True on the debug variant of the test kernel (kmemleak, KASAN, lockdep),
# where everything runs several times slower. Tests that pick short RPC
# timeouts to make the client give up or retry quickly stretch them there
# (slow_timeo), so that a reconnect still fits before the RPC times out;
# what they check stays the same.
debug_kernel() { [ -e /sys/kernel/debug/kmemleak ]; }
# slow_timeo DECISECONDS: a mount's timeo= value, five times longer on the
# debug kernel.
slow_timeo() { if debug_kernel; then echo $(( $1 * 5 )); else echo "$1"; fi; }
# slow_secs SECONDS: a time limit that has to cover such timeouts (a
# scripted peer's lifetime, a command's `timeout`), stretched the same way.
slow_secs() { slow_timeo "$1"; }

# shrink_slabs: has every slab cache give back its empty slabs. SLUB keeps
# some on per-CPU partial lists after their objects are freed, and
# SUnreclaim counts them: a reading of kernel memory taken without this
# moves by a few hundred kB with nothing allocated (on Debian's stock
# image, 240 to 270 kB after mounts that left no object behind).
shrink_slabs() {
  local f
  for f in /sys/kernel/slab/*/shrink; do echo 1 > "$f"; done 2> /dev/null
}

# tracefs_ready: mounts tracefs on /sys/kernel/tracing if it is not; false
# on a kernel without trace events.
tracefs_ready() {
  [ -d /sys/kernel/tracing/events ] || mount -t tracefs nodev /sys/kernel/tracing 2> /dev/null
  [ -d /sys/kernel/tracing/events ]
}

# fio_repeat STATE JOB [ARGS...]: in the background (its pid in $load),
# runs the command JOB ARGS... N (N the run's number, from 1) again and
# again until STATE/stop appears. Each run ends by writing its number to
# STATE/rounds; a failed one's number goes to STATE/failed and its output
# to STATE/fio.failed.
fio_repeat() {
  local state=$1
  shift
  rm -rf "$state"; mkdir -p "$state"; echo 0 > "$state/rounds"
  (
    i=0
    while [ ! -e "$state/stop" ]; do
      i=$((i + 1))
      "$@" "$i" > "$state/fio.$i" 2>&1 ||
        { echo "$i" >> "$state/failed"; cp "$state/fio.$i" "$state/fio.failed"; }
      rm -f "$state/fio.$i"
      echo $i > "$state/rounds"
    done
  ) &
  load=$!
}

# fio_loop STATE NAME SIZE IODEPTH RATE: the load of the fault tests
# (fio_repeat): small fio jobs one after another, O_DIRECT 16 KiB random
# writes with crc32c headers, each read back and verified, on
# $MNT/NAME.0 and NAME.1 in turn.
fio_loop() { fio_repeat "$1" fio_loop_job "${@:2}"; }
fio_loop_job() { # NAME SIZE IODEPTH RATE N
  fio --name=f --filename="$MNT/$1.$(($5 % 2))" --size="$2" --bs=16k --rw=randwrite --direct=1 \
    --ioengine=libaio --iodepth="$3" --verify=crc32c --verify_fatal=1 --do_verify=1 --rate="$4"
}

# rxe_counters: this guest's soft-RoCE counters that are not zero.
rxe_counters() {
  local c v
  for c in /sys/class/infiniband/*/ports/1/hw_counters/*; do
    read -r v < "$c" && [ "$v" != 0 ] && printf '%s=%s ' "${c##*/}" "$v"
  done
  echo
}

# rpc_snapshot M T: the last M kernel messages since the mark, the mount's
# transport line and the first T of SUNRPC's pending tasks.
rpc_snapshot() {
  diag "kernel messages since the mark (last $1):"
  dmesg_since_mark | tail -"$1" | sed 's/^/#   /'
  diag "transport: $(grep -m1 'xprt:' /proc/self/mountstats)"
  diag "pending RPC tasks:"
  cat /sys/kernel/debug/sunrpc/rpc_clnt/*/tasks 2>/dev/null | head -"$2" | sed 's/^/#   /'
}

# dump_stuck: what a test that saw I/O stall prints before failing: an
# rpc_snapshot, the RDMA queue pairs, the stacks of blocked tasks, and the
# server guest's side of the same (scripts/guest/init.sh server-state; a
# server that does not answer is a finding too).
dump_stuck() {
  rpc_snapshot 40 20
  # rdma(8) can wait for a device that is being removed. timeout(1) ends
  # a wait that signals reach; run_guest.sh bounds the whole report too.
  diag "RDMA: $(timeout 10 rdma link show 2>&1 | tr '\n' ' ')"
  timeout 10 rdma resource show qp 2>&1 | head -10 | sed 's/^/#   /'
  local m; m=$(dmesg | wc -l)
  echo w > /proc/sysrq-trigger 2>/dev/null
  sleep 1
  diag "blocked tasks:"
  dmesg | tail -n +"$((m + 1))" | grep -vE '^\[ *[0-9.]+\] *(\?|R[A-Z0-9]+:)' | head -120 | sed 's/^/#   /'
  # sysrq-w shows only uninterruptible sleepers: a worker waiting
  # interruptibly inside SUNRPC or a transport (an rpciod task stuck in a
  # send) shows here instead.
  diag "tasks sleeping in SUNRPC or RDMA code:"
  local p st
  for p in /proc/[0-9]*; do
    st=$(cat "$p/stack" 2>/dev/null) || continue
    grep -qE 'rpcrdma|sunrpc|rpc_|xprt_|ib_|rdma_' <<< "$st" || continue
    echo "$(cat "$p/comm" 2>/dev/null) (${p#/proc/}):"
    head -12 <<< "$st"
  done 2>/dev/null | head -120 | sed 's/^/#   /'
  diag "the server's side:"
  server_cmd server-state 30 2>&1 | head -160 | sed 's/^/#   /'
}

# Unloads a module if it is loaded; fails the test if it will not go.
unload() {
  if module_loaded "$1"; then
    rmmod "$1" || fail "rmmod $1 failed"
  fi
  ! module_loaded "$1" || fail "$1 still loaded after rmmod"
}

# Unloads both transports; the starting point of every test.
unload_all() { unload rpcrdma_rs; unload rpcrdma; }

# The in-tree C client, loaded explicitly (autoload goes to rpcrdma_rs).
# --first-time: modprobe otherwise reports success when init fails with EEXIST.
load_c_client() { modprobe --first-time --ignore-install rpcrdma; }

# True if an NFS file system is mounted on $MNT.
nfs_mounted() { findmnt -n -t nfs,nfs4 "$MNT" > /dev/null; }

# The fields of the "xprt: rdma" line of the NFS mount on $MNT ($1 = field
# number, 1 = local port), or nothing if the mount is not over RDMA.
rdma_xprt_field() { awk -v f="$1" '$1 == "xprt:" && $2 == "rdma" { print $(f + 2); exit }' /proc/self/mountstats; }

# Mount options for the data tests: NFSv3, the simplest protocol to carry
# (the nfs41_* tests and the soak mount NFSv4.1 and later, which need the
# backchannel).
RS_OPTS=${RS_OPTS:-vers=3,proto=rdma,port=20049,nolock,retry=0}
RS_EXPORT=/srv/export

# mount_rs [ADDR]: mounts the server's export on $MNT over rpcrdma_rs.
mount_rs() {
  local addr=${1:-$SERVER4} opts=$RS_OPTS
  case "$addr" in *:*) addr="[$addr]"; opts=${opts/proto=rdma,/proto=rdma6,} ;; esac
  timeout 120 mount -t nfs -o "$opts" "$addr:$RS_EXPORT" "$MNT"
}

# only_our_server: skips the test unless the server guest serves with
# rpcrdma_rs (testbed.sh --server-module ours), and fails it if the guest
# says otherwise.
only_our_server() {
  [ "${RDMARS_SERVER_MODULE:-c}" = ours ] || skip "the server guest runs the in-tree svcrdma (testbed.sh --server-module ours)"
  local who
  who=$(server_cmd server-module | head -1)
  [ "$who" = ours ] || fail "the server guest serves with '$who', not rpcrdma_rs"
}

# server_counter NAME: our server's debugfs counter server_NAME.
server_counter() { server_cmd "server-counter $1" | head -1; }

# server_versions V: the RPC-over-RDMA versions our server speaks on
# connections it accepts from now on ("2,1" or "1"); fails the test if
# they cannot be set.
server_versions() {
  local out
  out=$(server_cmd "server-versions $1")
  printf '%s' "$out" | grep -q 'rc=0' || fail "cannot set the server's versions: $out"
}

# server_credits N: the credits our server grants on connections it
# accepts from now on (0: its default); fails the test if they cannot be
# set.
server_credits() {
  local out
  out=$(server_cmd "server-credits $1")
  printf '%s' "$out" | grep -q 'rc=0' || fail "cannot set the server's credits: $out"
}

# server_dmesg_assert_clean: fails the test if the server guest's kernel
# log has trouble in it (init.sh dmesg-problems).
server_dmesg_assert_clean() {
  local problems
  problems=$(server_cmd dmesg-problems | grep -v '^rc=')
  [ -z "$problems" ] || fail "the server's kernel log: $problems"
}

# share_request REQ RES CMD SECONDS: hands CMD to whoever serves the share
# (the server guest for "cmd"/"res", the host for "hostcmd"/"hostres") and
# prints the answer; a request is complete once renamed from REQ.ID.tmp to
# REQ.ID, and so is its answer RES.ID.
share_request() {
  local req=$1 res=$2 id=$$.$RANDOM share=/run/share
  echo "$3" > "$share/$req.$id.tmp" && mv "$share/$req.$id.tmp" "$share/$req.$id"
  for _ in $(seq 1 $(( $4 * 5 ))); do
    if [ -e "$share/$res.$id" ]; then cat "$share/$res.$id"; rm -f "$share/$res.$id"; return 0; fi
    sleep 0.2
  done
  echo "no answer to '$3' in $4 s"; return 1
}

# server_cmd CMD [SECONDS]: runs CMD (one of the commands
# scripts/guest/init.sh knows, e.g. restart-nfsd) in the server guest and
# prints its output; gives up after SECONDS (default 120).
server_cmd() { share_request cmd res "$1" "${2:-120}"; }

# Regions the server invalidated remotely so far (rpcrdma_rs debugfs; 0 for
# the C baseline, which does not export it).
remote_invalidations() { cat /sys/kernel/debug/rpcrdma_rs/remote_invalidations 2>/dev/null || echo 0; }

# rdma_xprt_dir [PORT]: the sysfs directory of the connected RDMA transport
# to PORT (default 20049) of the mount on $MNT. xprt_info reads "<closed>"
# while a transport is not connected: one just forced to disconnect may
# still be reconnecting, so the lookup waits a few seconds for it.
rdma_xprt_dir() {
  local port=${1:-20049} x try
  for try in $(seq 1 $(( $(slow_secs 5) * 4 ))); do
    for x in /sys/kernel/sunrpc/xprt-switches/*/xprt-*; do
      grep -qx "dst_port=$port" "$x/xprt_info" 2>/dev/null && { echo "$x"; return 0; }
    done
    sleep 0.5
  done
  return 1
}

# force_disconnect_at DIR: makes SUNRPC close the transport whose sysfs
# directory is DIR (rdma_xprt_dir), which reconnects at its next RPC:
# rewriting the transport's dstaddr forces a disconnect, whether or not it
# is connected now. The write takes the transport's send lock
# (XPRT_LOCKED) with wait_on_bit_lock(), but an RPC task releasing that
# lock does not wake bit waiters (net/sunrpc/xprt.c xprt_clear_locked,
# 6.12): a write that finds an RPC in transmission can sleep until the next
# close or connect, which never comes while I/O flows. That is SUNRPC's,
# for every transport: the write is killed after a few seconds and tried
# again.
force_disconnect_at() {
  local xprt=$1 addr try secs
  secs=$(slow_secs 5)
  addr=$(cat "$xprt/dstaddr") || fail "cannot read $xprt/dstaddr"
  for try in 1 2 3 4 5; do
    timeout -s KILL "$secs" sh -c 'echo "$1" > "$2"' sh "$addr" "$xprt/dstaddr" && return
    diag "writing $xprt/dstaddr did not finish in $secs s (try $try)"
  done
  fail "cannot force a disconnect through $xprt/dstaddr"
}

# force_disconnect [PORT]: force_disconnect_at the connected transport to
# PORT (default 20049) of the mount on $MNT.
force_disconnect() {
  local xprt
  xprt=$(rdma_xprt_dir "${1:-20049}") || fail "no connected RDMA transport to port ${1:-20049} in /sys/kernel/sunrpc"
  force_disconnect_at "$xprt"
}

# rs_counter NAME: a module-wide rpcrdma_rs counter from debugfs (0 when the
# module is not loaded, or for the C baseline).
rs_counter() { cat "/sys/kernel/debug/rpcrdma_rs/$1" 2>/dev/null || echo 0; }

# rs_mrs_freed: after the last unmount, waits (5 s, longer on the debug
# kernel) for rpcrdma_rs's memory regions to be freed with their
# connection, which SUNRPC destroys after the unmount returns; prints how
# many are left (debugfs mrs_live).
rs_mrs_freed() {
  local n
  for _ in $(seq 1 $(( $(slow_secs 5) * 5 ))); do
    n=$(rs_counter mrs_live)
    [ "$n" = 0 ] && break
    sleep 0.2
  done
  echo "$n"
}

# rs_load_hook NAME: loads rpcrdma_rs and fails the test unless its
# writable debugfs test hook NAME is there.
rs_load_hook() {
  modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
  [ -w "/sys/kernel/debug/rpcrdma_rs/$1" ] || fail "no $1 hook in debugfs"
}

# host_cmd CMD [SECONDS]: asks the host running the testbed for a fault only
# QEMU can make ("link server|client on|off", see scripts/testbed.sh) and
# prints its answer, which ends with "rc=N"; gives up after SECONDS (30).
host_cmd() { share_request hostcmd hostres "$1" "${2:-30}"; }

# server_link_on: the server guest's link up again after a loss (host_cmd),
# and its soft-RoCE device made new if the loss broke the device's QP1
# (scripts/guest/init.sh, rxe-heal): a testbed fault no client can get
# past. Sets $healed to what rxe-heal said when it made a new device ("QP1
# in ERR, new rxe0 in N ms"; empty otherwise) and says so; fails the test
# when either step does. RDMARS_RXE_HEAL=force makes a new device every
# time (to check the cure).
server_link_on() {
  local out heal=rxe-heal
  healed=
  out=$(host_cmd "link server on"); printf '%s' "$out" | grep -q 'rc=0' || fail "link on: $out"
  [ "${RDMARS_RXE_HEAL:-}" = force ] && heal="rxe-heal force"
  out=$(server_cmd "$heal" 90)
  printf '%s' "$out" | grep -q 'rc=0' || fail "the server's soft-RoCE device: $out"
  case "$out" in
    *healed:*) healed=${out#*healed: }; diag "testbed: the server's soft-RoCE device after the link loss: $healed" ;;
  esac
}

# restore_testbed: undoes what the fault tests do to the testbed, for the
# tests that follow one that failed or was killed half-way: both guests'
# links up, the client's soft-RoCE device present, fail_sunrpc quiet, the
# hostile peer stopped. Cheap when nothing needs undoing.
restore_testbed() {
  local fs=/sys/kernel/debug/fail_sunrpc
  [ -w $fs/probability ] && echo 0 > $fs/probability
  host_cmd "link server on" > /dev/null
  server_cmd rxe-heal 90 > /dev/null
  host_cmd "link client on" > /dev/null
  [ -n "$(rdma link show 2>/dev/null)" ] || rdma_link_add
  server_cmd "peer-stop" 10 > /dev/null
}

# The hostile peer in proxy mode (tools/rdma-peer on port 20050, knfsd
# behind it): the NFSv3 mount options of the tests that mount through it,
# with short timeouts (a dropped reply costs seconds, not a minute).
PEER_OPTS_V3="vers=3,proto=rdma,port=20050,nolock,retry=0,timeo=50,retrans=3"

# Tests that make many checks count the failed ones: bad NAME WHY says
# which and why; the test fails at its end if $fails is not 0.
fails=0
bad() { diag "  $1: $2"; fails=$((fails + 1)); }

# peer_data NAME MB: a file of random data in the server's export; prints
# its md5 (the reference for data read back through the peer), or why it
# could not be made and returns 1.
peer_data() {
  local out
  out=$(server_cmd "mkdata $1 $2")
  printf '%s' "$out" | grep -q 'rc=0' || { echo "server mkdata: $out"; return 1; }
  server_cmd "md5 $1" | head -1
}

# peer_message_checks NAME LOG: what the peer checks of every message it
# receives (tools/rdma-peer/src/checks.rs): the header's XID mirrors the
# RPC message's, and Sends are plain. A violation in LOG fails check NAME.
peer_message_checks() {
  local v
  v=$(printf '%s\n' "$2" | grep -E 'xid mismatch|recv Send With Invalidate' | head -1)
  [ -z "$v" ] || bad "$1" "$v"
}

# The C client's reactions to the hostile peer are compared in make
# long-check only (RDMARS_BASELINE_HOSTILE=1): the catalogue takes minutes.
hostile_ours_only() {
  [ "$XPRT_MOD" = rpcrdma_rs ] || [ "${RDMARS_BASELINE_HOSTILE:-0}" = 1 ] ||
    skip "the C client's reactions are compared in make long-check"
}
