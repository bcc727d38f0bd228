#!/usr/bin/env bash
# The main job, from a fresh machine: install, build the kernel and the module,
# boot the two guests, and show what rpcrdma_rs does today.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
cd "$repo"

log "1/4 host setup"; bash scripts/setup-host.sh
log "2/4 test kernel (cached after the first build, ~20 min cold)"; kdir=$(bash scripts/build-kernel.sh)
log "    kernel: $kdir"
log "3/4 rpcrdma_rs.ko"; make -s module
modinfo rpcrdma_rs.ko | grep -E '^(filename|description|license|alias|vermagic):'
log "4/4 booting the server and client guests"
bash scripts/testbed.sh scripts/guest/demo-client.sh
