#!/usr/bin/env bash
# Discovery, end to end: publish this node's GPUs into a real BDII and query
# them back.
#
#   cderd (this node's GPUs: NVML)  →  cder-glue-provider (GIP provider)
#     →  bdii-update (Debian's, every 2 s)  →  slapd (BDII config + GLUE 2.0 schema)
#     →  ldapsearch
#
# NVML is the NVIDIA driver's when libnvidia-ml.so.1 is installed, else the
# fake NVML library built in this workspace with deploy/fake-nvml.example.json
# (set CDER_DEMO_FAKE_NVML=1 to force it). Everything runs as root on
# 127.0.0.1 in a temp dir and is stopped at the end. Needs the Debian
# packages of deploy/install-deps.sh (slapd, ldap-utils, glue-schema, bdii).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/cder-bdii-demo.XXXXXX)
pids=()
cleanup() {
    [ -f "$work/bdii/run/bdii-update.pid" ] && kill "$(cat "$work/bdii/run/bdii-update.pid")" 2>/dev/null || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
for f in /usr/sbin/slapd /usr/sbin/bdii-update /usr/share/bdii/bdii-slapd.conf /etc/ldap/schema/GLUE20.schema; do
    [ -e "$f" ] || { echo "demo-bdii.sh: $f is missing: run deploy/install-deps.sh" >&2; exit 2; }
done

step "Building cderd, cderctl, cder-glue-provider and the fake NVML"
cargo build --quiet -p cderd -p cderctl -p cder-glue-provider -p cder-fake-nvml
bin=$root/target/debug

step "cderd with this node's GPUs"
if [ "${CDER_DEMO_FAKE_NVML:-0}" != 1 ] && ldconfig -p | grep -q 'libnvidia-ml.so.1 '; then
    nvml_library=
    echo "NVML: the NVIDIA driver"
else
    nvml_library="nvml_library = \"$bin/libcder_fake_nvml.so\""
    export CDER_FAKE_NVML=$root/deploy/fake-nvml.example.json
    echo "NVML: the fake library, devices from deploy/fake-nvml.example.json (no NVIDIA driver here)"
fi
cat > "$work/cder.toml" <<TOML
[node]
socket = "$work/cderd.sock"
state_dir = "$work/state"

[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "nvml"
$nvml_library
TOML
"$bin/cderd" --config "$work/cder.toml" 2> "$work/cderd.log" &
pids+=($!)
for _ in $(seq 100); do "$bin/cderctl" --config "$work/cder.toml" status > /dev/null 2>&1 && break; sleep 0.1; done
"$bin/cderctl" --config "$work/cder.toml" status

step "slapd with Debian's BDII config and the GLUE schemas, on 127.0.0.1"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/db/grid" "$work/db/glue" "$work/db/stats" "$work/run"
sed -e "s#/run/bdii/db#$work/run#g" -e "s#/var/lib/bdii/db#$work/db#g" /usr/share/bdii/bdii-slapd.conf > "$work/bdii-slapd.conf"
/usr/sbin/slapd -f "$work/bdii-slapd.conf" -h "ldap://127.0.0.1:$port/" -d 0 > "$work/slapd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do ldapsearch -x -LLL -H "ldap://127.0.0.1:$port" -b "" -s base > /dev/null 2>&1 && break; sleep 0.1; done
echo "slapd on ldap://127.0.0.1:$port"

step "bdii-update with cder-glue-provider in its provider directory"
mkdir -p "$work/bdii/"{ldif,provider,plugin,var,run,shim}
cp /usr/share/bdii/default.ldif "$work/bdii/ldif/"
# Debian's bdii-update calls `ldapadd -h HOST -p PORT`, which OpenLDAP 2.5
# refuses: these shims rewrite it to -H ldap://HOST:PORT.
for tool in ldapadd ldapmodify ldapdelete ldapsearch; do
    cat > "$work/bdii/shim/$tool" <<SHIM
#!/bin/sh
host=; port=389; n=\$#; i=0
while [ \$i -lt \$n ]; do
  a=\$1; shift; i=\$((i+1))
  case "\$a" in
    -h) host=\$1; shift; i=\$((i+1));;
    -p) port=\$1; shift; i=\$((i+1));;
    *) set -- "\$@" "\$a";;
  esac
