//! Seed 001's batch systems (Ravi et al., CCGrid 2012, §III-B and §IV-D):
//! a cluster of nodes with one multi-core CPU and one GPU each, jobs that
//! run on the CPUs, the GPUs or both of N nodes, with a known time for each
//! version and node count, arriving in batches. Three schedulers plan each
//! batch as it arrives, reserving each node's CPU and GPU from the time
//! they are free:
//!
//! * **TORQUE-like** — every job as requested: its fastest version on the
//!   nodes it asked for, started in arrival order (a FIFO queue).
//! * **MCT** (minimum completion time) — molds the resource type: the
//!   version that completes earliest given when each resource is free,
//!   started in arrival order.
//! * **FMS** (flexible moldable scheduling) — groups a batch by node count,
//!   sorts each group by CPU+GPU time, and places two jobs at a time,
//!   choosing version and node count (N, N/2, N/4) for both together so
//!   that the pair completes earliest (then holds the least resource-time):
//!   one job on the CPUs and the other on the GPUs of the same nodes when
//!   that is faster. [`Molding`] turns
//!   either dimension off ("MoldingResType only", "MoldingNumNodes only").
//!
//! Which of the nodes free in time a job gets is cderd's selection policy
//! (the nodes as candidates, one domain): the simulator decides only when.

use cder_ledger::policy::{by_name, Candidate, SelectionPolicy};

use crate::engine::Events;
use crate::time::Time;

/// A job's version: which resources of its nodes it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// The multi-core CPUs only.
    Cpu,
    /// The GPUs only.
    Gpu,
    /// Both.
    CpuGpu,
}

/// The versions, in order.
pub const VERSIONS: [Version; 3] = [Version::Cpu, Version::Gpu, Version::CpuGpu];

/// A moldable job: its arrival, the node count it asks for, and its time
/// for each node count and version it can run with.
#[derive(Debug, Clone, PartialEq)]
pub struct MoldableJob {
    /// A name for reports.
    pub name: String,
    /// When it arrives.
    pub arrival: Time,
    /// The nodes it asks for.
    pub nodes: u32,
    /// (nodes, [CPU, GPU, CPU+GPU] times), for every node count it can use.
    pub times: Vec<(u32, [Time; 3])>,
}

impl MoldableJob {
    /// Its time on `n` nodes with `v`, if it can run so.
    pub fn time(&self, n: u32, v: Version) -> Option<Time> {
        self.times.iter().find(|(k, _)| *k == n).map(|(_, t)| t[v as usize])
    }

    /// Its fastest version on the nodes it asks for (what a user requests).
    pub fn requested(&self) -> Version {
        VERSIONS
            .iter()
            .copied()
            .min_by_key(|&v| (self.time(self.nodes, v).unwrap_or(Time::MAX), v))
            .unwrap_or(Version::CpuGpu)
    }
}

/// The schedulers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// As requested, in arrival order.
    Torque,
    /// Minimum completion time over versions, in arrival order.
    Mct,
    /// Flexible moldable scheduling, with the molding it may do.
    Fms(Molding),
}

/// What FMS may mold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Molding {
    /// The version (CPU, GPU, both).
    pub version: bool,
    /// The node count (N, N/2, N/4).
    pub nodes: bool,
}

/// Where and when a job ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The job's position in the input.
    pub job: usize,
    /// Version.
    pub version: Version,
    /// Its nodes.
    pub nodes: Vec<u32>,
    /// Start and end.
    pub start: Time,
    /// End.
    pub end: Time,
}

/// When each node's CPU and GPU are free.
#[derive(Debug, Clone)]
struct FreeAt {
    cpu: Vec<Time>,
    gpu: Vec<Time>,
}

impl FreeAt {
    fn at(&self, n: usize, v: Version) -> Time {
        match v {
            Version::Cpu => self.cpu[n],
            Version::Gpu => self.gpu[n],
            Version::CpuGpu => self.cpu[n].max(self.gpu[n]),
        }
    }

