#!/bin/sh
# What ENV/GPGPU adds to A-REX's stage 0, measured side by side in one run:
# A-REX's own RTE_stage0 (nordugrid-arc-arex's submit_common.sh) for a job
# with (runtimeenvironment="ENV/GPGPU" "2") against the same call for a job
# with an enabled RTE whose script is `true` (the reference: ARC's lookup and
# sourcing, no work). Rounds alternate; prints per-call means and the difference.
#   sh deploy/arc/bench-stage0.sh [ROUNDS]   (default 200)
set -eu
cd "$(dirname "$0")/../.."
rounds=${1:-200}
common=/usr/share/arc/submit_common.sh
[ -r "$common" ] || { echo "bench-stage0.sh: $common missing (nordugrid-arc-arex)" >&2; exit 1; }
d=$(mktemp -d /tmp/cder-arc-bench.XXXXXX)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/rte/enabled/ENV"
ln -s "$PWD/deploy/arc/ENV/GPGPU" "$d/rte/enabled/ENV/GPGPU"
echo true >"$d/noop"; ln -s "$d/noop" "$d/rte/enabled/ENV/NOOP"
run() { # $1: RTE name, $2: rounds; one shell, so only stage 0 is timed
    sh -c '. "$1"; CONFIG_controldir=$2; n=$4
           s=$(date +%s%N); i=0
           while [ $i -lt $n ]; do
               unset joboption_nodeproperty_0
               joboption_runtime_0=$3; joboption_runtime_0_1=2
               RTE_stage0 2>/dev/null
               i=$((i+1))
           done
           e=$(date +%s%N); echo $(( (e - s) / n ))' sh "$common" "$d" "$1" "$2"
}
ref=0; rte=0; k=0
while [ $k -lt 5 ]; do
    ref=$((ref + $(run ENV/NOOP $((rounds / 5))))); rte=$((rte + $(run ENV/GPGPU $((rounds / 5)))))
    k=$((k + 1))
done
ref=$((ref / 5)); rte=$((rte / 5))
echo "RTE_stage0, $rounds calls each: no-op RTE $((ref / 1000)) us, ENV/GPGPU $((rte / 1000)) us, added $(((rte - ref) / 1000)) us per job"
