//! cderd's integration tests in one binary, one module per area (a binary
//! per file made linking most of a test build): `cargo test -p cderd --test
//! integration crash::` runs one area. Probe children are this binary run
//! again with `--exact <module>::<test>`.

mod common;

mod amd_fencing;
mod cgroup_enforcement;
mod crash;
mod daemon;
mod device_files_watch;
mod disk_full;
mod faults;
mod health_watch;
mod ledger_lock;
mod mig_devices;
mod node_drain;
mod nvml_enforcement;
mod rocm_smi_watch;
mod round_four;
mod sharing_mps;
mod stress_interleaving;
mod usage_sampling;
