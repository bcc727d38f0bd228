#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# fio writes random data with crc32c verification headers over rpcrdma_rs,
# for block sizes from 512 B to 1 MiB, with O_DIRECT and buffered I/O; the
# verify pass runs after the page cache is dropped, so it reads from the
# server. Zero verification errors allowed. RDMARS_FIO_SIZE sets the data
# per job (default 1 MiB; `make long-check` uses 512 MiB), capped at 32768
# I/Os per job so that small blocks stay within reach of an emulated guest.
. "$(dirname "$0")/../lib.sh"
unload_all
command -v fio > /dev/null || skip "fio not installed"
size=${RDMARS_FIO_SIZE:-1M}
# fio_size SIZE BS: SIZE (with a K/M/G suffix) capped at 32768 blocks of BS,
# in bytes.
fio_size() {
  local want bs
  want=$(numfmt --from=iec "$1") bs=$(numfmt --from=iec "${2^^}")
  echo $(( want < bs * 32768 ? want : bs * 32768 ))
}
dmesg_mark
mount_rs || fail "mount failed"
for direct in 1 0; do
  for bs in 512 4k 64k 1m; do
    f="$MNT/fio.$bs.$direct"
    jobsize=$(fio_size "$size" "$bs")
    common="--name=v --filename=$f --size=$jobsize --bs=$bs --direct=$direct --ioengine=libaio --iodepth=8 --verify=crc32c --verify_fatal=1 --randrepeat=1"
    fio $common --rw=randwrite --do_verify=0 --end_fsync=1 --output=/tmp/fio.w > /dev/null 2>&1 ||
      { cat /tmp/fio.w; umount "$MNT"; fail "bs=$bs direct=$direct: write failed"; }
    sync; echo 3 > /proc/sys/vm/drop_caches
    fio $common --rw=randwrite --verify_only --output=/tmp/fio.v > /dev/null 2>&1 ||
      { cat /tmp/fio.v; umount "$MNT"; fail "bs=$bs direct=$direct: verification failed"; }
    errs=$(grep -ciE 'verify.*bad|crc32c.*mismatch' /tmp/fio.v)
    diag "bs=$bs direct=$direct size=$jobsize: verified, $errs errors"
    [ "$errs" = 0 ] || { umount "$MNT"; fail "bs=$bs direct=$direct: $errs mismatches"; }
    rm -f "$f"
  done
done
bad=$(rdma_xprt_field 20)
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
[ "$bad" = 0 ] || fail "bad replies: $bad"
dmesg_assert_clean
