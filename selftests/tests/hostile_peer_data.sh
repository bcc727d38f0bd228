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
#   write-chunk-short    a READ reply whose Write chunk is empty while its
#                        count says 4096 and more: fails or is retried,
#                        never returns the pages' old contents
#   write-chunk-roundup  a READ of 4097 bytes whose Write chunk comes back
#                        as 4100 (RFC 5666 section 3.7: roundup counted,
#                        not written): the data reads right
#   write-chunk-pad      a READ of 4097 bytes whose peer writes junk into
#                        the 3 pad bytes after them: the pad inside the
#                        reply is zeroed, nothing past it is touched
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
#   cm-8k                the peer advertises 8 KiB sizes, the client is
#                        asked for 5000-byte Receives: a 4.1 KB READLINK
#                        reply comes in a Reply chunk (the client sizes
#                        replies by the 4096 it advertised)
#   cm-change            the peer's CM private data says 2 KiB on the first
#                        connection, 8 KiB on the next: the thresholds
#                        follow, data stays right
#   extra-sends          360 copies of a reply back to back, more than the
#                        client has Receives: dropped and counted, and the
#                        mount's count survives a reconnect
# After each, the data read through the peer matches the server's checksum
# whenever a read succeeds, and the mount keeps working.
. "$(dirname "$0")/../lib.sh"
hostile_ours_only
unload_all
dmesg_mark
want=$(peer_data peer.dat 1) || fail "$want"

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
# And a symlink whose READLINK reply is about 4.1 KB: over the 4096 bytes
# a client advertises with max_inline_read=5000 (rounded down), under the
# 5000 it was asked for.
link_target=$(printf 'x%.0s' $(seq 1 4000))
mount_rs || fail "mount over knfsd failed"
mkdir -p "$MNT/peer.dir"
for i in $(seq 1 150); do : > "$MNT/peer.dir/entry-with-a-long-enough-name-$i"; done
want_dir=$(list_dir)
ln -sfn "$link_target" "$MNT/peer.link" || fail "cannot make the long symlink"
head -c 4097 /dev/urandom > /tmp/peer.odd
cp /tmp/peer.odd "$MNT/peer.odd" || fail "cannot write peer.odd"
want_odd=$(md5sum < /tmp/peer.odd | cut -d' ' -f1)
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
  if ! timeout 120 mount -t nfs -o "$PEER_OPTS_V3" "$SERVER4:/srv/export" "$MNT"; then
    bad "$s" "mount through the peer failed"; server_cmd peer-stop | tail -5 | sed 's/^/#     peer: /'; return
  fi
  "check_$s"
  conns=$(rdma_xprt_field 3)
  timeout 60 umount "$MNT" || { umount -f -l "$MNT"; bad "$s" "umount hung"; }
  log=$(server_cmd peer-stop)
  diag "$s: connects $conns, bad replies $b0 -> $(rs_counter bad_replies)"
  peer_message_checks "$s" "$log"
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
# message (one per 5 s): each check waits until 5 s have passed since the
# one before made its bad reply.
last_bad_ms=$(date +%s%3N)
check_bad_chunk() {
  local got fetch=(read_file peer.dat) expect=$want op=READ wait_ms
  case "$1" in reply-chunk-*) fetch=(list_dir) expect=$want_dir op=READDIR ;; esac
  wait_ms=$(( last_bad_ms + 5200 - $(date +%s%3N) ))
  [ "$wait_ms" -le 0 ] || sleep "$(printf '%d.%03d' $((wait_ms / 1000)) $((wait_ms % 1000)))"
  got=$("${fetch[@]}")
  last_bad_ms=$(date +%s%3N)
  if [ "$XPRT_MOD" != rpcrdma_rs ] && [ "$got" != EIO ] && [ "$got" != "$expect" ]; then
    # Shown for comparison (make long-check), not held against the run:
    # the in-tree C client does not check returned chunks against its
    # offer, and hands up the pages' old contents.
    diag "  $1: the C client's $op returned wrong data ($got): it trusted a chunk that $3"
  else
    [ "$got" = EIO ] || [ "$got" = "$expect" ] || bad "$1" "a $op returned wrong data ($got)"
  fi
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
# write-chunk-short: the Write chunk comes back empty while the READ result
# still says 4096 bytes and more: the transport passes SUNRPC only the bytes
# received (the inline part and the chunk's 0), so the NFS decoder sees a
# short result ("server cheating") and the READ fails or is retried; the
# pages' old contents never become file data.
check_write-chunk-short() {
  local got; got=$(read_file peer.dat)
  [ "$got" = EIO ] || [ "$got" = "$want" ] || bad write-chunk-short "a READ returned wrong data ($got)"
  [ "$(read_file peer.dat)" = "$want" ] || bad write-chunk-short "READ wrong or failed after the empty Write chunk"
  diag "  write-chunk-short: the read through the empty Write chunk: $got"
}
# odd_read: the O_DIRECT read of peer.odd (4097 bytes) into an 8192-byte
# buffer filled with 0xaa: prints the bytes read, their md5, the bytes up to
# the next multiple of 4 and the 8 after them (hex).
odd_read() {
  python3 - "$MNT/peer.odd" <<'PY'
import hashlib, mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 8192)
buf.write(b"\xaa" * 8192)
n = os.readv(fd, [buf])
p = (n + 3) & ~3
print(n, hashlib.md5(buf[:n]).hexdigest(), buf[n:p].hex() or "-", buf[p:p + 8].hex())
PY
}
# check_odd_read SCENARIO WHAT: odd_read, and what both scenarios below
# require of it: the file's 4097 bytes read right, nothing past their WHAT
# (the pad, the roundup) touched, and the next READ right. Leaves the pad
# bytes (hex) in $pad.
check_odd_read() {
  local r n sum rest
  r=$(odd_read) || { bad "$1" "the O_DIRECT read failed: $r"; return 1; }
  read -r n sum pad rest <<< "$r"
  diag "  $1: read $n bytes, pad bytes $pad, then $rest"
  [ "$n" = 4097 ] && [ "$sum" = "$want_odd" ] || bad "$1" "read $n bytes ($sum), want 4097 ($want_odd)"
  [ "$rest" = aaaaaaaaaaaaaaaa ] || bad "$1" "bytes past the $2 changed: $rest"
  [ "$(read_file peer.dat)" = "$want" ] || bad "$1" "READ wrong or failed afterwards"
}
# write-chunk-pad: an O_DIRECT read of 8192 bytes into a buffer filled
# with 0xaa gets the file's 4097 bytes in a Write chunk (written into the
# buffer itself); the peer also writes 0xee into the 3 bytes after them,
# where the data's XDR pad lies inside the reply's length (RFC 8166
# section 3.5.3: the pad is never sent). The client zeroes the pad, so no
# byte the server did not send is passed up, and writes nothing past it.
check_write-chunk-pad() {
  local pad
  check_odd_read write-chunk-pad pad || return
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$pad" = 000000 ] || bad write-chunk-pad "the pad bytes after the data are $pad, not zero"
  fi
}
# write-chunk-roundup: an RFC 5666 server counts the roundup in the length
# it returns without writing it. Inside the 8192 bytes offered that is
# accepted: the READ's count, not the chunk's length, says how much is
# data, and nothing past the roundup is touched.
check_write-chunk-roundup() {
  local pad
  check_odd_read write-chunk-roundup roundup
}
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
    # The mount's count of them (mountstats field 20) outlives the
    # connection: a reconnect must not reset it.
    local before after c0
    before=$(rdma_xprt_field 20) c0=$(rdma_xprt_field 3)
    force_disconnect 20050
    [ "$(read_file peer.dat)" = "$want" ] || bad extra-sends "data wrong or READ failed after the reconnect"
    after=$(rdma_xprt_field 20)
    diag "  extra-sends: mountstats bad replies $before, after a reconnect ($c0 -> $(rdma_xprt_field 3) connects) $after"
    [ "$before" -ge 300 ] || bad extra-sends "mountstats counted only $before bad replies"
    [ "$(rdma_xprt_field 3)" -gt "$c0" ] || bad extra-sends "no reconnect after the forced disconnect"
    [ "$after" -ge "$before" ] || bad extra-sends "the mountstats bad reply count went back from $before to $after"
  fi
}

