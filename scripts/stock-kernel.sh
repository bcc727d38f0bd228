#!/usr/bin/env bash
# Debian's stock kernel (default: trixie-backports' 7.3 image, built with
# CONFIG_RUST=y), unmodified: rpcrdma_rs.ko built for it the way a user of
# that kernel would build it, and what the testbed needs to boot it.
#
#   scripts/stock-kernel.sh module DEST  build the module of this working
#                                        tree for the stock kernel, copy it
#                                        to DEST
#   scripts/stock-kernel.sh dkms         build it through dkms (dkms.conf)
#   scripts/stock-kernel.sh deb DESTDIR  build the Debian package
#                                        rpcrdma-rs-dkms (debian/) with
#                                        trixie's debhelper, copy the .deb
#                                        to DESTDIR
#   scripts/stock-kernel.sh deb-test DEB KO CONF
#                                        the package's life on the user's
#                                        machine (below, deb_test)
#   scripts/stock-kernel.sh guest        print "VMLINUZ INITRD MODROOT": the
#                                        stock image, an initramfs for the
#                                        testbed's 9p root, its modules
#
# The host is bookworm; the user is on trixie. So the build runs in a cached
# trixie chroot (debootstrap) set up as that user's machine: trixie-backports
# in its apt sources, the kernel's headers and source packages, Debian's
# rustc, bindgen and gcc-14 (the toolchain the kernel was built with), dkms.
# In it the README's own commands run (scripts/kernel-tree.sh). The boot
# files come through a private apt state under the cache (scripts/lib.sh
# apt_private): the host's own apt sources are never changed, and nothing
# from trixie is installed on it.
#
# RDMARS_STOCK_RELEASE picks the kernel (default in scripts/lib.sh).
# Everything lives under $CACHE_DIR/stock (RPCRDMA_CACHE= moves the cache).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

rel=$(stock_release)
ver=${rel%%[-+]*}; ver=${ver%.*}   # 7.3.4+deb13-amd64 -> 7.3
top=$CACHE_DIR/stock
root=$top/trixie-root              # the user's machine
debs=$CACHE_DIR/debs
unpacked=$top/unpacked-$rel        # the image and modules packages, unpacked
mirror=$(debian_mirror)

