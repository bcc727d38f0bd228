#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The testbed itself works: the in-tree C client mounts the server guest over
# RDMA (NFSv4.2), writes a file and reads it back with the same checksum.
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
load_c_client || fail "cannot load the in-tree rpcrdma"
mount -t nfs -o vers=4.2,proto=rdma,port=20049 "$SERVER4:/" "$MNT" || fail "mount over in-tree rpcrdma failed"
[ -n "$(rdma_xprt_field 1)" ] || { umount "$MNT"; fail "mount is not over rdma"; }
src=/tmp/baseline.src
head -c $((8 << 20)) /dev/urandom > "$src"
want=$(sha256sum < "$src" | cut -d' ' -f1)
cp "$src" "$MNT/baseline.dat" && sync || { umount "$MNT"; fail "write failed"; }
umount "$MNT" || fail "umount failed"
# A fresh mount: the read comes from the server, not the page cache.
mount -t nfs -o vers=4.2,proto=rdma,port=20049 "$SERVER4:/" "$MNT" || fail "remount failed"
got=$(sha256sum < "$MNT/baseline.dat" | cut -d' ' -f1)
sends=$(rdma_xprt_field 6)
rm -f "$MNT/baseline.dat"
umount "$MNT" || fail "umount failed"
unload rpcrdma
diag "wrote and read back 8 MiB: $want / $got; rdma sends on the read mount: $sends"
[ "$want" = "$got" ] || fail "checksum mismatch"
dmesg_assert_clean