done
[ -n "\$host" ] && set -- -H "ldap://\$host:\$port" "\$@"
exec /usr/bin/$tool "\$@"
SHIM
    chmod 755 "$work/bdii/shim/$tool"
done
host=$(hostname -s)
# The demo's Manager says SLURM: EGI's profile requires its version, the installed one.
slurm_version=$(PATH=$PATH:/usr/sbin slurmd -V 2>/dev/null | awk '{print $2}') || true
[ -n "$slurm_version" ] || { echo "demo-bdii: slurmd -V printed no SLURM version (install slurmd)" >&2; exit 1; }
cat > "$work/glue-provider.toml" <<TOML
[site]
computing_service_id = "$host.example.org_ComputingElement"
computing_manager_id = "$host.example.org_ComputingElement_Manager"
ce_unique_id = "$host.example.org:8443/cream-slurm-gpgpu"
cder_config = "$work/cder.toml"
strategies = ["attribute-extension"]

[service]
type = "org.glite.ce.CREAM"
admin_domain = "CDER-DEMO"
manager_product = "SLURM"
manager_version = "$slurm_version"

[counts]
source = "cderd"
socket = "$work/cderd.sock"

[[group]]
id = "$host.example.org"
nodes = ["$host"]
platform = "$(uname -m)"
main_memory_mib = $(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 ))
inventory = true
TOML
deploy/bdii/install-provider.sh --binary "$bin/cder-glue-provider" --prefix "$work/prefix" \
    --provider-dir "$work/bdii/provider" --config "$work/glue-provider.toml"
cat > "$work/bdii/bdii.conf" <<CONF
BDII_LOG_FILE=$work/bdii/bdii-update.log
BDII_PID_FILE=$work/bdii/run/bdii-update.pid
BDII_RUN_DIR=$work/bdii/run
BDII_LOG_LEVEL=INFO
BDII_LDIF_DIR=$work/bdii/ldif
BDII_PROVIDER_DIR=$work/bdii/provider
BDII_PLUGIN_DIR=$work/bdii/plugin
BDII_HOSTNAME=127.0.0.1
BDII_PORT=$port
BDII_BREATHE_TIME=2
BDII_READ_TIMEOUT=60
BDII_ARCHIVE_SIZE=0
BDII_DELETE_DELAY=3600
BDII_VAR_DIR=$work/bdii/var
SLAPD_CONF=$work/bdii-slapd.conf
CONF
PATH=$work/bdii/shim:$PATH /usr/sbin/bdii-update -c "$work/bdii/bdii.conf" -d
# Until bdii-update has written its log, grep prints nothing (not 0), and
# `[ "" -ge N ]` is not a number test: count a missing log as no cycle.
cycles() { local n; n=$(grep -c 'Sleeping for' "$work/bdii/bdii-update.log" 2>/dev/null); echo "${n:-0}"; }
wait_cycles() { local want=$(( $(cycles) + $1 )); for _ in $(seq 300); do [ "$(cycles)" -ge "$want" ] && return; sleep 0.1; done; echo "bdii-update did not cycle" >&2; cat "$work/bdii/bdii-update.log" >&2; exit 1; }
wait_cycles 1

query() {
    ldapsearch -x -LLL -o ldif-wrap=no -H "ldap://127.0.0.1:$port" -b o=glue \
        '(GLUE2EntityOtherInfo=GPGPUVendor=Nvidia)' GLUE2ResourceID GLUE2EntityName GLUE2EntityOtherInfo
}
step "The BDII answers the thesis's phase-1 query: (GLUE2EntityOtherInfo=GPGPUVendor=Nvidia)"
query

step "A job takes a GPU (cderctl alloc); the next BDII cycle publishes one fewer free"
"$bin/cderctl" --config "$work/cder.toml" alloc --job local:demo-1 --uid 1000 --count 1
wait_cycles 2
query | grep -E 'dn:|GLUE2ResourceID|Instances='
echo
echo "== demo-bdii.sh: passed (everything is stopped and $work removed on exit)"