# cm-8k: the peer could send 8 KiB, the client was asked for 5000-byte
# Receives and advertised 4096 (a KiB multiple): a 4.1 KB READLINK reply
# must come in a Reply chunk. A client whose reply threshold were the raw
# 5000 would offer none, and the peer, keeping to the 4096 advertised,
# could only answer ERR_CHUNK.
check_cm-8k() {
  local got
  got=$(readlink "$MNT/peer.link" 2>/dev/null) || got=EIO
  if [ "$XPRT_MOD" != rpcrdma_rs ]; then
    # The C client sizes replies by its max_inline_read as given, not as
    # advertised (rpcrdma_update_cm_private): shown for comparison.
    [ "$got" = "$link_target" ] && diag "  cm-8k: the C client read the link" ||
      diag "  cm-8k: the C client's READLINK failed (${#got} bytes): it offered no Reply chunk"
    return
  fi
  [ "$got" = "$link_target" ] || bad cm-8k "READLINK of a 4000-byte target failed or read wrong (${#got} bytes)"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    dmesg_s | grep -q 'inline thresholds 4096 (calls) and 4096 (replies)' ||
      bad cm-8k "thresholds not 4096/4096: $(dmesg_s | grep -o 'inline thresholds.*' | tail -1)"
  fi
}
# cm-change: the peer's private data differs from one connection to the
# next (RFC 8797 section 4: be prepared for that on every reconnect). The
# thresholds follow it, and data moves right before and after.
check_cm-change() {
  [ "$(read_file peer.dat)" = "$want" ] || bad cm-change "data wrong over the first connection"
  force_disconnect 20050
  [ "$(read_file peer.dat)" = "$want" ] || bad cm-change "data wrong after the reconnect"
  [ "$(list_dir)" = "$want_dir" ] || bad cm-change "listing wrong after the reconnect"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    local t; t=$(dmesg_s | sed -n 's/.*inline thresholds \([0-9]*\) (calls) and \([0-9]*\) (replies).*/\1\/\2/p' | tr '\n' ' ')
    diag "  cm-change: thresholds per connection: $t"
    [ "$t" = "2048/2048 4096/4096 " ] || bad cm-change "thresholds $t, want 2048/2048 then 4096/4096"
  fi
}
# max_inline_read for the mounts made from now on: our module parameter,
# or the C client's sysctl.
set_max_inline_read() {
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then echo "$1" > /sys/module/rpcrdma_rs/parameters/max_inline_read
  else echo "$1" > /proc/sys/sunrpc/rdma_max_inline_read; fi
}

