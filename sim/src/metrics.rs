//! What a replay measured: one record per job, and the side-by-side
//! figures of a policy (makespan, wait, bounded slowdown, GPU utilisation,
//! locality, unplaceable fraction).

use serde::Serialize;

use crate::time::{as_secs_f64, Time, SECOND};

/// One job's fate in a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Its position in the workload.
    pub job: usize,
    /// When it arrived.
    pub submit: Time,
    /// When it started (its submit time if it never did).
    pub start: Time,
    /// When it ended and gave its resources back.
    pub end: Time,
    /// Its service time, without the dispatch cost.
    pub run: Time,
    /// Thousandths of GPU it held.
    pub gpu_milli: u64,
    /// Whether its placement was local, where the question applies.
    pub local: Option<bool>,
    /// False when it could never fit the cluster (or the fill replay found
    /// no room for it): it is counted, never run.
    pub placed: bool,
}

/// A replay's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The policy's label.
    pub label: String,
    /// Every job's record, in workload order.
    pub records: Vec<Record>,
    /// Events the loop handled.
    pub events: u64,
}

/// Bounded slowdown's threshold (Feitelson's usual 10 s).
pub const SLOWDOWN_BOUND: Time = 10 * SECOND;

/// The figures of one policy.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// The policy.
    pub policy: String,
    /// Jobs in the workload.
    pub jobs: usize,
    /// From the first arrival to the last end, seconds.
    pub makespan_s: f64,
    /// Mean time from arrival to start, seconds.
    pub mean_wait_s: f64,
    /// Mean of max(1, (wait + run) / max(run, 10 s)).
    pub mean_bounded_slowdown: f64,
    /// GPU-time held over GPU-time there was, during the makespan (0..1).
    pub gpu_utilisation: f64,
    /// Local placements over placements where locality applies (0..1);
    /// None when it applies to none.
    pub locality: Option<f64>,
    /// Jobs that never fit over all jobs (0..1).
    pub unplaceable: f64,
    /// Events handled.
    pub events: u64,
}

impl Outcome {
    /// The figures, for a cluster of `gpus` GPUs.
    pub fn summary(&self, gpus: usize) -> Summary {
        let placed: Vec<&Record> = self.records.iter().filter(|r| r.placed).collect();
        let first = placed.iter().map(|r| r.submit).min().unwrap_or(0);
        let last = placed.iter().map(|r| r.end).max().unwrap_or(0);
        let makespan = last.saturating_sub(first);
        let n = placed.len().max(1) as f64;
        let mean_wait = placed.iter().map(|r| as_secs_f64(r.start - r.submit)).sum::<f64>() / n;
        let slowdown = placed
            .iter()
            .map(|r| {
                let response = (r.end - r.submit) as f64;
                (response / r.run.max(SLOWDOWN_BOUND) as f64).max(1.0)
            })
            .sum::<f64>()
            / n;
        let held: f64 = placed.iter().map(|r| r.gpu_milli as f64 * (r.end - r.start) as f64).sum();
        let capacity = gpus as f64 * 1000.0 * makespan as f64;
        let asked: Vec<bool> = placed.iter().filter_map(|r| r.local).collect();
        Summary {
            policy: self.label.clone(),
            jobs: self.records.len(),
            makespan_s: as_secs_f64(makespan),
            mean_wait_s: mean_wait,
            mean_bounded_slowdown: slowdown,
            gpu_utilisation: if capacity > 0.0 { held / capacity } else { 0.0 },
            locality: (!asked.is_empty()).then(|| asked.iter().filter(|&&l| l).count() as f64 / asked.len() as f64),
            unplaceable: if self.records.is_empty() {
                0.0
            } else {
                self.records.iter().filter(|r| !r.placed).count() as f64 / self.records.len() as f64
            },
            events: self.events,
        }
    }

    /// GPUs held over time: (time, thousandths held from then on), one
    /// point per change.
    pub fn gpu_timeline(&self) -> Vec<(Time, u64)> {
        let mut changes: Vec<(Time, i64)> = Vec::new();
        for r in self.records.iter().filter(|r| r.placed && r.gpu_milli > 0) {
            changes.push((r.start, r.gpu_milli as i64));
            changes.push((r.end, -(r.gpu_milli as i64)));
        }
        changes.sort_unstable();
        let mut out: Vec<(Time, u64)> = Vec::new();
        let mut level = 0i64;
        for (t, d) in changes {
            level += d;
            match out.last_mut() {
                Some(last) if last.0 == t => last.1 = level.max(0) as u64,
                _ => out.push((t, level.max(0) as u64)),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_two_jobs() {
        let r = |job, submit, start, end, gpu_milli, local| Record {
            job,
            submit,
            start,
            end,
            run: end - start,
            gpu_milli,
            local,
            placed: true,
        };
        let o = Outcome {
            label: "x".into(),
            records: vec![
                r(0, 0, 0, 20_000, 1000, Some(true)),
                r(1, 0, 20_000, 40_000, 2000, Some(false)),
                Record { placed: false, ..r(2, 0, 0, 0, 0, None) },
            ],
            events: 5,
        };
        let s = o.summary(2);
        assert_eq!((s.makespan_s, s.mean_wait_s), (40.0, 10.0));
        assert_eq!(s.mean_bounded_slowdown, 1.5);
        assert_eq!(s.gpu_utilisation, 0.75);
        assert_eq!((s.locality, s.unplaceable), (Some(0.5), 1.0 / 3.0));
        assert_eq!(o.gpu_timeline(), vec![(0, 1000), (20_000, 2000), (40_000, 0)]);
    }
}
