#!/bin/sh
# cder drop-in for BLAH on TORQUE/PBS: BLAH runs this script while it
# writes a PBS batch script and inserts what it prints. The job's CE
# requirements arrive as environment variables (GPGPUPerNode,
# VirtualGPGPUPerNode, VirtualGPGPUMethod, CPUNumber, SMPGranularity,
# HostNumber, WholeNodes). GPUs are asked for TORQUE's own way,
# #PBS -l nodes=1:ppn=1:gpus=2, or, with CDER_PBS_GPUS=maui (MAUI patched
# for generic resources), #PBS -W x=GRES:gpus@2. A bad value makes it print
# one line on stderr and exit 2, so the job is refused.
# Install: deploy/blah/install.sh (or copy into BLAH's libexec directory).
exec "${CDER_JDL:-/usr/bin/cder-jdl}" lrms-attrs --lrms pbs --from-env --pbs-gpus "${CDER_PBS_GPUS:-native}"
