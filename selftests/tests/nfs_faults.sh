#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Faults while fio writes and verifies data through rpcrdma_rs. A loop of
# small fio jobs (O_DIRECT random writes with crc32c headers, each read
# back and verified from the server) runs in the background while, in turn:
#   1. the server guest's virtual link goes down for 20 s (QEMU monitor
#      set_link, asked of the host with host_cmd), then up again;
#   2. the client's rxe device is deleted (`rdma link delete`, which must
#      return: device removal may not hang) and added back;
#   3. fail_sunrpc injects three disconnects at the transport (skipped on
#      kernels without CONFIG_FAIL_SUNRPC, such as Debian's stock ones);
#   4. rmmod rpcrdma_rs is refused while the mount exists.
# After each fault the loop must complete new fio jobs (I/O resumed), and no
# job may see an error or a mismatch. Last, with the link down and a write
# stuck, `umount -f` must end the write with an error and the unmount and
# rmmod must complete. (knfsd restarts: nfs_server_restart.)
. "$(dirname "$0")/../lib.sh"
only_ours
command -v fio > /dev/null || skip "fio not installed"
command -v rdma > /dev/null || skip "rdma (iproute2) not installed"
unload_all
dmesg_mark
mount_rs || fail "mount failed"
state=/tmp/faults
# The load: fio jobs one after another until $state/stop appears.
fio_loop $state faults 2M 4 1m
# On a failure, leave the testbed as later tests expect it.
cleanup() {
  touch $state/stop; kill $load 2>/dev/null
  restore_testbed
}
trap cleanup EXIT

# resumed WHAT: waits (up to 240 s) for two more fio jobs to finish. A
# recovery slower than 30 s leaves a snapshot of the pending RPCs and the
# transport in the output (C recovers in under 10 s).
resumed() {
  local want=$(( $(cat $state/rounds) + 2 )) t0=$SECONDS noted=
  while [ "$(cat $state/rounds)" -lt $want ]; do
    [ $((SECONDS - t0)) -lt 240 ] || { dump_stuck; fail "$1: I/O did not resume within 240 s"; }
    if [ -z "$noted" ] && [ $((SECONDS - t0)) -ge 30 ]; then
      noted=1
      diag "$1: no I/O for 30 s"
      rpc_snapshot 6 12
      # Whether the liveness probe went out and how it fared (a probe the
      # server acknowledges means its queue pair is alive), and the
      # server's side: its connections, queue pairs, blocked tasks.
      diag "liveness probes: $(rs_counter liveness_probes), failed: $(rs_counter liveness_probe_failures)"
      server_cmd server-state 30 2>&1 | head -60 | sed 's/^/#   server: /'
    fi
    sleep 1
  done
  diag "$1: I/O resumed after $((SECONDS - t0)) s (connects so far: $(rdma_xprt_field 3))"
  [ ! -e $state/failed ] || { cat $state/fio.failed; fail "$1: fio job(s) $(tr '\n' ' ' < $state/failed)failed"; }
}
resumed "start"

# 1. The link between the guests goes down for 20 s.
out=$(host_cmd "link server off"); printf '%s' "$out" | grep -q 'rc=0' || fail "link off: $out"
sleep 20
server_link_on
resumed "link down 20 s"

# 2. The client's RDMA device goes away and comes back.
dev=$(rdma link show | awk '{ print $2 }' | cut -d/ -f1 | head -1)
[ -n "$dev" ] || fail "no RDMA device"
t0=$SECONDS
timeout 120 rdma link delete "$dev" || fail "rdma link delete $dev failed or hung"
diag "rdma link delete $dev took $((SECONDS - t0)) s"
[ -z "$(rdma link show)" ] || fail "$dev still present after delete"
sleep 5
rdma link add "$dev" type rxe netdev eth0 || fail "rdma link add $dev failed"
resumed "device removal"

