#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# nfs-utils on our numbers: the real mountstats (default view, --xprt, --rpc,
# and --since a snapshot) and nfsiostat read the mountstats of a mount over
# the transport, print its RDMA section without a Python traceback, and show
# values that moved with the workload: 4 MiB written with O_DIRECT (Read
# chunks) and read back with O_DIRECT (Write chunks).
. "$(dirname "$0")/../lib.sh"
command -v mountstats > /dev/null && command -v nfsiostat > /dev/null || skip "nfs-utils' mountstats/nfsiostat not installed"
unload_all
dmesg_mark
mount_rs || fail "mount failed"
out=/tmp/nfs_utils_stats; rm -rf $out; mkdir -p $out
cp /proc/self/mountstats $out/before
head -c $((4 << 20)) /dev/urandom > $out/data
dd if=$out/data of="$MNT/stats.dat" bs=256k oflag=direct status=none || { umount "$MNT"; fail "write failed"; }
dd if="$MNT/stats.dat" of=$out/back bs=256k iflag=direct status=none || { umount "$MNT"; fail "read failed"; }
cmp -s $out/data $out/back || { umount "$MNT"; fail "data read back differs"; }
# Every view, and nfsiostat's first report (since the mount) and a second
# one over an interval with reads in it.
mountstats "$MNT" > $out/default 2>&1; rc_default=$?
mountstats --xprt "$MNT" > $out/xprt 2>&1; rc_xprt=$?
mountstats --rpc "$MNT" > $out/rpc 2>&1; rc_rpc=$?
mountstats --since $out/before --xprt "$MNT" > $out/since 2>&1; rc_since=$?
( sleep 1; dd if="$MNT/stats.dat" of=/dev/null bs=64k iflag=direct status=none ) &
nfsiostat 2 2 "$MNT" > $out/iostat 2>&1; rc_iostat=$?
wait
rm -f "$MNT/stats.dat"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
for f in default xprt rpc since iostat; do
  diag "--- $f"
  sed 's/^/#   /' $out/$f | head -40
done
# value FILE LABEL: the number after "LABEL:" in mountstats' --xprt output.
value() { awk -F: -v l="$2" '$1 ~ "^[[:space:]]*" l "$" { split($2, a, " "); print a[1]; exit }' "$1"; }
for v in default:$rc_default xprt:$rc_xprt rpc:$rc_rpc since:$rc_since iostat:$rc_iostat; do
  [ "${v#*:}" = 0 ] || fail "${v%%:*}: exit status ${v#*:}"
  grep -q Traceback $out/${v%%:*} && fail "${v%%:*}: Python traceback"
done
grep -q "Transport protocol: rdma" $out/xprt || fail "--xprt printed no RDMA section"
grep -q "proto=rdma" $out/default || fail "the default view shows no proto=rdma mount"
nfsread=$(awk '/client read [0-9]+ bytes via NFS READ/ { print $3 }' $out/default)
[ "${nfsread:-0}" -ge $((4 << 20)) ] || fail "the default view: client read ${nfsread:-no} bytes via NFS READ, expected 4 MiB"
grep -qE "^ *READ:" $out/rpc && grep -qE "^ *WRITE:" $out/rpc || fail "--rpc lists no READ and WRITE operations"
# The whole mount's counts: "Registered" counts what the server may write
# (Write and Reply chunks, as the C client counts it): the reads' 4 MiB,
# and as much received by RDMA Write.
reg=$(value $out/xprt Registered); rcvd=$(value $out/xprt "RDMA received")
reqs=$(value $out/xprt "RPC requests"); reps=$(value $out/xprt "RPC replies")
rsegs=$(value $out/xprt "Read segments"); wsegs=$(value $out/xprt "Write segments")
diag "xprt: $reqs requests, $reps replies, $rsegs read and $wsegs write segments, $reg bytes registered, $rcvd received"
[ "${reg:-0}" -ge $((4 << 20)) ] || fail "Registered: $reg bytes, expected at least 4 MiB"
[ "${rcvd:-0}" -ge $((4 << 20)) ] || fail "RDMA received: $rcvd bytes, expected at least 4 MiB"
[ "${rsegs:-0}" -ge 16 ] && [ "${wsegs:-0}" -ge 16 ] || fail "too few chunk segments: $rsegs read, $wsegs write"
[ "${reqs:-0}" -ge 32 ] && [ "${reps:-0}" -ge 32 ] || fail "too few RPCs counted: $reqs requests, $reps replies"
# --since: the difference from the snapshot taken after the mount, which
# holds the whole workload and nothing before it.
sreg=$(value $out/since Registered); sreqs=$(value $out/since "RPC requests")
diag "since the snapshot: $sreqs requests, $sreg bytes registered"
[ "${sreg:-0}" -ge $((4 << 20)) ] && [ "${sreg:-0}" -le "${reg:-0}" ] || fail "--since: Registered $sreg of $reg"
[ "${sreqs:-0}" -ge 32 ] && [ "${sreqs:-0}" -le "${reqs:-0}" ] || fail "--since: RPC requests $sreqs of $reqs"
# nfsiostat: two reports for the mount, the first with the workload's
# reads and writes (kB per operation about 256), the second with the
# background reads at 64 KiB.
n=$(grep -c "^read:" $out/iostat)
[ "$n" = 2 ] || fail "nfsiostat printed $n read sections, expected 2"
kbop=$(awk '/^read:/ { getline; print $3; exit }' $out/iostat)
diag "nfsiostat: first report $kbop kB per read"
awk -v k="$kbop" 'BEGIN { exit !(k + 0 >= 64) }' || fail "nfsiostat: $kbop kB per read, expected the 256 KiB reads"
dmesg_assert_clean
