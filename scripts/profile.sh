#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# make profile: where the client's CPU goes per RPC, rpcrdma_rs against the
# in-tree C client, in one testbed run.
#
#   scripts/profile.sh [--stock] [--no-perf] [--rounds N] [--runtime S] [--iodepth N] [--workload W] [--old REV] [--lines]
#
# The client guest loads each transport in turn (rotating the order every
# round) and samples the whole guest with perf, call chains included,
# during 4 KiB random reads at queue depth 64, or --iodepth; --workload
# randwrite for 4 KiB O_DIRECT writes, getattr for GETATTRs (stat() on a
# noac mount) (scripts/guest/profile_client.py). Prints samples per thousand RPCs by
# where they landed (the transport module, rdma_rxe, the rest of the
# kernel, user space) and with the transport anywhere on the stack, each
# bucket's ratio ours / C, and the functions of each transport module and
# of the kernel that differ most. The testbed also counts instructions:
# both guests' per RPC, the transport's own by function, and the kernel
# functions whose instructions per RPC differ most between the variants.
# With --old, the module as of git revision REV is profiled too (variant
# "old"), for a change's before and after in one run. With --lines, the
# transport's own instructions are also given by source line (and by the
# function inlined there), from a twin of the module built with line
# tables (RDMARS_DEBUGINFO=1), whose code must be the same. Documentation/
# benchmarks.rst says how to read it.
#
# With --stock, the guests boot Debian's stock kernel instead, whose C
# client is Debian's own build, and the module (and --old's) is built for
# it the way its users build it (scripts/stock-kernel.sh); not with
# --lines (the stock build has no line-table twin). With --no-perf, nothing
# samples: the counts alone, without perf's own work (its unwinding at
# every sample, its writes), which comes per second and so per RPC more
# for the variant that ran fewer RPCs a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

rounds=2 runtime=30 iodepth=64 workload=randread old= lines= stock=0 perf=1
while [ $# -gt 0 ]; do
  case "$1" in
    --stock) stock=1; shift ;;
    --no-perf) perf=0; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --iodepth) iodepth=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --lines) lines=1; shift ;;
    *) die "usage: $0 [--stock] [--no-perf] [--rounds N] [--runtime S] [--iodepth N] [--workload randread|randwrite|getattr] [--old REV] [--lines]" ;;
  esac
done

cd "$repo"
bash scripts/setup-host.sh > /dev/null
kodir=$CACHE_DIR/profile/ko
mkdir -p "$kodir"
report_args=()
how=testbed
if [ "$stock" = 1 ]; then
  [ -z "$lines" ] || die "--lines needs the testbed's kernel (the stock build has no line-table twin)"
  how=stock
  bash scripts/stock-kernel.sh module "$kodir/ours.ko"
  # Debian's C client, as the guest loads it, for the calls out of it.
  read -r _ _ modroot < <(bash scripts/stock-kernel.sh guest)
  cko=$(find "$modroot/lib/modules" -name 'rpcrdma.ko*' | head -n 1)
  [ -n "$cko" ] || die "no rpcrdma.ko in $modroot"
  case "$cko" in
    *.xz) xz -dc "$cko" > "$kodir/c.ko" ;;
    *.zst) zstd -qdc "$cko" > "$kodir/c.ko" ;;
    *) cp "$cko" "$kodir/c.ko" ;;
  esac
  # No vmlinux with symbols in Debian's image packages: the report counts
  # the calls into the kernel image by their own counts only.
  rm -f "$kodir/vmlinux" "$kodir/ours-lines.ko"
  # The testbed checks this one against the kernel it boots.
  export RDMARS_KERNEL=stock RDMARS_KO=$kodir/ours.ko
else
  if [ -n "$lines" ]; then
    # The same code with line tables, built first so that the working tree's
    # module is the plain one the run loads.
    RDMARS_DEBUGINFO=1 make -s module
    cp rpcrdma_rs.ko "$kodir/ours-lines.ko"
    report_args=(--lines "$kodir/ours-lines.ko")
  fi
  make -s module
  # What the run loads, for the report's calls out of each transport.
  cp rpcrdma_rs.ko "$kodir/ours.ko"
  kernel=$(cached_kernel)
  cp "$kernel/net/sunrpc/xprtrdma/rpcrdma.ko" "$kodir/c.ko"
  ln -sfn "$kernel/vmlinux" "$kodir/vmlinux"
  if [ -n "$lines" ]; then
    same_code_or_warn rpcrdma_rs.ko "$kodir/ours-lines.ko"
  fi
fi
report_args=(--calls "$kodir" "${report_args[@]}")
variants=ours,c
if [ -n "$old" ]; then
  build_module_at "$old" "$kodir/old.ko" "$how"
  variants=ours,old,c
fi
# The run's output is kept: scripts/profile_report.py FILE prints the
# report again (--calls "$kodir": the calls out of each transport, valid
# while the modules there are the run's; --lines "$kodir/ours-lines.ko"
# [--inside NAME [--under CALLEE]]: the line reports, or one function's
# count by what it inlined, or by what CALLEE, inlined into it, inlined in
# turn).
mkdir -p "$CACHE_DIR/profile"
suffix=; [ "$stock" = 0 ] || suffix=-stock
raw=$CACHE_DIR/profile/$(date +%Y%m%d-%H%M%S)-$workload-qd$iodepth$suffix.txt
nvar=$(( $(tr -cd , <<< "$variants" | wc -c) + 1 ))
log "profile: $rounds rounds of ${runtime}s per transport (about $(( rounds * nvar * (runtime + 40) / 60 + 2 )) minutes)"
set +e
bash scripts/testbed.sh --count-kernel-blocks --timeout $(( 600 + rounds * nvar * (runtime + 120) )) \
  env PROFILE_PERF="$perf" PROFILE_VARIANTS="$variants" AB_DIR="$kodir" PROFILE_ROUNDS="$rounds" PROFILE_IODEPTH="$iodepth" PROFILE_WORKLOAD="$workload" BENCH_RUNTIME="$runtime" python3 scripts/guest/profile_client.py \
  | tee "$raw" | grep --line-buffered -v '^PROFILE '
rc=${PIPESTATUS[0]}
set -e
python3 "$here/profile_report.py" "${report_args[@]}" "$raw"
log "samples kept in $raw"
exit "$rc"
