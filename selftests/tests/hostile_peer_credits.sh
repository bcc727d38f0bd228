#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Credit accounting (RFC 8166 section 3.3, RFC 8167 section 4.1) against
# tools/rdma-peer in proxy mode (a real NFSv3 export behind it). The peer
# counts, per connection, the client's messages that occupy one of its
# Receives and logs "credit overrun: N outstanding, grant G" when the client
# has more out than granted: one until the first reply, then the largest
# grant the peer sent in a reply to a pending call (Documentation/
# hostile-peer.rst). Each scenario mounts through the peer and reads a 2 MiB
# file with 16 O_DIRECT readers at once (128 READs of 16 KiB, up to 16
# queued behind the grant); the data must match the server's, and the peer
# must log no overrun:
#   credits-2          every reply grants 2; the client must have used both
#                      (two outstanding at once) and the peer served the
#                      READs
#   credits-abandon    as credits-2, and before the load a READLINK the peer
#                      answers only after 20 s, whose reader is SIGKILLed
#                      after 3: the server still holds its Receive, so the
#                      client must keep its credit counted (one call at a
#                      time beside it, not two) until the late reply comes,
#                      and then take it back (RFC 8166 section 3.3.1)
#   credits-reconnect  as credits-2; the peer drops the connection on its
#                      24th READ, with the other readers' calls queued
#                      behind the grant; on each connection the peer holds
#                      the first call, and the first after the first
#                      reply, for 1.5 s: a new connection must start
#                      with one credit (a client that kept its old window
#                      sends its queued calls at once: "credit overrun: 2
#                      outstanding, grant 1"); run again with --v2, where
#                      the probe is the first call and ROPT_INITXCH takes
#                      a credit of the first grant (one that did not count
#                      it: "3 outstanding, grant 2")
#   grant-done         as credits-2, and after the first reply and every
#                      16th an RDMA_DONE with credits 2^32-1
#   grant-unknown-xid  ... a well-formed reply to no call, credits 2^32-1
#   grant-error        ... RDMA_ERROR / ERR_CHUNK for no call, 2^32-1
#   grant-reverse      ... a backward call (CB_NULL), credits 2^32-1
#   v2-probe-rejected  (--v2) the Version Two probe gets RDMA2_ERROR /
#                      ERR_BAD_HEADER with credits 2^32-1: that mount's
#                      first RPC fails; a second mount through the same
#                      peer (now granting 2, Version Two, our ROPT_INITXCH
#                      counted) must work, with no overrun on either
#   good               grants of 8, the client still healthy
# A client that took a false grant would send the READs queued behind the
# grant of 2 at once: the peer would log, on the next READ to arrive,
# "credit overrun: 3 outstanding, grant 2" and so on, up to one per reader
# (16). One that sent a second call before the first reply of a connection:
# "credit overrun: 2 outstanding, grant 1". The rule itself is checked by
# the peer's unit tests (tools/rdma-peer/src/credits.rs), without RDMA.
. "$(dirname "$0")/../lib.sh"
hostile_ours_only
unload_all
dmesg_mark
want=$(peer_data credits.dat 2) || fail "$want"
# The link credits-abandon reads, made over knfsd directly: a client that
# made it would have its target cached.
mount_rs || fail "mount over knfsd failed"
ln -sfn credits.dat "$MNT/credits.link" || fail "cannot make credits.link"
umount "$MNT"

# load: 16 readers at once, each its own 128 KiB of credits.dat in 16 KiB
# O_DIRECT READs (one RPC each). Prints the md5 of what they read
# together, or EIO if one failed.
load() {
  local i pids=() rc=0
  for i in $(seq 0 15); do
    timeout 120 dd if="$MNT/credits.dat" of="/tmp/credits.$i" bs=16k skip=$((i * 8)) count=8 \
      iflag=direct status=none 2>/dev/null &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || rc=1; done
  if [ "$rc" = 0 ]; then
    for i in $(seq 0 15); do cat "/tmp/credits.$i"; done | md5sum | cut -d' ' -f1
  else
    echo EIO
  fi
  rm -f /tmp/credits.*
}

mount_peer() { timeout 120 mount -t nfs -o "$PEER_OPTS_V3" "$SERVER4:/srv/export" "$MNT"; }

