#!/usr/bin/env bash
# Prove that the compiled protocol core (rust/proto), and the client's per-RPC
# path, contain no panic call site.
#
#   scripts/check-proto-panics.sh             build rust/proto for the host the
#                                             way the kernel compiles Rust, check
#                                             every function in the object
#   scripts/check-proto-panics.sh module.o    check an already-built kernel object
#                                             (e.g. rpcrdma_rs.o), only the
#                                             functions of rpcrdma::proto
#   scripts/check-proto-panics.sh --per-rpc module.o
#                                             check every function of the object
#                                             that the client's per-RPC entry
#                                             points reach by direct calls: the
#                                             SUNRPC callbacks of a request
#                                             (alloc_slot, buf_alloc,
#                                             send_request, buf_free,
#                                             free_slot, bc_free_rqst) and the
#                                             completion handlers of its
#                                             connection (recv_done, send_done,
#                                             reg_done, inv_done). The Receive
#                                             handler runs on what the peer
#                                             sent: a panic reachable from it
#                                             is a peer's way to crash us.
#   scripts/check-proto-panics.sh --objtool module.o
#                                             check every function of the object:
#                                             each panic entry point it calls or
#                                             jumps to must be one that objtool
#                                             (6.12 and 7.x) knows never returns.
#                                             objtool matches Rust's noreturn
#                                             functions by name, from a list
#                                             (is_rust_noreturn in
#                                             tools/objtool/check.c); a call to
#                                             one it does not know, such as
#                                             core's panic_const_div_by_zero,
#                                             is fine in the middle of a
#                                             function but makes objtool warn
#                                             "falls through to next function"
#                                             where the compiler places it
#                                             last. Whether it does depends on
#                                             the compiler's layout, so one
#                                             toolchain's build can warn while
#                                             another's does not: this mode
#                                             finds such calls in any build.
#
# A panic call site is a call (or tail jump, or any relocation) to one of core's
# panic entry points: core::panicking::* (panic, panic_fmt, panic_bounds_check,
# panic_const_{add,sub,mul}_overflow, panic_const_{div,rem}_by_zero, ...),
# slice index failures (slice_index_fail, slice_{start,end}_index_len_fail,
# ...), unwrap_failed / expect_failed / assert_failed, len_mismatch_fail and the
# like: anything named panic* or *_fail / *_failed. A checked function that
# calls a local function outside the checked set (a generic from core
# instantiated for proto) which can reach a panic is reported too ("via").
#
# Prints one line per offending function (demangled name: panic symbols) and
# exits 1, or prints "proto: no panic call sites in N functions" and exits 0.
#
# Host build: opt-level=2, overflow-checks=on, debug-assertions=off,
# panic=abort, codegen-units=1, v0 symbol mangling, like the kernel's Rust
# flags. -Zcross-crate-inline-threshold=never (with RUSTC_BOOTSTRAP=1, as the
# kernel build does) makes rustc emit small non-generic functions such as
# xdr::pad4 into the library object instead of leaving them to be inlined into
# a downstream crate. Generic functions are only instantiated where they are
# used, so a pub generic function that the crate does not itself use is not
# checked by the host build (the kernel-object mode checks what the module
# really instantiates).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"

die() { echo "check-proto-panics: $*" >&2; exit 2; }

if command -v llvm-objdump > /dev/null; then objdump=llvm-objdump
elif command -v objdump > /dev/null; then objdump=objdump
else die "neither llvm-objdump nor objdump is installed"; fi
# Rust v0 symbols: llvm-cxxfilt prints them plainly; c++filt (binutils >= 2.36)
# adds crate hashes; without either the raw names are printed.
if command -v llvm-cxxfilt > /dev/null; then demangle=llvm-cxxfilt
elif command -v c++filt > /dev/null; then demangle=c++filt
else demangle=cat; fi

