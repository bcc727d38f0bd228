#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rpcrdma_rs loads and unloads 10 times; each load registers the transport
# class and sees the RDMA device, each unload releases both; dmesg stays clean.
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dev=$(rdma link show | awk '{print $2}' | cut -d/ -f1 | head -1)
[ -n "$dev" ] || fail "no RDMA device in the guest"
dmesg_mark
for i in $(seq 1 10); do
  modprobe rpcrdma_rs || fail "load $i failed"
  module_loaded rpcrdma_rs || fail "load $i: not in /proc/modules"
  rmmod rpcrdma_rs || fail "unload $i failed"
  [ ! -e /sys/module/rpcrdma_rs ] || fail "unload $i: /sys/module/rpcrdma_rs still there"
done
log=$(dmesg_since_mark)
count() { printf '%s\n' "$log" | grep -c -- "$1"; }
diag "$(count 'rpcrdma_rs: RPC-over-RDMA transport registered') registrations, $(count "rpcrdma_rs: RDMA device $dev available") device adds, $(count "rpcrdma_rs: RDMA device $dev removed") device removals"
[ "$(count 'RPC: Registered rdma transport module.')" = 10 ] || fail "SUNRPC did not report 10 registrations"
[ "$(count 'RPC: Unregistered rdma transport module.')" = 10 ] || fail "SUNRPC did not report 10 unregistrations"
[ "$(count "rpcrdma_rs: RDMA device $dev available")" = 10 ] || fail "ib client did not see $dev on every load"
[ "$(count "rpcrdma_rs: RDMA device $dev removed")" = 10 ] || fail "ib client did not release $dev on every unload"
dmesg_assert_clean
