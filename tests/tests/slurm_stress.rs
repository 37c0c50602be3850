//! A randomized run of native `--gres` and cder jobs on a real slurmctld and
//! slurmd with a real cderd (fake GPUs: character devices with distinct
//! numbers), with `scontrol suspend/resume`, `scancel`, `reconcile` and
//! `kill -9` of cderd interleaved, on task/none and on task/cgroup. After
//! every operation it asserts that no two live jobs can open one device,
//! and that every running job can open exactly the devices cderd's ledger
//! gives it. Jobs are submitted by `nobody`.
//!
//! The seed is fixed (`CDER_STRESS_SEED` overrides it) and printed, so a
//! failure can be replayed: `CDER_STRESS_SEED=<seed> cargo test -p
//! cder-tests --test cluster slurm_stress:: -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use cder_protocol::ReconcileRequest;
use cder_tests::slurm::{require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const DEFAULT_SEED: u64 = 0x5EED_C0DE_0012;
const OPERATIONS: usize = 24;

/// xorshift64*: enough randomness for a replayable schedule.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Live,
    Suspended,
    Gone,
}

/// One job's latest self-report: what it could open, its sample number.
fn sample(cluster: &SlurmCluster, id: u32) -> Option<(Vec<u32>, u64, String)> {
    let text = std::fs::read_to_string(cluster.jobs_dir().join(format!("state-{id}"))).ok()?;
    let kv: BTreeMap<&str, &str> = text.split_whitespace().filter_map(|w| w.split_once('=')).collect();
    Some((
        visible_set(kv.get("OPEN").copied().unwrap_or("")),
        kv.get("SEQ")?.parse().ok()?,
        kv.get("CVD").copied().unwrap_or("").to_string(),
    ))
}

fn job_script(cluster: &SlurmCluster) -> String {
    format!(
        "#!/bin/sh\nn=0\nwhile :; do\n{}n=$((n+1))\necho \"OPEN=${{open%,}} SEQ=$n CVD=${{CUDA_VISIBLE_DEVICES-unset}}\" > \"{dir}/state-$SLURM_JOB_ID.tmp\"\nmv \"{dir}/state-$SLURM_JOB_ID.tmp\" \"{dir}/state-$SLURM_JOB_ID\"\nsleep 0.2\ndone\n",
        cluster.open_probe().replace("echo OPEN=${open%,}\n", ""),
        dir = cluster.jobs_dir().display()
    )
}

