#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The hostile peer as an NFS server: tools/rdma-peer in proxy mode passes
# each call on to knfsd over TCP and carries the reply back over RDMA, so a
# real NFSv3 mount runs through it (Read chunks pulled by RDMA Read, READ
# data pushed into Write chunks, Reply chunks, Send With Invalidate). Each
# scenario then aims at the data path of that mount
# (Documentation/hostile-peer.rst):
#   good                 data written and read back intact through the peer
#   write-chunk-foreign  a READ reply naming a Write chunk handle never
#                        offered, with no data written: the READ fails, it
#                        never returns stale buffer contents as file data
#   write-chunk-long     a READ reply claiming more than offered: fails
#   write-chunk-extra    a READ reply returning one segment more than
#                        offered: fails
#   reply-chunk-gap      a READDIR reply whose Reply chunk has its first
#                        segment half filled and the next ones full: fails,
#                        and the unwritten half never reaches the listing
#   reply-chunk-swapped, reply-chunk-repeated, reply-chunk-long
#                        the Reply chunk returned reordered, with a handle
#                        twice, or longer than offered: the READDIR fails
#   inv-stale            Send With Invalidate of an earlier RPC's rkey: the
#                        Receive fails, the client reconnects, I/O goes on
#   inv-other-rpc        a reply invalidating another pending RPC's region:
#                        both reads still return the right data
#   extra-sends          360 copies of a reply back to back, more than the
#                        client has Receives: dropped and counted
# After each, the data read through the peer matches the server's checksum
# whenever a read succeeds, and the mount keeps working.
. "$(dirname "$0")/../lib.sh"
hostile_ours_only
unload_all
dmesg_mark
OPTS="vers=3,proto=rdma,port=20050,nolock,retry=0,timeo=50,retrans=3"
out=$(server_cmd "mkdata peer.dat 1"); printf '%s' "$out" | grep -q 'rc=0' || fail "server mkdata: $out"
want=$(server_cmd "md5 peer.dat" | head -1)
fails=0
bad() { diag "  $1: $2"; fails=$((fails + 1)); }

# read_file NAME: the file read through the mount with O_DIRECT (each
# 64 KiB block one READ with a Write chunk); prints its md5, or "EIO".
read_file() {
  if dd if="$MNT/$1" of=/tmp/peer.read bs=64k iflag=direct status=none 2>/dev/null; then
    md5sum < /tmp/peer.read | cut -d' ' -f1
  else
    echo EIO
  fi
}

# list_dir: the names in peer.dir through the mount (one READDIRPLUS
# whose reply comes in a Reply chunk); prints their md5, or "EIO".
list_dir() {
  local names
  if names=$(ls -1 "$MNT/peer.dir" 2>/dev/null); then
    printf '%s\n' "$names" | md5sum | cut -d' ' -f1
  else
    echo EIO
  fi
}

# A directory whose listing is too large to come back inline, made and
# listed through knfsd directly.
mount_rs || fail "mount over knfsd failed"
mkdir -p "$MNT/peer.dir"
for i in $(seq 1 150); do : > "$MNT/peer.dir/entry-with-a-long-enough-name-$i"; done
want_dir=$(list_dir)
umount "$MNT"
[ "$want_dir" != EIO ] || fail "listing peer.dir over knfsd failed"

# scenario NAME: starts the peer, mounts through it, runs the checks the
# function check_NAME makes, unmounts and stops the peer.
scenario() {
  local s=$1 r b0 log conns
  r=$(server_cmd "peer-start $s 90 proxy")
  printf '%s' "$r" | grep -q 'rc=0' || { bad "$s" "peer did not start: $r"; return; }
  b0=$(rs_counter bad_replies)
  dmesg_mark_s=$(dmesg | wc -l)
  if ! timeout 120 mount -t nfs -o "$OPTS" "$SERVER4:/srv/export" "$MNT"; then
    bad "$s" "mount through the peer failed"; server_cmd peer-stop | tail -5 | sed 's/^/#     peer: /'; return
  fi
  "check_$s"
  conns=$(rdma_xprt_field 3)
  timeout 60 umount "$MNT" || { umount -f -l "$MNT"; bad "$s" "umount hung"; }
  log=$(server_cmd peer-stop)
  diag "$s: connects $conns, bad replies $b0 -> $(rs_counter bad_replies)"
  if [ "$fails" != "${fails_before:-0}" ]; then printf '%s\n' "$log" | tail -12 | sed 's/^/#     peer: /'; fi
  fails_before=$fails
}
moved() { [ "$(rs_counter bad_replies)" -gt "$b0" ]; }
dmesg_s() { dmesg | tail -n +"$((dmesg_mark_s + 1))"; }

