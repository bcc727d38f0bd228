#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Faults at our server (testbed.sh --server-module ours; skipped over the
# in-tree svcrdma) while fio writes and verifies data over it, under our
# client or C's. A loop of small fio jobs (O_DIRECT random writes with
# crc32c headers, each read back and verified) runs in the background
# while, in turn:
#   1. the server's RDMA device is deleted and added back (`rdma link
#      delete` on the server guest must return within 60 s: our server's
#      connections let go of the device when it goes), and the client
#      connects to the new one;
#   2. knfsd is restarted (its transports closed and freed under load);
#   3. the link between the guests goes down for 20 s, then up again;
#   4. rmmod of the server's module is refused while knfsd serves over it.
# After each fault the loop must complete new fio jobs (I/O resumed), and
# no job may see an error or a mismatch. Last, knfsd is stopped and the
# module unloaded and loaded again, and the server's kernel log is clean.
. "$(dirname "$0")/../lib.sh"
only_our_server
command -v fio > /dev/null || skip "fio not installed"
unload_all
dmesg_mark
mount_rs || fail "mount over our server failed"
state=/tmp/srvfaults
fio_loop $state srvfaults 2M 4 1m
cleanup() {
  touch $state/stop; kill $load 2>/dev/null
  restore_testbed
}
trap cleanup EXIT

# resumed WHAT: waits (up to 240 s) for two more fio jobs to finish.
resumed() {
  local want=$(( $(cat $state/rounds) + 2 )) t0=$SECONDS
  while [ "$(cat $state/rounds)" -lt $want ]; do
    if [ $((SECONDS - t0)) -ge 240 ]; then
      server_cmd server-state 30 2>&1 | head -60 | sed 's/^/#   server: /'
      fail "$1: I/O did not resume within 240 s"
    fi
    sleep 1
  done
  diag "$1: I/O resumed after $((SECONDS - t0)) s (connects so far: $(rdma_xprt_field 3))"
  [ ! -e $state/failed ] || { cat $state/fio.failed; fail "$1: fio job(s) $(tr '\n' ' ' < $state/failed)failed"; }
}
resumed "start"

# 1. The server's RDMA device goes away and comes back.
t0=$SECONDS
out=$(server_cmd "rxe-heal force" 90)
printf '%s' "$out" | grep -q 'rc=0' || fail "server device removal failed or hung: $out"
diag "server device removed and added back in $((SECONDS - t0)) s: $out"
resumed "server device removal"

# 2. knfsd restarted under load.
out=$(server_cmd restart-nfsd)
printf '%s' "$out" | grep -q 'rc=0' || fail "knfsd restart failed: $out"
resumed "knfsd restart"

# 3. The link between the guests goes down for 20 s.
out=$(host_cmd "link server off"); printf '%s' "$out" | grep -q 'rc=0' || fail "link off: $out"
sleep 20
server_link_on
resumed "link down 20 s"

# 4. The server's module stays while knfsd serves over it.
out=$(server_cmd "rmmod-server-module")
printf '%s' "$out" | grep -q 'rc=0' && fail "rmmod of the server's module succeeded under knfsd"
diag "rmmod on the server while serving: $(printf '%s' "$out" | head -1)"
resumed "rmmod refused"

touch $state/stop
wait $load
[ ! -e $state/failed ] || { cat $state/fio.failed; fail "fio job(s) $(tr '\n' ' ' < $state/failed)failed"; }
diag "$(cat $state/rounds) fio jobs verified, none failed"
rm -f "$MNT"/srvfaults.*
umount "$MNT" || fail "umount failed"
trap - EXIT
restore_testbed
unload $XPRT_MOD
out=$(server_cmd reload-server-module)
printf '%s' "$out" | grep -q 'rc=0' || fail "the server's module did not unload and load again: $out"
server_dmesg_assert_clean
dmesg_assert_clean
