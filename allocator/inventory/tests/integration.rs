//! cder-inventory's integration tests in one binary, one module per
//! discovery (a binary per file made linking most of a test build). The
//! NVML, ROCm SMI and Level Zero tests set `CDER_FAKE_NVML`,
//! `CDER_FAKE_ROCM_SMI` / `CDER_FAKE_LEVEL_ZERO` under `cder_testkit::env_lock()`.

mod auto_discovery;
mod level_zero_discovery;
mod mig_discovery;
mod nvml_discovery;
mod rocm_smi_discovery;
mod static_discovery;
