#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# NFSv3 I/O over the RDMA transport with every call and reply inline: a 128 KiB
# file and 50 small files written, the mount recycled so reads come from the
# server, and everything read back identical. mountstats must show the
# traffic on our transport and no bad replies.
. "$(dirname "$0")/../lib.sh"
# 1 KiB I/O keeps every call and reply under the 4 KiB inline thresholds.
RS_OPTS=vers=3,proto=rdma,port=20049,rsize=1024,wsize=1024,nolock,retry=0
unload_all
dmesg_mark
mount_rs || fail "mount failed"
m0=$(rs_counter sends_mapped)
src=/tmp/io.src; mkdir -p $src
head -c $((128 << 10)) /dev/urandom > $src/big
for i in $(seq 1 50); do head -c $((RANDOM % 3000 + 1)) /dev/urandom > $src/small.$i; done
want=$(cd $src && sha256sum big small.* | sha256sum | cut -c1-64)
mkdir -p "$MNT/io" && cp $src/* "$MNT/io/" && sync || { umount "$MNT"; fail "write failed"; }
pullup=$(rdma_xprt_field 16)
mapped=$(( $(rs_counter sends_mapped) - m0 ))
umount "$MNT" || fail "umount failed"
mount_rs || fail "remount failed"
got=$(cd "$MNT/io" && sha256sum big small.* | sha256sum | cut -c1-64)
n=$(ls "$MNT/io" | wc -l)
sends=$(rdma_xprt_field 6); recvs=$(rdma_xprt_field 7)
bad=$(rdma_xprt_field 20)
rm -rf "$MNT/io"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
diag "read back $n files; checksums $want / $got"
diag "write mount: $pullup bytes pulled up, $mapped Sends with mapped pages; read mount: sends $sends, recvs $recvs, bad replies $bad"
[ "$n" = 51 ] || fail "expected 51 files, found $n"
[ "$want" = "$got" ] || fail "data mismatch"
[ "${sends:-0}" -gt 128 ] || fail "too few sends for 128 KiB at rsize=1024: $sends"
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  # 1 KiB writes are small enough to copy: every byte of their payload is
  # pulled up, no Send maps pages.
  [ "${pullup:-0}" -ge $(( (128 << 10) + 50 )) ] || fail "the written data was not pulled up into Send buffers: $pullup bytes"
  [ "$mapped" = 0 ] || fail "$mapped Sends mapped pages for 1 KiB writes"
fi
[ "$bad" = 0 ] || fail "bad replies: $bad"
dmesg_assert_clean
