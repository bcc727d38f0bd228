#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Reconnects amid callback traffic: the backchannel must come back with
# every new connection. The client holds read delegations and the server
# breaks them (CB_RECALL over the backchannel) while the client's transport
# is disconnected again and again (rewriting the transport's dstaddr in
# sysfs forces a disconnect). Application I/O rides through the
# disconnects, knfsd reports the callback channel up, and rpcrdma_rs reuses
# its Receive buffers instead of allocating new ones.
#
# By default each disconnect falls between two recalls, and every recall
# must be answered promptly on the new connection. With
# RDMARS_RECONNECT_INFLIGHT=1 (make long-check) the disconnects hit
# recalls in flight. A new connection is bound to the session for the
# fore channel only until the client, told CB_PATH_DOWN in a SEQUENCE
# reply, sends BIND_CONN_TO_SESSION; a recall knfsd 6.12 queues in that
# window finds no callback client and is dropped before the delegation is
# put on the revoke list (fs/nfsd/nfs4callback.c nfsd4_run_cb_work), so
# neither a recall nor a revocation ever comes, and the server's writer
# waits for as long as the client holds the delegation. That is server
# behaviour, transport-independent: the test closes the files 20 s after
# the disconnects and evicts their inodes (drop_caches), which returns
# their delegations, and the writes finish. Both modes check that a fresh delegation is recalled
# promptly afterwards (the backchannel is back).
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
timeout 120 mount -t nfs -o vers=4.1,proto=rdma,port=20049,retry=0 "$SERVER4:/" "$MNT" || fail "mount failed"
out=$(server_cmd "mkfiles rcb 32"); printf '%s' "$out" | grep -q 'rc=0' || fail "server mkfiles: $out"
recall_ms() { printf '%s' "$1" | sed -n 's/.* ms=\([0-9]*\).*/\1/p'; }
entry() { echo "rcb/entry-with-a-reasonably-long-name-$1"; }
# Found once: each disconnect below hits the same transport whether or not
# it has reconnected from the one before.
xprt=$(rdma_xprt_dir) || fail "no RDMA transport in /sys/kernel/sunrpc"
connects0=$(rdma_xprt_field 3)
bufs0=$(rs_counter recv_bufs_allocated)
head -c $((256 << 10)) /dev/urandom > /tmp/rcb.src
# Application I/O that must ride through the disconnects.
( for r in 1 2 3 4 5 6; do
    cp /tmp/rcb.src "$MNT/rcb/data" && sync && cmp -s /tmp/rcb.src "$MNT/rcb/data" || exit 1
  done ) &
io=$!
worst=0 rounds=0
if [ "${RDMARS_RECONNECT_INFLIGHT:-0}" = 1 ]; then
  fds=()
  for i in $(seq 1 32); do exec {fd}< "$MNT/$(entry $i)" && fds+=("$fd"); done
  server_cmd "append-all rcb" 400 > /tmp/rcb.recall &
  recall=$!
  for k in 1 2 3; do sleep 1; force_disconnect_at "$xprt"; done
  # Recalls dropped by the server in the rebinding window (see above) end
  # only when the client lets go of the files.
  sleep 20
  for fd in "${fds[@]}"; do exec {fd}<&-; done
  # A closed file keeps its delegation until it is recalled or its inode
  # is evicted (nfs4_evict_inode returns it): evict them, so that the
  # delegations whose recalls the server dropped come back too.
  echo 2 > /proc/sys/vm/drop_caches
  wait $recall
  grep -q 'rc=0' /tmp/rcb.recall || fail "server writes failed: $(cat /tmp/rcb.recall)"
  worst=$(sed -n 's/.* max=\([0-9]*\).*/\1/p' /tmp/rcb.recall)
  diag "32 recalls with 3 disconnects in flight: $(cat /tmp/rcb.recall)"
else
  for i in $(seq 1 6); do
    force_disconnect_at "$xprt"
    exec {fd}< "$MNT/$(entry $i)"   # reconnects, then a delegation
    out=$(server_cmd "append-export $(entry $i)")
    exec {fd}<&-
    ms=$(recall_ms "$out")
    printf '%s' "$out" | grep -q 'rc=0' || fail "server write $i failed: $out"
    [ -n "$ms" ] || fail "no timing from the server: $out"
    [ "$ms" -gt "$worst" ] && worst=$ms
    rounds=$((rounds + 1))
  done
fi
wait $io; io_rc=$?
# A fresh delegation after the reconnects must be recalled promptly.
sleep 1
exec {fd}< "$MNT/$(entry 32)"
again=$(server_cmd "append-export $(entry 32)")
exec {fd}<&-
states=$(server_cmd nfsd-states)
connects1=$(rdma_xprt_field 3)
bufs1=$(rs_counter recv_bufs_allocated)
sizes=$(stat -c %s "$MNT"/rcb/entry-* | sort -u | tr '\n' ' ')
rm -rf "$MNT/rcb"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
ms2=$(recall_ms "$again")
diag "connects $connects0 -> $connects1; longest recall ${worst} ms over $rounds disconnect-recall rounds; a fresh one afterwards ${ms2:-?} ms"
diag "file sizes after: $sizes; application I/O rc $io_rc; Receive buffers allocated $bufs0 -> $bufs1"
[ "$io_rc" = 0 ] || fail "application I/O failed across the disconnects"
[ "$connects1" -gt "$connects0" ] || fail "the transport did not reconnect"
if [ "${RDMARS_RECONNECT_INFLIGHT:-0}" != 1 ]; then
  # A lost callback leaves the server's writer waiting for the lease-break
  # time (45 s).
  [ "$worst" -lt 10000 ] || fail "a recall after a reconnect took $worst ms: the backchannel did not come back"
fi
[ -n "$ms2" ] && [ "$ms2" -lt 10000 ] || fail "a recall after the reconnects was not answered promptly"
printf '%s' "$states" | grep -q 'callback state: UP' || fail "knfsd's callback channel is not up after the reconnects"
# Every server write must be visible: 2 bytes per append, 0 where none.
if [ "${RDMARS_RECONNECT_INFLIGHT:-0}" = 1 ]; then want_sizes="2 4 "; else want_sizes="0 2 "; fi
[ "$sizes" = "$want_sizes" ] || fail "the client does not see the server's writes: sizes $sizes, want $want_sizes"
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  [ "$bufs1" = "$bufs0" ] || fail "reconnects allocated Receive buffers ($bufs0 -> $bufs1)"
fi
dmesg_assert_clean
