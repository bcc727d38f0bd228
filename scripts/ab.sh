#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make ab: two builds of rpcrdma_rs against each other (and the C client),
# alternated in one testbed run; for measuring one change.
#
#   scripts/ab.sh [--rounds N] [--runtime S] OLD_REV [NEW_REV]
#
# Builds the module at OLD_REV and at NEW_REV (default: the working tree)
# in git worktrees under the cache, then has the client guest load each in
# turn with the C client in between (scripts/guest/ab_client.sh): every
# round runs 4 KiB random reads at queue depth 1 and 64 over each, swapping
# the order every round. Prints per-round figures and the medians of the
# per-round ratios new/old and new/C. A few percent needs eight rounds or
# more (Documentation/benchmarks.rst).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

rounds=8 runtime=10
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 [--rounds N] [--runtime S] OLD_REV [NEW_REV]"

cd "$repo"
bash scripts/setup-host.sh > /dev/null
ab=$CACHE_DIR/ab
mkdir -p "$ab"
# build REV NAME: the module at REV (a worktree of it) as $ab/NAME.ko.
build() {
  local rev=$1 name=$2 wt
  if [ "$rev" = WORKTREE ]; then
    make -s module
    cp rpcrdma_rs.ko "$ab/$name.ko"
    return
  fi
  git rev-parse --verify -q "$rev^{commit}" > /dev/null || die "no such revision: $rev"
  wt=$ab/wt-$name
  git worktree remove --force "$wt" 2> /dev/null || rm -rf "$wt"
  git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  log "building the module at $(git -C "$wt" log --oneline -1)"
  make -s -C "$wt" module
  cp "$wt/rpcrdma_rs.ko" "$ab/$name.ko"
  git worktree remove --force "$wt"
}
build "$1" old
build "${2:-WORKTREE}" new
make -s module

raw=$(mktemp /tmp/rpcrdma-rs-ab.XXXX)
trap 'rm -f "$raw"' EXIT
log "A/B: $rounds rounds of ${runtime}s jobs (about $(( rounds * 3 * 2 * (runtime + 8) / 60 + 2 )) minutes)"
set +e
bash scripts/testbed.sh --timeout $(( 600 + rounds * 3 * 2 * (runtime + 30) )) \
  env AB_ROUNDS="$rounds" AB_RUNTIME="$runtime" AB_DIR="$ab" bash scripts/guest/ab_client.sh | tee "$raw"
rc=${PIPESTATUS[0]}
set -e
python3 - "$raw" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"AB (\d+) (\w+) qd(\d+) iops ([\d.]+) p50 ([\d.]+) cpu ([\d.]+)", line)
    if m:
        runs[(int(m[1]), m[2], int(m[3]))] = dict(iops=float(m[4]), p50=float(m[5]), cpu=float(m[6]))
rounds = sorted({r for r, _, _ in runs})
print(f"\nmedians of per-round ratios over {len(rounds)} rounds (min..max)")
for qd, field, label in ((1, "p50", "QD1 p50 latency"), (1, "cpu", "QD1 client CPU/RPC"),
                         (64, "iops", "QD64 IOPS"), (64, "cpu", "QD64 client CPU/RPC")):
    out = [f"{label:22s}"]
    for a, b in (("new", "old"), ("new", "c")):
        rs = [runs[(r, a, qd)][field] / runs[(r, b, qd)][field] for r in rounds
              if (r, a, qd) in runs and (r, b, qd) in runs and runs[(r, b, qd)][field]]
        out.append(f"{a}/{b} {statistics.median(rs):.3f} ({min(rs):.2f}..{max(rs):.2f})" if rs else f"{a}/{b} -")
    print("  ".join(out))
PY
exit "$rc"
