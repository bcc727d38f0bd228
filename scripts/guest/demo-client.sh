#!/bin/bash
# Runs in the client guest for `make demo`: shows rpcrdma_rs registered and
# reached by proto=rdma, and the in-tree C client moving data over the same
# testbed for comparison.
server=$RDMARS_SERVER4
step() { printf '\n=== %s\n' "$*"; }

step "client guest: $(uname -r), RDMA links:"
rdma link show

step "NFSv3 over rpcrdma_rs: mount -o proto=rdma autoloads it (not the in-tree rpcrdma)"
echo "  (NFSv3 here; NFSv4.0, 4.1 and 4.2 work too: see make check)"
mark=$(dmesg | wc -l)
opts=vers=3,proto=rdma,port=20049,nolock
mount -t nfs -o $opts "$server:/srv/export" /mnt
grep -E '^(rpcrdma_rs|rpcrdma) ' /proc/modules | awk '{print "  loaded module: " $1 ", users " $3}'
findmnt -n -t nfs,nfs4 -o SOURCE,FSTYPE,OPTIONS /mnt | sed 's/^/  mounted: /'
tree=/usr/share/doc/qemu-system-common
start=$(date +%s.%N)
cp -r $tree /mnt/tree && sync && umount /mnt && mount -t nfs -o $opts "$server:/srv/export" /mnt
a=$(cd $tree && find . -type f -exec sha256sum {} + | sort | sha256sum | cut -c1-16)
b=$(cd /mnt/tree && find . -type f -exec sha256sum {} + | sort | sha256sum | cut -c1-16)
end=$(date +%s.%N)
echo "  copied $(find $tree -type f | wc -l) files ($(du -sh $tree | cut -f1)) in and out in $(echo "$end - $start" | bc) s"
echo "  tree checksum local $a, via server $b: $([ "$a" = "$b" ] && echo MATCH || echo MISMATCH)"
awk '$1 == "xprt:" && $2 == "rdma"' /proc/self/mountstats | sed 's/^\s*/  mountstats: /'
dmesg | tail -n +$((mark + 1)) | grep -E 'rpcrdma_rs' | sed 's/^/  dmesg: /'
rm -rf /mnt/tree; umount /mnt; rmmod rpcrdma_rs
[ "$a" = "$b" ] || exit 1

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
