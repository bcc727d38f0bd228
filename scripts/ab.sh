#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make ab: two builds of rpcrdma_rs against each other (and the C client),
# alternated in one testbed run; for measuring one change.
#
#   scripts/ab.sh [--rounds N] [--runtime S] OLD_REV [NEW_REV]
#
# Builds the module at OLD_REV and at NEW_REV (default: the working tree)
# in git worktrees under the cache, then has the client guest load each in
# turn with the C client in between (scripts/guest/bench_client.py with
# the variants old, c and new): every round runs 4 KiB random reads at
# queue depth 1 and 64, 4 KiB O_DIRECT random writes at queue depth 64
# (Read chunks), GETATTRs (stat on a noac mount), and the larger shapes:
# 1 MiB sequential O_DIRECT reads and writes (Write and Read chunks of many
# pages), the listing of a 2000-entry directory (Reply chunks) and Long
# Calls (an NFSv4.0 SETATTR of a 4.5 KB ACL) over each, rotating the order
# every round. Prints the medians of the per-round ratios new/old and
# new/C. A few percent needs eight rounds or more
# (Documentation/benchmarks.rst).
#
# With --stock, both builds are made for Debian's stock kernel the way its
# users build the module (scripts/stock-kernel.sh: the trixie toolchain,
# the kernel's own flags, -O2 where the testbed's kernels are -Os), and the
# guests boot that kernel, whose C client is Debian's own build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

rounds=8 runtime=10 stock=0
while [ $# -gt 0 ]; do
  case "$1" in
    --stock) stock=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    -*) die "unknown option $1" ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: $0 [--stock] [--rounds N] [--runtime S] OLD_REV [NEW_REV]"

cd "$repo"
bash scripts/setup-host.sh > /dev/null
ab=$CACHE_DIR/ab
mkdir -p "$ab"
if [ "$stock" = 1 ]; then
  build_module_at "$1" "$ab/old.ko" stock
  build_module_at "${2:-WORKTREE}" "$ab/new.ko" stock
  # The testbed checks this one against the kernel it boots.
  export RDMARS_KERNEL=stock RDMARS_KO=$ab/new.ko
else
  # The testbed needs the working tree's module in any case.
  make -s module
  build_module_at "$1" "$ab/old.ko"
  build_module_at "${2:-WORKTREE}" "$ab/new.ko"
fi

raw=$(mktemp /tmp/rpcrdma-rs-ab.XXXX)
trap 'rm -f "$raw"' EXIT
log "A/B: $rounds rounds of ${runtime}s jobs (about $(( rounds * 3 * 8 * (runtime + 12) / 60 + 2 )) minutes)"
set +e
bash scripts/testbed.sh --count-insns --timeout $(( 600 + rounds * 3 * 8 * (runtime + 40) )) \
  env BENCH_VARIANTS=old,c,new BENCH_WORKLOADS=ab BENCH_REPEATS="$rounds" BENCH_RUNTIME="$runtime" \
  AB_DIR="$ab" python3 scripts/guest/bench_client.py | tee "$raw" | grep --line-buffered -v '^BENCH '
rc=${PIPESTATUS[0]}
set -e
python3 - "$raw" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("BENCH "):
        s = json.loads(line[6:])
        runs[(s["rep"], s["variant"], s["workload"])] = s
