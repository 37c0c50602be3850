#!/bin/sh
# The ARC path (docs/arc.md), in two parts. First the CE side alone: the
# ENV/GPGPU runtime environment run by A-REX's own stage-0 code
# (nordugrid-arc-arex's submit_common.sh, what submit-SLURM-job calls before
# it writes the batch script): a job asking (runtimeenvironment="ENV/GPGPU"
# "2") gets the #SBATCH line job_submit_cder.so counts; a bad count stops
# the submission with a readable reason. Then, as root, the whole path on a
# real ARC CE (target/debug/cder-arc-demo): ARC's LDAP infosys showing
# cder's GPU keys, `cder-jdl list-match` and `submit --via arc`, the real
# arcsub, A-REX, SLURM with four fake GPUs and cderd, arcstat and arcget.
# Everything runs in temp dirs on 127.0.0.1 and stops when it ends.
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
ln -s "$PWD/deploy/arc/ENV/VGPGPU" "$controldir/rte/enabled/ENV/VGPGPU"

stage0() {
    rte=$1; shift
    echo "\$ xRSL (runtimeenvironment=\"$rte\" $*) -> A-REX stage 0 -> batch script line:"
    sh -c '. "$1"; CONFIG_controldir=$2; joboption_runtime_0=$3; shift 3
           k=1; for a in "$@"; do eval "joboption_runtime_0_$k=\$a"; k=$((k+1)); done
           RTE_stage0
           # the node-property line exactly as submit-SLURM-job joins it
           line="#SBATCH"; i=0
           while eval "[ -n \"\${joboption_nodeproperty_$i+set}\" ]"; do eval "line=\"\$line \$joboption_nodeproperty_$i\""; i=$((i+1)); done
           echo "  $line"' sh "$common" "$controldir" "$rte" "$@" 2>&1 || echo "  (exit $?: A-REX fails the job; the reason above lands in <controldir>/job.ID.errors)"
}
stage0 ENV/GPGPU 2
stage0 ENV/GPGPU 0
stage0 ENV/GPGPU 4097
stage0 ENV/VGPGPU 3 VCL
stage0 ENV/VGPGPU 3 cuda

if [ "$(id -u)" -ne 0 ]; then
    echo "(run as root to see the whole path on a real ARC CE: target/debug/cder-arc-demo)"
    exit 0
fi
echo "== demo-arc.sh: building its programs (minutes on a first, cold build) ..."
cargo build -q -j 2 -p spank-cder -p job-submit-cder -p cderd -p cder-glue-provider -p cder-jdl -p cder-demos --bin cder-arc-demo
target/debug/cder-arc-demo
echo "== demo-arc.sh: passed"
