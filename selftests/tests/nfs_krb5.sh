#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# NFS with Kerberos over the RDMA transport: NFSv3 and NFSv4.2, each with
# sec=krb5, krb5i and krb5p, mounted by the server's name (rpc.gssd asks
# the KDC for nfs/<that name>). A Kerberos user writes a 1 MiB file, far
# over the inline threshold, and reads it back after a remount. The bytes
# must match, the file must belong to the user's uid on the server (knfsd,
# through gssproxy, mapped the user's principal; the file is the user's
# alone, so the read too was the user's), the mount must use that flavour
# (/proc/mounts and mountstats) over RDMA, and the payload must move as the
# flavour allows: with krb5 by direct placement (the WRITEs' in Read
# chunks, the READs' in Write chunks); krb5i and krb5p checksum or encrypt
# it with the rest of the message, so no direct placement: WRITEs go as
# Long Calls, READ replies in Reply chunks, never a Write chunk. Under each
# flavour too: a symlink of 4000 bytes (its SYMLINK a Long Call; 3000 under
# NFSv4.2 krb5p, where knfsd answers that Long Call with NFS4ERR_BADXDR, to
# the C client too) and a directory of 200 entries (with
# RDMARS_KRB5_FULL=1, as make check-all sets: 10,000 under krb5p, 1,000
# under the others, and fio with verification from 4 KiB to 1 MiB blocks;
# against a 7.3 server, NFSv4 krb5i's 1 MiB job may meet that server's
# known fault, which the test names and passes over: server_checksum_fault).
# Then the failures a Kerberos site meets: a user whose
# ticket expires, and a KDC that goes away while a user still has a ticket
# for it alone (no service ticket yet): the application gets an error
# (EACCES or EKEYEXPIRED) in bounded time, never a hang, and the mount
# works again for a user with a good ticket.
#
# The testbed's Kerberos is set up at boot (scripts/guest/init.sh,
# krb5_common): an MIT KDC and gssproxy in the server guest, keytabs for
# both guests. rpc.gssd runs only while this test does. With it running, a
# mount that names no flavour can end up with Kerberos (NFSv4.0 tries
# krb5p first: nfs4_find_root_sec), and NFSv4 leases are taken with krb5i
# machine credentials: the other tests would not test what they mean to.
# rpc_pipefs, where rpc.gssd meets the kernel, is mounted only meanwhile
# too: mounted, it gives every RPC client of the kernel a directory (the
# memory and work of every other test's mounts would change).
. "$(dirname "$0")/../lib.sh"
krb5=/run/krb5 gssd_log=/tmp/gssd.log
rm -f $gssd_log
# kfail WHY: fails the test, with what rpc.gssd and the server's Kerberos
# parts (its setup, the KDC, gssproxy) logged.
kfail() {
  if [ -s $gssd_log ]; then diag "rpc.gssd:"; tail -15 $gssd_log | sed 's/^/#   /'; fi
  diag "the server's Kerberos logs:"; server_cmd krb5-logs 30 | sed 's/^/#   /'
  fail "$*"
}
# The guests set Kerberos up while the first tests run: wait for the end.
for _ in $(seq 1 $(( $(slow_secs 120) * 2 ))); do
  { [ -e $krb5/ready ] || [ -e $krb5/error ]; } && break
  sleep 0.5
done
[ -e $krb5/ready ] || kfail "Kerberos is not set up in the testbed: $(cat $krb5/error 2>/dev/null ||
  echo "no word from scripts/guest/init.sh in $(slow_secs 120) s")"
. $krb5/env
unload_all
dmesg_mark
declare -A pseudoflavor=([krb5]=390003 [krb5i]=390004 [krb5p]=390005)
ccache=FILE:/tmp/krb5cc_$KRB5_UID
as_user() { setpriv --reuid="$KRB5_UID" --regid="$KRB5_UID" --clear-groups -- "$@"; }