tmp=$(mktemp -d /tmp/check-proto-panics.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT

# What is checked: a kernel object's protocol core (proto, the default),
# its per-RPC path (rpc) or its panic calls against objtool's list; the
# host build of the protocol core whole (all).
scope=proto
case ${1:-} in
--per-rpc | --objtool)
  [ "$1" = --per-rpc ] && scope=rpc || scope=objtool
  [ $# = 2 ] || die "usage: $0 $1 kernel-object.o"
  shift
  ;;
esac

case $# in
0)
  obj=$tmp/proto.o
  scope=all
  # A fresh --emit path every run also changes cargo's fingerprint, so rustc
  # always runs (a cached build would not write the object).
  (cd "$repo/rust/proto" && RUSTC_BOOTSTRAP=1 cargo rustc --quiet --lib --release \
    --target-dir target/panic-check -- \
    -C opt-level=2 -C overflow-checks=on -C debug-assertions=off -C panic=abort \
    -C codegen-units=1 -C symbol-mangling-version=v0 \
    -Zcross-crate-inline-threshold=never \
    --emit=obj="$obj") || die "cargo rustc failed"
  ;;
1)
  obj=$1
  [ -f "$obj" ] || die "no such object: $obj"
  ;;
*)
  echo "usage: $0 [--per-rpc | --objtool] [kernel-object.o]" >&2
  exit 2
  ;;
esac

"$objdump" -dr --no-show-raw-insn "$obj" > "$tmp/dis" || die "$objdump failed on $obj"

# Functions (F name) and the symbols each one references (E function target):
# relocation targets and the <symbol> operands of resolved calls and jumps.
# In a relocatable object the <symbol> objdump prints for a call or jump
# whose target is still a relocation is only where the unrelocated
# displacement happens to point (often the next function): when a
# relocation line follows the instruction, it names the real target and the
# printed operand is dropped.
awk '
  function flush() { if (pend != "" && pend != fn) print "E\t" fn "\t" pend; pend = "" }
  /^[0-9a-f]+ <[^>]+>:$/ {
    flush()
    fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn)
    print "F\t" fn; next
  }
  fn == "" { next }
  /R_[A-Z0-9_]+[ \t]/ {
    pend = ""
    t = $NF; sub(/[+-]0x[0-9a-fA-F]+$/, "", t)
    if (t != fn) print "E\t" fn "\t" t
    next
  }
  { flush() }
  /<[^>]+>/ {
    t = $0; sub(/^[^<]*</, "", t); sub(/>.*$/, "", t); sub(/[+-]0x[0-9a-fA-F]+$/, "", t)
    pend = t
  }
  END { flush() }
' "$tmp/dis" | sort -u > "$tmp/refs.raw"

# Functions the compiler merged (identical code, e.g. one generic's
# instances for the client and for the verbs selftest) are one body with
# several symbols, and objdump labels the body with only one of them: a call
# through another names a function that seems not to exist. Each symbol is
# mapped to the label of its address, so that such calls are followed.
# (Addresses are per section: the key is both.)
"$objdump" -t "$obj" > "$tmp/symtab" || die "$objdump -t failed on $obj"
awk '
  FILENAME == ARGV[1] {
    if ($0 ~ /^Disassembly of section /) { sec = $4; sub(/:$/, "", sec) }
    else if ($0 ~ /^[0-9a-f]+ <[^>]+>:$/) { l = $2; sub(/^</, "", l); sub(/>:$/, "", l); label[sec, $1] = l }
    next
  }
  # address, flags, section, size, name: functions only
  $0 ~ / F / {
    a = $1; n = $NF; sec = $0; sub(/^.* F /, "", sec); sub(/[ \t].*$/, "", sec)
    if (((sec, a) in label) && label[sec, a] != n) print n "\t" label[sec, a]
  }
' "$tmp/dis" "$tmp/symtab" > "$tmp/aliases"
awk -F '\t' -v OFS='\t' '
  FILENAME == ARGV[1] { alias[$1] = $2; next }
  $1 == "E" && ($3 in alias) { $3 = alias[$3] }
  $1 == "E" && $3 == $2 { next }
  { print }
