//! Time-shared GPUs (seed 004, Becchi's runtime under TORQUE, §3.7.1.4):
//! each GPU offered as `shares` slots (`[node.sharing] shares_per_gpu`,
//! 1 = serialized), jobs that alternate host and GPU phases, and a GPU that
//! runs its sharers side by side until their GPU phases saturate it.
//!
//! A job alone on a GPU of speed s takes `host + gpu / s`; its GPU duty is
//! the GPU part's share of that. With sharers whose duties add up to more
//! than 1, the GPU is the bottleneck and every sharer slows by that sum
//! (processor sharing of the GPU phases); below 1, the sharers overlap
//! freely. The loop keeps every job's remaining solo time in integer
//! microseconds and recomputes a GPU's end times whenever its sharers
//! change.
//!
//! Which slot a job takes is cderd's selection policy: every free slot is
//! a candidate whose domain is its GPU, so `locality` (cderd's default)
//! takes a slot of the GPU with the most free slots (the least loaded) and
//! `first` the lowest-numbered GPU with room. Jobs reach a node either as
//! TORQUE sent them (an equal share of the jobs to each node, in turn);
//! with inter-node offloading, a job its node has no free slot for takes
//! one on another node.

use cder_ledger::policy::{by_name, Candidate};

use crate::engine::Events;
use crate::time::Time;

/// A GPU: the node it is on and its speed relative to the reference GPU
/// the jobs' times were measured on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedGpu {
    /// Its node.
    pub node: u32,
    /// Speed relative to the reference (1.0: as fast).
    pub speed: f64,
}

/// A job: host time and GPU time (ms, on the reference GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhasedJob {
    /// Host-side time: CUDA context, transfers set-up, CPU work.
    pub host: Time,
    /// GPU time on the reference GPU.
    pub gpu: Time,
}

/// How jobs reach the nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Dispatch {
    /// TORQUE: job i to node i mod nodes, each node serving its own queue.
    RoundRobin,
    /// Offloading: TORQUE's queues as above, but a job its node has no free
    /// slot for takes one on another node; run away from its node it takes
    /// this much longer (0.192: +19.2 %), its calls crossing the network.
    Offload(f64),
}

struct Active {
    job: usize,
    gpu: usize,
    /// Solo time left, µs on this GPU.
    left_us: u64,
    /// GPU duty, thousandths.
    duty: u64,
    /// The version of its end event that counts.
    epoch: u64,
}

