#!/bin/sh
# Runs a program inside a SLURM release's Debian root (deploy/slurm-root.sh),
# as the tests, the benchmark and build-debs.sh run that release's daemons,
# commands and compilers:
#
#   deploy/slurm/in-root.sh ROOT DIR PROGRAM [ARG ...]
#
# PROGRAM runs in DIR, chrooted to ROOT, in a mount namespace of its own
# that sees the host's /proc, /sys (cgroups included), /dev and /tmp, where
# the tests keep their configs, plugins and cderd's socket, and the host's
# /etc/hosts. The namespace
# goes away with its last process: nothing stays mounted on the host. The
# process keeps this script's pid (every step execs), so killing it kills
# PROGRAM. Needs root.
# CDER_ROOT_BINDS, a space-separated list of absolute host folders, binds
# each at the same path inside (build-debs.sh --release: the workspace and
# the host's rustup toolchain); an empty folder is made there for it.
set -eu
[ $# -ge 3 ] || { echo "usage: in-root.sh ROOT DIR PROGRAM [ARG ...]" >&2; exit 2; }
exec unshare --mount --propagation slave -- /bin/sh -c '
  set -e
  root=$1; shift
  for m in proc sys dev tmp; do mount --rbind "/$m" "$root/$m"; done
  # The host'"'"'s names: slurmctld resolves the submit host (this machine'"'"'s
  # hostname), and a root made elsewhere cannot know it (10 s stalls).
  [ -e "$root/etc/hosts" ] || : > "$root/etc/hosts"
  mount --bind /etc/hosts "$root/etc/hosts"
  set -f
  for p in ${CDER_ROOT_BINDS:-}; do
    case $p in /*) ;; *) echo "in-root.sh: CDER_ROOT_BINDS: $p is not absolute" >&2; exit 2 ;; esac
    mkdir -p "$root$p"; mount --rbind "$p" "$root$p"
  done
  exec chroot "$root" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$@"' in-root "$@"
