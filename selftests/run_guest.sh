#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# kselftest-style runner: runs each selftests/tests/*.sh in the client guest
# and reports TAP. Usage: run_guest.sh [TEST-NAME...]
cd "$(dirname "$0")" || exit 1
if [ $# -gt 0 ]; then
  tests=(); for t in "$@"; do tests+=("tests/$t.sh"); done
else
  tests=(tests/*.sh)
fi
echo "TAP version 13"
echo "1..${#tests[@]}"
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
exit $failed