/// Replays `jobs` (all queued at 0) on `gpus` with `shares` slots each;
/// returns each job's end (ms). `selection` names cderd's policy.
pub fn replay(
    gpus: &[SharedGpu],
    nodes: u32,
    shares: u32,
    jobs: &[PhasedJob],
    dispatch: Dispatch,
    selection: &str,
) -> Result<Vec<Time>, String> {
    let select = by_name(selection).ok_or_else(|| format!("no selection policy {selection:?}"))?;
    let shares = shares.max(1) as usize;
    let mut queues: Vec<std::collections::VecDeque<usize>> = vec![Default::default(); nodes.max(1) as usize];
    for i in 0..jobs.len() {
        queues[i % nodes.max(1) as usize].push_back(i);
    }
    let mut busy: Vec<Vec<bool>> = vec![vec![false; shares]; gpus.len()];
    let mut active: Vec<Active> = Vec::new();
    let mut ends = vec![0; jobs.len()];
    // Events: (active job index's job, epoch).
    let mut events: Events<(usize, u64)> = Events::new();
    let mut last = 0;
    let load = |active: &[Active], g: usize| -> u64 { active.iter().filter(|a| a.gpu == g).map(|a| a.duty).sum() };
    let mut epoch = 0u64;
    // Recomputes GPU g's end events after a change.
    fn reschedule(active: &mut [Active], g: usize, events: &mut Events<(usize, u64)>, epoch: &mut u64) {
        let l: u64 = active.iter().filter(|a| a.gpu == g).map(|a| a.duty).sum::<u64>().max(1000);
        for a in active.iter_mut().filter(|a| a.gpu == g) {
            *epoch += 1;
            a.epoch = *epoch;
            let ms = (a.left_us * l).div_ceil(1000 * 1000);
            events.after(ms, (a.job, a.epoch));
        }
    }
    let start_jobs = |active: &mut Vec<Active>,
                      busy: &mut Vec<Vec<bool>>,
                      queues: &mut Vec<std::collections::VecDeque<usize>>,
                      events: &mut Events<(usize, u64)>,
                      epoch: &mut u64|
     -> Result<(), String> {
        for (q, queue) in queues.iter_mut().enumerate() {
            while let Some(&i) = queue.front() {
                // Free slots on this queue's node, else (offloading) elsewhere, as candidates.
                let free_on = |here: bool| -> Vec<Candidate> {
                    gpus.iter()
                        .enumerate()
                        .filter(|(_, g)| (g.node as usize == q) == here)
                        .flat_map(|(gi, _)| {
                            busy[gi]
                                .iter()
                                .enumerate()
                                .filter(|(_, b)| !**b)
                                .map(move |(s, _)| Candidate { index: (gi * 64 + s) as u32, domain: gi as u32 })
                        })
                        .collect()
                };
                let mut candidates = free_on(true);
                if candidates.is_empty() && matches!(dispatch, Dispatch::Offload(_)) {
                    candidates = free_on(false);
                }
                let Some(chosen) = select.select(&candidates, 1) else { break };
                let slot = chosen[0] as usize;
                let (g, s) = (slot / 64, slot % 64);
                queue.pop_front();
                busy[g][s] = true;
                let j = jobs[i];
                let remote = match dispatch {
                    Dispatch::Offload(cost) if gpus[g].node as usize != q => 1.0 + cost,
                    _ => 1.0,
                };
                let gpu_us = (j.gpu as f64 * 1000.0 * remote / gpus[g].speed).round() as u64;
                let solo = (j.host as f64 * 1000.0 * remote).round() as u64 + gpu_us;
                // Progress already made by the others on g up to now is
                // accounted in `advance` before this call.
                active.push(Active {
                    job: i,
                    gpu: g,
                    left_us: solo,
                    duty: (gpu_us * 1000).checked_div(solo).unwrap_or(0),
                    epoch: 0,
                });
                reschedule(active, g, events, epoch);
            }
        }
        Ok(())
    };
    if shares > 64 {
        return Err("at most 64 shares per GPU".into());
    }
    // Moves every active job's remaining time forward to `now`.
    let advance = |active: &mut [Active], from: Time, now: Time| {
        let dt = now - from;
        if dt == 0 {
            return;
        }
        let loads: Vec<u64> = (0..gpus.len()).map(|g| load(active, g).max(1000)).collect();
        for a in active.iter_mut() {
            let done = dt * 1000 * 1000 / loads[a.gpu];
            a.left_us = a.left_us.saturating_sub(done);
        }
    };
    start_jobs(&mut active, &mut busy, &mut queues, &mut events, &mut epoch)?;
    while !events.is_empty() {
        let batch = events.pop_instant();
        let now = events.now();
        advance(&mut active, last, now);
        last = now;
        let mut changed = Vec::new();
        for (job, ep) in batch {
            if let Some(k) = active.iter().position(|a| a.job == job && a.epoch == ep) {
                let a = active.swap_remove(k);
                ends[a.job] = now;
                // Free the slot: the lowest busy slot of its GPU (slots are alike).
                if let Some(s) = busy[a.gpu].iter().position(|b| *b) {
                    busy[a.gpu][s] = false;
                }
                changed.push(a.gpu);
            }
        }
        if changed.is_empty() {
            continue;
        }
        changed.sort_unstable();
        changed.dedup();
        for g in changed {
            reschedule(&mut active, g, &mut events, &mut epoch);
        }
        start_jobs(&mut active, &mut busy, &mut queues, &mut events, &mut epoch)?;
    }
    if let Some(q) = queues.iter().find(|q| !q.is_empty()) {
        return Err(format!("{} jobs never found a slot (a node without GPUs?)", q.len()));
    }
    Ok(ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_overlaps_host_phases_until_the_gpu_saturates() {
        let gpu = [SharedGpu { node: 0, speed: 1.0 }];
        // Four jobs of 1 s host + 3 s GPU: serialized 16 s; shared 4-way the
        // GPU is the bottleneck: 12 s of GPU work, duty 0.75 each → 3.0 load.
        let jobs = [PhasedJob { host: 1000, gpu: 3000 }; 4];
        let serial = replay(&gpu, 1, 1, &jobs, Dispatch::RoundRobin, "locality").unwrap();
        assert_eq!(serial.iter().max(), Some(&16_000));
        let shared = replay(&gpu, 1, 4, &jobs, Dispatch::RoundRobin, "locality").unwrap();
        assert_eq!(shared.iter().max(), Some(&12_000));
        // Two of them only: load 1.5, each takes 6 s.
        let two = replay(&gpu, 1, 4, &jobs[..2], Dispatch::RoundRobin, "locality").unwrap();
        assert_eq!(two, vec![6000, 6000]);
    }

    #[test]
    fn locality_spreads_shares_and_offloading_balances_nodes() {
        // Node 0: two GPUs; node 1: one. Six jobs, 1 s each, GPU only.
        let gpus =
            [SharedGpu { node: 0, speed: 1.0 }, SharedGpu { node: 0, speed: 1.0 }, SharedGpu { node: 1, speed: 1.0 }];
        let jobs = [PhasedJob { host: 0, gpu: 1000 }; 6];
        let rr = replay(&gpus, 2, 4, &jobs, Dispatch::RoundRobin, "locality").unwrap();
        assert_eq!(rr.iter().max(), Some(&3000), "three jobs on node 1's one GPU");
        let one_slot = replay(&gpus, 2, 1, &jobs, Dispatch::RoundRobin, "locality").unwrap();
        assert_eq!(one_slot.iter().max(), Some(&3000), "node 1's three in turn");
        // Offloading: node 1's second and third jobs go to node 0's GPUs.
        let offload = replay(&gpus, 2, 1, &jobs, Dispatch::Offload(0.0), "locality").unwrap();
        assert_eq!(offload.iter().max(), Some(&2000), "two jobs per GPU");
        let costly = replay(&gpus, 2, 1, &jobs, Dispatch::Offload(0.5), "locality").unwrap();
        assert_eq!(costly.iter().max(), Some(&2500), "a job run away from its node takes 1.5 s");
        // Node 0's three jobs: `locality` spreads them (2 + 1), `first` packs GPU 0.
        let packed = replay(&gpus, 2, 4, &jobs, Dispatch::RoundRobin, "first").unwrap();
        assert_eq!(packed[0].max(packed[2]).max(packed[4]), 3000);
        assert_eq!(rr[0].max(rr[2]).max(rr[4]), 2000);
    }
}