src=/tmp/krb5.src
head -c $((1 << 20)) /dev/urandom > $src
chown "$KRB5_UID:$KRB5_UID" $src && chmod 600 $src || fail "cannot give $src to $KRB5_USER"
# The user's directory in the export, made over sec=sys: root's requests
# over Kerberos carry the client's machine principal, which the server
# maps to nobody.
sys_mount() { timeout 120 mount -t nfs -o vers=3,proto=rdma,port=20049,nolock,retry=0,sec=sys "$KRB5_SERVER:$RS_EXPORT" "$MNT"; }
sys_mount || fail "sec=sys mount of $KRB5_SERVER failed"
rm -rf "$MNT/krb5" && mkdir "$MNT/krb5" && chown "$KRB5_UID:$KRB5_UID" "$MNT/krb5"; rc=$?
umount "$MNT" || fail "umount failed"
[ $rc = 0 ] || fail "cannot make $KRB5_USER's directory in the export"

out=$(as_user kinit -k -t "$KRB5_USER_KEYTAB" -c "$ccache" "$KRB5_USER@$KRB5_REALM" 2>&1) ||
  kfail "kinit as $KRB5_USER@$KRB5_REALM failed: $out"
pipefs=/run/rpc_pipefs pipefs_ours=0
if ! mountpoint -q $pipefs; then
  mkdir -p $pipefs && mount -t rpc_pipefs sunrpc $pipefs || fail "cannot mount rpc_pipefs on $pipefs"
  pipefs_ours=1
fi
# rpc.gssd in the foreground, so that this test can stop it. It gets the
# client's machine credential from /etc/krb5.keytab (nfs/$KRB5_CLIENT) for
# root, finds the user's ticket in /tmp/krb5cc_UID, and creates each
# context with knfsd over TCP port 2049 (user-space RPC has no RDMA; the
# kernel then uses the context on the RDMA transport).
rpc.gssd -f -v -p $pipefs > $gssd_log 2>&1 &
gssd=$!
kdc_down=0
stop_gssd() {
  [ $kdc_down = 0 ] || server_cmd krb5kdc-start > /dev/null
  kill $gssd 2> /dev/null; wait $gssd 2> /dev/null
  [ $pipefs_ours = 0 ] || umount $pipefs || diag "cannot unmount $pipefs"
  as_user kdestroy -q -c "$ccache" 2> /dev/null
}
trap stop_gssd EXIT
# It is ready once it holds the kernel's gssd pipe open: until then the
# kernel fails every Kerberos credential with EACCES, without an upcall.
gssd_ready() { ls -l /proc/$gssd/fd 2> /dev/null | grep -q '/rpc_pipefs/gssd/clnt[^/]*/gssd$'; }
for _ in $(seq 1 $(( $(slow_secs 10) * 5 ))); do gssd_ready && break; sleep 0.2; done
gssd_ready || kfail "rpc.gssd did not open the kernel's gssd pipe in $(slow_secs 10) s"

