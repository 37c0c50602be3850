#!/bin/bash
# Checks cder against a real NVIDIA driver: NVML discovery, MIG mode,
# CUDA_VISIBLE_DEVICES through cderd, device-cgroup enforcement, and what
# the driver's MPS control daemon and NVML's utilisation calls really answer
# (the fake NVML and the fake MPS control daemon imitate these answers).
#
# Run as root on a GPU node, with release builds of cderd and cderctl in
# $BIN (default: target/release). Changes no GPU setting: compute mode and
# MIG mode are only read. Prints a report; writes it to $OUT/report.txt too.
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-$(mktemp -d)}
T=$(mktemp -d /tmp/cder-gpu.XXXXXX)
exec > >(tee "$OUT/report.txt") 2>&1
step() { echo; echo "=== $*"; }
py=$(command -v python3)

step "driver"
nvidia-smi -L
nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id,compute_mode,mig.mode.current,driver_version,compute_cap --format=csv
ls -l /dev/nvidia* 2>&1 | head -20
grep -E 'nvidia' /proc/devices
uname -r; stat -fc %T /sys/fs/cgroup

cat >"$T/cder.toml" <<TOML
[node]
socket = "$T/cderd.sock"
state_dir = "$T/state"
operators = []
[node.enforcement]
cgroup = "auto"
cgroup_parent = "cder-gpu-check"
[node.usage]
sample_period_s = 1
idle_after_s = 5
[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "nvml"
visible_ids = "uuid"
TOML
export CDER_CONFIG=$T/cder.toml

step "cderctl inventory (NVML through nvml-wrapper)"
"$BIN/cderctl" inventory
"$BIN/cderctl" inventory --json > "$T/inventory.json"; cat "$T/inventory.json"
$py - "$T/inventory.json" <<'PY'
import json, subprocess, sys
inv = json.load(open(sys.argv[1]))
smi = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,memory.total,pci.bus_id", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True).stdout.strip().splitlines()
ok = len(inv) == len(smi)
for line, d in zip(smi, inv):
    idx, uuid, mem, bus = [x.strip() for x in line.split(",")]
    same = d["uuid"] == uuid and int(d["index"]) == int(idx) and int(d["memory_mib"]) == int(mem)
    print(f"inventory vs nvidia-smi: index {idx} uuid {'same' if same else 'DIFFERENT'}; memory {d['memory_mib']} MB vs {mem} MiB; bus {bus}")
    ok &= same
print("DISCOVERY", "OK" if ok else "MISMATCH")
PY

step "cderd with the real NVML"
"$BIN/cderd" --config "$T/cder.toml" --check
"$BIN/cderd" --config "$T/cder.toml" > "$T/cderd.log" 2>&1 &
CDERD=$!
for i in $(seq 50); do [ -S "$T/cderd.sock" ] && break; sleep 0.1; done
"$BIN/cderctl" alloc --job local:gpu-a --uid 0 --count 1 | tee "$T/a.env"
"$BIN/cderctl" alloc --job local:gpu-b --uid 0 --count 1; echo "second alloc of the only GPU: rc=$? (expected non-zero)"
"$BIN/cderctl" status

step "CUDA_VISIBLE_DEVICES inside job a (torch)"
"$BIN/cderctl" confine --job local:gpu-a -- $py -c '
import os, torch
print("CUDA_VISIBLE_DEVICES=", os.environ.get("CUDA_VISIBLE_DEVICES"))
print("torch sees", torch.cuda.device_count(), "device(s)")
if torch.cuda.device_count():
    p = torch.cuda.get_device_properties(0); print("name", p.name, "uuid", p.uuid)
    x = torch.ones(1024, device="cuda"); print("kernel ran, sum", float(x.sum()))
'
echo "confine a: rc=$?"

step "a job without the GPU: device cgroup enforcement"
"$BIN/cderctl" release --job local:gpu-a
"$BIN/cderctl" alloc --job local:gpu-a --uid 0 --count 1 >/dev/null
# Job c holds no device: every NVIDIA device number is denied in its groups.
"$BIN/cderctl" alloc --job local:gpu-c --uid 0 --count 0; echo "alloc of 0 devices: rc=$?"
"$BIN/cderctl" confine --job local:gpu-c -- sh -c 'cat /proc/self/cgroup; exec 3</dev/nvidia0 && echo "OPENED /dev/nvidia0 (NOT FENCED)" || echo "open /dev/nvidia0 refused (fenced)"'
"$BIN/cderctl" confine --job local:gpu-c -- env CUDA_VISIBLE_DEVICES=0 $py -c '
import torch
try:
    print("torch in job c sees", torch.cuda.device_count(), "device(s)"); torch.ones(1, device="cuda"); print("KERNEL RAN IN JOB C (NOT FENCED)")
except Exception as e:
    print("CUDA refused in job c:", type(e).__name__, str(e)[:200])
'
"$BIN/cderctl" release --job local:gpu-a; "$BIN/cderctl" release --job local:gpu-c

step "usage sampling: job u keeps the GPU busy for 12 s, job v holds it idle afterwards"
"$BIN/cderctl" alloc --job local:gpu-u --uid 0 --count 1 >/dev/null
if [ -x "$BIN/cder-exporter" ]; then "$BIN/cder-exporter" --listen 127.0.0.1:9400 --job-labels > "$T/exporter.log" 2>&1 & EXPORTER=$!; fi
"$BIN/cderctl" confine --job local:gpu-u -- $py -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 12
while time.time() < end:
    for _ in range(20): a @ a
    torch.cuda.synchronize()
' &
LOADU=$!
sleep 6
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
[ -n "${EXPORTER:-}" ] && curl -s -H 'Accept: application/openmetrics-text' http://127.0.0.1:9400/metrics | grep -E '^(DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED|cder_job_active)' | head -6
wait $LOADU
"$BIN/cderctl" usage --job local:gpu-u
"$BIN/cderctl" usage --job local:gpu-u --json
"$BIN/cderctl" release --job local:gpu-u
"$BIN/cderctl" alloc --job local:gpu-v --uid 0 --count 1 >/dev/null
sleep 8
"$BIN/cderctl" status; "$BIN/cderctl" usage --job local:gpu-v
"$BIN/cderctl" release --job local:gpu-v
[ -n "${EXPORTER:-}" ] && kill $EXPORTER
kill $CDERD; wait $CDERD; echo "cderd log:"; tail -20 "$T/cderd.log"

step "NVML utilisation and per-process answers under load (nvidia-ml-py)"
$py - <<'PY' &
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 12
while time.time() < end:
    for _ in range(20): a @ a
    torch.cuda.synchronize(); time.sleep(0.05)
PY
LOAD=$!
sleep 5
$py - <<'PY'
import pynvml as n, time
n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
for i in range(3):
    u = n.nvmlDeviceGetUtilizationRates(h); m = n.nvmlDeviceGetMemoryInfo(h)
    print(f"utilization gpu={u.gpu}% memory={u.memory}% used={m.used>>20} MiB")
    time.sleep(1)
for p in n.nvmlDeviceGetComputeRunningProcesses(h):
    print("compute process pid", p.pid, "usedGpuMemory", p.usedGpuMemory)
try:
    for s in n.nvmlDeviceGetProcessUtilization(h, int((time.time() - 3) * 1e6)):
        print("process utilization pid", s.pid, "sm", s.smUtil, "mem", s.memUtil, "ts", s.timeStamp)
except n.NVMLError as e:
    print("nvmlDeviceGetProcessUtilization:", e)
try:
    print("accounting mode", n.nvmlDeviceGetAccountingMode(h))
except n.NVMLError as e:
    print("accounting mode:", e)
print("mig mode", n.nvmlDeviceGetMigMode(h))
print("compute mode", n.nvmlDeviceGetComputeMode(h))
PY
wait $LOAD

step "MPS control daemon: what it answers"
export CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe CUDA_MPS_LOG_DIRECTORY=$T/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
if command -v nvidia-cuda-mps-control >/dev/null; then
  nvidia-cuda-mps-control -d; echo "mps -d rc=$?"
  for c in get_default_active_thread_percentage "set_default_active_thread_percentage 25" get_default_active_thread_percentage \
           "set_default_device_pinned_mem_limit 0 2G" "get_default_device_pinned_mem_limit 0" get_server_list; do
    printf '%s -> ' "$c"; echo "$c" | nvidia-cuda-mps-control; echo " (rc=$?)"
  done
  CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 $py -c 'import torch; x=torch.ones(1,device="cuda"); print("client under MPS ran:", float(x.sum()))'
  $py -c 'import torch; x=torch.ones(1,device="cuda"); print("second client ran:", float(x.sum()))'
  for c in get_server_list "get_client_list $(echo get_server_list | nvidia-cuda-mps-control | head -1)" \
           "get_active_thread_percentage $(echo get_server_list | nvidia-cuda-mps-control | head -1)"; do
    printf '%s -> ' "$c"; echo "$c" | nvidia-cuda-mps-control; echo " (rc=$?)"
  done
  echo quit | nvidia-cuda-mps-control; echo "quit rc=$?"
  sleep 1; echo "mps control log:"; tail -15 $CUDA_MPS_LOG_DIRECTORY/control.log; tail -8 $CUDA_MPS_LOG_DIRECTORY/server.log 2>/dev/null
else
  echo "nvidia-cuda-mps-control: not installed on this machine"
fi
rm -rf "$T"
