#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A hostile RPC-over-RDMA server: tools/rdma-peer runs in the server guest
# on port 20050 and plays one scenario of its catalogue per mount attempt
# (Documentation/hostile-peer.rst lists them with the reaction each must
# get). The peer answers NULL correctly and every other procedure with
# PROC_UNAVAIL, so each NFSv4.0 mount attempt fails in the end; what is
# checked is how the client got there: the counter or message the bad input
# must produce, the peer's log (what the client sent back), and no oops,
# warning or hang. Afterwards rpcrdma_rs unloads (no transport leaked) and
# a normal mount to knfsd works.
. "$(dirname "$0")/../lib.sh"
# The C client's pass over the catalogue (its reactions, for comparison)
# takes as long as ours: only `make long-check` runs it.
hostile_ours_only
unload_all
dmesg_mark
# A 2 s timeout (10 s on the debug kernel) with one retransmission: a
# dropped reply costs a timeout and a reconnect, not a minute.
PEER_OPTS="vers=4.0,proto=rdma,port=20050,retry=0,timeo=$(slow_timeo 20),retrans=1"
# How long the peer plays a scenario, and how long a mount attempt may
# take before it counts as hung.
PEER_SECS=$(slow_secs 45) MOUNT_SECS=$(slow_secs 100)
# Headers cut short: make check tries three lengths (nothing, inside the
# fixed fields, inside the chunk lists); make long-check all nine.
TRUNCATIONS=${RDMARS_PEER_TRUNCATIONS:-"0 12 24"}
out=$(server_cmd "peer-list"); printf '%s' "$out" | grep -q '^good ' || fail "rdma-peer is not available in the server guest: $out"
fails=0
# case SCENARIO CHECK...: one mount attempt against the peer, then CHECKs:
#   bad+ (bad_replies moved)   errchunk+ (ERR_CHUNK sent)   peer:REGEX
#   conns>=N (peer accepted N connections)   dmesg:REGEX
# A check prefixed rs: is about how rpcrdma_rs reacts and is skipped for
# the C client, which reacts differently (it sends no ERR_CHUNK, logs
# less, and takes some malformed replies that we drop). Both must survive
# every scenario without a hang or a kernel complaint.
case_() {
  local s=$1; shift
  local r b0 b1 e0 e1 t0 ms log ok=1 chk
  r=$(server_cmd "peer-start $s $PEER_SECS")
  printf '%s' "$r" | grep -q 'rc=0' || { diag "$s: peer did not start: $r"; fails=$((fails + 1)); return; }
  b0=$(rs_counter bad_replies); e0=$(rs_counter backward_chunk_errors)
  dmesg_mark
  t0=$(date +%s%N)
  timeout "$MOUNT_SECS" mount -t nfs -o "$PEER_OPTS" "$SERVER4:/" "$MNT" > /dev/null 2>&1
  local rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  nfs_mounted && umount -f "$MNT"
  log=$(server_cmd "peer-stop")
  b1=$(rs_counter bad_replies); e1=$(rs_counter backward_chunk_errors)
  [ "$rc" = 124 ] && { diag "$s: mount hung (killed after $MOUNT_SECS s)"; ok=0; }
  if dmesg_since_mark | grep -qE 'WARNING:|BUG:|Oops|Call Trace|general protection|refcount_t:|UBSAN|KASAN'; then
    diag "$s: the kernel complained:"; dmesg_since_mark | grep -E -A3 'WARNING:|BUG:|Oops' | head -20 | sed 's/^/#     /'; ok=0
  fi
  for chk in "$@"; do
    case "$chk" in
      rs:*) [ "$XPRT_MOD" = rpcrdma_rs ] || continue; chk=${chk#rs:} ;;
    esac
    case "$chk" in
      bad+) [ "$b1" -gt "$b0" ] || { diag "$s: bad_replies did not move ($b0)"; ok=0; } ;;
      errchunk+) [ "$e1" -gt "$e0" ] || { diag "$s: no ERR_CHUNK sent"; ok=0; } ;;
      peer:*) printf '%s\n' "$log" | grep -qE "${chk#peer:}" || { diag "$s: peer log lacks /${chk#peer:}/"; ok=0; } ;;
      conns\>=*) n=$(printf '%s\n' "$log" | grep -c 'accepted connection'); [ "$n" -ge "${chk#conns>=}" ] || { diag "$s: $n connections, want ${chk#conns>=}"; ok=0; } ;;
      dmesg:*) dmesg_since_mark | grep -qE "${chk#dmesg:}" || { diag "$s: dmesg lacks /${chk#dmesg:}/"; ok=0; } ;;
    esac
  done
  if [ $ok = 1 ]; then diag "ok: $s (mount rc $rc after $ms ms; bad replies +$((b1 - b0)))"
  else fails=$((fails + 1)); printf '%s\n' "$log" | tail -8 | sed 's/^/#     peer: /'; fi
}
# Sanity: a well-behaved peer gets NULL right and the next call.
# Each call asks for as many credits as the client has requests (128 by
# default: slot_table_entries).
case_ good 'peer:recv call .* proc=0' 'peer:recv call .* proc=[1-9]' 'rs:peer:recv call .* credits=128$'
# Headers cut inside the fixed part or the chunk lists: dropped, counted;
# the ping times out and is retried on a new connection.
for n in $TRUNCATIONS; do case_ truncated-$n rs:bad+ rs:conns\>=2; done
# A message in a version the connection does not speak is answered with
# ERR_VERS in ours (RFC 8166 section 4.2), whatever it claims to be.
case_ bad-version rs:bad+ 'rs:peer:recv RDMA_ERROR .*Vers \{ low: 1, high: 1 \}'
case_ unknown-proc rs:bad+
case_ msgp rs:bad+
case_ done rs:bad+
case_ error-vers 'peer:recv call'
case_ error-chunk 'peer:recv call'
case_ error-unknown rs:bad+
case_ unknown-xid rs:bad+ rs:conns\>=2
case_ rpc-xid-mismatch rs:bad+
case_ duplicate-reply rs:bad+
case_ credits-0 'peer:recv call .* proc=[1-9]'
case_ credits-max 'peer:recv call .* proc=[1-9]'
case_ huge-counts rs:bad+
case_ write-chunk-unoffered rs:bad+
case_ reply-chunk-unoffered rs:bad+
case_ inv-foreign 'peer:send reply .* invalidate' 'rs:dmesg:Receive failed' rs:conns\>=2
case_ reverse-call-chunks rs:errchunk+ 'rs:peer:recv RDMA_ERROR xid=0x7e570001'
case_ reverse-call rs:bad+
case_ reverse-call-vers 'rs:peer:recv RDMA_ERROR xid=0x7e570001 Vers \{ low: 1, high: 1 \}'
case_ disconnect-mid conns\>=2
case_ cm-none 'rs:dmesg:inline thresholds 1024 \(calls\) and 1024'
case_ cm-garbage 'rs:dmesg:inline thresholds 1024 \(calls\) and 1024'
case_ cm-short 'rs:dmesg:inline thresholds 1024 \(calls\) and 1024'
case_ cm-misplaced 'rs:dmesg:inline thresholds 2048 \(calls\) and 2048'
case_ reject 'peer:rejected'
# The module must be whole afterwards: it unloads (no transport leaked),
# and a normal mount works.
dmesg_mark
unload $XPRT_MOD
mount_rs || fail "a normal mount fails after the hostile peer"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
dmesg_assert_clean
[ "$fails" = 0 ] || fail "$fails scenarios did not get the expected reaction"
