//! The seed thesis (Walsh, *Accelerated Computing on Computational Grid
//! Infrastructures*, TCD 2016), §4.4.2 "Batch Workload Performance using
//! the LRMS", Tables 4.5–4.9.
//!
//! Five worker nodes of 8 cores and 2 GTS 450 GPUs; 100-job mixes of one-
//! and two-GPU jobs (GROMACS, 2 CPU threads each), all submitted at once;
//! physical GPUs (pGPGPU) against vGPGPUs from the registry, allocated
//! at random or local first ("prioritised"). The figure is the workload's
//! completion time; the thesis's totals add its five samples of each mix.
//!
//! Here: the same platform and mixes, replayed through the batch model
//! with cder's own code answering: cderd's `locality` selection for GPUs
//! on a node, the registry's `random` (seeded) and `local-first` policies
//! for backends. Service times are Table 4.9's, by how many of a job's
//! vGPGPUs are on its own node. The batch system is FCFS and starts a job
//! on the node with the most free cores (its job slots): the thesis's
//! local-first 100/0 mix averaged 51.81 s a job (Table 4.8), close to
//! Table 4.9's 50.67 s local time, so its LRMS spread jobs over the nodes;
//! packing them (first fit) would put four of ten on remote GPUs and make
//! that mix take longer than the thesis measured even with no start cost.
//!
//! Tables 4.5–4.8 imply a start cost per job that the run times leave out
//! (Mix 100/0 runs 10 waves in 627 s of 45.6 s jobs on physical GPUs,
//! 584 s of 51.8 s jobs on vGPGPUs). One dispatch latency per allocation
//! mode is fitted, each on one cell (Mix 100/0, physical and prioritised),
//! and the other 13 cells are predictions.

use crate::batch::replay;
use crate::cluster::Cluster;
use crate::metrics::Outcome;
use crate::policy::{NodeChoice, Policy, Queue};
use crate::rng::Rng;
use crate::service::Service;
use crate::state::Placement;
use crate::time::{from_secs_f64, Time};
use crate::workload::{Job, Request};

/// The mixes: (one-GPU jobs, two-GPU jobs).
pub const MIXES: [(u32, u32); 5] = [(100, 0), (75, 25), (50, 50), (25, 75), (0, 100)];

/// The allocation modes, in Table 4.5's column order.
pub const MODES: [&str; 3] = ["physical", "random", "local-first"];

/// Table 4.5: average workload completion time (s), per mix and mode.
pub const TABLE_4_5: [[f64; 3]; 5] = [
    [627.0, 653.8, 583.9],
    [915.2, 846.6, 811.2],
    [1084.0, 1056.2, 993.7],
    [1193.8, 1225.8, 1151.9],
    [1234.2, 1374.0, 1276.6],
];

/// Table 4.5's totals (7h 01m, 7h 10m, 6h 41m): five samples of every mix.
pub const TABLE_4_5_TOTALS: [&str; 3] = ["7h 01m", "7h 10m", "6h 41m"];

/// Samples of each mix in the thesis (and in the totals).
pub const THESIS_SAMPLES: u32 = 5;

/// Table 4.9: run time (s) of one job (20 GROMACS invocations).
#[derive(Debug, Clone, Copy)]
pub struct Table49 {
    /// One physical GPU.
    pub physical_1: f64,
    /// Two physical GPUs.
    pub physical_2: f64,
    /// One vGPGPU on the job's node / on another node.
    pub local_1: f64,
    /// One remote vGPGPU.
    pub remote_1: f64,
    /// Two vGPGPUs: both local, one of each, both remote.
    pub local_2: f64,
    /// One local and one remote.
    pub mixed_2: f64,
    /// Both remote.
    pub remote_2: f64,
}

/// The thesis's Table 4.9.
pub const TABLE_4_9: Table49 = Table49 {
    physical_1: 45.29,
    physical_2: 46.30,
    local_1: 50.67,
    remote_1: 60.40,
    local_2: 55.16,
    mixed_2: 60.03,
    remote_2: 65.98,
};

impl Service for Table49 {
    fn run(&self, job: &Job, p: &Placement) -> Time {
        let s = if p.backends.is_empty() {
            if job.request.gpus >= 2 {
                self.physical_2
            } else {
                self.physical_1
            }
        } else {
            let local = p.backends.iter().filter(|b| b.node == b.frontend).count();
            match (p.backends.len(), local) {
                (1, 1) => self.local_1,
                (1, _) => self.remote_1,
                (_, 2) => self.local_2,
                (_, 1) => self.mixed_2,
                _ => self.remote_2,
            }
        };
        from_secs_f64(s)
    }
}

/// The platform: 5 nodes of 8 cores and 2 GPUs.
pub fn cluster() -> Cluster {
    let mut c = Cluster::uniform("wn", 5, 8, 2, "GTS450");
    c.scheduler.queue = "fcfs".into();
    c.scheduler.node = "least-loaded".into();
    c
}

/// One sample of a mix: its jobs in a shuffled order, all at time 0.
pub fn workload((one, two): (u32, u32), seed: u64) -> Vec<Job> {
    let mut gpus: Vec<u32> = std::iter::repeat_n(1, one as usize).chain(std::iter::repeat_n(2, two as usize)).collect();
    Rng::new(seed).shuffle(&mut gpus);
    gpus.into_iter()
        .enumerate()
        .map(|(i, g)| Job {
            id: format!("gromacs-{i}"),
            submit: 0,
            run: from_secs_f64(if g == 1 { TABLE_4_9.physical_1 } else { TABLE_4_9.physical_2 }),
            limit: None,
            request: Request { nodes: 1, cores: 2, gpus: g, ..Request::default() },
            class: g,
        })
        .collect()
}

