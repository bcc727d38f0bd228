#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The rpcrdma_rs trace events, recorded through tracefs over a mount: the
# connection (established with its thresholds, connect status 0), a WRITE
# of 64 KiB with O_DIRECT (marshalled with a Read chunk, its regions
# registered for the server to read, its reply matched), a READ of it (a
# Write chunk, as the event's reply buffer and flavour fields allow it:
# regions registered for the server to write, the reply
# matched with the 65536 bytes written, the regions invalidated, remotely
# or locally), then a forced reconnect (disconnect, connect,
# established) and a READ on the new connection: in that order, with
# their fields.
. "$(dirname "$0")/../lib.sh"
only_ours
T=/sys/kernel/tracing
tracefs_ready || skip "no tracefs: a kernel without trace events"
unload_all
dmesg_mark
modprobe rpcrdma_rs || fail "cannot load rpcrdma_rs"
[ -d $T/events/rpcrdma_rs ] || fail "rpcrdma_rs has no trace events in $T/events"
nev=$(find $T/events/rpcrdma_rs -mindepth 1 -maxdepth 1 -type d | wc -l)
diag "$nev rpcrdma_rs events"
echo 0 > $T/tracing_on
echo > $T/trace
echo 4096 > $T/buffer_size_kb
echo 1 > $T/events/rpcrdma_rs/enable
echo 1 > $T/tracing_on
src=/tmp/trace_events.src
head -c 65536 /dev/urandom > $src
mount_rs || fail "mount failed"
echo "rpcrdma_rs_test: write" > $T/trace_marker
dd if=$src of="$MNT/trace.dat" bs=64k oflag=direct status=none || fail "write failed"
echo "rpcrdma_rs_test: read" > $T/trace_marker
dd if="$MNT/trace.dat" of=/tmp/trace_events.back bs=64k iflag=direct status=none || fail "read failed"
cmp -s $src /tmp/trace_events.back || fail "data read back differs"
echo "rpcrdma_rs_test: reconnect" > $T/trace_marker
force_disconnect
dd if="$MNT/trace.dat" of=/dev/null bs=64k iflag=direct status=none || fail "read after the reconnect failed"
rm -f "$MNT/trace.dat"
umount "$MNT" || fail "umount failed"
echo 0 > $T/tracing_on
echo 0 > $T/events/rpcrdma_rs/enable
cp $T/trace /tmp/trace_events.txt
echo > $T/trace
unload rpcrdma_rs
diag "$(grep -c ': rpcrdma_rs_' /tmp/trace_events.txt) events recorded; some of them:"
grep -E ': rpcrdma_rs_(connect|established|marshal|mr_map|reply|mr_reminv|mr_localinv|disconnect|credits):|rpcrdma_rs_test' \
  /tmp/trace_events.txt | sed -E 's/^ *//; s/^/#   /' | head -40
python3 - /tmp/trace_events.txt <<'EOF' || fail "the trace does not show what happened (above)"
import re, sys

# (event name, fields) in order; markers as ("mark", text).
events = []
for line in open(sys.argv[1]):
    m = re.search(r"rpcrdma_rs_test: (\w+)", line)
    if m:
        events.append(("mark", m.group(1)))
        continue
    m = re.search(r": (rpcrdma_rs_\w+): (.*)$", line)
    if m:
        events.append((m.group(1)[len("rpcrdma_rs_"):], m.group(2)))

bad = []
def check(ok, what):
    if not ok:
        bad.append(what)
        print(f"# FAIL: {what}")

def index(kind, pred=lambda f: True, start=0):
    for i in range(start, len(events)):
        if events[i][0] == kind and pred(events[i][1]):
            return i
    return None

def fields(f):
    return dict(re.findall(r"([\w./]+)=(\S+)", f))

mark = {t: index("mark", lambda f, t=t: f == t) for t in ("write", "read", "reconnect")}
check(None not in mark.values(), f"markers in the trace: {mark}")
if bad:
    sys.exit(1)

