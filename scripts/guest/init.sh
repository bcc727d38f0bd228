#!/bin/bash
# PID 1 of an rpcrdma-rs test guest (see scripts/testbed.sh).
#
# The root file system is the host's, read-only over 9p. This script makes
# the writable bits (tmpfs, an overlay on /etc), brings up the private link
# and soft-RoCE, then plays its role:
#   server: knfsd exporting a tmpfs, with the in-tree svcrdma on port 20049;
#   client: runs the requested script and records its output and status.
# Settings arrive as environment variables from the kernel command line.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C
role=${RDMARS_ROLE:?} modroot=${RDMARS_MODROOT:?} share=/run/share

say() { echo "<guest-$role> $*" > /dev/console; }
poweroff_now() { sync; echo o > /proc/sysrq-trigger; sleep 10; }
fail() { say "setup failed: $*"; echo "guest setup failed: $*" >> "$share/$role.setup-error"; poweroff_now; }

mount -t proc proc /proc
mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts && mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
# The repository and the module tree may live under a directory that gets a
# tmpfs below (/tmp, /root, ...): pin them to stable paths first.
mkdir -p /run/repo /run/modroot
mount --bind "$RDMARS_REPO" /run/repo || fail "repo $RDMARS_REPO not visible"
mount --bind "$modroot" /run/modroot || fail "module tree $modroot not visible"
RDMARS_REPO=/run/repo modroot=/run/modroot

# Modules come from the run's module tree (kernel modules + rpcrdma_rs).
# /run/bin comes first in PATH, so `modprobe` everywhere uses that tree,
# and so does the kernel's own request_module (the overlay and 9p mounts
# below load their file systems this way where they are modules).
mkdir -p /run/bin
printf '#!/bin/sh\nexec /sbin/modprobe -d %s "$@"\n' "$modroot" > /run/bin/modprobe
chmod +x /run/bin/modprobe
echo /run/bin/modprobe > /proc/sys/kernel/modprobe
export PATH=/run/bin:$PATH

mkdir -p /run/etc/upper /run/etc/work /run/varlibnfs "$share"
mount -t overlay overlay -o lowerdir=/etc,upperdir=/run/etc/upper,workdir=/run/etc/work /etc || fail "overlay /etc"
cp -a /var/lib/nfs/. /run/varlibnfs/ && mount --bind /run/varlibnfs /var/lib/nfs
for d in /tmp /var/tmp /var/log /mnt /srv /root; do mount -t tmpfs tmpfs "$d"; done
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share "$share" || fail "9p share"
echo 1 > /proc/sys/kernel/sysrq
hostname "rdmars-$role"

# The private link between the two guests.
ip link set lo up
# No udev here: a kernel with virtio_net as a module (Debian's) needs it
# loaded by hand (on one where it is built in, modprobe just succeeds).
[ -e /sys/class/net/eth0 ] || modprobe virtio_net
ip link set eth0 up || fail "no eth0"
ip addr add "$RDMARS_IP4/24" dev eth0
ip -6 addr add "$RDMARS_IP6/64" dev eth0 nodad
# The guests have no DNS: /etc/hosts names them. The first name on a line
# is the canonical one, which Kerberos needs (see krb5_common below).
krb5_server=server.rpcrdma.test krb5_client=client.rpcrdma.test
cat >> /etc/hosts <<HOSTS
$RDMARS_SERVER4 $krb5_server rdmars-server
$RDMARS_CLIENT4 $krb5_client rdmars-client
HOSTS
# The RDMA device on eth0: soft-RoCE, or soft-iWARP with testbed.sh --link
# siw (selftests/link.sh).
. "$RDMARS_REPO/selftests/link.sh"
rdma_link_add || fail "rdma link add ($RDMA_LINK)"

start_server() {
  mkdir -p /srv/export
  # Every flavour, sys first: the server lists them in this order (in
  # MOUNT's reply, in SECINFO_NO_NAME's), and an NFSv3 or NFSv4.1+ mount
  # without sec= takes the first it can: AUTH_SYS, as before. NFSv4.0 tries
  # krb5p first, which fails in the client at once without rpc.gssd.
  # Kerberos: see krb5_common.
  echo "/srv/export *(sec=sys:krb5:krb5i:krb5p,rw,no_root_squash,insecure,no_subtree_check,fsid=0)" > /etc/exports
  mount -t nfsd nfsd /proc/fs/nfsd || return 1
  rpcbind -w || return 1
  exportfs -ra || return 1
  rpc.mountd || return 1
  # Short lease and grace periods: tests should not wait 90 s for NFSv4 OPEN.
  rpc.nfsd --lease-time 15 --grace-time 10 8 || return 1
  # The in-tree svcrdma, or ours (testbed.sh --server-module).
  if [ "${RDMARS_SERVER_MODULE:-c}" = ours ]; then
    modprobe rpcrdma_rs server=1 || return 1
  else
    modprobe rpcrdma || return 1
  fi
  echo "rdma 20049" > /proc/fs/nfsd/portlist || return 1
}

