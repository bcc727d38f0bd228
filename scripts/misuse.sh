#!/usr/bin/env bash
# make misuse: the misuses the module's types must refuse at compile time.
#
# Every "// misuse: NAME EXPECTED [TEXT]" line under rust/ names a snippet, built
# only with --cfg 'misuse="NAME"' (rust/misuse.rs has most of them; those
# that must sit in a module of their own, such as unsafe code in verbs or
# the client, are in that module's file). For each, the module's own
# rustc command (from Kbuild's saved command line of the last module
# build) is run again with that cfg, type checking only, and:
#   EXPECTED = ok           the build must succeed (the control: the harness
#                           builds the module with a snippet in it)
#   EXPECTED = E0xxx        it must fail with that error, in the snippet's
#                           own file, with no error of another code and
#                           none anywhere else (E0xxx,E0yyy: E0yyy may come
#                           with it, as a macro's consequence of the first)
#   EXPECTED = unsafe_code  it must fail on the unsafe_code lint, likewise
# TEXT, if given, must be in the compiler's message: for the generic codes
# (E0308 mismatched types, E0599 no such method, ...) it names the type or
# method that refuses the misuse, so an unrelated slip in the snippet that
# happens to raise the same code does not pass for it.
# Prints one line per snippet and "N passed, N failed"; exits non-zero if
# any failed. Builds the module first if it is not built.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
cd "$repo"

kdir=${KDIR:-$(bash scripts/build-kernel.sh --path)}
cmdfile=rust/.rpcrdma.o.cmd
if [ ! -f "$cmdfile" ] || [ ! -f rpcrdma_rs.ko ]; then
  make -s module >/dev/null 2>&1 || die "the module does not build: run make module"
fi
cmd=$(sed -n 's|^savedcmd_[^ ]*rust/rpcrdma.o := ||p' "$cmdfile")
[ -n "$cmd" ] || die "no saved rustc command in $cmdfile"
# Up to Linux 6.12 Kbuild builds an external module from the kernel's tree
# with absolute paths; from 6.13 on, from the module's own directory with
# paths relative to it.
case "$cmd" in
  *" $repo/rust/rpcrdma.rs"*) src=$repo/rust/rpcrdma.rs rundir=$kdir ;;
  *" rust/rpcrdma.rs"*) src=rust/rpcrdma.rs rundir=$repo ;;
  *) die "the saved command does not build rust/rpcrdma.rs" ;;
esac

# Kbuild runs rustc with RUSTC_BOOTSTRAP=1 (the kernel uses unstable options).
export RUSTC_BOOTSTRAP=1

tmp=$(mktemp -d /tmp/rpcrdma-rs-misuse.XXXX)
trap 'rm -rf "$tmp"' EXIT
# Type checking only, into a directory of its own: no object, no dep-info.
base=$(printf '%s' "$cmd" | sed -E \
  -e "s| --out-dir [^ ]+| --out-dir $tmp|" \
  -e 's| --emit=dep-info=[^ ]+||' \
  -e 's| --emit=obj=[^ ]+| --emit=metadata|' \
  -e "s| $src *\$||")

passed=0 failed=0
while IFS= read -r line; do
  file=${line%%:*}
  spec=${line#*// misuse: }
  name=${spec%% *}
  rest=${spec#* }
  expected=${rest%% *}
  text=""
  [ "$expected" = "$rest" ] || text=${rest#* }
  out="$tmp/$name.log"
  (cd "$rundir" && eval "$base --cfg rpcrdma_misuse --cfg 'misuse=\"$name\"' $src") >"$out" 2>&1
  rc=$?
  # Where each error points: the "-->" line after each "error" line.
  # (Relative to the module's directory on 6.13 and later.)
  where=$(awk '/^error/ { e = 1; next } e && /-->/ { print $2; e = 0 }' "$out" | sed -e 's|:.*||' -e "s|^\([^/]\)|$repo/\1|" | sort -u)
  verdict=""
  case "$expected" in
    ok)
      [ $rc = 0 ] || verdict="does not build"
      ;;
    *)
      if [ $rc = 0 ]; then
        verdict="builds: the misuse is not refused"
      elif [ "$expected" = unsafe_code ]; then
        grep -q 'unsafe_code' "$out" || verdict="refused, but not by the unsafe_code lint"
      else
        code=${expected%%,*}
        grep -q "^error\[$code\]" "$out" || verdict="refused, but not with $code"
        allowed=$(printf '%s' "$expected" | tr ',' '|')
        other=$(grep -oE '^error\[E[0-9]+\]' "$out" | grep -vE "^error\[($allowed)\]" | sort -u | sed -E 's/^error\[(E[0-9]+)\]$/\1/' | tr '\n' ' ')
        [ -n "$verdict" ] || [ -z "$other" ] || verdict="refused, but also with $other"
      fi
      if [ -z "$verdict" ] && [ -n "$text" ] && ! grep -qF -- "$text" "$out"; then
        verdict="refused, but the message does not say: $text"
      fi
      if [ -z "$verdict" ] && [ "$where" != "$repo/$file" ]; then
        verdict="errors outside $file: $(echo $where)"
      fi
      ;;
  esac
  if [ -z "$verdict" ]; then
    passed=$((passed + 1)); echo "PASS: $name ($expected, $file)"
  else
    failed=$((failed + 1)); echo "FAIL: $name ($expected, $file): $verdict"
    grep -E '^(error|warning)' -A4 "$out" | head -20 | sed 's/^/    /'
  fi
done < <(grep -rn --include='*.rs' -E '^// misuse: [a-z0-9_]+ [A-Za-z0-9_,]+( .+)?$' rust | sed -E 's/^([^:]+):[0-9]+:/\1:/')

echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
