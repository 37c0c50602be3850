//! A randomized run of native `--gres` and cder jobs on a real slurmctld and
//! slurmd with a real cderd (fake GPUs: character devices with distinct
//! numbers), with `scontrol suspend/resume`, `scancel`, `reconcile` and
//! `kill -9` of cderd interleaved, on task/none and on task/cgroup. After
//! every operation it asserts that no two live jobs can open one device
//! unless both hold shares of it, that the shares held never exceed a
//! device's total nor sit beside a whole owner, and that every running job
//! can open exactly the devices cderd's ledger gives it (whole or in
//! shares). A second round runs on a node that offers its GPUs as shares
//! (`gres/shard`), with share, whole-GPU (kept off it) and no-GPU jobs.
//! Jobs are submitted by `nobody`.
//!
//! The seed is fixed (`CDER_STRESS_SEED` overrides it) and printed, so a
//! failure can be replayed: `CDER_STRESS_SEED=<seed> cargo test -p
//! cder-tests --test cluster slurm_stress:: -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cder_protocol::ReconcileRequest;
use cder_tests::slurm::{require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const DEFAULT_SEED: u64 = 0x5EED_C0DE_0012;
/// Operations per run; `CDER_STRESS_OPERATIONS` shortens it (deploy/test.sh
/// does on the SLURM releases in roots).
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
    // (job, device) -> shares, from cderd's ledger.
    let shares = |cluster: &SlurmCluster| -> BTreeMap<(String, u32), (u32, u32)> {
        cluster
            .cderd_status()
            .map(|s| s.shares.into_iter().map(|s| ((s.job.to_string(), s.index), (s.shares, s.total))).collect())
            .unwrap_or_default()
    };
    for (&id, life) in jobs.iter_mut() {
        if *life == Life::Gone {
            continue;
        }
        let before = sample(cluster, id).map(|s| s.1).unwrap_or(0);
        let mut state = String::new();
        let fresh = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(100), || {
            state = cluster.job(id).map(|j| j.state).unwrap_or_default();
            if !["PENDING", "RUNNING", "CONFIGURING", "SUSPENDED"].contains(&state.as_str()) {
                return Some(None);
            }
            match sample(cluster, id) {
                // Stopped: its last report stands (none if it never ran).
                s if *life == Life::Suspended => Some(Some(s.unwrap_or((Vec::new(), 0, String::new())))),
                Some(s) if s.1 > before && state == "RUNNING" => Some(Some(s)),
                _ if state == "PENDING" => Some(Some((Vec::new(), 0, String::new()))),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("{}: job {id} ({state}) reported nothing new\n{}", ctx(), cluster.logs()));
        let Some((open, seq, cvd)) = fresh else {
            *life = Life::Gone;
            continue;
        };
        if seq > 0 && *life == Life::Live {
            if let Ok(mut ledger) = cluster.ledger(id) {
                let key = format!("slurm:{id}");
                ledger.extend(shares(cluster).keys().filter(|(j, _)| *j == key).map(|(_, d)| *d));
                ledger.sort_unstable();
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
    let held = shares(cluster);
    let sharer = |job: u32, d: u32| held.contains_key(&(format!("slurm:{job}"), d));
    for (i, (a, da)) in opened.iter().enumerate() {
        for (b, db) in &opened[i + 1..] {
            let both: BTreeSet<_> =
                da.iter().filter(|d| db.contains(d)).filter(|&&d| !(sharer(*a, d) && sharer(*b, d))).collect();
            assert!(both.is_empty(), "{}: live jobs {a} and {b} can both open {both:?}\n{}", ctx(), cluster.logs());
        }
    }
    // Shares: never above a device's total, never beside a whole owner.
    let mut per_device: BTreeMap<u32, (u32, u32)> = BTreeMap::new();
    for ((_, d), (n, total)) in &held {
        let e = per_device.entry(*d).or_insert((0, *total));
        e.0 += n;
    }
    if let Ok(status) = cluster.cderd_status() {
        for (d, (n, total)) in per_device {
            assert!(n <= total, "{}: device {d} has {n} of its {total} shares held\n{}", ctx(), cluster.logs());
            let whole = status.devices.iter().find(|x| x.index == d).and_then(|x| x.job.clone());
            assert!(
                whole.is_none(),
                "{}: device {d} is held whole by {whole:?} and in shares\n{}",
                ctx(),
                cluster.logs()
            );
        }
    }
}

/// Two fake GPUs, each offered as 4 shares.
fn shared_config(cgroup: bool) -> SlurmConfig {
    SlurmConfig {
        cgroup,
        gpus: 2,
        gres_types: "gpu,shard".into(),
        node_gres: Some("gpu:2,shard:8".into()),
        gres_conf: Some(
            "NodeName=node1 Name=gpu File={dir}/dev/gpu[0-1]\nNodeName=node1 Name=shard Count=4 File={dir}/dev/gpu0\n\
             NodeName=node1 Name=shard Count=4 File={dir}/dev/gpu1\n"
                .into(),
        ),
        cderd_sharing: "shares_per_gpu = 4\nslurm_gres_conf = \"{dir}/gres.conf\"\nslurm_node_name = \"node1\"\n"
            .into(),
        ..SlurmConfig::default()
    }
}

fn run(cgroup: bool, seed: u64, shared: bool) {
    let plugin = match (cgroup, shared) {
        (false, false) => "task/none",
        (true, false) => "task/cgroup",
        (false, true) => "task/none, shared GPUs",
        (true, true) => "task/cgroup, shared GPUs",
    };
    eprintln!("slurm_stress: {plugin}, seed {seed:#x} (CDER_STRESS_SEED={seed} to replay)");
    let config = if shared { shared_config(cgroup) } else { SlurmConfig { cgroup, ..SlurmConfig::default() } };
    let mut cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("{plugin}: {e}"));
    let script = job_script(&cluster);
    let mut rng = Rng(seed | 1);
    let mut jobs: BTreeMap<u32, Life> = BTreeMap::new();
    let operations = std::env::var("CDER_STRESS_OPERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(OPERATIONS);
    for step in 0..operations {
        let live: Vec<u32> = jobs.iter().filter(|(_, l)| **l != Life::Gone).map(|(&id, _)| id).collect();
        let pick = |rng: &mut Rng| live.get(rng.below(live.len().max(1) as u64) as usize).copied();
        let what = match rng.below(10) {
            0..=3 => {
                let k = 1 + rng.below(2);
                let args = match (shared, rng.below(if shared { 4 } else { 3 })) {
                    (false, 0) => format!("--gres=gpu:{k}"),
                    (false, 1) => format!("--gpgpu-per-node={k}"),
                    (true, 0) => format!("--gres=shard:{}", 1 + rng.below(3)),
                    (true, 1) => format!("--gpgpu-shares-per-node={}", 1 + rng.below(4)),
                    (true, 2) => format!("--gres=gpu:{k}"),
                    _ => "--comment=no-gpu".to_string(),
                };
                match cluster.sbatch_as_user(&[&args], &script) {
                    Ok(id) => {
                        jobs.insert(id, Life::Live);
                        format!("sbatch {args} -> {id}")
                    }
                    // Whole GPUs are kept off a node that shares its GPUs.
                    Err(e) if shared && args.starts_with("--gres=gpu") => {
                        assert!(e.contains("node configuration is not available"), "{plugin} seed {seed:#x}: {e}");
                        format!("sbatch {args} refused: the node shares its GPUs")
                    }
                    Err(e) => panic!("{plugin} seed {seed:#x}: {e}"),
                }
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
                let args = if shared { "--gpgpu-shares-per-node=2" } else { "--gpgpu-per-node=1" };
                let id = cluster.sbatch_as_user(&[args], &script).unwrap();
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
        run(cgroup, seed, false);
    }
    for cgroup in [false, true] {
        run(cgroup, seed, true);
    }
}