# The server's soft-RoCE counters that are not zero, as NAME=VALUE pairs.
rxe_nonzero() (
  cd /sys/class/infiniband/rxe0/ports/1/hw_counters 2>/dev/null || exit 0
  for c in *; do read -r v < "$c"; [ "$v" != 0 ] && printf '%s=%s ' "$c" "$v"; done
  return 0
)

# The hostile peer (tools/rdma-peer) stopped, and gone: its port is free
# and its log complete once this returns.
peer_gone() {
  local sig
  for sig in TERM KILL; do
    pkill -"$sig" -x rdma-peer
    for _ in $(seq 1 100); do pgrep -x rdma-peer > /dev/null || return 0; sleep 0.05; done
  done
}

# Kerberos, for sec=krb5, krb5i and krb5p (selftests/tests/nfs_krb5.sh),
# made of Debian's own parts: an MIT KDC in the server guest, with a
# principal for each guest's NFS service and one for a test user; gssproxy
# doing knfsd's GSS work; rpc.gssd in the client, which the test starts,
# with the rpc_pipefs it needs (see there why not here). No DNS anywhere:
# the KDC by address, the hosts by the names in /etc/hosts. rpc.gssd asks
# for nfs/<server name as mounted>, and finds the client's own key as
# nfs/<canonical name of its hostname> (or any nfs/ key in the keytab).
# Kerberos sets up beside the tests, not before them (a few seconds of TCG
# time no other test should wait for): the server publishes the client's
# keytabs in the share with krb5/ready (or krb5/error, saying why), the
# client installs them and says so in /run/krb5/ready (or /run/krb5/error),
# which the test waits for. A failure there leaves the guests and every
# other test as they were.
krb5_realm=RPCRDMA.TEST krb5_user=krbtest krb5_uid=4242 krb5=/run/krb5

# krb5_common: what both guests need: /etc/krb5.conf (the host's, if it
# has one, is for the host), the test user, and the settings the test reads.
krb5_common() {
  mkdir -p "$krb5"
  # Only the enctypes of both test kernels' RPCSEC_GSS (AES with SHA-1, in
  # line-6.12.config; 7.x has them all): the session keys the KDC hands
  # out, which the kernel gets from rpc.gssd and gssproxy, are of these.
  local enc="aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96"
  cat > /etc/krb5.conf <<KRB5
[libdefaults]
	default_realm = $krb5_realm
	dns_lookup_kdc = false
	dns_lookup_realm = false
	dns_uri_lookup = false
	dns_canonicalize_hostname = false
	rdns = false
	default_ccache_name = FILE:/tmp/krb5cc_%{uid}
	permitted_enctypes = $enc
	default_tkt_enctypes = $enc
	default_tgs_enctypes = $enc
[realms]
	$krb5_realm = {
		kdc = $RDMARS_SERVER4
		admin_server = $RDMARS_SERVER4
	}
[domain_realm]
	.rpcrdma.test = $krb5_realm
	rpcrdma.test = $krb5_realm
KRB5
  # The same user in both guests: gssproxy maps $krb5_user@$krb5_realm to
  # it on the server (root's requests travel as the client's machine
  # principal, which maps to nobody), rpc.gssd takes on its uid in the client.
  grep -q "^$krb5_user:" /etc/passwd ||
    echo "$krb5_user:x:$krb5_uid:$krb5_uid:rpcrdma-rs Kerberos selftest:/tmp:/usr/sbin/nologin" >> /etc/passwd
  grep -q "^$krb5_user:" /etc/group || echo "$krb5_user:x:$krb5_uid:" >> /etc/group
  cat > "$krb5/env" <<ENV
KRB5_REALM=$krb5_realm
KRB5_SERVER=$krb5_server
KRB5_CLIENT=$krb5_client
KRB5_USER=$krb5_user
KRB5_UID=$krb5_uid
KRB5_USER_KEYTAB=$krb5/$krb5_user.keytab
ENV
}

# kadm QUERY: one kadmin.local request on the realm's database (its exit
# status does not say whether the request worked: the callers check what
# it made).
kadm() { kadmin.local -r "$krb5_realm" -q "$1"; }

# tail_of FILE: the last lines of a log, on one line (the last line
# krb5_server_setup prints is the reason it gives).
tail_of() { tail -3 "$1" 2> /dev/null | tr '\n' ' '; }

