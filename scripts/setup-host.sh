#!/usr/bin/env bash
# Install everything rpcrdma-rs needs on a Debian bookworm host (idempotent).
#
# apt packages: kernel source, the LLVM toolchain the kernel's Rust build wants,
# QEMU for the guests, and the NFS/RDMA user space that runs inside them (the
# guests share the host root over 9p, so host packages are guest packages;
# perf is for make profile, run in the client guest), Kerberos among it: the
# server guest's MIT KDC (krb5-kdc: krb5kdc, kdb5_util; krb5-admin-server:
# kadmin.local) and gssproxy (knfsd's RPCSEC_GSS helper), kinit and klist
# (krb5-user) in both; rpc.gssd is nfs-common's. Only the guests run them
# (scripts/guest/init.sh), with their own /etc/krb5.conf and kdc.conf.
# Rust: the pinned rustc's rust-src and bindgen-cli at a version the 6.12 kernel
# accepts.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

APT_PKGS=(
  linux-source-6.12 xz-utils
  build-essential bc flex bison libelf-dev libssl-dev cpio dwarves kmod
  clang-19 lld-19 llvm-19 libclang-19-dev
  qemu-system-x86
  nfs-kernel-server nfs-common rpcbind
  krb5-kdc krb5-admin-server krb5-user gssproxy
  rdma-core ibverbs-providers ibverbs-utils perftest rdmacm-utils
  fio iproute2 procps psmisc util-linux python3
  linux-perf
  python3-matplotlib
  cmake
  debootstrap busybox-static
)

# A /dev/null that is a regular file (a module build as root made one
# before 3bd8c34: probes.mk) keeps what is thrown away and hands it back
# to whatever reads it: cargo gives it to rustc as its first probe's
# source, and every cargo build fails. Made the null device again.
if [ ! -c /dev/null ]; then
  log "/dev/null is not the null device: making it again"
  rm -f /dev/null
  mknod -m 666 /dev/null c 1 3
fi

need_apt=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need_apt+=("$p")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  log "apt: installing ${need_apt[*]}"
  # No questions: krb5-config and krb5-kdc ask debconf for a default realm,
  # KDCs and whether to write /etc/krb5kdc/kdc.conf; the noninteractive
  # frontend takes the defaults (a /etc/krb5.conf from Debian's template,
  # a kdc.conf for some realm), which the guests replace with their own.
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # nfs-kernel-server, rpcbind, krb5-kdc, krb5-admin-server and gssproxy
  # must not start services on the host: invoke-rc.d and deb-systemd-invoke
  # ask policy-rc.d first.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
  apt-get install -y -q --no-install-recommends "${need_apt[@]}"
  rm -f /usr/sbin/policy-rc.d
  # Nor at its next boot: their packages enable them. Only for the packages
  # just installed (a host that already ran them keeps its choice).
  for p in "${need_apt[@]}"; do
    case "$p" in
      krb5-kdc|krb5-admin-server|gssproxy)
        # systemctl disable works without a running systemd, too.
        ! command -v systemctl > /dev/null || systemctl disable --quiet "$p.service" > /dev/null 2>&1 || true
        [ ! -x "/etc/init.d/$p" ] || update-rc.d "$p" disable > /dev/null 2>&1 || true ;;
    esac
  done
fi

# The kernel's Rust build needs the standard library source of the exact rustc.
if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
  log "rustup: adding rust-src"
  rustup component add rust-src
fi

if ! command -v bindgen >/dev/null || [ "$(bindgen --version | awk '{print $2}')" != "$BINDGEN_VERSION" ]; then
  log "cargo: installing bindgen-cli $BINDGEN_VERSION"
  cargo install --locked bindgen-cli --version "$BINDGEN_VERSION"
fi
log "host ready"
