#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# No heap allocation on the per-RPC path: with the kmem trace events on
# (kmalloc, kmem_cache_alloc: every slab allocation, KBox and KVec
# included, with the address of its caller), 4 KiB O_DIRECT reads at queue
# depth 16, 4 KiB O_DIRECT writes and GETATTRs over a connected mount make
# no allocation whose caller is in rpcrdma_rs, while the mount's RPC count
# (mountstats sends) moves by over a thousand. Page allocations are not
# traced with a caller; the module allocates pages only when a connection
# is set up.
. "$(dirname "$0")/../lib.sh"
only_ours
command -v fio > /dev/null || skip "fio not installed"
T=/sys/kernel/tracing
tracefs_ready || skip "no tracefs: a kernel without trace events"
[ -d $T/events/kmem/kmalloc ] || skip "no kmem trace events"
unload_all
dmesg_mark
mount_rs || fail "mount failed"
f=$MNT/zero_alloc.dat
dd if=/dev/urandom of="$f" bs=1M count=4 status=none || fail "write failed"
sync
common="--filename=$f --size=4m --bs=4k --direct=1 --ioengine=libaio --iodepth=16 --numjobs=1"
# A warm-up pass: anything allocated once (say, on first use) is not
# per-RPC.
# (Memory regions are made on demand until the mount has as many as its
# load keeps busy: the warm-up runs both shapes of the traced load.)
fio --name=w $common --rw=randread --number_ios=256 > /dev/null 2>&1 || fail "warm-up failed"
fio --name=w $common --rw=randwrite --number_ios=256 > /dev/null 2>&1 || fail "warm-up failed"
s0=$(rdma_xprt_field 6)
m0=$(rdma_xprt_field 24)
echo 0 > $T/tracing_on
echo > $T/trace
echo 8192 > $T/buffer_size_kb
echo 1 > $T/events/kmem/kmalloc/enable
echo 1 > $T/events/kmem/kmem_cache_alloc/enable
echo 1 > $T/tracing_on
fio --name=r $common --rw=randread --number_ios=1024 > /dev/null 2>&1 || fail "reads failed"
fio --name=w $common --rw=randwrite --number_ios=512 > /dev/null 2>&1 || fail "writes failed"
for i in $(seq 1 200); do stat -c %s "$f" > /dev/null; echo 3 > /proc/sys/vm/drop_caches; done 2> /dev/null
echo 0 > $T/tracing_on
echo 0 > $T/events/kmem/kmalloc/enable
echo 0 > $T/events/kmem/kmem_cache_alloc/enable
cp $T/trace /tmp/zero_alloc.txt
echo > $T/trace
s1=$(rdma_xprt_field 6)
m1=$(rdma_xprt_field 24)
diag "memory regions made: $m0 before the traced load, $m1 after"
[ "$m1" = "$m0" ] || fail "memory regions were made during the traced load ($m0 -> $m1): warm up longer"

rpcs=$((s1 - s0))
total=$(grep -cE ': (kmalloc|kmem_cache_alloc):' /tmp/zero_alloc.txt)
ours=$(grep -E ': (kmalloc|kmem_cache_alloc):' /tmp/zero_alloc.txt | grep -c '\[rpcrdma_rs\]')
lost=$(grep -c 'LOST' /tmp/zero_alloc.txt)
diag "$rpcs RPCs: $total slab allocations in the whole guest, $ours of them by rpcrdma_rs"
rm -f "$f"
umount "$MNT" || fail "umount failed"
[ "$rpcs" -gt 1000 ] || fail "only $rpcs RPCs went out: the workload did not run"
[ "$total" -gt 0 ] || fail "no allocation traced at all: the events do not work"
[ "$lost" = 0 ] || fail "the trace lost events"
if [ "$ours" != 0 ]; then
  grep -E ': (kmalloc|kmem_cache_alloc):' /tmp/zero_alloc.txt | grep '\[rpcrdma_rs\]' |
    sed -E 's/.*call_site=([^ ]*).*/\1/' | sort | uniq -c | sort -rn | head -10 | sed 's/^/#   /'
  fail "rpcrdma_rs allocated $ours times on the per-RPC path"
fi
dmesg_assert_clean