# has_key KEYTAB PRINCIPAL: true if KEYTAB holds keys of PRINCIPAL.
has_key() { klist -k "$1" 2>/dev/null | awk -v p="$2@$krb5_realm" '$2 == p { f = 1 } END { exit !f }'; }

# krb5_server_setup: the KDC with its database in /run, the principals, the
# keytabs (the server's in /etc/krb5.keytab, where Debian's gssproxy
# configuration for knfsd looks), gssproxy; then the client's keytabs into
# the share. Prints why it failed.
krb5_server_setup() {
  local p ok=0
  for p in krb5kdc kdb5_util kadmin.local kinit klist gssproxy; do
    command -v "$p" > /dev/null || { echo "no $p on the host: run scripts/setup-host.sh"; return 1; }
  done
  [ -f /etc/gssproxy/24-nfs-server.conf ] || { echo "no /etc/gssproxy/24-nfs-server.conf (package gssproxy)"; return 1; }
  mkdir -p /etc/krb5kdc /run/krb5kdc
  # Not the host's /etc/krb5kdc/kdc.conf (its package may have written one
  # for another realm), and the database on tmpfs: /var/lib is read-only.
  cat > /etc/krb5kdc/kdc.conf <<KDC
[realms]
	$krb5_realm = {
		key_stash_file = /run/krb5kdc/stash
		master_key_type = aes256-cts-hmac-sha1-96
		supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
	}
[dbmodules]
	$krb5_realm = {
		database_name = /run/krb5kdc/principal
	}
[logging]
	kdc = FILE:/var/log/krb5kdc.log
	admin_server = FILE:/var/log/kadmin.log
KDC
  # The master password is needed only here (-s stashes the master key).
  kdb5_util -r "$krb5_realm" -P "$(head -c 24 /dev/urandom | base64)" create -s ||
    { echo "kdb5_util create failed"; return 1; }
  for p in "nfs/$krb5_server" "nfs/$krb5_client" "$krb5_user"; do kadm "addprinc -randkey $p"; done
  # ktadd gives each principal new random keys as it writes them, and adds
  # them to the keytab it names: not to a host's /etc/krb5.keytab (the
  # overlay's copy of it). The client's keytabs are written on tmpfs first
  # (a keytab is written under a file lock, which the 9p share need not
  # honour).
  rm -f /etc/krb5.keytab
  kadm "ktadd -k /etc/krb5.keytab nfs/$krb5_server"
  kadm "ktadd -k $krb5/client.keytab nfs/$krb5_client"
  kadm "ktadd -k $krb5/$krb5_user.keytab $krb5_user"
  has_key /etc/krb5.keytab "nfs/$krb5_server" && has_key "$krb5/client.keytab" "nfs/$krb5_client" &&
    has_key "$krb5/$krb5_user.keytab" "$krb5_user" || { echo "kadmin.local did not make the keytabs"; return 1; }
  krb5kdc -P /run/krb5kdc/krb5kdc.pid || { echo "krb5kdc did not start: $(tail_of /var/log/krb5kdc.log)"; return 1; }
  # The KDC answers on the guests' link, as it will to the client.
  for _ in $(seq 1 20); do
    kinit -k -t /etc/krb5.keytab -c FILE:/run/krb5kdc/check.ccache "nfs/$krb5_server" && { ok=1; break; }
    sleep 0.5
  done
  kdestroy -q -c FILE:/run/krb5kdc/check.ccache 2> /dev/null
  [ $ok = 1 ] || { echo "the KDC does not answer: $(tail_of /var/log/krb5kdc.log)"; return 1; }
  # knfsd hands RPCSEC_GSS context creation to gssproxy (not to the legacy
  # rpc.svcgssd, which nfs-utils' own units start only without gssproxy)
  # once gssproxy has written 1 to /proc/net/rpc/use-gss-proxy, which it
  # does before it daemonizes. The choice is the kernel's, once, at the
  # first context creation: no client asks for one before the test, and
  # the test waits for $krb5/ready. A module on Debian's stock kernel
  # (auth_rpcgss comes with it), built in on ours.
  modprobe rpcsec_gss_krb5 2> /dev/null
  # Debian's configuration (/etc/gssproxy/24-nfs-server.conf: the socket the
  # kernel connects to, /run/gssproxy.sock, and /etc/krb5.keytab). The
  # default socket (unused, but always made) moves from the read-only
  # /var/lib/gssproxy to /run.
  gssproxy -D -d -s /run/gssproxy.default.sock >> /var/log/gssproxy.log 2>&1 ||
    { echo "gssproxy did not start: $(tail_of /var/log/gssproxy.log)"; return 1; }
  p=$(cat /proc/net/rpc/use-gss-proxy 2>&1)
  [ "$p" = 1 ] || { echo "knfsd does not use gssproxy: /proc/net/rpc/use-gss-proxy reads '$p'"; return 1; }
  cp "$krb5/client.keytab" "$krb5/$krb5_user.keytab" "$share/krb5/" || { echo "cannot copy the keytabs to the share"; return 1; }
}

