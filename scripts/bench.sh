#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make bench: rpcrdma_rs against the in-tree C client, NFS over TCP and the
# raw RDMA ceiling, measured in one run of the two-guest testbed.
#
#   scripts/bench.sh [--repeats N] [--runtime S] [--out DIR]
#
# The client guest runs scripts/guest/bench_client.py: every repetition
# mounts the same export over each variant in turn (rotating the order),
# runs the same fio and small-file workloads, and runs perftest between the
# guests. scripts/bench_report.py then prints the table of medians and
# ratios and writes all samples (JSON), the table (text) and a chart (PNG)
# to DIR (default: bench-results/ in the repository; the previous run is
# kept under DIR/previous). See Documentation/benchmarks.rst.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

repeats=3 runtime=10 out=$repo/bench-results
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done

cd "$repo"
bash scripts/setup-host.sh > /dev/null
make -s module
mkdir -p "$out"
if [ -e "$out/samples.json" ]; then
  rm -rf "$out/previous" && mkdir -p "$out/previous"
  mv "$out"/samples.json "$out"/table.txt "$out"/chart.png "$out/previous/" 2>/dev/null || true
fi
raw=$(mktemp /tmp/rpcrdma-rs-bench.XXXX)
trap 'rm -f "$raw"' EXIT
log "benchmark: $repeats repetitions, ${runtime}s per fio job (about $(( repeats * (3 * (7 * (runtime + 7) + 40) + 40) / 60 )) minutes)"
set +e
bash scripts/testbed.sh --count-insns --timeout $(( 600 + repeats * 3 * (7 * (runtime + 15) + 140) )) \
  env BENCH_REPEATS="$repeats" BENCH_RUNTIME="$runtime" python3 scripts/guest/bench_client.py \
  | tee "$raw" | grep --line-buffered -v '^BENCH '
rc=${PIPESTATUS[0]}
set -e
# Debian's python3, which has python3-matplotlib (not a pyenv one on PATH).
/usr/bin/python3 scripts/bench_report.py --out "$out" < "$raw"
[ "$rc" = 0 ] || die "some measurements failed (exit $rc); the report shows what was measured"
