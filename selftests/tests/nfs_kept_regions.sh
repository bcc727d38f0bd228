#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Memory regions a request keeps between its calls go back to the pool
# when calls need them and no more can be made: with the connection
# limited to 4 regions (debugfs max_mrs, as a device with few would have
# it), 4 KiB O_DIRECT reads at queue depth 16 have more requests than
# regions, so idle requests keep regions that others wait for. The reads
# finish, read back what was written, the regions made stay at 4 (the
# mountstats count, over the mount's connections, and debugfs mrs_live,
# those in existence), the reclaim is counted, and the unmount frees
# every region.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
command -v fio > /dev/null || skip "fio not installed"
dmesg_mark
F=/sys/kernel/debug/rpcrdma_rs
rs_load_hook max_mrs
echo 4 > $F/max_mrs
mount_rs || fail "mount failed"
f=$MNT/kept.dat
head -c $((4 << 20)) /dev/urandom > /tmp/kept.src
want=$(md5sum < /tmp/kept.src | cut -d' ' -f1)
dd if=/tmp/kept.src of="$f" bs=64k oflag=direct status=none || fail "write failed"
r0=$(rs_counter mrs_reclaimed)
timeout 300 fio --name=kept --filename="$f" --size=4m --bs=4k --direct=1 --ioengine=libaio --iodepth=16 \
  --rw=randread --number_ios=2048 --output=/tmp/kept.fio > /dev/null 2>&1 ||
  { cat /tmp/kept.fio; fail "the reads did not finish"; }
got=$(dd if="$f" bs=64k iflag=direct status=none | md5sum | cut -d' ' -f1)
r1=$(rs_counter mrs_reclaimed) made=$(rdma_xprt_field 24) bad=$(rdma_xprt_field 20) conns=$(rdma_xprt_field 3)
live=$(rs_counter mrs_live)
rm -f "$f"
umount "$MNT" || fail "umount failed"
left=$(rs_mrs_freed)
unload rpcrdma_rs
diag "regions made $made (cap 4 per connection; connections $conns), $live in existence after the reads, $left after the unmount; regions reclaimed from idle requests $r0 -> $r1; bad replies $bad"
[ "$got" = "$want" ] || fail "data read back wrong"
# The count adds up over the mount's connections (a reconnect makes a
# new set).
[ "${conns:-0}" -ge 1 ] || fail "no connection counted: the reading is wrong"
[ "$made" -le $((4 * conns)) ] || fail "$made regions made on $conns connections, more than the cap of 4 each"
[ "$live" -ge 1 ] && [ "$live" -le 4 ] || fail "$live regions in existence on the connection: expected 1 to the cap of 4"
[ "$left" = 0 ] || fail "$left regions still there after the unmount"
[ "$r1" -gt "$r0" ] || fail "no kept region was reclaimed: the test did not reach the case"
[ "$bad" = 0 ] || fail "bad replies: $bad"
dmesg_assert_clean