# The connection, before any call.
est = index("established")
con = index("connect", lambda f: fields(f).get("status") == "0")
check(est is not None and est < mark["write"], "established before the first call")
if est is not None:
    f = fields(events[est][1])
    check(f.get("send/recv") == "4096/4096", f"established: inline thresholds 4096/4096: {events[est][1]}")
    check(int(f.get("credits", "0")) > 1, f"established: credits: {events[est][1]}")
check(con is not None and con < mark["write"], "connect status=0 before the first call")

def call(kind_re, start, end):
    """The marshal event of a call between start and end whose chunk types
    match, its xid, and the events of that xid after it."""
    i = index("marshal", lambda f: re.search(kind_re, f) is not None, start)
    if i is None or i > end:
        return None, None, []
    xid = fields(events[i][1])["xid"]
    return i, xid, [(j, e) for j, e in enumerate(events) if j > i and fields(e[1]).get("xid") == xid]

# The WRITE: a Read chunk of 65536 bytes, registered TO_DEVICE.
i, xid, after = call(r"xdr=\d+/65536/\d+ read list/", mark["write"], mark["read"])
check(i is not None, "WRITE: a marshal event with a 64 KiB Read chunk")
if i is not None:
    maps = [f for j, (k, f) in after if k == "mr_map" and j < mark["read"]]
    # Registrations precede the marshal event (they are posted with the Send).
    maps += [f for k, f in events[mark["write"]:i] if k == "mr_map" and fields(f).get("xid") == xid]
    total = sum(int(re.search(r" (\d+)@0x", f).group(1)) for f in maps)
    check(maps and all("(TO_DEVICE)" in f for f in maps) and total == 65536,
          f"WRITE {xid}: regions registered TO_DEVICE covering 65536 bytes: {maps}")
    check(any(k == "reply" for _, (k, f) in after), f"WRITE {xid}: reply matched")

# The READ: a Write chunk the server wrote 65536 bytes into.
i, xid, after = call(r"/write list rcv=", mark["read"], mark["reconnect"])
check(i is not None, "READ: a marshal event offering a Write chunk")
if i is not None:
    # What decided the Write chunk: the reply buffer's 64 KiB page list,
    # marked for direct placement, under AUTH_UNIX (flavour 1).
    check(re.search(r" rcv=\d+/65536/\d+ read flavor=1 ddp=1$", events[i][1]) is not None,
          f"READ {xid}: reply buffer of 64 KiB pages for direct placement, AUTH_UNIX: {events[i][1]}")
    maps = [f for k, f in events[mark["read"]:i] if k == "mr_map" and fields(f).get("xid") == xid]
    check(maps and all("(FROM_DEVICE)" in f for f in maps), f"READ {xid}: regions registered FROM_DEVICE: {maps}")
    rep = [f for _, (k, f) in after if k == "reply"]
    check(rep and "write list written=65536" in rep[0], f"READ {xid}: reply with 65536 bytes written: {rep}")
    handles = {re.search(r":(0x[0-9a-f]+) \(", f).group(1) for f in maps}
    inv = {fields(f).get("handle") for k, f in events[i:mark["reconnect"]] if k in ("mr_reminv", "mr_localinv")}
    check(handles and handles <= inv, f"READ {xid}: its regions {handles} invalidated ({inv})")

# Completions: Receives with status 0.
check(index("wc_receive", lambda f: fields(f).get("status") == "0") is not None, "a wc_receive with status 0")

# The reconnect: disconnect, then connect 0 and established again, then a
# READ on the new connection.
d = index("disconnect", start=mark["reconnect"])
c = index("connect", lambda f: fields(f).get("status") == "0", mark["reconnect"])
e = index("established", start=mark["reconnect"])
r = index("marshal", lambda f: "/write list" in f, mark["reconnect"])
check(d is not None and c is not None and e is not None and r is not None and d < c and d < e and max(c, e) < r,
      f"reconnect: disconnect {d}, connect {c}, established {e}, then a READ {r}")
sys.exit(1 if bad else 0)
EOF
dmesg_assert_clean
