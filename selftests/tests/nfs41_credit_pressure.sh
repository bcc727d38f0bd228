#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Credit pressure with callbacks flowing: an 8-slot transport, 128 writers
# and readers at once (O_DIRECT, so every operation is an RPC), while the
# server breaks 64 read delegations the client holds, each one a CB_RECALL
# over the backchannel. Nothing may fail, stall or hit receiver-not-ready:
# the client's rxe counters for RNR NAKs sent and received stay at zero
# (the QP is created with rnr_retry 0, so an RNR would also be a fatal
# Send error in dmesg), every file reads back as written, every recall
# reaches the client as a backward call, and none takes the lease-break
# time a lost callback would cost.
. "$(dirname "$0")/../lib.sh"
SLOTS=8 WORKERS=128 ROUNDS=2
unload_all
dmesg_mark
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  modprobe rpcrdma_rs slot_table_entries=$SLOTS || fail "cannot load rpcrdma_rs"
else
  load_c_client || fail "cannot load rpcrdma"
  echo $SLOTS > /proc/sys/sunrpc/rdma_slot_table_entries || fail "cannot set the C client's slot table size"
fi
rnr() { cat /sys/class/infiniband/*/ports/1/hw_counters/{rcvd_rnr_err,send_rnr_err} 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }
timeout 120 mount -t nfs -o vers=4.1,proto=rdma,port=20049,retry=0 "$SERVER4:/" "$MNT" || fail "mount failed"
out=$(server_cmd "mkfiles press 64"); printf '%s' "$out" | grep -q 'rc=0' || fail "server mkfiles: $out"
slots=$(awk -F= '$1 == "max_num_slots" { print $2 }' /sys/kernel/sunrpc/xprt-switches/*/xprt-*/xprt_info 2>/dev/null | sort -n | head -1)
# knfsd grants no delegation before it has probed the callback channel,
# nor during its grace period after start (10 s): wait until one is granted.
probe=$(ls "$MNT"/press/entry-* | head -1)
for _ in $(seq 1 30); do
  exec {fd}< "$probe"
  granted=$(server_cmd nfsd-states | grep -c 'type: deleg')
  exec {fd}<&-
  [ "$granted" -gt 0 ] && break
  sleep 2
done
# Hold every server-made file open for read: the server grants read
# delegations, which its own writes below must recall.
fds=()
for f in "$MNT"/press/entry-*; do exec {fd}< "$f" && fds+=("$fd"); done
# Only the files' delegations: knfsd 7.x also grants the client one on
# the directory, which the writes below do not recall.
delegs=$(server_cmd nfsd-states | grep 'type: deleg' | grep -c 'entry-')
rnr0=$(rnr); calls0=$(rs_counter backward_calls)
# The workers: fio threads, each writing its own 8 KiB file in 4 KiB
# O_DIRECT blocks and reading it back to verify, $ROUNDS times. Threads,
# not a process per worker: a fork storm starves the TCG guest's CPU, and
# the soft-RoCE stack with it, which tests the testbed rather than us.
fio --name=press --directory="$MNT/press" --filename_format='w.$jobnum' --thread --numjobs=$WORKERS \
    --rw=write --bs=4k --size=8k --loops=$ROUNDS --direct=1 --ioengine=sync \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --output=/tmp/press.fio > /dev/null 2>> /tmp/press.fio &