for s in good write-chunk-foreign write-chunk-long write-chunk-extra write-chunk-short write-chunk-pad write-chunk-roundup \
  reply-chunk-gap reply-chunk-swapped reply-chunk-repeated reply-chunk-long inv-stale inv-other-rpc extra-sends cm-8k cm-change; do
  # Read when a mount is made: this one only.
  [ "$s" = cm-8k ] && set_max_inline_read 5000
  if [ "$s" = inv-other-rpc ]; then
    # The reference copy, read once through a healthy peer's mount above.
    [ -s /tmp/peer.ref ] || bad "$s" "no reference copy"
  fi
  scenario "$s"
  [ "$s" = cm-8k ] && set_max_inline_read 4096
  if [ "$s" = good ] && [ ! -s /tmp/peer.ref ]; then
    # Keep a copy for the partial-read checks (taken through knfsd).
    mount_rs && { dd if="$MNT/peer.dat" of=/tmp/peer.ref bs=64k status=none; umount "$MNT"; }
  fi
done
out=$(server_cmd "rmdir-export peer.dat")
out=$(server_cmd "rmdir-export peer.dir")
out=$(server_cmd "rmdir-export peer.link")
unload $XPRT_MOD
[ "$fails" = 0 ] || fail "$fails checks failed"
# The messages the scenarios provoke are expected; no warning or oops is.
dmesg_assert_clean
