#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A LOCAL_INV that cannot be posted (RFC 8166 section 4.5.4): the regions
# keep rkeys the server could still write through, so the connection is
# closed before the RPC completes (its queue pair moved to the error
# state), and set up again. The RPC itself already has its reply: its data
# is right, and I/O goes on over the new connection. The failure is
# injected through debugfs (fail_local_inv: the next N posts fail).
# Listing a large directory (READDIRPLUS replies in Reply chunks) and
# 1 MiB O_DIRECT reads over knfsd need LOCAL_INV for some of their regions
# (those the server did not invalidate remotely).
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
F=/sys/kernel/debug/rpcrdma_rs
rs_load_hook fail_local_inv
mount_rs || fail "mount failed"
head -c $((2 << 20)) /dev/urandom > /tmp/inv.src
want=$(md5sum < /tmp/inv.src | cut -d' ' -f1)
dd if=/tmp/inv.src of="$MNT/inv.dat" bs=1M oflag=direct status=none || fail "write failed"
mkdir -p "$MNT/inv.dir"
stem=$(printf 'e%.0s' $(seq 1 190))
(cd "$MNT/inv.dir" && seq -f "$stem-%g" 1 48 | xargs touch) || fail "cannot fill the directory"
# io: reads the file and lists the directory on a fresh mount (no cached
# pages or entries); prints what went wrong, nothing if all was right.
io() {
  umount "$MNT" && mount_rs || { echo "remount failed"; return; }
  [ "$(dd if="$MNT/inv.dat" bs=1M iflag=direct status=none | md5sum | cut -d' ' -f1)" = "$want" ] ||
    echo "file read wrong"
  [ "$(ls "$MNT/inv.dir" | wc -l)" = 48 ] || echo "listing wrong"
}
err=$(io); [ -z "$err" ] || fail "before the fault: $err"
f0=$(rs_counter invalidate_failures) l0=$(rs_counter local_invalidations) c0=$(rdma_xprt_field 3)
[ "$l0" -gt 0 ] || fail "no region needed a LOCAL_INV: nothing to inject a failure into"
echo 1 > $F/fail_local_inv
for i in 1 2 3 4 5; do
  err=$(io); [ -z "$err" ] || fail "round $i after the injected failure: $err"
  [ "$(rs_counter invalidate_failures)" -gt "$f0" ] && break
done
f1=$(rs_counter invalidate_failures) left=$(cat $F/fail_local_inv)
# The connection the failure closed comes back (at the next RPC, if the
# failure was the mount's last): I/O goes on.
rounds=$i
ls "$MNT/inv.dir" > /dev/null
c1=$(rdma_xprt_field 3)
[ "$(dd if="$MNT/inv.dat" bs=1M iflag=direct status=none | md5sum | cut -d' ' -f1)" = "$want" ] ||
  fail "data wrong after the reconnect"
rm -rf "$MNT/inv.dat" "$MNT/inv.dir"
umount "$MNT" || fail "umount failed"
logged=$(dmesg_since_mark | grep -c 'cannot invalidate memory regions: closing the connection')
diag "invalidate failures $f0 -> $f1 after $rounds round(s) (hook left at $left); connects of a mount $c0, of the one that failed $c1; LOCAL_INVs before $l0; logged $logged"
[ "$f1" = $((f0 + 1)) ] || fail "the injected LOCAL_INV failure was not counted once"
[ "$left" = 0 ] || fail "the hook was not consumed"
[ "$c1" -gt "$c0" ] || fail "the connection was not set up again after the failure"
[ "$logged" = 1 ] || fail "the failure was logged $logged times"
unload rpcrdma_rs
dmesg_assert_clean
