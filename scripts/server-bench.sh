#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make server-bench: our server against the in-tree svcrdma, and Version
# Two end to end, in exact counts (issue 57's figures).
#
#   scripts/server-bench.sh [--rounds N] [--runtime S] [--variants V,V,...] [--profile]
#
# One testbed run counting both guests' instructions (testbed.sh
# --count-insns). The client guest pairs clients with servers
# (scripts/guest/bench_client.py, variants CLIENT@SERVER; the server
# guest swaps its RDMA server module between them):
#   c@c          the in-tree client against the in-tree server: the
#                reference
#   c@ours       the in-tree client against our server (Version One)
#   ours@c       our client against the in-tree server (Version One)
#   ours8k@ours  our client (max_inline_read=8192) against our server:
#                Version Two, 4 KiB READ replies inline
#   ours1@ours   our client (versions=1) against our server
# Each round runs 4 KiB random reads at queue depth 1 and 64, 4 KiB
# O_DIRECT random writes at queue depth 64, GETATTRs (stat on a noac
# mount) and 1 MiB sequential reads, over NFSv3. Prints, per workload and
# variant, the medians over the rounds of the client's and the server's
# instructions per RPC and their sum, with the sum's ratio to c@c (which
# --variants must then include; the default is all five), and
# the targets: ours8k@ours at most 0.85 x c@c's sum on 4 KiB reads, and
# c@ours's server at most c@c's. Then the server's memory per connection
# with ours and with svcrdma (three mounts of the C client each).
# Instruction counts move by a few per RPC from run to run; the times are
# context (Documentation/benchmarks.rst).
#
# With --profile the server guest's instructions are also counted per
# kernel function (testbed.sh --count-kernel-blocks), and the report says
# per workload where each variant's server instructions per RPC go: the
# transport (svcrdma or ours), soft-RoCE (rdma_rxe), ib_core, SUNRPC,
# nfsd, the VFS, memory management, the scheduler and the rest of the
# kernel (the kernel image's functions placed by the build tree's
# archives), and the functions whose counts differ most from c@c's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

rounds=2 runtime=10 variants=c@c,c@ours,ours@c,ours8k@ours,ours1@ours profile=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --profile) profile=1; shift ;;
    *) die "usage: $0 [--rounds N] [--runtime S] [--variants V,V,...] [--profile]" ;;
  esac
done
nvar=$(echo "$variants" | tr , '\n' | grep -c .)
case "$rounds$runtime" in
  *[!0-9]*) die "--rounds and --runtime take whole numbers" ;;
esac

cd "$repo"
bash scripts/setup-host.sh > /dev/null
make -s module
# The run's output is kept (a profile's per-function counts are there).
mkdir -p "$CACHE_DIR/server-bench"
raw=$CACHE_DIR/server-bench/$(date +%Y%m%d-%H%M%S).txt
log "server bench: $rounds rounds of $nvar variants, ${runtime}s jobs (about $(( rounds * nvar * 5 * (runtime + 15) / 60 + 3 )) minutes)"
set +e
count=--count-insns
[ "$profile" = 0 ] || count=--count-kernel-blocks
bash scripts/testbed.sh $count --server-module ours --timeout $(( 600 + rounds * nvar * 5 * (runtime + 60) )) \
  env BENCH_VARIANTS="$variants" BENCH_WORKLOADS=server BENCH_REPEATS="$rounds" BENCH_RUNTIME="$runtime" \
  BENCH_SERVER_PROFILE="$profile" \
  python3 scripts/guest/bench_client.py | tee "$raw" | grep --line-buffered -v '^BENCH '
rc=${PIPESTATUS[0]}
set -e
python3 - "$raw" "$variants" "$(cached_kernel)" <<'PY'
import collections, json, os, statistics, subprocess, sys
runs = {}
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("BENCH "):
        s = json.loads(line[6:])
        runs.setdefault((s["variant"], s["workload"]), []).append(s)
variants = sys.argv[2].split(",")
WORKLOADS = (("randread_4k_qd1", "4 KiB read QD1", "iops"), ("randread_4k_qd64", "4 KiB read QD64", "iops"),
             ("randwrite_4k_qd64", "4 KiB write QD64", "iops"), ("getattr", "GETATTR", "ops_per_s"),
             ("seqread_1m", "1 MiB read", "mb_s"))


def med(v, w, field):
    xs = [s[field] for s in runs.get((v, w), []) if s.get(field)]
    return statistics.median(xs) if xs else None


def total(v, w):
    c, s = med(v, w, "insns_per_rpc"), med(v, w, "server_insns_per_rpc")
    return c + s if c is not None and s is not None else None