fio_pid=$!
# A timeline, every 2 s while fio runs: seconds since the start, backward
# calls so far, the transport's connects, sends and receives, the
# DELEGRETURNs and session operations the client sent, and knfsd's
# callback channel state. Printed when the run stalls or fails, so that a
# flake shows when callbacks or traffic stopped.
timeline=/tmp/press.timeline
{ echo "client rxe at start: $(rxe_counters)"; echo "server rxe at start: $(server_cmd rxe-counters 10)"; } > $timeline
(
  t0=$SECONDS
  while :; do
    kill -0 "$fio_pid" 2>/dev/null || break
    ops=$(awk '$1 == "xprt:" && $2 == "rdma" { x = "conn=" $5 " sends=" $8 " recvs=" $9 }
      $1 ~ /^(DELEGRETURN|CREATE_SESSION|DESTROY_SESSION|BIND_CONN_TO_SESSION):$/ { o = o " " substr($1, 1, 6) "=" $2 }
      END { print x o }' /proc/self/mountstats)
    read -r up _ < /proc/uptime
    echo "$((SECONDS - t0))s up=$up bc=$(( $(rs_counter backward_calls) - calls0 )) $ops cb=$(server_cmd cb-state 10)" >> $timeline
    sleep 2
  done
) &
sampler=$!
recall=$(server_cmd "append-all press")
# Every worker should be done within minutes; if not, record what the
# client and the server are blocked on before waiting on.
stalled=
for _ in $(seq 1 300); do
  kill -0 "$fio_pid" 2>/dev/null || break
  sleep 1
done
if kill -0 "$fio_pid" 2>/dev/null; then
  stalled="workers still running 300 s after the recalls"
  diag "$stalled: client and server state follow"
  dump_stuck
  server_cmd sysrq-w > /dev/null
  server_cmd nfsd-states | grep -E 'callback|type' | sort | uniq -c | sed 's/^/#   server: /'
fi
failed=0
wait "$fio_pid" || failed=1
kill $sampler 2>/dev/null; wait $sampler 2>/dev/null
{ echo "client rxe at end: $(rxe_counters)"; echo "server rxe at end: $(server_cmd rxe-counters 10)"; } >> $timeline
# A copy in the testbed's share: kept with the run directory (--keep).
cp $timeline "/run/share/press.timeline.$$" 2>/dev/null
for fd in "${fds[@]}"; do exec {fd}<&-; done
states=$(server_cmd nfsd-states)
rnr1=$(rnr); calls=$(( $(rs_counter backward_calls) - calls0 ))
sizes=$(stat -c %s "$MNT"/press/entry-* | sort -u | tr '\n' ' ')
bad=$(rdma_xprt_field 20)
# Calls that found no free Send buffer (field 26, empty_sendctx_q) and
# the RPCs sent: a call should almost never wait for one.
nobuf=$(rdma_xprt_field 26); sent=$(rdma_xprt_field 6)
rm -rf "$MNT/press"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
ms=$(printf '%s' "$recall" | sed -n 's/.* ms=\([0-9]*\).*/\1/p')
max=$(printf '%s' "$recall" | sed -n 's/.* max=\([0-9]*\).*/\1/p')
diag "slots $slots, $WORKERS workers: fio $([ "$failed" = 0 ] && echo ok || echo failed); 64 server writes over delegations took ${ms:-?} ms, the longest ${max:-?} ms"
diag "delegations held $delegs; backward calls $calls; RNR NAKs $rnr0 -> $rnr1; delegated file sizes after: $sizes; bad replies $bad"
diag "RPCs sent $sent; calls that waited for a Send buffer $nobuf"
# The timeline and both sides' soft-RoCE counters, when anything looks wrong.
if [ -n "$stalled" ] || [ -z "$max" ] || [ "$max" -ge 40000 ] || [ "$failed" != 0 ] ||
   { [ "$XPRT_MOD" = rpcrdma_rs ] && [ "$calls" -lt "$delegs" ]; }; then
  diag "timeline:"
  sed 's/^/#   /' $timeline
fi
[ -z "$stalled" ] || fail "$stalled"
[ "$delegs" -ge 32 ] || fail "knfsd granted only $delegs of 64 delegations: too few recalls to test"
[ "$slots" = $SLOTS ] || fail "the transport has $slots slots, not $SLOTS"
[ "$failed" = 0 ] || { tail -20 /tmp/press.fio | sed 's/^/#   /'; fail "fio failed (I/O error or data mismatch)"; }
printf '%s' "$recall" | grep -q 'rc=0' || fail "server writes failed: $recall"
# A lost callback leaves the server's writer waiting for the lease-break
# time (45 s). A recall that reaches the client still waits for its
# DELEGRETURN, which queues behind the workers' RPCs for one of 8 slots:
# seconds, not tens of seconds.
[ -n "$max" ] && [ "$max" -lt 40000 ] || fail "a recall took ${max:-?} ms: a callback was lost or stalled"
[ "$sizes" = "2 " ] || fail "the client does not see every server write after the recalls: sizes $sizes"
printf '%s' "$states" | grep -q 'callback state: UP' || fail "knfsd's callback channel is not up"
[ "$rnr1" = "$rnr0" ] || fail "receiver-not-ready NAKs: $rnr0 -> $rnr1"
[ "$bad" = 0 ] || fail "bad replies: $bad"
# One wait per hundred RPCs at most (there were 2.5 per RPC with one Send
# buffer per slot).
[ "$((nobuf * 100))" -le "$sent" ] || fail "$nobuf of $sent calls waited for a Send buffer"
if [ "$XPRT_MOD" = rpcrdma_rs ]; then
  [ "$calls" -ge "$delegs" ] || fail "$delegs delegations recalled but only $calls backward calls reached the client"
fi
dmesg_assert_clean