# The user's packages: what the package depends on to build the module
# (debian/control's Depends: the toolchain Debian's trixie kernels are
# built with, the kernel's build tools; one list for both, so that a tool
# the build needs cannot be in the test's machine and missing from the
# package's), and the tools that build the package.
control_depends() {
  sed -n '/^Depends:/,/^Description:/p' "$repo/debian/control" | sed 's/^Depends://; /^Description:/d' |
    tr ',' '\n' | sed 's/([^)]*)//; s/[[:space:]]//g' | grep -vE '^$|^\$\{|^linux-headers-|^linux-source'
}
mapfile -t CHROOT_PKGS < <(control_depends)
[ ${#CHROOT_PKGS[@]} -ge 10 ] || die "cannot read the build tools from debian/control's Depends"
CHROOT_PKGS+=(dkms build-essential debhelper dh-dkms dpkg-dev)
CHROOT_KERNEL_PKGS=("linux-headers-$rel" "linux-source-$ver")

# in_root CMD...: runs CMD in the chroot with /proc and /dev mounted for its
# duration only.
in_root() {
  local rc=0
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
  chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@" || rc=$?
  umount "$root/dev" 2>/dev/null || true
  umount "$root/proc" 2>/dev/null || true
  return $rc
}

# The trixie machine, with the packages above (a minute or two, once).
machine() {
  local want="${CHROOT_PKGS[*]} ${CHROOT_KERNEL_PKGS[*]}"
  [ -f "$root/.rpcrdma-rs-complete" ] && [ "$(cat "$root/.rpcrdma-rs-complete")" = "$want" ] && return 0
  if [ ! -f "$root/.rpcrdma-rs-bootstrapped" ]; then
    # (make deb may be all this host runs: debootstrap is all it needs.)
    command -v debootstrap > /dev/null || apt-get install -y -q debootstrap > /dev/null ||
      die "debootstrap missing, and apt-get could not install it"
    log "debootstrap: a trixie machine in $root"
    # Whatever an interrupted run left mounted in there goes first, and
    # the removal never crosses into another file system. (Nothing mounted
    # is the usual case: grep's "no match" must not end the script.)
    findmnt -rn -o TARGET | { grep "^$root/" || true; } | sort -r | xargs -r umount -l
    rm -rf --one-file-system "$root"; mkdir -p "$root"
    debootstrap --variant=minbase --include=ca-certificates trixie "$root" "$mirror" > "$top/debootstrap.log" 2>&1 ||
      { tail -20 "$top/debootstrap.log" >&2; die "debootstrap failed"; }
    touch "$root/.rpcrdma-rs-bootstrapped"
  fi
  printf 'deb %s trixie-backports main\n' "$mirror" > "$root/etc/apt/sources.list.d/backports.list"
  log "apt (in the trixie machine): ${CHROOT_PKGS[*]}; from trixie-backports: ${CHROOT_KERNEL_PKGS[*]}"
  {
    in_root apt-get update -q &&
      in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${CHROOT_PKGS[@]}" &&
      in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -t trixie-backports "${CHROOT_KERNEL_PKGS[@]}"
  } > "$top/chroot-apt.log" 2>&1 || { tail -20 "$top/chroot-apt.log" >&2; die "installing the packages failed"; }
  echo "$want" > "$root/.rpcrdma-rs-complete"
}

# copy_source DIR: this working tree's module source into DIR of the chroot,
# without what builds leave in it (cargo's targets alone are hundreds of MB).
copy_source() {
  rm -rf "${root:?}/$1"; mkdir -p "$root/$1"
  tar -C "$repo" --exclude=target --exclude='*.o' --exclude='*.ko' --exclude='.*.cmd' \
    --exclude=bindings_generated.rs -cf - Kbuild probes.mk Makefile dkms.conf debian rust scripts |
    tar -C "$root/$1" -xf -
}

# module DEST: README's user path in the trixie machine.
module() {
  local dest=$1 m=build/rpcrdma-rs
  machine
  copy_source "$m"
  in_root bash "/$m/scripts/kernel-tree.sh" --release "$rel" --build
  cp "$root/$m/rpcrdma_rs.ko" "$dest"
}

# The source's version (dkms.conf; the module and debian/changelog agree).
version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$repo/dkms.conf")

# dkms: dkms.conf's path in the trixie machine: add, build, check, remove.
dkms_build() {
  local m=usr/src/rpcrdma-rs-$version ko
  machine
  in_root dkms remove "rpcrdma-rs/$version" --all > /dev/null 2>&1 || true
  copy_source "$m"
  in_root dkms add "rpcrdma-rs/$version"
  in_root dkms build "rpcrdma-rs/$version" -k "$rel"
  ko=$(find "$root/var/lib/dkms/rpcrdma-rs/$version/$rel" -name 'rpcrdma_rs.ko*' | head -1)
  [ -n "$ko" ] || die "dkms left no rpcrdma_rs.ko"
  log "dkms built $ko"
  in_root dkms remove "rpcrdma-rs/$version" --all > /dev/null
  rm -rf "${root:?}/$m"
}

# deb DESTDIR: the package, built as a Debian developer on trixie builds it.
deb() {
  local b=build/deb f
  machine
  rm -rf "${root:?}/$b"
  copy_source "$b/rpcrdma-rs-$version"
  in_root sh -c "cd /$b/rpcrdma-rs-$version && dpkg-buildpackage -b -us -uc" > "$top/deb-build.log" 2>&1 ||
    { tail -30 "$top/deb-build.log" >&2; die "dpkg-buildpackage failed (log: $top/deb-build.log)"; }
  for f in "$root/$b"/*.deb; do
    cp "$f" "$1/"
    log "built $1/${f##*/}"
  done
}

# The image and its modules, downloaded (scripts/lib.sh fetch_debs: a
# private apt view of trixie-backports) and unpacked under the cache.
fetch_boot() {
  local p pkgs=("linux-binary-$rel" "linux-modules-$rel")
  fetch_debs "$debs" "${pkgs[@]}"
  for p in "${pkgs[@]}"; do
    [ -f "$unpacked/.$p" ] && continue
    mkdir -p "$unpacked"
    dpkg-deb -x "$(deb_file "$debs" "$p")" "$unpacked"
    touch "$unpacked/.$p"
  done
}

# guest: the stock vmlinuz, a small initramfs that mounts the 9p root (the
# stock kernel has 9p as modules), and its modules indexed by depmod.
guest() {
  fetch_boot
  local mods=$unpacked/usr/lib/modules/$rel g=$top/guest-$rel
  [ -f "$mods/vmlinuz" ] || die "no vmlinuz in the $rel packages"
  if [ ! -f "$g/.done" ]; then
    log "stock guest files for $rel: module tree and initramfs"
    rm -rf "$g"; mkdir -p "$g/modroot/lib/modules"
    cp -al "$mods" "$g/modroot/lib/modules/$rel"
    depmod -b "$g/modroot" "$rel"
    initramfs "$g/modroot/lib/modules/$rel" "$g/initrd.cpio.gz"
    touch "$g/.done"
  fi
  echo "$mods/vmlinuz $g/initrd.cpio.gz $g/modroot"
}

# initramfs MODDIR OUT: busybox, the 9p modules (with what they need, in
# load order, uncompressed) and an /init that mounts the root the kernel
# command line names and switches to the init it names.
initramfs() {
  local moddir=$1 out=$2 d m dep path deps base want=(9pnet_virtio 9p) list=()
  # busybox-static's: nothing else goes into the initramfs.
  local bb=/bin/busybox
  [ -x "$bb" ] || die "busybox missing: run scripts/setup-host.sh"
  d=$(mktemp -d)
  mkdir -p "$d/bin" "$d/lib" "$d/proc" "$d/sys" "$d/dev" "$d/newroot"
  cp "$bb" "$d/bin/busybox"
  for m in "${want[@]}"; do
    path=$(awk -F: -v m="/$m.ko.xz" 'substr($1, length($1) - length(m) + 1) == m { print $1 }' "$moddir/modules.dep")
    [ -n "$path" ] || die "module $m not in $moddir/modules.dep"
    deps=$(awk -F: -v p="$path" '$1 == p { print $2 }' "$moddir/modules.dep")
    # modules.dep lists what a module needs, the deepest last.
    for dep in $(printf '%s\n' $deps | tac) "$path"; do
      case " ${list[*]} " in *" $dep "*) ;; *) list+=("$dep") ;; esac
    done
  done
  : > "$d/modules"
  for m in "${list[@]}"; do
    base=$(basename "$m" .xz)
    xz -dc "$moddir/$m" > "$d/lib/$base"
    echo "$base" >> "$d/modules"
  done
  cat > "$d/init" <<'INIT'