# Each call's chunks, as the transport's marshal trace event names them
# (the same names for both clients: "read list" is a Read chunk of data
# placed directly, "*read list" a Long Call's, "write list" a Write chunk,
# "reply chunk" a Reply chunk): the rule for krb5i and krb5p proven call by
# call, not only by the totals.
T=/sys/kernel/tracing
tracefs_ready || fail "no tracefs: the marshal trace event proves where the payload went"
if [ $XPRT_MOD = rpcrdma_rs ]; then ev=$T/events/rpcrdma_rs/rpcrdma_rs_marshal; else ev=$T/events/rpcrdma/xprtrdma_marshal; fi
# (Tracing itself switched on here: a test before may have left it off.)
# The RPC layer's rpc_request event too (it names each call's
# procedure), so that a failure can show how the READs themselves went.
more_ev=$T/events/sunrpc/rpc_request
trace_on() {
  echo > $T/trace; echo 1 > $ev/enable || fail "cannot enable $ev"
  for e in $more_ev; do [ ! -d $e ] || echo 1 > $e/enable; done
  echo 1 > $T/tracing_on || fail "cannot switch tracing on"
}
trace_off() {
  echo 0 > $ev/enable; for e in $more_ev; do [ ! -d $e ] || echo 0 > $e/enable; done
  echo 0 > $T/tracing_on; cp $T/trace /tmp/krb5.trace; echo > $T/trace
}
calls() { grep -E ' (rpcrdma_rs|xprtrdma)_marshal: ' /tmp/krb5.trace | grep -cE "$1"; }
# show_calls PROC: the traced calls of procedure PROC (at most 8), each
# with its marshal event (the next one of the same task).
show_calls() {
  awk -v proc="$1" '
    / rpc_request: / && index($0, " " proc " (") { match($0, /task:[0-9a-f]+@[0-9a-f]+/)
      want[substr($0, RSTART, RLENGTH)] = 1; if (++n <= 8) print; next }
    /_marshal: / { match($0, /task:[0-9a-f]+@[0-9a-f]+/); t = substr($0, RSTART, RLENGTH)
      if (t in want) { delete want[t]; if (++m <= 8) print } }' /tmp/krb5.trace | sed 's/^ */#   /'
}
full=${RDMARS_KRB5_FULL:-0}
# The client's RPCSEC_GSS checksum verdicts (rpcgss_verify_mic, the same
# event for both clients: the kernel's auth_rpcgss checks them), traced
# around each fio job.
mic_ev=$T/events/rpcgss/rpcgss_verify_mic
mic_trace() {
  [ -d $mic_ev ] || return 0
  if [ "$1" = on ]; then echo > $T/trace; echo 1 > $mic_ev/enable; echo 1 > $T/tracing_on
  else echo 0 > $mic_ev/enable; echo 0 > $T/tracing_on; cp $T/trace /tmp/krb5.mic; echo > $T/trace; fi
}
# server_checksum_fault WHAT BS: whether the fio job that just failed met
# the 7.3 server's known fault (Documentation/testbed.rst, "Kernel faults
# the testbed meets: 7.3's knfsd and krb5i"), which the test reports and
# passes over: 7.3's knfsd writes the krb5i checksum of an NFSv4 READ
# reply whose payload ends on a page boundary into a page it does not
# hand to svcrdma, and reuses that page for its next RPC before the Reply
# chunk's RDMA Write has read it.
# All of these must hold, or the failure is the test's: the server runs
# 7.3, the mount is NFSv4 under krb5i, the blocks span several READs in
# flight, and the client found bad checksums (GSS_S_BAD_SIG) in replies
# that arrived whole (no bad reply counted by the transport). make
# check-all runs this test against a 6.12 server too, where the same job
# must pass.
server_checksum_fault() {
  local bad
  case "${RDMARS_SERVER_KVER:-}" in 7.3.*) ;; *) return 1 ;; esac
  [ "$v" != 3 ] && [ "$sec" = krb5i ] && [ "$2" = 1m ] || return 1
  [ "$(rdma_xprt_field 20)" = 0 ] || return 1
  bad=$(grep -c 'rpcgss_verify_mic:.*GSS_S_BAD_SIG' /tmp/krb5.mic)
  [ "$bad" -gt 0 ] || return 1
  diag "$1: KNOWN SERVER FAULT, not the client's: fio bs=$2 got EIO, $bad replies with a bad krb5i checksum" \
    "from the $RDMARS_SERVER_KVER server (its nfsd reuses the checksum's page too soon; Documentation/testbed.rst)"
  known_faults=$((known_faults + 1))
  return 0
}
known_faults=0
link_target=$(printf 'k%.0s' $(seq 1 4000))
# more_shapes WHAT: the symlink, the directory and (full) fio, as the user,
# on the mount at $MNT.
more_shapes() {
  local what=$1 d="$MNT/krb5/dir" n=200 bs got
  # make check-all: 10,000 under krb5p (every listing reply a Reply
  # chunk, encrypted whole), 1,000 under the others.
  if [ "$full" = 1 ]; then case $what in *krb5p) n=10000 ;; *) n=1000 ;; esac; fi
  local target=$link_target
  if ! as_user ln -s "$target" "$MNT/krb5/link" 2> /dev/null; then
    # knfsd answers NFS4ERR_BADXDR to an NFSv4 SYMLINK whose call goes as a
    # Long Call under krb5p (the in-tree C client gets the same answer to
    # the same call): a link whose call fits inline then.
    [ "$what" = "vers=4.2 sec=krb5p" ] || kfail "$what: $KRB5_USER cannot make a symlink of 4000 bytes"
    diag "$what: knfsd refuses the 4000-byte SYMLINK (a Long Call under krb5p); 3000 bytes instead"
    target=${link_target:0:3000}
    as_user ln -s "$target" "$MNT/krb5/link" || kfail "$what: $KRB5_USER cannot make a symlink of 3000 bytes"
  fi
  as_user mkdir "$d" || kfail "$what: $KRB5_USER cannot make a directory"
  as_user sh -c 'cd "$1" && seq 1 "$2" | sed "s/^/entry-with-a-name-long-enough-/" | xargs touch' sh "$d" "$n" ||
    kfail "$what: $KRB5_USER cannot fill the directory"
  umount "$MNT" && m || kfail "$what: remount failed"
  got=$(as_user readlink "$MNT/krb5/link") || kfail "$what: READLINK failed"
  [ "$got" = "$target" ] || fail "$what: the symlink reads back as ${#got} bytes, not the ${#target} written"
  got=$(as_user ls -1 "$d" | grep -c '^entry-with-a-name-long-enough-') || true
  [ "$got" = "$n" ] || fail "$what: the directory lists $got of $n entries"
  local faults_before=$known_faults
  if [ "$full" = 1 ] && command -v fio > /dev/null; then
    for bs in 4k 64k 1m; do
      mic_trace on
      as_user fio --name=v --filename="$MNT/krb5/fio.$bs" --size=4M --bs=$bs --direct=1 --ioengine=psync \
        --rw=randwrite --verify=crc32c --verify_fatal=1 --randrepeat=1 --output=/tmp/krb5.fio > /dev/null 2>&1
      rc=$?
      mic_trace off
      [ $rc = 0 ] || server_checksum_fault "$what" $bs ||
        { cat /tmp/krb5.fio; fail "$what: fio verify bs=$bs failed"; }
    done
  fi
  as_user rm -rf "$d" "$MNT/krb5/link" "$MNT"/krb5/fio.*
  local fio_said=
  if [ "$full" = 1 ]; then
    fio_said=", fio 4k-1m verified"
    [ $known_faults = "$faults_before" ] || fio_said=", fio 4k and 64k verified (1m: the server's known fault)"
  fi
  diag "$what: symlink of ${#target} bytes, $n directory entries$fio_said"
}

