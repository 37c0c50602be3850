//! Seed 004's sharing, on a production trace: Alibaba's 2023 GPU cluster
//! (1,523 nodes, 6,212 GPUs; 8,152 tasks, 3,078 of them asking for a part
//! of a GPU), filled as Weng et al. (USENIX ATC '23) fill it, measuring
//! the share of GPU requests that cannot be placed as the cluster fills.
//! Their FGD policy on this trace is the published reference; its figures
//! are not reproduced here.
//!
//! Compared: cder as deployed with SLURM (the lowest-numbered node that
//! fits, cderd's `locality` for whole GPUs, a share on the first GPU with
//! room: SLURM's shard order), and Weng et al.'s baselines, best fit (the
//! node and GPU left with the least room) and random fit.

use std::path::Path;

use crate::cluster::Cluster;
use crate::fill::{fill, FillPoint};
use crate::policy::Policy;
use crate::read::{alibaba, OnBadLine};
use crate::workload::Job;

/// The node list and the default task list, under the traces folder.
pub const NODES: &str = "alibaba-openb/openb_node_list_all_node.csv.gz";
/// The default task list.
pub const TASKS: &str = "alibaba-openb/openb_pod_list_default.csv.gz";

/// The policies compared: (label, words).
pub const POLICIES: [(&str, &str); 3] = [
    ("cder with SLURM (first fit)", "first-fit+share=first"),
    ("best fit", "best-fit+share=best"),
    ("random fit", "random-fit+share=random"),
];

/// The points of the curve: GPU asked for over capacity.
pub const POINTS: [f64; 6] = [0.5, 0.7, 0.8, 0.9, 1.0, 1.1];

/// Reads the cluster and tasks under `traces`.
pub fn load(traces: &Path) -> Result<(Cluster, Vec<Job>), String> {
    let cluster = Cluster::from_alibaba(&traces.join(NODES), OnBadLine::Refuse).map_err(|e| e.to_string())?;
    let tasks = alibaba::read(&traces.join(TASKS), OnBadLine::Refuse, None).map_err(|e| e.to_string())?;
    Ok((cluster, tasks.jobs))
}

/// Each policy's curve, averaged over `samples` seeds.
pub fn curves(cluster: &Cluster, tasks: &[Job], samples: u32) -> Result<Vec<(&'static str, Vec<FillPoint>)>, String> {
    let defaults = Policy::from_scheduler(&cluster.scheduler, "default")?;
    let mut out = Vec::new();
    for (label, words) in POLICIES {
        let p = Policy::parse(words, &defaults)?;
        let mut mean: Vec<FillPoint> =
            POINTS.iter().map(|_| FillPoint { arrived: 0.0, unplaced: 0.0, failed_tasks: 0.0 }).collect();
        for s in 1..=samples as u64 {
            for (m, x) in mean.iter_mut().zip(fill(cluster, tasks, &p, s, &POINTS)) {
                m.arrived += x.arrived / samples as f64;
                m.unplaced += x.unplaced / samples as f64;
                m.failed_tasks += x.failed_tasks / samples as f64;
            }
        }
        out.push((label, mean));
    }
    Ok(out)
}

/// The fill curves, as docs/simulation.md shows them.
pub fn markdown(curves: &[(&str, Vec<FillPoint>)]) -> String {
    let mut out = String::from("| GPU asked for / capacity |");
    for (label, _) in curves {
        out += &format!(" {label}: GPU unplaced (tasks failed) |");
    }
    out += "\n|---|";
    out += &"---|".repeat(curves.len());
    out.push('\n');
    for (k, target) in POINTS.iter().enumerate() {
        out += &format!("| {:.0} % |", target * 100.0);
        for (_, points) in curves {
            out += &format!(" {:.2} % ({:.2} %) |", points[k].unplaced * 100.0, points[k].failed_tasks * 100.0);
        }
        out.push('\n');
    }
    out
}
