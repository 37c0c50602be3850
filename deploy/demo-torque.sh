#!/usr/bin/env bash
# The TORQUE path of the cder demo (run as root): a real cderd with four
# GPUs, cder's pbs_mom hooks installed into a scratch mom_priv/ by
# deploy/torque/install-mom-hooks.sh, and each hook run exactly as pbs_mom
# runs it (env -i, stdin /dev/null, its argument layout; the job starter as
# the job's user). TORQUE itself is not packaged here: this script plays
# qsub's and pbs_mom's parts. Everything lives in a temp dir and is removed.
#
#   sudo deploy/demo-torque.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ "$(id -u)" -ne 0 ]; then echo "demo-torque.sh: run as root (pbs_mom runs hooks as root)" >&2; exit 1; fi
work=$(mktemp -d /tmp/cder-demo-torque.XXXXXX)
chmod 0755 "$work"
cderd_pid=
cleanup() { [ -n "$cderd_pid" ] && kill "$cderd_pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '\033[2m$ %s\033[0m\n' "$*"; }

step "Building cderd, cderctl and the TORQUE hooks"
cargo build --quiet -p cderd -p cderctl -p cder-torque
bin=${CARGO_TARGET_DIR:-$root/target}/debug

# The node: deploy/cder.example.toml's four Tesla K20m, socket and state in $work.
sed -e "s|^socket = .*|socket = \"$work/run/cderd.sock\"|" \
    -e "s|^state_dir = .*|state_dir = \"$work/state\"|" \
    -e "s|^operators = .*|operators = []|" \
    -e 's|^drain_node = .*|drain_node = "off"   # the demo has no pbs_server|' deploy/cder.example.toml >"$work/cder.toml"
printf '[torque]\ndirective = "native"\ncderd_timeout_s = 3\n' >"$work/torque.toml"
chmod 0644 "$work/cder.toml" "$work/torque.toml"
export CDER_CONFIG=$work/cder.toml CDER_TORQUE_CONFIG=$work/torque.toml

start_cderd() {
    "$bin/cderd" --config "$CDER_CONFIG" 2>>"$work/cderd.log" &
    cderd_pid=$!
    for _ in $(seq 100); do "$bin/cderctl" status >/dev/null 2>&1 && return; sleep 0.1; done
    echo "cderd did not start:"; cat "$work/cderd.log"; exit 1
}
start_cderd

step "Installing the hooks into a scratch \$PBS_HOME/mom_priv"
mkdir -p "$work/torque/mom_priv/jobs" "$work/torque/aux"
deploy/torque/install-mom-hooks.sh --pbs-home "$work/torque" --bindir "$bin" --libexec "$work/libexec" --user-hooks --configure
ls -l "$work/torque/mom_priv"

# pbs_mom's way of running a hook: empty environment (but for the two config
# paths a real node keeps in /etc/cder), stdin /dev/null, cwd mom_priv.
hook() {
    local name=$1; shift
    show "mom_priv/$name $*"
    local rc=0
    (cd "$work/torque/mom_priv" && env -i CDER_CONFIG="$CDER_CONFIG" CDER_TORQUE_CONFIG="$CDER_TORQUE_CONFIG" "./$name" "$@" </dev/null) || rc=$?
    case "$name:$rc" in
        prologue*:0) echo "   -> exit 0: pbs_mom runs the job" ;;
        prologue*:1) echo "   -> exit 1: pbs_mom aborts the job" ;;
        prologue*:*) echo "   -> exit $rc: pbs_mom requeues the job" ;;
        *) echo "   -> exit $rc" ;;
    esac
}
prologue() { hook prologue "$1" nobody nogroup demo-job "$2" batch ""; }
epilogue() { hook epilogue "$1" nobody nogroup demo-job 4242 "nodes=1" "walltime=00:00:05" batch "" 0; }

step "qsub's submit filter: GPGPUPerNode=2 becomes the site's directive"
cat >"$work/job.sh" <<'JOB'
#!/bin/sh
#PBS -N gromacs-angle1
#PBS -l nodes=1:ppn=4
#PBS -v GPGPUPerNode=2
./deviceQuery
JOB
show "cder-torque-submit-filter < job.sh            (native TORQUE)"
"$work/libexec/cder-torque-submit-filter" <"$work/job.sh"
show "cder-torque-submit-filter < job.sh            (MAUI, as in the thesis)"
CDER_TORQUE_CONFIG=<(printf '[torque]\ndirective = "maui"\n') "$work/libexec/cder-torque-submit-filter" <"$work/job.sh"
show "qsub -v GPGPUPerNode=two job.sh"
"$work/libexec/cder-torque-submit-filter" -v GPGPUPerNode=two job.sh <"$work/job.sh" || echo "   -> exit $?: qsub refuses the job"
show "a device mark written by hand (#PBS -l other=cder:gpgpu:4): TORQUE never counts it"
printf '#!/bin/sh\n#PBS -l nodes=1:ppn=1,other=cder:gpgpu:4\n./grab\n' |
    "$work/libexec/cder-torque-submit-filter" || echo "   -> exit $?: qsub refuses the job"
