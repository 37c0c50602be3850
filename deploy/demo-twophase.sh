#!/bin/sh
# Two-phase grid submission that lands on the local SLURM: a BDII (real
# slapd with Debian's BDII config and the GLUE schemas) holding four GPU CEs
# published by cder-glue-provider, a one-node SLURM cluster (real
# slurmctld/slurmd, four fake GPUs, cderd, spank_cder.so, job_submit_cder.so),
# then `cder-jdl list-match`, `cder-jdl submit --dry-run` and
# `cder-jdl submit --via slurm`; the job prints the two GPUs it got.
# Needs root and the packages of deploy/install-deps.sh. Everything runs in
# a temp dir on 127.0.0.1 and stops when it ends.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "demo-twophase.sh: run as root (slurmctld and slurmd run as root in the demo)" >&2
    exit 2
fi
echo "== demo-twophase.sh: building its programs (minutes on a first, cold build) ..."
cargo build -q -j 2 -p spank-cder -p job-submit-cder -p cderd -p cder-glue-provider -p cder-jdl -p cder-demos --bin cder-twophase-demo
target/debug/cder-twophase-demo
echo "== demo-twophase.sh: passed"
