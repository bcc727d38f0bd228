#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# NFSv4.1 session trunking over the transport: two IPv4 addresses of the
# server (the NFS client trunks only addresses of one family) mounted with
# max_connect=2. The second mount finds the first one's server (the same
# server owner) and the NFS client adds its address to that client as a
# trunked transport (rpc_clnt_add_xprt): one xprt switch then holds RDMA
# transports to both addresses. Data written through one mount reads back
# identical through the other.
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
MNT2=$MNT-trunk
mkdir -p "$MNT2"
# The server's second address: the first one's last byte plus 10.
ADDR2=${SERVER4%.*}.$(( ${SERVER4##*.} + 10 ))
r=$(server_cmd "addr add $ADDR2"); printf '%s' "$r" | grep -q 'rc=0' || fail "cannot add $ADDR2 to the server: $r"
trap 'server_cmd "addr del $ADDR2" > /dev/null' EXIT
opts=vers=4.1,proto=rdma,port=20049,max_connect=2
[ "$XPRT_MOD" = rpcrdma ] && { load_c_client || fail "cannot load the in-tree rpcrdma"; }
timeout 120 mount -t nfs -o "$opts" "$SERVER4:/" "$MNT" || fail "mount of $SERVER4 failed"
timeout 120 mount -t nfs -o "$opts" "$ADDR2:/" "$MNT2" || { umount "$MNT"; fail "mount of $ADDR2 failed"; }
src=/tmp/trunk.src
head -c $((4 << 20)) /dev/urandom > $src
want=$(sha256sum < $src | cut -d' ' -f1)
cp $src "$MNT/trunk.dat" && sync || { umount "$MNT2" "$MNT"; fail "write failed"; }
echo 3 > /proc/sys/vm/drop_caches
got=$(sha256sum < "$MNT2/trunk.dat" | cut -d' ' -f1)
# The switches and their transports: the trunked switch has both addresses.
both=
for s in /sys/kernel/sunrpc/xprt-switches/switch-*; do
  addrs=$(cat "$s"/xprt-*/dstaddr 2> /dev/null | sort -u)
  diag "$(basename "$s"): $(echo $addrs)"
  grep -qx "$SERVER4" <<< "$addrs" && grep -qx "$ADDR2" <<< "$addrs" && both=$s
done
rdma_lines=$(grep -c "xprt:.*rdma" /proc/self/mountstats)
rm -f "$MNT/trunk.dat"
umount "$MNT2" || fail "umount $MNT2 failed"
umount "$MNT" || fail "umount $MNT failed"
unload $XPRT_MOD
diag "wrote through $SERVER4, read through $ADDR2: $want / $got; $rdma_lines xprt: rdma lines in mountstats"
[ "$want" = "$got" ] || fail "data read through the second address differs"
[ -n "$both" ] || fail "no xprt switch holds transports to both server addresses: no trunking"
dmesg_assert_clean
