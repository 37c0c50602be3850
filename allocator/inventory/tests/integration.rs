//! cder-inventory's integration tests in one binary, one module per
//! discovery (a binary per file made linking most of a test build). The
//! NVML tests set `CDER_FAKE_NVML` under `cder_testkit::env_lock()`.

mod auto_discovery;
mod mig_discovery;
mod nvml_discovery;
mod static_discovery;
