# Shared settings for the rpcrdma-rs scripts (sourced, not run).
# shellcheck shell=bash

# One toolchain builds the test kernels of every line (7.3 needs bindgen
# >= 0.71.1 and LLVM >= 17; bookworm has LLVM 19) and the module for them.
BINDGEN_VERSION=0.71.1
LLVM_VERSION=19
export LIBCLANG_PATH=/usr/lib/llvm-$LLVM_VERSION/lib
# Everything built or cached lives outside the repository.
CACHE_DIR=${RPCRDMA_CACHE:-/var/cache/rpcrdma-rs}
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# The test kernel's line: RDMARS_LINE (make KERNEL=6.12|7.3), 6.12 unless
# set. 6.12 is bookworm's linux-source-6.12; 7.3 is trixie-backports'
# linux-source-7.3, fetched through a private apt state (apt_private).
kernel_line() {
  case "${RDMARS_LINE:-6.12}" in
    6.12|7.3) echo "${RDMARS_LINE:-6.12}" ;;
    *) die "KERNEL (RDMARS_LINE) must be 6.12 or 7.3, not '$RDMARS_LINE'" ;;
  esac
}

# apt_private ARGS: apt-get on a private view of trixie-backports, under
# the cache: the host's own apt sources are never changed and nothing from
# that suite is installed on the host.
apt_private() {
  local a=$CACHE_DIR/apt-trixie-backports
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial"
  touch "$a/status"
  printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s trixie-backports main\n' \
    "$(debian_mirror)" > "$a/sources.list"
  apt-get -q -o Dir::Etc::SourceList="$a/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
    -o Dir::State::Lists="$a/lists" -o Dir::Cache="$a/cache" -o Dir::State::Status="$a/status" \
    -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root "$@"
}

# deb_file DIR PKG: the path of PKG's .deb in DIR (empty if none).
deb_file() { ls "$1/${2}_"*.deb 2> /dev/null | head -1; }

# fetch_debs DIR PKG...: the packages' .debs from trixie-backports in DIR
# (downloaded once).
fetch_debs() {
  local dir=$1 p missing=(); shift
  mkdir -p "$dir"
  for p in "$@"; do
    [ -n "$(deb_file "$dir" "$p")" ] || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  log "apt (private, trixie-backports): downloading ${missing[*]}"
  apt_private update > /dev/null || die "apt update of trixie-backports failed"
  (cd "$dir" && apt_private download "${missing[@]}" > /dev/null) ||
    die "cannot download ${missing[*]} from trixie-backports"
}

# The source package version of the test kernel's line (for the cache key).
kernel_src_version() {
  case "$(kernel_line)" in
    6.12) dpkg-query -W -f='${Version}' linux-source-6.12 2>/dev/null || echo none ;;
    7.3) fetch_debs "$CACHE_DIR/debs" linux-source-7.3 && deb_file "$CACHE_DIR/debs" linux-source-7.3 | sed 's/.*_\(.*\)_all.deb/\1/' ;;
  esac
}

# kernel_src_extract DIR: the line's kernel source tree, unpacked into DIR.
kernel_src_extract() {
  local line; line=$(kernel_line)
  case "$line" in
    6.12)
      [ -f /usr/src/linux-source-6.12.tar.xz ] || die "linux-source-6.12 missing: run scripts/setup-host.sh"
      tar -xJf /usr/src/linux-source-6.12.tar.xz -C "$1" --strip-components=1 ;;
    7.3)
      fetch_debs "$CACHE_DIR/debs" linux-source-7.3
      dpkg-deb --fsys-tarfile "$(deb_file "$CACHE_DIR/debs" linux-source-7.3)" |
        tar -xO ./usr/src/linux-source-7.3.tar.xz | tar -xJ -C "$1" --strip-components=1 ;;
  esac
}