/// The policy of a mode, with the two dispatch latencies.
pub fn policy(mode: &str, dispatch: (Time, Time)) -> Policy {
    let c = cluster();
    let defaults = Policy::from_scheduler(&c.scheduler, mode).expect("the thesis's scheduler is valid");
    let mut p = Policy::parse(mode, &defaults).expect("the thesis's modes are valid");
    assert_eq!((p.queue, &p.node), (Queue::Fcfs, &NodeChoice::LeastLoaded));
    p.dispatch = dispatch.0;
    p.vgpgpu_dispatch = dispatch.1;
    p
}

/// One replay of one sample.
pub fn replay_sample(mode: &str, mix: (u32, u32), dispatch: (Time, Time), seed: u64) -> Outcome {
    let c = cluster();
    let p = policy(mode, dispatch);
    replay(&c, &workload(mix, seed), &p, &TABLE_4_9, seed, &mut |_, _| {}).expect("the thesis's jobs fit")
}

/// The mean completion time (s) of a mix over `samples` samples.
pub fn cell(mode: &str, mix: (u32, u32), dispatch: (Time, Time), samples: u32) -> f64 {
    let c = cluster();
    (1..=samples as u64).map(|s| replay_sample(mode, mix, dispatch, s).summary(c.gpus()).makespan_s).sum::<f64>()
        / samples as f64
}

/// The dispatch latency (ms) that makes `mode`'s `mix` take `target`
/// seconds, by bisection (completion time grows with the latency).
pub fn fit(mode: &str, mix: (u32, u32), target: f64, samples: u32) -> Time {
    let vgpgpu = mode != "physical";
    let with = |d: Time| if vgpgpu { (0, d) } else { (d, 0) };
    let (mut lo, mut hi) = (0, 60_000);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if cell(mode, mix, with(mid), samples) < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Table 4.5 beside cder's replay of it.
#[derive(Debug, Clone)]
pub struct Reproduction {
    /// The fitted dispatch latencies (physical, vGPGPU), ms.
    pub dispatch: (Time, Time),
    /// Per mix and mode: (thesis, cder-sim) seconds.
    pub cells: [[(f64, f64); 3]; 5],
    /// Per mode: (thesis, cder-sim) totals, seconds (five samples of each mix).
    pub totals: [(f64, f64); 3],
}

/// Fits the two latencies and replays every cell over `samples` samples.
pub fn reproduce(samples: u32) -> Reproduction {
    let dispatch =
        (fit("physical", MIXES[0], TABLE_4_5[0][0], samples), fit("local-first", MIXES[0], TABLE_4_5[0][2], samples));
    let mut cells = [[(0.0, 0.0); 3]; 5];
    let mut totals = [(0.0, 0.0); 3];
    for (r, mix) in MIXES.iter().enumerate() {
        for (c, mode) in MODES.iter().enumerate() {
            let ours = cell(mode, *mix, dispatch, samples);
            cells[r][c] = (TABLE_4_5[r][c], ours);
            totals[c].0 += TABLE_4_5[r][c] * THESIS_SAMPLES as f64;
            totals[c].1 += ours * THESIS_SAMPLES as f64;
        }
    }
    Reproduction { dispatch, cells, totals }
}

/// A mode's order in a row, fastest first (`local-first < physical < random`).
pub fn ordering(values: [f64; 3]) -> String {
    let mut idx = [0usize, 1, 2];
    idx.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    idx.iter().map(|&i| MODES[i]).collect::<Vec<_>>().join(" < ")
}

/// Table 4.5 beside cder-sim's, as docs/simulation.md shows it.
pub fn markdown(r: &Reproduction) -> String {
    let mut out = format!(
        "Fitted dispatch latency: physical {:.2} s (on Mix 100/0, physical), vGPGPU {:.2} s (on Mix 100/0, \
         local first); the other 13 cells are predictions.\n\n\
         | Workload | pGPGPU (thesis) | cder-sim | vGPGPU random (thesis) | cder-sim | vGPGPU prioritised (thesis) | cder-sim | ordering, thesis | ordering, cder-sim |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        r.dispatch.0 as f64 / 1000.0,
        r.dispatch.1 as f64 / 1000.0
    );
    for (row, mix) in r.cells.iter().zip(MIXES) {
        out += &format!("| Mix {} {} |", mix.0, mix.1);
        for &(thesis, ours) in row {
            out += &format!(" {thesis:.1} s | {ours:.1} s ({:+.1} %) |", (ours / thesis - 1.0) * 100.0);
        }
        out += &format!(" {} | {} |\n", ordering(row.map(|c| c.0)), ordering(row.map(|c| c.1)));
    }
    out += "| Total Time |";
    for (i, &(thesis, ours)) in r.totals.iter().enumerate() {
        let _ = thesis;
        out += &format!(" {} | {} |", TABLE_4_5_TOTALS[i], crate::time::hours_minutes((ours * 1000.0) as u64));
    }
    out += &format!(" {} | {} |\n", ordering(r.totals.map(|t| t.0)), ordering(r.totals.map(|t| t.1)));
    out
}
