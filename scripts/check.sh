#!/usr/bin/env bash
# Run every test of rpcrdma-rs and end with "N passed, N failed".
#
#   1. host: protocol core unit tests (cargo test)
#   2. host: rpcrdma_rs.ko builds against the test kernel with no warning,
#      its protocol core and per-RPC path have no panic call sites, and it
#      calls no panic entry point objtool cannot follow; clippy finds nothing;
#      no unsafe code outside rust/kapi/; every misuse snippet refused
#      with its error (make misuse)
#   3. guests: selftests/ on the two-guest soft-RoCE testbed (TAP), over
#      rpcrdma_rs, then a subset over the in-tree C client (the baseline;
#      RDMARS_BASELINE=full runs all of them, as make long-check does)
#   4. make check-all only: the other test kernel line (7.3), every selftest,
#      our server's tests under both clients, and nfs_krb5 whole over the C
#      client there (and on the stock image), and over both clients there
#      against a 6.12 server too
#   5. Debian's stock 7.3 kernel: the module built with Debian's toolchain,
#      by hand and by dkms; the Debian package (make deb) installed, put
#      through a kernel it must skip, removed and purged with apt; a subset
#      of the selftests on the stock image in both guests with the module
#      the package installed, its modprobe.d redirect tested
#      (RDMARS_STOCK_TESTS=all: every selftest, and our server's tests
#      under both clients, as make check-all)
#
# Installs and builds what is missing first (a cold machine builds the kernel:
# about 20 minutes). Exit status is non-zero if anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
cd "$repo"

passed=0 failed=0 skipped=0 failures=()
logdir=$(mktemp -d /tmp/rpcrdma-rs-check.XXXX)
result() { # pass|fail name
  if [ "$1" = pass ]; then
    passed=$((passed + 1)); echo "PASS: $2"
  else
    failed=$((failed + 1)); failures+=("$2"); echo "FAIL: $2"
  fi
}
finish() {
  echo
  # What failed, again at the end, where a CI log's tail shows it.
  [ ${#failures[@]} = 0 ] || printf 'failed: %s\n' "${failures[@]}"
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" = 0 ]
  exit $?
}

log "host setup"
if ! bash scripts/setup-host.sh > "$logdir/setup.log" 2>&1; then
  tail -20 "$logdir/setup.log"; result fail "host setup (scripts/setup-host.sh)"; finish
fi

log "unit tests (rust/proto)"
(cd rust/proto && cargo test --color never) > "$logdir/unit.log" 2>&1
unit_rc=$?
grep -E '^test .* \.\.\. ' "$logdir/unit.log" | sed 's/^/  /'
read -r up uf < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } } END { print p+0, f+0 }' "$logdir/unit.log")
passed=$((passed + up)); failed=$((failed + uf))
if [ $unit_rc != 0 ] && [ "$uf" = 0 ]; then tail -30 "$logdir/unit.log"; result fail "unit tests build"; fi
echo "unit tests: $up passed, $uf failed"

log "test kernel"
if ! bash scripts/build-kernel.sh > "$logdir/kernel.log" 2>&1; then
  tail -30 "$logdir/kernel.log"; result fail "test kernel build"; finish
fi

log "module build"
# Rebuild the objects so that warnings are seen even when nothing changed.
rm -f rust/rpcrdma.o rust/helpers.o rust/bindings_generated.rs
make -s module > "$logdir/module.log" 2>&1
mod_rc=$?
if [ $mod_rc != 0 ]; then
  tail -40 "$logdir/module.log"; result fail "rpcrdma_rs.ko builds"; finish
fi
if grep -E 'warning|error' "$logdir/module.log"; then
  result fail "rpcrdma_rs.ko builds without warnings"
else
  result pass "rpcrdma_rs.ko builds without warnings"
fi

