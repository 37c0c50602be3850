#!/bin/sh
# Frees the devices of TORQUE jobs pbs_mom no longer holds: the safety net
# behind an epilogue whose release failed (cderd down, a timeout). Run it from
# cron on every worker node, e.g. /etc/cron.d/cder-torque-reconcile:
#
#   */10 * * * * root /usr/libexec/cder/cder-torque-reconcile.sh
#
# Only jobs of TORQUE (--lrms torque) are considered; when the job list
# cannot be read nothing is released.
set -eu
here=$(dirname "$0")
live=$(mktemp)
trap 'rm -f "$live"' EXIT
"$here/cder-torque-live-jobs.sh" "$@" >"$live"
cderctl reconcile --live-jobs "$live" --lrms torque
