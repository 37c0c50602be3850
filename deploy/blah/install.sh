#!/bin/sh
# Installs cder's BLAH drop-ins into BLAH's libexec directory.
#   install.sh [--cder-jdl PATH] [--config PATH] [DEST]
# DEST defaults to /usr/libexec/blah or /usr/libexec. The program
# (default /usr/bin/cder-jdl) and the site settings file (default
# /etc/cder/blah.conf, root-owned, see docs/htcondor-ce.md) are written
# into the installed scripts as fixed paths: a job's attributes share the
# drop-in's shell, so nothing there may come from a variable. An existing
# script that is not cder's is kept as <name>.orig-cder. Idempotent.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
cder_jdl=/usr/bin/cder-jdl
conf=/etc/cder/blah.conf
dest=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cder-jdl) cder_jdl="${2:?--cder-jdl needs a path}"; shift 2 ;;
        --config) conf="${2:?--config needs a path}"; shift 2 ;;
        -*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
        *) dest="$1"; shift ;;
    esac
done
for p in "$cder_jdl" "$conf"; do
    case "$p" in
        /*) ;;
        *) echo "install.sh: $p: an absolute path is needed" >&2; exit 2 ;;
    esac
    case "$p" in
        *[!A-Za-z0-9/._-]*) echo "install.sh: $p: only letters, digits and / . _ - may be used" >&2; exit 2 ;;
    esac
done
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
    tmp="$target.cder-new"
    sed -e "s#^cder_jdl='/usr/bin/cder-jdl'\$#cder_jdl='$cder_jdl'#" -e "s#^cder_conf='/etc/cder/blah.conf'\$#cder_conf='$conf'#" "$here/$f" > "$tmp"
    chmod 0755 "$tmp"
    mv "$tmp" "$target"
    echo "installed $target ($cder_jdl, settings $conf)"
done
