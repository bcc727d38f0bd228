#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# RPC-over-RDMA Version Two against tools/rdma-peer in proxy mode (a real
# NFSv3 export behind it) with --v2, and each way negotiation can go wrong:
#   cm-none (v2)      the peer sends no CM private data, so Version One
#                     would use 1024-byte thresholds; the connection settles
#                     on Version Two, and a 3 KiB WRITE goes inline with no
#                     Read chunk (Version Two's 4096-byte default)
#   v2-optional (v2)  an RDMA2_OPTIONAL call of an unknown type is answered
#                     with RDMA2_ERROR / ERR_INVAL_OPTION
#   v2-reverse-call (v2) Version Two backward calls on an NFSv3 mount: one
#                     dropped, one with a chunk refused, one malformed
#   v2-malformed (v2) a broken Version Two answer to the probe: disconnect,
#                     then Version One with that server
#   drop-first (v2)   the probe is lost: after the timeout the client
#                     reconnects and speaks Version One to that server
#   vers-none         ERR_VERS 3..3: no common version, the mount fails
# and the transport characteristics extension (xcharext) on Version Two:
#   cm-none (v2)      our ROPT_INITXCH reaches the peer
#   xch-upd (v2)      the peer's ROPT_INITXCH says 4 KiB, a 6 KiB WRITE
#                     needs a Read chunk; its ROPT_UPDXCH raises the Receive
#                     buffer to 8 KiB, and the same WRITE then goes inline
#                     (rpcrdma_rs loaded with max_inline_write=8192)
#   xch-req (v2)      ROPT_REQXCH for a 2 KiB Receive buffer is answered
#                     with ROPT_RESPXCH (rejected: ours are fixed)
#   xch-resp (v2)     an ROPT_RESPXCH we never asked for: counted, answered
#                     with RDMA2_ERROR / ERR_INVAL_OPTION
#   xch-early (v2)    the peer's ROPT_INITXCH (8 KiB) comes ahead of the
#                     answer to the probe, on each connection: read as
#                     Version Two, not counted as bad; a 6 KiB WRITE goes
#                     inline, on the first connection and after a reconnect
. "$(dirname "$0")/../lib.sh"
only_ours
unload_all
dmesg_mark
MODOPTS=
LOG=
# peer SCENARIO [v2]: a fresh rpcrdma_rs (nothing remembered), the peer,
# and a mount through it; returns the mount's status.
peer() {
  unload rpcrdma_rs
  modprobe rpcrdma_rs $MODOPTS || fail "cannot load rpcrdma_rs"
  local r; r=$(server_cmd "peer-start $1 120 proxy ${2:-}")
  printf '%s' "$r" | grep -q 'rc=0' || { bad "$1" "peer did not start: $r"; return 1; }
  dmesg_mark_s=$(dmesg | wc -l)
  timeout 120 mount -t nfs -o "$PEER_OPTS_V3" "$SERVER4:/srv/export" "$MNT"
}
# done_ SCENARIO: unmounts and stops the peer; its log lands in $LOG.
done_() {
  if nfs_mounted; then timeout 60 umount "$MNT" || { umount -f -l "$MNT"; bad "$1" "umount hung"; }; fi
  LOG=$(server_cmd peer-stop)
}
new_dmesg() { dmesg | tail -n +"$((dmesg_mark_s + 1))"; }
show_log() { printf '%s\n' "$LOG" | tail -"${1:-10}" | sed 's/^/#     peer: /'; }

# Version Two, and its larger default inline threshold.
if peer cm-none v2; then
  head -c 3072 /dev/urandom > /tmp/v2.w
  r0=$(rdma_xprt_field 11)
  dd if=/tmp/v2.w of="$MNT/v2.w" bs=3072 count=1 oflag=direct status=none || bad cm-none "WRITE failed"
  r1=$(rdma_xprt_field 11)
  cmp -s /tmp/v2.w "$MNT/v2.w" || bad cm-none "data read back differs"
  rm -f "$MNT/v2.w"
  v2c=$(rs_counter v2_connections)
  done_ cm-none
  diag "cm-none: Version Two connections $v2c, Read chunks for the 3 KiB WRITE $((r1 - r0))"
  [ "$v2c" = 1 ] || bad cm-none "the connection did not settle on Version Two"
  new_dmesg | grep -q 'using RPC-over-RDMA Version Two' || bad cm-none "no log line for Version Two"
  printf '%s' "$LOG" | grep -q 'rpcrdma v2 prog=100003 vers=3 proc=7: .* inline' || bad cm-none "the peer saw no inline Version Two WRITE"
  [ "$r1" = "$r0" ] || bad cm-none "the 3 KiB WRITE used a Read chunk"
  printf '%s' "$LOG" | grep -q 'xchar InitXch' || bad cm-none "our ROPT_INITXCH did not reach the peer"
  [ "$fails" = 0 ] || show_log
