//! TORQUE's vGPGPU flow (seed thesis §4.2.3, use-case 2). TORQUE/MAUI has no
//! counting semaphore that takes N at once, so:
//!
//! * the submit filter ([`crate::hold::hold_script`]) puts a job that asks for
//!   `VirtualGPGPUPerNode=N` on user hold (`#PBS -h`) and records its needs
//!   in its variable list (`#PBS -v VirtualGPGPUPerNode=N,VirtualGPGPUMethod=M`),
//!   where `qstat -x` shows them;
//! * `cder-torque-monitor` ([`Monitor::iterate`]), run with operator rights
//!   on the server host, loops: it releases the registry backends of jobs
//!   that finished or vanished (`qstat -x`), then takes the held vGPGPU
//!   jobs in submission order and, while the registry has enough free
//!   backends for the first, requests them on the job's behalf (job key
//!   `torque:<id>`, node [`MONITOR_NODE`]) and runs `qrls`. One job at a
//!   time, so requests never race; strictly in order, so a big job is not
//!   starved by small ones behind it.
//!
//! Modules by job: [`keys`] (shared by all), [`qstat`] (reading `qstat -x`),
//! [`monitor`], [`starter`] (the job's environment). The filter's hold is
//! [`crate::hold`], which builds on these; nothing here imports the filter.

pub mod keys;
pub mod monitor;
pub mod qstat;
pub mod starter;

pub use keys::{KEYS, MONITOR_NODE};
pub use monitor::{Iteration, Monitor};
pub use qstat::{node_count, parse_qstat_x, QstatJob};
pub use starter::job_environment;
