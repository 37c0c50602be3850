#!/bin/sh
# The CE side of the ARC path (docs/arc.md): the ENV/GPGPU runtime
# environment run by A-REX's own stage-0 code (nordugrid-arc-arex's
# submit_common.sh, what submit-SLURM-job calls before it writes the batch
# script). A job asking (runtimeenvironment="ENV/GPGPU" "2") gets the
# #SBATCH line job_submit_cder.so counts; a bad count stops the submission
# with a readable reason. No daemon is started; everything is in a temp dir.
# The grid side (`cder-jdl submit --via arc`) is shown by
# `cargo test -p cder-tests --test arc_rte`, which needs a BDII.
set -eu
cd "$(dirname "$0")/.."
common=/usr/share/arc/submit_common.sh
if [ ! -r "$common" ]; then
    echo "demo-arc.sh: $common missing: install nordugrid-arc-arex (deploy/install-deps.sh)" >&2
    exit 1
fi
controldir=$(mktemp -d /tmp/cder-demo-arc.XXXXXX)
trap 'rm -rf "$controldir"' EXIT
# What `arcctl rte enable ENV/GPGPU` does: a link under <controldir>/rte/enabled.
mkdir -p "$controldir/rte/enabled/ENV"
ln -s "$PWD/deploy/arc/ENV/GPGPU" "$controldir/rte/enabled/ENV/GPGPU"

stage0() {
    echo "\$ xRSL (runtimeenvironment=\"ENV/GPGPU\" \"$1\") -> A-REX stage 0 -> batch script line:"
    sh -c '. "$1"; CONFIG_controldir=$2; joboption_runtime_0=ENV/GPGPU; joboption_runtime_0_1=$3
           RTE_stage0
           # the node-property line exactly as submit-SLURM-job joins it
           line="#SBATCH"; i=0
           while eval "[ -n \"\${joboption_nodeproperty_$i+set}\" ]"; do eval "line=\"\$line \$joboption_nodeproperty_$i\""; i=$((i+1)); done
           echo "  $line"' sh "$common" "$controldir" "$1" 2>&1 || echo "  (exit $?: A-REX fails the job; the reason above lands in <controldir>/job.ID.errors)"
}
stage0 2
stage0 0
stage0 4097
