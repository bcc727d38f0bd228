#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Soak (make soak): RDMARS_SOAK_SECONDS (default 3600) of mixed data and
# metadata load on one NFSv4.2 mount over rpcrdma_rs, then umount and
# rmmod; the kernel's unreclaimable slab must come back to where it was.
#
# Three loads run at once until the time is up:
#   data      fio cycles: random writes with crc32c headers (4 KiB to 1 MiB
#             blocks, O_DIRECT and buffered in turn), the page cache
#             dropped, every block read back from the server and checked;
#   metadata  a directory of 64 small files per cycle: create, list, read
#             back, rename, symlink, hard link, chmod, truncate, remove;
#   recalls   every few minutes 16 server-made files held open for read
#             (read delegations), then written on the server: each write
#             is a CB_RECALL over the backchannel.
# Every minute a progress line (RPCs sent, connects, slab) is printed; no
# RPC sent for three minutes in a row counts as a hang.
#
# The slab baseline is taken after one warm-up mount and unmount with
# rpcrdma_rs loaded and unloaded, so that caches NFS and SUNRPC create on
# first use are in it. A leak of one object per RPC would be tens of MiB
# after an hour; the allowance (RDMARS_SOAK_SLAB_SLACK_KB, default 4096)
# covers per-CPU caches and other noise.
. "$(dirname "$0")/../lib.sh"
DURATION=${RDMARS_SOAK_SECONDS:-3600}
SLACK_KB=${RDMARS_SOAK_SLAB_SLACK_KB:-4096}
OPTS=vers=4.2,proto=rdma,port=20049,retry=0
unload_all
command -v fio > /dev/null || skip "fio not installed"

sunreclaim() { awk '$1 == "SUnreclaim:" { print $2 }' /proc/meminfo; }
# settle: drops the page cache, dentries and inodes, lets RCU and the
# workqueues free what they hold, and shrinks the slab caches.
settle() {
  sync
  for _ in 1 2 3; do echo 3 > /proc/sys/vm/drop_caches; sleep 2; done
  shrink_slabs
}
# slab_caches: "name active_objs" per cache, where /proc/slabinfo exists
# (not with SLUB_TINY, as on the regular test kernel).
slab_caches() { awk 'NR > 2 { print $1, $2 }' /proc/slabinfo 2>/dev/null | sort; }

# Warm-up: every cache the mount path creates exists before the baseline.
mount -t nfs -o $OPTS "$SERVER4:/" "$MNT" || fail "warm-up mount failed"
echo warm > "$MNT/soak.warm" && cat "$MNT/soak.warm" > /dev/null && rm -f "$MNT/soak.warm"
umount "$MNT" || fail "warm-up umount failed"
unload $XPRT_MOD
settle
slab0=$(sunreclaim); slab_caches > /tmp/soak.slab0
diag "unreclaimable slab before: $slab0 kB; soak for $DURATION s"

dmesg_mark
mount -t nfs -o $OPTS "$SERVER4:/" "$MNT" || fail "mount failed"
rm -rf "$MNT/soak"; mkdir -p "$MNT/soak" || fail "mkdir failed"
start=$SECONDS end=$((SECONDS + DURATION))
calls0=$(rs_counter backward_calls)