rounds = sorted({r for r, _, _ in runs})
METRICS = (("randread_4k_qd1", "lat_p50_us", "QD1 p50 latency"),
           ("randread_4k_qd1", "cpu_us_per_rpc", "QD1 client CPU/RPC"),
           ("randread_4k_qd64", "iops", "QD64 IOPS"),
           ("randread_4k_qd64", "cpu_us_per_rpc", "QD64 client CPU/RPC"),
           ("randread_4k_qd64", "server_cpu_us_per_rpc", "QD64 server CPU/RPC"),
           # The testbed's instruction counts (scripts/insn_count.c).
           ("randread_4k_qd1", "insns_per_rpc", "QD1 client insns/RPC"),
           ("randread_4k_qd64", "insns_per_rpc", "QD64 client insns/RPC"),
           ("randread_4k_qd64", "server_insns_per_rpc", "QD64 server insns/RPC"),
           ("randread_4k_qd1", "blocks_per_rpc", "QD1 client blocks/RPC"),
           ("randread_4k_qd64", "blocks_per_rpc", "QD64 client blocks/RPC"),
           # Those of the transport module's own code.
           ("randread_4k_qd1", "transport_insns_per_rpc", "QD1 transport insns/RPC"),
           ("randread_4k_qd64", "transport_insns_per_rpc", "QD64 transport insns/RPC"),
           ("randread_4k_qd64", "transport_blocks_per_rpc", "QD64 transport blocks/RPC"),
           ("randwrite_4k_qd64", "iops", "QD64 write IOPS"),
           ("randwrite_4k_qd64", "insns_per_rpc", "QD64 write client insns/RPC"),
           ("randwrite_4k_qd64", "transport_insns_per_rpc", "QD64 write transport insns/RPC"),
           ("getattr", "ops_per_s", "GETATTR ops/s"),
           ("getattr", "insns_per_rpc", "GETATTR client insns/RPC"),
           ("getattr", "transport_insns_per_rpc", "GETATTR transport insns/RPC"),
           # The larger shapes.
           ("seqread_1m", "mb_s", "1M read MB/s"),
           ("seqread_1m", "insns_per_rpc", "1M read client insns/RPC"),
           ("seqread_1m", "transport_insns_per_rpc", "1M read transport insns/RPC"),
           ("seqwrite_1m", "mb_s", "1M write MB/s"),
           ("seqwrite_1m", "insns_per_rpc", "1M write client insns/RPC"),
           ("seqwrite_1m", "transport_insns_per_rpc", "1M write transport insns/RPC"),
           ("readdir", "listings_per_s", "READDIR listings/s"),
           ("readdir", "insns_per_rpc", "READDIR client insns/RPC"),
           ("readdir", "transport_insns_per_rpc", "READDIR transport insns/RPC"),
           ("longcall", "ops_per_s", "Long Call ops/s"),
           ("longcall", "insns_per_rpc", "Long Call client insns/RPC"),
           ("longcall", "transport_insns_per_rpc", "Long Call transport insns/RPC"),
           # The host's side: the QEMU processes' CPU time, translations.
           ("randread_4k_qd1", "host_cpu_us_per_rpc", "QD1 client QEMU CPU/RPC"),
           ("randread_4k_qd64", "host_cpu_us_per_rpc", "QD64 client QEMU CPU/RPC"),
           ("randread_4k_qd64", "server_host_cpu_us_per_rpc", "QD64 server QEMU CPU/RPC"),
           ("randread_4k_qd64", "translations_per_rpc", "QD64 client TBs made/RPC"))
print(f"\nmedians of per-round ratios over {len(rounds)} rounds (min..max)")
for wl, field, label in METRICS:
    out = [f"{label:31s}"]
    for a, b in (("new", "old"), ("new", "c")):
        rs = [runs[(r, a, wl)][field] / runs[(r, b, wl)][field] for r in rounds
              if runs.get((r, a, wl), {}).get(field) and runs.get((r, b, wl), {}).get(field)]
        out.append(f"{a}/{b} {statistics.median(rs):.3f} ({min(rs):.2f}..{max(rs):.2f})" if rs else f"{a}/{b} -")
    print("  ".join(out))
print("\nmedians over the rounds")
print(f"{'':31s}" + "".join(f"{v:>12s}" for v in ("old", "new", "c")))
for wl, field, label in METRICS:
    cells = []
    for v in ("old", "new", "c"):
        xs = [runs[(r, v, wl)][field] for r in rounds if runs.get((r, v, wl), {}).get(field)]
        cells.append(f"{statistics.median(xs):12.0f}" if xs else f"{'-':>12s}")
    print(f"{label:31s}" + "".join(cells))
PY
exit "$rc"
