#!/usr/bin/env bash
# Builds every cder Debian package from this workspace:
#
#   deploy/build-debs.sh [OUTDIR]      (default: target/debian)
#
# Copies deploy/debian/ to OUTDIR/build/cder/debian/ and runs
# dpkg-buildpackage -b there; cargo builds the sources in place (CDER_SRC),
# into CARGO_TARGET_DIR (default: target/), so a second run rebuilds only
# what changed. The .deb files (the -dbgsym ones too) land in OUTDIR.
# CDER_DEB_COMPRESSION (e.g. "-Zgzip -z1") overrides dpkg-deb's compression.
# Needs the build dependencies of deploy/debian/control (deploy/install-deps.sh).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/target/debian}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=$out/build/cder
rm -rf "$tree"
mkdir -p "$tree"
cp -a "$src/deploy/debian" "$tree/debian"
export CDER_SRC=$src
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$src/target}
(cd "$tree" && dpkg-buildpackage -b -us -uc --no-pre-clean)
# dpkg-buildpackage writes the packages next to the build tree.
for f in "$out"/build/*.deb "$out"/build/*.buildinfo "$out"/build/*.changes; do
    [ -e "$f" ] && mv -f "$f" "$out/"
done
ls -1 "$out"/*.deb
