//! cder-inventory's integration tests in one binary, one module per
//! discovery (a binary per file made linking most of a test build). The
//! NVML tests set `CDER_FAKE_NVML`, the ROCm SMI tests
//! `CDER_FAKE_ROCM_SMI`, under `cder_testkit::env_lock()`.

mod mig_discovery;
mod nvml_discovery;
mod rocm_smi_discovery;
mod static_discovery;
