#!/bin/bash
# Checks issue 46's discovery sources on a real GPU node: `auto` picks NVML
# where the NVIDIA driver answers; the /dev scan finds the same GPUs (bus
# ids, UUIDs, device files) as NVML and nvidia-smi; Debian's real ROCm SMI
# and Level Zero libraries, on a node with no AMD or Intel driver, say so
# and `auto` leaves them for the scan, which then reports no device instead
# of a silent 0.
#
# Run as root, with cderctl in $BIN (default target/release) and, for the
# AMD/Intel steps, Debian's librocm_smi64.so.1 and libze_loader.so.1 in $LIBS
# (default $BIN). Changes nothing on the node. Writes $OUT/report.txt.
set -u
BIN=${BIN:-target/release}
LIBS=${LIBS:-$BIN}
OUT=${OUT:-$(mktemp -d)}
T=$(mktemp -d /tmp/cder-vendors.XXXXXX)
exec > >(tee "$OUT/report.txt") 2>&1
step() { echo; echo "=== $*"; }
fail=0

step "the node"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id --format=csv,noheader
ls -d /sys/class/drm/* 2>&1 | head; ls -l /dev/dri 2>&1 | head -5; ls -l /dev/kfd 2>&1
lsmod 2>/dev/null | grep -E '^(nvidia|amdgpu|i915|xe) ' || true

inventory() { # name vendor discovery [extra keys]
    cat >"$T/$1.toml" <<TOML
[node]
socket = "$T/cderd.sock"
state_dir = "$T/state"
[[cder]]
name = "gpgpu"
vendor = "$2"
discovery = "$3"
$4
TOML
    "$BIN/cderctl" --config "$T/$1.toml" inventory "${@:5}"
}

step "auto on an NVIDIA node"
inventory auto nvidia auto "" || fail=1
inventory auto nvidia auto "" --json >"$T/auto.json" || fail=1
step "the /dev scan of the same node"
inventory scan nvidia dev-scan "" || fail=1
inventory scan nvidia dev-scan "" --json >"$T/scan.json" || fail=1
step "NVML and the scan compared"
python3 - "$T/auto.json" "$T/scan.json" <<'PY' || fail=1
import json, sys
nvml, scan = (json.load(open(p)) for p in sys.argv[1:3])
# NVML writes the PCI domain with 8 digits (00000000:00:06.0), sysfs with 4.
bus = lambda b: (lambda dom, rest: f"{int(dom, 16):04x}:{rest.lower()}")(*b.split(":", 1))
keys = lambda d: (d["uuid"], bus(d["pci_bus_id"]), d["path"], d["model"])
a, b = [keys(d) for d in nvml], [keys(d) for d in scan]
for x, y in zip(a, b):
    print("nvml", x); print("scan", y)
print("SCAN", "SAME AS NVML" if a == b else "DIFFERENT")
sys.exit(0 if a == b else 1)
PY

step "Debian's ROCm SMI on a node without amdgpu"
inventory rocm amd rocm-smi "rocm_smi_library = \"$LIBS/librocm_smi64.so.1\""; echo "exit $?"
step "Debian's Level Zero loader on a node without an Intel driver"
inventory ze intel level-zero "level_zero_library = \"$LIBS/libze_loader.so.1\""; echo "exit $?"
step "auto for AMD: the library has no driver, the scan no AMD GPU"
inventory autoamd amd auto "rocm_smi_library = \"$LIBS/librocm_smi64.so.1\""; echo "exit $?"

echo; echo "VENDORS CHECK: $([ $fail = 0 ] && echo OK || echo FAILED)"
rm -rf "$T"
exit $fail
