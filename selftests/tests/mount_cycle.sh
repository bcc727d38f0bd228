#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Loading the transport, mounting, using, unmounting and unloading works 20
# times in a row, and leaves no warning in dmesg.
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
for i in $(seq 1 20); do
  modprobe $( [ $XPRT_MOD = rpcrdma ] && echo --ignore-install ) $XPRT_MOD || fail "cycle $i: load failed"
  mount_rs || fail "cycle $i: mount failed"
  echo "$i" > "$MNT/cycle" && [ "$(cat "$MNT/cycle")" = "$i" ] || fail "cycle $i: I/O failed"
  umount "$MNT" || fail "cycle $i: umount failed"
  unload $XPRT_MOD
done
diag "20 load/mount/umount/unload cycles with $XPRT_MOD"
dmesg_assert_clean
