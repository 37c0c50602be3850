#!/bin/sh
# Installs cder's BLAH drop-ins into BLAH's libexec directory (argument, or
# /usr/libexec/blah, or /usr/libexec). An existing script that is not
# cder's is kept as <name>.orig-cder. Idempotent.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
dest="${1:-}"
if [ -z "$dest" ]; then
    for d in /usr/libexec/blah /usr/libexec; do
        if [ -d "$d" ]; then dest="$d"; break; fi
    done
fi
if [ -z "$dest" ] || [ ! -d "$dest" ]; then
    echo "install.sh: no BLAH libexec directory; give it as the argument" >&2
    exit 2
fi
for f in slurm_local_submit_attributes.sh pbs_local_submit_attributes.sh; do
    target="$dest/$f"
    if [ -f "$target" ] && ! grep -q "cder drop-in" "$target" && [ ! -e "$target.orig-cder" ]; then
        cp -p "$target" "$target.orig-cder"
    fi
    install -m 0755 "$here/$f" "$target"
    echo "installed $target"
done
