#!/usr/bin/env bash
# Builds every cder Debian package from this workspace:
#
#   deploy/build-debs.sh [OUTDIR]                   (default: target/debian)
#   deploy/build-debs.sh --release RELEASE [OUTDIR] (default: target/debian-RELEASE)
#
# Copies deploy/debian/ to OUTDIR/build/cder/debian/ and runs
# dpkg-buildpackage -b there; cargo builds the sources in place (CDER_SRC),
# into CARGO_TARGET_DIR (default: target/), so a second run rebuilds only
# what changed. The .deb files (the -dbgsym ones too) land in OUTDIR.
# CDER_DEB_COMPRESSION (e.g. "-Zgzip -z1") overrides dpkg-deb's compression.
# Needs the build dependencies of deploy/debian/control (deploy/install-deps.sh).
#
# --release builds for a SLURM release of deploy/slurm/releases: the host's
# own (22.05, bookworm) here, a newer one (24.11, trixie) inside its Debian
# root (deploy/slurm-root.sh --build), so that the plugins get that SLURM's
# headers and libslurmfull and every binary that Debian release's libc.
# The root runs the host's rustup toolchain ($CARGO_HOME, $RUSTUP_HOME)
# and builds into CARGO_TARGET_DIR/slurm-RELEASE, apart from the host's.
# Needs root and mmdebstrap there.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: build-debs.sh [--release RELEASE] [OUTDIR]"
release=
if [ "${1:-}" = --release ]; then
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    release=$2
    shift 2
fi
case ${1:-} in -*) echo "$usage" >&2; exit 2 ;; esac
[ $# -le 1 ] || { echo "$usage" >&2; exit 2; }

if [ -n "$release" ]; then
    line=$(awk -v r="$release" '$1 == r && !/^#/' "$src/deploy/slurm/releases")
    [ -n "$line" ] || { echo "build-debs.sh: $release is not in deploy/slurm/releases" >&2; exit 2; }
    read -r _ suite source <<<"$line"
    out=${1:-$src/target/debian-$release}
    case $source in
    host)
        # The host's libslurm-dev is what debian/rules builds against.
        have=$(dpkg-query -W -f='${Version}' libslurm-dev 2>/dev/null | sed -E 's/^([0-9]+:)?([0-9]+\.[0-9]+).*/\2/')
        [ "$have" = "$release" ] || { echo "build-debs.sh: the host's libslurm-dev is ${have:-not installed}, not $release" >&2; exit 1; }
        exec "$0" "$out" ;;
    root) ;;
    *) echo "build-debs.sh: no Debian release ships SLURM $release (only its headers are tested): nothing to package" >&2; exit 2 ;;
    esac
    root=$("$src/deploy/slurm-root.sh" --build "$release")
    cargo_home=${CARGO_HOME:-$HOME/.cargo}
    rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
    [ -x "$cargo_home/bin/cargo" ] || { echo "build-debs.sh: no cargo in $cargo_home/bin (rustup) to build with in the $suite root" >&2; exit 1; }
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    target=${CARGO_TARGET_DIR:-$src/target}/slurm-$release
    mkdir -p "$target"
    # The crates come from the host's cargo cache: fetched here, read
    # offline inside, where nothing sets up the network.
    (cd "$src" && "$cargo_home/bin/cargo" fetch --locked --quiet)
    binds="$src $cargo_home $rustup_home"
    for p in "$out" "$target"; do
        case $p/ in "$src"/*) ;; *) binds="$binds $p" ;; esac
    done
    # A clean environment: only what the build needs crosses into the root.
    pass=()
    for v in CARGO_BUILD_JOBS DEB_BUILD_OPTIONS CDER_DEB_COMPRESSION CARGO_TERM_COLOR; do
        if [ -n "${!v:-}" ]; then pass+=("$v=${!v}"); fi
    done
    echo "build-debs.sh: building for SLURM $release in $root" >&2
    CDER_ROOT_BINDS=$binds "$src/deploy/slurm/in-root.sh" "$root" "$src" /usr/bin/env -i \
        HOME="$HOME" LANG=C.UTF-8 PATH="$cargo_home/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        CARGO_HOME="$cargo_home" RUSTUP_HOME="$rustup_home" CARGO_NET_OFFLINE=true \
        CARGO_TARGET_DIR="$target" "${pass[@]}" \
        bash deploy/build-debs.sh "$out"
    exit
fi

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