# The config fragments of the test kernel, in merge order: what every line
# takes, what only this line's Kconfig has (symbols come and go: 7.x has no
# NFS_V4_1 or PROC_SYSCTL), then the variant. RDMARS_KERNEL picks the
# variant: unset or "regular", or "debug" (KASAN, lockdep, kmemleak and
# friends on top; see scripts/kernel/debug.config).
kernel_fragments() {
  local here; here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  echo "$here/kernel/rpcrdma-rs.config"
  echo "$here/kernel/line-$(kernel_line).config"
  case "${RDMARS_KERNEL:-regular}" in
    regular) ;;
    debug) echo "$here/kernel/debug.config" ;;
    *) die "RDMARS_KERNEL must be regular or debug, not '$RDMARS_KERNEL'" ;;
  esac
}

# Everything that changes the built kernel goes into its cache key: the
# fragments' options (not their comments or order), the source and the
# toolchain.
kernel_cache_key() {
  {
    kernel_line
    kernel_src_version
    # shellcheck disable=SC2046
    grep -hvE '^[[:space:]]*(#|$)' $(kernel_fragments) | sort
    rustc --version; bindgen --version 2>&1; "clang-$LLVM_VERSION" --version | head -1
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

# Warns unless the module PLAIN and its build with line tables LINES
# (RDMARS_DEBUGINFO=1) have the same code: the line reports map the
# plain module's addresses through LINES.
same_code_or_warn() {
  local a b
  a=$(mktemp) b=$(mktemp)
  objcopy -O binary --only-section=.text "$1" "$a"
  objcopy -O binary --only-section=.text "$2" "$b"
  cmp -s "$a" "$b" || log "warning: the module with line tables has other code; source lines are approximate"
  rm -f "$a" "$b"
}

# build_module_at REV DEST [stock]: the module as of git revision REV, built
# in a worktree of it under the cache, copied to DEST. REV "WORKTREE" is the
# working tree's own build (run `make module` first). For comparing builds
# (make ab, make profile OLD=REV). With "stock", built for Debian's stock
# kernel by that revision's own scripts/stock-kernel.sh (WORKTREE: this
# tree's).
build_module_at() {
  local rev=$1 dest=$2 how=${3:-testbed} wt here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  if [ "$rev" = WORKTREE ]; then
    if [ "$how" = stock ]; then
      bash "$here/stock-kernel.sh" module "$dest"
    else
      cp rpcrdma_rs.ko "$dest"
    fi
    return
  fi
  git rev-parse --verify -q "$rev^{commit}" > /dev/null || die "no such revision: $rev"
  wt=$CACHE_DIR/ab/wt-$(basename "$dest" .ko)
  git worktree remove --force "$wt" 2> /dev/null || rm -rf "$wt"
  git worktree prune
  git worktree add -q --detach "$wt" "$rev"
  if [ "$how" = stock ]; then
    log "building the module at $(git -C "$wt" log --oneline -1) for the stock kernel"
    bash "$wt/scripts/stock-kernel.sh" module "$dest"
  else
    log "building the module at $(git -C "$wt" log --oneline -1)"
    # Against the kernel the testbed boots (this tree's), not the one the
    # revision's own kernel config would name.
    make -s -C "$wt" module KDIR="$(bash "$here/build-kernel.sh" --path)"
    cp "$wt/rpcrdma_rs.ko" "$dest"
  fi
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

# The Debian stock kernel scripts/stock-kernel.sh builds for (a release of
# trixie-backports' linux-image-*-amd64 with CONFIG_RUST=y).
STOCK_RELEASE_DEFAULT=7.3.4+deb13-amd64
stock_release() { echo "${RDMARS_STOCK_RELEASE:-$STOCK_RELEASE_DEFAULT}"; }

# The Debian mirror the host's own apt sources use.
debian_mirror() {
  local m
  m=$(grep -hE '^URIs:.*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
  [ -n "$m" ] || m=$(grep -hE '^deb .*/debian/? ' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')
  echo "${m:-http://deb.debian.org/debian}"
}
