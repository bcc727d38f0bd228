#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A hostile client against our server (testbed.sh --server-module ours;
# skipped over the in-tree svcrdma, and run once, with our client's
# module): tools/rdma-peer --connect plays each c-* scenario of its
# catalogue (Documentation/hostile-peer.rst, "The hostile client") from
# the client guest and checks the server's answers against the specs:
# a grant in every reply, ERR_VERS naming the versions served, ERR_CHUNK
# (Version Two: ERR_BAD_HEADER) for chunk lists the server cannot carry
# with the connection kept, ERR_INVAL_OPTION for OPTIONAL messages not
# supported, ROPT_RESPXCH for ROPT_REQXCH, plain Sends where the client
# takes no Send With Invalidate, junk private data ignored, a Long Call
# served and one abandoned mid-read let go, replies to backward calls
# never made dropped and counted, a READ's Write chunk too short for it
# failed with nothing written past it, credits overrun, a storm of
# connections. Every scenario must pass; the grant follows the
# server_credits parameter;
# the server's error counters must have moved; afterwards a mount over
# the server still writes and reads a file back, and the server's kernel
# log stays clean.
. "$(dirname "$0")/../lib.sh"
only_our_server
only_ours
peer=/run/repo/tools/rdma-peer/target/release/rdma-peer
[ -x $peer ] || fail "no $peer (make peer)"
server_versions 2,1
unload_all
dmesg_mark
e0=$(server_counter errors_sent) v0=$(server_counter err_vers_sent) d0=$(server_counter bc_replies_dropped)
# The file c-short-write reads (PUTROOTFH, LOOKUP, READ): 16 KiB of the
# peer's pattern at the export's root.
mount_rs || fail "mount before the hostile client failed"
$peer --pattern 16384 > "$MNT/hostile-read" && sync || fail "cannot write the file c-short-write reads"
umount "$MNT" || fail "umount failed"
scenarios=$($peer --list | awk '$1 ~ /^c-/ { print $1 }')
[ "$(printf '%s\n' "$scenarios" | wc -l)" -ge 10 ] || fail "the hostile client's catalogue is short: $scenarios"
failed=
for s in $scenarios; do
  out=$(timeout 120 $peer --connect "$SERVER4:20049" --scenario "$s" 2>&1)
  rc=$?
  diag "$s: $(printf '%s\n' "$out" | tail -1 | sed 's/^\[ *[0-9.]*\] //')"
  # What the server did, where the scenario accepts more than one answer.
  printf '%s\n' "$out" | grep -E '(outstanding against|answered, then|all [0-9]+ answered|placed in the Write chunk|READ failed|ERR_CHUNK$|connections made)' |
    sed 's/^\[ *[0-9.]*\] /#     /'
  if [ $rc != 0 ]; then
    printf '%s\n' "$out" | tail -8 | sed 's/^/#     /'
    failed="$failed $s"
  fi
done
[ -z "$failed" ] || fail "the server failed:$failed"
# The grant is server_credits': 64 by default, what the parameter says
# for connections accepted after it is set (c-credit-overrun reports the
# grant its first reply carried, and sends twice as many calls).
overrun() {
  out=$(timeout 120 $peer --connect "$SERVER4:20049" --scenario c-credit-overrun 2>&1) ||
    fail "c-credit-overrun with server_credits=$1: $(printf '%s\n' "$out" | tail -3)"
  printf '%s\n' "$out" | grep -q "] $2 NULL calls outstanding against a grant of $1\$" ||
    fail "c-credit-overrun with server_credits=$1 did not see $2 calls against a grant of $1: $(printf '%s\n' "$out" | grep outstanding)"
}
overrun 64 128
server_credits 16
overrun 16 32
server_credits 0
overrun 64 128
diag "c-credit-overrun: grants of 64 (the default) and 16 (server_credits=16), each overrun twice"
e=$(( $(server_counter errors_sent) - e0 )) v=$(( $(server_counter err_vers_sent) - v0 ))
diag "the server sent $e RDMA_ERRORs and $v ERR_VERS"
[ "$e" -ge 8 ] || fail "the server counted $e RDMA_ERRORs, not the catalogue's 8"
[ "$v" -ge 1 ] || fail "the server counted no ERR_VERS"
d=$(( $(server_counter bc_replies_dropped) - d0 ))
[ "$d" -ge 16 ] || fail "the server dropped $d stray backward replies, not c-stray-bc-reply's 16"
# The server still serves.
mount_rs || fail "mount after the hostile client failed"
# The whole grant in use: 4 KiB reads and writes (Read chunks) at depth
# 128 keep 64 calls outstanding, the Receives given back reposted in
# batches meanwhile. The client takes no RNR retry: a call that found no
# Receive posted would cost the connection, which must stay the first.
if command -v fio > /dev/null; then
  fio --name=grant --filename="$MNT/grant" --size=4M --bs=4k --direct=1 --ioengine=libaio --iodepth=128 \
    --rw=randrw --time_based --runtime=4 --output=/tmp/grant.out > /dev/null 2>&1 ||
    { cat /tmp/grant.out; fail "fio at depth 128 failed"; }
  c=$(rdma_xprt_field 3) n=$(rdma_xprt_field 6)
  diag "depth 128 against a grant of 64: $n sends, connected $c time(s)"
  [ "$c" = 1 ] || fail "the connection was lost under the whole grant ($c connects)"
  rm -f "$MNT/grant"
fi
head -c $((256 << 10)) /dev/urandom > /tmp/hc.src
cp /tmp/hc.src "$MNT/hc" && sync || fail "write after the hostile client failed"
umount "$MNT" && mount_rs || fail "remount failed"
cmp -s /tmp/hc.src "$MNT/hc" || fail "the file read back differs"
rm -f "$MNT/hc" "$MNT/hostile-read"
umount "$MNT" || fail "umount failed"
server_dmesg_assert_clean
dmesg_assert_clean
