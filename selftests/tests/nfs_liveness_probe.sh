#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The liveness probe (module parameter probe_interval): while RPCs wait for
# replies and no Receive arrives, rpcrdma_rs probes the connection with a
# zero-length RDMA Write. Against tools/rdma-peer's drop-first scenario (a
# proxy to knfsd that never answers the first call of its first
# connection), with probe_interval=1 and a 60 s RPC timeout:
#   1. the peer is alive but silent: probes go out, each is acknowledged,
#      none fails and the connection stays (a slow server is not a dead
#      one);
#   2. the server guest's link goes down: the next probe fails within
#      seconds (well before the RPC timeout) and the transport reconnects;
#   3. the link comes back: the new connection carries the mount's calls,
#      which the peer now answers, and the mount completes and lists the
#      export. Without the probe the client would wait out the 60 s RPC
#      timeout first (nfs_faults' link-down case, when no call was being
#      sent at the time).
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
OPTS="vers=3,proto=rdma,port=20050,nolock,retry=0,timeo=600,retrans=2"
modprobe rpcrdma_rs probe_interval=1 || fail "cannot load rpcrdma_rs"
cleanup() {
  nfs_mounted && umount -f -l "$MNT"
  restore_testbed
}
trap cleanup EXIT
r=$(server_cmd "peer-start drop-first 150 proxy")
printf '%s' "$r" | grep -q 'rc=0' || fail "peer did not start: $r"
p0=$(rs_counter liveness_probes) f0=$(rs_counter liveness_probe_failures)
timeout 150 mount -t nfs -o "$OPTS" "$SERVER4:/srv/export" "$MNT" 2> /tmp/probe.mount &
mnt=$!

# 1. The first call gets no answer; the peer's queue pair is alive. Two
# probes go out within a few intervals (the mount's own setup counts in
# this time: more of it on a debug kernel).
t0=$SECONDS
limit=$(slow_secs 6)
while [ "$(rs_counter liveness_probes)" -lt $((p0 + 2)) ] && [ $((SECONDS - t0)) -lt "$limit" ]; do sleep 1; done
sleep 1
p1=$(rs_counter liveness_probes) f1=$(rs_counter liveness_probe_failures)
diag "silent peer, $((SECONDS - t0)) s: $((p1 - p0)) probes, $((f1 - f0)) failed"
kill -0 $mnt 2>/dev/null || fail "the mount ended while its first call was unanswered: $(cat /tmp/probe.mount)"
[ "$p1" -ge $((p0 + 2)) ] || fail "fewer than 2 probes in $limit s of overdue replies ($((p1 - p0)))"
[ "$f1" = "$f0" ] || fail "a probe of a live peer failed"
dmesg_since_mark | grep -q 'does not answer a probe' && fail "a live peer was reported dead"

# 2. The peer becomes unreachable.
out=$(host_cmd "link server off"); printf '%s' "$out" | grep -q 'rc=0' || fail "link off: $out"
t0=$SECONDS
while [ "$(rs_counter liveness_probe_failures)" = "$f1" ] && [ $((SECONDS - t0)) -lt 40 ]; do sleep 1; done
f2=$(rs_counter liveness_probe_failures)
diag "link down: a probe failed after $((SECONDS - t0)) s"
[ "$f2" -gt "$f1" ] || fail "no probe failed within 40 s of the link going down"
dmesg_since_mark | grep -q 'does not answer a probe' || fail "the failed probe was not logged"

# 3. The link comes back: a new connection, and the mount completes.
sleep 3
server_link_on
t1=$SECONDS
wait $mnt; rc=$?
diag "link up: the mount returned $rc after $((SECONDS - t1)) s"
[ "$rc" = 0 ] || fail "the mount failed after the link came back: $(cat /tmp/probe.mount)"
ls "$MNT" > /dev/null || fail "cannot list the export"
conns=$(dmesg_since_mark | grep -c 'rpcrdma_rs: connected to')
diag "connections made: $conns"
[ "$conns" -ge 2 ] || fail "the transport did not reconnect ($conns connection)"
umount "$MNT" || fail "umount failed"
trap - EXIT
server_cmd peer-stop > /dev/null
unload rpcrdma_rs
dmesg_assert_clean
