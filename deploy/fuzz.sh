#!/usr/bin/env bash
# A short, bounded libFuzzer run of every fuzz target (fuzz/, cargo-fuzz):
# builds them all once, then runs each for CDER_FUZZ_SECONDS from its seed
# corpus (fuzz/corpus/<target>/, read only: new inputs go to a temp dir).
# Fails when any target crashes, panics, leaks past the RSS limit or hangs
# past the per-input timeout, and prints the input that did it.
# deploy/test.sh runs it after cargo test; docs/fuzzing.md says how to run
# a long campaign. Needs cargo-fuzz (deploy/install-deps.sh installs it).
#
#   CDER_FUZZ_SECONDS     seconds per target (default 15)
#   CDER_FUZZ_TARGETS     space-separated targets (default: all of them)
#   CDER_FUZZ_TARGET_DIR  cargo target dir (default: $CARGO_TARGET_DIR/fuzz, else fuzz/target)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds=${CDER_FUZZ_SECONDS:-15}
case $seconds in '' | *[!0-9]*) echo "fuzz.sh: CDER_FUZZ_SECONDS must be a whole number of seconds, not '$seconds'" >&2; exit 2 ;; esac
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: cargo-fuzz is not installed (run deploy/install-deps.sh)" >&2
  exit 1
fi
target_dir=${CDER_FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/fuzz}}
target_dir=${target_dir:-$PWD/target}
# The stable toolchain: no sanitizer (-Z flags need nightly). The code under
# test is safe Rust, so the bugs to find are panics, overflows (checked:
# cargo-fuzz builds with debug assertions), hangs and memory blow-ups.
build=(-s none --target-dir "$target_dir")
if [ -n "${CDER_FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$CDER_FUZZ_TARGETS"
else
  mapfile -t targets < <(cargo fuzz list)
fi

echo "fuzz.sh: building ${#targets[@]} targets"
cargo fuzz build "${build[@]}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for t in "${targets[@]}"; do
  [ -d "corpus/$t" ] || { echo "fuzz.sh: no seed corpus fuzz/corpus/$t" >&2; failed+=("$t"); continue; }
  mkdir -p "$work/$t" "artifacts/$t"
  echo "fuzz.sh: $t for ${seconds}s"
  if ! cargo fuzz run "${build[@]}" "$t" "$work/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$work/$t.log" 2>&1; then
    tail -n 40 "$work/$t.log" >&2
    for a in "artifacts/$t"/*; do
      [ -f "$a" ] || continue
      echo "fuzz.sh: $t: failing input fuzz/$a (base64): $(base64 -w0 "$a")" >&2
    done
    failed+=("$t")
  else
    grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$work/$t.log" | tr '\n' ' ' || true
    echo
  fi
done

# The closing line in the plain "N passed, N failed" form test runners use.
if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED: ${failed[*]} (reproduce: cd fuzz && cargo fuzz run -s none TARGET ARTIFACT; docs/fuzzing.md)" >&2
  echo "fuzz: $((${#targets[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
  exit 1
fi
echo "fuzz: ${#targets[@]} passed, 0 failed"
