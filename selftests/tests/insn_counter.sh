#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The testbed's instruction counter (scripts/insn_count.c, loaded by
# scripts/testbed.sh --count-insns), whose figures make ab and make bench
# report: both guests' counts move while they serve reads and stand nearly
# still while idle, and the count of the transport module's own code, once
# its address range is set, is the same per RPC (within 2 %) in two
# identical runs of 4 KiB direct reads.
. "$(dirname "$0")/../lib.sh"
C=/run/share/insns.client S=/run/share/insns.server
[ -r $C ] && [ -r $S ] || skip "the testbed does not count instructions (testbed.sh --count-insns)"
RS_OPTS=vers=3,proto=rdma,port=20049,rsize=4096,wsize=4096,nolock,retry=0
# field N of a counter file: 1 instructions, 2 blocks, 3 and 4 the same in
# the range, 5 blocks translated, 6 the QEMU process's host CPU time (us).
count() { awk -v f="$2" '{ print $f }' "$1"; }
# The counter publishes every 10 ms: wait for a fresh reading.
settle() { sleep 0.1; }

unload_all
dmesg_mark
settle; i0=$(count $C 1); sleep 1; i1=$(count $C 1)
idle=$((i1 - i0))
[ "$(awk '{ print NF }' $C)" = 6 ] || fail "the counter writes $(awk '{ print NF }' $C) fields, not 6: $(cat $C)"
[ "$XPRT_MOD" = rpcrdma ] && { load_c_client || fail "cannot load the C client"; }
modprobe "$XPRT_MOD" || fail "cannot load $XPRT_MOD"
# Count the module's own code apart, as the benchmarks do.
python3 "$(dirname "$0")/../../scripts/guest/bench_client.py" --count-module "$XPRT_MOD" ||
  fail "cannot set the counted range to $XPRT_MOD's code"
settle
mount_rs || fail "mount failed"
dd if=/dev/urandom of="$MNT/insn.dat" bs=1M count=1 2>/dev/null || fail "write failed"
sync

# pass: 256 4 KiB direct reads; prints "rpcs client server transport".
pass() {
  local s0 c0 t0 r0 h0 s1 c1 t1 r1 h1
  settle; c0=$(count $C 1); t0=$(count $C 3); s0=$(count $S 1); r0=$(rdma_xprt_field 6); h0=$(count $C 6)
  dd if="$MNT/insn.dat" of=/dev/null bs=4k count=256 iflag=direct 2>/dev/null || return 1
  settle; c1=$(count $C 1); t1=$(count $C 3); s1=$(count $S 1); r1=$(rdma_xprt_field 6); h1=$(count $C 6)
  echo $((r1 - r0)) $((c1 - c0)) $((s1 - s0)) $((t1 - t0)) $((h1 - h0))
}
pass > /dev/null || fail "reads failed"  # code translated, caches warm
r=$(pass) || fail "reads failed"; read -r rpcs1 client1 server1 tr1 host1 <<< "$r"
r=$(pass) || fail "reads failed"; read -r rpcs2 client2 server2 tr2 host2 <<< "$r"
rm -f "$MNT/insn.dat"
umount "$MNT" || fail "umount failed"
unload "$XPRT_MOD"
python3 "$(dirname "$0")/../../scripts/guest/bench_client.py" --count-module none
diag "idle client: $idle instructions in 1 s"
diag "run 1: $rpcs1 RPCs; client $client1, server $server1, $XPRT_MOD $tr1 instructions"
diag "run 2: $rpcs2 RPCs; client $client2, server $server2, $XPRT_MOD $tr2 instructions"
[ "$rpcs1" -ge 256 ] && [ "$rpcs2" -ge 256 ] || fail "fewer RPCs than reads: $rpcs1, $rpcs2"
[ "$client1" -gt $((3 * idle)) ] || fail "the client's count barely moved while reading: $client1 against $idle idle"
[ "$server1" -gt 0 ] && [ "$server2" -gt 0 ] || fail "the server's count did not move"
# 256 round trips through two emulated guests take the client's QEMU well
# over a millisecond of host CPU.
diag "client QEMU host CPU: $host1 and $host2 us"
[ "$host1" -gt 1000 ] && [ "$host2" -gt 1000 ] || fail "the client QEMU's host CPU time barely moved: $host1, $host2 us"
[ "$tr1" -gt $((100 * rpcs1)) ] || fail "under 100 instructions per RPC counted in $XPRT_MOD: $tr1"
[ "$tr1" -lt "$client1" ] || fail "more counted in $XPRT_MOD than in the whole client"
per1=$((tr1 * 1000 / rpcs1)) per2=$((tr2 * 1000 / rpcs2))
diag "$XPRT_MOD per RPC: $((per1 / 1000)).$((per1 % 1000)) and $((per2 / 1000)).$((per2 % 1000))"
d=$((per1 > per2 ? per1 - per2 : per2 - per1))
[ $((d * 50)) -le "$per1" ] || fail "$XPRT_MOD's instructions per RPC differ by more than 2 % between identical runs"
dmesg_assert_clean
