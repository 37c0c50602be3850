//! Seed 001 (Ravi, Becchi, Jiang, Agrawal, Chakradhar, *Scheduling
//! Concurrent Applications on a Cluster of CPU-GPU Nodes*, CCGrid 2012),
//! §IV-D "Experimental Results on Multi-node Applications": 16 nodes with
//! one GPU each; 32 jobs drawn from the pool of 18 (three applications, two
//! datasets, 2, 4 or 8 nodes; times of Fig. 2, transcribed in
//! `sim/data/ravi2012-fig2.csv`) and dispatched in batches of 8 with
//! exponential inter-arrival times; TORQUE-like, MCT and the seed's FMS
//! (molding the version and the node count). The seed: FMS "achieves the
//! least completion time and is up to 42 % better than the faster of
//! TORQUE and MCT" (Fig. 6, mixes of short and long jobs), each molding
//! alone already improves on both, and the two together add about 12 %.
//!
//! The seed does not say how long a long job is, nor the batches' mean
//! inter-arrival time: here a job is long when its CPU+GPU time on the
//! nodes it asks for is 100 s or more (five of the 18), and batches arrive
//! 60 s apart on average.

use crate::moldable::{completion, replay, MoldableJob, Molding, Scheduler};
use crate::rng::Rng;
use crate::time::{as_secs_f64, from_secs_f64, Time};

/// Fig. 2, as transcribed (CSV with `#` comments).
pub const FIG_2: &str = include_str!("../../data/ravi2012-fig2.csv");

/// Nodes of the platform.
pub const NODES: u32 = 16;
/// Jobs per experiment, per batch.
pub const JOBS: usize = 32;
/// Jobs per batch.
pub const BATCH: usize = 8;
/// Mean time between batches (s): the seed does not say.
pub const MEAN_INTERARRIVAL_S: f64 = 60.0;
/// A job is long at or above this CPU+GPU time on its requested nodes (s).
pub const LONG_S: f64 = 100.0;
/// The seed's figure: FMS up to 42 % better than the faster of TORQUE and MCT.
pub const SEED_BEST_GAIN: f64 = 0.42;

/// The schedulers compared, in the seed's order (Fig. 6).
pub fn schedulers() -> [(&'static str, Scheduler); 5] {
    [
        ("TORQUE", Scheduler::Torque),
        ("MCT", Scheduler::Mct),
        ("MoldingResType only", Scheduler::Fms(Molding { version: true, nodes: false })),
        ("MoldingNumNodes only", Scheduler::Fms(Molding { version: false, nodes: true })),
        ("FMS (ResType+NumNodes)", Scheduler::Fms(Molding { version: true, nodes: true })),
    ]
}

/// The pool of 18 jobs: each application and dataset asking for 2, 4 or 8
/// nodes, with the times of every node count up to the one it asks for.
pub fn pool() -> Result<Vec<MoldableJob>, String> {
    let mut rows: Vec<(String, u32, [Time; 3])> = Vec::new();
    for (i, line) in FIG_2.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("app,") {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let bad = |what: &str| format!("ravi2012-fig2.csv:{}: {what}", i + 1);
        if f.len() != 6 {
            return Err(bad("6 fields expected"));
        }
        let n: u32 = f[2].parse().map_err(|_| bad("nodes"))?;
        let mut t = [0; 3];
        for k in 0..3 {
            let s: f64 = f[3 + k].parse().map_err(|_| bad("time"))?;
            t[k] = from_secs_f64(s);
        }
        rows.push((format!("{} {}", f[0], f[1]), n, t));
    }
    let mut pool = Vec::new();
    for (name, n, _) in &rows {
        let times: Vec<(u32, [Time; 3])> =
            rows.iter().filter(|(m, k, _)| m == name && k <= n).map(|(_, k, t)| (*k, *t)).collect();
        pool.push(MoldableJob { name: format!("{name} on {n}"), arrival: 0, nodes: *n, times });
    }
    Ok(pool)
}

/// One experiment: `JOBS` jobs, a share `long` of them long, in batches.
pub fn workload(pool: &[MoldableJob], long: f64, seed: u64) -> Vec<MoldableJob> {
    let is_long =
        |j: &MoldableJob| j.time(j.nodes, crate::moldable::Version::CpuGpu).is_some_and(|t| as_secs_f64(t) >= LONG_S);
    let longs: Vec<&MoldableJob> = pool.iter().filter(|j| is_long(j)).collect();
    let shorts: Vec<&MoldableJob> = pool.iter().filter(|j| !is_long(j)).collect();
    let mut rng = Rng::new(seed);
    let n_long = (JOBS as f64 * long).round() as usize;
    let mut jobs: Vec<MoldableJob> = (0..JOBS)
        .map(|k| {
            let from = if k < n_long { &longs } else { &shorts };
            from[rng.below(from.len() as u64) as usize].clone()
        })
        .collect();
    rng.shuffle(&mut jobs);
    let mut at = 0.0;
    for (k, j) in jobs.iter_mut().enumerate() {
        if k > 0 && k % BATCH == 0 {
            at += rng.exponential(MEAN_INTERARRIVAL_S);
        }
        j.arrival = from_secs_f64(at);
    }
    jobs
}

/// One mix: the mean completion time (s) of each scheduler over `samples`.
pub fn mix(long: f64, samples: u32) -> Result<Vec<(&'static str, f64)>, String> {
    let pool = pool()?;
    let mut out: Vec<(&'static str, f64)> = schedulers().iter().map(|(n, _)| (*n, 0.0)).collect();
    for s in 1..=samples as u64 {
        let jobs = workload(&pool, long, s);
        for (k, (_, sched)) in schedulers().iter().enumerate() {
            out[k].1 += as_secs_f64(completion(&replay(&jobs, NODES, *sched, "locality")?)) / samples as f64;
        }
    }
    Ok(out)
}

/// FMS's gain over the faster of TORQUE and MCT: 1 − FMS / min(TORQUE, MCT).
pub fn gain(row: &[(&str, f64)]) -> f64 {
    let baseline = row[0].1.min(row[1].1);
    1.0 - row[4].1 / baseline
}

/// The three mixes of Fig. 6: the share of long jobs.
pub const MIXES: [f64; 3] = [0.25, 0.5, 0.75];

/// Fig. 6 beside cder-sim's, as docs/simulation.md shows it: each
/// scheduler's completion time over FMS's, per mix.
pub fn markdown(samples: u32) -> Result<String, String> {
    let mut out = format!(
        "{JOBS} jobs in batches of {BATCH}, {NODES} nodes, {samples} samples per mix; completion time over FMS's \
         (Fig. 6 plots the same ratio).\n\n| mix |"
    );
    for (name, _) in schedulers() {
        out += &format!(" {name} |");
    }
    out += " FMS's gain over the faster of TORQUE and MCT (seed: up to 42 %) |\n|---|";
    out += &"---|".repeat(schedulers().len() + 1);
    out.push('\n');
    for long in MIXES {
        let row = mix(long, samples)?;
        let fms = row[4].1;
        out += &format!("| {:.0} SJ / {:.0} LJ |", (1.0 - long) * 100.0, long * 100.0);
        for (_, t) in &row {
            out += &format!(" {:.3} ({t:.0} s) |", t / fms);
        }
        out += &format!(" {:.1} % |\n", gain(&row) * 100.0);
    }
    Ok(out)
}