else
  bad cm-none "mount through the Version Two peer failed"; done_ cm-none; show_log
fi

f0=$fails
MODOPTS="max_inline_write=8192"
if peer xch-upd v2; then
  head -c 6144 /dev/urandom > /tmp/v2.w
  r0=$(rdma_xprt_field 11)
  dd if=/tmp/v2.w of="$MNT/xch.1" bs=6144 count=1 oflag=direct status=none || bad xch-upd "first WRITE failed"
  r1=$(rdma_xprt_field 11)
  for i in $(seq 1 16); do dd if="$MNT/xch.1" of=/dev/null bs=4096 count=1 iflag=direct status=none; done
  sleep 1
  dd if=/tmp/v2.w of="$MNT/xch.2" bs=6144 count=1 oflag=direct status=none || bad xch-upd "second WRITE failed"
  r2=$(rdma_xprt_field 11)
  cmp -s /tmp/v2.w "$MNT/xch.2" || bad xch-upd "data read back differs"
  rm -f "$MNT/xch.1" "$MNT/xch.2"
  done_ xch-upd
  diag "xch-upd: Read chunks for a 6 KiB WRITE: $((r1 - r0)) before ROPT_UPDXCH, $((r2 - r1)) after"
  [ $((r1 - r0)) -ge 1 ] || bad xch-upd "the WRITE went inline before the peer allowed 8 KiB"
  [ "$r2" = "$r1" ] || bad xch-upd "the WRITE still used a Read chunk after ROPT_UPDXCH"
  new_dmesg | grep -q "server's receive buffer is 8192 bytes" || bad xch-upd "no log line for the new Receive buffer size"
else
  bad xch-upd "mount failed"; done_ xch-upd
fi
MODOPTS=
[ "$fails" = "$f0" ] || show_log

# A Version Two server may send its characteristics first thing (xcharext
# section 4.1), before the probe's answer: a client that reads them as
# Version One drops them as undecodable (bad_replies) and keeps 4 KiB.
f0=$fails
MODOPTS="max_inline_write=8192"
if peer xch-early v2; then
  head -c 6144 /dev/urandom > /tmp/v2.w
  r0=$(rdma_xprt_field 11)
  dd if=/tmp/v2.w of="$MNT/xch.1" bs=6144 count=1 oflag=direct status=none || bad xch-early "first WRITE failed"
  r1=$(rdma_xprt_field 11)
  force_disconnect 20050
  dd if=/tmp/v2.w of="$MNT/xch.2" bs=6144 count=1 oflag=direct status=none || bad xch-early "WRITE after the reconnect failed"
  r2=$(rdma_xprt_field 11)
  conns=$(rdma_xprt_field 3)
  cmp -s /tmp/v2.w "$MNT/xch.1" && cmp -s /tmp/v2.w "$MNT/xch.2" || bad xch-early "data read back differs"
  rm -f "$MNT/xch.1" "$MNT/xch.2"
  b=$(rs_counter bad_replies)
  done_ xch-early
  diag "xch-early: connections $conns, Read chunks for a 6 KiB WRITE $((r1 - r0)), after the reconnect $((r2 - r1)), bad replies $b"
  [ "$(printf '%s\n' "$LOG" | grep -c 'ROPT_INITXCH ahead of the first reply')" -ge 2 ] ||
    bad xch-early "the peer did not send its ROPT_INITXCH first on two connections"
  [ "$conns" -ge 2 ] || bad xch-early "no reconnect"
  [ "$b" = 0 ] || bad xch-early "$b of the peer's messages counted as bad"
  [ "$r1" = "$r0" ] || bad xch-early "the WRITE used a Read chunk: the early ROPT_INITXCH was not taken"
  [ "$r2" = "$r1" ] || bad xch-early "after the reconnect the WRITE used a Read chunk"
  new_dmesg | grep -q "server's receive buffer is 8192 bytes" || bad xch-early "no log line for the Receive buffer size"
else
  bad xch-early "mount failed"; done_ xch-early
fi
MODOPTS=
[ "$fails" = "$f0" ] || show_log

f0=$fails
if peer xch-req v2; then
  ls "$MNT" > /dev/null; sleep 2; ls "$MNT" > /dev/null
  done_ xch-req
  printf '%s' "$LOG" | grep -q 'xid=0x72000002: xchar RespXch' || bad xch-req "no ROPT_RESPXCH came back"