# The protocol core must not be able to panic: no call into core's panic
# machinery may survive in its compiled functions (overflow checks are on).
if bash scripts/check-proto-panics.sh rpcrdma_rs.o > "$logdir/panics.log" 2>&1; then
  result pass "protocol core in rpcrdma_rs.o has no panic call sites ($(grep -o '[0-9]* functions' "$logdir/panics.log"))"
else
  cat "$logdir/panics.log"; result fail "protocol core in rpcrdma_rs.o has no panic call sites"
fi
# Nor may the client's per-RPC path: everything a request's SUNRPC callbacks
# and its connection's completion handlers reach, the Receive handler (which
# runs on what the peer sent) among them.
if bash scripts/check-proto-panics.sh --per-rpc rpcrdma_rs.o > "$logdir/panics-rpc.log" 2>&1; then
  result pass "per-RPC path in rpcrdma_rs.o has no panic call sites ($(grep -o '[0-9]* functions' "$logdir/panics-rpc.log"))"
else
  cat "$logdir/panics-rpc.log"; result fail "per-RPC path in rpcrdma_rs.o has no panic call sites"
fi
# Anywhere in the module, a panic entry point objtool does not take for
# noreturn is an objtool warning waiting for another compiler's layout (the
# stock build's rustc placed one last in a function where ours did not).
if bash scripts/check-proto-panics.sh --objtool rpcrdma_rs.o > "$logdir/panics-objtool.log" 2>&1; then
  result pass "rpcrdma_rs.o calls no panic entry point objtool cannot follow ($(grep -o '[0-9]* functions' "$logdir/panics-objtool.log"))"
else
  cat "$logdir/panics-objtool.log"; result fail "rpcrdma_rs.o calls no panic entry point objtool cannot follow"
fi

# clippy over the whole module (the kernel's lint set, its MSRV included).
# Touch the crate root so that clippy sees it even when nothing changed.
touch rust/rpcrdma.rs
if make -s clippy > "$logdir/clippy.log" 2>&1 && ! grep -qE '^(warning|error)' "$logdir/clippy.log"; then
  result pass "clippy reports nothing on the module"
else
  grep -E -A6 '^(warning|error)' "$logdir/clippy.log" | head -60; result fail "clippy reports nothing on the module"
fi
# Leave a normal build behind for the guests (clippy builds no object).
make -s module > /dev/null 2>&1

# All unsafe code lives in rust/kapi/ (design.rst): none elsewhere, the
# generated bindings and the misuse snippets (which must not compile)
# aside. verbs and the client deny the unsafe_code lint as well, which
# `make misuse` proves below; this catches the rest (the crate root).
outside=$(find rust -name '*.rs' -not -path 'rust/kapi/*' -not -path 'rust/proto/*' \
    -not -name sys.rs -not -name bindings_generated.rs -not -name misuse.rs -print0 |
  xargs -0 awk '/^#\[cfg\(misuse = / { skip = 1 } skip && /^$/ { skip = 0 }
    !skip && /\<unsafe *(\{|fn|impl|trait|extern)/ { print FILENAME ":" FNR ": " $0 }' || true)
if [ -z "$outside" ]; then
  result pass "no unsafe code outside rust/kapi/"
else
  printf '%s\n' "$outside" | head -20; result fail "no unsafe code outside rust/kapi/"
fi

# The misuses the module's types must refuse (make misuse,
# scripts/misuse.sh): each snippet, compiled into the module, must fail
# with the error it names, in its own file; the control must build.
bash scripts/misuse.sh > "$logdir/misuse.log" 2>&1
misuse_rc=$?
while read -r verdict rest; do
  case "$verdict" in
    PASS:) result pass "misuse refused at compile time: $rest" ;;
    FAIL:) result fail "misuse refused at compile time: $rest" ;;
  esac
done < "$logdir/misuse.log"
if [ $misuse_rc != 0 ] && ! grep -q '^FAIL:' "$logdir/misuse.log"; then
  tail -20 "$logdir/misuse.log"; result fail "make misuse ran"
