#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# RPC-over-RDMA Version Two end to end: our client and our server
# (testbed.sh --server-module ours; skipped over the in-tree svcrdma and
# under the C client, which speaks Version One only). Our client's probe
# is answered in Version Two, so the connection settles on it on both
# sides (each side's v2_connections counter), and each side's transport
# characteristics reach the other (ROPT_INITXCH both ways, counted by the
# receiver). Over NFSv3 and NFSv4.2: a 3 KiB WRITE goes inline (no Read
# chunk); 200 KiB + 5 bytes written with Read chunks and read back with
# Write chunks (64 KiB rsize/wsize), each region invalidated by the
# server's Send With Invalidate (the client's Requester Remote
# Invalidation characteristic says it takes them); a SYMLINK too long to
# send inline (a Long Call) and its READLINK's reply in the Reply chunk;
# every reply a Version Two one (no bad reply), no RDMA_ERROR from the
# server. With 8 KiB Receives (max_inline_read=8192) on the client, 4 KiB
# READs come back inline: no Write chunk, nothing registered. Then the server speaks Version One only (its `versions`
# parameter): the client's probe gets ERR_VERS 1..1, it falls back, and
# the data still reads back right.
. "$(dirname "$0")/../lib.sh"
only_our_server
only_ours
server_versions 2,1
unload_all
dmesg_mark
src=/tmp/v2srv.src; mkdir -p $src
head -c 3072 /dev/urandom > $src/small
head -c $((200 * 1024 + 5)) /dev/urandom > $src/big
target=$(printf 'z%.0s' $(seq 1 4000))
sv0=$(server_counter v2_connections) sx0=$(server_counter xchar_messages) se0=$(server_counter errors_sent) sev0=$(server_counter err_vers_sent)
for v in 3 4.2; do
  RS_OPTS=vers=$v,proto=rdma,port=20049,rsize=65536,wsize=65536,retry=0
  path=/
  [ $v = 3 ] && RS_OPTS=$RS_OPTS,nolock && path=$RS_EXPORT
  m() { timeout 120 mount -t nfs -o "$RS_OPTS" "$SERVER4:$path" "$MNT"; }
  cv0=$(rs_counter v2_connections) cx0=$(rs_counter xchar_messages)
  m || fail "vers=$v: mount over our server failed"
  mkdir -p "$MNT/v2"
  r0=$(rdma_xprt_field 11)
  dd if=$src/small of="$MNT/v2/small" bs=3072 count=1 oflag=direct status=none || fail "vers=$v: the 3 KiB WRITE failed"
  r1=$(rdma_xprt_field 11); inv0=$(remote_invalidations)
  timeout 120 dd if=$src/big of="$MNT/v2/big" bs=64k oflag=direct status=none || fail "vers=$v: the chunked WRITEs failed"
  r2=$(rdma_xprt_field 11)
  ln -sfn "$target" "$MNT/v2/long.link" || fail "vers=$v: the long SYMLINK (a Long Call) failed"
  r3=$(rdma_xprt_field 11)
  wbad=$(rdma_xprt_field 20)
  umount "$MNT" && m || fail "vers=$v: remount failed"
  w0=$(rdma_xprt_field 12)
  got_big=$(dd if="$MNT/v2/big" bs=64k iflag=direct status=none | sha256sum | cut -c1-64)
  w1=$(rdma_xprt_field 12); inv=$(( $(remote_invalidations) - inv0 ))
  got_small=$(sha256sum < "$MNT/v2/small" | cut -c1-64)
  rdma0=$(rdma_xprt_field 15)
  link=$(readlink "$MNT/v2/long.link")
  rdma1=$(rdma_xprt_field 15)
  rbad=$(rdma_xprt_field 20)
  rm -rf "$MNT/v2"
  umount "$MNT" || fail "vers=$v: umount failed"
  cv=$(( $(rs_counter v2_connections) - cv0 )) cx=$(( $(rs_counter xchar_messages) - cx0 ))
  diag "vers=$v: client Version Two connections $cv, characteristics messages from the server $cx;" \
    "3 KiB WRITE: $((r1 - r0)) Read chunks; 200 KiB: $((r2 - r1)) Read chunks, $((w1 - w0)) Write chunks," \
    "$inv regions invalidated by the server; long SYMLINK $((r3 - r2)) Read chunks, READLINK ${#link} bytes" \
    "($((rdma1 - rdma0)) bytes by RDMA Write); bad replies $wbad, $rbad"
  [ "$cv" -ge 2 ] || fail "vers=$v: the client's connections did not settle on Version Two"
  [ "$cx" -ge 2 ] || fail "vers=$v: the server's ROPT_INITXCH did not reach the client"
  [ "$r1" = "$r0" ] || fail "vers=$v: the 3 KiB WRITE used a Read chunk"
  [ $((r2 - r1)) -ge 4 ] || fail "vers=$v: the 64 KiB WRITEs sent no Read chunks"
  [ $((w1 - w0)) -ge 4 ] || fail "vers=$v: the 64 KiB READs offered no Write chunks"
  [ "$got_big" = "$(sha256sum < $src/big | cut -c1-64)" ] || fail "vers=$v: the chunked file reads back wrong"
  [ "$got_small" = "$(sha256sum < $src/small | cut -c1-64)" ] || fail "vers=$v: the inline file reads back wrong"
  [ "$inv" -ge 8 ] || fail "vers=$v: the server invalidated $inv regions, not each READ's and WRITE's"
  [ $((r3 - r2)) -ge 1 ] || fail "vers=$v: the long SYMLINK did not go as a Long Call"
  [ "$link" = "$target" ] || fail "vers=$v: the long READLINK returned ${#link} bytes, not the 4000 of the link"
  [ $((rdma1 - rdma0)) -gt 4000 ] || fail "vers=$v: the long READLINK reply did not come in a Reply chunk"
  [ "${wbad:-0}" = 0 ] && [ "${rbad:-0}" = 0 ] || fail "vers=$v: bad replies"