# RDMARS_KRB5_QUICK=1 (make check's runs over the C client and on the
# stock image, where the whole test runs under make check-all): NFSv4.2
# alone, each flavour, and no credential failures.
quick=${RDMARS_KRB5_QUICK:-0}
[ "$full" = 1 ] && quick=0
versions=(3 4.2)
[ "$quick" = 1 ] && versions=(4.2)
for v in "${versions[@]}"; do
  for sec in krb5 krb5i krb5p; do
    what="vers=$v sec=$sec" start=$SECONDS
    opts=vers=$v,proto=rdma,port=20049,retry=0,sec=$sec path=/
    [ $v = 3 ] && opts=$opts,nolock path=$RS_EXPORT
    m() { timeout 120 mount -t nfs -o "$opts" "$KRB5_SERVER:$path" "$MNT"; }
    m || kfail "$what: mount failed"
    module_loaded $XPRT_MOD || fail "$what: $XPRT_MOD is not loaded"
    [ -n "$(rdma_xprt_field 1)" ] || fail "$what: mountstats shows no rdma transport"
    flavour=$(findmnt -n -o OPTIONS "$MNT" | tr , '\n' | sed -n 's/^sec=//p')
    stats=$(awk '$1 == "sec:" { print $2; exit }' /proc/self/mountstats)
    [ "$flavour" = $sec ] && [ "$stats" = "flavor=6,pseudoflavor=${pseudoflavor[$sec]}" ] ||
      fail "$what: the mount has sec=$flavour, mountstats $stats"
    [ -d $ev ] || fail "no marshal trace event $ev"
    trace_on
    as_user cp $src "$MNT/krb5/file" || kfail "$what: $KRB5_USER's write failed"
    owner=$(stat -c %u "$MNT/krb5/file")
    rchunks=$(rdma_xprt_field 11) longcalls=$(rdma_xprt_field 21)
    umount "$MNT" && m || kfail "$what: remount failed"
    as_user cmp -s $src "$MNT/krb5/file"; same=$?
    # Every NFS mount while the file was read, with its flavour (an NFSv4
    # submount crossed into has its own): what a READ without a Write
    # chunk is to be read against.
    nfsmounts=$(findmnt -rn -t nfs,nfs4 -o TARGET,OPTIONS |
      awk '{ s = $2; sub(/.*sec=/, "", s); sub(/,.*/, "", s); printf "%s sec=%s; ", $1, s }')
    stats2=$(awk '$1 == "sec:" { print $2; exit }' /proc/self/mountstats)
    [ "$stats2" = "$stats" ] || fail "$what: mounted again, mountstats says $stats2, not $stats"
    wchunks=$(rdma_xprt_field 12) replies=$(rdma_xprt_field 13) bad=$(rdma_xprt_field 20)
    trace_off
    as_user rm -f "$MNT/krb5/file"
    more_shapes "$what"
    umount "$MNT" || fail "$what: umount failed"
    ddp=$(calls ' read list/|/write list') long=$(calls '\*read list/') rc=$(calls '/reply chunk')
    diag "$what: file of uid $owner; write mount: read chunks $rchunks, long calls $longcalls;" \
      "read mount: write chunks $wchunks, reply chunks $replies, bad replies $bad ($((SECONDS - start)) s);" \
      "traced calls: $ddp placing data directly, $long Long Calls, $rc with a Reply chunk"
    [ $same = 0 ] || kfail "$what: the file read back as $KRB5_USER differs (cmp: $same)"
    [ "$owner" = "$KRB5_UID" ] || fail "$what: the file belongs to uid $owner on the server, not to $KRB5_USER ($KRB5_UID)"
    [ "$bad" = 0 ] || fail "$what: $bad bad replies"
    if [ $sec = krb5 ]; then
      [ "${rchunks:-0}" -gt 0 ] || fail "$what: no Read chunk for the WRITEs' payload"
      [ "${wchunks:-0}" -gt 0 ] || { show_calls READ; diag "$what: NFS mounts while reading: $nfsmounts"
        fail "$what: no Write chunk for the READs' payload"; }
      [ "$ddp" -gt 0 ] || fail "$what: no traced call placed data directly"
    else
      [ "$ddp" = 0 ] || { grep -E ' read list/|/write list' /tmp/krb5.trace | head -3 | sed 's/^/#   /'
        fail "$what: $ddp calls placed data directly under $sec"; }
      [ "$long" -gt 0 ] && [ "$rc" -gt 0 ] || fail "$what: traced no Long Call or no Reply chunk"
      [ "${longcalls:-0}" -gt 0 ] || fail "$what: no Long Call for the WRITEs"
      [ "${wchunks:-0}" = 0 ] || fail "$what: $wchunks Write chunk segments: direct placement under $sec"
      [ "${replies:-0}" -gt 0 ] || fail "$what: no Reply chunk for the READs"
    fi
  done
