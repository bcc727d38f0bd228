#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The verbs layer's server-shaped parts, in a loopback self-test inside the
# module (rust/verbs/selftest.rs): a listener accepts a connection from the
# same host, RDMA-Writes into and RDMA-Reads from pages the active side
# registered, holds a Receive and releases it, and answers with Send With
# Invalidate. Writing the device's address to the verbs_selftest parameter
# runs it; the write fails if the test does. It runs on the guest's
# soft-RoCE device, then on soft-iWARP (siw) on the same network device,
# where an RDMA Read needs a registered sink (the R/W API's MR pool,
# sized by max_rdma_ctxs at queue pair creation).
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
printf '%s\n' "$log" | grep -q "verbs self-test passed on $dev:" || fail "the runs did not use $dev"

# Soft-iWARP, in place of soft-RoCE on the same network device (rdma_cm
# gives an address to the first device that takes it; a loopback address
# none will): the soft-RoCE link goes away meanwhile, as nfs_faults does
# with it, and comes back after.
# Debian's own kernels are built without it (no CONFIG_RDMA_SIW): there the
# siw run is left to the test kernels, which have it.
# On a testbed whose link is soft-iWARP already (testbed.sh --link siw) the
# runs above were the iWARP ones, and the link stays as it is.
siw=1
if [ "$dev" = siw0 ]; then
  diag "the testbed's link is soft-iWARP: the runs above were on it"
  siw=0
elif ! modinfo siw > /dev/null 2>&1 && [[ "$(uname -r)" == *+deb* ]]; then
  diag "$(uname -r) (Debian's build) has no siw module: the siw run is the test kernels'"
  siw=0
fi
if [ $siw = 1 ]; then
modprobe siw || fail "cannot load siw (CONFIG_RDMA_SIW)"
restore() {
  rdma link delete siw0 2>/dev/null
  rmmod siw 2>/dev/null
  rdma link show "$dev/1" > /dev/null 2>&1 || rdma link add "$dev" type rxe netdev "$netdev"
}
trap restore EXIT
rdma link delete "$dev" || fail "cannot delete $dev"
rdma link add siw0 type siw netdev "$netdev" || fail "cannot add a siw link on $netdev"
dmesg_mark
echo "$addr" > $param || { dmesg_since_mark | sed 's/^/# /'; fail "the run on siw failed: $(cat $param)"; }
log=$(dmesg_since_mark)
printf '%s\n' "$log" | grep -q 'verbs self-test passed on siw0:' ||
  { printf '%s\n' "$log" | sed 's/^/# /'; fail "no 'passed on siw0' line"; }
diag "1 run on $addr (siw0, iWARP): passed"
rdma link delete siw0 || fail "cannot delete the siw link"
rdma link add "$dev" type rxe netdev "$netdev" || fail "cannot add $dev back"
fi
# A bad address fails cleanly, and the module still unloads.
echo "not-an-address" > $param 2>/dev/null && fail "a malformed address was accepted"
rmmod rpcrdma_rs || fail "unload failed"
[ $siw = 0 ] || rmmod siw || fail "siw does not unload"
trap - EXIT
rdma link show "$dev/1" > /dev/null || fail "$dev is not back"
dmesg_assert_clean
