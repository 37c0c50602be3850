//! How long a job runs once placed: the trace's measured time, or a
//! table that depends on the placement (the seed thesis's Table 4.9:
//! local or remote vGPGPUs).

use crate::state::Placement;
use crate::time::Time;
use crate::workload::Job;

/// A job's service time, given where it was placed (without dispatch).
pub trait Service {
    /// The service time of `job` placed as `p`.
    fn run(&self, job: &Job, p: &Placement) -> Time;
}

/// The trace's own run time, wherever the job runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recorded;

impl Service for Recorded {
    fn run(&self, job: &Job, _: &Placement) -> Time {
        job.run
    }
}
