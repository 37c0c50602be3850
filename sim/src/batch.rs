//! The batch system's model: a queue served first-come-first-served, as a
//! list, or with EASY backfilling, over a cluster whose every placement
//! question goes to cder's policies ([`crate::place`]). Conservative
//! backfilling has its own planner ([`crate::conservative`]).

use std::collections::{BTreeSet, VecDeque};

use crate::cluster::Cluster;
use crate::conservative;
use crate::engine::Events;
use crate::metrics::{Outcome, Record};
use crate::place::Placer;
use crate::policy::{Estimates, Policy, Queue};
use crate::service::Service;
use crate::state::{Placement, State};
use crate::time::Time;
use crate::workload::{Job, Request};

enum Event {
    Arrive(usize),
    End(usize),
}

struct Running {
    placement: Placement,
    /// When the scheduler expects it to end (its estimate).
    expected_end: Time,
}

/// EASY's reservation for the queue's head: when it will fit, and what
/// will be free then besides it.
enum Shadow {
    /// A head of processors anywhere fits on free cores in all: `extra`
    /// cores at `time` are more than it needs.
    Cores { time: Time, extra: u64 },
    /// Any other head: the whole state at `time`.
    State { time: Time, state: State },
    /// It never fits with what runs now (it waits for nothing known).
    Never,
}

impl Shadow {
    fn time(&self) -> Time {
        match self {
            Shadow::Cores { time, .. } | Shadow::State { time, .. } => *time,
            Shadow::Never => Time::MAX,
        }
    }

    /// Whether `p`, still held at the reservation, leaves the head room
    /// (and if so, counts it as held then).
    fn leaves_room(&mut self, head: &Request, p: &Placement, placer: &Placer<'_>) -> bool {
        match self {
            Shadow::Cores { extra, .. } => {
                let cores: u64 = p.parts.iter().map(|x| x.cores as u64).sum();
                if cores <= *extra {
                    *extra -= cores;
                    true
                } else {
                    false
                }
            }
            Shadow::State { state, .. } => {
                state.take(p);
                if placer.fits(head, state) {
                    true
                } else {
                    state.give_back(p);
                    false
                }
            }
            Shadow::Never => true,
        }
    }
}

/// Works out the head's reservation from the running jobs' expected ends.
fn reservation(
    head: &Request,
    state: &State,
    by_end: &BTreeSet<(Time, usize)>,
    running: &[Option<Running>],
    now: Time,
    cluster: &Cluster,
    placer: &Placer<'_>,
) -> Shadow {
    let mut ends = by_end.iter().peekable();
    if Placer::spread_cores(head) {
        let need = head.cores as u64;
        let mut free = state.free_cores_total;
        while let Some(&(t, slot)) = ends.next() {
            if let Some(r) = &running[slot] {
                free += r.placement.parts.iter().map(|p| p.cores as u64).sum::<u64>();
            }
            let t = t.max(now);
            if ends.peek().is_some_and(|&&(u, _)| u.max(now) == t) {
                continue;
            }
            if free >= need {
                return Shadow::Cores { time: t, extra: free - need };
            }
        }
        return Shadow::Never;
    }
    let mut s = state.clone();
    while let Some(&(t, slot)) = ends.next() {
        if let Some(r) = &running[slot] {
            s.give(&r.placement, cluster);
        }
        let t = t.max(now);
        if ends.peek().is_some_and(|&&(u, _)| u.max(now) == t) {
            continue;
        }
        if placer.fits(head, &s) {
            return Shadow::State { time: t, state: s };
        }
    }
    Shadow::Never
}

/// Calls back with (jobs done, jobs in all) as a replay goes.
pub type Progress<'p> = &'p mut dyn FnMut(usize, usize);