/// Asserts the invariants at this instant, waiting for a fresh sample of
/// every running job. Jobs SLURM ended on its own (a start refused while
/// cderd was down) leave the live set.
fn check(cluster: &SlurmCluster, jobs: &mut BTreeMap<u32, Life>, seed: u64, step: usize, what: &str) {
    let ctx = || format!("seed {seed:#x}, operation {step} ({what})");
    let mut opened: Vec<(u32, Vec<u32>)> = Vec::new();
    for (&id, life) in jobs.iter_mut() {
        if *life == Life::Gone {
            continue;
        }
        let before = sample(cluster, id).map(|s| s.1).unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(30);
        let fresh = loop {
            let state = cluster.job(id).map(|j| j.state).unwrap_or_default();
            if !["PENDING", "RUNNING", "CONFIGURING", "SUSPENDED"].contains(&state.as_str()) {
                break None;
            }
            match sample(cluster, id) {
                // Stopped: its last report stands (none if it never ran).
                s if *life == Life::Suspended => break Some(s.unwrap_or((Vec::new(), 0, String::new()))),
                Some(s) if s.1 > before && state == "RUNNING" => break Some(s),
                _ if state == "PENDING" => break Some((Vec::new(), 0, String::new())),
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "{}: job {id} ({state}) reported nothing new\n{}",
                ctx(),
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let Some((open, seq, cvd)) = fresh else {
            *life = Life::Gone;
            continue;
        };
        if seq > 0 && *life == Life::Live {
            if let Ok(ledger) = cluster.ledger(id) {
                assert_eq!(
                    open,
                    ledger,
                    "{}: job {id} can open {open:?} but cderd's ledger gives it {ledger:?}\n{}",
                    ctx(),
                    cluster.logs()
                );
            }
            let expected: Vec<u32> = (0..open.len() as u32).collect();
            assert_eq!(visible_set(&cvd), expected, "{}: job {id} CUDA_VISIBLE_DEVICES={cvd} for {open:?}", ctx());
        }
        opened.push((id, open));
    }
    for (i, (a, da)) in opened.iter().enumerate() {
        for (b, db) in &opened[i + 1..] {
            let shared: BTreeSet<_> = da.iter().filter(|d| db.contains(d)).collect();
            assert!(shared.is_empty(), "{}: live jobs {a} and {b} can both open {shared:?}\n{}", ctx(), cluster.logs());
        }
    }
}

fn run(cgroup: bool, seed: u64) {
    let plugin = if cgroup { "task/cgroup" } else { "task/none" };
    eprintln!("slurm_stress: {plugin}, seed {seed:#x} (CDER_STRESS_SEED={seed} to replay)");
    let mut cluster = SlurmCluster::start(&SlurmConfig { cgroup, ..SlurmConfig::default() })
        .unwrap_or_else(|e| panic!("{plugin}: {e}"));
    let script = job_script(&cluster);
    let mut rng = Rng(seed | 1);
    let mut jobs: BTreeMap<u32, Life> = BTreeMap::new();
    for step in 0..OPERATIONS {
        let live: Vec<u32> = jobs.iter().filter(|(_, l)| **l != Life::Gone).map(|(&id, _)| id).collect();
        let pick = |rng: &mut Rng| live.get(rng.below(live.len().max(1) as u64) as usize).copied();
        let what = match rng.below(10) {
            0..=3 => {
                let k = 1 + rng.below(2);
                let args = match rng.below(3) {
                    0 => format!("--gres=gpu:{k}"),
                    1 => format!("--gpgpu-per-node={k}"),
                    _ => "--comment=no-gpu".to_string(),
                };
                let id = cluster
                    .sbatch_as_user(&[&args], &script)
                    .unwrap_or_else(|e| panic!("{plugin} seed {seed:#x}: {e}"));
                jobs.insert(id, Life::Live);
                format!("sbatch {args} -> {id}")
            }
            4 => match pick(&mut rng) {
                Some(id) => {
                    let _ = cluster.run("scancel", &[&id.to_string()]);
                    jobs.insert(id, Life::Gone);
                    format!("scancel {id}")
                }
                None => "nothing to cancel".into(),
            },
            5 => match pick(&mut rng) {
                Some(id) if jobs[&id] == Life::Live && cluster.job(id).is_ok_and(|j| j.state == "RUNNING") => {
                    let ok = cluster.run("scontrol", &["suspend", &id.to_string()]).is_ok_and(|o| o.status.success());
                    if ok {
                        jobs.insert(id, Life::Suspended);
                    }
                    format!("scontrol suspend {id} ({})", if ok { "done" } else { "refused" })
                }
                Some(id) if jobs[&id] == Life::Suspended => {
                    let _ = cluster.run("scontrol", &["resume", &id.to_string()]);
                    jobs.insert(id, Life::Live);
                    format!("scontrol resume {id}")
                }
                _ => "nothing to suspend".into(),
            },
            6 => {
                // Reconcile as cderctl does: the generation before the snapshot.
                let mut client =
                    cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
                let generation = client.status().unwrap().generation;
                let out = cluster.run("squeue", &["-h", "-o", "%i"]).unwrap();
                let live_jobs = String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .filter_map(|i| format!("slurm:{i}").parse().ok())
                    .collect();
                let r = client
                    .reconcile(&ReconcileRequest { live_jobs, lrms: Some("slurm".into()), as_of: Some(generation) })
                    .unwrap();
                format!("reconcile (released {:?})", r.released)
            }
            7 => {
                cluster.kill_cderd();
                let id = cluster.sbatch_as_user(&["--gpgpu-per-node=1"], &script).unwrap();
                jobs.insert(id, Life::Live);
                std::thread::sleep(Duration::from_millis(500 + rng.below(1500)));
                cluster.start_cderd().unwrap_or_else(|e| panic!("{plugin}: restarting cderd: {e}"));
                format!("kill -9 cderd, sbatch -> {id}, cderd restarted")
            }
            _ => {
                std::thread::sleep(Duration::from_millis(rng.below(1000)));
                "wait".into()
            }
        };
        eprintln!("slurm_stress: {plugin} {step}: {what}");
        check(&cluster, &mut jobs, seed, step, &what);
    }
    cluster.cancel_all();
}

#[test]
fn no_two_live_jobs_can_open_one_device() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    let seed = std::env::var("CDER_STRESS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_SEED);
    for cgroup in [false, true] {
        run(cgroup, seed);
    }
}
