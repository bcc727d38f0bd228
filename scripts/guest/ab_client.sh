#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The client side of scripts/ab.sh: AB_ROUNDS rounds, each loading
# $AB_DIR/old.ko, $AB_DIR/new.ko and the in-tree C rpcrdma in turn (order
# rotated every round) and running 4 KiB random reads at QD1 and QD64 for
# AB_RUNTIME seconds over each. One line per job:
#   AB ROUND VARIANT qdN iops X p50 US cpu US_PER_RPC
cd "$(dirname "$0")/../../selftests" && . ./lib.sh
MNT=/mnt/ab; mkdir -p $MNT
OPTS=vers=3,nolock,rsize=1048576,wsize=1048576,retry=0,proto=rdma,port=20049
server_cmd "mkdata ab.dat 64" 300 | grep -q rc=0 || { echo "# mkdata failed"; exit 1; }
busy() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
sends() { awk '$1 == "xprt:" { print $8; exit }' /proc/self/mountstats; }
unload() { umount -f $MNT 2> /dev/null; rmmod rpcrdma_rs 2> /dev/null; rmmod rpcrdma 2> /dev/null; true; }
rc=0
variants=(old c new)
for round in $(seq 1 "${AB_ROUNDS:-8}"); do
  for i in 0 1 2; do
    v=${variants[$(( (i + round) % 3 ))]}
    unload
    case $v in
      c) modprobe --ignore-install rpcrdma ;;
      *) modprobe -a ib_core rdma_cm sunrpc 2> /dev/null; insmod "$AB_DIR/$v.ko" ;;
    esac || { echo "# loading $v failed"; rc=1; continue; }
    if ! mount -t nfs -o $OPTS "$SERVER4:/srv/export" $MNT; then
      echo "# mount over $v failed"; rc=1; continue
    fi
    dd if=$MNT/ab.dat of=/dev/null bs=1M count=8 iflag=direct status=none
    for qd in 1 64; do
      s0=$(sends); c0=$(busy)
      out=$(fio --name=ab --filename=$MNT/ab.dat --rw=randread --bs=4k --iodepth=$qd \
        --ioengine=libaio --direct=1 --size=64M --time_based --runtime="${AB_RUNTIME:-10}" \
        --output-format=json 2>&1)
      c1=$(busy); s1=$(sends)
      printf '%s' "$out" | python3 -c '
import json, sys
t = sys.stdin.read(); r = json.loads(t[t.index("{"):])["jobs"][0]["read"]
rnd, v, qd, sends, ticks, hz = sys.argv[1:7]
p50 = r["clat_ns"]["percentile"]["50.000000"] / 1000
cpu = int(ticks) * 1e6 / int(hz) / max(1, int(sends))
print("AB %s %s qd%s iops %.0f p50 %.0f cpu %.1f" % (rnd, v, qd, r["iops"], p50, cpu))
' "$round" "$v" "$qd" "$((s1 - s0))" "$((c1 - c0))" "$(getconf CLK_TCK)" || rc=1
    done
    umount $MNT || rc=1
  done
done
unload
exit $rc