#!/bin/busybox sh
# rpcrdma-rs stock-kernel initramfs: load the 9p modules, mount the root
# named by root= and rootflags= (read-only), and hand over to init=.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /modules); do insmod "/lib/$m" || echo "initramfs: insmod $m failed"; done
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    root=*) root=${arg#root=} ;;
    rootflags=*) flags=${arg#rootflags=} ;;
    init=*) init=${arg#init=} ;;
  esac
done
if ! mount -t 9p -o "ro,$flags" "$root" /newroot; then
  echo "initramfs: cannot mount $root"; poweroff -f
fi
umount /dev /sys /proc
exec switch_root /newroot "$init"
INIT
  chmod +x "$d/init"
  (cd "$d" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
  rm -rf "$d"
}

# deb_test DEB KO CONF: the package's life on the user's machine (the
# trixie chroot, the stock kernel's headers installed). Installed with apt
# from trixie-backports: dkms builds the module for the stock kernel, which
# is copied to KO, and the modprobe.d redirect is copied to CONF, for the
# guest test (and a stale kernel tree planted before must be pruned by
# then). Then a kernel dkms must skip arrives (trixie's own 6.12,
# built without Rust): its headers (and image) installed with apt, which
# must exit 0 with the one line saying why. Then removed (module gone, redirect
# kept: it falls back to the in-tree client) and purged (redirect and the
# prepared kernel trees gone). Every step's output goes to stdout.
deb_test() {
  local deb=$1 ko=$2 conf=$3 out norust f
  local mod=lib/modules/$rel/updates/dkms trees=var/cache/rpcrdma-rs/trees
  machine
  in_root dpkg --purge rpcrdma-rs-dkms > /dev/null 2>&1 || true
  rm -f "$root"/tmp/*.deb; cp "$deb" "$root/tmp/"
  step() { printf '== %s\n' "$*"; }
  apt_in_root() { in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y "$@"; }

  # The prepared tree of a kernel whose headers are gone (an old one, as
  # after an upgrade): the build prunes it.
  mkdir -p "$root/$trees/6.1.0-0-gone-amd64"; echo stale > "$root/$trees/6.1.0-0-gone-amd64/.rpcrdma-rs-prepared"
  step "apt install -t trixie-backports ./${deb##*/}"
  apt_in_root install -t trixie-backports "/tmp/${deb##*/}" || die "apt install of the package failed"
  [ ! -e "$root/$trees/6.1.0-0-gone-amd64" ] || die "the build did not prune the tree of a kernel whose headers are gone"
  f=$(find "$root/$mod" -name 'rpcrdma_rs.ko*' 2>/dev/null | head -1)
  [ -n "$f" ] || die "no rpcrdma_rs.ko under /$mod after the install"
  case "$f" in *.xz) xz -dc "$f" > "$ko" ;; *.zst) zstd -qdc "$f" > "$ko" ;; *) cp "$f" "$ko" ;; esac
  [ "$(modinfo -F version "$ko")" = "$version" ] || die "the installed module's version is not $version"
  [ -f "$root/etc/modprobe.d/rpcrdma-rs.conf" ] || die "no /etc/modprobe.d/rpcrdma-rs.conf after the install"
  cp "$root/etc/modprobe.d/rpcrdma-rs.conf" "$conf"
  step "installed: /${f#"$root"/} (version $version)"

  # A kernel without Rust: the headers of trixie's own kernel.
  norust=$(in_root apt-cache depends linux-headers-amd64/trixie | sed -n 's/^ *Depends: \(linux-headers-[0-9].*\)/\1/p' | head -1)
  [ -n "$norust" ] || die "cannot find trixie's own kernel headers package"
  ! grep -qx 'CONFIG_RUST=y' "$root/usr/src/$norust/.config" 2>/dev/null || die "$norust has Rust support"
  step "apt install $norust (a kernel dkms must skip)"
  out=$(apt_in_root install --reinstall "$norust" 2>&1) || { echo "$out"; die "apt failed installing $norust"; }
  echo "$out"
  echo "$out" | grep -q "rpcrdma-rs $version: not built for ${norust#linux-headers-}: kernel ${norust#linux-headers-} is built without Rust support" ||
    die "dkms did not say why it skipped ${norust#linux-headers-}"
  ! find "$root/lib/modules/${norust#linux-headers-}" -name 'rpcrdma_rs.ko*' 2>/dev/null | grep -q . ||
    die "a module was installed for ${norust#linux-headers-}"
  # (Left installed: the next run's reinstall runs the same hook, without
  # downloading the kernel image these headers depend on again.)

  step "apt remove rpcrdma-rs-dkms"
  apt_in_root remove rpcrdma-rs-dkms || die "apt remove failed"
  ! find "$root/$mod" -name 'rpcrdma_rs.ko*' 2>/dev/null | grep -q . || die "the module is still installed after the removal"
  [ -f "$root/etc/modprobe.d/rpcrdma-rs.conf" ] || die "the redirect (a conffile) went with the removal"

  # The purge takes the prepared trees: keep a hard-linked copy for the
  # next build (minutes to prepare again).
  step "apt purge rpcrdma-rs-dkms"
  rm -rf "${root:?}/$trees.keep"
  [ -d "$root/$trees" ] && cp -al "$root/$trees" "$root/$trees.keep"
  apt_in_root purge rpcrdma-rs-dkms || die "apt purge failed"
  [ ! -e "$root/etc/modprobe.d/rpcrdma-rs.conf" ] || die "the redirect is still there after the purge"
  [ ! -e "$root/$trees" ] || die "the prepared kernel trees are still there after the purge"
  [ -d "$root/$trees.keep" ] && mv "$root/$trees.keep" "$root/$trees"
  step "removed and purged"
}

case "${1:-}" in
  module) [ -n "${2:-}" ] || die "usage: $0 module DEST"; module "$2" ;;
  dkms) dkms_build ;;
  deb) [ -d "${2:-}" ] || die "usage: $0 deb DESTDIR"; deb "$2" ;;
  deb-test) [ -f "${2:-}" ] && [ -n "${4:-}" ] || die "usage: $0 deb-test DEB KO CONF"; deb_test "$2" "$3" "$4" ;;
  guest) guest ;;
  *) die "usage: $0 module DEST | dkms | deb DESTDIR | deb-test DEB KO CONF | guest" ;;
esac
