#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A directory of 10,000 entries (made on the server) is listed completely
# over NFSv3 and NFSv4.2: READDIR(PLUS) replies far beyond the inline
# threshold arrive in Reply chunks. Every name must come back exactly once,
# and the reply_chunk_count field of mountstats must move.
. "$(dirname "$0")/../lib.sh"
unload_all
n=${RDMARS_BIG_DIR_ENTRIES:-10000}
out=$(server_cmd "mkfiles bigdir $n")
printf '%s' "$out" | grep -q 'rc=0' || fail "server could not make the directory: $out"
want=$(seq -f 'entry-with-a-reasonably-long-name-%g' 1 "$n" | sort | sha256sum | cut -c1-64)
dmesg_mark
for v in 3 4.2; do
  opts=vers=$v,proto=rdma,port=20049,retry=0 path=/
  [ $v = 3 ] && opts=$opts,nolock path=$RS_EXPORT
  timeout 120 mount -t nfs -o "$opts" "$SERVER4:$path" "$MNT" || fail "vers=$v: mount failed"
  before=$(rdma_xprt_field 13)
  got=$(ls -f "$MNT/bigdir" | grep -v '^\.\.\?$' | sort | sha256sum | cut -c1-64)
  count=$(ls -f "$MNT/bigdir" | grep -vc '^\.\.\?$')
  after=$(rdma_xprt_field 13)
  umount "$MNT" || fail "vers=$v: umount failed"
  diag "vers=$v: listed $count of $n entries; reply chunks $before -> $after"
  [ "$count" = "$n" ] || fail "vers=$v: listed $count of $n entries"
  [ "$got" = "$want" ] || fail "vers=$v: names differ from what the server made"
  [ "$after" -gt "$before" ] || fail "vers=$v: no Reply chunk was used"
done
server_cmd "rmdir-export bigdir" > /dev/null
unload $XPRT_MOD
dmesg_assert_clean
