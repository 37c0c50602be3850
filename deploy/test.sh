#!/usr/bin/env bash
# The test suite: unit tests, the differential ClassAd tests against HTCondor,
# and the integration tests that start real cderd, SLURM, slapd, BDII and
# munged on loopback, then a short bounded fuzz run of every parser that
# takes outside input (deploy/fuzz.sh). It first checks formatting
# (cargo fmt --check) and lints (clippy -D warnings). Needs root and
# deploy/install-deps.sh done first.
# Under CI=true a missing component fails the run instead of skipping.
# The run ends with the number of skipped tests and why (each skip appends a
# line to $CDER_SKIPPED_FILE: cder_testkit::skipped, which every crate's tests use).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
CDER_SKIPPED_FILE="$(mktemp "${TMPDIR:-/tmp}/cder-skipped.XXXXXX")"
export CDER_SKIPPED_FILE
skip_summary() {
    local n
    n=$(wc -l < "$CDER_SKIPPED_FILE")
    echo "== skipped tests: $n${CI:+ (CI=$CI)}"
    if [ "$n" -gt 0 ]; then sed 's/^/   /' "$CDER_SKIPPED_FILE"; fi
    rm -f "$CDER_SKIPPED_FILE"
}
trap skip_summary EXIT
# Formatting and lints are gates of this run: rustfmt.toml is the style,
# and a clippy warning fails it (ripgrep's CI, say, gates on rustfmt alone).
# fuzz/ is a cargo workspace of its own (docs/fuzzing.md), so each gate runs
# there too; its targets build on stable, so clippy needs no nightly.
cargo fmt --all --check
cargo fmt --check --manifest-path fuzz/Cargo.toml
# The Debian roots of the newer SLURM releases are made (or found) while
# the workspace builds and tests: mostly downloads, and a minute each.
roots_log=$(mktemp "${TMPDIR:-/tmp}/cder-roots.XXXXXX")
(for release in $(awk '!/^#/ && $3 == "root" {print $1}' deploy/slurm/releases); do
    bash deploy/slurm-root.sh "$release" || exit 1
done) >"$roots_log" 2>&1 &
roots_pid=$!
cargo build --workspace --all-targets --locked
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --manifest-path fuzz/Cargo.toml --all-targets --locked -- -D warnings
cargo test --workspace --locked -- --test-threads="${CDER_TEST_THREADS:-4}"
# Every SLURM release from 22.05 to 26.05 compiles, and cder-slurm's unit
# tests pass with each build (deploy/slurm/releases, docs/slurm.md).
if ! wait "$roots_pid"; then
    cat "$roots_log"
    echo "== the SLURM release roots could not be made" >&2
    exit 1
fi
cat "$roots_log"
bash deploy/slurm-headers.sh
# The SLURM suites that matter for exclusivity and trust run again on each
# release that runs from a Debian root (made or found by
# deploy/slurm-root.sh); the stress test runs shorter there.
mapfile -t suites < <(awk '!/^#/ && NF {print $1 "::"}' deploy/slurm/release-suites)
for release in $(awk '!/^#/ && $3 == "root" {print $1}' deploy/slurm/releases); do
    started=$SECONDS
    CDER_SLURM_RELEASE=$release CDER_STRESS_OPERATIONS=${CDER_STRESS_OPERATIONS:-2} \
        cargo test --locked -p cder-tests --test cluster -- --test-threads=1 "${suites[@]}"
    echo "== SLURM $release: suites passed in $((SECONDS - started)) s"
done
# The packages of each Debian release with a newer SLURM, built in that
# release's root, installed in a throwaway overlay of it and linted by its
# lintian (deploy/test-debs.sh; the host's own are tests/tests/packages.rs).
# Each release is a cold release build in a target dir of its own, about 8
# minutes on 2 cores, more than CI's 40 minutes leave: CDER_DEB_RELEASES
# says which (e.g. 24.11; none by default; docs/packaging.md).
for release in ${CDER_DEB_RELEASES:-}; do
    bash deploy/test-debs.sh "$release"
done
# A bounded run of every fuzz target (docs/fuzzing.md); fails on any crash.
# 5 s a target here (CI's 40 minutes); deploy/fuzz.sh alone runs 15.
CDER_FUZZ_SECONDS=${CDER_FUZZ_SECONDS:-5} bash deploy/fuzz.sh
