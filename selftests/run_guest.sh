#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# kselftest-style runner: runs each selftests/tests/*.sh in the client guest
# and reports TAP. Usage: run_guest.sh [TEST-NAME...]
# A name with a slash is a path under selftests/ without ".sh": the long
# suites (make soak) live in long/, out of the default run.
cd "$(dirname "$0")" || exit 1
if [ $# -gt 0 ]; then
  tests=()
  for t in "$@"; do
    case "$t" in */*) tests+=("$t.sh") ;; *) tests+=("tests/$t.sh") ;; esac
  done
else
  tests=(tests/*.sh)
fi
# On a kernel with kmemleak (the debug kernel), what leaked during the run
# is one more test at the end; what leaked while booting is cleared first.
kmemleak=/sys/kernel/debug/kmemleak
extra=0
if [ -w $kmemleak ]; then
  extra=1; echo scan > $kmemleak; echo clear > $kmemleak
  # No scans every ten minutes meanwhile: each walks all of memory under
  # KASAN and stalls the tests; the scans at the end find the same.
  echo scan=off > $kmemleak
fi
echo "TAP version 13"
echo "1..$(( ${#tests[@]} + extra ))"
# The RDMA device the tests run over (soft-RoCE or soft-iWARP).
echo "# $(rdma link show 2>/dev/null | head -1)"
# Each test runs in a session of its own (setsid), so that what it started
# ends with it, the process groups of its own timeout(1) calls included.
# When a test runs out of time, what lib.sh's dump_stuck shows at that
# moment (kernel messages since the test began, pending RPC tasks, the
# queue pairs, blocked tasks' stacks) goes into the TAP output; then the
# session is killed and the testbed restored (lib.sh restore_testbed: a
# fault test killed with the link down must not leave it down for the rest
# of the run). A test still not gone after that is stuck in the kernel: the
# tests after it are not run, as the guest can no longer be trusted to
# finish them.
limit=${RDMARS_TEST_TIMEOUT:-600}
# bounded SECS CMD...: CMD, given SECS seconds. What is still running then
# (a command blocked in the kernel, where no signal reaches it) is left
# behind, reported, and the status is 124: the runner itself never waits
# without a limit.
bounded() {
  local secs=$1 p; shift
  "$@" & p=$!
  if gone_within "$secs" "$p"; then wait "$p"; return; fi
  echo "# '$*' still running after ${secs}s"
  return 124
}
# gone_within SECS PID: true once PID (a child of this shell) has ended; if
# it is still there after SECS seconds, it and its children are sent
# SIGKILL and the answer is false.
gone_within() {
  for _ in $(seq "$1"); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 1
  done
  pkill -KILL -P "$2" 2>/dev/null; kill -KILL "$2" 2>/dev/null
  return 1
}
restore_() { ( . ./lib.sh && restore_testbed ) 2>&1 | sed 's/^/# restore: /'; }
restore() { bounded 120 restore_; }
clear_mount() { umount -f -l /mnt/nfs 2>/dev/null; rmmod rpcrdma_rs rpcrdma 2>/dev/null; true; }
n=0 failed=0 wedged=
fifo=$(mktemp -u /tmp/run_guest.XXXXXX); mkfifo "$fifo"
trap 'rm -f "$fifo"' EXIT
for t in "${tests[@]}"; do
  n=$((n + 1)); name=$(basename "$t" .sh)
  if [ -n "$wedged" ]; then
    echo "not ok $n selftests: rpcrdma_rs: $name # not run: $wedged"; continue
  fi
  echo "# selftests: rpcrdma_rs: $name"
  start=$SECONDS
  mark=$(dmesg | wc -l)
  # nfs_krb5's make check-all shapes (10,000-entry directories, fio under
  # each flavour) take it three times as long.
  tlimit=$limit
  [ "$name:${RDMARS_KRB5_FULL:-0}" = nfs_krb5:1 ] && tlimit=$((limit * 3))
  ( sleep "$tlimit" 2>/dev/null && echo "# out of time after ${tlimit}s:" &&
      . ./lib.sh && DMESG_MARK=$mark dump_stuck ) 2>/dev/null &
  watcher=$!
  # The test's output reaches TAP through a FIFO, so that the runner waits
  # for the test, not for the end of its output: a background process the
  # test left behind must not turn a failure into a timeout.
  sed -u 's/^\([^#]\)/# \1/' < "$fifo" &
  filter=$!
  # The background child is no process group leader: setsid(1) does not
  # fork, so the session's id is $pid.
  setsid timeout -k 5 "$((tlimit + 2))" bash "$t" > "$fifo" 2>&1 &
  pid=$!
  wait "$pid"; rc=$?
  [ "$rc" = 137 ] && rc=124
  # A test that ended in time takes its watcher along; a timed-out one's
  # finishes its report first, within three minutes (the blocked tasks'
  # stacks go through the serial console, slowly; rdma(8) can block behind
  # a device stuck in removal).
  if [ "$rc" = 124 ]; then
    gone_within 180 "$watcher" || echo "# (the report did not finish within 180 s)"
  else
    pkill -P "$watcher" sleep
  fi
  wait "$watcher" 2>/dev/null
  # What the test left running goes now: timeout(1) kills only its own
  # process group, and only the test's shell when that dies of SIGTERM.
  if pgrep -s "$pid" > /dev/null; then
    [ "$rc" = 124 ] || echo "# left running by the test: $(pgrep -s "$pid" -d ' ' -l)"
    pkill -KILL -s "$pid"
  fi
  case $rc in 0|4) ;; *) restore ;; esac
  for _ in $(seq 30); do pgrep -s "$pid" > /dev/null || break; pkill -KILL -s "$pid"; sleep 1; done
  if pgrep -s "$pid" > /dev/null; then
    wedged="$name is stuck in the kernel"
    echo "# still there after SIGKILL:"
    for p in $(pgrep -s "$pid"); do
      echo "# $p $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"
      sed 's/^/#   /' /proc/$p/stack 2>/dev/null
    done
  elif [ "$rc" != 0 ] && [ "$rc" != 4 ] && ! bounded 120 clear_mount; then
    # A test that failed or was killed mid-way may leave its mount and
    # module: they go here (else every later test fails to unload), or
    # the guest is as good as wedged.
    wedged="the unmount after $name is stuck in the kernel"
  fi
  # The filter ends with the last writer; one stuck in the kernel keeps it.
  gone_within 5 "$filter"; wait "$filter" 2>/dev/null
  secs=$((SECONDS - start))
  case $rc in
    0) echo "ok $n selftests: rpcrdma_rs: $name # ${secs}s" ;;
    4) echo "ok $n selftests: rpcrdma_rs: $name # SKIP" ;;
    124) echo "not ok $n selftests: rpcrdma_rs: $name # TIMEOUT after ${secs}s${wedged:+ (stuck in the kernel)}"; failed=1 ;;
    *) echo "not ok $n selftests: rpcrdma_rs: $name # exit=$rc${wedged:+ (stuck in the kernel)}"; failed=1 ;;
  esac
done
if [ $extra = 1 ] && [ -n "$wedged" ]; then
  echo "not ok $((n + 1)) selftests: rpcrdma_rs: kmemleak # not run: $wedged"
elif [ $extra = 1 ]; then
  n=$((n + 1))
  echo "# selftests: rpcrdma_rs: kmemleak"
  # An object is reported once it is older than 5 s and unreferenced in
  # two scans in a row.
  sleep 6; echo scan > $kmemleak; sleep 6; echo scan > $kmemleak
  leaks=$(cat $kmemleak)
  if [ -z "$leaks" ]; then
    echo "ok $n selftests: rpcrdma_rs: kmemleak"
  else
    printf '%s\n' "$leaks" | head -80 | sed 's/^/# /'
    echo "not ok $n selftests: rpcrdma_rs: kmemleak # $(printf '%s\n' "$leaks" | grep -c '^unreferenced object') objects"
    failed=1
  fi
fi
exit $failed
