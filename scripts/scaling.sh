#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make scaling: how rpcrdma_rs and the in-tree C client scale, in one run
# of the two-guest testbed with the instructions counted.
#
#   scripts/scaling.sh [--repeats N] [--runtime S] [--out DIR]
#
# The client guest (scripts/guest/bench_client.py, BENCH_WORKLOADS=scaling)
# runs 4 KiB random reads at queue depths 1, 8, 64 and 128 over each client
# with 128 request slots, with 512, and with nconnect=4 (128 slots each),
# rotating the order of the clients every repetition.
# scripts/scaling_report.py prints the table (IOPS, the whole client's and
# the transport's own instructions per RPC) and draws the curves to
# DIR/scaling.png (default DIR: bench-results/). See
# Documentation/benchmarks.rst, "Scaling".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

repeats=1 runtime=10 out=$repo/bench-results
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
raw=$(mktemp /tmp/rpcrdma-rs-scaling.XXXX)
trap 'rm -f "$raw"' EXIT
# Two clients, three configurations, four depths: 24 jobs a repetition.
log "scaling: $repeats repetitions of 24 ${runtime}s jobs (about $(( repeats * 24 * (runtime + 11) / 60 + 2 )) minutes)"
set +e
bash scripts/testbed.sh --count-insns --timeout $(( 600 + repeats * 24 * (runtime + 40) )) \
  env BENCH_VARIANTS=ours,c BENCH_WORKLOADS=scaling BENCH_REPEATS="$repeats" BENCH_RUNTIME="$runtime" \
  python3 scripts/guest/bench_client.py | tee "$raw" | grep --line-buffered -v '^BENCH '
rc=${PIPESTATUS[0]}
set -e
# Debian's python3, which has python3-matplotlib (not a pyenv one on PATH).
/usr/bin/python3 scripts/scaling_report.py --out "$out" < "$raw"
[ "$rc" = 0 ] || die "some measurements failed (exit $rc); the report shows what was measured"
