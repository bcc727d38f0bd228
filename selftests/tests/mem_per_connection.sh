#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Memory per connection, rpcrdma_rs against the in-tree C client in the same
# boot: with the transport module loaded, the kernel memory a mount of the
# default slot count takes (unreclaimable slab plus vmalloc, and free
# memory, with the page cache dropped before each reading), three mounts
# each, medians printed (Documentation/benchmarks.rst quotes them). The
# NFS client's own state is the same for both; the difference is the
# transport's. Then, for each transport, what the mounts left behind once
# unmounted and the module unloaded: less than 256 KiB, or it leaks.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
# reading: "SUnreclaim+VmallocUsed MemFree", kB, after dropping caches
# and shrinking the slab caches (lib.sh shrink_slabs).
reading() {
  sync; echo 3 > /proc/sys/vm/drop_caches; shrink_slabs; sleep 0.5
  awk '/^SUnreclaim:/ { k += $2 } /^VmallocUsed:/ { k += $2 } /^MemFree:/ { f = $2 } END { print k, f }' /proc/meminfo
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# measure MODULE: three mounts over MODULE; prints "kernel_kB free_kB leak_kB".
measure() {
  local mod=$1 i k0 f0 k1 f1 ks= fs=
  if [ "$mod" = rpcrdma ]; then load_c_client || fail "cannot load rpcrdma"; else modprobe "$mod" || fail "cannot load $mod"; fi
  for i in 1 2 3; do
    set -- $(reading); k0=$1 f0=$2
    mount_rs || fail "mount over $mod failed"
    stat "$MNT" > /dev/null || fail "stat over $mod failed"
    set -- $(reading); k1=$1 f1=$2
    ks+="$((k1 - k0))"$'\n'; fs+="$((f0 - f1))"$'\n'
    umount "$MNT" || fail "umount failed"
  done
  unload "$mod"
  # After the unload: what is left is compared with before the module.
  set -- $(reading); k1=$1
  echo "$(printf '%s' "$ks" | median) $(printf '%s' "$fs" | median) $k1"
}
# loaded MODULE: regions are made as the load needs them (both clients):
# how many at the mount, how many after 4 KiB reads at queue depth 64, and
# the kernel memory then; into /tmp/mem_loaded.MODULE.
loaded() {
  local mod=$1 k0 k1 m0 m1 f=$MNT/mem_per_connection.dat
  if [ "$mod" = rpcrdma ]; then load_c_client || fail "cannot load rpcrdma"; else modprobe "$mod" || fail "cannot load $mod"; fi
  set -- $(reading); k0=$1
  mount_rs || fail "mount over $mod failed"
  stat "$MNT" > /dev/null || fail "stat over $mod failed"
  m0=$(rdma_xprt_field 24)
  dd if=/dev/zero of="$f" bs=1M count=8 status=none || fail "write over $mod failed"
  fio --name=qd64 --filename="$f" --size=8m --bs=4k --direct=1 --ioengine=libaio --iodepth=64 \
    --rw=randread --number_ios=4096 > /dev/null 2>&1 || fail "reads over $mod failed"
  m1=$(rdma_xprt_field 24) conns=$(rdma_xprt_field 3) live=$(rs_counter mrs_live)
  # The region count adds up over the mount's connections: a mount that
  # reconnected made a second set (mrs_live counts what exists). On the
  # debug kernel this load has reset the connection now and then, when
  # soft-RoCE retransmitted and ran a registration again
  # (Documentation/testbed.rst, "Soft-RoCE and retransmission"): the
  # device's counters are printed to show it.
  [ "${conns:-0}" -le 1 ] || diag "$mod reconnected under the load: $conns connections; soft-RoCE: $(rxe_counters)"
  set -- $(reading); k1=$1
  rm -f "$f"
  umount "$MNT" || fail "umount failed"
  left=$(rs_mrs_freed)
  unload "$mod"
  echo "$m0 $m1 $((k1 - k0)) $conns $live $left" > /tmp/mem_loaded.$mod
}
# A first mount loads what the transport and NFS need (on a modular
# kernel: nfs, sunrpc, rdma_cm...), which stays: not the transport's.
modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
mount_rs || fail "mount over rpcrdma_rs failed"
umount "$MNT" || fail "umount failed"
unload rpcrdma_rs
set -- $(reading); start=$1
set -- $(measure rpcrdma_rs); rs_k=$1 rs_f=$2 rs_end=$3
set -- $(measure rpcrdma); c_k=$1 c_f=$2 c_end=$3
# Twice each, alternating, the second kept: the first run of the load in
# the boot grows slab caches that later ones find ready.
for mod in rpcrdma_rs rpcrdma rpcrdma_rs rpcrdma; do loaded $mod; done
diag "per mount (default slots): rpcrdma_rs $rs_k kB kernel memory, $rs_f kB less free; C client $c_k kB, $c_f kB"
diag "ratio (kernel memory): $(awk -v a="$rs_k" -v b="$c_k" 'BEGIN { printf "%.2f", b ? a / b : 0 }')"
set -- $(cat /tmp/mem_loaded.rpcrdma_rs); rs_m0=$1 rs_m1=$2 rs_kl=$3 rs_conns=$4 rs_live=$5 rs_left=$6
set -- $(cat /tmp/mem_loaded.rpcrdma); c_m0=$1 c_m1=$2 c_kl=$3
diag "memory regions at the mount / after QD64 reads: rpcrdma_rs $rs_m0 / $rs_m1, C client $c_m0 / $c_m1"
diag "rpcrdma_rs memory regions in existence after the reads: $rs_live; after the unmount: $rs_left"
diag "kernel memory after QD64 reads: rpcrdma_rs $rs_kl kB, C client $c_kl kB"
# At the mount, regions for one call (8); under load more, at most two per
# slot (256 at the default 128 slots) on each connection.
[ "$rs_m0" -ge 1 ] && [ "$rs_m0" -le 8 ] || fail "rpcrdma_rs started with $rs_m0 memory regions (expected 1 to 8)"
[ "$rs_m1" -gt "$rs_m0" ] || fail "rpcrdma_rs made no memory region under QD64 reads ($rs_m0 -> $rs_m1)"
[ "${rs_conns:-0}" -ge 1 ] || fail "no connection counted: the reading is wrong"
[ "$rs_m1" -le $((256 * rs_conns)) ] ||
  fail "rpcrdma_rs made $rs_m1 memory regions on $rs_conns connections: more than two per slot"
[ "$rs_live" -ge 1 ] && [ "$rs_live" -le 256 ] ||
  fail "$rs_live memory regions of rpcrdma_rs in existence after the reads: expected 1 to two per slot"
[ "$rs_left" = 0 ] || fail "$rs_left memory regions of rpcrdma_rs still there after the unmount"
[ "${rs_k:-0}" -gt 0 ] && [ "${c_k:-0}" -gt 0 ] || fail "a mount took no kernel memory: the reading is wrong"
leak=$((rs_end - start))
diag "kernel memory before: $start kB; after rpcrdma_rs's mounts and rmmod: $rs_end kB; after the C client's: $c_end kB"
[ "$leak" -lt 256 ] || fail "rpcrdma_rs left $leak kB of kernel memory behind"
