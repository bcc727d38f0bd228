#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rpcrdma_rs as the server (testbed.sh --server-module ours; skipped over
# the in-tree svcrdma): knfsd serves NFSv3 and NFSv4.2 over our server
# side, calls inline at 1 KiB I/O (6.12 caps the directory reads at rsize
# too). NFSv4 calls whose replies might exceed 4 KiB, such as
# EXCHANGE_ID's, offer a Reply chunk; their replies, which fit, come back
# inline. A 64 KiB file and 20 small files written, the mount recycled so
# reads come from the server, everything read back identical and listed;
# no bad reply on either mount; our client's thresholds are the 4 KiB of
# the server's private data, and its Version Two probe is answered in
# Version Two (server_version_two.sh tests that). (Its callbacks go over
# our backchannel: nfs41_backchannel.sh tests that.) A READLINK reply of
# 4.1 KB comes back in the Reply chunk the client offered, by RDMA Write
# from the reply's own pages.
# READs with Write chunks (64 KiB rsize) read a file back right, its data
# written into the chunks from the reply's own pages, with no copy (the
# server's counters); WRITEs with Read chunks (64 KiB wsize, NFSv3
# and NFSv4.2) write one, its data pulled by RDMA Read, and a SYMLINK
# whose call is too long to send inline (both clients put its target in
# a Read chunk, the server's trace shows) makes the link it says. Then
# knfsd restarted under a live mount, over IPv6 (knfsd listens on both
# families): the core takes the connection down, the client connects
# again and reads its file back; and knfsd stopped and the module
# unloaded and loaded again on the server: nothing of its class keeps it.
# From the long SYMLINK on, the server's trace events are recorded: they
# must show the connections accepted, calls inline and with Read chunks,
# and replies inline, in Write chunks and in the Reply chunk.
# The server guest must run our server, and its kernel log must stay
# clean.
. "$(dirname "$0")/../lib.sh"
only_our_server
unload_all
dmesg_mark
src=/tmp/srv.src; mkdir -p $src
head -c $((64 << 10)) /dev/urandom > $src/big
for i in $(seq 1 20); do head -c $((RANDOM % 900 + 1)) /dev/urandom > $src/small.$i; done
want=$(cd $src && sha256sum big small.* | sha256sum | cut -c1-64)
for v in 3 4.2; do
  RS_OPTS=vers=$v,proto=rdma,port=20049,rsize=1024,wsize=1024,retry=0
  path=/
  [ $v = 3 ] && RS_OPTS=$RS_OPTS,nolock && path=$RS_EXPORT
  m() { timeout 120 mount -t nfs -o "$RS_OPTS" "$SERVER4:$path" "$MNT"; }
  m || fail "vers=$v: mount over our server failed"
  mkdir -p "$MNT/srv" && cp $src/* "$MNT/srv/" && sync || { umount "$MNT"; fail "vers=$v: write failed"; }
  wbad=$(rdma_xprt_field 20)
  umount "$MNT" || fail "vers=$v: umount failed"
  m || fail "vers=$v: remount failed"
  got=$(cd "$MNT/srv" && sha256sum big small.* | sha256sum | cut -c1-64)
  n=$(ls "$MNT/srv" | wc -l)
  rbad=$(rdma_xprt_field 20)
  rm -rf "$MNT/srv" || fail "vers=$v: remove failed"
  umount "$MNT" || fail "vers=$v: umount failed"
  diag "vers=$v: read back $n files over our server; checksums $want / $got; bad replies $wbad (write mount), $rbad (read mount)"
  [ "$n" = 21 ] || fail "vers=$v: expected 21 files, found $n"
  [ "$want" = "$got" ] || fail "vers=$v: data mismatch"
  [ "${wbad:-0}" = 0 ] && [ "${rbad:-0}" = 0 ] || fail "vers=$v: bad replies"
done
# Our client probes Version Two on its first connection, which our server
# answers in Version Two. And the thresholds it logs come from the
# server's private data (RFC 8797): 4 KiB each way, where a server that
# sent none would mean 1 KiB.
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  dmesg_since_mark | grep -q 'using RPC-over-RDMA Version Two' ||
    fail "our client's connections to our server did not settle on Version Two"
  dmesg_since_mark | grep -q 'port 20049 via .*: inline thresholds 4096 (calls) and 4096 (replies)' ||
    fail "the connection's thresholds are not the 4096 of the server's private data"
fi
# A call too long for the server's Receives: SYMLINK to a 4000-byte
# target (about 4.1 KB) goes with its target in a Read chunk the server
# pulls by RDMA Read (Long Calls: server_hostile_client's c-long-call). A reply too long
# for the client's Receives: READLINK of it comes back in the Reply chunk
# the call offered, written there by RDMA Write.
target=$(printf 'y%.0s' $(seq 1 4000))
svc_events="accept call reply err"
out=$(server_cmd "trace-start $(printf 'rpcrdma_rs:rpcrdma_rs_svc_%s ' $svc_events)")
printf '%s' "$out" | grep -q 'rc=0' || fail "cannot record the server's trace events: $out"
server_cmd "trace-mark server_inline: traced" > /dev/null
RS_OPTS=vers=3,proto=rdma,port=20049,rsize=1024,wsize=1024,nolock,retry=0
mount_rs || fail "mount for the long SYMLINK and READLINK failed"
reads0=$(rdma_xprt_field 11)
ln -sfn "$target" "$MNT/long.link" || fail "the long SYMLINK (its target in a Read chunk) failed"
reads1=$(rdma_xprt_field 11)
umount "$MNT" && mount_rs || fail "remount for the long READLINK failed"
rdma0=$(rdma_xprt_field 15); sc0=$(server_counter chunks_copied)
got=$(readlink "$MNT/long.link")
rdma1=$(rdma_xprt_field 15); sc=$(( $(server_counter chunks_copied) - sc0 ))
rm -f "$MNT/long.link"
umount "$MNT" || fail "umount failed"
diag "long SYMLINK: $((reads1 - reads0)) Read chunks; long READLINK: ${#got} bytes back, $((rdma1 - rdma0)) bytes in Reply chunks, $sc chunks copied first by the server"
[ $((reads1 - reads0)) -ge 1 ] || fail "the long SYMLINK sent no Read chunk"
[ "$got" = "$target" ] || fail "the long READLINK returned ${#got} bytes, not the 4000 of the link"
[ $((rdma1 - rdma0)) -gt 4000 ] || fail "the long READLINK reply did not come in a Reply chunk"
# Written from the reply's own pages (its head, the link in its page
# list, its tail), not copied first.
[ "$sc" = 0 ] || fail "the server copied the READLINK reply before writing it into the Reply chunk"
# Through a knfsd restart, over IPv6.
RS_OPTS=vers=3,proto=rdma,port=20049,rsize=1024,wsize=1024,nolock,retry=0
mount_rs "$SERVER6" || fail "mount over IPv6 failed"
cp $src/big "$MNT/big6" && sync || fail "write over IPv6 failed"
out=$(server_cmd restart-nfsd)
printf '%s' "$out" | grep -q 'rc=0' || fail "knfsd restart failed: $out"
got=$(dd if="$MNT/big6" bs=64k iflag=direct status=none | sha256sum | cut -c1-64)
connects=$(rdma_xprt_field 3)
rm -f "$MNT/big6"
umount "$MNT" || fail "umount failed"
diag "knfsd restarted under an IPv6 mount: $connects connects, data $( [ "$got" = "$(sha256sum < $src/big | cut -c1-64)" ] && echo right || echo WRONG)"
[ "$got" = "$(sha256sum < $src/big | cut -c1-64)" ] || fail "the file read back wrong after knfsd restarted"
[ "${connects:-0}" -gt 1 ] || fail "the transport did not connect again after knfsd restarted"
# READs with Write chunks (rsize 64 KiB): each READ's data written into
# the client's Write chunk by RDMA Write, the rest of the reply inline. A
# file of 200 KiB plus 5 bytes (the last READ's data not a multiple of 4:
# its XDR pad is neither written nor sent) read back with O_DIRECT.
RS_OPTS=vers=3,proto=rdma,port=20049,rsize=65536,wsize=1024,nolock,retry=0
mount_rs || fail "mount for the chunked READs failed"
head -c $((200 * 1024 + 5)) /dev/urandom > $src/chunked
cp $src/chunked "$MNT/chunked" && sync || fail "the file for the chunked READs was not written"
umount "$MNT" && mount_rs || fail "remount for the chunked READs failed"
w0=$(rdma_xprt_field 12); rdma0=$(rdma_xprt_field 15); inv0=$(remote_invalidations)
sw0=$(server_counter write_bytes); sc0=$(server_counter chunks_copied)
got=$(dd if="$MNT/chunked" bs=64k iflag=direct status=none | sha256sum | cut -c1-64)
w1=$(rdma_xprt_field 12); rdma1=$(rdma_xprt_field 15); inv=$(( $(remote_invalidations) - inv0 ))
sw=$(( $(server_counter write_bytes) - sw0 )); sc=$(( $(server_counter chunks_copied) - sc0 ))
diag "chunked READs: data $( [ "$got" = "$(sha256sum < $src/chunked | cut -c1-64)" ] && echo right || echo WRONG), $((w1 - w0)) Write chunks offered, $((rdma1 - rdma0)) bytes written into chunks ($sw by the server's count, $sc chunks copied first), $inv regions invalidated by the server"
[ "$got" = "$(sha256sum < $src/chunked | cut -c1-64)" ] || fail "the file read back through Write chunks is wrong"
[ $((w1 - w0)) -ge 4 ] || fail "the READs offered no Write chunks"
[ $((rdma1 - rdma0)) -ge $((200 * 1024)) ] || fail "the READs' data did not come in Write chunks"
# The server wrote each READ's data from the reply's own pages (knfsd's
# page cache pages, spliced), with no copy first.
[ "$sw" -ge $((200 * 1024)) ] || fail "the server counted $sw bytes written into chunks, not the 200 KiB read"
[ "$sc" = 0 ] || fail "the server copied $sc READ payloads before writing them, not mapping the reply's pages"
# Each READ's reply is a Send With Invalidate of its Write chunk's one
# region (our client counts them; the C client does not).
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  [ "$inv" -ge 4 ] || fail "the server invalidated $inv of the READs' regions, not each"
fi
rm -f "$MNT/chunked"
umount "$MNT" || fail "umount failed"
# WRITEs with Read chunks (wsize 64 KiB): each WRITE's data pulled from
# the client's Read chunk by RDMA Read and put at its position in the
# call, the inline rest after it (NFSv4.2's GETATTR). A file of 200 KiB
# plus 5 bytes written with O_DIRECT (the last WRITE's data not a
# multiple of 4: the server puts its XDR pad back) and read back.
head -c $((200 * 1024 + 5)) /dev/urandom > $src/pulled
want=$(sha256sum < $src/pulled | cut -c1-64)
for v in 3 4.2; do
  RS_OPTS=vers=$v,proto=rdma,port=20049,rsize=65536,wsize=65536,retry=0
  path=/
  [ $v = 3 ] && RS_OPTS=$RS_OPTS,nolock && path=$RS_EXPORT
  m() { timeout 120 mount -t nfs -o "$RS_OPTS" "$SERVER4:$path" "$MNT"; }
  m || fail "vers=$v: mount for the chunked WRITEs failed"
  mkdir -p "$MNT/srv"
  r0=$(rdma_xprt_field 11); inv0=$(remote_invalidations); sr0=$(server_counter read_bytes)
  pg0=$(server_counter read_pages_given); cr0=$(server_counter contexts_reused)
  timeout 120 dd if=$src/pulled of="$MNT/srv/pulled" bs=64k oflag=direct status=none ||
    { umount "$MNT"; fail "vers=$v: the WRITEs with Read chunks failed"; }
  r1=$(rdma_xprt_field 11); inv=$(( $(remote_invalidations) - inv0 )); sr=$(( $(server_counter read_bytes) - sr0 ))
  pg=$(( $(server_counter read_pages_given) - pg0 )); cr=$(( $(server_counter contexts_reused) - cr0 ))
  umount "$MNT" && m || fail "vers=$v: remount for the chunked WRITEs failed"
  got=$(dd if="$MNT/srv/pulled" bs=64k iflag=direct status=none | sha256sum | cut -c1-64)
  bad=$(rdma_xprt_field 20)
  rm -rf "$MNT/srv"
  umount "$MNT" || fail "umount failed"
  diag "vers=$v: chunked WRITEs: $((r1 - r0)) Read chunks, $sr bytes pulled by the server into $pg pages given to nfsd, $cr contexts and pulls reused, $inv regions invalidated by the server, data $( [ "$got" = "$want" ] && echo right || echo WRONG), bad replies ${bad:-0}"
  [ "$got" = "$want" ] || fail "vers=$v: the file written through Read chunks reads back wrong"
  [ $((r1 - r0)) -ge 4 ] || fail "vers=$v: the WRITEs sent no Read chunks"
  [ "$sr" -ge $((200 * 1024)) ] || fail "vers=$v: the server pulled $sr bytes by RDMA Read, not the 200 KiB written"
  # Each WRITE's payload one data item: its pages become the nfsd
  # thread's, 51 for 200 KiB and 5 bytes (the last, padded, included).
  [ "$pg" -ge 51 ] || fail "vers=$v: $pg pages of pulled data given to nfsd, not the 51 the WRITEs took"
  # One WRITE at a time (O_DIRECT dd): each after the first is pulled in
  # the pull the one before was done with (kept before its reply went;
  # its call context comes back after, most often before the next).
  [ "$cr" -ge 3 ] || fail "vers=$v: $cr call contexts and pulls reused, not the pulls of the three WRITEs after the first"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$inv" -ge 4 ] || fail "vers=$v: the server invalidated $inv of the WRITEs' regions, not each"
  fi
  [ "${bad:-0}" = 0 ] || fail "vers=$v: bad replies"
done
trace=$(server_cmd "trace-since server_inline: traced")
server_cmd trace-stop > /dev/null
diag "the server's trace: $(printf '%s\n' "$trace" | grep -c ': rpcrdma_rs_svc_') events; some of them:"
printf '%s\n' "$trace" | grep -E ': rpcrdma_rs_svc_(accept|err):|rtype=\*|wtype=(reply|write)' | sed -E 's/^ *//; s/^/#   /' | head -8
for want in 'rpcrdma_rs_svc_accept: peer=[^ ]* status=0' 'rpcrdma_rs_svc_call: xid=0x[0-9a-f]* vers=[12] rtype=inline len=[1-9]' \
    'rpcrdma_rs_svc_call: .* rtype=read list len=[1-9]' \
    'rpcrdma_rs_svc_reply: .* wtype=inline' 'rpcrdma_rs_svc_reply: .* wtype=write list' 'rpcrdma_rs_svc_reply: .* wtype=reply chunk len=4[0-9][0-9][0-9]'; do
  printf '%s\n' "$trace" | grep -q -- "$want" || fail "the server's trace has no event like '$want'"
done
unload $XPRT_MOD
out=$(server_cmd reload-server-module)
printf '%s' "$out" | grep -q 'rc=0' || fail "the server's module did not unload and load again: $out"
server_dmesg_assert_clean
# The module is gone from the server: on the debug kernel, nothing it
# allocated may be left behind.
leaks=$(server_cmd kmemleak 600 | grep -v '^rc=')
if [ "$leaks" != none ]; then
  diag "server kmemleak: $(printf '%s\n' "$leaks" | grep -c '^unreferenced object') objects"
  [ -z "$leaks" ] || fail "the server leaked: $(printf '%s\n' "$leaks" | head -30)"
fi
dmesg_assert_clean