else
  bad xch-req "mount failed"; done_ xch-req
fi
[ "$fails" = "$f0" ] || show_log

f0=$fails
if peer xch-resp v2; then
  # The module was loaded afresh for this scenario: its counter starts at
  # 0, and the RESPXCH comes right after the first reply, during the mount.
  ls "$MNT" > /dev/null; sleep 2; ls "$MNT" > /dev/null || bad xch-resp "READDIR failed"
  b1=$(rs_counter bad_replies)
  done_ xch-resp
  [ "$b1" -ge 1 ] || bad xch-resp "the unsolicited ROPT_RESPXCH was not counted as a bad reply"
  printf '%s' "$LOG" | grep -q 'send ROPT_RESPXCH' || bad xch-resp "the peer sent no ROPT_RESPXCH"
  printf '%s' "$LOG" | grep -q ': Error(InvalOption)' || bad xch-resp "the ROPT_RESPXCH was not answered with ERR_INVAL_OPTION"
else
  bad xch-resp "mount failed"; done_ xch-resp
fi
[ "$fails" = "$f0" ] || show_log

f0=$fails
# Version Two's backward direction (draft section 4.2.2) on an NFSv3
# mount, which has no callback service: a plain backward call is dropped
# and counted; one with a Read chunk gets RDMA2_ERROR / ERR_BAD_HEADER
# (Version Two has no ERR_CHUNK); a CALL direction over an RPC reply is
# counted as malformed.
if peer v2-reverse-call v2; then
  # The module was loaded afresh (peer): its counters start at 0.
  ls "$MNT" > /dev/null; sleep 2; ls "$MNT" > /dev/null || bad v2-reverse-call "READDIR failed"
  b1=$(rs_counter bad_replies) e1=$(rs_counter backward_chunk_errors)
  done_ v2-reverse-call
  printf '%s' "$LOG" | grep -q 'xid=0x7e572002: Error(BadHeader)' || bad v2-reverse-call "no ERR_BAD_HEADER for the backward call with a chunk"
  [ "$e1" -ge 1 ] || bad v2-reverse-call "backward_chunk_errors did not move"
  [ "$b1" -ge 3 ] || bad v2-reverse-call "only $b1 of the 3 backward messages counted"
else
  bad v2-reverse-call "mount failed"; done_ v2-reverse-call
fi
[ "$fails" = "$f0" ] || show_log

f0=$fails
if peer v2-optional v2; then
  ls "$MNT" > /dev/null; sleep 2; ls "$MNT" > /dev/null
  done_ v2-optional
  printf '%s' "$LOG" | grep -q 'xid=0x71000001: Error(InvalOption)' || bad v2-optional "no ERR_INVAL_OPTION came back"
else
  bad v2-optional "mount failed"; done_ v2-optional
fi
[ "$fails" = "$f0" ] || show_log

f0=$fails
if peer v2-malformed v2; then
  ls "$MNT" > /dev/null || bad v2-malformed "READDIR failed"
  conns=$(rdma_xprt_field 3)
  done_ v2-malformed
  [ "$conns" -ge 2 ] || bad v2-malformed "no reconnect after the broken answer"
  printf '%s' "$LOG" | grep -q 'rpcrdma v1 prog=100003' || bad v2-malformed "not Version One after the broken answer"
  [ "$(rs_counter v2_connections)" = 0 ] || bad v2-malformed "counted as a Version Two connection"
else
  bad v2-malformed "mount failed"; done_ v2-malformed
fi
[ "$fails" = "$f0" ] || show_log

f0=$fails
if peer drop-first v2; then
  ls "$MNT" > /dev/null || bad drop-first "READDIR failed"
  done_ drop-first
  new_dmesg | grep -q 'no answer to the Version Two probe' || bad drop-first "the lost probe was not logged"
  printf '%s' "$LOG" | grep -q 'rpcrdma v1 prog=100003' || bad drop-first "not Version One after the lost probe"
else
  bad drop-first "mount failed"; done_ drop-first
fi
[ "$fails" = "$f0" ] || show_log

f0=$fails
if peer vers-none; then
  bad vers-none "mounted with no version in common"
fi
done_ vers-none
new_dmesg | grep -q 'versions 3..3 only, none of those allowed' || bad vers-none "no log line"
[ "$fails" = "$f0" ] || show_log

unload rpcrdma_rs
[ "$fails" = 0 ] || fail "$fails checks failed"
dmesg_assert_clean
