#!/usr/bin/env bash
# Prove that the compiled protocol core (rust/proto) contains no panic call site.
#
#   scripts/check-proto-panics.sh             build rust/proto for the host the
#                                             way the kernel compiles Rust, check
#                                             every function in the object
#   scripts/check-proto-panics.sh module.o    check an already-built kernel object
#                                             (e.g. rpcrdma_rs.o), only the
#                                             functions of rpcrdma::proto
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
trap 'rm -rf "$tmp"' EXIT

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
  scope=proto
  [ -f "$obj" ] || die "no such object: $obj"
  ;;
*)
  echo "usage: $0 [kernel-object.o]" >&2
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
' "$tmp/dis" | sort -u > "$tmp/refs"

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
    if (n ~ /^panic/ || n ~ /_fail(ed)?$/) return 1
    if (n == "rust_begin_unwind" || n == "rust_panic" || n == "__rust_start_panic") return 1
    return 0
  }
  function reaches(g, s) {
    if ((g, s) in has) return 0
    has[g, s] = 1; reach[g, ++nreach[g]] = s
    return 1
  }
  function in_scope(f) {
    return scope == "all" || f ~ /(^|[^0-9])5proto/
  }
  FILENAME == ARGV[1] { dem[$1] = $2; next }
  $1 == "F" { defined[$2] = 1; order[++nf] = $2; next }
  $1 == "E" { nedge[$2]++; edge[$2, nedge[$2]] = $3; next }
  END {
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
    if (checked == 0) { print "check-proto-panics: no proto functions found in the object" > "/dev/stderr"; exit 2 }
    if (bad > 0) { print "proto: " bad " of " checked " functions have panic call sites"; exit 1 }
    print "proto: no panic call sites in " checked " functions"
  }
' "$tmp/names" "$tmp/refs"
