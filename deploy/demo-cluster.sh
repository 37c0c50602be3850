#!/bin/sh
# A GPU cluster of three worker hosts honouring cder: each worker in network,
# mount and UTS namespaces of its own (10.77.0.x exists only inside them),
# with its own slurmd, cderd and three fake GPUs; slurmctld on the head host.
# One `sbatch -N 2 --gpgpu-per-node=2` job gets two devices on each of two
# hosts, from each host's own ledger. Needs root and the packages of
# deploy/install-deps.sh. Everything, namespaces included, is removed at the end.
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "demo-cluster.sh: run as root (network namespaces; SLURM runs as root in the demo)" >&2
    exit 2
fi
echo "== demo-cluster.sh: building its programs (minutes on a first, cold build) ..."
cargo build -q -j 2 -p spank-cder -p job-submit-cder -p cderd -p cderctl -p cder-demos --bin cder-cluster-demo
target/debug/cder-cluster-demo
echo "== demo-cluster.sh: passed"