# scenario NAME [v2]: starts the peer (proxy mode, with --v2 if asked),
# mounts through it (mount_NAME, if defined, makes the mount), runs
# the load, unmounts, stops the peer and checks its log.
scenario() {
  local s=$1 v2=${2:-} r log reads peak grant baits b0 conns got
  r=$(server_cmd "peer-start $s $(slow_secs 150) proxy $v2")
  printf '%s' "$r" | grep -q 'rc=0' || { bad "$s" "peer did not start: $r"; return; }
  b0=$(rs_counter bad_replies)
  if declare -F "mount_$s" > /dev/null; then "mount_$s"; else mount_peer; fi
  if ! nfs_mounted; then
    bad "$s" "mount through the peer failed"
    server_cmd peer-stop | tail -8 | sed 's/^/#     peer: /'
    return
  fi
  local hook=
  if declare -F "during_load_$s" > /dev/null; then "during_load_$s" & hook=$!; fi
  got=$(load)
  [ -z "$hook" ] || wait "$hook"
  [ "$got" = "$want" ] || bad "$s" "the parallel reads returned wrong data or failed ($got)"
  if declare -F "after_load_$s" > /dev/null; then "after_load_$s"; fi
  conns=$(rdma_xprt_field 3)
  timeout 60 umount "$MNT" || { umount -f -l "$MNT"; bad "$s" "umount hung"; }
  log=$(server_cmd peer-stop)
  # Each READ's reply is one line of the peer's ("... prog=100003 vers=3
  # proc=6: ..."); each connection's new peaks one "credits: N
  # outstanding, the most so far (grant G)".
  reads=$(printf '%s\n' "$log" | grep -c 'prog=100003 vers=3 proc=6:')
  peak=$(printf '%s\n' "$log" | sed -n 's/.*credits: \([0-9]*\) outstanding, the most so far.*/\1/p' | sort -n | tail -1)
  grant=$(printf '%s\n' "$log" | sed -n 's/.*the most so far (grant \([0-9]*\)).*/\1/p' | tail -1)
  baits=$(printf '%s\n' "$log" | grep -c 'credits 4294967295')
  diag "$s: READs served $reads, most outstanding ${peak:-0} (grant ${grant:-?}), messages with credits 2^32-1 $baits," \
    "connects $conns, bad replies $b0 -> $(rs_counter bad_replies)"
  if [ "$s" = credits-abandon ] && [ "$XPRT_MOD" != rpcrdma_rs ]; then
    # Shown for comparison (make long-check): the C client gives an
    # abandoned call's congestion slot back at once.
    printf '%s\n' "$log" | grep 'credit overrun:' | head -1 | sed "s/^/#   $s: the C client: /"
  elif printf '%s\n' "$log" | grep -q 'credit overrun:'; then
    bad "$s" "the client had more calls outstanding than granted:"
    printf '%s\n' "$log" | grep 'credit overrun:' | head -3 | sed 's/^/#     peer: /'
  fi
  [ "$reads" -ge 100 ] || bad "$s" "the peer served only $reads READs: the load did not go through it"
  peer_message_checks "$s" "$log"
  "check_$s"
  if [ "$fails" != "${fails_before:-0}" ]; then printf '%s\n' "$log" | grep -v 'prog=100003' | tail -12 | sed 's/^/#     peer: /'; fi
  fails_before=$fails
}