    /// The earliest start at or after `now` for `count` nodes' `v`, and
    /// those nodes (as the selection policy chooses among the free ones).
    fn earliest(&self, now: Time, count: u32, v: Version, select: &dyn SelectionPolicy) -> Option<(Time, Vec<u32>)> {
        let nodes = self.cpu.len();
        if count as usize > nodes || count == 0 {
            return None;
        }
        let mut times: Vec<Time> = (0..nodes).map(|n| self.at(n, v).max(now)).collect();
        times.sort_unstable();
        let start = times[count as usize - 1];
        let candidates: Vec<Candidate> =
            (0..nodes).filter(|&n| self.at(n, v) <= start).map(|n| Candidate { index: n as u32, domain: 0 }).collect();
        let chosen = select.select(&candidates, count as usize)?;
        Some((start, chosen))
    }

    fn take(&mut self, nodes: &[u32], v: Version, end: Time) {
        for &n in nodes {
            let n = n as usize;
            if v != Version::Gpu {
                self.cpu[n] = end;
            }
            if v != Version::Cpu {
                self.gpu[n] = end;
            }
        }
    }
}

/// An option for one job: (version, nodes).
fn options(job: &MoldableJob, scheduler: Scheduler) -> Vec<(Version, u32)> {
    let versions: Vec<Version> = match scheduler {
        Scheduler::Torque => vec![job.requested()],
        Scheduler::Mct => VERSIONS.to_vec(),
        Scheduler::Fms(m) if m.version => VERSIONS.to_vec(),
        Scheduler::Fms(_) => vec![job.requested()],
    };
    let counts: Vec<u32> = match scheduler {
        Scheduler::Fms(m) if m.nodes => {
            [job.nodes, job.nodes / 2, job.nodes / 4].into_iter().filter(|&n| n > 0).collect()
        }
        _ => vec![job.nodes],
    };
    let mut out = Vec::new();
    for &v in &versions {
        for &n in &counts {
            if job.time(n, v).is_some() {
                out.push((v, n));
            }
        }
    }
    out
}

/// Plans one job's option from `now`: (start, end, nodes).
fn plan_one(
    free: &FreeAt,
    now: Time,
    job: &MoldableJob,
    (v, n): (Version, u32),
    select: &dyn SelectionPolicy,
) -> Option<(Time, Time, Vec<u32>)> {
    let t = job.time(n, v)?;
    let (start, nodes) = free.earliest(now, n, v, select)?;
    Some((start, start + t, nodes))
}

/// Resource-time an option holds: node-seconds of each CPU and GPU it uses.
fn held((v, n): (Version, u32), start: Time, end: Time) -> Time {
    let kinds = if v == Version::CpuGpu { 2 } else { 1 };
    (end - start) * n as Time * kinds
}

