#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A call too big for the inline threshold with no bulk payload to move by
# direct data placement must go as a Long Call (RDMA_NOMSG with a
# position-zero Read chunk). The operation: NFSv4.0 SETATTR of an ACL
# (setxattr system.nfs4_acl) with 180 entries, about 4.5 KB: the client
# puts the ACL in the page list without marking it DDP payload, so the whole
# call must be read by the server. The nomsg_call_count field of mountstats
# must move, the reply must come back sane (the server may accept the ACL or
# refuse it as untranslatable; either is an NFS answer), and the mount must
# keep working.
. "$(dirname "$0")/../lib.sh"
unload_all
command -v python3 > /dev/null || skip "python3 not installed"
dmesg_mark
timeout 120 mount -t nfs -o vers=4.0,proto=rdma,port=20049,retry=0 "$SERVER4:/" "$MNT" || fail "mount failed"
: > "$MNT/acl-target"
before=$(rdma_xprt_field 21)
res=$(python3 - "$MNT/acl-target" <<'PY'
import os, struct, sys
def ace(type_, flag, mask, who):
    w = who.encode()
    return struct.pack(">IIII", type_, flag, mask, len(w)) + w + b"\0" * (-len(w) % 4)
aces = [ace(0, 0, 0x1, "%d" % (10000 + i)) for i in range(180)]
aces += [ace(0, 0, 0x1, "OWNER@"), ace(0, 0x40, 0x1, "GROUP@"), ace(0, 0, 0x1, "EVERYONE@")]
value = struct.pack(">I", len(aces)) + b"".join(aces)
try:
    os.setxattr(sys.argv[1], "system.nfs4_acl", value)
    print("accepted %d bytes" % len(value))
except OSError as e:
    print("refused (%s), %d bytes" % (e.strerror, len(value)))
PY
)
after=$(rdma_xprt_field 21)
ls -l "$MNT/acl-target" > /dev/null || fail "the mount stopped working after the Long Call"
bad=$(rdma_xprt_field 20)
rm -f "$MNT/acl-target"
umount "$MNT" || fail "umount failed"
unload $XPRT_MOD
diag "SETATTR(acl) ${res}; Long Calls $before -> $after; bad replies $bad"
[ "$after" -gt "$before" ] || fail "the ACL SETATTR did not go as a Long Call"
[ "$bad" = 0 ] || fail "bad replies: $bad"
dmesg_assert_clean