/// Replays `jobs` on `cluster` under `policy`; `seed` seeds every random
/// choice. Jobs that could never fit the cluster are counted, not run.
pub fn replay(
    cluster: &Cluster,
    jobs: &[Job],
    policy: &Policy,
    service: &dyn Service,
    seed: u64,
    progress: Progress<'_>,
) -> Result<Outcome, String> {
    if policy.queue == Queue::Conservative {
        return conservative::replay(cluster, jobs, policy, seed, progress);
    }
    let mut placer = Placer::new(cluster, policy, seed);
    let empty = State::new(cluster);
    let mut state = empty.clone();
    let mut events = Events::new();
    for (i, j) in jobs.iter().enumerate() {
        events.at(j.submit, Event::Arrive(i));
    }
    let mut records: Vec<Option<Record>> = vec![None; jobs.len()];
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut running: Vec<Option<Running>> = Vec::new();
    // Running jobs by expected end (and slot): EASY's reservation walks it.
    let mut by_end: BTreeSet<(Time, usize)> = BTreeSet::new();
    let mut free_slots: Vec<usize> = Vec::new();
    let mut done = 0usize;
    let dispatch = |vgpgpu: bool, job: &Job| {
        if vgpgpu && job.request.gpus > 0 {
            policy.vgpgpu_dispatch
        } else {
            policy.dispatch
        }
    };
    let estimate = |job: &Job| match policy.estimates {
        Estimates::Runtime => job.run,
        Estimates::Requested => job.limit.unwrap_or(job.run),
    };
    while !events.is_empty() {
        let batch = events.pop_instant();
        let now = events.now();
        for e in batch {
            match e {
                Event::Arrive(i) => {
                    if placer.fits(&jobs[i].request, &empty) {
                        queue.push_back(i);
                    } else {
                        let j = &jobs[i];
                        records[i] = Some(Record {
                            job: i,
                            submit: j.submit,
                            start: j.submit,
                            end: j.submit,
                            run: 0,
                            gpu_milli: 0,
                            local: None,
                            placed: false,
                        });
                        done += 1;
                    }
                }
                Event::End(slot) => {
                    if let Some(r) = running[slot].take() {
                        by_end.remove(&(r.expected_end, slot));
                        state.give(&r.placement, cluster);
                        free_slots.push(slot);
                        done += 1;
                        if done.is_multiple_of(4096) {
                            progress(done, jobs.len());
                        }
                    }
                }
            }
        }
        // Starts `i` on `p` now.
        let mut start = |i: usize,
                         p: Placement,
                         state: &mut State,
                         events: &mut Events<Event>,
                         running: &mut Vec<Option<Running>>,
                         by_end: &mut BTreeSet<(Time, usize)>,
                         placer: &Placer<'_>| {
            let j = &jobs[i];
            let d = dispatch(policy.vgpgpu, j);
            let run = service.run(j, &p);
            let end = now + d + run;
            state.take(&p);
            records[i] = Some(Record {
                job: i,
                submit: j.submit,
                start: now,
                end,
                run,
                gpu_milli: p.gpu_milli(),
                local: placer.local(&j.request, &p),
                placed: true,
            });
            let expected_end = now + d + estimate(j);
            let r = Running { placement: p, expected_end };
            let slot = match free_slots.pop() {
                Some(s) => {
                    running[s] = Some(r);
                    s
                }
                None => {
                    running.push(Some(r));
                    running.len() - 1
                }
            };
            by_end.insert((expected_end, slot));
            events.at(end, Event::End(slot));
        };
        // First come, first served, as far as it goes.
        while let Some(&head) = queue.front() {
            match placer.place(&jobs[head].request, &state) {
                Some(p) => {
                    queue.pop_front();
                    start(head, p, &mut state, &mut events, &mut running, &mut by_end, &placer);
                }
                None => break,
            }
        }
        match policy.queue {
            Queue::Fcfs | Queue::Conservative => {}
            Queue::List => {
                let mut k = 1;
                let mut looked = 0;
                while k < queue.len() && looked < policy.backfill_depth {
                    looked += 1;
                    let i = queue[k];
                    if placer.fits(&jobs[i].request, &state) {
                        if let Some(p) = placer.place(&jobs[i].request, &state) {
                            queue.remove(k);
                            start(i, p, &mut state, &mut events, &mut running, &mut by_end, &placer);
                            continue;
                        }
                    }
                    k += 1;
                }
            }
            Queue::Easy => {
                let Some(&head) = queue.front() else { continue };
                // The head's reservation: when enough will have ended, and
                // what is free then; worked out once a job could use it.
                let mut shadow: Option<Shadow> = None;
                let mut k = 1;
                let mut looked = 0;
                while k < queue.len() && looked < policy.backfill_depth {
                    looked += 1;
                    let i = queue[k];
                    let j = &jobs[i];
                    if !placer.fits(&j.request, &state) {
                        k += 1;
                        continue;
                    }
                    let shadow = shadow.get_or_insert_with(|| {
                        reservation(&jobs[head].request, &state, &by_end, &running, now, cluster, &placer)
                    });
                    let ends_in_time = now.saturating_add(dispatch(policy.vgpgpu, j) + estimate(j)) <= shadow.time();
                    let Some(p) = placer.place(&j.request, &state) else {
                        k += 1;
                        continue;
                    };
                    // Ending later, it may still start if the head fits beside it then.
                    if !ends_in_time && !shadow.leaves_room(&jobs[head].request, &p, &placer) {
                        k += 1;
                        continue;
                    }
                    queue.remove(k);
                    start(i, p, &mut state, &mut events, &mut running, &mut by_end, &placer);
                }
            }
        }
    }
    progress(jobs.len(), jobs.len());
    let records = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or(Record {
                job: i,
                submit: jobs[i].submit,
                start: jobs[i].submit,
                end: jobs[i].submit,
                run: 0,
                gpu_milli: 0,
                local: None,
                placed: false,
            })
        })
        .collect();
    Ok(Outcome { label: policy.label.clone(), records, events: events.handled() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Scheduler;
    use crate::service::Recorded;
    use crate::time::seconds;
    use crate::workload::Request;

    fn job(id: u32, submit: u64, run: u64, nodes: u32, cores: u32, gpus: u32) -> Job {
        Job {
            id: id.to_string(),
            submit: seconds(submit),
            run: seconds(run),
            limit: None,
            request: Request { nodes, cores, gpus, ..Request::default() },
            class: 0,
        }
    }

    fn policy(words: &str) -> Policy {
        let d = Policy::from_scheduler(&Scheduler::default(), "d").unwrap();
        Policy::parse(words, &d).unwrap()
    }

    #[test]
    fn fcfs_blocks_list_and_easy_backfill() {
        let cluster = Cluster::uniform("n", 2, 4, 2, "X");
        // A: 2 nodes for 100 s at 0. B: both nodes' 2 GPUs at 1 (must wait).
        // C: 1 node, 1 GPU, 10 s, at 2: fits only after A; D: never fits.
        let jobs =
            vec![job(1, 0, 100, 1, 4, 2), job(2, 1, 50, 2, 4, 2), job(3, 2, 10, 1, 1, 0), job(4, 3, 10, 3, 1, 0)];
        let o = replay(&cluster, &jobs, &policy("fcfs"), &Recorded, 1, &mut |_, _| {}).unwrap();
        assert_eq!(o.records[1].start, seconds(100));
        assert_eq!(o.records[2].start, seconds(150), "C waits behind B under FCFS");
        assert!(!o.records[3].placed);
        let o = replay(&cluster, &jobs, &policy("easy"), &Recorded, 1, &mut |_, _| {}).unwrap();
        assert_eq!(o.records[2].start, seconds(2), "C backfills: it ends before B's reservation");
        assert_eq!(o.records[1].start, seconds(100));
        let o = replay(&cluster, &jobs, &policy("list"), &Recorded, 1, &mut |_, _| {}).unwrap();
        assert_eq!(o.records[2].start, seconds(2));
        let s = o.summary(cluster.gpus());
        assert_eq!(s.makespan_s, 150.0);
        assert_eq!(s.unplaceable, 0.25);
    }

    #[test]
    fn easy_never_delays_the_head() {
        let cluster = Cluster::uniform("n", 1, 4, 0, "");
        // A holds 2 cores to 100; B wants 4 (reserved at 100); C (2 cores,
        // 200 s) would delay B and must wait; D (2 cores, 50 s) fits.
        let jobs =
            vec![job(1, 0, 100, 1, 2, 0), job(2, 1, 10, 1, 4, 0), job(3, 2, 200, 1, 2, 0), job(4, 3, 50, 1, 2, 0)];
        let o = replay(&cluster, &jobs, &policy("easy"), &Recorded, 1, &mut |_, _| {}).unwrap();
        assert_eq!(o.records[1].start, seconds(100));
        assert_eq!(o.records[3].start, seconds(3));
        assert_eq!(o.records[2].start, seconds(110));
    }
}
