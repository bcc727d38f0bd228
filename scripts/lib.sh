# Shared settings for the rpcrdma-rs scripts (sourced, not run).
# shellcheck shell=bash

BINDGEN_VERSION=0.70.1
# Everything built or cached lives outside the repository.
CACHE_DIR=${RPCRDMA_CACHE:-/var/cache/rpcrdma-rs}
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Version of the installed linux-source-6.12 package (e.g. 6.12.117-1~deb12u1).
kernel_src_version() { dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || echo none; }

# The config fragments of the test kernel, in merge order. RDMARS_KERNEL
# picks the variant: unset or "regular", or "debug" (KASAN, lockdep,
# kmemleak and friends on top; see scripts/kernel/debug.config).
kernel_fragments() {
  local here; here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  echo "$here/kernel/rpcrdma-rs.config"
  case "${RDMARS_KERNEL:-regular}" in
    regular) ;;
    debug) echo "$here/kernel/debug.config" ;;
    *) die "RDMARS_KERNEL must be regular or debug, not '$RDMARS_KERNEL'" ;;
  esac
}

# Everything that changes the built kernel goes into its cache key.
kernel_cache_key() {
  local f
  {
    kernel_src_version
    for f in $(kernel_fragments); do cat "$f"; done
    rustc --version; bindgen --version 2>&1; clang --version | head -1
  } | sha256sum | cut -c1-16
}

# The image QEMU boots, relative to the build directory. The regular kernel
# boots its vmlinux directly through the PVH entry (no decompression). The
# debug kernel cannot: its PVH entry calls instrumented library code
# (memcmp, from hypervisor_cpuid_base) before KASAN's shadow memory exists
# and triple-faults, so it boots a bzImage through the normal boot protocol.
kernel_boot_image() {
  case "${RDMARS_KERNEL:-regular}" in
    debug) echo arch/x86/boot/bzImage ;;
    *) echo vmlinux ;;
  esac
}

# Build directory of the cached kernel, or nothing if it is not built yet.
cached_kernel() {
  local d="$CACHE_DIR/kernel-$(kernel_cache_key)"
  [ -f "$d/.rpcrdma-rs-complete" ] && echo "$d"
}

# build_module_at REV DEST: the module as of git revision REV, built in a
# worktree of it under the cache, copied to DEST. REV "WORKTREE" is the
# working tree's own build (run `make module` first). For comparing builds
# (make ab, make profile OLD=REV).
build_module_at() {
  local rev=$1 dest=$2 wt
  if [ "$rev" = WORKTREE ]; then
    cp rpcrdma_rs.ko "$dest"
    return
  fi
  git rev-parse --verify -q "$rev^{commit}" > /dev/null || die "no such revision: $rev"
  wt=$CACHE_DIR/ab/wt-$(basename "$dest" .ko)
  git worktree remove --force "$wt" 2> /dev/null || rm -rf "$wt"
  git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  log "building the module at $(git -C "$wt" log --oneline -1)"
  make -s -C "$wt" module
  cp "$wt/rpcrdma_rs.ko" "$dest"
  git worktree remove --force "$wt"
}

# insn_plugin: path of the QEMU plugin that counts a guest's instructions
# (scripts/insn_count.c), built into the cache when its source changes.
insn_plugin() {
  local here src so
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  src=$here/insn_count.c
  so=$CACHE_DIR/insn_count-$(sha256sum "$src" | cut -c1-16).so
  if [ ! -f "$so" ]; then
    mkdir -p "$CACHE_DIR"
    gcc -O2 -Wall -Wextra -Werror -shared -fPIC -fvisibility=hidden -D_GNU_SOURCE -pthread \
      -o "$so.tmp" "$src" || die "building $src failed"
    mv "$so.tmp" "$so"
    # Builds of earlier versions of the source are of no further use.
    find "$CACHE_DIR" -maxdepth 1 -name 'insn_count-*.so' ! -path "$so" -delete
  fi
  echo "$so"
}
