#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A call that needs more memory regions than the pool has idle, while an
# idle request keeps the others, gets them: the region worker reclaims the
# kept one, and the call neither spins retrying nor waits for a timeout.
# The connection may make 2 regions (debugfs max_mrs) of 48 pages each
# (debugfs mr_pages, as a device with short page lists would have it).
# 4 KiB O_DIRECT reads one at a time leave one request keeping a region
# and the other idle; then a 256 KiB O_DIRECT write (64 pages: a Read
# chunk of two segments, a region each) takes the idle region, finds no
# second one and gives the first back. It must finish promptly and read
# back intact, with the regions made still at 2 and a reclaim counted.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
F=/sys/kernel/debug/rpcrdma_rs
rs_load_hook mr_pages
echo 2 > $F/max_mrs
echo 48 > $F/mr_pages
mount_rs || fail "mount failed"
f=$MNT/short.dat
# The file is made on the server: writing it from here would leave both
# regions kept by the requests that wrote it back.
out=$(server_cmd "mkdata short.dat 1")
printf '%s' "$out" | grep -q 'rc=0' || fail "server could not make the file: $out"
dd if="$f" of=/dev/null bs=4k count=32 iflag=direct status=none || fail "the reads failed"
head -c $((256 << 10)) /dev/urandom > /tmp/short.src
want=$(md5sum < /tmp/short.src | cut -d' ' -f1)
r0=$(rs_counter mrs_reclaimed) segs0=$(rdma_xprt_field 11) w0=$(rdma_xprt_field 26)
start=$(date +%s)
timeout 60 dd if=/tmp/short.src of="$f" bs=256k count=1 oflag=direct conv=notrunc status=none ||
  fail "the 256 KiB O_DIRECT write failed or stalled"
took=$(( $(date +%s) - start ))
r1=$(rs_counter mrs_reclaimed) segs1=$(rdma_xprt_field 11) w1=$(rdma_xprt_field 26)
made=$(rdma_xprt_field 24)
got=$(dd if="$f" bs=256k count=1 iflag=direct status=none | md5sum | cut -d' ' -f1)
rm -f "$f"
umount "$MNT" || fail "umount failed"
unload rpcrdma_rs
diag "write took ${took}s; Read chunk segments $segs0 -> $segs1; waits for Send buffers or regions $w0 -> $w1;" \
  "regions made $made (cap 2); reclaimed $r0 -> $r1"
[ "$got" = "$want" ] || fail "data read back wrong"
[ $((segs1 - segs0)) = 2 ] || fail "the write did not go as one Read chunk of two segments: the test did not reach the case"
[ "$made" -le 2 ] || fail "$made regions made, more than the cap of 2"
[ "$r1" -gt "$r0" ] || fail "no kept region was reclaimed: the test did not reach the case"
[ "$took" -le 20 ] || fail "the write took ${took}s: it waited for regions far too long"
dmesg_assert_clean
