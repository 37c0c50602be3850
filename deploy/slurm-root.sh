#!/usr/bin/env bash
# Makes (or finds) a Debian root holding one SLURM release, for running and
# building cder against SLURM releases newer than the host's (docs/slurm.md,
# "Supported releases"; tests/src/slurm.rs runs its daemons there):
#
#   deploy/slurm-root.sh RELEASE           prints the root's path on stdout
#   deploy/slurm-root.sh --build RELEASE   the same root, plus what building
#                                          the Debian packages needs
#
# RELEASE is a line of deploy/slurm/releases (24.11 from trixie, 26.05 from
# sid). The root is made with mmdebstrap from the mirror this machine's apt
# sources name, and cached outside the work tree by the hash of what goes
# into it (suite, package list, mirror, the recipe's number):
# $CDER_ROOTS (default /var/cache/cder/slurm-roots)/<suite>-<hash>. A rerun
# finds it in a second; a new machine makes it afresh (about a minute).
# The root's SLURM version is checked against RELEASE: a suite that moved
# on to another SLURM is an error, not a silent change of what is tested.
# A --build root (deploy/build-debs.sh --release RELEASE) is cached apart,
# in $CDER_BUILD_ROOTS (default /var/cache/cder/slurm-build-roots): making
# or replacing it never touches the roots the tests run in.
# Needs root and mmdebstrap (deploy/install-deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: slurm-root.sh [--build] RELEASE (see deploy/slurm/releases)"
build=
if [ "${1:-}" = --build ]; then build=1; shift; fi
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }
release=$1
line=$(awk -v r="$release" '$1 == r && !/^#/' "$here/slurm/releases")
[ -n "$line" ] || { echo "slurm-root.sh: $release is not in $here/slurm/releases" >&2; exit 2; }
read -r _ suite source <<<"$line"
[ "$source" = root ] || { echo "slurm-root.sh: $release runs on the host, not in a root" >&2; exit 2; }
case $suite in
  trixie|forky|sid) ;;
  *) echo "slurm-root.sh: $release: suite $suite has no root recipe" >&2; exit 2 ;;
esac

# What the root holds: the daemons, the commands, the headers and
# libslurmfull the plugins build against, MUNGE, and what the tests' job
# scripts and the packages' test use (python3: the hostile users' helper,
# tests/src/hostile.py, passes descriptors from a job).
packages=(slurmctld slurmd slurm-client libslurm-dev munge
          util-linux procps coreutils python3
          dpkg-dev)
roots=${CDER_ROOTS:-/var/cache/cder/slurm-roots}
if [ -n "$build" ]; then
  # build-essential and deploy/debian/control's Build-Depends, which
  # dpkg-buildpackage checks against the root, and lintian; the Rust
  # toolchain is the host's rustup (build-debs.sh --release).
  packages+=(build-essential fakeroot debhelper libclang-dev clang pkg-config man-db
             slurm-wlm-plugins-dev lintian)
  roots=${CDER_BUILD_ROOTS:-/var/cache/cder/slurm-build-roots}
  # A new root removes the suite's older ones in its folder: a shared
  # folder would lose the test roots.
  [ "$roots" != "${CDER_ROOTS:-/var/cache/cder/slurm-roots}" ] ||
    { echo "slurm-root.sh: CDER_BUILD_ROOTS must not be CDER_ROOTS ($roots)" >&2; exit 2; }
fi
mirror=$( { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null || true; } |
         sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p; s/^deb \(http[^ ]*debian\) .*/\1/p' | head -n 1)
mirror=${mirror:-http://deb.debian.org/debian}
# The recipe: bump it when the way a root is made changes.
recipe=2
key=$( { echo "$recipe $suite $mirror"; printf '%s\n' "${packages[@]}"; } | sha256sum | cut -c1-16)
root=$roots/$suite-$key
if [ ! -f "$root/.cder-root-done" ]; then
  command -v mmdebstrap >/dev/null || { echo "slurm-root.sh: mmdebstrap is not installed (deploy/install-deps.sh)" >&2; exit 1; }
  mkdir -p "$roots"
  tmp=$(mktemp -d "$roots/.$suite-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "slurm-root.sh: making $root ($suite, ${packages[*]}) from $mirror" >&2
  # Package scripts must not start services: the tests start their own.
  # A mirror that serves a frozen copy of sid outlives its Release file's
  # Valid-Until; the signature is still checked.
  mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"'  --include="$(IFS=,; echo "${packages[*]}")" \
    --customize-hook='printf "#!/bin/sh\nexit 101\n" > "$1/usr/sbin/policy-rc.d"; chmod +x "$1/usr/sbin/policy-rc.d"' \
    --essential-hook='mkdir -p "$1/usr/sbin"; printf "#!/bin/sh\nexit 101\n" > "$1/usr/sbin/policy-rc.d"; chmod +x "$1/usr/sbin/policy-rc.d"' \
    "$suite" "$tmp/root" "$mirror" >&2
  rm -rf "$root"
  mv "$tmp/root" "$root"
  touch "$root/.cder-root-done"
  # Roots of this suite made from another recipe are out of date (and
  # some 300 MB each).
  for old in "$roots/$suite"-*; do
    [ "$old" = "$root" ] || rm -rf --one-file-system "$old"
  done
fi
version=$(sed -n 's/^#define SLURM_VERSION_NUMBER 0x\([0-9a-fA-F]*\).*/\1/p' "$root/usr/include/slurm/slurm_version.h")
have=$((16#${version:0:2})).$(printf '%02d' $((16#${version:2:2})))
if [ "$have" != "$release" ]; then
  echo "slurm-root.sh: $suite's root holds SLURM $have, not $release: update deploy/slurm/releases" >&2
  exit 1
fi
echo "$root"
