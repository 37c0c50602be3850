#!/bin/sh
# Builds spank_cder.so and job_submit_cder.so against the installed SLURM
# headers (rebuild after every SLURM major upgrade) and installs them into
# SLURM's plugin folder.
#
#   deploy/slurm/install-plugins.sh [PLUGIN_DIR]
#
# PLUGIN_DIR defaults to Debian's /usr/lib/x86_64-linux-gnu/slurm-wlm.
# `install` removes the old file and writes a new one: never `cp` over a
# plugin that a running slurmctld/slurmd has loaded (it crashes the daemon).
set -eu
cd "$(dirname "$0")/../.."
dir=${1:-/usr/lib/x86_64-linux-gnu/slurm-wlm}
if [ ! -d "$dir" ]; then
    echo "install-plugins.sh: $dir is not a folder (give SLURM's PluginDir)" >&2
    exit 2
fi
cargo build --release -j 2 -p spank-cder -p job-submit-cder
install -m 0755 target/release/libspank_cder.so "$dir/spank_cder.so"
install -m 0755 target/release/libjob_submit_cder.so "$dir/job_submit_cder.so"
echo "installed $dir/spank_cder.so and $dir/job_submit_cder.so"
echo "then: plugstack.conf (deploy/slurm/plugstack.conf), JobSubmitPlugins=cder in slurm.conf; restart slurmctld and slurmd"
