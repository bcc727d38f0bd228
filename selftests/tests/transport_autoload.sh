#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `mount -o proto=rdma` autoloads rpcrdma_rs (never the in-tree rpcrdma) and
# SUNRPC hands the transport setup to it. Until the data path lands, setup
# refuses with EPROTONOSUPPORT and one clear dmesg line.
. "$(dirname "$0")/../lib.sh"
unload rpcrdma_rs; unload rpcrdma
dmesg_mark
out=$(timeout 120 mount -t nfs -o vers=4.2,proto=rdma,port=20049,retry=0 "$SERVER4:/" "$MNT" 2>&1)
rc=$?
diag "mount exited $rc: $out"
if nfs_mounted; then umount "$MNT"; fail "mount succeeded, but the data path does not exist yet"; fi
module_loaded rpcrdma_rs || fail "proto=rdma did not autoload rpcrdma_rs"
module_loaded rpcrdma && fail "proto=rdma autoloaded the in-tree rpcrdma"
dmesg_since_mark | grep -q "rpcrdma_rs: cannot create a transport to $SERVER4: the RDMA data path is not implemented yet" ||
  fail "rpcrdma_rs's setup was not reached (no refusal message)"
printf '%s' "$out" | grep -qi 'protocol not supported' || fail "mount did not fail with EPROTONOSUPPORT"
# Same for the rdma6 netid.
out=$(timeout 120 mount -t nfs -o vers=4.2,proto=rdma6,port=20049,retry=0 "[$SERVER6]:/" "$MNT" 2>&1)
diag "rdma6 mount: $out"
nfs_mounted && { umount "$MNT"; fail "rdma6 mount succeeded unexpectedly"; }
dmesg_since_mark | grep -q "rpcrdma_rs: cannot create a transport to $SERVER6" || fail "rdma6 setup not reached"
unload rpcrdma_rs
dmesg_assert_clean
