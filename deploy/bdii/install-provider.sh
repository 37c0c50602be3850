#!/bin/sh
# Installs cder-glue-provider as a GIP provider of a site BDII.
#
# bdii-update runs every executable in its provider directory
# (BDII_PROVIDER_DIR, /var/lib/bdii/gip/provider by default) once per cycle
# and loads the LDIF it prints. This script puts the binary in PREFIX/bin,
# the example config in place if none exists, and a one-line wrapper in the
# provider directory that runs the provider with that config.
#
# Usage: deploy/bdii/install-provider.sh [--binary PATH] [--prefix DIR]
#            [--provider-dir DIR] [--config FILE]
# Defaults: --binary target/release/cder-glue-provider (built if missing),
#           --prefix /usr/local, --provider-dir /var/lib/bdii/gip/provider,
#           --config /etc/cder/glue-provider.toml
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
binary=
prefix=/usr/local
provider_dir=/var/lib/bdii/gip/provider
config=/etc/cder/glue-provider.toml

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "$1"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --prefix) prefix=$2; shift 2 ;;
        --provider-dir) provider_dir=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "install-provider.sh: unknown option $1" >&2; usage 2 >&2 ;;
    esac
done

if [ -z "$binary" ]; then
    binary=$repo/target/release/cder-glue-provider
    [ -x "$binary" ] || (cd "$repo" && cargo build --release -p cder-glue-provider)
fi
[ -x "$binary" ] || { echo "install-provider.sh: $binary is not an executable" >&2; exit 2; }
[ -d "$provider_dir" ] || { echo "install-provider.sh: provider directory $provider_dir does not exist (is bdii installed?)" >&2; exit 2; }

install -d "$prefix/bin"
install -m 0755 "$binary" "$prefix/bin/cder-glue-provider"

if [ ! -e "$config" ]; then
    install -d "$(dirname "$config")"
    install -m 0644 "$here/glue-provider.example.toml" "$config"
    echo "installed an example config at $config: edit it for this site"
fi

# bdii-update runs the provider through the shell with its own environment;
# the wrapper pins the config so that nothing depends on that environment.
wrapper=$provider_dir/cder-glue-provider
tmp=$wrapper.tmp.$$
cat > "$tmp" <<WRAPPER
#!/bin/sh
# cder GLUE 2.0 provider (installed by cder deploy/bdii/install-provider.sh).
exec "$prefix/bin/cder-glue-provider" --config "$config"
WRAPPER
chmod 0755 "$tmp"
mv "$tmp" "$wrapper"

# Check the installed provider once, so a broken config shows now and not as
# a silent gap in the BDII.
if "$wrapper" > /dev/null; then
    echo "cder-glue-provider installed: $wrapper"
else
    echo "install-provider.sh: the provider is installed at $wrapper but failed its first run (see above)" >&2
    exit 1
fi