# Each load loop writes its result to /tmp/soak.NAME: "ok N" (cycles done)
# or "FAIL: why", and stops at the first failure.
data_loop() {
  local c=0 bs direct common sizes=(4k 64k 1m 16k 512k)
  while [ $SECONDS -lt $end ]; do
    c=$((c + 1)); bs=${sizes[c % ${#sizes[@]}]}; direct=$((c % 2))
    common="--name=soak --directory=$MNT/soak --filename_format=data.\$jobnum --numjobs=2 --size=16M --bs=$bs --direct=$direct --ioengine=libaio --iodepth=16 --verify=crc32c --verify_fatal=1 --randrepeat=0 --randseed=$c"
    if ! fio $common --rw=randwrite --do_verify=0 --end_fsync=1 --output=/tmp/soak.fio.w > /dev/null 2>&1; then
      echo "FAIL: cycle $c bs=$bs direct=$direct: write failed: $(tail -3 /tmp/soak.fio.w | tr '\n' ' ')" > /tmp/soak.data; return
    fi
    sync; echo 1 > /proc/sys/vm/drop_caches
    if ! fio $common --rw=randwrite --verify_only --output=/tmp/soak.fio.v > /dev/null 2>&1; then
      echo "FAIL: cycle $c bs=$bs direct=$direct: verification failed: $(grep -iE 'verify|crc' /tmp/soak.fio.v | head -3 | tr '\n' ' ')" > /tmp/soak.data; return
    fi
    echo "ok $c" > /tmp/soak.data
  done
}

meta_loop() {
  local c=0 d i v n
  while [ $SECONDS -lt $end ]; do
    c=$((c + 1)); d=$MNT/soak/meta.$c
    mkdir "$d" || { echo "FAIL: cycle $c: mkdir" > /tmp/soak.meta; return; }
    for i in $(seq 1 64); do
      echo "soak $c $i" > "$d/f$i" || { echo "FAIL: cycle $c: create f$i" > /tmp/soak.meta; return; }
    done
    n=$(ls "$d" | wc -l)
    [ "$n" = 64 ] || { echo "FAIL: cycle $c: $n entries listed, 64 made" > /tmp/soak.meta; return; }
    for i in $(seq 1 64); do
      read -r v < "$d/f$i"
      [ "$v" = "soak $c $i" ] || { echo "FAIL: cycle $c: f$i reads '$v'" > /tmp/soak.meta; return; }
    done
    mv "$d/f1" "$d/renamed" && ln -s renamed "$d/link" && ln "$d/renamed" "$d/hard" &&
      chmod 600 "$d/f2" && truncate -s 0 "$d/f3" ||
      { echo "FAIL: cycle $c: rename/link/chmod/truncate" > /tmp/soak.meta; return; }
    read -r v < "$d/link"
    [ "$v" = "soak $c 1" ] && [ "$(stat -c %h:%a "$d/hard")" = "2:644" ] &&
      [ "$(stat -c %a "$d/f2")" = 600 ] && [ ! -s "$d/f3" ] && [ ! -e "$d/f1" ] ||
      { echo "FAIL: cycle $c: attributes after rename/link/chmod/truncate" > /tmp/soak.meta; return; }
    rm -rf "$d" && [ ! -e "$d" ] || { echo "FAIL: cycle $c: remove" > /tmp/soak.meta; return; }
    echo "ok $c" > /tmp/soak.meta
  done
}

# recall_round N: 16 server-made files held open while the server writes
# to each; every write must be seen by the client afterwards.
recall_round() {
  local dir=soakdeleg.$1 out fds=() fd f sizes
  out=$(server_cmd "mkfiles $dir 16"); printf '%s' "$out" | grep -q 'rc=0' || { echo "mkfiles: $out"; return 1; }
  for f in "$MNT/$dir"/entry-*; do exec {fd}< "$f" && fds+=("$fd"); done
  out=$(server_cmd "append-all $dir")
  for fd in "${fds[@]}"; do exec {fd}<&-; done
  printf '%s' "$out" | grep -q 'rc=0' || { echo "append-all: $out"; return 1; }
  sizes=$(stat -c %s "$MNT/$dir"/entry-* | sort -u | tr '\n' ' ')
  server_cmd "rmdir-export $dir" > /dev/null
  [ "$sizes" = "2 " ] || { echo "sizes after the server's writes: $sizes"; return 1; }
  echo "$out"
}

echo "ok 0" > /tmp/soak.data; echo "ok 0" > /tmp/soak.meta
data_loop & data_pid=$!
meta_loop & meta_pid=$!
stop_loads() { kill $data_pid $meta_pid 2>/dev/null; wait $data_pid $meta_pid 2>/dev/null; }

why= minute=0 idle=0 rounds=0 recall_max=0
sends_prev=$(rdma_xprt_field 6)
while [ $SECONDS -lt $end ] && [ -z "$why" ]; do
  sleep 60; minute=$((minute + 1))
  sends=$(rdma_xprt_field 6)
  diag "$((SECONDS - start)) s: RPCs sent $sends (+$((sends - sends_prev))), connects $(rdma_xprt_field 3)," \
       "data $(cat /tmp/soak.data), metadata $(cat /tmp/soak.meta), recall rounds $rounds," \
       "backward calls $(( $(rs_counter backward_calls) - calls0 )), slab $(sunreclaim) kB"
  if [ "$sends" = "$sends_prev" ]; then idle=$((idle + 1)); else idle=0; fi
  sends_prev=$sends
  [ $idle -lt 3 ] || { why="no RPC sent for three minutes"; dump_stuck; break; }
  grep -h FAIL /tmp/soak.data /tmp/soak.meta > /dev/null && { why=$(grep -h FAIL /tmp/soak.data /tmp/soak.meta); break; }
  if [ $((minute % 5)) = 0 ]; then
    out=$(recall_round $minute) || { why="recall round: $out"; break; }
    rounds=$((rounds + 1))
    ms=$(printf '%s' "$out" | sed -n 's/.* max=\([0-9]*\).*/\1/p')
    [ "${ms:-0}" -gt "$recall_max" ] && recall_max=$ms
  fi
done
if [ -n "$why" ]; then
  stop_loads
else
  # The loops finish the cycle they are in.
  for _ in $(seq 1 600); do
    kill -0 $data_pid 2>/dev/null || kill -0 $meta_pid 2>/dev/null || break
    sleep 1
  done
  if kill -0 $data_pid 2>/dev/null || kill -0 $meta_pid 2>/dev/null; then
    why="a load cycle still running 600 s after the end"; dump_stuck; stop_loads
  fi
  wait $data_pid $meta_pid 2>/dev/null
fi
data=$(cat /tmp/soak.data) meta=$(cat /tmp/soak.meta)
sends=$(rdma_xprt_field 6) conns=$(rdma_xprt_field 3) bad=$(rdma_xprt_field 20)
calls=$(( $(rs_counter backward_calls) - calls0 ))
rm -rf "$MNT/soak"
umount "$MNT" || fail "umount failed after the soak${why:+ ($why)}"
unload $XPRT_MOD
settle
slab1=$(sunreclaim)
diag "soak done in $((SECONDS - start)) s: RPCs sent $sends, connects $conns, bad replies $bad"
diag "data cycles ${data#ok }, metadata cycles ${meta#ok }, recall rounds $rounds (longest recall $recall_max ms), backward calls $calls"
diag "unreclaimable slab: $slab0 kB before, $slab1 kB after umount and rmmod ($((slab1 - slab0)) kB)"
if [ -s /tmp/soak.slab0 ]; then
  diag "slab caches that grew by 100 objects or more:"
  slab_caches | join -a 2 -e 0 -o 0,1.2,2.2 /tmp/soak.slab0 - |
    awk '$3 - $2 >= 100 { printf "#   %s %d -> %d\n", $1, $2, $3 }'
fi
[ -z "$why" ] || fail "$why"
case "$data$meta" in *FAIL*) fail "$data $meta" ;; esac
[ "${data#ok }" -gt 0 ] && [ "${meta#ok }" -gt 0 ] || fail "a load loop did not complete a single cycle"
[ "$bad" = 0 ] || fail "bad replies: $bad"
[ "$rounds" = 0 ] || [ "$XPRT_MOD" != rpcrdma_rs ] || [ "$calls" -ge "$rounds" ] ||
  fail "$rounds recall rounds but only $calls backward calls"
[ $((slab1 - slab0)) -le "$SLACK_KB" ] || fail "unreclaimable slab grew by $((slab1 - slab0)) kB (allowance $SLACK_KB kB)"
dmesg_assert_clean
