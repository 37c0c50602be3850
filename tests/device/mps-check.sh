#!/bin/bash
# Checks cderd's MPS path (docs/sharing.md, "MPS on shared GPUs") against
# the real nvidia-cuda-mps-control on a GPU node: two share jobs of one uid
# on GPU 0 (2 and 1 of 4 shares; the largest sets the server limits) start one control daemon with 50 % threads
# and half the GPU's memory pinned, a CUDA client in each job's environment
# runs under it, a second uid is refused, and the daemon is gone after the
# last release.
#
# Run as root, with a release build of cderd in $BIN (default:
# target/release). Prints a report; writes it to $OUT/mps-report.txt too.
set -u
BIN=${BIN:-target/release}
OUT=${OUT:-$(mktemp -d)}
T=$(mktemp -d /tmp/cder-mps.XXXXXX)
exec > >(tee "$OUT/mps-report.txt") 2>&1
step() { echo; echo "=== $*"; }
py=$(command -v python3)
MPS=${MPS_CONTROL:-$(command -v nvidia-cuda-mps-control || echo /usr/bin/nvidia-cuda-mps-control)}

cat >"$T/cder.toml" <<TOML
[node]
socket = "$T/cderd.sock"
state_dir = "$T/state"
[node.usage]
sample = false
[node.sharing]
shares_per_gpu = 4
[node.mps]
enabled = true
mps_control = "$MPS"
runtime_dir = "$T/mps"
[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "nvml"
visible_ids = "uuid"
TOML

# One protocol request on cderd's socket; prints the reply line.
ask() {
  $py - "$T/cderd.sock" "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(sys.argv[2].encode() + b"\n")
buf = b""
while not buf.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk: break
    buf += chunk
print(buf.decode().strip())
PY
}
share() { ask "{\"v\":1,\"op\":\"alloc\",\"job\":\"$1\",\"uid\":$2,\"count\":1,\"type\":\"gpgpu\",\"devices\":[0],\"shares\":$3,\"wait_ms\":0}"; }

step "cderd with [node.mps] against $MPS"
nvidia-smi --query-gpu=index,uuid,memory.total --format=csv
"$BIN/cderd" --config "$T/cder.toml" > "$T/cderd.log" 2>&1 &
CDERD=$!
for _ in $(seq 100); do [ -S "$T/cderd.sock" ] && break; sleep 0.1; done

step "two share jobs of uid 0, 2 and 1 of 4 shares (one share left free)"
share local:mps-a 0 2 | tee "$T/a.json"
share local:mps-b 0 1 | tee "$T/b.json"
UUID=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["result"]["devices"][0]["uuid"])' "$T/a.json")
export CUDA_MPS_PIPE_DIRECTORY=$T/mps/$UUID/pipe CUDA_MPS_LOG_DIRECTORY=$T/mps/$UUID/log
echo "control daemons for this GPU: $(pgrep -fc "nvidia-cuda-mps-control") (expect 1)"
echo "get_default_active_thread_percentage -> $(echo get_default_active_thread_percentage | CUDA_VISIBLE_DEVICES=$UUID "$MPS") (expect 50.0)"
echo "get_default_device_pinned_mem_limit 0 -> $(echo get_default_device_pinned_mem_limit 0 | CUDA_VISIBLE_DEVICES=$UUID "$MPS")"

step "a CUDA client in job a's environment"
ENVA=$($py -c 'import json,sys; e=json.load(open(sys.argv[1]))["result"]["env"]; print(" ".join(f"{k}={v}" for k,v in e.items()))' "$T/a.json")
echo "$ENVA"
env $ENVA $py -c 'import torch; x=torch.ones(1,device="cuda"); print("client under MPS ran:", float(x.sum()))' &
CLIENT=$!
sleep 3
SERVERS=$(echo get_server_list | CUDA_VISIBLE_DEVICES=$UUID "$MPS")
echo "get_server_list -> $SERVERS"
for pid in $SERVERS; do
  echo "get_active_thread_percentage $pid -> $(echo "get_active_thread_percentage $pid" | CUDA_VISIBLE_DEVICES=$UUID "$MPS") (expect 50.0)"
done
wait $CLIENT

step "a share job of uid 1001 on the same GPU (expect conflict, one user per GPU)"
share local:mps-c 1001 1

step "release both; the control daemon gets quit"
ask '{"v":1,"op":"release","job":"local:mps-a"}'
ask '{"v":1,"op":"release","job":"local:mps-b"}'
sleep 1
echo "control daemons left: $(pgrep -fc "nvidia-cuda-mps-control") (expect 0)"
echo "control.log:"; cat "$T/mps/$UUID/log/control.log" 2>/dev/null | tail -30
kill "$CDERD"; wait "$CDERD" 2>/dev/null
echo "cderd log:"; tail -20 "$T/cderd.log"
