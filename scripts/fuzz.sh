#!/usr/bin/env bash
# Fuzz the protocol core (rust/proto) with cargo-fuzz / libFuzzer.
#
# Usage: scripts/fuzz.sh [TARGET...]
#   With no arguments, every target in rust/proto/fuzz is run in turn.
#   FUZZ_SECONDS (default 60) is the time given to each target.
#
# cargo-fuzz needs nightly-only rustc flags (-Zsanitizer=address); the stable
# toolchain accepts them with RUSTC_BOOTSTRAP=1 and ships the ASan runtime on
# x86_64. Builds keep debug assertions and overflow checks on, as the kernel
# does, so an arithmetic overflow counts as a crash.
#
# Exits non-zero if any target crashes (or fails to build). Crash inputs are
# left in rust/proto/fuzz/artifacts/TARGET/; replay one with
#   cd rust/proto/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run TARGET ARTIFACT
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

fuzz_dir=$(cd "$here/../rust/proto/fuzz" && pwd)
seconds=${FUZZ_SECONDS:-60}
case "$seconds" in
  '' | *[!0-9]*) die "FUZZ_SECONDS must be a whole number of seconds, not '$seconds'" ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

export RUSTC_BOOTSTRAP=1
export RUSTFLAGS="${RUSTFLAGS:-} -Coverflow-checks=on"
cd "$fuzz_dir"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
  [ ${#targets[@]} -gt 0 ] || die "no fuzz targets found in $fuzz_dir"
fi

failed=()
for target in "${targets[@]}"; do
  log "fuzzing $target for ${seconds}s"
  if cargo fuzz run --debug-assertions "$target" -- -max_total_time="$seconds"; then
    log "$target: no crash"
  else
    log "$target: FAILED (exit $?)"
    failed+=("$target")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  die "fuzzing failed for: ${failed[*]} (inputs in $fuzz_dir/artifacts/)"
fi
log "all ${#targets[@]} target(s) ran ${seconds}s without a crash"
