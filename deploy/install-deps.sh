#!/usr/bin/env bash
# Installs the Debian packages cder and its tests need, cargo-fuzz, and the
# Python venv holding HTCondor's classad2 (the reference for the ClassAd
# engine's tests).
# Idempotent: safe to run again; it only installs what is missing.
#
#   CDER_VENV   where the reference venv goes (default: /opt/cder-venv)
set -euo pipefail

packages=(
  # build: bindgen needs libclang; pkg-config finds the libraries
  build-essential pkg-config libclang-dev clang
  # SLURM 22.05: daemons, headers for the plugins, libslurmfull
  slurm-wlm slurm-client libslurm-dev slurm-wlm-plugins-dev
  # newer SLURM releases (24.11, 26.05) run from Debian roots that
  # deploy/slurm-root.sh makes
  mmdebstrap
  # the information system: OpenLDAP, the GLUE schemas, BDII
  slapd ldap-utils glue-schema bdii
  # the site/top BDII chain test runs third-party/glite-info-provider-ldap
  # (Perl, LWP::Simple), which Debian does not package
  libwww-perl
  # AMD GPUs: ROCm SMI's header (cder-rocm-smi-sys binds it at build time)
  # and library (loaded at run time; the tests load the real one)
  librocm-smi-dev librocm-smi64-1
  # MUNGE: cluster credentials for the vGPGPU registry
  munge libmunge-dev
  # the ClassAd reference and the test harness
  python3 python3-venv python3-pip
  # NorduGrid ARC CE: A-REX's stage-0 code runs the ENV/GPGPU
  # runtime environment in tests/tests/arc_rte.rs, whose xRSL check uses
  # ARC's own parser through its Python binding; arcctl enables RTEs
  nordugrid-arc-arex nordugrid-arc-arcctl python3-nordugrid-arc
  # ...and end to end in tests/tests/arc_ce.rs: arcsub/arcstat/arcget over
  # the REST interface, ARC's LDAP infosys (its slapd config and bdii-update)
  nordugrid-arc-client nordugrid-arc-plugins-arcrest nordugrid-arc-infosys-ldap
  # Debian packaging (docs/packaging.md): deploy/build-debs.sh
  # and tests/tests/packages.rs build, lint and install cder's packages
  dpkg-dev debhelper fakeroot lintian man-db
  # Prometheus scrapes cder-exporter in allocator/exporter/tests/prometheus.rs
  prometheus
  # small tools the tests use
  procps psmisc util-linux iproute2 jq
  # libfaketime: the clock-jump fault tests move cderd's wall clock (docs/testing.md, Faults)
  faketime
  # a real EDQUOT for the full-disk tests: a btrfs image whose subvolume
  # has a qgroup limit (a limit root is held to, unlike user quotas)
  btrfs-progs
  # AMD's ROCm SMI and Intel's Level Zero: the headers the sys crates bind
  # (librocm-smi-dev, libze-dev) and the real libraries, which load here,
  # see no device and must say so; discovery = "auto" picks them where they load
  librocm-smi-dev librocm-smi64-1 libze-dev libze1
  # getfacl: the ACL unit test compares cderd's encoding with it (shared GPUs)
  acl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Package scripts must not start services on this machine: tests start
  # their own on loopback in temp dirs.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
  [ "$created_policy" = 1 ] && rm -f "$policy"
else
  echo "install-deps: all Debian packages present"
fi

# cargo-fuzz (libFuzzer) for deploy/fuzz.sh; pinned, and it runs on the
# stable toolchain (fuzz.sh builds with -s none: no nightly sanitizer flags).
cargo_fuzz_version=0.13.1
if cargo fuzz --version 2>/dev/null | grep -qx "cargo-fuzz $cargo_fuzz_version"; then
  echo "install-deps: cargo-fuzz $cargo_fuzz_version present"
else
  echo "install-deps: installing cargo-fuzz $cargo_fuzz_version"
  cargo install --locked --quiet cargo-fuzz --version "$cargo_fuzz_version"
fi

# cargo-nextest runs deploy/test.sh's tests (one process per test, no
# fail-fast, JUnit with per-test times; .config/nextest.toml). This kind of
# machine comes with it; elsewhere it is built from crates.io.
if cargo nextest --version >/dev/null 2>&1; then
  echo "install-deps: $(cargo nextest --version | head -1) present"
else
  echo "install-deps: installing cargo-nextest"
  cargo install --locked --quiet cargo-nextest
fi

venv=${CDER_VENV:-/opt/cder-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import classad2' 2>/dev/null; then
  echo "install-deps: creating $venv with htcondor (classad2)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q htcondor ldap3
fi
"$venv/bin/python" -c 'import classad2; print("install-deps: classad2 ok")'
# What APEL's record and loader code (third-party/apel) imports, and
# python-dirq, which reads the spool `cderctl accounting --apel` writes as
# ssmsend does (allocator/cderctl/tests/apel.rs).
if ! "$venv/bin/python" -c 'import dirq, jsonschema, future, iso8601' 2>/dev/null; then
  echo "install-deps: installing APEL's loader dependencies into $venv"
  "$venv/bin/pip" install -q dirq jsonschema future iso8601
fi
