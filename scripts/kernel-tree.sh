#!/usr/bin/env bash
# Build rpcrdma_rs.ko for an installed Debian kernel with Rust support (the
# user's path: admin-guide.rst, "Installing"; dkms.conf runs it).
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
#   --check       only say whether REL can be built for here: exit 0, or
#                 print one line (what is wrong, which versions, what to
#                 install) and exit 1. dkms.conf skips such a kernel with
#                 that line rather than failing the package manager.
#
# Each run removes the prepared trees of kernels whose headers are gone.
set -euo pipefail
src_dir=$(cd "$(dirname "$0")/.." && pwd)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

rel=$(uname -r) build=0 print=0 check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --release) rel=$2; shift 2 ;;
    --build) build=1; shift ;;
    --print-tree) print=1; shift ;;
    --check) check=1; shift ;;
    *) die "usage: $0 [--release REL] [--build] [--print-tree] [--check]" ;;
  esac
done

# The kernel lines this source supports (tested: admin-guide.rst,
# "Supported kernels"). dkms.conf's BUILD_EXCLUSIVE_KERNEL says the same.
lines="6.12 7.3"
headers=/usr/src/linux-headers-$rel
# 7.3.4+deb13-amd64 -> 7.3
ver=${rel%%[-+]*}; ver=${ver%.*}
tarball=/usr/src/linux-source-$ver.tar.xz
# The compiler the kernel was built with (unbuildable checks it is here).
cc_text=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\(.*\)"/\1/p' "$headers/.config" 2> /dev/null || true)
cc=${cc_text%% *}

# unbuildable: prints why REL cannot be built here, in one line, and
# returns 0; returns 1 (printing nothing) when it can.
unbuildable() {
  local want have hv sv
  [ -f "$headers/.config" ] || { echo "$headers/.config missing: install linux-headers-$rel"; return 0; }
  grep -qx 'CONFIG_RUST=y' "$headers/.config" ||
    { echo "kernel $rel is built without Rust support (CONFIG_RUST); rpcrdma-rs needs one (on trixie: the trixie-backports kernel)"; return 0; }
  case " $lines " in *" $ver "*) ;; *)
    echo "kernel line $ver is not one this rpcrdma-rs supports ($lines); the in-tree rpcrdma serves proto=rdma there"; return 0 ;;
  esac
  [ -f "$tarball" ] || { echo "$tarball missing: install linux-source-$ver"; return 0; }
  # The source must be the kernel's own release: Debian's packages of one
  # kernel build carry the same version.
  if command -v dpkg-query > /dev/null; then
    hv=$(dpkg-query -W -f='${Version}' "linux-headers-$rel" 2>/dev/null || true)
    sv=$(dpkg-query -W -f='${Version}' "linux-source-$ver" 2>/dev/null || true)
    [ -z "$hv" ] || [ -z "$sv" ] || [ "$hv" = "$sv" ] ||
      { echo "linux-source-$ver is $sv but kernel $rel is $hv: install linux-source-$ver=$hv"; return 0; }
  fi
  command -v "$cc" > /dev/null || { echo "kernel $rel was built with '$cc_text': install ${cc#x86_64-linux-gnu-}"; return 0; }
  command -v rustc > /dev/null || { echo "rustc missing: install rustc and rust-src"; return 0; }
  command -v bindgen > /dev/null || { echo "bindgen missing: install bindgen and libclang-dev"; return 0; }
  # The kernel crate's symbol names depend on the exact rustc.
  want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"/\1/p' "$headers/.config")
  have=$(rustc --version)
  [ -z "$want" ] || [ "$want" = "$have" ] ||
    { echo "kernel $rel was built with '$want' but rustc is '$have': install the rustc package of the kernel's Debian release"; return 0; }
  return 1
}

if why=$(unbuildable); then
  [ $check = 1 ] && { echo "$why"; exit 1; }
  die "$why"
fi
[ $check = 1 ] && exit 0

trees=${RPCRDMA_TREES:-/var/cache/rpcrdma-rs/trees}
tree=$trees/$rel
stamp="$rel $(sha256sum < "$headers/.config" | cut -c1-16) $(sha256sum < "$tarball" | cut -c1-16) $(rustc --version) $(bindgen --version)"
kmake() { make -C "$tree" CC="$cc" KERNELRELEASE="$rel" "$@"; }

# A tree is 1.7 GB: those of kernels whose headers are gone go.
for t in "$trees"/*/.rpcrdma-rs-prepared; do
  [ -f "$t" ] || continue
  t=${t%/.rpcrdma-rs-prepared}
  [ -d "/usr/src/linux-headers-${t##*/}" ] && continue
  log "removing the prepared tree of ${t##*/} (its headers are no longer installed)"
  rm -rf --one-file-system "$t"
done
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
