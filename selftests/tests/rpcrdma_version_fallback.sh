#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# RPC-over-RDMA version negotiation against the stock Linux server, which
# speaks Version One only. With versions=2,1 (the default) the first call
# of the first connection is a Version Two probe; knfsd answers ERR_VERS,
# the same call goes again as Version One on the same connection (no
# reconnect), the log says so once, and a second mount to the same server
# starts with Version One (no probe, so no extra round trip). With
# versions=1 nothing is probed at all; with versions=2 ("Version Two or
# nothing") the mount fails with EPROTONOSUPPORT rather than fall back.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
line='not Two: using Version One'
modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
p=$(cat /sys/module/rpcrdma_rs/parameters/versions)
[ "$p" = "2,1" ] || fail "versions= defaults to '$p', not 2,1"
io() { # N: one mount, a file written and read back
  mount_rs || fail "mount $1 failed"
  echo "mount $1" > "$MNT/vers.$1" && [ "$(cat "$MNT/vers.$1")" = "mount $1" ] || fail "mount $1: I/O failed"
  rm -f "$MNT/vers.$1"
  connects=$(rdma_xprt_field 3)
  umount "$MNT" || fail "umount $1 failed"
}
io 1
fb1=$(rs_counter v1_fallbacks) c1=$connects
n1=$(dmesg_since_mark | grep -c "$line")
io 2
fb2=$(rs_counter v1_fallbacks)
n2=$(dmesg_since_mark | grep -c "$line")
diag "first mount: $fb1 fallback(s), $n1 log line(s), $c1 connect(s); second mount: fallbacks $fb2, log lines $n2"
[ "$fb1" = 1 ] || fail "the first connection did not fall back from Version Two exactly once"
[ "$n1" = 1 ] || fail "the fallback was not logged exactly once"
[ "$c1" = 1 ] || fail "the fallback cost a reconnect ($c1 connects)"
[ "$fb2" = 1 ] && [ "$n2" = 1 ] || fail "the second connection probed again"
[ "$(rs_counter v2_connections)" = 0 ] || fail "a Version Two connection with knfsd?"
unload rpcrdma_rs
modprobe rpcrdma_rs versions=1 || fail "cannot load rpcrdma_rs versions=1"
io 3
[ "$(rs_counter v1_fallbacks)" = 0 ] || fail "versions=1 probed Version Two"
unload rpcrdma_rs
modprobe rpcrdma_rs versions=2 || fail "cannot load rpcrdma_rs versions=2"
dmesg_mark
if mount_rs; then umount "$MNT"; fail "versions=2 mounted a Version One server"; fi
refused=$(dmesg_since_mark | grep -c 'none of those allowed (versions=2)')
diag "versions=2: the mount failed; refusal logged $refused time(s), fallbacks $(rs_counter v1_fallbacks)"
[ "$refused" -ge 1 ] || fail "versions=2: no refusal in the log"
[ "$(rs_counter v1_fallbacks)" = 0 ] || fail "versions=2 fell back to Version One"
unload rpcrdma_rs
if modprobe rpcrdma_rs versions=3 2>/dev/null; then unload rpcrdma_rs; fail "versions=3 accepted"; fi
dmesg_assert_clean
