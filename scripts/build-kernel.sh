#!/usr/bin/env bash
# Build the Rust-enabled test kernel (once) and cache it outside the repository.
#
#   scripts/build-kernel.sh          build if needed; print the build directory
#   scripts/build-kernel.sh --path   print where it is (or will be); build nothing
#
# RDMARS_LINE (make KERNEL=6.12|7.3) picks the kernel line, RDMARS_KERNEL=debug
# the debug variant (scripts/kernel/debug.config on top of the regular
# fragments); each is cached under its own key.
#
# The cache key covers everything that changes the result: the kernel source
# package version, the config fragment, rustc, bindgen and clang. A finished
# tree is reused as is (a second run costs seconds); an interrupted build is
# resumed. The printed directory is a complete O= build tree, usable as KDIR
# for out-of-tree modules; its modules are installed under <dir>/modroot.
set -euo pipefail

main() {
  local here; here=$(cd "$(dirname "$0")" && pwd)
  . "$here/lib.sh"

  local key build
  key=$(kernel_cache_key)
  build="$CACHE_DIR/kernel-$key"
  if [ "${1:-}" = --path ]; then echo "$build"; return 0; fi
  local image; image=$(kernel_boot_image)
  if [ -f "$build/.rpcrdma-rs-complete" ] && [ -f "$build/$image" ]; then echo "$build"; return 0; fi

  mkdir -p "$CACHE_DIR"
  local src="$CACHE_DIR/src-$(kernel_line)-$(kernel_src_version | tr '~:' '__')"
  if [ ! -f "$src/.extracted" ]; then
    log "extracting the $(kernel_line) kernel source"
    rm -rf "$src"; mkdir -p "$src"
    kernel_src_extract "$src"
    touch "$src/.extracted"
  fi

  kmake() { make -C "$src" O="$build" LLVM=-"$LLVM_VERSION" "$@"; }
  if [ ! -f "$build/.rpcrdma-rs-configured" ]; then
    rm -rf "$build"; mkdir -p "$build"
    local fragment="$build/rpcrdma-rs.fragment"
    cat $(kernel_fragments) > "$fragment"
    configure "$fragment"
    touch "$build/.rpcrdma-rs-configured"
  else
    log "resuming the build in $build"
  fi

  log "building the $(kernel_line) ${RDMARS_KERNEL:-regular} kernel (about 20 minutes on 2 cores from scratch; longer for debug)"
  if ! kmake -j"$(nproc)" vmlinux modules "$(basename "$image")" >"$build/build.log" 2>&1; then
    tail -40 "$build/build.log" >&2
    die "kernel build failed (log: $build/build.log)"
  fi
  [ -f "$build/$image" ] || die "the build left no $image"
  log "installing modules into $build/modroot"
  rm -rf "$build/modroot"
  kmake INSTALL_MOD_PATH="$build/modroot" modules_install >/dev/null
  touch "$build/.rpcrdma-rs-complete"
  echo "$build"
}

# tinyconfig + fragment, then check that every fragment line survived:
# a silently dropped option is the usual trap.
configure() {
  local fragment=$1 bad=0 line opt val
  log "configuring kernel in $build"
  kmake tinyconfig >/dev/null
  "$src/scripts/kconfig/merge_config.sh" -m -O "$build" "$build/.config" "$fragment" >/dev/null
  kmake olddefconfig >/dev/null
  while IFS= read -r line; do
    case "$line" in ''|'#'*) continue ;; esac
    opt=${line%%=*}; val=${line#*=}
    if [ "$val" = n ]; then
      if grep -qx "$opt=y\|$opt=m" "$build/.config"; then log "config: $opt should be off"; bad=1; fi
    else
      grep -qx "$line" "$build/.config" || { log "config: $line did not survive olddefconfig"; bad=1; }
    fi
  done < "$fragment"
  [ $bad = 0 ] || die "kernel config fragment not applied"
  kmake rustavailable >/dev/null || die "Rust is not available for this kernel build"
}

# Everything is parsed before anything runs: editing this file while a build
# is going on cannot derail it.
main "$@"
exit $?
