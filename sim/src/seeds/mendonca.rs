//! Seed 002 (Mendonca, *Politiques polyvalentes et efficaces d'allocation
//! de ressources pour les systèmes parallèles*, Grenoble 2017), chapter 4,
//! §4.6 "Experimental Results": conservative backfilling on 512
//! processors in clusters of 16; 512 instances of 300 jobs drawn at random
//! from the Curie extract (jobs larger than the machine removed), all
//! queued at once, real run times as estimates; *basic* allocation
//! (Algorithm 2, the lowest processors) against *best effort local*
//! (Algorithm 4). The seed: every algorithm but forced contiguity keeps
//! the makespan within 2 % of basic's in more than 99.6 % of instances
//! (§4.7), and best effort local places about 90 % of jobs locally
//! (§4.6.2), a job being local when it spans the fewest clusters it could.
//!
//! Here the allocation step is cderd's own selection policy: `first` is
//! basic, `locality` (cderd's default) is best effort local, each cluster
//! of 16 processors a node of the platform and so a locality domain.

use std::path::{Path, PathBuf};

use crate::batch::replay;
use crate::cluster::Cluster;
use crate::policy::Policy;
use crate::read::swf::{read, SwfOptions};
use crate::read::OnBadLine;
use crate::rng::Rng;
use crate::service::Recorded;
use crate::workload::Job;

/// The extract of Curie the seed's experiments read, under the traces folder.
pub const CURIE_EXTRACT: &str = "pwa/CEA-Curie-2011-2.1-cln-b1-clean2.swf.gz";

/// Processors, cluster size, jobs per instance and instances of §4.6.
pub const PROCESSORS: u32 = 512;
/// Processors per cluster.
pub const CLUSTER: u32 = 16;
/// Jobs per instance.
pub const JOBS: usize = 300;
/// Instances.
pub const INSTANCES: usize = 512;

/// The seed's figures: share of instances within 2 % of basic's makespan
/// (at least), and best effort local's share of local jobs (about).
pub const SEED_WITHIN_2_PERCENT: f64 = 0.996;
/// Best effort local's local jobs, "90 % of the time" (Figure 4.11).
pub const SEED_LOCAL_SHARE: f64 = 0.90;

/// Where the traces are: `$CDER_TRACES`, else `../shared/traces` beside
/// the repository (as the workspace keeps them; README there), else
/// `/work/shared/traces` (a clone elsewhere on the same machine, as CI's).
pub fn traces_dir() -> PathBuf {
    match std::env::var_os("CDER_TRACES") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => {
            let beside = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
            let machine = PathBuf::from("/work/shared/traces");
            if beside.exists() || !machine.exists() {
                beside
            } else {
                machine
            }
        }
    }
}

/// The platform: 32 clusters of 16 processors.
pub fn platform() -> Cluster {
    let mut c = Cluster::uniform("cl", PROCESSORS / CLUSTER, CLUSTER, 0, "");
    c.scheduler.queue = "conservative".into();
    c
}

/// Reads the extract and keeps the jobs that fit the machine.
pub fn pool(path: &Path) -> Result<Vec<Job>, String> {
    let w = read(path, &SwfOptions::default(), OnBadLine::Refuse).map_err(|e| e.to_string())?;
    Ok(w.jobs.into_iter().filter(|j| j.request.cores <= PROCESSORS).collect())
}

/// Instance `k` of `seed`: `JOBS` jobs drawn from `pool`, in trace order,
/// all queued at time 0.
pub fn instance(pool: &[Job], seed: u64, k: u64) -> Vec<Job> {
    let mut rng = Rng::new(seed).fork(k);
    rng.sample(pool.len(), JOBS.min(pool.len())).into_iter().map(|i| Job { submit: 0, ..pool[i].clone() }).collect()
}

