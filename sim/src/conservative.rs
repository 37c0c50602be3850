//! Conservative backfilling (seed 002, Mendonca §4.5, Algorithm 1): every
//! job, as it arrives, gets the earliest reservation that delays no job
//! before it, on processors that stay free for its whole estimate. The
//! allocation step — which of the processors free for that window the job
//! gets — is cderd's [`SelectionPolicy`](cder_ledger::policy::SelectionPolicy),
//! each node a domain: `first` is the seed's *basic*, `locality` its *best
//! effort local* (Algorithm 4). Processors only: jobs of nodes or GPUs are
//! refused with the job named.

use cder_ledger::policy::{by_name, Candidate, LocalityPolicy, SelectionPolicy};

use crate::cluster::Cluster;
use crate::engine::Events;
use crate::metrics::{Outcome, Record};
use crate::place::Placer;
use crate::policy::{Estimates, Policy};
use crate::state::{Part, Placement};
use crate::time::Time;
use crate::workload::Job;

/// A set of processors.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn full(n: usize) -> Bits {
        let mut w = vec![u64::MAX; n.div_ceil(64)];
        if !n.is_multiple_of(64) {
            if let Some(last) = w.last_mut() {
                *last = (1u64 << (n % 64)) - 1;
            }
        }
        Bits(w)
    }
    fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    fn and(&mut self, other: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a &= b;
        }
    }
    fn clear(&mut self, i: u32) {
        self.0[i as usize / 64] &= !(1u64 << (i % 64));
    }
    fn ones(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(k, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(k as u32 * 64 + b)
            })
        })
    }
}

/// Free processors from `start` until the next slice's start.
struct Slice {
    start: Time,
    free: Bits,
}

/// The availability profile: slices in time order, the last one open-ended.
struct Profile {
    slices: Vec<Slice>,
}

impl Profile {
    /// The index of a slice starting exactly at `t` (splitting one if needed).
    fn split(&mut self, t: Time) -> usize {
        let i = self.slices.partition_point(|s| s.start <= t) - 1;
        if self.slices[i].start == t {
            return i;
        }
        let free = self.slices[i].free.clone();
        self.slices.insert(i + 1, Slice { start: t, free });
        i + 1
    }

    /// Forgets the past before `now`.
    fn advance(&mut self, now: Time) {
        let i = self.slices.partition_point(|s| s.start <= now) - 1;
        if i > 0 {
            self.slices.drain(..i);
        }
    }

    /// The earliest start ≥ `now` with `size` processors free for `length`,
    /// and those processors.
    fn earliest(&self, now: Time, size: usize, length: Time) -> Option<(Time, Bits)> {
        let first = self.slices.partition_point(|s| s.start <= now) - 1;
        for i in first..self.slices.len() {
            let s = &self.slices[i];
            if s.free.count() < size {
                continue;
            }
            let start = s.start.max(now);
            let end = start.saturating_add(length);
            let mut p = s.free.clone();
            let mut j = i + 1;
            while j < self.slices.len() && self.slices[j].start < end {
                p.and(&self.slices[j].free);
                if p.count() < size {
                    break;
                }
                j += 1;
            }
            if p.count() >= size {
                return Some((start, p));
            }
        }
        None
    }

    fn reserve(&mut self, start: Time, end: Time, chosen: &[u32]) {
        let a = self.split(start);
        let b = if end > start { self.split(end) } else { a };
        for s in &mut self.slices[a..b] {
            for &u in chosen {
                s.free.clear(u);
            }
        }
    }
}

