#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The server stops answering for a moment: the server guest is paused
# (QEMU stop, 1.5 s, cont) three times while the client reads a file with
# O_DIRECT random reads at queue depth 64, and fio checks every block of a
# second pass at depth 8 against the crc32c header it wrote. The client's soft-RoCE retransmits meanwhile:
# its completer_retry_err counter must move, or the pauses tested nothing.
#
# - 1 KiB reads: every reply inline, nothing registered. Retransmission
#   carries the connection through each pause: no reconnect.
# - 4 KiB reads: each reply comes in a Write chunk, so a REG_MR goes out
#   ahead of every call's Send. Soft-RoCE runs those REG_MRs a second time
#   when it retransmits the Sends before them, fails on a region still
#   registered and moves the queue pair to the error state
#   (Documentation/testbed.rst, "Soft-RoCE and retransmission"): the
#   connection may be lost at each pause (for the C client just the same).
#   Reads must go on after a reconnect, every block intact; over
#   rpcrdma_rs each such reconnect is the queue pair flush it reports
#   (flushed_connections).
#
# Runs over either transport (make long-check runs it over the C client).
. "$(dirname "$0")/../lib.sh"
command -v fio > /dev/null || skip "fio not installed"
pause_ms=${RDMARS_STALL_MS:-1500}
pauses=3
# A quarter of the file on the debug kernel, five times slower.
size=4m
debug_kernel && size=1m
unload_all
dmesg_mark
[ "$XPRT_MOD" = rpcrdma ] && { load_c_client || fail "cannot load rpcrdma"; }
mount_rs || fail "mount failed"
state=/tmp/stall
cleanup() { touch $state/stop; kill $load 2>/dev/null; wait 2>/dev/null; restore_testbed; }
trap cleanup EXIT

retries() { cat /sys/class/infiniband/*/ports/1/hw_counters/completer_retry_err 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'; }

# read_run BS FILE N: one fio run over FILE, two jobs that read every
# block once in random order: one at queue depth 64 (the load), one at 8
# that checks each block (checking at 64 would leave fio too busy to keep
# 64 reads in flight). Repeated by fio_repeat (lib.sh) until $state/stop.
read_run() {
  fio --filename="$2" --bs="$1" --rw=randread --direct=1 --ioengine=libaio \
    --name=load --iodepth=64 --name=check --iodepth=8 --verify=crc32c --verify_fatal=1
}

fails=0
for bs in 1k 4k; do
  f=$MNT/stall.$bs
  fio --name=w --filename="$f" --size=$size --bs=$bs --rw=write --direct=1 --ioengine=libaio --iodepth=16 \
      --verify=crc32c --do_verify=0 > /dev/null 2>&1 || fail "cannot write $f"
  conns0=$(rdma_xprt_field 3) retry0=$(retries) flushed0=$(rs_counter flushed_connections)
  fio_repeat $state read_run $bs "$f"
  for _ in $(seq 1 $pauses); do
    sleep 4
    out=$(host_cmd "pause server $pause_ms") && printf '%s' "$out" | grep -q 'rc=0' || fail "pause: $out"
  done
  # Reads must go on after the last pause: two more jobs end.
  n=$(cat $state/rounds) resumed=
  for _ in $(seq 1 $(( $(slow_secs 60) * 5 ))); do
    [ "$(cat $state/rounds)" -ge $((n + 2)) ] && { resumed=1; break; }
    sleep 0.2
  done
  touch $state/stop; wait $load
  conns=$(($(rdma_xprt_field 3) - conns0)) retry=$(($(retries) - retry0))
  flushed=$(($(rs_counter flushed_connections) - flushed0))
  how="$(cat $state/rounds) fio runs, $pauses pauses of $pause_ms ms: retransmission timeouts $retry, reconnects $conns"
  [ "$XPRT_MOD" = rpcrdma_rs ] && how+=" (queue pair flushes reported: $flushed)"
  diag "$bs reads: $how"
  [ -n "$resumed" ] || { bad "$bs" "reads did not go on after the last pause"; dump_stuck; }
  [ -e $state/failed ] && { bad "$bs" "fio failed:"; sed 's/^/#   /' $state/fio.failed | head -20; }
  [ "$retry" -gt 0 ] || bad "$bs" "soft-RoCE never retransmitted: the pauses tested nothing"
  if [ $bs = 1k ]; then
    [ "$conns" -eq 0 ] || bad "$bs" "the connection was lost with nothing registered"
  elif [ "$XPRT_MOD" = rpcrdma_rs ] && [ "$flushed" -ne "$conns" ]; then
    bad "$bs" "$conns reconnects, $flushed of them the queue pair flush"
  fi
  rm -f "$f"
done
dmesg_since_mark | grep -E "rpcrdma|rxe|svcrdma" | sed 's/^/#   /' | tail -12
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
[ $fails = 0 ] || fail "$fails checks failed"