fi

# The hostile peer the selftests run in the server guest, and its own
# unit tests (proxy-mode XDR helpers).
if make -s peer > "$logdir/peer.log" 2>&1; then
  result pass "tools/rdma-peer builds"
  (cd tools/rdma-peer && cargo test --release --color never) > "$logdir/peer-unit.log" 2>&1
  grep -E '^test .* \.\.\. ' "$logdir/peer-unit.log" | sed 's/^/  /'
  read -r pp pf < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } } END { print p+0, f+0 }' "$logdir/peer-unit.log")
  passed=$((passed + pp)); failed=$((failed + pf))
  [ "$pp" -gt 0 ] || { tail -20 "$logdir/peer-unit.log"; result fail "tools/rdma-peer unit tests run"; }
else
  tail -30 "$logdir/peer.log"; result fail "tools/rdma-peer builds"
fi

# selftests TAG [testbed options] [-- TEST...]: one testbed run of the guest
# selftests (all of them unless TESTs are named).
selftests() {
  local tag=$1; shift
  local opts=() names=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; names=("$@"); }
  log "guest selftests, $tag (two-guest testbed)"
  # About 40 minutes over rpcrdma_rs under TCG, 5 for the baseline subset;
  # KASAN, lockdep and kmemleak make the debug kernel many times slower:
  # there the hostile peer's catalogue alone takes about 45 minutes.
  local budget=3600 per_test=600
  # make check-all's Kerberos shapes: some 15 minutes more per kernel.
  [ "${RDMARS_KRB5_FULL:-0}" = 1 ] && budget=4800
  [ "${RDMARS_KERNEL:-regular}" = debug ] && budget=18000 per_test=4200
  bash scripts/testbed.sh --timeout $budget "${opts[@]}" env RDMARS_TEST_TIMEOUT=$per_test \
    ${RDMARS_PKG_CONF:+RDMARS_PKG_CONF=$RDMARS_PKG_CONF} ${RDMARS_KRB5_FULL:+RDMARS_KRB5_FULL=$RDMARS_KRB5_FULL} \
    ${RDMARS_KRB5_QUICK:+RDMARS_KRB5_QUICK=$RDMARS_KRB5_QUICK} \
    selftests/run_guest.sh "${names[@]}" 2>&1 |
    tee "$logdir/selftests.$tag.tap"
  local rc=${PIPESTATUS[0]} tap="$logdir/selftests.$tag.tap" sp sf ss planned
  ss=$(grep -cE '^ok [0-9]+ .*# SKIP' "$tap")
  sp=$(( $(grep -cE '^ok [0-9]+ ' "$tap") - ss ))
  sf=$(grep -cE '^not ok [0-9]+ ' "$tap")
  passed=$((passed + sp)); failed=$((failed + sf)); skipped=$((skipped + ss))
  mapfile -t -O ${#failures[@]} failures < <(sed -n "s/^not ok [0-9]* selftests: rpcrdma_rs: /$tag: /p" "$tap")
  planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$tap" | head -1)
  if [ -z "$planned" ] || [ $((sp + sf + ss)) -lt "$planned" ]; then
    result fail "guest selftests ($tag) ran to completion (testbed exit $rc)"
  fi
}
# krb5_other_server TAG: nfs_krb5 whole over rpcrdma_rs and over the C
# client, the client guest as the caller's environment says (RDMARS_LINE,
# RDMARS_KERNEL, RDMARS_KO, RDMARS_PKG_CONF for ours) and the server guest
# on the 6.12 test kernel (testbed.sh RDMARS_SERVER_LINE; make check-all
# has built both lines by then): make check-all's Kerberos proof for the
# clients whose own kernel's server has the known fault.
krb5_other_server() {
  RDMARS_SERVER_LINE=6.12 selftests "$1-client-6.12-server" -- nfs_krb5
  RDMARS_SERVER_LINE=6.12 RDMARS_PKG_CONF='' \
    selftests "$1-client-6.12-server-c-baseline" --client-module c -- nfs_krb5
}
# Both runs count the guests' instructions (testbed.sh --count-insns): the
# insn_counter test checks the counter make ab and make bench read.
selftests rpcrdma_rs --count-insns
# The in-tree C client runs a subset of the same data tests: it shows the
# tests hold against the reference client (a test only we can pass proves
# nothing about the protocol). The whole suite over C, the hostile peer
# included, is part of make long-check (RDMARS_BASELINE=full runs it here).
# The debug kernel checks our module, not the C client: no baseline there.
if [ "${RDMARS_KERNEL:-regular}" != debug ] && [ "${RDMARS_BASELINE:-quick}" = full ]; then
  selftests c-baseline --client-module c --count-insns