# krb5_client_setup: rpc.gssd's machine credential (the client's keytab, in
# /etc/krb5.keytab) and the test user's keytab, once the server has made
# them. Prints why it failed.
krb5_client_setup() {
  for _ in $(seq 1 1800); do
    [ -e "$share/krb5/ready" ] && break
    [ -e "$share/krb5/error" ] && { cat "$share/krb5/error"; return 1; }
    sleep 0.5
  done
  [ -e "$share/krb5/ready" ] || { echo "no keytab from the server guest in 900 s"; return 1; }
  install -m 600 "$share/krb5/client.keytab" /etc/krb5.keytab &&
    install -m 600 -o "$krb5_uid" -g "$krb5_uid" "$share/krb5/$krb5_user.keytab" "$krb5/$krb5_user.keytab" ||
    { echo "cannot install the keytabs"; return 1; }
}

krb5_common

case "$role" in
server)
  start_server || fail "knfsd setup"
  say "knfsd ready on $RDMARS_IP4 (rdma port 20049)"
  # Kerberos in the background (see krb5_common), niced below knfsd's
  # user-space helpers: the first tests run meanwhile. Its daemons (the
  # KDC, gssproxy) keep that niceness.
  mkdir -p "$share/krb5"
  ( renice -n 10 -p $BASHPID > /dev/null
    s=$(date +%s%N)
    if krb5_server_setup > /var/log/krb5-setup.log 2>&1; then
      touch "$share/krb5/ready"
      say "Kerberos ready: realm $krb5_realm, KDC and gssproxy, in $(( ($(date +%s%N) - s) / 1000000 )) ms"
    else
      tail -1 /var/log/krb5-setup.log > "$share/krb5/error.tmp"
      mv "$share/krb5/error.tmp" "$share/krb5/error"
      say "Kerberos setup failed: $(cat "$share/krb5/error")"
    fi ) &
  # On a kernel with kmemleak (the debug kernel), what leaked while booting
  # is cleared, and the scans every ten minutes are stopped (each walks all
  # of memory under KASAN): the kmemleak command scans when asked.
  k=/sys/kernel/debug/kmemleak
  if [ -w $k ]; then echo scan > $k; echo clear > $k; echo scan=off > $k; fi
  touch "$share/server-ready"
  # Serve until the host stops this guest, running the few commands a
  # client test may drop into the share (see selftests/lib.sh server_cmd).
  while :; do
    for req in "$share"/cmd.*; do
      # A request is complete once renamed from cmd.ID.tmp to cmd.ID.
      case "$req" in *.tmp) continue ;; esac
      [ -e "$req" ] || continue
      id=${req##*/cmd.}; cmd=$(cat "$req"); rm -f "$req"
      case "$cmd" in
        restart-nfsd)
          { rpc.nfsd 0 && sleep 2 && rpc.nfsd --lease-time 15 --grace-time 10 8 &&
            echo "rdma 20049" > /proc/fs/nfsd/portlist; } > "$share/res.$id.tmp" 2>&1
          echo "rc=$?" >> "$share/res.$id.tmp" ;;
        reload-server-module)
          # knfsd stopped, the module that serves RDMA unloaded (refused
          # while any transport of its class is left) and loaded again,
          # knfsd started as before.
          { rpc.nfsd 0 && sleep 1 &&
            if [ "${RDMARS_SERVER_MODULE:-c}" = ours ]; then
              rmmod rpcrdma_rs && modprobe rpcrdma_rs server=1
            else
              rmmod rpcrdma && modprobe rpcrdma
            fi &&
            rpc.nfsd --lease-time 15 --grace-time 10 8 &&
            echo "rdma 20049" > /proc/fs/nfsd/portlist; } > "$share/res.$id.tmp" 2>&1
          echo "rc=$?" >> "$share/res.$id.tmp" ;;
        append-export\ *)
          # append-export PATH: a local write to an exported file (PATH is
          # relative to the export): breaks NFSv4 delegations.
          f=/srv/export/${cmd#append-export }
          case "$f" in *..*) echo "rc=1 bad path" > "$share/res.$id.tmp" ;;
          *) { s=$(date +%s%N); echo x >> "$f"; echo "rc=$? ms=$(( ($(date +%s%N) - s) / 1000000 ))"; } > "$share/res.$id.tmp" 2>&1 ;;
          esac ;;
        append-all\ *)
          # append-all DIR: a local write to each entry-* file of DIR in
          # turn (each breaks a delegation on it); the total time and the
          # longest single write. Runs in the background, so that the
          # client can ask for the server's state meanwhile.
          d=/srv/export/$(basename "${cmd#append-all }")
          ( s=$(date +%s%N); rc=0 max=0
            for f in "$d"/entry-*; do
              t=$(date +%s%N); echo x >> "$f" || rc=1
              t=$(( ($(date +%s%N) - t) / 1000000 )); [ $t -gt $max ] && max=$t
            done
            echo "rc=$rc ms=$(( ($(date +%s%N) - s) / 1000000 )) max=$max" > "$share/res.$id.tmp" 2>&1
            mv "$share/res.$id.tmp" "$share/res.$id" ) &
          continue ;;
        rxe-counters)
          { rxe_nonzero; echo; } > "$share/res.$id.tmp" 2>&1 ;;
        rxe-heal|rxe-heal\ force)
          # After a link loss: soft-RoCE moves a QP to the error state
          # when the stack drops one of its packets (with the carrier off
          # the qdisc does, NET_XMIT_CN). The MAD layer expects a failed
          # send to leave QP1 in SQE, which it knows to bring back; from
          # ERR QP1 never returns, so no CM message passes again and no
          # client can connect. The cure is a new rxe0; "force" applies it
          # even to a healthy device (to check the cure itself).
          why=$(timeout 10 rdma resource show qp 2>/dev/null | grep -oE ' lqpn 1 type GSI state ERR')
          why=${why:+QP1 in ${why##* }}
          [ "$cmd" = "rxe-heal force" ] && why=${why:-forced}
          # (Soft-iWARP has no QP1 to lose.)
          if [ "$RDMA_LINK" != rxe ]; then
            echo "rc=0 healthy ($RDMA_LINK)" > "$share/res.$id.tmp"
          elif [ -n "$why" ]; then
            { s=$(date +%s%N)
              timeout 60 rdma link delete rxe0 && rdma link add rxe0 type rxe netdev eth0
              echo "rc=$? healed: $why, new rxe0 in $(( ($(date +%s%N) - s) / 1000000 )) ms"; } > "$share/res.$id.tmp" 2>&1
          else
            echo "rc=0 healthy" > "$share/res.$id.tmp"
          fi ;;
        addr\ *)
          # addr add|del A: another IPv4 address of the server on the link
          # (NFSv4.1 session trunking needs two of the same family).
          set -- ${cmd#addr }
          case "$1" in add|del) { ip addr "$1" "$2/24" dev eth0; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
            *) echo "rc=1 usage: addr add|del A" > "$share/res.$id.tmp" ;;
          esac ;;
        trace-start\ *)
          # trace-start EVENTS...: records the server's trace events (say
          # "rpcrdma:* rdma_cma:*") from now on, the old record
          # cleared: what a client test that times recovery wants to see of
          # the server's side when it is slow.
          t=/sys/kernel/tracing
          [ -d $t/events ] || mount -t tracefs nodev $t
          { echo 0 > $t/tracing_on; echo > $t/set_event; echo > $t/trace
            echo 8192 > $t/buffer_size_kb
            rc=0
            for e in ${cmd#trace-start }; do echo "$e" >> $t/set_event || { rc=1; echo "no event $e"; }; done
            echo 1 > $t/tracing_on; echo "rc=$rc $(wc -l < $t/set_event) events"; } > "$share/res.$id.tmp" 2>&1 ;;
        trace-mark\ *)
          echo "${cmd#trace-mark }" > /sys/kernel/tracing/trace_marker; echo "rc=$?" > "$share/res.$id.tmp" ;;
        trace-since\ *)
          # trace-since TEXT: the record from the last marker TEXT on (its
          # first 3000 lines).
          { awk -v m="${cmd#trace-since }" 'index($0, m) { n = NR } { l[NR] = $0 } END { for (i = n; i <= NR; i++) print l[i] }' \
              /sys/kernel/tracing/trace | head -3000; echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        trace-stop)
          t=/sys/kernel/tracing
          { echo 0 > $t/tracing_on; echo > $t/set_event; echo > $t/trace; echo rc=0; } > "$share/res.$id.tmp" 2>&1 ;;
        server-module)
          # What serves NFS over RDMA here: "ours" if rpcrdma_rs has its
          # server class registered, "c" if the in-tree svcrdma is loaded.
          { if [ "$(cat /sys/module/rpcrdma_rs/parameters/server 2>/dev/null)" = Y ]; then echo ours
            elif [ -d /sys/module/rpcrdma ]; then echo c; else echo none; fi
            echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        serve-with\ *)
          # serve-with ours|c: knfsd stopped, the module that serves RDMA
          # swapped for rpcrdma_rs (server=1) or the in-tree svcrdma, and
          # knfsd started as before (scripts/server-bench.sh).
          { w=${cmd#serve-with }
            case "$w" in ours) load="modprobe rpcrdma_rs server=1" ;; c) load="modprobe rpcrdma" ;; *) load=false ;; esac
            rpc.nfsd 0 && sleep 1 &&
            { [ ! -d /sys/module/rpcrdma_rs ] || rmmod rpcrdma_rs; } &&
            { [ ! -d /sys/module/rpcrdma ] || rmmod rpcrdma; } &&
            $load && rpc.nfsd --lease-time 15 --grace-time 10 8 &&
            echo "rdma 20049" > /proc/fs/nfsd/portlist; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        rmmod-server-module)
          # rmmod of the module that serves RDMA, as an administrator
          # would try it while knfsd serves over it (refused).
          { if [ "${RDMARS_SERVER_MODULE:-c}" = ours ]; then rmmod rpcrdma_rs; else rmmod rpcrdma; fi
            echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        mem-reading)
          # The server's kernel memory in use (unreclaimable slab plus
          # vmalloc, kB) and its free memory, after dropping caches and
          # shrinking the slab caches (scripts/server-bench.sh).
          { sync; echo 3 > /proc/sys/vm/drop_caches
            for f in /sys/kernel/slab/*/shrink; do echo 1 > "$f"; done 2> /dev/null; sleep 0.5
            awk '/^SUnreclaim:/ { k += $2 } /^VmallocUsed:/ { k += $2 } /^MemFree:/ { f = $2 } END { print k, f }' /proc/meminfo
            echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        kallsyms)
          # The server's kernel symbols, modules included, into the share
          # (kallsyms.server): where its instruction counts land
          # (scripts/server-bench.sh --profile).
          { cat /proc/kallsyms > "$share/kallsyms.server.tmp" && mv "$share/kallsyms.server.tmp" "$share/kallsyms.server"
            echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        server-counter\ *)
          # server-counter NAME: our server's debugfs counter server_NAME.
          { n=$(basename "${cmd#server-counter }")
            cat "/sys/kernel/debug/rpcrdma_rs/server_$n"; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        server-versions\ *)
          # server-versions V: the RPC-over-RDMA versions rpcrdma_rs speaks
          # on connections accepted from now on ("2,1" or "1").
          { echo "${cmd#server-versions }" > /sys/module/rpcrdma_rs/parameters/versions
            echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        server-credits\ *)
          # server-credits N: the credits rpcrdma_rs's server grants on
          # connections accepted from now on (0: its default).
          { echo "${cmd#server-credits }" > /sys/module/rpcrdma_rs/parameters/server_credits
            echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        dmesg-problems)
          # The server's kernel messages that mean trouble (warnings,
          # oopses, lockdep, KASAN, leaks, our own errors), if any. Not the
          # taint a signing kernel (Debian's stock image) notes when it
          # loads an unsigned module, as dkms builds it: that is not ours.
          { dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace|general protection|refcount_t:|UBSAN|KASAN:|suspected memory leak|blocked for more than|rpcrdma_rs.*(error|failed)' |
              grep -v 'module verification failed: signature and/or required key missing' | head -40
            echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        kmemleak)
          # What leaked here since the server was ready, on a kernel with
          # kmemleak ("none" without it): an object is reported once it is
          # older than 5 s and unreferenced in two scans in a row.
          { k=/sys/kernel/debug/kmemleak
            if [ -w $k ]; then sleep 6; echo scan > $k; sleep 6; echo scan > $k; cat $k; else echo none; fi
            echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        cb-state)
          # The callback channel state knfsd keeps for each client.
          { grep -h 'callback state' /proc/fs/nfsd/clients/*/info | awk '{ print $3 }' | tr '\n' ' '; echo; } > "$share/res.$id.tmp" 2>&1 ;;
        cpu-stat)
          # The server's aggregate CPU times (the "cpu" line of
          # /proc/stat, in USER_HZ ticks): how busy a benchmark kept it;
          # then its context switches so far (the "ctxt" line).
          { grep -m1 '^cpu ' /proc/stat && grep -m1 '^ctxt ' /proc/stat; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        task-switches)
          # Each task's context switches so far (voluntary and not):
          # "PID NAME COUNT", a kernel worker named for the workqueue it
          # last ran.
          { awk 'FNR == 1 { split(FILENAME, p, "/") } /^Name:/ { n[p[3]] = $2 }
                 /ctxt_switches:/ { s[p[3]] += $2 }
                 END { for (k in s) print k, n[k], s[k] }' /proc/[0-9]*/status 2>/dev/null; echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        mkfiles\ *)
          # mkfiles DIR N: N empty files made directly in the export.
          set -- ${cmd#mkfiles }
          d=/srv/export/$(basename "$1")
          { mkdir -p "$d" && (cd "$d" && seq -f 'entry-with-a-reasonably-long-name-%g' 1 "$2" | xargs touch); echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        rmdir-export\ *)
          rm -rf "/srv/export/$(basename "${cmd#rmdir-export }")"; echo "rc=$?" > "$share/res.$id.tmp" ;;
        mkdata\ *)
          # mkdata NAME MB: a file of random data in the export (benchmarks).
          set -- ${cmd#mkdata }
          { dd if=/dev/urandom of="/srv/export/$(basename "$1")" bs=1M count="$2" status=none; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        mkentries\ *)
          # mkentries NAME N: a directory of N empty files in the export
          # (benchmarks: READDIR of a large directory).
          set -- ${cmd#mkentries }
          d="/srv/export/$(basename "$1")"
          { rm -rf "$d" && mkdir "$d" && (cd "$d" && seq 1 "$2" | sed 's/^/entry-with-a-name-long-enough-/' | xargs touch)
            echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        md5\ *)
          # md5 NAME: the checksum of a file in the export.
          { md5sum < "/srv/export/$(basename "${cmd#md5 }")" | cut -d' ' -f1; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        perf-serve\ *)
          # perf-serve TOOL ARGS: a perftest server for one run, in the
          # background (benchmarks).
          # Answers once the server listens on port 18515 (rdma_cm with -R,
          # else TCP), so that the client never connects early.
          set -- ${cmd#perf-serve }
          case "$1" in
            ib_write_bw|ib_read_bw|ib_send_lat)
              pkill -x ib_write_bw; pkill -x ib_read_bw; pkill -x ib_send_lat
              for _ in $(seq 1 50); do pgrep -x 'ib_(write|read)_bw|ib_send_lat' > /dev/null || break; sleep 0.2; done
              (timeout 120 "$@" > /tmp/perf-serve.log 2>&1 &)
              rc=1
              for _ in $(seq 1 100); do
                { rdma resource show cm_id; ss -ltn; } 2>/dev/null | grep -q 'LISTEN.*:18515' && { rc=0; break; }
                sleep 0.2
              done
              echo "rc=$rc $(tail -3 /tmp/perf-serve.log)" > "$share/res.$id.tmp" ;;
            *) echo "rc=1 not a perftest tool: $1" > "$share/res.$id.tmp" ;;
          esac ;;
        perf-log)
          # The output of the last perf-serve's server (why a run failed).
          cat /tmp/perf-serve.log > "$share/res.$id.tmp" 2>&1 ;;
        peer-list)
          /run/repo/tools/rdma-peer/target/release/rdma-peer --list > "$share/res.$id.tmp" 2>&1 ;;
        peer-start\ *)
          # peer-start SCENARIO SECONDS [proxy [v2]]: the hostile peer on
          # port 20050, in the background (tools/rdma-peer,
          # Documentation/hostile-peer.rst); with "proxy" it serves knfsd's
          # export, passing calls on to knfsd over TCP; with "v2" it also
          # speaks RPC-over-RDMA Version Two.
          # Answers once the peer listens (its log says so), so that the
          # client's first connect finds it.
          set -- ${cmd#peer-start }
          peer_gone
          proxy=(); [ "${3:-}" = proxy ] && proxy=(--proxy 127.0.0.1:2049)
          [ "${4:-}" = v2 ] && proxy+=(--v2)
          rm -f /tmp/rdma-peer.log
          (/run/repo/tools/rdma-peer/target/release/rdma-peer --listen "$RDMARS_IP4:20050" \
            --scenario "$1" --seconds "${2:-60}" "${proxy[@]}" > /tmp/rdma-peer.log 2>&1 &)
          rc=1
          for i in $(seq 1 100); do
            grep -q 'listening on' /tmp/rdma-peer.log 2> /dev/null && { rc=0; break; }
            # (Not at once: the background shell takes a moment to exec it.)
            [ "$i" -lt 10 ] || pgrep -x rdma-peer > /dev/null || break
            sleep 0.05
          done
          if [ $rc = 0 ]; then echo rc=0; else echo "rc=1 $(cat /tmp/rdma-peer.log)"; fi > "$share/res.$id.tmp" ;;
        peer-stop)
          peer_gone
          cat /tmp/rdma-peer.log > "$share/res.$id.tmp" 2>&1 ;;
        sysrq-w)
          # The stacks of the server's blocked tasks, to its console.
          { echo w > /proc/sysrq-trigger; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
        server-state)
          # What a client test that saw I/O stall wants to know of the
          # server's side: its last kernel messages, its RDMA connections
          # and queue pairs, its neighbours, its soft-RoCE counters, and
          # (through sysrq-w, to its kernel log) the stacks of its blocked
          # tasks, knfsd's threads among them.
          { echo "link: $(rdma link show 2>&1 | tr '\n' ' ')"
            echo "cm_ids:"; timeout 10 rdma resource show cm_id 2>&1 | head -12
            echo "qps:"; timeout 10 rdma resource show qp 2>&1 | head -12
            echo "neighbours: $(ip neigh show 2>&1 | tr '\n' ';')"
            echo "rxe: $(rxe_nonzero)"
            m=$(dmesg | wc -l); echo w > /proc/sysrq-trigger; sleep 1
            echo "kernel messages (last 30 before, then sysrq-w):"
            dmesg | head -n "$m" | tail -30
            dmesg | tail -n +"$((m + 1))" | grep -vE '^\[ *[0-9.]+\] *(\?|R[A-Z0-9]+:)' | head -80
            echo "rc=0"; } > "$share/res.$id.tmp" 2>&1 ;;
        krb5-logs)
          # What the server's Kerberos parts logged (selftests/tests/nfs_krb5.sh
          # shows it when a step fails).
          for f in /var/log/krb5-setup.log /var/log/krb5kdc.log /var/log/gssproxy.log; do
            echo "== $f"; tail -25 "$f" 2>&1
          done > "$share/res.$id.tmp" ;;
        krb5kdc-stop)
          # The KDC goes away (selftests/tests/nfs_krb5.sh), and comes back.
          kill "$(cat /run/krb5kdc/krb5kdc.pid 2>/dev/null)" 2> /dev/null
          for _ in $(seq 1 50); do pgrep -x krb5kdc > /dev/null || break; sleep 0.1; done
          if pgrep -x krb5kdc > /dev/null; then echo rc=1; else echo rc=0; fi > "$share/res.$id.tmp" ;;
        krb5kdc-start)
          krb5kdc -P /run/krb5kdc/krb5kdc.pid; echo "rc=$?" > "$share/res.$id.tmp" ;;
        nfsd-states)
          # What knfsd holds for its clients (callback state, delegations).
          for c in /proc/fs/nfsd/clients/*; do cat "$c/info" "$c/states"; done > "$share/res.$id.tmp" 2>&1 ;;
        *) echo "unknown command: $cmd" > "$share/res.$id.tmp" ;;
      esac
      mv "$share/res.$id.tmp" "$share/res.$id"
      say "ran '$cmd'"
    done
    sleep 0.2
  done
  ;;
client)
  # Autoload of proto=rdma (request_module "rpcrdma"/"rpcrdma6") reaches
  # rpcrdma_rs, never the in-tree C client, unless the run asks for it.
  if [ "${RDMARS_CLIENT_MODULE:-ours}" = ours ]; then
    cat > /etc/modprobe.d/rpcrdma-rs.conf <<CONF
install rpcrdma /sbin/modprobe -d $modroot --ignore-install rpcrdma_rs \$CMDLINE_OPTS
install rpcrdma6 /sbin/modprobe -d $modroot --ignore-install rpcrdma_rs \$CMDLINE_OPTS
CONF
  fi
  # Kerberos (see krb5_common): the keytabs, in the background, once the
  # server has made them.
  ( if out=$(krb5_client_setup 2>&1); then touch "$krb5/ready"; else printf '%s\n' "$out" > "$krb5/error"; fi ) &
  for _ in $(seq 1 600); do [ -e "$share/server-ready" ] && break; [ -e "$share/server.setup-error" ] && break; sleep 0.2; done
  [ -e "$share/server-ready" ] || fail "server guest not ready"
  export RDMARS_SERVER4 RDMARS_SERVER6 RDMARS_CLIENT4 RDMARS_CLIENT6 RDMARS_REPO RDMARS_KVER RDMARS_CLIENT_MODULE RDMARS_SERVER_MODULE RDMARS_KERNEL RDMARS_SERVER_KVER
  cd "$RDMARS_REPO" || fail "repo not visible"
  script=$(cat "$share/script")
  say "running $script"
  bash -c "$script" > "$share/client.out" 2>&1 < /dev/null
  echo $? > "$share/client.rc.tmp"
  dmesg > "$share/client.dmesg"
  mv "$share/client.rc.tmp" "$share/client.rc"
  poweroff_now
  ;;
*) fail "unknown role $role" ;;
esac
