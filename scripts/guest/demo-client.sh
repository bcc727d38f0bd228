#!/bin/bash
# Runs in the client guest for `make demo`: shows rpcrdma_rs registered and
# reached by proto=rdma, and the in-tree C client moving data over the same
# testbed for comparison.
server=$RDMARS_SERVER4
step() { printf '\n=== %s\n' "$*"; }

step "client guest: $(uname -r), RDMA links:"
rdma link show

step "mount -o proto=rdma autoloads rpcrdma_rs (not the in-tree rpcrdma)"
mark=$(dmesg | wc -l)
mount -t nfs -o vers=4.2,proto=rdma,port=20049,retry=0 "$server:/" /mnt 2>&1 | sed 's/^/  mount: /'
grep -E '^(rpcrdma_rs|rpcrdma) ' /proc/modules | awk '{print "  loaded module: " $1}'
dmesg | tail -n +$((mark + 1)) | grep -E 'rpcrdma_rs|RPC:' | sed 's/^/  dmesg: /'
echo "  (the data path is not implemented yet: setup refuses with EPROTONOSUPPORT)"
rmmod rpcrdma_rs

step "baseline: the in-tree C rpcrdma over the same testbed"
modprobe --ignore-install rpcrdma
mount -t nfs -o vers=4.2,proto=rdma,port=20049 "$server:/" /mnt
head -c $((16 << 20)) /dev/urandom > /tmp/demo.dat
start=$(date +%s.%N)
cp /tmp/demo.dat /mnt/demo.dat && sync
umount /mnt
mount -t nfs -o vers=4.2,proto=rdma,port=20049 "$server:/" /mnt
a=$(sha256sum < /tmp/demo.dat | cut -c1-16); b=$(sha256sum < /mnt/demo.dat | cut -c1-16)
end=$(date +%s.%N)
echo "  16 MiB written and read back over NFSv4.2/RDMA in $(echo "$end - $start" | bc) s"
echo "  sha256 local $a, via server $b: $([ "$a" = "$b" ] && echo MATCH || echo MISMATCH)"
awk '$1 == "xprt:" && $2 == "rdma"' /proc/self/mountstats | sed 's/^\s*/  mountstats: /'
rm -f /mnt/demo.dat; umount /mnt; rmmod rpcrdma
[ "$a" = "$b" ]