elif [ "${RDMARS_KERNEL:-regular}" != debug ]; then
  # (nfs_krb5 in its quick form here: NFSv4.2 under each flavour.)
  RDMARS_KRB5_QUICK=1 selftests c-baseline --client-module c --count-insns -- testbed_c_baseline nfs3_inline_io nfs41_backchannel \
    nfs_long_call nfs_large_directory nfs_server_restart insn_counter nfs_nconnect nfs41_trunking nfs_krb5
fi

# rpcrdma_rs as the server too (issue 57), under our client and under
# C's: its own tests (Version Two end to end, the hostile client, faults
# under verified I/O), and the data tests of the client (Read, Write and
# Reply chunks, Long Calls, fio's verified I/O) with knfsd serving over it.
server_tests="server_inline server_version_two server_hostile_client server_faults nfs3_inline_io nfs41_backchannel nfs_chunked_io nfs_long_call nfs_large_directory nfs_fio_verify"
selftests server-ours --server-module ours -- $server_tests
if [ "${RDMARS_KERNEL:-regular}" != debug ]; then
  selftests server-ours-c-client --server-module ours --client-module c -- $server_tests
fi

# The other test kernel line (make check-all, RDMARS_OTHER_LINES): its
# kernel (cached after the first build), the module built against it with no
# warning, and every selftest over it. The working tree's own build is put
# back afterwards for the line make check was asked for.
for other in ${RDMARS_OTHER_LINES:-}; do
  [ "$other" != "$(kernel_line)" ] || continue
  log "test kernel line $other"
  if ! RDMARS_LINE=$other bash scripts/build-kernel.sh > "$logdir/kernel-$other.log" 2>&1; then
    tail -30 "$logdir/kernel-$other.log"; result fail "$other test kernel build"; continue
  fi
  other_ko=$logdir/rpcrdma_rs-$other.ko
  # make module starts afresh when the kernel tree changes (the
  # Makefile's forget_other_tree), here and when switching back below.
  if make -s KERNEL="$other" module > "$logdir/module-$other.log" 2>&1; then
    if grep -E 'warning|error' "$logdir/module-$other.log"; then
      result fail "rpcrdma_rs.ko builds for the $other test kernel without warnings"
    else
      result pass "rpcrdma_rs.ko builds for the $other test kernel without warnings"
    fi
    cp rpcrdma_rs.ko "$other_ko"
    if bash scripts/check-proto-panics.sh --objtool "$other_ko" > "$logdir/objtool-$other.log" 2>&1; then
      result pass "the $other build calls no panic entry point objtool cannot follow"
    else
      cat "$logdir/objtool-$other.log"; result fail "the $other build calls no panic entry point objtool cannot follow"
    fi
  else
    tail -40 "$logdir/module-$other.log"; result fail "rpcrdma_rs.ko builds for the $other test kernel"
  fi
  make -s module > /dev/null 2>&1
  [ -f "$other_ko" ] || continue
  RDMARS_LINE=$other RDMARS_KO=$other_ko selftests "$other" --count-insns
  # Our server on this line (both guests boot it), under our client and
  # under C's: the three-way matrix (our client against C's server is the
  # run above).
  RDMARS_LINE=$other RDMARS_KO=$other_ko selftests "$other-server-ours" --server-module ours -- $server_tests
  RDMARS_LINE=$other RDMARS_KO=$other_ko selftests "$other-server-ours-c-client" --server-module ours --client-module c -- $server_tests
  # Kerberos over the C client too on this line, the baseline of ours.
  # Against a 7.3 server nfs_krb5 passes over that server's known fault
  # (NFSv4 krb5i 1 MiB reads; Documentation/testbed.rst): so both clients
  # of 7.3 also run it against a 6.12 server, where the same reads must
  # pass.
  if [ "${RDMARS_KRB5_FULL:-0}" = 1 ]; then
    RDMARS_LINE=$other RDMARS_KO=$other_ko selftests "$other-c-baseline" --client-module c -- nfs_krb5
    [ "$other" = 6.12 ] || RDMARS_LINE=$other RDMARS_KO=$other_ko krb5_other_server "$other"
  fi
