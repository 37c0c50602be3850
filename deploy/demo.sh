#!/usr/bin/env bash
# The cder demo, on embedded defaults: everything runs as root in a temp dir
# on loopback, and is stopped at the end. Each part shows one principle.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/cder-demo.XXXXXX)
pids=()
# Each part's verdict, for the summary at the end. `current` names the part
# under way: if `set -e` ends the demo inside it, the summary says it failed.
results=()
current=""
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
    if [ -n "$current" ]; then results+=("$current: failed (exit $rc)"); fi
    printf '\n\033[1m== summary of the demo\033[0m\n'
    printf '   %s\n' "${results[@]}"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
passed() { printf '\033[1m== %s: passed\033[0m\n' "$current"; results+=("$current: passed"); current=""; }

current="build"
step "Building cder"
cargo build --quiet --workspace --bins --lib
bin=$root/target/debug
passed

current="discovery and one node (cderctl, cderd)"
step "Discovery from the static config (deploy/cder.example.toml)"
"$bin/cderctl" inventory --config deploy/cder.example.toml

step "Discovery through NVML (the fake NVML library standing in for the driver)"
cat >"$work/nvml.toml" <<TOML
[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "nvml"
nvml_library = "$bin/libcder_fake_nvml.so"
TOML
CDER_FAKE_NVML=deploy/fake-nvml.example.json "$bin/cderctl" inventory --config "$work/nvml.toml"

step "A mixed node: NVIDIA through NVML, AMD through ROCm SMI (fake libraries standing in for both drivers)"
# Each type its own vendor and source; the AMD type shares the GPGPU prefix
# so that a JDL's GPGPUVendor == "AMD" reaches it (docs/vendors.md).
cat >"$work/mixed.toml" <<TOML
[node]
socket = "$work/mixed.sock"
state_dir = "$work/mixed-state"
operators = ["$(id -u)"]

[node.enforcement]
cgroup = "off"

[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "nvml"
nvml_library = "$bin/libcder_fake_nvml.so"

[[cder]]
name = "amdgpu"
vendor = "amd"
prefix = "GPGPU"
discovery = "rocm-smi"
rocm_smi_library = "$bin/librocm_smi64.so"
TOML
export CDER_FAKE_NVML=deploy/fake-nvml.example.json CDER_FAKE_ROCM_SMI=deploy/fake-rocm-smi.example.json
"$bin/cderctl" inventory --config "$work/mixed.toml"
"$bin/cderd" --config "$work/mixed.toml" 2>"$work/mixed.log" & mixed=$!; pids+=($mixed)
for _ in $(seq 50); do [ -S "$work/mixed.sock" ] && break; sleep 0.1; done
printf '\033[2m# an AMD job sees ROCR_VISIBLE_DEVICES; an NVIDIA job gets the AMD variables empty\033[0m\n'
"$bin/cderctl" alloc --config "$work/mixed.toml" --job local:amd-1 --uid "$(id -u)" --count 2 --type amdgpu
"$bin/cderctl" alloc --config "$work/mixed.toml" --job local:cuda-1 --uid "$(id -u)" --count 1
kill "$mixed"; wait "$mixed" 2>/dev/null || true
unset CDER_FAKE_NVML CDER_FAKE_ROCM_SMI

step "Exclusivity on one node: cderd hands two jobs disjoint GPUs"
mkdir -p "$work/state"
sed -e "s|/run/cder/cderd.sock|$work/cderd.sock|" -e "s|/var/lib/cder|$work/state|" \
    -e "s|^operators = .*|operators = [\"$(id -u)\"]|" \
    -e 's|^drain_node = .*|drain_node = "off"   # no batch system here: never drain a real node|' \
    deploy/cder.example.toml >"$work/cder.toml"
export CDER_CONFIG=$work/cder.toml
"$bin/cderd" 2>"$work/cderd.log" & pids+=($!)
for _ in $(seq 50); do [ -S "$work/cderd.sock" ] && break; sleep 0.1; done
show() { printf '\033[2m$ %s\033[0m\n' "$*"; "$@"; }
show "$bin/cderctl" alloc --job local:demo-1 --uid "$(id -u)" --count 2
show "$bin/cderctl" alloc --job local:demo-2 --uid "$(id -u)" --count 2
show "$bin/cderctl" alloc --job local:demo-3 --uid "$(id -u)" --count 1 || echo "(exit $?: the node is full, as it should be)"
show "$bin/cderctl" status
show "$bin/cderctl" release --job local:demo-1
show "$bin/cderctl" alloc --job local:demo-3 --uid "$(id -u)" --count 1
unset CDER_CONFIG
passed

# The batch-system and grid parts start real daemons; each script explains
# itself. A part that fails is reported and the next one still runs.
failed=0
if [ "$(id -u)" -eq 0 ]; then
  for part in slurm cluster torque bdii twophase vgpgpu arc; do
    script=deploy/demo-$part.sh
    [ -x "$script" ] || continue
    step "deploy/demo-$part.sh"
    current="demo-$part.sh"
    # Each part's script ends with its own "passed" line.
    if "$script"; then
      results+=("$current: passed")
      current=""
    else
      rc=$?
      printf '\033[1m== %s: failed (exit %s)\033[0m\n' "$current" "$rc"
      results+=("$current: failed (exit $rc)")
      current=""
      failed=1
    fi
  done
else
  echo "(run as root to see the SLURM, TORQUE, BDII and grid parts)"
  results+=("the SLURM, TORQUE, BDII and grid parts: not run (not root)")
fi
exit "$failed"