check_good() { :; }
# check_queued SCENARIO: two outstanding at once under a grant of 2: the
# load really queued calls behind the grant.
check_queued() {
  [ "${peak:-0}" -ge 2 ] || bad "$1" "never two calls outstanding: the load did not use the grant of 2"
  [ "$grant" = 2 ] || bad "$1" "the peer's grant was ${grant:-unknown}, not 2"
}
check_credits-2() { check_queued credits-2; }
# check_bait SCENARIO WHAT: the false grants went out, during the load too
# (one after the first reply, then one every 16 replies).
check_bait() {
  [ "$baits" -ge 4 ] || bad "$1" "the peer sent only $baits ${2}s with credits 2^32-1"
  check_queued "$1"
}
# credits-abandon: the READLINK the peer holds is killed while it waits;
# the load then runs beside it with one credit of the two (a client that
# gave the abandoned call's credit back would have three out: "credit
# overrun: 3 outstanding, grant 2"); the late reply gives it back.
mount_credits-abandon() {
  local pid
  mount_peer || return
  a0=$(rs_counter abandoned_calls) l0=$(rs_counter late_replies) b1=$(rs_counter bad_replies)
  readlink "$MNT/credits.link" > /dev/null 2>&1 &
  pid=$!
  sleep 3
  kill -0 "$pid" 2> /dev/null || bad credits-abandon "the READLINK returned before the peer answered it"
  kill -9 "$pid"
  wait "$pid" 2> /dev/null
  killed_at=$(date +%s)
}
# The late reply comes 20 s after the READLINK: wait for it before the
# unmount.
after_load_credits-abandon() {
  local i
  for i in $(seq 1 40); do
    [ "$XPRT_MOD" = rpcrdma_rs ] && [ "$(rs_counter late_replies)" -gt "$l0" ] && break
    [ "$(( $(date +%s) - killed_at ))" -ge 25 ] && [ "$XPRT_MOD" != rpcrdma_rs ] && break
    sleep 1
  done
}
check_credits-abandon() {
  check_queued credits-abandon
  printf '%s\n' "$log" | grep -q 'holding the READLINK' || bad credits-abandon "the peer held no READLINK"
  printf '%s\n' "$log" | grep -q 'answering the held call' || bad credits-abandon "the peer never answered the held READLINK"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    local a l
    a=$(( $(rs_counter abandoned_calls) - a0 )) l=$(( $(rs_counter late_replies) - l0 ))
    diag "credits-abandon: calls abandoned $a, late replies $l, bad replies $b1 -> $(rs_counter bad_replies)"
    [ "$a" -ge 1 ] || bad credits-abandon "the killed READLINK was not counted as abandoned"
    [ "$l" -ge 1 ] || bad credits-abandon "its late reply did not give the credit back"
  fi
}
# credits-reconnect: the connection goes down while the readers have calls
# queued behind the grant (the peer drops it on a READ, so on a machine of
# any speed); the peer holds the first calls of each connection, so any
# call beyond the credit a new connection starts with (or beyond the first
# grant less Version Two's ROPT_INITXCH) is counted while they wait.
check_credits-reconnect() {
  local holds
  check_queued credits-reconnect
  printf '%s\n' "$log" | grep -q 'disconnecting on READ' || bad credits-reconnect "the peer did not drop the connection during the load"
  [ "$conns" -ge 2 ] || bad credits-reconnect "no reconnect during the load ($conns connections)"
  [ "$XPRT_MOD" != rpcrdma_rs ] || [ "$(rs_counter bad_replies)" = "$b0" ] ||
    bad credits-reconnect "a message of the peer's counted as bad"
  holds=$(printf '%s\n' "$log" | grep -c 'holding the first call .* of connection [2-9]')
  [ "$holds" -ge 1 ] || bad credits-reconnect "the peer held no first call of a later connection"
  if [ "$v2" = v2 ] && [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$(printf '%s\n' "$log" | grep -c 'xchar InitXch')" -ge 2 ] ||
      bad credits-reconnect "no ROPT_INITXCH on the second connection"
  fi
}
check_grant-done() { check_bait grant-done RDMA_DONE; }
check_grant-unknown-xid() { check_bait grant-unknown-xid "reply to no call"; }
check_grant-error() { check_bait grant-error RDMA_ERROR; }
check_grant-reverse() { check_bait grant-reverse "backward call"; }

# v2-probe-rejected: the first mount's first RPC (the probe) fails with EIO,
# and with it, as far as we know, the mount (mount.nfs takes EIO as
# permanent); whatever it does, the client must not overrun, and a second
# mount through the same peer, which behaves now, must work. A client that
# took the error's 2^32-1 as a grant shows nothing here unless it sends a
# call on that connection before the next reply: then "credit overrun: 2
# outstanding, grant 1" (its ROPT_INITXCH, which gets no reply, and the
# call).
mount_v2-probe-rejected() {
  local t0 rc err
  t0=$(date +%s%N)
  err=$(mount_peer 2>&1); rc=$?
  diag "v2-probe-rejected: first mount rc $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms${err:+: $err}"
  nfs_mounted || mount_peer
}
check_v2-probe-rejected() {
  # The C client never probes: the peer serves it Version One throughout.
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    printf '%s\n' "$log" | grep -q 'send RDMA2_ERROR / ERR_BAD_HEADER' || bad v2-probe-rejected "the peer did not reject the probe"
    printf '%s\n' "$log" | grep -q 'rpcrdma v2 prog=100003 vers=3 proc=6:' || bad v2-probe-rejected "the second mount's READs were not in Version Two"
  fi
  [ "$grant" = 2 ] || bad v2-probe-rejected "the peer's grant was ${grant:-unknown}, not 2"
  diag "v2-probe-rejected: $(printf '%s\n' "$log" | grep -c 'accepted connection') connections;" \
    "ROPT_INITXCH received $(printf '%s\n' "$log" | grep -c 'xchar InitXch')"
}

for s in credits-2 credits-abandon credits-reconnect grant-done grant-unknown-xid grant-error grant-reverse; do
  scenario "$s"
done
# Version Two needs a fresh rpcrdma_rs: the scenarios above taught it that
# the peer on port 20050 speaks Version One only.
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  unload rpcrdma_rs
  modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
fi
scenario v2-probe-rejected v2
scenario credits-reconnect v2
# The client is still healthy.
scenario good
out=$(server_cmd "rmdir-export credits.dat")
out=$(server_cmd "rmdir-export credits.link")
unload $XPRT_MOD
[ "$fails" = 0 ] || fail "$fails checks failed"
dmesg_assert_clean
