#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# nconnect=4: the mount gets four connections of this transport (four
# "xprt: rdma" lines in mountstats, four transports in the mount's sysfs
# xprt switch), every one carries RPCs of fio's four verified jobs, and one
# connection forced down in the middle of the I/O leaves the others
# working: the I/O completes, fio verifies every block, the forced one
# connects again, and no reply is bad; mountstats and nfsiostat read the
# mount's statistics.
. "$(dirname "$0")/../lib.sh"
command -v fio > /dev/null || skip "fio not installed"
unload_all
dmesg_mark
RS_OPTS=$RS_OPTS,nconnect=4 mount_rs || fail "mount with nconnect=4 failed"
# field F of every xprt: rdma line of the mount (F as rdma_xprt_field).
fields() { awk -v f="$1" '$1 == "xprt:" && $2 == "rdma" { print $(f + 2) }' /proc/self/mountstats | tr '\n' ' '; }
# The transports of the mount's xprt switch (sysfs), connected to 20049.
xprts() {
  local x
  for x in /sys/kernel/sunrpc/xprt-switches/*/xprt-*; do
    grep -qx "dst_port=20049" "$x/xprt_info" 2> /dev/null && echo "$x"
  done
}
common="--directory=$MNT --size=8m --bs=64k --direct=1 --ioengine=libaio --iodepth=8 --numjobs=4 --verify=crc32c --verify_fatal=1 --randrepeat=1 --group_reporting"
fio --name=nc $common --rw=randwrite --do_verify=0 --end_fsync=1 --output=/tmp/nc.w > /dev/null 2>&1 ||
  { cat /tmp/nc.w; umount "$MNT"; fail "write failed"; }
sends=($(fields 6))
n=${#sends[@]}
diag "after the writes: $n rdma transports, sends per transport: ${sends[*]}"
[ "$n" = 4 ] || { umount "$MNT"; fail "nconnect=4 gave $n rdma transports"; }
for s in "${sends[@]}"; do
  [ "$s" -ge 16 ] || { umount "$MNT"; fail "a connection carried $s sends: ${sends[*]}"; }
done
x=( $(xprts) )
diag "sysfs transports to port 20049: ${#x[@]}"
[ "${#x[@]}" -ge 4 ] || { umount "$MNT"; fail "sysfs lists ${#x[@]} transports to the server, expected 4"; }
connects0=($(fields 3))
# Verify (reading everything back) while one connection is forced down.
sync; echo 3 > /proc/sys/vm/drop_caches
fio --name=nc $common --rw=randwrite --verify_only --output=/tmp/nc.v > /dev/null 2>&1 &
fio_pid=$!
sleep "$(slow_secs 2)"
force_disconnect_at "${x[1]}"
wait $fio_pid; rc=$?
[ $rc = 0 ] || { cat /tmp/nc.v; umount "$MNT"; fail "verify with one connection forced down failed (fio rc $rc)"; }
errs=$(grep -ciE 'verify.*bad|crc32c.*mismatch' /tmp/nc.v)
# One more pass so that the forced connection is used again.
fio --name=nc $common --rw=randwrite --verify_only --output=/tmp/nc.v2 > /dev/null 2>&1 ||
  { cat /tmp/nc.v2; umount "$MNT"; fail "verify after the reconnect failed"; }
connects=($(fields 3)); sends2=($(fields 6)); bad=($(fields 20))
diag "connects per transport: before ${connects0[*]}, after ${connects[*]}; sends ${sends2[*]}; bad replies ${bad[*]}"
# nfs-utils read the four transports' numbers too (nfs_utils_stats has
# the rest): no traceback, the RDMA section printed.
if command -v mountstats > /dev/null; then
  mountstats --xprt "$MNT" > /tmp/nc.ms 2>&1; rc=$?
  mountstats "$MNT" >> /tmp/nc.ms 2>&1 || rc=$?
  nfsiostat 1 1 "$MNT" >> /tmp/nc.ms 2>&1 || rc=$?
  sections=$(grep -c "Transport protocol: rdma" /tmp/nc.ms)
  diag "mountstats --xprt on the nconnect=4 mount: $sections RDMA section(s), exit $rc"
  if [ "$rc" != 0 ] || grep -q Traceback /tmp/nc.ms || [ "$sections" -lt 1 ]; then
    sed 's/^/#   /' /tmp/nc.ms | head -40; umount "$MNT"; fail "nfs-utils cannot read the nconnect=4 mount's statistics"
  fi
fi
rm -f "$MNT"/nc.*
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
[ "$errs" = 0 ] || fail "$errs verification errors"
more=0
for i in 0 1 2 3; do
  [ "${connects[$i]}" -gt "${connects0[$i]}" ] && more=$((more + 1))
  [ "${sends2[$i]}" -gt "${sends[$i]}" ] || fail "transport $i carried nothing after the fault: ${sends[*]} -> ${sends2[*]}"
  [ "${bad[$i]}" = 0 ] || fail "bad replies: ${bad[*]}"
done
[ "$more" -ge 1 ] || fail "no transport reconnected after the forced disconnect: ${connects0[*]} -> ${connects[*]}"
dmesg_assert_clean
