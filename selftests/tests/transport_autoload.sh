#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# `mount -o proto=rdma` (and proto=rdma6) autoloads rpcrdma_rs, never the
# in-tree rpcrdma, and the mount runs over it: the module is in use while
# mounted and unloads cleanly afterwards.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
for addr in "$SERVER4" "$SERVER6"; do
  mount_rs "$addr" || fail "mount over $addr failed"
  module_loaded rpcrdma_rs || fail "proto=rdma did not autoload rpcrdma_rs"
  module_loaded rpcrdma && fail "proto=rdma autoloaded the in-tree rpcrdma"
  users=$(awk '$1 == "rpcrdma_rs" {print $3}' /proc/modules)
  netid=$(findmnt -n -o OPTIONS "$MNT" | tr , '\n' | sed -n 's/^proto=//p')
  diag "mounted $addr with proto=$netid; rpcrdma_rs use count $users"
  [ "${users:-0}" -gt 0 ] || fail "rpcrdma_rs is not in use by the mount"
  [ -n "$(rdma_xprt_field 1)" ] || fail "mountstats shows no rdma transport"
  ls "$MNT" > /dev/null || fail "cannot list the export"
  umount "$MNT" || fail "umount failed"
done
dmesg_since_mark | grep -q "rpcrdma_rs: connected to $SERVER4 port 20049 via rxe0" || fail "no connect message for $SERVER4"
dmesg_since_mark | grep -q "rpcrdma_rs: connected to $SERVER6 port 20049 via rxe0" || fail "no connect message for $SERVER6"
unload rpcrdma_rs
dmesg_assert_clean
