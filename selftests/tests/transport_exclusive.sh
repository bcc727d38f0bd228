#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# While rpcrdma_rs is loaded it owns XPRT_TRANSPORT_RDMA: the in-tree C client
# cannot register the same transport. After rmmod the ident is free again.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
if out=$(load_c_client 2>&1); then
  unload rpcrdma; fail "in-tree rpcrdma registered while rpcrdma_rs holds the rdma transport"
fi
diag "in-tree rpcrdma refused while rpcrdma_rs is loaded: $out"
# Its init gets EEXIST from xprt_register_transport; 7.x kernels hand
# that to modprobe as EBUSY (EEXIST from init_module means "already
# loaded" there).
printf '%s' "$out" | grep -qE 'File exists|already in kernel|Device or resource busy' ||
  fail "in-tree rpcrdma failed for another reason than EEXIST"
module_loaded rpcrdma && fail "in-tree rpcrdma is loaded"
module_loaded rpcrdma_rs || fail "rpcrdma_rs went away"
unload rpcrdma_rs
load_c_client || fail "in-tree rpcrdma cannot load after rpcrdma_rs was removed: the ident leaked"
unload rpcrdma
dmesg_assert_clean
