#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The Debian package's /etc/modprobe.d/rpcrdma-rs.conf, as installed, with
# the module dkms built for this kernel (make check's stock part gives both:
# RDMARS_PKG_CONF, and the module as the run's rpcrdma_rs.ko). Its modprobe
# is pointed at the guest's module tree; nothing else is changed.
#   1. installed: proto=rdma mounts over rpcrdma_rs, whose version is the
#      package's, in sysfs and in the connection's line in the kernel log;
#   2. not installed for this kernel (the package removed, or a kernel dkms
#      skipped): the in-tree rpcrdma carries the mount;
#   3. knfsd configures an RDMA listener (it asks for svcrdma) while
#      rpcrdma_rs carries a mount: the listener fails, the kernel log says
#      why, the mount goes on;
#   4. the same with rpcrdma_rs unused: the in-tree module takes over and
#      the listener is up; this host's own proto=rdma mounts then run over
#      the in-tree client.
. "$(dirname "$0")/../lib.sh"
only_ours
conf=${RDMARS_PKG_CONF:-}
[ -r "$conf" ] || skip "needs the package's modprobe.d file (RDMARS_PKG_CONF; make check's stock part)"
modroot=/run/modroot kver=$(uname -r)
version=$(modinfo -b "$modroot" -F version rpcrdma_rs 2>/dev/null)
[ -n "$version" ] || fail "the module under test has no version"
listener="rdma 20049"

saved=$(mktemp)
cp /etc/modprobe.d/rpcrdma-rs.conf "$saved"
cleanup() {
  umount "$MNT" 2>/dev/null
  [ -e /proc/fs/nfsd/threads ] && echo 0 > /proc/fs/nfsd/threads 2>/dev/null
  umount /proc/fs/nfsd 2>/dev/null
  umount "$modroot/lib/modules/$kver/extra" 2>/dev/null
  cp "$saved" /etc/modprobe.d/rpcrdma-rs.conf; rm -f "$saved"
}
trap cleanup EXIT
sed "s|/sbin/modprobe |/sbin/modprobe -d $modroot |g" "$conf" > /etc/modprobe.d/rpcrdma-rs.conf
grep -q "^install svcrdma " /etc/modprobe.d/rpcrdma-rs.conf || fail "the package's file has no svcrdma line"
unload_all
dmesg_mark

# 1. Installed.
mount_rs || fail "mount with the package's redirect failed"
module_loaded rpcrdma_rs || fail "proto=rdma did not load rpcrdma_rs"
module_loaded rpcrdma && fail "proto=rdma loaded the in-tree rpcrdma"
[ "$(cat /sys/module/rpcrdma_rs/version)" = "$version" ] || fail "/sys/module/rpcrdma_rs/version is not $version"
dmesg_since_mark | grep -q "rpcrdma_rs: connected to $SERVER4 port 20049 via .* \[rpcrdma_rs $version\]" ||
  fail "no connection line naming rpcrdma_rs $version"
ls "$MNT" > /dev/null || fail "cannot list the export over rpcrdma_rs"
umount "$MNT" || fail "umount failed"
unload rpcrdma_rs
diag "installed: mounted over rpcrdma_rs $version"

# 2. Not installed for this kernel: the module tree without it.
mount -t tmpfs none "$modroot/lib/modules/$kver/extra" || fail "cannot hide rpcrdma_rs"
dmesg_mark
mount_rs || fail "mount without rpcrdma_rs failed (no fallback to the in-tree client)"
module_loaded rpcrdma || fail "the in-tree rpcrdma did not carry the mount"
module_loaded rpcrdma_rs && fail "rpcrdma_rs was loaded though hidden"
dmesg_since_mark | grep -q "rpcrdma_rs: connected" && fail "rpcrdma_rs connected though hidden"
ls "$MNT" > /dev/null || fail "cannot list the export over the in-tree client"
umount "$MNT" || fail "umount failed"
umount "$modroot/lib/modules/$kver/extra" || fail "cannot show rpcrdma_rs again"
unload rpcrdma
diag "not installed: the in-tree rpcrdma carried the mount"

# 3. knfsd's listener while rpcrdma_rs carries a mount.
mount_rs || fail "mount failed"
module_loaded rpcrdma_rs || fail "proto=rdma did not load rpcrdma_rs"
modprobe nfsd || fail "cannot load nfsd"
mkdir -p /proc/fs/nfsd 2>/dev/null
mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd || fail "cannot mount the nfsd file system"
dmesg_mark
echo "$listener" > /proc/fs/nfsd/portlist 2>/dev/null && fail "an RDMA listener came up while rpcrdma_rs is loaded"
dmesg_since_mark | grep -q "rpcrdma-rs: knfsd's RDMA listener needs the in-tree rpcrdma" ||
  fail "the kernel log does not say why the listener failed"
module_loaded rpcrdma_rs || fail "rpcrdma_rs was unloaded under its mount"
ls "$MNT" > /dev/null || fail "the mount broke when knfsd asked for svcrdma"
umount "$MNT" || fail "umount failed"
diag "listener with rpcrdma_rs busy: refused, said why, mount unharmed"
# The transport's last reference goes a moment after the unmount.
for _ in $(seq 30); do
  [ "$(awk '$1 == "rpcrdma_rs" { print $3 }' /proc/modules)" = 0 ] && break
  sleep 0.5
done

# 4. The same with rpcrdma_rs unused.
echo "$listener" > /proc/fs/nfsd/portlist || fail "no RDMA listener with rpcrdma_rs unused"
grep -qx "$listener" /proc/fs/nfsd/portlist || fail "portlist does not show the RDMA listener"
module_loaded rpcrdma || fail "the in-tree rpcrdma is not loaded for the listener"
module_loaded rpcrdma_rs && fail "rpcrdma_rs is still loaded beside the in-tree module"
dmesg_mark
mount_rs || fail "mount beside the listener failed"
ls "$MNT" > /dev/null || fail "cannot list the export over the in-tree client"
dmesg_since_mark | grep -q "rpcrdma_rs: connected" && fail "rpcrdma_rs connected beside the in-tree module"
umount "$MNT" || fail "umount failed"
# (No rpcbind runs here: the unregistration fails, ECONNREFUSED, and the
# service goes anyway.)
echo 0 > /proc/fs/nfsd/threads 2>/dev/null
grep -q rdma /proc/fs/nfsd/portlist 2>/dev/null && fail "the RDMA listener outlived knfsd's shutdown"
unload rpcrdma
diag "listener with rpcrdma_rs unused: in-tree module took over, listener up, mounts over the in-tree client"
dmesg_assert_clean
