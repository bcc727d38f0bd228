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
n=0 failed=0
for t in "${tests[@]}"; do
  n=$((n + 1)); name=$(basename "$t" .sh)
  echo "# selftests: rpcrdma_rs: $name"
  start=$(date +%s)
  timeout "${RDMARS_TEST_TIMEOUT:-600}" bash "$t" 2>&1 | sed -u 's/^\([^#]\)/# \1/'
  rc=${PIPESTATUS[0]}
  if [ "$rc" = 124 ]; then
    # A test killed mid-way may leave its mount: clear it for the next one.
    umount -f -l /mnt/nfs 2>/dev/null
    rmmod rpcrdma_rs rpcrdma 2>/dev/null
  fi
  secs=$(( $(date +%s) - start ))
  case $rc in
    0) echo "ok $n selftests: rpcrdma_rs: $name # ${secs}s" ;;
    4) echo "ok $n selftests: rpcrdma_rs: $name # SKIP" ;;
    124) echo "not ok $n selftests: rpcrdma_rs: $name # TIMEOUT"; failed=1 ;;
    *) echo "not ok $n selftests: rpcrdma_rs: $name # exit=$rc"; failed=1 ;;
  esac
done
if [ $extra = 1 ]; then
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
