#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `mount -o proto=rdma` (and proto=rdma6) autoloads rpcrdma_rs, never the
# in-tree rpcrdma, and NFS versions 3, 4.0, 4.1 and 4.2 mount over it on
# IPv4 and IPv6: the module is in use while mounted, the export can be
# listed, and it unloads cleanly afterwards.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
for addr in "$SERVER4" "$SERVER6"; do
  for v in 3 4.0 4.1 4.2; do
    opts=vers=$v,port=20049,retry=0 path=/ host=$addr proto=rdma
    [ $v = 3 ] && opts=$opts,nolock path=$RS_EXPORT
    case "$addr" in *:*) host="[$addr]" proto=rdma6 ;; esac
    timeout 120 mount -t nfs -o "$opts,proto=$proto" "$host:$path" "$MNT" || fail "vers=$v over $addr: mount failed"
    module_loaded rpcrdma_rs || fail "proto=$proto did not autoload rpcrdma_rs"
    module_loaded rpcrdma && fail "proto=$proto autoloaded the in-tree rpcrdma"
    users=$(awk '$1 == "rpcrdma_rs" {print $3}' /proc/modules)
    [ "${users:-0}" -gt 0 ] || fail "rpcrdma_rs is not in use by the mount"
    [ -n "$(rdma_xprt_field 1)" ] || fail "vers=$v over $addr: mountstats shows no rdma transport"
    ls "$MNT" > /dev/null || fail "vers=$v over $addr: cannot list the export"
    umount "$MNT" || fail "vers=$v over $addr: umount failed"
    diag "vers=$v over $addr (proto=$proto): mounted, listed, unmounted"
  done
done
dmesg_since_mark | grep -q "rpcrdma_rs: connected to $SERVER4 port 20049 via rxe0" || fail "no connect message for $SERVER4"
dmesg_since_mark | grep -q "rpcrdma_rs: connected to $SERVER6 port 20049 via rxe0" || fail "no connect message for $SERVER6"
unload rpcrdma_rs
dmesg_assert_clean
