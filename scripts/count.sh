#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make count: the working tree's own instructions per RPC, quickly, for
# trying a change before measuring it against C (make ab, make profile).
#
#   scripts/count.sh [--runtime S]
#
# Builds the module (and its twin with line tables), boots the testbed
# once and runs scripts/guest/profile_client.py with rpcrdma_rs alone, one
# round each of 4 KiB random writes, 4 KiB random reads (queue depth 64)
# and GETATTRs, counting instructions (testbed.sh --count-kernel-blocks).
# Prints the transport's own instructions per RPC for each workload, and
# beside them those of the previous run of make count, if it was kept.
# Each workload's samples are kept under the cache with the two builds,
# for scripts/profile_report.py (--calls DIR, --lines DIR/ours-lines.ko
# --inside NAME). About three minutes; the counts (of the middle of each
# job: scripts/guest/bench_client.py fio) move by a few instructions from
# run to run (RPCs in flight at the window's edges), GETATTR's by one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

runtime=10
while [ $# -gt 0 ]; do
  case "$1" in
    --runtime) runtime=$2; shift 2 ;;
    *) die "usage: $0 [--runtime S]" ;;
  esac
done
case "$runtime" in
  '' | *[!0-9]*) die "--runtime takes whole seconds, not '$runtime'" ;;
esac

cd "$repo"
bash scripts/setup-host.sh > /dev/null
dir=$CACHE_DIR/count
mkdir -p "$dir"
RDMARS_DEBUGINFO=1 make -s module
cp rpcrdma_rs.ko "$dir/ours-lines.ko.new"
make -s module
cp rpcrdma_rs.ko "$dir/ours.ko.new"
same_code_or_warn "$dir/ours.ko.new" "$dir/ours-lines.ko.new"
raw=$(mktemp /tmp/rpcrdma-rs-count.XXXX)
trap 'rm -f "$raw"' EXIT
log "count: one ${runtime}s run each of randwrite, randread and getattr (about 3 minutes)"
set +e
bash scripts/testbed.sh --count-kernel-blocks --timeout $(( 600 + 3 * (runtime + 120) )) \
  env PROFILE_VARIANTS=ours PROFILE_ROUNDS=1 PROFILE_IODEPTH=64 BENCH_RUNTIME="$runtime" \
  sh -c 'for w in randwrite randread getattr; do PROFILE_WORKLOAD=$w python3 scripts/guest/profile_client.py || exit 1; done' \
  > "$raw" 2>&1
rc=$?
set -e
[ "$rc" = 0 ] || { tail -20 "$raw"; die "the run failed (exit $rc)"; }
python3 - "$raw" "$dir" <<'PY'
import json, os, sys
raw, d = sys.argv[1], sys.argv[2]
runs = {}
for line in open(raw, errors="replace"):
    if line.startswith("PROFILE "):
        runs[json.loads(line[8:])["workload"]] = line
if len(runs) != 3:
    sys.exit(f"count: {len(runs)} of the 3 workloads measured")
before = {}
for w in runs:
    try:
        before[w] = json.loads(open(os.path.join(d, w + ".txt")).read()[8:])["transport_insns_per_rpc"]
    except (OSError, ValueError, KeyError):
        pass
print(f"{'own instructions per RPC':26s}{'now':>10s}{'before':>10s}{'change':>10s}")
for w, line in runs.items():
    now = json.loads(line[8:])["transport_insns_per_rpc"]
    old = before.get(w)
    cells = f"{old:10.1f}{now - old:+10.1f}" if old is not None else f"{'-':>10s}{'-':>10s}"
    print(f"{w:26s}{now:10.1f}{cells}")
    with open(os.path.join(d, w + ".txt"), "w") as f:
        f.write(line)
PY
mv "$dir/ours.ko.new" "$dir/ours.ko"
mv "$dir/ours-lines.ko.new" "$dir/ours-lines.ko"
log "kept in $dir: one file per workload, for scripts/profile_report.py --calls $dir [--lines $dir/ours-lines.ko --inside NAME] $dir/WORKLOAD.txt"