show "a Latin-1 comment does not end qsub's directives: the over-limit request after it is refused"
printf '#!/bin/sh\n# r\351sum\351\n#PBS -l nodes=1:ppn=1:gpus=999\n./run\n' |
    "$work/libexec/cder-torque-submit-filter" || echo "   -> exit $?: qsub refuses the job"

step "Two jobs with gpus=2 each get disjoint devices"
prologue 17.ce.example.org "neednodes=1:ppn=4:gpus=2,nodes=1:ppn=4:gpus=2,walltime=01:00:00"
prologue 18.ce.example.org "neednodes=1:ppn=4:gpus=2,nodes=1:ppn=4:gpus=2,walltime=01:00:00"
"$bin/cderctl" status

step "A third job, while they run: devices busy, so it is requeued"
prologue 19.ce.example.org "nodes=1:ppn=1:gpus=1"
step "A job asking for more than the node has: aborted"
prologue 20.ce.example.org "nodes=1:ppn=1:gpus=8"
step "A hand-written mark reaching pbs_mom anyway: ignored, the job gets no devices"
prologue 21.ce.example.org "nodes=1:ppn=1,other=cder:gpgpu:4"

step "The job starter, as the job's user (nobody), sees exactly its own devices"
# $job_starter takes no arguments, and the starter reads /etc/cder only (never
# CDER_CONFIG from the job's environment; options only from root). The demo
# must not write the host's /etc, so the job's user runs it in a mount
# namespace whose /etc has the node's files laid over it.
mkdir -p "$work/etc/cder"
ln -sf "$CDER_CONFIG" "$work/etc/cder/cder.toml"
ln -sf "$CDER_TORQUE_CONFIG" "$work/etc/cder/torque.toml"
printf '#!/bin/sh\nexec unshare --mount --propagation private -- /bin/sh -c '"'"'mount -t overlay cder-etc -o ro,lowerdir=%s:/etc /etc && exec "$@"'"'"' sh "$@"\n' \
    "$work/etc" >"$work/with-etc-cder"
chmod 0755 "$work/with-etc-cder"
show "setpriv --reuid=nobody cder-job-starter /bin/sh -sh  <<< 'env | grep VISIBLE'   (PBS_JOBID=17.ce.example.org)"
echo 'id -un; env | grep -E "^CUDA_(VISIBLE_DEVICES|DEVICE_ORDER)="' |
    env -i PBS_JOBID=17.ce.example.org PATH=/usr/bin:/bin \
    "$work/with-etc-cder" setpriv --reuid=65534 --regid=65534 --clear-groups -- "$work/libexec/cder-job-starter" /bin/sh -sh
show "the same, as root (pbs_mom with \$job_starter_run_privileged): refused"
echo 'id -un' | env -i PBS_JOBID=17.ce.example.org PATH=/usr/bin:/bin \
    "$work/libexec/cder-job-starter" /bin/sh -sh || echo "   -> exit $?: the job does not run"
show "the same, as another user (uid 65533)"
echo 'env | grep -E "^CUDA_VISIBLE_DEVICES="' |
    env -i PBS_JOBID=17.ce.example.org PATH=/usr/bin:/bin \
    "$work/with-etc-cder" setpriv --reuid=65533 --regid=65533 --clear-groups -- "$work/libexec/cder-job-starter" /bin/sh -sh \
    || echo "   -> exit $?: not this user's job, so it cannot be confined; the job does not run"
show 'eval "$(cder-env --shell)"   (for sites without a job starter)'
env -i PBS_JOBID=18.ce.example.org \
    setpriv --reuid=65534 --regid=65534 --clear-groups -- "$work/libexec/cder-env" --shell --config "$CDER_CONFIG"

step "Job 17 ends: its epilogue releases; the requeued job 19 now runs on the GPU TORQUE assigned it"
epilogue 17.ce.example.org
gpu=$("$bin/cderctl" status | awk '/gpgpu/ && /free/ {print $2; exit}' | tr -dc '0-9')
gpu=${gpu:-0}
mkdir -p "$work/torque/aux"
echo "$(hostname)-gpu$gpu" >"$work/torque/aux/19.ce.example.orggpu"
show "\$PBS_HOME/aux/19.ce.example.orggpu (PBS_GPUFILE, written by pbs_mom from exec_gpus): $(hostname)-gpu$gpu"
prologue 19.ce.example.org "nodes=1:ppn=1:gpus=1"
"$bin/cderctl" status

step "cderd is down when job 18 ends: the epilogue logs it and exits 0 (node stays up)"
kill "$cderd_pid"; wait "$cderd_pid" 2>/dev/null || true; cderd_pid=
epilogue 18.ce.example.org
start_cderd
"$bin/cderctl" status
step "reconcile with pbs_mom's live jobs (mom_priv/jobs/*.JB) frees job 18's devices"
mkdir -p "$work/torque/mom_priv/jobs"
printf '<?xml version="1.0"?>\n<job><jobid>19.ce.example.org</jobid><state>4</state></job>\n' >"$work/torque/mom_priv/jobs/19.ce.example.org.JB"
show "cder-torque-reconcile --pbs-home \$PBS_HOME   (generation first, then the .JB snapshot)"
"$work/libexec/cder-torque-reconcile" --pbs-home "$work/torque"
"$bin/cderctl" status
echo
echo "== demo-torque.sh: passed"
