//! The only unsafe code of the plugins: thin, safe wrappers over the
//! bindgen'd SLURM API and the entry points that the export macros (beside
//! the plugin layers, [`crate::spank`] and [`crate::job_submit`]) call.
//! Everything above this module is safe Rust. It imports
//! nothing from the rest of the crate but the bindings (`crate::ffi`): the
//! SPANK framework ([`crate::spank`]) builds on it, never the other way.
//!
//! * [`cstr`] — C strings both ways and SLURM's logger;
//! * [`conf`] — the running daemon's slurm.conf and `slurm_load_job`;
//! * [`spank`] — the SPANK handle and the callback entry points;
//! * [`job_submit`] — the job description and the job_submit entry point.

pub mod conf;
pub mod cstr;
pub mod job_submit;
pub mod spank;

pub use conf::{load_job, slurm_conf_path, slurm_user_id, task_plugin, GrantedJob};
pub use cstr::{log, spank_log, Level};
pub use job_submit::{dispatch_job_modify, dispatch_job_submit, JobDesc, JobRecord, RecordedJob};
pub use spank::{Context, Spank, SpankError};
