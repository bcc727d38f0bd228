#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Large I/O over rpcrdma_rs with chunks registered by FRWR, for NFSv3 and
# NFSv4.0 at the server's default rsize/wsize: a 2 MiB file written (Read
# chunks) and read back after a remount (Write chunks), and a directory of
# 48 entries with 200-character names listed (about 16 KiB of READDIR
# reply: Reply chunks). Data must match, and the mount's
# counters must show every kind of chunk, at least the 2 MiB read back as
# bytes offered for RDMA Write (total_rdma_request, counted as the C
# client counts it), and no bad reply; over rpcrdma_rs
# its debugfs counters must show remote invalidation too.
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
entries=48
# Long names make a big READDIR reply out of few files (few RPCs).
stem=$(printf 'e%.0s' $(seq 1 190))
src=/tmp/chunked.src
head -c $((2 << 20)) /dev/urandom > $src
want=$(sha256sum < $src | cut -c1-64)
for v in 3 4.0; do
  opts=vers=$v,proto=rdma,port=20049,retry=0 path=/
  [ $v = 3 ] && opts=$opts,nolock path=$RS_EXPORT
  m() { timeout 120 mount -t nfs -o "$opts" "$SERVER4:$path" "$MNT"; }
  m || fail "vers=$v: mount failed"
  remote0=$(remote_invalidations)
  size=$(findmnt -n -t nfs,nfs4 -o OPTIONS "$MNT" | tr , '\n' | sed -n 's/^rsize=//p')
  mkdir -p "$MNT/dir"
  (cd "$MNT/dir" && seq -f "$stem-%g" 1 "$entries" | xargs touch)
  dd if=$src of="$MNT/big" bs=1M oflag=direct status=none || fail "vers=$v: write failed"
  w_reads=$(rdma_xprt_field 11)
  umount "$MNT" && m || fail "vers=$v: remount failed"
  got=$(dd if="$MNT/big" bs=1M iflag=direct status=none | sha256sum | cut -c1-64)
  n=$(ls "$MNT/dir" | wc -l)
  writes=$(rdma_xprt_field 12) replies=$(rdma_xprt_field 13) offered=$(rdma_xprt_field 14)
  linv=$(rdma_xprt_field 25) bad=$(rdma_xprt_field 20)
  remote=$(( $(remote_invalidations) - remote0 ))
  rm -rf "$MNT/dir" "$MNT/big"
  umount "$MNT" || fail "vers=$v: umount failed"
  diag "vers=$v rsize=$size: read chunks $w_reads (write mount); write chunks $writes, reply chunks $replies, $offered bytes offered, regions invalidated locally $linv, remotely $remote, bad replies $bad (read mount)"
  [ "$got" = "$want" ] || fail "vers=$v: data mismatch"
  [ "$n" = "$entries" ] || fail "vers=$v: listed $n of $entries entries"
  [ "${w_reads:-0}" -gt 0 ] || fail "vers=$v: no Read chunk used for WRITE"
  [ "${writes:-0}" -gt 0 ] || fail "vers=$v: no Write chunk used for READ"
  [ "${replies:-0}" -gt 0 ] || fail "vers=$v: no Reply chunk used for READDIR"
  [ "${offered:-0}" -ge $((2 << 20)) ] || fail "vers=$v: $offered bytes offered for RDMA Write, less than the 2 MiB read"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$remote" -gt 0 ] || fail "vers=$v: the server never invalidated a region remotely"
  fi
  [ "$bad" = 0 ] || fail "vers=$v: $bad bad replies"
done
unload $XPRT_MOD
dmesg_assert_clean