/// One instance under one allocation (`first` or `locality`): its
/// makespan (s) and share of local jobs.
pub fn run(jobs: &[Job], allocation: &str) -> Result<(f64, f64), String> {
    let c = platform();
    let defaults = Policy::from_scheduler(&c.scheduler, allocation)?;
    let p = Policy::parse(allocation, &defaults)?;
    let o = replay(&c, jobs, &p, &Recorded, 1, &mut |_, _| {})?;
    let s = o.summary(0);
    Ok((s.makespan_s, s.locality.unwrap_or(0.0)))
}

/// §4.6 beside cder's replay of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reproduction {
    /// Instances replayed.
    pub instances: usize,
    /// Share of instances where best effort local's makespan is within 2 % of basic's.
    pub within_2_percent: f64,
    /// Share of instances within 5 %.
    pub within_5_percent: f64,
    /// Share of instances where best effort local finishes first, and last.
    pub local_faster: (f64, f64),
    /// Largest makespan difference, relative to basic's.
    pub worst: f64,
    /// Mean makespan of best effort local over basic's.
    pub mean_ratio: f64,
    /// Mean share of local jobs: basic, best effort local.
    pub local_share: (f64, f64),
}

/// Replays `instances` instances of the extract at `path` under both.
pub fn reproduce(path: &Path, instances: usize, seed: u64) -> Result<Reproduction, String> {
    let pool = pool(path)?;
    let (mut within, mut within5, mut faster, mut slower) = (0, 0, 0, 0);
    let (mut worst, mut ratio, mut basic_local, mut local_local) = (0.0f64, 0.0, 0.0, 0.0);
    for k in 0..instances {
        let jobs = instance(&pool, seed, k as u64);
        let (basic, bl) = run(&jobs, "first")?;
        let (local, ll) = run(&jobs, "locality")?;
        let off = (local - basic) / basic;
        if off.abs() < 0.02 {
            within += 1;
        }
        if off.abs() < 0.05 {
            within5 += 1;
        }
        if off < 0.0 {
            faster += 1;
        } else if off > 0.0 {
            slower += 1;
        }
        worst = worst.max(off.abs());
        ratio += local / basic;
        basic_local += bl;
        local_local += ll;
    }
    let n = instances.max(1) as f64;
    Ok(Reproduction {
        instances,
        within_2_percent: within as f64 / n,
        within_5_percent: within5 as f64 / n,
        local_faster: (faster as f64 / n, slower as f64 / n),
        worst,
        mean_ratio: ratio / n,
        local_share: (basic_local / n, local_local / n),
    })
}

/// §4.6 beside cder-sim's, as docs/simulation.md shows it.
pub fn markdown(r: &Reproduction) -> String {
    format!(
        "{} instances of {JOBS} jobs, {PROCESSORS} processors in clusters of {CLUSTER}, conservative backfilling.\n\n\
         | figure | seed 002 | cder-sim |\n|---|---|---|\n\
         | instances with best effort local's makespan within 2 % of basic's | more than 99.6 % (§4.7) | {:.1} % |\n\
         | instances within 5 % | — | {:.1} % |\n\
         | instances where best effort local finishes first / last | — | {:.1} % / {:.1} % |\n\
         | largest makespan difference | — | {:.2} % |\n\
         | mean makespan, best effort local / basic | \"less than 0.1 %\" apart for best effort contiguous (§4.6.1) | {:.4} |\n\
         | jobs placed locally, best effort local (`locality`) | about 90 % (§4.6.2, Fig. 4.11) | {:.1} % |\n\
         | jobs placed locally, basic (`first`) | below best effort local (Fig. 4.11) | {:.1} % |\n",
        r.instances,
        r.within_2_percent * 100.0,
        r.within_5_percent * 100.0,
        r.local_faster.0 * 100.0,
        r.local_faster.1 * 100.0,
        r.worst * 100.0,
        r.mean_ratio,
        r.local_share.1 * 100.0,
        r.local_share.0 * 100.0
    )
}
