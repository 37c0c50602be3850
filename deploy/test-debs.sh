#!/usr/bin/env bash
# The packages of a SLURM release that runs from a Debian root (docs/packaging.md,
# "Which package for which SLURM"): built there, installed there, linted there.
#
#   deploy/test-debs.sh RELEASE        (e.g. 24.11: trixie)
#
# deploy/build-debs.sh --release RELEASE builds them into a temp folder;
# all nine are installed with dpkg -i into an overlay of the build root
# (its upper layer in a temp folder, mounted in a mount namespace of its
# own), so the cached root stays as it was; there the installed cderd and
# cder-jdl run, the plugins must be in SLURM's plugin folder, resolve
# their libraries and export this SLURM's release, cder-slurm must depend
# on it, and the release's own lintian must report no error and no warning.
# deploy/test.sh runs it; tests/tests/packages.rs tests the host's packages.
# Without root, unshare, mmdebstrap or cargo it skips (a line in
# $CDER_SKIPPED_FILE); under CI=true it fails instead.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 1 ] || { echo "usage: test-debs.sh RELEASE" >&2; exit 2; }
release=$1
packages=(cder-common cder-node cder-slurm cder-torque cder-glue-provider cder-jdl cder-vgpgpu cder-arc cder-blah)
started=$SECONDS

missing=()
[ "$(id -u)" = 0 ] || missing+=("root privileges")
for p in unshare mmdebstrap; do command -v "$p" >/dev/null || missing+=("$p"); done
[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ] || missing+=("cargo in ${CARGO_HOME:-$HOME/.cargo}/bin")
if [ ${#missing[@]} -gt 0 ]; then
    message="test-debs.sh $release: missing $(IFS=,; echo "${missing[*]}" | sed 's/,/, /g') (deploy/install-deps.sh)"
    if [ "${CI:-}" = true ]; then echo "CI=true and $message" >&2; exit 1; fi
    echo "SKIPPED: $message" >&2
    if [ -n "${CDER_SKIPPED_FILE:-}" ]; then echo "$message" >> "$CDER_SKIPPED_FILE"; fi
    exit 0
fi

root=$("$src/deploy/slurm-root.sh" --build "$release")
echo "== test-debs $release: build root ready at $((SECONDS - started)) s" >&2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cder-debs-$release.XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
# xz takes a minute on the -dbgsym packages and gains nothing there.
CDER_DEB_COMPRESSION=${CDER_DEB_COMPRESSION:--Zgzip -z1} \
    "$src/deploy/build-debs.sh" --release "$release" "$tmp/debs" >&2
echo "== test-debs $release: packages built at $((SECONDS - started)) s" >&2
debs=()
dbgsym=()
shopt -s nullglob
for p in "${packages[@]}" cder-node-dbgsym cder-slurm-dbgsym; do
    deb=("$tmp/debs/${p}_"*.deb)
    [ ${#deb[@]} -eq 1 ] || { echo "test-debs.sh: $p was not built in $tmp/debs" >&2; exit 1; }
    # lintian looks at the -dbgsym ones too; dpkg -i installs the nine.
    case $p in *-dbgsym) dbgsym+=("${deb[0]}") ;; *) debs+=("${deb[0]}") ;; esac
done
shopt -u nullglob

# What debian/rules computed: the SLURM this build's plugins load into.
next=$(echo "$release" | awk -F. '{ printf "%d.%02d", $1, $2 + 1 }')
want="slurm-wlm-basic-plugins (>= $release), slurm-wlm-basic-plugins (<< $next~)"
depends=$(dpkg-deb -f "${debs[2]}" Depends)
case $depends in *"$want"*) ;; *) echo "test-debs.sh: cder-slurm depends on '$depends', not on '$want'" >&2; exit 1 ;; esac

# Inside the overlay: install, run, look, lint; $tmp, bound at the same
# path, brings the packages and this script.
cat > "$tmp/check.sh" <<'EOF'
set -euo pipefail
release=$1 ndebs=$2; shift 2
log=$(dirname "$0")/dpkg.log
dpkg -i "${@:1:ndebs}" > "$log" 2>&1 || { cat "$log"; echo "dpkg -i of the packages failed" >&2; exit 1; }
for p in "${@:1:ndebs}"; do
    name=$(dpkg-deb -f "$p" Package)
    [ "$(dpkg-query -W -f='${Status}' "$name")" = "install ok installed" ] || { echo "$name is not installed" >&2; exit 1; }
done
/usr/sbin/cderd --version
/usr/bin/cder-jdl --version
plugins=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/slurm-wlm
[ -f "$plugins/auth_munge.so" ] || { echo "$plugins is not this SLURM's plugin folder" >&2; exit 1; }
for so in spank_cder job_submit_cder; do
    f=$plugins/$so.so
    [ -f "$f" ] || { echo "$f is not installed" >&2; exit 1; }
    if ldd "$f" | grep 'not found'; then echo "$f: libraries not found" >&2; exit 1; fi
    # SLURM loads a plugin whose plugin_version is its own major.minor.
    addr=$(nm -D --defined-only "$f" | awk '$3 == "plugin_version" { print $1 }')
    [ -n "$addr" ] || { echo "$f exports no plugin_version" >&2; exit 1; }
    bytes=$(objdump -s --start-address=0x"$addr" --stop-address=$((0x$addr + 4)) "$f" | awk '$1 ~ /^[0-9a-f]+$/ && length($2) == 8 { print $2; exit }')
    [ ${#bytes} -eq 8 ] || { echo "$f: cannot read plugin_version" >&2; exit 1; }
    major=$((16#${bytes:4:2})); minor=$((16#${bytes:2:2}))
    [ "$major.$(printf %02d "$minor")" = "$release" ] || { echo "$f is built for SLURM $major.$minor, not $release" >&2; exit 1; }
    echo "$f: plugin_version $major.$(printf %02d "$minor")"
done
lintian --version
lintian --fail-on error,warning "$@"
EOF
mkdir -p "$tmp/upper" "$tmp/work" "$tmp/merged"
unshare --mount --propagation private -- /bin/sh -c '
    set -e
    mount -t overlay cder-debs -o lowerdir="$1",upperdir="$2/upper",workdir="$2/work" "$2/merged"
    shift 2
    exec "$@"' overlay "$root" "$tmp" \
    env CDER_ROOT_BINDS="$tmp" "$src/deploy/slurm/in-root.sh" "$tmp/merged" / bash "$tmp/check.sh" "$release" ${#debs[@]} "${debs[@]}" "${dbgsym[@]}"
echo "== test-debs $release: installed, run and linted in $((SECONDS - started)) s" >&2
