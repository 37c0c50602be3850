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
#                   /etc/cder: /etc/cder/cder.toml and torque.toml become
#                   root-owned links to them (an existing file there is
#                   kept unless --force). The job starter runs in the job's
#                   environment, so it never reads CDER_CONFIG or
#                   CDER_TORQUE_CONFIG, and no wrapper script may run before
#                   it (see docs/torque.md, "The job's loader variables").
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

# Set-group-ID to a group of its own, which it drops first thing: the loader
# then runs it in secure-execution mode and ignores the job's LD_PRELOAD,
# LD_LIBRARY_PATH, LD_AUDIT …, which would otherwise run before it.
getent group cder-starter >/dev/null || groupadd --system cder-starter
chown root:cder-starter "$libexec/cder-job-starter"
chmod 2755 "$libexec/cder-job-starter"
echo "installed $libexec/cder-job-starter (root:cder-starter 2755)"
starter=$libexec/cder-job-starter
# Other paths: root-owned links in /etc/cder, never a wrapper script (its
# /bin/sh, not set-ID, would load the job's LD_PRELOAD before the starter).
link_config() { # FILE NAME
    local dest=/etc/cder/$2
    [ -n "$1" ] || return 0
    if [ -L "$dest" ] && [ "$(readlink "$dest")" = "$1" ]; then return 0; fi
    if { [ -e "$dest" ] || [ -L "$dest" ]; } && [ "$force" != 1 ]; then
        echo "install-mom-hooks.sh: $dest exists; the job starter reads only /etc/cder: remove it, or use --force to replace it by a link to $1" >&2
        exit 1
    fi
    install -d -o root -g root -m 0755 /etc/cder
    ln -sfn "$1" "$dest"
    echo "linked $dest -> $1"
}
link_config "$cder_config" cder.toml
link_config "$torque_config" torque.toml
if [ -e "$mom_priv/cder-job-starter" ] && grep -qaF "install-mom-hooks.sh" "$mom_priv/cder-job-starter"; then
    echo "install-mom-hooks.sh: $mom_priv/cder-job-starter is an old wrapper script, open to the job's LD_PRELOAD: point \$job_starter in mom_priv/config at $starter, then remove it" >&2
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
