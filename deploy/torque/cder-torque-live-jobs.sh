#!/bin/sh
# Prints the cder job key (torque:<job id>) of every job this pbs_mom holds,
# one per line, from the job files in $PBS_HOME/mom_priv/jobs/<job id>.JB.
# pbs_mom writes a job's file before it runs the prologue and removes it after
# the epilogue, so the list is exactly the jobs that may hold devices here.
#
#   cder-torque-live-jobs.sh [PBS_HOME]
#
# Fails (exit 1, nothing printed) when the directory cannot be read: an empty
# list would make `cderctl reconcile` free every TORQUE job on the node.
set -eu
pbs_home=${1:-${PBS_HOME:-/var/spool/torque}}
jobs=$pbs_home/mom_priv/jobs
if [ ! -d "$jobs" ] || [ ! -r "$jobs" ] || [ ! -x "$jobs" ]; then
    echo "cder-torque-live-jobs.sh: cannot read $jobs" >&2
    exit 1
fi
for f in "$jobs"/*.JB; do
    [ -e "$f" ] || continue
    id=$(basename "$f" .JB)
    printf 'torque:%s\n' "$id"
done
