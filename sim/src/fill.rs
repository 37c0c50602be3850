//! The fill replay of Weng et al. (*Beware of Fragmentation*, USENIX ATC
//! '23) on Alibaba's trace: tasks drawn from the trace arrive one after
//! another and never leave; each is placed at once or fails. As the GPU
//! asked for grows to the cluster's capacity and past it, the share of GPU
//! requests that found no place shows how a placement fragments the
//! cluster. Placement goes through [`Placer`], so every question is
//! asked of cder's policies as in a timed replay.

use crate::cluster::Cluster;
use crate::place::Placer;
use crate::policy::Policy;
use crate::rng::Rng;
use crate::state::State;
use crate::workload::Job;

/// One point of the curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FillPoint {
    /// GPU asked for so far, over the cluster's GPUs (1.0: all of them).
    pub arrived: f64,
    /// GPU asked for by tasks that found no place, over GPU asked for.
    pub unplaced: f64,
    /// Tasks that found no place, over tasks arrived (GPU tasks or not).
    pub failed_tasks: f64,
}

/// Draws tasks from `tasks` (with replacement, seeded) until the GPU
/// asked for reaches `points`' largest share of the cluster's GPUs,
/// placing each under `policy`; a point for each share in `points`.
pub fn fill(cluster: &Cluster, tasks: &[Job], policy: &Policy, seed: u64, points: &[f64]) -> Vec<FillPoint> {
    let capacity = cluster.gpus() as f64 * 1000.0;
    let mut placer = Placer::new(cluster, policy, seed);
    let mut state = State::new(cluster);
    let mut draw = Rng::new(seed).fork(0xf111);
    let mut targets: Vec<f64> = points.to_vec();
    targets.sort_by(f64::total_cmp);
    let mut out = Vec::new();
    let (mut asked, mut missed, mut n, mut failed) = (0.0, 0.0, 0usize, 0usize);
    if tasks.is_empty() || capacity == 0.0 {
        return out;
    }
    for &target in &targets {
        while asked < target * capacity {
            let t = &tasks[draw.below(tasks.len() as u64) as usize];
            let demand = t.request.gpu_milli_per_node() as f64;
            asked += demand;
            n += 1;
            match placer.place(&t.request, &state) {
                Some(p) => state.take(&p),
                None => {
                    missed += demand;
                    failed += 1;
                }
            }
        }
        out.push(FillPoint {
            arrived: asked / capacity,
            unplaced: if asked > 0.0 { missed / asked } else { 0.0 },
            failed_tasks: failed as f64 / n.max(1) as f64,
        });
    }
    out
}
