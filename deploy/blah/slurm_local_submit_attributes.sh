#!/bin/sh
# cder drop-in for BLAH (CREAM / ARC-CE with BLAH): BLAH runs this script
# while it writes a SLURM batch script and inserts what it prints. The job's
# CE requirements arrive as environment variables (GPGPUPerNode,
# VirtualGPGPUPerNode, VirtualGPGPUMethod, CPUNumber, SMPGranularity,
# HostNumber, WholeNodes); cder-jdl prints the matching #SBATCH lines
# (GPGPUPerNode=2 -> #SBATCH --gres=gpu:2) and export lines. A bad value
# makes it print one line on stderr and exit 2, so the job is refused.
# Install: deploy/blah/install.sh (or copy into BLAH's libexec directory).
exec "${CDER_JDL:-/usr/bin/cder-jdl}" lrms-attrs --lrms slurm --from-env ${CDER_SLURM_GRES:+--gres "$CDER_SLURM_GRES"}