/// Replays `jobs` (processors only) under conservative backfilling.
pub fn replay(
    cluster: &Cluster,
    jobs: &[Job],
    policy: &Policy,
    seed: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Outcome, String> {
    if let Some(j) = jobs.iter().find(|j| j.request.nodes > 0 || j.request.wants_gpu()) {
        return Err(format!(
            "job {}: conservative backfilling plans processors only (this job asks for nodes or GPUs): use fcfs, list or easy",
            j.id
        ));
    }
    let select: Box<dyn SelectionPolicy> = by_name(&policy.devices).unwrap_or_else(|| Box::new(LocalityPolicy));
    let placer = Placer::new(cluster, policy, seed);
    let mut node_of = Vec::new();
    for (n, node) in cluster.nodes.iter().enumerate() {
        node_of.extend(std::iter::repeat_n(n as u32, node.cores as usize));
    }
    let units = node_of.len();
    let mut profile = Profile { slices: vec![Slice { start: 0, free: Bits::full(units) }] };
    let mut events = Events::new();
    for (i, j) in jobs.iter().enumerate() {
        events.at(j.submit, i);
    }
    let mut records = Vec::with_capacity(jobs.len());
    while let Some(i) = events.pop() {
        let now = events.now();
        let j = &jobs[i];
        let size = j.request.cores as usize;
        let estimate = match policy.estimates {
            Estimates::Runtime => j.run,
            Estimates::Requested => j.limit.unwrap_or(j.run).max(j.run),
        };
        profile.advance(now);
        let planned = if size == 0 || size > units { None } else { profile.earliest(now, size, estimate) };
        let Some((start, free)) = planned else {
            records.push(Record {
                job: i,
                submit: j.submit,
                start: j.submit,
                end: j.submit,
                run: 0,
                gpu_milli: 0,
                local: None,
                placed: false,
            });
            continue;
        };
        let candidates: Vec<Candidate> =
            free.ones().map(|u| Candidate { index: u, domain: node_of[u as usize] }).collect();
        let chosen = select
            .select(&candidates, size)
            .ok_or_else(|| format!("selection policy {} chose nothing for job {}", select.name(), j.id))?;
        profile.reserve(start, start + estimate, &chosen);
        let mut placement = Placement::default();
        for u in chosen {
            let n = node_of[u as usize];
            match placement.parts.last_mut() {
                Some(p) if p.node == n => p.cores += 1,
                _ => placement.parts.push(Part { node: n, cores: 1, ..Part::default() }),
            }
        }
        // Units ascending are nodes ascending, so parts never repeat a node.
        records.push(Record {
            job: i,
            submit: j.submit,
            start,
            end: start + j.run,
            run: j.run,
            gpu_milli: 0,
            local: placer.local(&j.request, &placement),
            placed: true,
        });
        if records.len().is_multiple_of(4096) {
            progress(records.len(), jobs.len());
        }
    }
    progress(jobs.len(), jobs.len());
    records.sort_by_key(|r| r.job);
    Ok(Outcome { label: policy.label.clone(), records, events: events.handled() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Scheduler;
    use crate::time::seconds;
    use crate::workload::Request;

    fn job(run: u64, cores: u32) -> Job {
        Job {
            id: format!("{cores}x{run}"),
            submit: 0,
            run: seconds(run),
            limit: None,
            request: Request { cores, ..Request::default() },
            class: 0,
        }
    }

    #[test]
    fn reservations_backfill_holes_and_policies_choose_processors() {
        // 2 nodes of 4: A takes 6 for 100 s; B wants 8 (at 100); C, 2 for
        // 50 s, fits the hole beside A without delaying B.
        let cluster = Cluster::uniform("n", 2, 4, 0, "");
        let jobs = vec![job(100, 6), job(10, 8), job(50, 2), job(10, 9)];
        let d = Policy::from_scheduler(&Scheduler::default(), "d").unwrap();
        for name in ["first", "locality"] {
            let p = Policy::parse(&format!("conservative+{name}"), &d).unwrap();
            let o = replay(&cluster, &jobs, &p, 1, &mut |_, _| {}).unwrap();
            let starts: Vec<u64> = o.records.iter().map(|r| r.start / 1000).collect();
            assert_eq!(starts, [0, 100, 0, 0], "{name}");
            assert!(!o.records[3].placed);
            // 6 processors need 2 nodes either way: local.
            assert_eq!(o.records[0].local, Some(true));
            assert_eq!(o.records[2].local, Some(true));
        }
        // `first` puts a 3-processor job after a 2 across both nodes; `locality` keeps it on one.
        let jobs = vec![job(100, 2), job(100, 3)];
        let run = |name: &str| {
            let p = Policy::parse(&format!("conservative+{name}"), &d).unwrap();
            replay(&cluster, &jobs, &p, 1, &mut |_, _| {}).unwrap().records[1].local
        };
        assert_eq!(run("first"), Some(false));
        assert_eq!(run("locality"), Some(true));
    }

    #[test]
    fn nodes_and_gpus_are_refused_with_the_job_named() {
        let cluster = Cluster::uniform("n", 1, 4, 1, "X");
        let mut j = job(1, 1);
        j.request.gpus = 1;
        j.request.nodes = 1;
        let d = Policy::from_scheduler(&Scheduler::default(), "d").unwrap();
        let p = Policy::parse("conservative", &d).unwrap();
        assert!(replay(&cluster, &[j], &p, 1, &mut |_, _| {}).unwrap_err().starts_with("job 1x1:"));
    }
}
