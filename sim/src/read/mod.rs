//! Workload readers: SWF (the Parallel Workloads Archive), Alibaba's 2023
//! GPU trace (CSV), and `sacct -P` output of a site's own SLURM. Each
//! names a malformed line by file, line and field, and skips it or stops
//! there as the caller chooses ([`OnBadLine`]); none panics on any input.

pub mod alibaba;
pub mod error;
pub mod input;
pub mod sacct;
pub mod swf;

pub use error::{BadLine, OnBadLine, TraceError};