' "$tmp/aliases" "$tmp/refs.raw" | sort -u > "$tmp/refs"

cut -f2- "$tmp/refs" | tr '\t' '\n' | sort -u > "$tmp/syms"
"$demangle" < "$tmp/syms" > "$tmp/demangled"
[ "$(wc -l < "$tmp/syms")" = "$(wc -l < "$tmp/demangled")" ] || die "$demangle changed the line count"
paste "$tmp/syms" "$tmp/demangled" > "$tmp/names"

awk -F '\t' -v scope="$scope" '
  function is_panic(d,   n) {
    n = d
    sub(/::<.*>$/, "", n)          # drop generic arguments
    sub(/^.*::/, "", n)            # last path component
    if (d ~ /^core::panicking::/) return 1
    if (n ~ /^panic/) return 1
    # The slice index, unwrap and assert failures of core and alloc (not
    # the *_failed handlers and trace events of the module).
    if (d ~ /^(core|alloc)(\[[0-9a-f]+\])?::/ && n ~ /_fail(ed)?$/) return 1
    if (n == "rust_begin_unwind" || n == "rust_panic" || n == "__rust_start_panic") return 1
    return 0
  }
  # Whether objtool takes the Rust function of mangled name r for one that
  # never returns: the heuristics of is_rust_noreturn in 6.12 (the 7.x list
  # has these and more), by mangled name.
  function objtool_knows(r,   k) {
    if (r !~ /^_R/) return 0
    k = "_4core3num22from_ascii_radix_panic$|_4core5sliceSp15copy_from_slice17len_mismatch_fail$"
    k = k "|_4core6option13expect_failed$|_4core6option13unwrap_failed$|_4core6result13unwrap_failed$"
    k = k "|_4core6result13unwrap_failed19unwrap_failed_inner$|_4core9panicking5panic$"
    k = k "|_4core9panicking9panic_fmt$|_4core9panicking14panic_explicit$|_4core9panicking14panic_nounwind$"
    k = k "|_4core9panicking18panic_bounds_check$|_4core9panicking18panic_nounwind_fmt$"
    k = k "|_4core9panicking19assert_failed_inner$|_4core9panicking30panic_null_pointer_dereference$"
    k = k "|_4core9panicking32panic_null_reference_constructed$"
    k = k "|_4core9panicking36panic_misaligned_pointer_dereference$|_7___rustc17rust_begin_unwind$"
    k = k "|_4core9panicking13assert_failed|_4core9panicking11panic_const24panic_const_"
    if (r ~ k) return 1
    return r ~ /_4core5slice5index/ && r ~ /slice_/ && r ~ /_fail$/
  }
  function reaches(g, s) {
    if ((g, s) in has) return 0
    has[g, s] = 1; reach[g, ++nreach[g]] = s
    return 1
  }
  function in_scope(f,   d) {
    if (scope == "rpc") return (f in per_rpc)
    if (scope == "all") return 1
    # A function of rpcrdma::proto (an inherent or trait method of one of
    # its types, or a free function), not one merely instantiated with a
    # proto type. (Not demangled: any symbol that names proto.)
    d = (f in dem) ? dem[f] : f
    if (d == f) return f ~ /(^|[^0-9])5proto/
    return d ~ /^<?rpcrdma(\[[0-9a-f]+\])?::proto::/
  }
  # The per-RPC entry points, by demangled name (with or without the crate
  # hashes c++filt prints): the instances for the client.
  function rpc_root(d) {
    if (d ~ /::kapi::rpc::ops::(alloc_slot|free_slot|buf_alloc|buf_free|send_request|bc_free_rqst)::<.*::client::/) return 1
    return d ~ /::kapi::ib::(rq::recv_done|sq::send_done|frwr::reg_done|inv::inv_done)::<.*::client::conn::EpShared>/
  }
  FILENAME == ARGV[1] { dem[$1] = $2; next }
  $1 == "F" { defined[$2] = 1; order[++nf] = $2; next }
  $1 == "E" { nedge[$2]++; edge[$2, nedge[$2]] = $3; next }
  END {
    # objtool: direct calls only (a local function that cannot return is
    # one objtool finds out about by itself).
    if (scope == "objtool") {
      checked = 0; bad = 0
      for (i = 1; i <= nf; i++) {
        f = order[i]; checked++
        out = ""
        for (k = 1; k <= nedge[f]; k++) {
          t = edge[f, k]
          if (is_panic(dem[t]) && !objtool_knows(t)) out = out (out == "" ? "" : ", ") dem[t]
        }
        if (out == "") continue
        bad++
        print ((f in dem) ? dem[f] : f) ": " out
      }
      if (checked == 0) { print "check-proto-panics: no functions found in the object" > "/dev/stderr"; exit 2 }
      if (bad > 0) { print "objtool: " bad " of " checked " functions call panic entry points objtool does not know"; exit 1 }
      print "objtool: every panic entry point called in " checked " functions is one objtool knows"
      exit 0
    }
    # The per-RPC set: every local function the entry points reach by
    # direct calls and jumps (the indirect calls go out to SUNRPC, ib_core).
    if (scope == "rpc") {
      nroots = 0; qt = 0; qh = 0
      for (i = 1; i <= nf; i++) {
        f = order[i]
        if (!rpc_root((f in dem) ? dem[f] : f)) continue
        nroots++; per_rpc[f] = 1; q[++qt] = f
      }
      if (nroots != 10) { print "check-proto-panics: " nroots " per-RPC entry points found, not 10 (renamed?)" > "/dev/stderr"; exit 2 }
      while (qh < qt) {
        f = q[++qh]
        for (k = 1; k <= nedge[f]; k++) {
          t = edge[f, k]
          if (defined[t] && !(t in per_rpc)) { per_rpc[t] = 1; q[++qt] = t }
        }
      }
    }
    # reach[g]: the panic symbols that a local out-of-scope function g can
    # reach through other local out-of-scope functions (a fixpoint).
    do {
      changed = 0
      for (i = 1; i <= nf; i++) {
        g = order[i]
        if (in_scope(g)) continue
        for (k = 1; k <= nedge[g]; k++) {
          t = edge[g, k]
          if (is_panic(dem[t])) changed += reaches(g, dem[t])
          else if (defined[t] && !in_scope(t)) for (j = 1; j <= nreach[t]; j++) changed += reaches(g, reach[t, j])
        }
      }
    } while (changed)

    checked = 0; bad = 0
    for (i = 1; i <= nf; i++) {
      f = order[i]
      if (!in_scope(f)) continue
      checked++
      delete seen; nsym = 0
      for (k = 1; k <= nedge[f]; k++) {
        t = edge[f, k]
        if (is_panic(dem[t])) { s = dem[t] }
        else if (defined[t] && !in_scope(t) && nreach[t] > 0) {
          s = reach[t, 1]
          for (j = 2; j <= nreach[t]; j++) s = s ", " reach[t, j]
          s = s " (via " dem[t] ")"
        } else continue
        if (!(s in seen)) { seen[s] = 1; syms[++nsym] = s }
      }
      if (nsym == 0) continue
      bad++
      out = syms[1]
      for (k = 2; k <= nsym; k++) out = out ", " syms[k]
      name = (f in dem) ? dem[f] : f
      print name ": " out
    }
    what = (scope == "rpc") ? "per-RPC path" : "proto"
    if (checked == 0) { print "check-proto-panics: no " what " functions found in the object" > "/dev/stderr"; exit 2 }
    if (bad > 0) { print what ": " bad " of " checked " functions have panic call sites"; exit 1 }
    print what ": no panic call sites in " checked " functions"
  }
' "$tmp/names" "$tmp/refs"