check_good() {
  local f="$MNT/peer.w"
  head -c 393216 /dev/urandom > /tmp/peer.w
  dd if=/tmp/peer.w of="$f" bs=64k oflag=direct status=none || bad good "write through the peer failed"
  [ "$(read_file peer.w)" = "$(md5sum < /tmp/peer.w | cut -d' ' -f1)" ] || bad good "data written through the peer reads back wrong"
  [ "$(read_file peer.dat)" = "$want" ] || bad good "server data reads wrong through the peer"
  ls -l "$MNT" > /dev/null || bad good "READDIR through the peer failed"
  [ "$(list_dir)" = "$want_dir" ] || bad good "a listing in a Reply chunk reads wrong through the peer"
  rm -f "$f"
  [ "$(rdma_xprt_field 11)" -gt 0 ] || bad good "no Read chunk went to the peer"
  [ "$(rdma_xprt_field 12)" -gt 0 ] || bad good "no Write chunk offered to the peer"
}
# check_bad_chunk SCENARIO WHY WHAT: the first READ (write-chunk-*) or
# READDIR (reply-chunk-*) whose chunk came back WHAT fails, or, over a
# client that does not check, at least never returns wrong data; the next
# one is right; and rpcrdma_rs says WHY. The reason is in a rate-limited
# message (one per 5 s): each check waits that long after the one before.
check_bad_chunk() {
  local got fetch=(read_file peer.dat) expect=$want op=READ
  case "$1" in reply-chunk-*) fetch=(list_dir) expect=$want_dir op=READDIR ;; esac
  sleep 5
  got=$("${fetch[@]}")
  [ "$got" = EIO ] || [ "$got" = "$expect" ] || bad "$1" "a $op returned wrong data ($got)"
  [ "$("${fetch[@]}")" = "$expect" ] || bad "$1" "$op wrong or failed after the bad reply"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$got" = EIO ] || bad "$1" "the $op whose chunk $3 did not fail"
    moved || bad "$1" "bad_replies did not move"
    dmesg_s | grep -q "does not match the one offered ($2" || bad "$1" "no dmesg line naming $2"
  fi
}
check_write-chunk-foreign() { check_bad_chunk write-chunk-foreign ForeignSegment "named a foreign handle"; }
check_write-chunk-long() { check_bad_chunk write-chunk-long TooLong "was longer than offered"; }
check_write-chunk-extra() { check_bad_chunk write-chunk-extra TooManySegments "had an extra segment"; }
check_reply-chunk-gap() { check_bad_chunk reply-chunk-gap Gap "had a gap"; }
check_reply-chunk-swapped() { check_bad_chunk reply-chunk-swapped ForeignSegment "was reordered"; }
check_reply-chunk-repeated() { check_bad_chunk reply-chunk-repeated ForeignSegment "named a handle twice"; }
check_reply-chunk-long() { check_bad_chunk reply-chunk-long TooLong "was longer than offered"; }
check_inv-stale() {
  local i
  for i in 1 2 3 4; do
    [ "$(read_file peer.dat)" = "$want" ] || bad inv-stale "read $i returned wrong data or failed"
  done
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$(rdma_xprt_field 3)" -ge 2 ] || bad inv-stale "no reconnect after the failed Receive"
  fi
}
check_inv-other-rpc() {
  local a b
  dd if="$MNT/peer.dat" bs=64k count=1 iflag=direct status=none 2>/dev/null | md5sum > /tmp/peer.a &
  a=$!
  sleep 1
  dd if="$MNT/peer.dat" bs=64k skip=1 count=1 iflag=direct status=none 2>/dev/null | md5sum > /tmp/peer.b &
  b=$!
  wait $a $b
  [ "$(read_file peer.dat)" = "$want" ] || bad inv-other-rpc "data wrong after the foreign invalidation"
  [ "$(cut -d' ' -f1 /tmp/peer.a)" = "$(head -c 65536 /tmp/peer.ref | md5sum | cut -d' ' -f1)" ] ||
    bad inv-other-rpc "the first read returned wrong data"
  [ "$(cut -d' ' -f1 /tmp/peer.b)" = "$(tail -c +65537 /tmp/peer.ref | head -c 65536 | md5sum | cut -d' ' -f1)" ] ||
    bad inv-other-rpc "the second read returned wrong data"
}
check_extra-sends() {
  # 16 READs each: the peer floods after its tenth call. A READ may fail
  # while the flood lasts (a hostile peer may make an RPC fail); none may
  # return wrong data, and the mount must work afterwards.
  local got; got=$(read_file peer.dat)
  case "$got" in
    "$want") ;;
    EIO) diag "  extra-sends: a READ failed during the flood (allowed)" ;;
    *) bad extra-sends "a READ returned wrong data during the extra Sends" ;;
  esac
  sleep 3
  [ "$(read_file peer.dat)" = "$want" ] || bad extra-sends "data wrong or READ failed after the extra Sends"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$(( $(rs_counter bad_replies) - b0 ))" -ge 300 ] || bad extra-sends "only $(( $(rs_counter bad_replies) - b0 )) of 360 extra replies counted"
  fi
}

for s in good write-chunk-foreign write-chunk-long write-chunk-extra \
  reply-chunk-gap reply-chunk-swapped reply-chunk-repeated reply-chunk-long inv-stale inv-other-rpc extra-sends; do
  if [ "$s" = inv-other-rpc ]; then
    # The reference copy, read once through a healthy peer's mount above.
    [ -s /tmp/peer.ref ] || bad "$s" "no reference copy"
  fi
  scenario "$s"
  if [ "$s" = good ] && [ ! -s /tmp/peer.ref ]; then
    # Keep a copy for the partial-read checks (taken through knfsd).
    mount_rs && { dd if="$MNT/peer.dat" of=/tmp/peer.ref bs=64k status=none; umount "$MNT"; }
  fi
done
out=$(server_cmd "rmdir-export peer.dat")
out=$(server_cmd "rmdir-export peer.dir")
unload $XPRT_MOD
[ "$fails" = 0 ] || fail "$fails checks failed"
# The messages the scenarios provoke are expected; no warning or oops is.
dmesg_assert_clean
