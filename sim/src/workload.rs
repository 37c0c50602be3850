//! A workload: jobs with their submit time, service time and what they ask
//! for, whichever trace they were read from.

use crate::time::Time;

/// What one job asks of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// Nodes asked for; 0 means "`cores` cores wherever they are" (a
    /// parallel job of SWF's processors, spread as the placement chooses).
    pub nodes: u32,
    /// Cores: per node when `nodes` > 0, in all otherwise.
    pub cores: u32,
    /// Whole GPUs per node, on the node.
    pub gpus: u32,
    /// A fraction of one GPU per node, in thousandths (Alibaba's
    /// `gpu_milli`, 1..=999), or 0. Never together with `gpus`.
    pub gpu_milli: u32,
    /// Memory per node in MiB, 0 when unknown or not counted.
    pub mem_mib: u64,
    /// The GPU model the job must have (Alibaba's `gpu_spec`), if any:
    /// one of several models, separated by `|`.
    pub model: Option<String>,
}

impl Request {
    /// Whole-GPU-equivalents per node, in thousandths.
    pub fn gpu_milli_per_node(&self) -> u64 {
        self.gpus as u64 * 1000 + self.gpu_milli as u64
    }

    /// True when the job asks for any part of a GPU.
    pub fn wants_gpu(&self) -> bool {
        self.gpus > 0 || self.gpu_milli > 0
    }
}

/// One job of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The trace's id for it (SWF job number, sacct JobID, pod name).
    pub id: String,
    /// When it was submitted.
    pub submit: Time,
    /// How long it ran (or would run) once started: the trace's measured
    /// run time, or a service-time table's value.
    pub run: Time,
    /// The time limit it asked for, when the trace has one.
    pub limit: Option<Time>,
    /// What it asks for.
    pub request: Request,
    /// A class for service-time tables and reports (the seeds' job kinds),
    /// 0 when none.
    pub class: u32,
}

/// Jobs in submit order, with where they came from.
#[derive(Debug, Clone, Default)]
pub struct Workload {
    /// The jobs, ordered by submit time (stable: equal times keep the
    /// trace's order).
    pub jobs: Vec<Job>,
    /// Lines skipped as malformed (with `--bad-lines skip`).
    pub skipped: Vec<String>,
    /// Well-formed jobs that cannot be replayed (unknown run time or size,
    /// never started), counted.
    pub dropped: usize,
    /// The trace's name, for reports.
    pub source: String,
}

impl Workload {
    /// A workload of `jobs`, sorted by submit time.
    pub fn new(source: impl Into<String>, mut jobs: Vec<Job>) -> Workload {
        jobs.sort_by_key(|j| j.submit);
        Workload { jobs, skipped: Vec::new(), dropped: 0, source: source.into() }
    }

    /// The first `n` jobs (by submit time).
    pub fn truncate(&mut self, n: usize) {
        self.jobs.truncate(n);
    }

    /// Moves every submit time so that the first job arrives at 0.
    pub fn rebase(&mut self) {
        let first = self.jobs.first().map_or(0, |j| j.submit);
        for j in &mut self.jobs {
            j.submit -= first;
        }
    }
}
