#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# knfsd is restarted on the server guest while fio writes and verifies over
# rpcrdma_rs: the transport reconnects, the I/O resumes, no error reaches
# the application and the data verifies.
. "$(dirname "$0")/../lib.sh"
unload_all
command -v fio > /dev/null || skip "fio not installed"
dmesg_mark
mount_rs || fail "mount failed"
f="$MNT/restart.dat"
fio --name=r --filename=$f --size=4M --bs=64k --rw=write --direct=1 --ioengine=libaio --iodepth=4 \
    --verify=crc32c --verify_fatal=1 --do_verify=1 --rate=256k --output=/tmp/fio.r > /dev/null 2>&1 &
pid=$!
sleep 4
out=$(server_cmd restart-nfsd)
diag "server: $(printf '%s' "$out" | tr '\n' ' ')"
wait $pid; rc=$?
connects=$(rdma_xprt_field 3)
rm -f "$f"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
diag "fio exited $rc; connects on the mount: $connects"
[ $rc = 0 ] || { cat /tmp/fio.r; fail "fio saw an error across the server restart"; }
printf '%s' "$out" | grep -q 'rc=0' || fail "server restart failed"
[ "${connects:-0}" -gt 1 ] || fail "the transport did not reconnect"
dmesg_assert_clean
