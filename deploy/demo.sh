#!/usr/bin/env bash
# The cder demo, on embedded defaults: everything runs as root in a temp dir
# on loopback, and is stopped at the end. Each part shows one principle.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/cder-demo.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "Building cder"
cargo build --quiet --workspace --bins --lib
bin=$root/target/debug

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