done

# kinit_user [ARGS]: a fresh ticket for the user (the old ones, and the
# service tickets got with them, gone).
kinit_user() {
  as_user kdestroy -q -c "$ccache" 2> /dev/null
  out=$(as_user kinit "$@" -k -t "$KRB5_USER_KEYTAB" -c "$ccache" "$KRB5_USER@$KRB5_REALM" 2>&1) ||
    kfail "kinit $* as $KRB5_USER@$KRB5_REALM failed: $out"
}
# user_touch: the user makes a new file in the mount (a CREATE, which no
# cache answers).
n_touch=0
user_touch() { n_touch=$((n_touch + 1)); as_user touch "$MNT/krb5/probe.$n_touch"; }
# denied WHAT: the user's access to the mount must fail, in bounded time.
denied() {
  local t0=$SECONDS err rc
  n_touch=$((n_touch + 1))
  err=$(timeout 120 setpriv --reuid="$KRB5_UID" --regid="$KRB5_UID" --clear-groups -- \
    touch "$MNT/krb5/probe.$n_touch" 2>&1); rc=$?
  diag "$1: a CREATE as $KRB5_USER: rc $rc after $((SECONDS - t0)) s: ${err:-no message}"
  [ $rc != 124 ] || fail "$1: the user's access hung"
  [ $rc != 0 ] || fail "$1: the user's access succeeded"
  printf '%s' "$err" | grep -qiE 'permission denied|key has expired|key was rejected' ||
    fail "$1: not a credentials error: $err"
}
failures=(3)
[ "$full" = 1 ] && failures=(3 4.2)
[ "$quick" = 1 ] && failures=()
for v in "${failures[@]}"; do
  opts=vers=$v,proto=rdma,port=20049,retry=0,sec=krb5i path=/
  [ $v = 3 ] && opts=$opts,nolock path=$RS_EXPORT
  what="vers=$v sec=krb5i"
  # A ticket for 20 s: the access right after it works; once it has
  # expired (the context made with it too), the next is refused.
  kinit_user -l 20s
  timeout 120 mount -t nfs -o "$opts" "$KRB5_SERVER:$path" "$MNT" || kfail "$what: mount failed"
  user_touch || kfail "$what: access with a fresh ticket failed"
  sleep 25
  denied "$what, the ticket expired"
  # The KDC goes away while the user has a ticket for it alone: a new
  # context needs a service ticket, which nobody can give.
  kinit_user
  # (After the kernel's negative cache of the failed upcall, 5 s.)
  sleep 6
  kdc_down=1
  r=$(server_cmd krb5kdc-stop); printf '%s' "$r" | grep -q rc=0 || kfail "cannot stop the KDC: $r"
  denied "$what, the KDC gone"
  r=$(server_cmd krb5kdc-start); printf '%s' "$r" | grep -q rc=0 || kfail "cannot start the KDC again: $r"
  kdc_down=0
  kinit_user
  ok=0
  for _ in $(seq 1 20); do user_touch 2> /dev/null && { ok=1; break; }; sleep 3; done
  [ $ok = 1 ] || kfail "$what: access failed with a good ticket once the KDC was back"
  as_user rm -f "$MNT"/krb5/probe.*
  umount "$MNT" || fail "$what: umount failed"
done

trap - EXIT
stop_gssd
sys_mount || fail "sec=sys mount of $KRB5_SERVER failed"
rm -rf "$MNT/krb5"; rc=$?
umount "$MNT" || fail "umount failed"
[ $rc = 0 ] || fail "cannot remove $KRB5_USER's directory from the export"
unload $XPRT_MOD
dmesg_assert_clean
[ $known_faults = 0 ] || diag "passed over $known_faults fio jobs failed by the $RDMARS_SERVER_KVER server's known fault (above)"
