#!/bin/sh
# One SLURM job using GPUs from two "nodes" through the cder vGPGPU registry:
# a real munged and cder-registryd, cder-vgpgpu-factory on two GPU "nodes"
# (127.0.3.2 and 127.0.3.3, two fake GPUs each, a small TCP server per GPU
# standing in for an rCUDA server in a container), and a real one-node SLURM
# cluster whose node has ONE GPU running `sbatch --vgpgpu-per-node=3`.
# Needs root and the packages of deploy/install-deps.sh. Everything stops
# when it ends.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "demo-vgpgpu.sh: run as root (SLURM and munged run as root in the demo)" >&2
    exit 2
fi
# Two builds: the SLURM plugins alone link the registry's light client (built
# together with cder-registry's binaries, cargo would unify its features).
echo "== demo-vgpgpu.sh: building its programs (minutes on a first, cold build) ..."
cargo build -q -j 2 -p spank-cder -p job-submit-cder -p cderd
cargo build -q -j 2 -p cder-registry -p cderctl -p cder-demos -p cder-tests --bin cder-vgpgpu-demo --bin cder-test-vgpgpu-backend
target/debug/cder-vgpgpu-demo
echo "== demo-vgpgpu.sh: passed"