rounds = max((len(x) for x in runs.values()), default=0)
print(f"\ninstructions per RPC, medians over {rounds} rounds: client + server = sum (sum / c@c's)")
for w, label, rate in WORKLOADS:
    print(f"\n{label}")
    ref = total("c@c", w)
    for v in variants:
        c, s, t = med(v, w, "insns_per_rpc"), med(v, w, "server_insns_per_rpc"), total(v, w)
        if t is None:
            print(f"  {v:12s} -")
            continue
        r = med(v, w, rate)
        ratio = f"{t / ref:6.3f}" if ref else "     -"
        # The server's context switches per RPC, where the workload
        # counted them: its threads' sleeps and wake-ups, which its
        # scheduler instructions follow.
        sw = med(v, w, "server_switches_per_rpc")
        sw = f"   server switches/RPC {sw:.2f}" if sw is not None else ""
        print(f"  {v:12s} {c:9.0f} + {s:9.0f} = {t:9.0f}  ({ratio})   {rate} {r or 0:.0f}{sw}")
        tasks = [x.get("server_switches_by_task") for x in runs.get((v, w), []) if x.get("server_switches_by_task")]
        if tasks:
            kinds = sorted(set(k for x in tasks for k in x), key=lambda k: -max(x.get(k, 0) for x in tasks))
            print("  " + " " * 12 + " by task: " + ", ".join(
                f"{k} {statistics.median([x.get(k, 0.0) for x in tasks]):.2f}" for k in kinds[:6]))
mem = {v: s[0] for (v, w), s in runs.items() if w == "mem_per_connection"}
if mem:
    print("\nthe server's memory per connection (median of 3 mounts of the C client)")
    for v in ("server-ours", "server-c"):
        if v in mem:
            print(f"  {v:12s} kernel {mem[v]['kernel_kb']} kB, free memory {mem[v]['free_kb']} kB")
# Where the server's instructions go (--profile).
COMPONENTS = (("net/sunrpc", "SUNRPC"), ("fs/nfsd", "nfsd"), ("drivers/infiniband", "ib_core"),
              ("fs", "VFS and file systems"), ("mm", "memory"), ("kernel/sched", "scheduler"),
              ("lib", "lib"), ("net", "net"), ("arch/x86", "arch"), ("kernel", "kernel"))


def image_components(kdir):
    """Function name -> component, for the kernel image's functions, from
    the build tree's archives (the first, most specific, listed wins)."""
    out = {}
    for d, name in COMPONENTS:
        a = os.path.join(kdir, d, "built-in.a")
        if not os.path.exists(a):
            continue
        nm = subprocess.run(["nm", "--defined-only", a], capture_output=True, text=True).stdout
        for line in nm.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "tT":
                out.setdefault(f[2], name)
    return out


def component(key, image):
    mod, fn = key.split(":", 1)
    if mod in ("rpcrdma", "rpcrdma_rs"):
        return "transport"
    if mod == "rdma_rxe":
        return "rxe"
    if mod:
        return mod
    return image.get(fn, "kernel (rest)")


def funcs(v, w):
    """Median per function over the rounds, of variant v's workload w."""
    rs = [s.get("server_functions") for s in runs.get((v, w), []) if s.get("server_functions")]
    keys = set(k for r in rs for k in r)
    return {k: statistics.median([r.get(k, 0.0) for r in rs]) for k in keys}


if any(s.get("server_functions") for x in runs.values() for s in x):
    image = image_components(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else {}
    print("\nthe server's instructions per RPC by where they run (--profile)")
    for w, label, _ in WORKLOADS:
        per = {v: funcs(v, w) for v in variants}
        if not any(per.values()):
            continue
        comps = {v: collections.Counter() for v in variants}
        for v, fs in per.items():
            for k, n in fs.items():
                comps[v][component(k, image)] += n
        names = sorted(set(c for x in comps.values() for c in x), key=lambda c: -max(x[c] for x in comps.values()))
        print(f"\n{label}" + "".join(f"  {v:>12s}" for v in variants))
        for c in names:
            print(f"  {c:20s}" + "".join(f"  {comps[v][c]:12.0f}" for v in variants))
        print(f"  {'all listed':20s}" + "".join(f"  {sum(comps[v].values()):12.0f}" for v in variants))
        ref = per.get("c@c") or {}
        for v in variants:
            if v == "c@c" or not per[v] or not ref:
                continue
            d = {k: per[v].get(k, 0.0) - ref.get(k, 0.0) for k in set(per[v]) | set(ref)}
            top = sorted(d.items(), key=lambda kv: -abs(kv[1]))[:16]
            print(f"  {v} against c@c, the functions that differ most:")
            for k, n in top:
                print(f"    {n:+9.0f}  {k}  [{component(k, image)}]")

print("\ntargets (issue 57)")
ok = True
for w in ("randread_4k_qd1", "randread_4k_qd64"):
    t, ref = total("ours8k@ours", w), total("c@c", w)
    if t and ref:
        met = t <= 0.85 * ref
        ok &= met
        print(f"  {w}: ours8k@ours {t / ref:.3f} x c@c's sum (target <= 0.85): {'met' if met else 'NOT met'}")
for w, _, _ in WORKLOADS:
    s, ref = med("c@ours", w, "server_insns_per_rpc"), med("c@c", w, "server_insns_per_rpc")
    if s and ref:
        met = s <= ref
        ok &= met
        print(f"  {w}: our server {s / ref:.3f} x the C server's, for the C client (target <= 1): {'met' if met else 'NOT met'}")
print("  all met" if ok else "  not all met")
PY
log "the run's output kept in $raw"
exit "$rc"
