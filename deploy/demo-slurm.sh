#!/bin/sh
# A one-node SLURM cluster honouring cder, in a temp dir on 127.0.0.1:
# real slurmctld and slurmd (Debian's slurm-wlm), four fake GPUs, cderd,
# spank_cder.so and job_submit_cder.so; two `sbatch --gpgpu-per-node=2`
# jobs get disjoint GPUs. Needs root (SLURM runs as root here) and the
# packages of deploy/install-deps.sh. Everything stops when it ends.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "demo-slurm.sh: run as root (slurmctld and slurmd run as root in the demo)" >&2
    exit 2
fi
echo "== demo-slurm.sh: building its programs (minutes on a first, cold build) ..."
cargo build -q -j 2 -p spank-cder -p job-submit-cder -p cderd -p cder-demos --bin cder-slurm-demo
target/debug/cder-slurm-demo
echo "== demo-slurm.sh: passed"
