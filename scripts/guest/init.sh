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
cat >> /etc/hosts <<HOSTS
$RDMARS_SERVER4 rdmars-server
$RDMARS_CLIENT4 rdmars-client
HOSTS
modprobe rdma_rxe || fail "modprobe rdma_rxe"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add"

start_server() {
  mkdir -p /srv/export
  echo "/srv/export *(rw,no_root_squash,insecure,no_subtree_check,fsid=0)" > /etc/exports
  mount -t nfsd nfsd /proc/fs/nfsd || return 1
  rpcbind -w || return 1
  exportfs -ra || return 1
  rpc.mountd || return 1
  # Short lease and grace periods: tests should not wait 90 s for NFSv4 OPEN.
  rpc.nfsd --lease-time 15 --grace-time 10 8 || return 1
  modprobe rpcrdma || return 1
  echo "rdma 20049" > /proc/fs/nfsd/portlist || return 1
}

# The server's soft-RoCE counters that are not zero, as NAME=VALUE pairs.
rxe_nonzero() (
  cd /sys/class/infiniband/rxe0/ports/1/hw_counters 2>/dev/null || exit 0
  for c in *; do read -r v < "$c"; [ "$v" != 0 ] && printf '%s=%s ' "$c" "$v"; done
  return 0
)

case "$role" in
server)
  start_server || fail "knfsd setup"
  say "knfsd ready on $RDMARS_IP4 (rdma port 20049)"
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
          if [ -n "$why" ]; then
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
        cb-state)
          # The callback channel state knfsd keeps for each client.
          { grep -h 'callback state' /proc/fs/nfsd/clients/*/info | awk '{ print $3 }' | tr '\n' ' '; echo; } > "$share/res.$id.tmp" 2>&1 ;;
        cpu-stat)
          # The server's aggregate CPU times (the "cpu" line of
          # /proc/stat, in USER_HZ ticks): how busy a benchmark kept it.
          { grep -m1 '^cpu ' /proc/stat; echo "rc=$?"; } > "$share/res.$id.tmp" 2>&1 ;;
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
          set -- ${cmd#peer-start }
          pkill -x rdma-peer; sleep 0.2
          proxy=(); [ "${3:-}" = proxy ] && proxy=(--proxy 127.0.0.1:2049)
          [ "${4:-}" = v2 ] && proxy+=(--v2)
          (/run/repo/tools/rdma-peer/target/release/rdma-peer --listen "$RDMARS_IP4:20050" \
            --scenario "$1" --seconds "${2:-60}" "${proxy[@]}" > /tmp/rdma-peer.log 2>&1 &)
          sleep 0.5
          if pgrep -x rdma-peer > /dev/null; then echo rc=0; else echo "rc=1 $(cat /tmp/rdma-peer.log)"; fi > "$share/res.$id.tmp" ;;
        peer-stop)
          pkill -x rdma-peer; sleep 0.3
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
  for _ in $(seq 1 600); do [ -e "$share/server-ready" ] && break; [ -e "$share/server.setup-error" ] && break; sleep 0.2; done
  [ -e "$share/server-ready" ] || fail "server guest not ready"
  export RDMARS_SERVER4 RDMARS_SERVER6 RDMARS_CLIENT4 RDMARS_CLIENT6 RDMARS_REPO RDMARS_KVER RDMARS_CLIENT_MODULE RDMARS_KERNEL
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
