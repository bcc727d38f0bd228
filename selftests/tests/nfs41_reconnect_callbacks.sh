#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A reconnect in the middle of callback traffic: the client holds 32 read
# delegations, the server breaks them one after the other (CB_RECALL over
# the backchannel), and meanwhile the client's transport is disconnected
# three times (rewriting the transport's dstaddr in sysfs forces a
# disconnect). The backchannel must come back with each new connection:
# every recall completes well inside the lease-break time, knfsd reports the
# callback channel up, a fresh delegation is recalled promptly afterwards,
# and no application I/O fails. rpcrdma_rs must also reuse its Receive
# buffers across the reconnects instead of allocating new ones.
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
timeout 120 mount -t nfs -o vers=4.1,proto=rdma,port=20049,retry=0 "$SERVER4:/" "$MNT" || fail "mount failed"
out=$(server_cmd "mkfiles rcb 32"); printf '%s' "$out" | grep -q 'rc=0' || fail "server mkfiles: $out"
xprt=
for x in /sys/kernel/sunrpc/xprt-switches/*/xprt-*; do
  grep -qx 'dst_port=20049' "$x/xprt_info" 2>/dev/null && xprt=$x
done
[ -n "$xprt" ] || fail "no RDMA transport in /sys/kernel/sunrpc"
fds=()
for f in "$MNT"/rcb/entry-*; do exec {fd}< "$f" && fds+=("$fd"); done
connects0=$(rdma_xprt_field 3)
bufs0=$(cat /sys/kernel/debug/rpcrdma_rs/recv_bufs_allocated 2>/dev/null || echo 0)
head -c $((256 << 10)) /dev/urandom > /tmp/rcb.src
# Application I/O that must ride through the disconnects.
( for r in 1 2 3 4 5 6; do
    cp /tmp/rcb.src "$MNT/rcb/data" && sync && cmp -s /tmp/rcb.src "$MNT/rcb/data" || exit 1
  done ) &
io=$!
server_cmd "append-all rcb" > /tmp/rcb.recall &
recall=$!
for k in 1 2 3; do
  sleep 1
  addr=$(cat "$xprt/dstaddr") && echo "$addr" > "$xprt/dstaddr" || fail "cannot force a disconnect through $xprt/dstaddr"
done
wait $recall
wait $io; io_rc=$?
for fd in "${fds[@]}"; do exec {fd}<&-; done
# A fresh delegation after the reconnects must be recalled promptly too.
sleep 1
exec {fd}< "$MNT/rcb/entry-with-a-reasonably-long-name-1"
again=$(server_cmd "append-export rcb/entry-with-a-reasonably-long-name-1")
exec {fd}<&-
states=$(server_cmd nfsd-states)
connects1=$(rdma_xprt_field 3)
bufs1=$(cat /sys/kernel/debug/rpcrdma_rs/recv_bufs_allocated 2>/dev/null || echo 0)
sizes=$(stat -c %s "$MNT"/rcb/entry-* | sort -u | tr '\n' ' ')
rm -rf "$MNT/rcb"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
ms=$(sed -n 's/.* ms=\([0-9]*\).*/\1/p' /tmp/rcb.recall)
max=$(sed -n 's/.* max=\([0-9]*\).*/\1/p' /tmp/rcb.recall)
ms2=$(printf '%s' "$again" | sed -n 's/.*ms=\([0-9]*\).*/\1/p')
diag "connects $connects0 -> $connects1; 32 recalls across the disconnects took ${ms:-?} ms (longest ${max:-?} ms); one more afterwards ${ms2:-?} ms"
diag "file sizes after: $sizes; application I/O rc $io_rc; Receive buffers allocated $bufs0 -> $bufs1"
[ "$io_rc" = 0 ] || fail "application I/O failed across the disconnects"
[ "$connects1" -gt "$connects0" ] || fail "the transport did not reconnect"
grep -q 'rc=0' /tmp/rcb.recall || fail "server writes failed: $(cat /tmp/rcb.recall)"
# A lost callback leaves the server's writer waiting for the lease-break
# time (45 s).
[ -n "$max" ] && [ "$max" -lt 20000 ] || fail "a recall took ${max:-?} ms across the reconnects: a callback was lost"
[ -n "$ms2" ] && [ "$ms2" -lt 10000 ] || fail "a recall after the reconnects was not answered promptly"
case "$sizes" in "2 "|"2 4 ") ;; *) fail "the client does not see the server's writes: sizes $sizes" ;; esac
printf '%s' "$states" | grep -q 'callback state: UP' || fail "knfsd's callback channel is not up after the reconnects"
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  [ "$bufs1" = "$bufs0" ] || fail "reconnects allocated Receive buffers ($bufs0 -> $bufs1)"
fi
dmesg_assert_clean