# 3. fail_sunrpc: three disconnects injected at the client transport.
# Kernels built without fault injection (Debian's stock kernels) skip
# this step only; the test tree's kernels have it.
fs=/sys/kernel/debug/fail_sunrpc
if [ -d $fs ]; then
  c0=$(rdma_xprt_field 3)
  echo Y > $fs/ignore-server-disconnect; echo Y > $fs/ignore-cache-wait; echo N > $fs/ignore-client-disconnect
  echo 0 > $fs/verbose; echo 20 > $fs/interval; echo 3 > $fs/times; echo 100 > $fs/probability
  t0=$SECONDS
  while [ "$(cat $fs/times)" != 0 ] && [ $((SECONDS - t0)) -lt 120 ]; do sleep 1; done
  left=$(cat $fs/times)
  echo 0 > $fs/probability
  [ "$left" = 0 ] || fail "fail_sunrpc: $left of 3 disconnects not injected in 120 s"
  resumed "fail_sunrpc"
  c1=$(rdma_xprt_field 3)
  [ "$c1" -ge $((c0 + 3)) ] || fail "fail_sunrpc: 3 disconnects injected but connects went $c0 -> $c1"
elif [ "${RDMARS_KERNEL:-regular}" != stock ]; then
  fail "no $fs: the test kernel is built with CONFIG_FAIL_SUNRPC"
else
  diag "SKIP step 3: this kernel has no fail_sunrpc (CONFIG_FAIL_SUNRPC is off)"
fi

# 4. rmmod is refused while the transport is in use.
if rmmod rpcrdma_rs 2> $state/rmmod; then fail "rmmod rpcrdma_rs succeeded with a mount on it"; fi
diag "rmmod while mounted: $(cat $state/rmmod)"
module_loaded rpcrdma_rs || fail "rpcrdma_rs gone while mounted"
resumed "rmmod refused"

touch $state/stop
wait $load
[ ! -e $state/failed ] || { cat $state/fio.failed; fail "fio job(s) $(tr '\n' ' ' < $state/failed)failed"; }
diag "$(cat $state/rounds) fio jobs verified, none failed"
rm -f "$MNT"/faults.*

# 5. umount -f ends a write stuck behind a dead link. The write may report
# "Unknown error 512": umount -f kills the mount's RPCs with -ERESTARTSYS
# (rpc_killall_tasks -> rpc_signal_task), and a system call that gets it
# with no signal pending passes it on. That is SUNRPC's, whatever the
# transport; what matters here is that the write ends, with an error.
out=$(host_cmd "link server off"); printf '%s' "$out" | grep -q 'rc=0' || fail "link off: $out"
dd if=/dev/zero of="$MNT/stuck" bs=64k count=16 oflag=direct status=none 2> $state/dd &
dd=$!
sleep 5
kill -0 $dd 2>/dev/null || fail "the write did not block with the link down"
t0=$SECONDS
while nfs_mounted && [ $((SECONDS - t0)) -lt 120 ]; do
  timeout 60 umount -f "$MNT" 2>/dev/null || sleep 2
done
nfs_mounted && fail "umount -f did not unmount within 120 s"
t1=$SECONDS
while kill -0 $dd 2>/dev/null && [ $((SECONDS - t1)) -lt 30 ]; do sleep 1; done
kill -0 $dd 2>/dev/null && fail "the stuck write survived umount -f"
wait $dd; ddrc=$?
diag "umount -f took $((t1 - t0)) s; the stuck write exited $ddrc: $(cat $state/dd)"
[ $ddrc != 0 ] || fail "the stuck write reported success"
# The transport goes with the mount, even while it was still trying to
# reach the server: the module is free again within seconds.
t1=$SECONDS
while [ "$(cat /sys/module/rpcrdma_rs/refcnt 2>/dev/null || echo 0)" != 0 ] && [ $((SECONDS - t1)) -lt 60 ]; do sleep 1; done
refs=$(cat /sys/module/rpcrdma_rs/refcnt)
diag "rpcrdma_rs unused $((SECONDS - t1)) s after the unmount (refcnt $refs)"
server_link_on
trap - EXIT
[ "$refs" = 0 ] || fail "rpcrdma_rs still in use 60 s after umount -f"
unload rpcrdma_rs
dmesg_assert_clean
