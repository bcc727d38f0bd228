#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A connection the server rejects as stale (IB CM reject reason 10: it
# still holds an older connection from the same queue pair number, as
# after a link flap) is tried again, not refused: the first two connection
# attempts end as such a rejection would (debugfs reject_stale), yet the
# mount succeeds, its I/O reads back what it wrote, the rejections are
# counted and logged as stale. Refused instead (ECONNREFUSED), the mount's
# first call would fail at once: "Connection refused".
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
F=/sys/kernel/debug/rpcrdma_rs
rs_load_hook reject_stale
s0=$(rs_counter stale_rejections)
echo 2 > $F/reject_stale
t0=$SECONDS
mount_rs || { dmesg_since_mark | tail -20 | sed 's/^/#   /'; fail "mount failed"; }
took=$((SECONDS - t0))
s1=$(rs_counter stale_rejections) left=$(cat $F/reject_stale) connects=$(rdma_xprt_field 3)
f=$MNT/stale.dat
head -c $((1 << 20)) /dev/urandom > /tmp/stale.src
want=$(md5sum < /tmp/stale.src | cut -d' ' -f1)
dd if=/tmp/stale.src of="$f" bs=64k oflag=direct status=none || fail "write failed"
got=$(dd if="$f" bs=64k iflag=direct status=none | md5sum | cut -d' ' -f1)
rm -f "$f"
umount "$MNT" || fail "umount failed"
unload rpcrdma_rs
logged=$(dmesg_since_mark | grep -c 'connection rejected as stale' || true)
diag "mounted after ${took} s; stale rejections $s0 -> $s1, logged $logged; hook left $left; connects $connects"
[ "$got" = "$want" ] || fail "data read back wrong"
[ "$left" = 0 ] || fail "the hook still holds $left rejections: the attempts did not reach it"
[ "$s1" -eq $((s0 + 2)) ] || fail "stale rejections counted: $((s1 - s0)), want 2"
[ "$logged" -eq 2 ] || fail "stale rejections logged: $logged, want 2"
dmesg_assert_clean
