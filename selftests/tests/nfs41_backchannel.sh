#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# NFSv4.1 and NFSv4.2 need the RFC 8167 backchannel: the server calls the
# client on the same connection. Both versions mount and move data; then the
# client holds a file open (the server grants a read delegation) and the
# server guest writes to the file locally. knfsd must recall the delegation
# with CB_RECALL over the backchannel: if the client answers, the server's
# write finishes at once; if not, it waits for the lease-break time (45 s).
# Served by rpcrdma_rs (testbed.sh --server-module ours), the callbacks go
# out through its 'rdma backchannel' class: its counters must show the
# calls sent and their replies completed; with our client too, in Version
# Two (both sides speak it by default).
. "$(dirname "$0")/../lib.sh"
unload_all
dmesg_mark
for v in 4.1 4.2; do
  [ "${RDMARS_SERVER_MODULE:-c}" = ours ] && v2c0=$(server_counter v2_connections)
  timeout 120 mount -t nfs -o vers=$v,proto=rdma,port=20049,retry=0 "$SERVER4:/" "$MNT" || fail "vers=$v: mount failed"
  head -c $((1 << 20)) /dev/urandom > /tmp/bc.src
  cp /tmp/bc.src "$MNT/bc.dat" && sync || fail "vers=$v: write failed"
  umount "$MNT" && timeout 120 mount -t nfs -o vers=$v,proto=rdma,port=20049 "$SERVER4:/" "$MNT" || fail "vers=$v: remount failed"
  cmp -s /tmp/bc.src "$MNT/bc.dat" || fail "vers=$v: data mismatch"
  calls0=$(cat /sys/kernel/debug/rpcrdma_rs/backward_calls 2>/dev/null || echo 0)
  if [ "${RDMARS_SERVER_MODULE:-c}" = ours ]; then
    sbc0=$(server_counter bc_calls); sbr0=$(server_counter bc_replies)
  fi
  # knfsd keeps a just-written file open for write in its file cache for a
  # few seconds, and grants no read delegation until it lets go.
  sleep 6
  exec 3< "$MNT/bc.dat"           # open for read: a read delegation
  head -c 1 <&3 > /dev/null
  states=$(server_cmd nfsd-states)
  out=$(server_cmd "append-export bc.dat")
  exec 3<&-
  # After the recall the client must see the server's write: 1 MiB + "x\n".
  size=$(stat -c %s "$MNT/bc.dat")
  tailbytes=$(tail -c 2 "$MNT/bc.dat" | od -An -c | tr -d ' ')
  calls=$(( $(cat /sys/kernel/debug/rpcrdma_rs/backward_calls 2>/dev/null || echo 0) - calls0 ))
  ms=$(printf '%s' "$out" | sed -n 's/.*ms=\([0-9]*\).*/\1/p')
  rm -f "$MNT/bc.dat"
  umount "$MNT" || fail "vers=$v: umount failed"
  diag "vers=$v: server write during delegation took ${ms:-?} ms; backward calls during it: $calls; size after $size"
  [ "$size" = $(( (1 << 20) + 2 )) ] && [ "$tailbytes" = 'x\n' ] || fail "vers=$v: the client does not see the server's write after the recall (size $size)"
  printf '%s' "$states" | grep -q 'callback state: UP' || fail "vers=$v: knfsd's callback channel is not up"
  printf '%s' "$states" | grep 'type: deleg' | grep -q 'bc.dat' || fail "vers=$v: knfsd granted no delegation on bc.dat to recall"
  printf '%s' "$out" | grep -q 'rc=0' || fail "vers=$v: server write failed: $out"
  [ -n "$ms" ] && [ "$ms" -lt 20000 ] || fail "vers=$v: the delegation recall was not answered in time"
  if [ "$XPRT_MOD" = rpcrdma_rs ]; then
    [ "$calls" -gt 0 ] || fail "vers=$v: no backward call reached the client"
  fi
  if [ "${RDMARS_SERVER_MODULE:-c}" = ours ]; then
    sbc=$(( $(server_counter bc_calls) - sbc0 )); sbr=$(( $(server_counter bc_replies) - sbr0 ))
    diag "vers=$v: our server sent $sbc backward calls, completed $sbr replies"
    [ "$sbc" -gt 0 ] && [ "$sbr" -gt 0 ] || fail "vers=$v: our server's backchannel carried no callback ($sbc calls, $sbr replies)"
    if [ "$XPRT_MOD" = rpcrdma_rs ]; then
      [ $(( $(server_counter v2_connections) - v2c0 )) -gt 0 ] || fail "vers=$v: our client and server did not speak Version Two"
    fi
  fi
done
unload $XPRT_MOD
dmesg_assert_clean