/// Replays `jobs` (arrival times in order of batches) on `nodes` nodes;
/// `selection` names cderd's policy that picks among nodes free in time.
pub fn replay(jobs: &[MoldableJob], nodes: u32, scheduler: Scheduler, selection: &str) -> Result<Vec<Planned>, String> {
    let select = by_name(selection).ok_or_else(|| format!("no selection policy {selection:?}"))?;
    let mut free = FreeAt { cpu: vec![0; nodes as usize], gpu: vec![0; nodes as usize] };
    let mut events = Events::new();
    for (i, j) in jobs.iter().enumerate() {
        events.at(j.arrival, i);
    }
    let mut planned = Vec::with_capacity(jobs.len());
    let mut last_start = 0;
    while !events.is_empty() {
        let mut batch = events.pop_instant();
        let now = events.now();
        if let Scheduler::Fms(_) = scheduler {
            // Grouped by node count, then by CPU+GPU time (§III-B).
            batch.sort_by_key(|&i| {
                (jobs[i].nodes, jobs[i].time(jobs[i].nodes, Version::CpuGpu).unwrap_or(Time::MAX), i)
            });
            for pair in batch.chunks(2) {
                let (a, b) = (pair[0], pair.get(1).copied());
                let mut best: Option<(Time, Time, Vec<Planned>)> = None;
                for oa in options(&jobs[a], scheduler) {
                    let Some((sa, ea, na)) = plan_one(&free, now, &jobs[a], oa, select.as_ref()) else { continue };
                    let mut after = free.clone();
                    after.take(&na, oa.0, ea);
                    let first = Planned { job: a, version: oa.0, nodes: na, start: sa, end: ea };
                    let Some(b) = b else {
                        let key = (ea, held(oa, sa, ea));
                        if best.as_ref().is_none_or(|(x, y, _)| key < (*x, *y)) {
                            best = Some((key.0, key.1, vec![first]));
                        }
                        continue;
                    };
                    for ob in options(&jobs[b], scheduler) {
                        let Some((sb, eb, nb)) = plan_one(&after, now, &jobs[b], ob, select.as_ref()) else { continue };
                        // The pair's completion first; then the resource-time it
                        // holds (node-seconds of each CPU and GPU), leaving the
                        // most room to the jobs after it.
                        let key = (ea.max(eb), held(oa, sa, ea) + held(ob, sb, eb));
                        if best.as_ref().is_none_or(|(x, y, _)| key < (*x, *y)) {
                            let second = Planned { job: b, version: ob.0, nodes: nb, start: sb, end: eb };
                            best = Some((key.0, key.1, vec![first.clone(), second]));
                        }
                    }
                }
                let (_, _, chosen) =
                    best.ok_or_else(|| format!("job {} fits no option on {nodes} nodes", jobs[a].name))?;
                for p in chosen {
                    free.take(&p.nodes, p.version, p.end);
                    planned.push(p);
                }
            }
        } else {
            for i in batch {
                let mut best: Option<Planned> = None;
                for o in options(&jobs[i], scheduler) {
                    // A FIFO queue: no job starts before the one ahead of it.
                    let Some((s, e, n)) = plan_one(&free, now.max(last_start), &jobs[i], o, select.as_ref()) else {
                        continue;
                    };
                    if best.as_ref().is_none_or(|b| e < b.end) {
                        best = Some(Planned { job: i, version: o.0, nodes: n, start: s, end: e });
                    }
                }
                let p = best.ok_or_else(|| format!("job {} fits no option on {nodes} nodes", jobs[i].name))?;
                last_start = p.start;
                free.take(&p.nodes, p.version, p.end);
                planned.push(p);
            }
        }
    }
    planned.sort_by_key(|p| p.job);
    Ok(planned)
}

/// The completion time of a plan: its last end.
pub fn completion(plan: &[Planned]) -> Time {
    plan.iter().map(|p| p.end).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, arrival: Time, nodes: u32, times: &[(u32, [Time; 3])]) -> MoldableJob {
        MoldableJob { name: name.into(), arrival, nodes, times: times.to_vec() }
    }

    #[test]
    fn torque_as_requested_mct_molds_type_fms_pairs_cpu_and_gpu() {
        // Two jobs on 2 nodes each, on a 2-node cluster: C is fast on CPUs,
        // G on GPUs; both are fastest on both (the request).
        let c = job("c", 0, 2, &[(2, [100, 300, 90])]);
        let g = job("g", 0, 2, &[(2, [300, 100, 90])]);
        let jobs = [c, g];
        let torque = completion(&replay(&jobs, 2, Scheduler::Torque, "first").unwrap());
        assert_eq!(torque, 180);
        let mct = completion(&replay(&jobs, 2, Scheduler::Mct, "first").unwrap());
        assert_eq!(mct, 180, "each job alone completes earliest on both");
        let fms = replay(&jobs, 2, Scheduler::Fms(Molding { version: true, nodes: true }), "first").unwrap();
        assert_eq!(completion(&fms), 100, "one on the CPUs, the other on the GPUs, side by side");
        assert_eq!((fms[0].version, fms[1].version), (Version::Cpu, Version::Gpu));
    }

    #[test]
    fn fms_molds_node_counts() {
        // Two 4-node jobs on 4 nodes: halved, they run side by side.
        let j = |n: &str| job(n, 0, 4, &[(4, [100, 100, 50]), (2, [200, 200, 90])]);
        let jobs = [j("a"), j("b")];
        let plain =
            completion(&replay(&jobs, 4, Scheduler::Fms(Molding { version: true, nodes: false }), "first").unwrap());
        let molded =
            completion(&replay(&jobs, 4, Scheduler::Fms(Molding { version: true, nodes: true }), "first").unwrap());
        assert_eq!((plain, molded), (100, 90));
    }
}
