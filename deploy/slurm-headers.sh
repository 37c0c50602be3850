#!/usr/bin/env bash
# Compiles cder's SLURM side (cder-slurm, spank_cder.so, job_submit_cder.so)
# against the public headers of every release in deploy/slurm/releases and
# runs cder-slurm's unit tests with each build (docs/slurm.md, "Supported
# releases"):
#
#   deploy/slurm-headers.sh [RELEASE ...]     (default: every release listed)
#
# Headers come from, in order: the release's Debian root (deploy/slurm-root.sh)
# or the host's /usr/include for the releases that run; otherwise
# $CDER_SLURM_HEADERS/<release>.*/ (default ../shared/slurm-headers beside
# the work tree, then /work/shared/slurm-headers). A release whose headers
# are nowhere is reported, and appended to $CDER_SKIPPED_FILE when the test
# suite runs this. Builds go to $CARGO_TARGET_DIR/slurm-releases (each build
# replaces the last: only the bindings and cder-slurm are rebuilt).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
releases_file=$src/deploy/slurm/releases
if (($#)); then releases=("$@"); else mapfile -t releases < <(awk '!/^#/ && NF {print $1}' "$releases_file"); fi
target=${CARGO_TARGET_DIR:-$src/target}/slurm-releases
candidates=("${CDER_SLURM_HEADERS:-}" "$src/../shared/slurm-headers" /work/shared/slurm-headers)
headers_dir=
for c in "${candidates[@]}"; do
  if [ -n "$c" ] && [ -d "$c" ]; then headers_dir=$(cd "$c" && pwd); break; fi
done

# A folder holding only `slurm/`, as SLURM_INCLUDE_DIR wants (a root's
# /usr/include holds its whole libc too).
include_for() {
  local release=$1 suite source
  read -r _ suite source < <(awk -v r="$release" '$1 == r && !/^#/' "$releases_file")
  case $source in
    host) echo /usr/include ;;
    root)
      local root link
      root=$(bash "$src/deploy/slurm-root.sh" "$release") || return 1
      link=$target/include-$release
      mkdir -p "$link"; ln -sfn "$root/usr/include/slurm" "$link/slurm"
      echo "$link" ;;
    headers)
      [ -n "$headers_dir" ] || return 1
      local d
      d=$(find "$headers_dir" -maxdepth 1 -type d -name "$release.*" | sort -V | tail -n 1)
      [ -n "$d" ] && [ -f "$d/slurm/slurm_version.h" ] || return 1
      echo "$d" ;;
    *) return 1 ;;
  esac
}

failed=() missing=()
for release in "${releases[@]}"; do
  if ! include=$(include_for "$release"); then
    missing+=("$release")
    echo "== SLURM $release: no headers (looked in ${headers_dir:-${candidates[*]}})"
    [ -n "${CDER_SKIPPED_FILE:-}" ] && echo "slurm-headers: SLURM $release not compiled: no headers" >>"$CDER_SKIPPED_FILE"
    continue
  fi
  version=$(sed -n 's/^#define SLURM_VERSION_NUMBER 0x\([0-9a-fA-F]*\).*/\1/p' "$include/slurm/slurm_version.h")
  echo "== SLURM $release (SLURM_VERSION_NUMBER 0x$version, $include)"
  if SLURM_INCLUDE_DIR=$include CARGO_TARGET_DIR=$target cargo build --locked -q -p spank-cder -p job-submit-cder &&
     SLURM_INCLUDE_DIR=$include CARGO_TARGET_DIR=$target cargo test --locked -q -p cder-slurm --lib -- --test-threads=2; then
    echo "== SLURM $release: built, unit tests passed"
  else
    failed+=("$release")
    echo "== SLURM $release: FAILED"
  fi
done
echo "== SLURM releases: ${#releases[@]} listed, ${#failed[@]} failed${failed:+ (${failed[*]})}, ${#missing[@]} without headers${missing:+ (${missing[*]})}"
((${#failed[@]} == 0))