done
dmesg_since_mark | grep -q 'using RPC-over-RDMA Version Two' || fail "the client logged no Version Two connection"
sv=$(( $(server_counter v2_connections) - sv0 )) sx=$(( $(server_counter xchar_messages) - sx0 ))
se=$(( $(server_counter errors_sent) - se0 )) sev=$(( $(server_counter err_vers_sent) - sev0 ))
diag "server: Version Two connections $sv, characteristics messages from clients $sx, RDMA_ERRORs $se, ERR_VERS $sev"
[ "$sv" -ge 4 ] || fail "the server counted $sv Version Two connections, not each of the 4 mounts'"
[ "$sx" -ge 4 ] || fail "the client's ROPT_INITXCH did not reach the server ($sx)"
[ "$se" = 0 ] && [ "$sev" = 0 ] || fail "the server sent RDMA_ERRORs ($se, ERR_VERS $sev)"

# 4 KiB READs whose replies come inline: our client with 8 KiB Receive
# buffers says so in its ROPT_INITXCH, and once the server's arrives (it
# speaks xcharext, so it took ours, sent before any call after the probe)
# plans replies up to 8 KiB inline; the server's Send buffers take them.
# No Write chunk, no region registered or invalidated, no RDMA Write.
unload_all
modprobe rpcrdma_rs max_inline_read=8192 || fail "cannot load rpcrdma_rs max_inline_read=8192"
head -c $((64 << 10)) /dev/urandom > $src/r4k
for v in 3 4.2; do
  RS_OPTS=vers=$v,proto=rdma,port=20049,retry=0
  path=/
  [ $v = 3 ] && RS_OPTS=$RS_OPTS,nolock && path=$RS_EXPORT
  m() { timeout 120 mount -t nfs -o "$RS_OPTS" "$SERVER4:$path" "$MNT"; }
  m || fail "vers=$v: mount with 8 KiB Receives failed"
  cp $src/r4k "$MNT/r4k" && sync || fail "vers=$v: write failed"
  umount "$MNT" && m || fail "vers=$v: remount failed"
  w0=$(rdma_xprt_field 12) rdma0=$(rdma_xprt_field 15) mr0=$(rs_counter mrs_registered) inv0=$(remote_invalidations)
  got=$(dd if="$MNT/r4k" bs=4k iflag=direct status=none | sha256sum | cut -c1-64)
  w=$(( $(rdma_xprt_field 12) - w0 )) rdma=$(( $(rdma_xprt_field 15) - rdma0 ))
  mr=$(( $(rs_counter mrs_registered) - mr0 )) inv=$(( $(remote_invalidations) - inv0 ))
  bad=$(rdma_xprt_field 20)
  rm -f "$MNT/r4k"
  umount "$MNT" || fail "vers=$v: umount failed"
  diag "vers=$v: 16 READs of 4 KiB: data $( [ "$got" = "$(sha256sum < $src/r4k | cut -c1-64)" ] && echo right || echo WRONG)," \
    "$w Write chunks, $rdma bytes by RDMA Write, $mr regions registered, $inv invalidated by the server, bad replies ${bad:-0}"
  [ "$got" = "$(sha256sum < $src/r4k | cut -c1-64)" ] || fail "vers=$v: the 4 KiB READs read back wrong"
  [ "$w" = 0 ] && [ "$rdma" = 0 ] || fail "vers=$v: the 4 KiB READs used Write chunks"
  [ "$mr" = 0 ] && [ "$inv" = 0 ] || fail "vers=$v: the 4 KiB READs registered memory"
  [ "${bad:-0}" = 0 ] || fail "vers=$v: bad replies"
done

# The server speaks Version One only: ERR_VERS 1..1 to the probe, and the
# client goes on with Version One on the same connection.
server_versions 1
unload_all
dmesg_mark
fb0=$(rs_counter v1_fallbacks)
RS_OPTS=vers=3,proto=rdma,port=20049,rsize=65536,wsize=65536,nolock,retry=0
mount_rs || { server_cmd "server-versions 2,1" > /dev/null; fail "mount over our Version One server failed"; }
cp $src/big "$MNT/v1big" && sync
umount "$MNT" && mount_rs
got=$(dd if="$MNT/v1big" bs=64k iflag=direct status=none | sha256sum | cut -c1-64)
rm -f "$MNT/v1big"
umount "$MNT"
server_cmd "server-versions 2,1" > /dev/null
fb=$(( $(rs_counter v1_fallbacks) - fb0 )) sev=$(( $(server_counter err_vers_sent) - sev0 ))
diag "server speaking Version One: $fb fallbacks, ERR_VERS sent $sev, data $( [ "$got" = "$(sha256sum < $src/big | cut -c1-64)" ] && echo right || echo WRONG)"
dmesg_since_mark | grep -q 'server speaks RPC-over-RDMA versions 1\.\.1, not Two' ||
  fail "no ERR_VERS (1..1) answer to our client's Version Two probe"
[ "$fb" -ge 1 ] && [ "$sev" -ge 1 ] || fail "the probe was not refused with ERR_VERS"
[ "$got" = "$(sha256sum < $src/big | cut -c1-64)" ] || fail "the file read back wrong over Version One"
unload $XPRT_MOD
server_dmesg_assert_clean
dmesg_assert_clean
