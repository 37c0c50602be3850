#!/bin/sh
# cder drop-in for BLAH (CREAM's BLAH, HTCondor-CE's blahp) writing a
# SLURM batch script. BLAH does not run this file: it writes a throw-away
# /bin/sh script of the job's attributes as unexported assignments
# (GPGPUPerNode='2', VirtualGPGPUMethod="rCUDA", RequestGPUs='1') followed by
# "source <this file>", appends that script's stdout to the batch script,
# sends its stderr to /dev/null and ignores its exit status. So:
#  * the values are read from shell variables, never the environment, and
#    only the keys named below are handed on, each as one argument;
#  * every other variable in this shell may have been set by the job
#    (IFS, PATH, CDER_*): nothing here depends on one. The program and the
#    settings file are fixed paths, written here by deploy/blah/install.sh;
#    cder-jdl refuses a settings file not owned by root or writable by others;
#  * a bad value comes out as a directive the batch system refuses, naming
#    the attribute, so the job stops visibly (cder-jdl lrms-attrs --blah).
# GPGPUPerNode='2' gives #SBATCH --gres=gpu:2.
# POSIX sh; install with deploy/blah/install.sh.
cder_jdl='/usr/bin/cder-jdl'
cder_conf='/etc/cder/blah.conf'
IFS=' '
set -- lrms-attrs --lrms slurm --blah
if [ -e "$cder_conf" ]; then set -- "$@" --config "$cder_conf"; fi
for cder_key in GPGPUPerNode VirtualGPGPUPerNode VirtualGPGPUMethod VirtualGPGPUType CPUNumber SMPGranularity HostNumber WholeNodes RequestGPUs require_gpus gpus_minimum_capability gpus_minimum_memory; do
    # The key is one of the fixed names above, so eval sees only them; the
    # value is expanded once, inside double quotes, and never parsed.
    eval "cder_isset=\${$cder_key+set}"
    if [ "$cder_isset" = set ]; then
        eval "set -- \"\$@\" --attr \"$cder_key=\${$cder_key}\""
    fi
done
/usr/bin/env -i "$cder_jdl" "$@"
