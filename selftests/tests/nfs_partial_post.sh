#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A Send whose chain reaches the queue pair only in part: its REG_MRs are
# posted and its Send is not (a device that refuses a chain part of the
# way leaves that). What was posted belongs to the device until it is
# flushed, so the queue pair goes to the error state at once (its regions
# are then unreachable, and stay out of use until the connection goes),
# the call goes again on a new connection, and nothing is lost or wrong.
# Injected through debugfs (fail_partial_post: the next N Sends that carry
# REG_MRs); 1 MiB O_DIRECT writes and reads carry them (Read and Write
# chunks).
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
F=/sys/kernel/debug/rpcrdma_rs
rs_load_hook fail_partial_post
mount_rs || fail "mount failed"
head -c $((4 << 20)) /dev/urandom > /tmp/partial.src
want=$(md5sum < /tmp/partial.src | cut -d' ' -f1)
c0=$(rdma_xprt_field 3)
# One write of the four is posted in part: it goes again after the
# reconnect.
echo 1 > $F/fail_partial_post
dd if=/tmp/partial.src of="$MNT/partial.dat" bs=1M oflag=direct status=none || fail "write failed"
left=$(cat $F/fail_partial_post)
c1=$(rdma_xprt_field 3)
# And a read.
echo 1 > $F/fail_partial_post
got=$(dd if="$MNT/partial.dat" bs=1M iflag=direct status=none | md5sum | cut -d' ' -f1)
left2=$(cat $F/fail_partial_post)
c2=$(rdma_xprt_field 3)
[ "$got" = "$want" ] || fail "data read back wrong after the partial posts"
rm -f "$MNT/partial.dat"
umount "$MNT" || fail "umount failed"
live=$(rs_mrs_freed)
diag "connects $c0 -> $c1 (write) -> $c2 (read); hooks left $left, $left2; memory regions left after umount $live"
[ "$left" = 0 ] && [ "$left2" = 0 ] || fail "a hook was not consumed"
[ "$c1" -gt "$c0" ] || fail "the connection was not set up again after the partial write"
[ "$c2" -gt "$c1" ] || fail "the connection was not set up again after the partial read"
[ "$live" = 0 ] || fail "$live memory regions left after umount (those kept out of use go with the connection)"
unload rpcrdma_rs
dmesg_assert_clean
