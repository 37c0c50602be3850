#!/usr/bin/env bash
# Installs cder's TORQUE hooks on a worker node (run as root).
#
#   deploy/torque/install-mom-hooks.sh [--pbs-home DIR] [--bindir DIR] [--libexec DIR]
#                                      [--user-hooks] [--configure] [--force]
#                                      [--config FILE] [--torque-config FILE]
#
#   --pbs-home DIR  TORQUE's home (default $PBS_HOME, else /var/spool/torque)
#   --bindir DIR    where the built binaries are (default target/release)
#   --libexec DIR   where cder's TORQUE binaries go (default /usr/libexec/cder);
#                   cder-env goes to /usr/bin unless --libexec is given
#   --user-hooks    also install prologue.user / epilogue.user (report devices
#                   and device-seconds into the job's output)
#   --configure     add the $job_starter line to mom_priv/config (idempotent)
#   --force         replace existing hooks that are not cder's
#   --config FILE, --torque-config FILE
#                   the node keeps cder.toml / torque.toml elsewhere than
#                   /etc/cder: $job_starter then names a wrapper,
#                   mom_priv/cder-job-starter (root:root 0755), that passes
#                   them on the job starter's command line. The job starter
#                   runs in the job's environment, so it never reads
#                   CDER_CONFIG or CDER_TORQUE_CONFIG.
#
# mom_priv gets a COPY of cder-torque-hook under each hook name, owned by
# root:root, mode 0500 (the .user hooks 0505): pbs_mom refuses hooks that
# anyone but root can write, and runs each by its file name, which is how the
# binary knows what to do. Re-running is safe.
set -euo pipefail

pbs_home=${PBS_HOME:-/var/spool/torque}
bindir=target/release
libexec=/usr/libexec/cder
userbin=/usr/bin
user_hooks=0
configure=0
force=0
cder_config=
torque_config=
while [ $# -gt 0 ]; do
    case "$1" in
        --pbs-home) pbs_home=$2; shift 2 ;;
        --bindir) bindir=$2; shift 2 ;;
        --libexec) libexec=$2; userbin=$2; shift 2 ;;
        --user-hooks) user_hooks=1; shift ;;
        --configure) configure=1; shift ;;
        --force) force=1; shift ;;
        --config) cder_config=$2; shift 2 ;;
        --torque-config) torque_config=$2; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
        *) echo "install-mom-hooks.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ "$(id -u)" -ne 0 ]; then
    echo "install-mom-hooks.sh: must run as root (hooks must be owned by root)" >&2
    exit 1
fi
for b in cder-torque-hook cder-job-starter cder-env cder-torque-submit-filter cder-torque-reconcile; do
    if [ ! -x "$bindir/$b" ]; then
        echo "install-mom-hooks.sh: $bindir/$b not found; build with: cargo build --release -p cder-torque" >&2
        exit 1
    fi
done
mom_priv=$pbs_home/mom_priv
if [ ! -d "$mom_priv" ]; then
    echo "install-mom-hooks.sh: $mom_priv does not exist (is this a TORQUE worker node? see --pbs-home)" >&2
    exit 1
fi

install -d -o root -g root -m 0755 "$libexec"
install -o root -g root -m 0755 "$bindir/cder-torque-hook" "$libexec/cder-torque-hook"
install -o root -g root -m 0755 "$bindir/cder-job-starter" "$libexec/cder-job-starter"
install -o root -g root -m 0755 "$bindir/cder-torque-submit-filter" "$libexec/cder-torque-submit-filter"
install -o root -g root -m 0755 "$bindir/cder-torque-reconcile" "$libexec/cder-torque-reconcile"
install -d -o root -g root -m 0755 "$userbin"
install -o root -g root -m 0755 "$bindir/cder-env" "$userbin/cder-env"

hooks="prologue prologue.parallel epilogue epilogue.parallel epilogue.precancel"
[ "$user_hooks" = 1 ] && hooks="$hooks prologue.user epilogue.user"
for h in $hooks; do
    dest=$mom_priv/$h
    if [ -e "$dest" ] && [ "$force" != 1 ] && ! cmp -s "$dest" "$bindir/cder-torque-hook" \
        && ! grep -qaF "cder's pbs_mom prologue and epilogue" "$dest"; then
        echo "install-mom-hooks.sh: $dest exists and is not cder's; call cder from it" \
             "(see docs/torque.md, \"Sites with their own prologue\") or use --force" >&2
        exit 1
    fi
    case "$h" in *.user) mode=0505 ;; *) mode=0500 ;; esac
    install -o root -g root -m "$mode" "$bindir/cder-torque-hook" "$dest"
    echo "installed $dest ($mode)"
done

starter=$libexec/cder-job-starter
if [ -n "$cder_config$torque_config" ]; then
    # Root's paths on root's command line; sh -c quoting of each path.
    quote() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
    starter=$mom_priv/cder-job-starter
    {
        echo '#!/bin/sh'
        echo '# cder job starter with this node'"'"'s files (install-mom-hooks.sh); root-owned:'
        echo '# the job runs it in its own environment, so the paths live here, not there.'
        printf 'exec %s' "$(quote "$libexec/cder-job-starter")"
        [ -n "$cder_config" ] && printf ' --config %s' "$(quote "$cder_config")"
        [ -n "$torque_config" ] && printf ' --torque-config %s' "$(quote "$torque_config")"
        printf ' -- "$@"\n'
    } >"$starter.new"
    chown root:root "$starter.new"
    chmod 0755 "$starter.new"
    mv -f "$starter.new" "$starter"
    echo "installed $starter (0755)"
fi
line="\$job_starter $starter"
if [ "$configure" = 1 ]; then
    config=$mom_priv/config
    touch "$config"
    if grep -q '^\$job_starter' "$config"; then
        if ! grep -qxF "$line" "$config"; then
            echo "install-mom-hooks.sh: $config already sets another \$job_starter; not changed" >&2
            exit 1
        fi
    else
        printf '%s\n' "$line" >>"$config"
        echo "added to $config: $line  (restart pbs_mom, or momctl -r, to apply)"
    fi
else
    echo "add to $mom_priv/config and restart pbs_mom:"
    echo "    $line"
fi
echo "on every submit host, add to torque.cfg (usually $pbs_home/torque.cfg):"
echo "    SUBMITFILTER $libexec/cder-torque-submit-filter"
echo "and on this node, reconcile from cron (/etc/cron.d/cder-torque-reconcile):"
echo "    */10 * * * * root $libexec/cder-torque-reconcile --pbs-home $pbs_home"
