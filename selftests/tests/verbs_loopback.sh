#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The verbs layer's server-shaped parts, in a loopback self-test inside the
# module (rust/verbs/selftest.rs): a listener accepts a connection from the
# same host, RDMA-Writes into and RDMA-Reads from pages the active side
# registered, holds a Receive and releases it, and answers with Send With
# Invalidate. Writing the device's address to the verbs_selftest parameter
# runs it; the write fails if the test does.
. "$(dirname "$0")/../lib.sh"
only_ours
dev=$(rdma link show | awk '{print $2}' | cut -d/ -f1 | head -1)
[ -n "$dev" ] || fail "no RDMA device in the guest"
netdev=$(rdma link show | awk '{for (i = 1; i < NF; i++) if ($i == "netdev") print $(i + 1)}' | head -1)
addr=$(ip -4 -o addr show dev "$netdev" | awk '{print $4}' | cut -d/ -f1 | head -1)
[ -n "$addr" ] || fail "no IPv4 address on $netdev"
unload_all
modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
param=/sys/module/rpcrdma_rs/parameters/verbs_selftest
[ "$(cat $param)" = "not run" ] || fail "verbs_selftest reads '$(cat $param)' before any run"
dmesg_mark
for i in 1 2 3; do
  echo "$addr" > $param || { dmesg_since_mark | sed 's/^/# /'; fail "run $i on $addr ($dev) failed: $(cat $param)"; }
done
[ "$(cat $param)" = passed ] || fail "verbs_selftest reads '$(cat $param)'"
log=$(dmesg_since_mark)
n=$(printf '%s\n' "$log" | grep -c 'verbs self-test passed')
diag "3 runs on $addr ($dev): $n passed"
[ "$n" = 3 ] || fail "expected 3 'passed' lines, saw $n"
# A bad address fails cleanly, and the module still unloads.
echo "not-an-address" > $param 2>/dev/null && fail "a malformed address was accepted"
rmmod rpcrdma_rs || fail "unload failed"
dmesg_assert_clean