done

# Debian's stock kernel, unmodified (scripts/stock-kernel.sh): the module is
# built as a user of that kernel builds it (README's commands in a trixie
# machine with Debian's toolchain), and through dkms; then the stock image
# boots in both guests (stock knfsd and C svcrdma on the server) for the
# selftests that show it works there: load and unload, proto=rdma
# autoload, NFSv3, 4.1 and 4.2 mounts moving data, fio crc32c verify, a
# delegation recall over the backchannel, mount cycles with dmesg clean,
# and the trace events (its jump labels make the events' tests patched
# branches, which make check's 6.12 kernel cannot use from Rust).
# RDMARS_STOCK_TESTS=all (make check-all) runs every selftest there.
stock_rel=$(stock_release)
stock_ko=$CACHE_DIR/stock/rpcrdma_rs-$stock_rel.ko
STOCK_TESTS=(module_load_unload transport_autoload nfs3_inline_io nfs_chunked_io nfs_fio_verify nfs41_backchannel mount_cycle
  trace_events nfs_krb5)
[ "${RDMARS_STOCK_TESTS:-quick}" = all ] && STOCK_TESTS=()
if [ "${RDMARS_KERNEL:-regular}" != debug ]; then
  log "Debian's stock $stock_rel: the module built as its users build it"
  rm -f "$stock_ko"
  if bash scripts/stock-kernel.sh module "$stock_ko" > "$logdir/stock-module.log" 2>&1; then
    if grep -E 'warning|error' "$logdir/stock-module.log"; then
      result fail "rpcrdma_rs.ko builds for Debian's stock $stock_rel without warnings"
    else
      result pass "rpcrdma_rs.ko builds for Debian's stock $stock_rel with its own toolchain, without warnings"
    fi
    # Debian's compiler (another rustc, -O2) proves other overflows
    # impossible than the testbed's: the same two checks on what it built.
    if bash scripts/check-proto-panics.sh "$stock_ko" > "$logdir/stock-panics.log" 2>&1 &&
      bash scripts/check-proto-panics.sh --per-rpc "$stock_ko" >> "$logdir/stock-panics.log" 2>&1; then
      result pass "protocol core and per-RPC path of the $stock_rel build have no panic call sites"
    else
      cat "$logdir/stock-panics.log"; result fail "protocol core and per-RPC path of the $stock_rel build have no panic call sites"
    fi
    if bash scripts/check-proto-panics.sh --objtool "$stock_ko" > "$logdir/stock-objtool.log" 2>&1; then
      result pass "the $stock_rel build calls no panic entry point objtool cannot follow"
    else
      cat "$logdir/stock-objtool.log"; result fail "the $stock_rel build calls no panic entry point objtool cannot follow"
    fi
    if bash scripts/stock-kernel.sh dkms > "$logdir/stock-dkms.log" 2>&1; then
      result pass "dkms builds rpcrdma_rs.ko for $stock_rel (dkms.conf)"
    else
      tail -30 "$logdir/stock-dkms.log"; result fail "dkms builds rpcrdma_rs.ko for $stock_rel (dkms.conf)"
    fi
    # The Debian package (make deb), and its life on the user's machine:
    # installed with apt (dkms builds the module), a kernel without Rust
    # arriving (skipped with one line, apt exits 0), removed and purged.
    # The module it installed and its modprobe.d redirect are what the
    # stock image then runs (package_redirect: each case of the redirect).
    stock_run_ko=$stock_ko pkg_conf=
    deb_dir=$CACHE_DIR/stock/deb
    rm -rf "$deb_dir"; mkdir -p "$deb_dir"
    if bash scripts/stock-kernel.sh deb "$deb_dir" > "$logdir/stock-deb.log" 2>&1; then
      result pass "make deb builds the rpcrdma-rs-dkms package (debhelper, dh-dkms)"
      if bash scripts/stock-kernel.sh deb-test "$deb_dir"/rpcrdma-rs-dkms_*.deb "$deb_dir/rpcrdma_rs.ko" \
        "$deb_dir/rpcrdma-rs.conf" > "$logdir/stock-deb-test.log" 2>&1; then
        result pass "the package installs with apt (dkms builds for $stock_rel), a kernel without Rust is skipped with one line and apt exits 0, it is removed and purged cleanly"
        stock_run_ko=$deb_dir/rpcrdma_rs.ko pkg_conf=$deb_dir/rpcrdma-rs.conf
        [ ${#STOCK_TESTS[@]} -gt 0 ] && STOCK_TESTS+=(package_redirect)
      else
        tail -30 "$logdir/stock-deb-test.log"
        result fail "the package installs with apt (dkms builds for $stock_rel), a kernel without Rust is skipped with one line and apt exits 0, it is removed and purged cleanly"
      fi
    else
      tail -30 "$logdir/stock-deb.log"; result fail "make deb builds the rpcrdma-rs-dkms package (debhelper, dh-dkms)"
    fi
    # (nfs_krb5 quick here, whole under make check-all.)
    RDMARS_KERNEL=stock RDMARS_KO=$stock_run_ko RDMARS_PKG_CONF=$pkg_conf RDMARS_KRB5_QUICK=1 \
      selftests "stock-$stock_rel" -- "${STOCK_TESTS[@]}"
    # make check-all: our server on the stock image too (the module the
    # package installed, loaded with server=1), under our client and under
    # C's: the three-way matrix there.
    if [ "${RDMARS_STOCK_TESTS:-quick}" = all ]; then
      RDMARS_KERNEL=stock RDMARS_KO=$stock_run_ko selftests "stock-$stock_rel-server-ours" --server-module ours -- $server_tests
      RDMARS_KERNEL=stock RDMARS_KO=$stock_run_ko selftests "stock-$stock_rel-server-ours-c-client" --server-module ours --client-module c -- $server_tests
    fi
    # make check-all: Kerberos over the C client there too (without the
    # package's redirect, which would send proto=rdma to ours).
    if [ "${RDMARS_KRB5_FULL:-0}" = 1 ]; then
      RDMARS_KERNEL=stock RDMARS_KO=$stock_run_ko selftests "stock-$stock_rel-c-baseline" --client-module c -- nfs_krb5
      RDMARS_KERNEL=stock RDMARS_KO=$stock_run_ko RDMARS_PKG_CONF=$pkg_conf krb5_other_server "stock-$stock_rel"
    fi
  else
    tail -30 "$logdir/stock-module.log"; result fail "rpcrdma_rs.ko builds for Debian's stock $stock_rel"
  fi
fi
rm -rf "$logdir"
finish
