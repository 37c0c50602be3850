#!/usr/bin/env bash
# The test suite: unit tests, the differential ClassAd tests against HTCondor,
# and the integration tests that start real cderd, SLURM, slapd, BDII and
# munged on loopback, then a short bounded fuzz run of every parser that
# takes outside input (deploy/fuzz.sh). It first checks formatting
# (cargo fmt --check) and lints (clippy -D warnings). Needs root and
# deploy/install-deps.sh done first (it installs cargo-nextest, which runs
# the tests: one process per test, a JUnit report under target/nextest/).
#
# One failure hides nothing: every step runs whatever failed before it, and
# the run ends with the failed steps, each step's time, the ten slowest
# tests and the skipped ones, and exits 1 if any step failed.
# Under CI=true a missing component fails the run instead of skipping.
# Each skip appends a line to $CDER_SKIPPED_FILE (cder_testkit::skipped,
# which every crate's tests use).
#
#   CDER_TEST_BESIDE_LOAD=N  run the whole suite beside N CPU-bound busy
#                            loops and a writer that fsyncs 64 MiB at a time
#                            (docs/testing.md, "Beside load")
#   CDER_TEST_THREADS        tests run side by side (default 4)
#   CDER_DEB_RELEASES        the Debian releases whose packages are built
#                            and linted in their roots (default none)
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
CDER_SKIPPED_FILE="$(mktemp "${TMPDIR:-/tmp}/cder-skipped.XXXXXX")"
export CDER_SKIPPED_FILE
reports=target/nextest/ci
load_pids=()
failed=()
timings=()

