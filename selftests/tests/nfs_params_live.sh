#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Module parameters are read when a transport (a mount) is created: writing
# max_inline_read, max_inline_write or versions while a mount exists must
# not reach its connections, whose Receive and Send buffers were sized by
# the old values, not even when they reconnect. A transport that re-read
# them would advertise a Receive size its posted buffers do not have, or
# size calls for Send buffers that are smaller. A new mount takes the new
# values. The thresholds each connection uses are in its "connected to"
# line.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
P=/sys/module/rpcrdma_rs/parameters
modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
# thresholds: the thresholds of each connection since the mark, one
# "CALLS/REPLIES" per line.
thresholds() {
  dmesg_since_mark | sed -n 's/.*connected to .* inline thresholds \([0-9]*\) (calls) and \([0-9]*\) (replies).*/\1\/\2/p'
}
head -c $((384 << 10)) /dev/urandom > /tmp/pl.src
want=$(md5sum < /tmp/pl.src | cut -d' ' -f1)
# io N: the file written with O_DIRECT (each 64 KiB one WRITE with a Read
# chunk) and read back the same way.
io() {
  dd if=/tmp/pl.src of="$MNT/pl.dat" bs=64k oflag=direct status=none || fail "$1: write failed"
  [ "$(dd if="$MNT/pl.dat" bs=64k iflag=direct status=none | md5sum | cut -d' ' -f1)" = "$want" ] ||
    fail "$1: data read back wrong"
  # Small files: inline READs and WRITEs up to the thresholds.
  echo "$1" > "$MNT/pl.small" && [ "$(cat "$MNT/pl.small")" = "$1" ] || fail "$1: small file I/O failed"
}

mount_rs || fail "mount failed"
io "first connection"
echo 1024 > $P/max_inline_read && echo 1024 > $P/max_inline_write && echo 1 > $P/versions ||
  fail "cannot write the parameters"
c0=$(rdma_xprt_field 3)
for k in 1 2; do
  force_disconnect
  io "reconnect $k"
done
c1=$(rdma_xprt_field 3)
umount "$MNT" || fail "umount failed"
old=$(thresholds)
diag "connects $c0 -> $c1; thresholds of the first mount's connections: $(echo $old)"
[ "$c1" -ge $((c0 + 2)) ] || fail "the forced disconnects did not reconnect ($c0 -> $c1 connects)"
[ "$(printf '%s\n' "$old" | wc -l)" -ge 3 ] || fail "fewer than 3 connect lines in the log"
printf '%s\n' "$old" | grep -vqx '4096/4096' && fail "a reconnect took the parameters written after the mount: $(echo $old)"

dmesg_mark
mount_rs || fail "second mount failed"
io "second mount"
umount "$MNT" || fail "umount failed"
new=$(thresholds)
diag "thresholds of the second mount: $new"
[ "$new" = 1024/1024 ] || fail "a new mount did not take the new parameters ($new)"
echo 4096 > $P/max_inline_read; echo 4096 > $P/max_inline_write; echo 2,1 > $P/versions
unload rpcrdma_rs
dmesg_assert_clean
