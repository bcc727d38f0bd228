#!/usr/bin/env bash
# Build rpcrdma_rs.ko for an installed Debian kernel with Rust support (the
# user's path: README "Building for your Debian kernel"; dkms.conf runs it).
#
#   scripts/kernel-tree.sh [--release REL] [--build] [--print-tree]
#
# A Debian kernel's headers package carries its .config and Module.symvers
# but none of the Rust metadata a Rust module is compiled against
# (rust/*.rmeta, libmacros.so). This script prepares a build tree once per
# kernel release from the kernel's own source package and that .config, with
# the compiler the kernel was built with (CONFIG_CC_VERSION_TEXT) and the
# system's rustc and bindgen, which must be the ones Debian built the kernel
# with (on trixie: its own rustc and bindgen packages): the kernel crate's
# symbol names depend on the exact rustc, and the module must use the same.
#
# Needs, for release REL (default: the running kernel) of version X.Y:
#   linux-headers-REL, linux-source-X.Y, rustc, rust-src, bindgen,
#   libclang-dev, and the kernel's gcc (gcc-14 on trixie).
# The tree lives under ${RPCRDMA_TREES:-/var/cache/rpcrdma-rs/trees}/REL.
#
#   --build       also build the module of this source tree against it
#                 (rpcrdma_rs.ko in the source tree)
#   --print-tree  print the prepared tree's path (what KDIR would be)
set -euo pipefail
src_dir=$(cd "$(dirname "$0")/.." && pwd)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

rel=$(uname -r) build=0 print=0
while [ $# -gt 0 ]; do
  case "$1" in
    --release) rel=$2; shift 2 ;;
    --build) build=1; shift ;;
    --print-tree) print=1; shift ;;
    *) die "usage: $0 [--release REL] [--build] [--print-tree]" ;;
  esac
done

headers=/usr/src/linux-headers-$rel
[ -f "$headers/.config" ] || die "$headers/.config missing: install linux-headers-$rel"
grep -qx 'CONFIG_RUST=y' "$headers/.config" || die "kernel $rel is built without Rust support (CONFIG_RUST)"
# 7.3.4+deb13-amd64 -> 7.3
ver=${rel%%[-+]*}; ver=${ver%.*}
tarball=/usr/src/linux-source-$ver.tar.xz
[ -f "$tarball" ] || die "$tarball missing: install linux-source-$ver"
cc_text=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\(.*\)"/\1/p' "$headers/.config")
cc=${cc_text%% *}
command -v "$cc" > /dev/null || die "the kernel was built with '$cc_text': install ${cc#x86_64-linux-gnu-}"
for t in rustc bindgen; do command -v "$t" > /dev/null || die "$t missing: install the rustc and bindgen packages"; done

trees=${RPCRDMA_TREES:-/var/cache/rpcrdma-rs/trees}
tree=$trees/$rel
stamp="$rel $(sha256sum < "$headers/.config" | cut -c1-16) $(sha256sum < "$tarball" | cut -c1-16) $(rustc --version) $(bindgen --version)"
kmake() { make -C "$tree" CC="$cc" KERNELRELEASE="$rel" "$@"; }

if [ ! -f "$tree/.rpcrdma-rs-prepared" ] || [ "$(cat "$tree/.rpcrdma-rs-prepared")" != "$stamp" ]; then
  log "preparing a module build tree for $rel in $tree ($cc, $(rustc --version | cut -d' ' -f1-2), $(bindgen --version))"
  rm -rf "$tree"; mkdir -p "$tree"
  tar -xJf "$tarball" -C "$tree" --strip-components=1
  cp "$headers/.config" "$headers/Module.symvers" "$tree/"
  # The headers' vmlinux, where shipped, gives the module its BTF.
  [ -f "$headers/vmlinux" ] && cp "$headers/vmlinux" "$tree/"
  kmake olddefconfig > "$tree/.rpcrdma-rs-prepare.log" 2>&1 || { tail -20 "$tree/.rpcrdma-rs-prepare.log" >&2; die "olddefconfig failed"; }
  cmp -s "$tree/.config" "$headers/.config" ||
    die "olddefconfig changed the kernel's .config: this toolchain is not the one $rel was built with"
  kmake -j"$(nproc)" modules_prepare >> "$tree/.rpcrdma-rs-prepare.log" 2>&1 ||
    { tail -30 "$tree/.rpcrdma-rs-prepare.log" >&2; die "modules_prepare failed"; }
  # What the kernel exports is what the shipped one does.
  cp "$headers/Module.symvers" "$tree/"
  echo "$stamp" > "$tree/.rpcrdma-rs-prepared"
fi
[ $print = 1 ] && echo "$tree"
if [ $build = 1 ]; then
  rm -f "$src_dir/rust/bindings_generated.rs"
  kmake M="$src_dir" modules
  log "built $src_dir/rpcrdma_rs.ko for $rel"
fi