stop_load() {
    ((${#load_pids[@]})) || return 0
    kill "${load_pids[@]}" 2>/dev/null
    wait "${load_pids[@]}" 2>/dev/null
    load_pids=()
}
skip_summary() {
    local n
    n=$(wc -l < "$CDER_SKIPPED_FILE")
    echo "== skipped tests: $n${CI:+ (CI=$CI)}"
    if [ "$n" -gt 0 ]; then sed 's/^/   /' "$CDER_SKIPPED_FILE"; fi
    rm -f "$CDER_SKIPPED_FILE"
}
trap 'stop_load; skip_summary' EXIT

# The load a busy node puts beside the tests: N shells spinning and one
# writer forcing data to disk, for the whole run. Tests must pass beside it;
# one that fails only here is a race in the product or a wrong wait in the test.
load=${CDER_TEST_BESIDE_LOAD:-0}
case $load in '' | *[!0-9]*) echo "test.sh: CDER_TEST_BESIDE_LOAD must be a number of busy loops, not '$load'" >&2; exit 2 ;; esac
if ((load > 0)); then
    for ((i = 0; i < load; i++)); do
        bash -c 'while :; do :; done' &
        load_pids+=($!)
    done
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/cder-load.XXXXXX")
    bash -c 'trap "rm -rf \"$1\"" EXIT; while :; do dd if=/dev/zero of="$1/fill" bs=1M count=64 conv=fsync status=none; rm -f "$1/fill"; done' _ "$scratch" &
    load_pids+=($!)
    echo "== beside load: $load busy loops and an fsyncing writer (pids ${load_pids[*]})"
fi

# ended NAME RC STARTED: records a step's time and verdict.
ended() {
    local name=$1 rc=$2 took=$((SECONDS - $3))
    timings+=("$(printf '%6d s  %s' $took "$name")")
    if (($2 != 0)); then
        failed+=("$name (exit $2)")
        echo "== step $name: FAILED (exit $2) after $took s"
    else
        echo "== step $name: passed in $took s"
    fi
}

# step NAME COMMAND...: runs it, records its time, and goes on if it fails.
step() {
    local name=$1 started=$SECONDS rc=0
    shift
    echo "== step $name: $*"
    "$@" || rc=$?
    ended "$name" $rc "$started"
}

# step_beside NAME COMMAND...: starts a step in the background, its output
# kept for step_joined NAME, which waits for it, prints it and records it
# as step does. For CPU-bound steps (release builds) that can run while the
# SLURM tests mostly wait on their daemons: the suites hold beside load.
declare -A beside_pid beside_log beside_started
step_beside() {
    local name=$1
    shift
    beside_log[$name]=$(mktemp "${TMPDIR:-/tmp}/cder-step-$name.XXXXXX")
    beside_started[$name]=$SECONDS
    echo "== step $name (beside the next steps): $*"
    # Its own end is kept, so its time is its own, not its wait to be joined.
    ("$@"; rc=$?; echo $SECONDS >"${beside_log[$name]}.end"; exit $rc) >"${beside_log[$name]}" 2>&1 &
    beside_pid[$name]=$!
}
step_joined() {
    local name=$1 rc=0 took
    wait "${beside_pid[$name]}" || rc=$?
    echo "== step $name: its output"
    cat "${beside_log[$name]}"
    took=$(($(cat "${beside_log[$name]}.end" 2>/dev/null || echo $SECONDS) - ${beside_started[$name]}))
    rm -f "${beside_log[$name]}" "${beside_log[$name]}.end"
    ended "$name" $rc $((SECONDS - took))
}

# fuzz/ gates and runs: its lints (clippy -D warnings of its own workspace),
# then a bounded run of every fuzz target (docs/fuzzing.md), failing on any
# crash; 5 s a target here (CI's 40 minutes), deploy/fuzz.sh alone runs 15.
# Both run whatever the other did; each says its time.
fuzz_steps() {
    local rc=0 started=$SECONDS
    cargo clippy --manifest-path fuzz/Cargo.toml --all-targets --locked -- -D warnings || rc=$?
    echo "== clippy-fuzz: exit $rc after $((SECONDS - started)) s"
    started=$SECONDS
    CDER_FUZZ_SECONDS=${CDER_FUZZ_SECONDS:-5} bash deploy/fuzz.sh || rc=$?
    echo "== fuzz: exit $rc after $((SECONDS - started)) s"
    return $rc
}

# nextest NAME [--profile P] ARGS...: a nextest run (profile ci unless
# told) whose JUnit report is kept as $reports/junit-NAME.xml for the
# slowest-tests list.
nextest() {
    local name=$1 rc=0
    shift
    local profile=ci
    if [ "${1:-}" = --profile ]; then profile=$2; shift 2; fi
    cargo nextest run --locked --profile "$profile" --no-tests=fail "$@" || rc=$?
    local report=target/nextest/$profile/junit.xml
    if [ -f "$report" ]; then mv "$report" "$reports/junit-$name.xml"; fi
    return $rc
}

if ! cargo nextest --version >/dev/null 2>&1; then
    echo "test.sh: cargo-nextest is not installed (run deploy/install-deps.sh)" >&2
    exit 1
fi
rm -f "$reports"/junit*.xml

# Formatting and lints are gates of this run: rustfmt.toml is the style,
# and a clippy warning fails it (ripgrep's CI, say, gates on rustfmt alone).
# fuzz/ is a cargo workspace of its own (docs/fuzzing.md), so each gate runs
# there too; its targets build on stable, so clippy needs no nightly.
step fmt cargo fmt --all --check
step fmt-fuzz cargo fmt --check --manifest-path fuzz/Cargo.toml
# The Debian roots of the newer SLURM releases are made (or found) while
# the workspace builds and tests: mostly downloads, and a minute each.
roots_log=$(mktemp "${TMPDIR:-/tmp}/cder-roots.XXXXXX")
(for release in $(awk '!/^#/ && $3 == "root" {print $1}' deploy/slurm/releases); do
    bash deploy/slurm-root.sh "$release" || exit 1
done) >"$roots_log" 2>&1 &
roots_pid=$!
step build cargo build --workspace --all-targets --locked
step clippy cargo clippy --workspace --all-targets --locked -- -D warnings
# Fuzzing's release build and runs go beside the workspace's tests, whose
# length is the serial chain of SLURM clusters, mostly waiting on daemons.
step_beside fuzz fuzz_steps
# The packages test runs beside the release suites (below).
step tests nextest workspace --workspace --test-threads "${CDER_TEST_THREADS:-4}" -E 'not binary_id(cder-tests::packages)'
step doctests cargo test --workspace --doc --locked
# Every SLURM release from 22.05 to 26.05 compiles, and cder-slurm's unit
# tests pass with each build (deploy/slurm/releases, docs/slurm.md).
roots() {
    local rc=0
    wait "$roots_pid" || rc=$?
    cat "$roots_log"
    ((rc == 0)) || echo "== the SLURM release roots could not be made" >&2
    return $rc
}
step roots roots
step headers bash deploy/slurm-headers.sh
# The SLURM suites that matter for exclusivity and trust run again on each
# release that runs from a Debian root (made or found by
# deploy/slurm-root.sh); the stress test runs shorter there.
mapfile -t suites < <(awk '!/^#/ && NF {print $1 "::"}' deploy/slurm/release-suites)
# Beside them, the Debian packages built, linted, installed and run
# (tests/tests/packages.rs): a release build, then an install on this
# machine whose SLURM part waits for the suites' cluster through
# cder_tests::slurm::serial(); apart from the workspace's tests, because
# TORQUE's tests lay their own /etc/cder over the host's.
step_beside packages nextest packages --profile ci-packages -p cder-tests --test packages
for release in $(awk '!/^#/ && $3 == "root" {print $1}' deploy/slurm/releases); do
    CDER_SLURM_RELEASE=$release CDER_STRESS_OPERATIONS=${CDER_STRESS_OPERATIONS:-2} \
        step "slurm-$release" nextest "slurm-$release" -p cder-tests --test cluster --test-threads 1 "${suites[@]}"
done
# The packages of each Debian release with a newer SLURM, built in that
# release's root, installed in a throwaway overlay of it and linted by its
# lintian (deploy/test-debs.sh; the host's own are tests/tests/packages.rs).
# Each release is a cold release build in a target dir of its own, about 8
# minutes on 2 cores, more than CI's 40 minutes leave: CDER_DEB_RELEASES
# says which (e.g. 24.11; none by default; docs/packaging.md).
for release in ${CDER_DEB_RELEASES:-}; do
    step "debs-$release" bash deploy/test-debs.sh "$release"
done
step_joined packages
step_joined fuzz
stop_load

echo "== the ten slowest tests"
python3 deploy/slowest-tests.py 10 "$reports"/junit-*.xml
echo "== time of each step"
printf '   %s\n' "${timings[@]}"
if ((${#failed[@]})); then
    echo "== FAILED steps: ${failed[*]}"
    echo "   (each failed test is listed above, after its step; JUnit reports in $reports/)"
    exit 1
fi
echo "== every step passed in $SECONDS s${CDER_TEST_BESIDE_LOAD:+ (beside load $load)}"
