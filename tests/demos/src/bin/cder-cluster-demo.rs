//! Demo: a GPU cluster of three worker hosts honouring cder.
//!
//! Starts the harness of `tests/src/cluster.rs` (docs/testing.md): a head
//! host running slurmctld and three workers, each in network, mount and UTS
//! namespaces of its own (addresses 10.77.0.x that exist only inside them),
//! each with its own cderd, three fake GPUs and `slurmd -N wN`. One job asks
//! `sbatch -N 2 --gpgpu-per-node=2`: each of its two hosts' own cderd holds
//! two devices for it, each task sees and can open only those two, and
//! everything is released at the end. Needs root and Debian's slurm-wlm
//! (deploy/install-deps.sh); everything is torn down when it ends.
//!
//! ```text
//! cargo run -p cder-tests --bin cder-cluster-demo
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use cder_tests::cluster::{require_cluster, Cluster, ClusterConfig};
use cder_tests::slurm::SlurmClient;

const GPUS: u32 = 3;

fn main() -> ExitCode {
    if !require_cluster() {
        return ExitCode::from(1);
    }
    match demo() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cder-cluster-demo: {e}");
            ExitCode::from(1)
        }
    }
}

/// Each worker's cderd: `name: free/total`, as `cderctl status` counts them.
fn ledgers(cluster: &Cluster) -> String {
    let mut parts = Vec::new();
    for w in &cluster.workers {
        match w.cderd_status() {
            Ok(s) => {
                let c = &s.counts["gpgpu"];
                parts.push(format!("{} ({}): {} of {} free", w.name, w.addr, c.free, c.total));
            }
            Err(e) => parts.push(format!("{}: {e}", w.name)),
        }
    }
    parts.join("; ")
}

fn demo() -> Result<bool, String> {
    println!("== starting a head (slurmctld) and three workers (slurmd, cderd, {GPUS} fake GPUs each), each in its own namespaces ...");
    let cluster = Cluster::start(&ClusterConfig { workers: 3, gpus: GPUS, ..ClusterConfig::default() })?;
    println!(
        "   head {} ; workers {}",
        cluster.head.addr,
        cluster.workers.iter().map(|w| format!("{} {}", w.name, w.addr)).collect::<Vec<_>>().join(", ")
    );
    println!("   cderd ledgers: {}", ledgers(&cluster));

    // One task per node: its host, what it sees, which of its host's GPUs it can open.
    let task = cluster.jobs_dir().join("task.sh");
    let mut probe = String::from("open=''\n");
    for i in 0..GPUS {
        probe.push_str(&format!("if ( : < /run/gpu/gpu{i} ) 2>/dev/null; then open=\"${{open}}{i},\"; fi\n"));
    }
    probe.push_str("echo \"  task on $(hostname): CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES, can open GPUs ${open%,}\"\nsleep 3\n");
    std::fs::write(&task, probe).map_err(|e| format!("{}: {e}", task.display()))?;
    let script = format!("#!/bin/sh\nsrun -N2 --ntasks-per-node=1 /bin/sh {}\n", task.display());

    println!("\n$ sbatch -N 2 --gpgpu-per-node=2 job.sh");
    let id = cluster.sbatch(&["-N", "2", "--gpgpu-per-node=2"], &script)?;
    let info = cluster.wait_running(id, Duration::from_secs(120))?;
    let nodes = cluster.job_nodes(&info)?;
    println!("   job {id} runs on {}", nodes.join(", "));
    // The prolog records the job in each host's cderd; wait until both have.
    // The ledgers printed below show what is missing after 30 s.
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        nodes.iter().all(|n| cluster.worker(n).ledger(id).is_ok_and(|l| l.len() == 2)).then_some(())
    });
    println!("   cderd ledgers while it runs: {}", ledgers(&cluster));
    let mut ok = true;
    let mut held = std::collections::BTreeMap::new();
    for w in &cluster.workers {
        let devices = w.ledger(id)?;
        let want = if nodes.contains(&w.name) { 2 } else { 0 };
        if devices.len() != want {
            println!("   UNEXPECTED: {} holds {devices:?} for the job, not {want} devices", w.name);
            ok = false;
        }
        held.insert(w.name.clone(), devices.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    }
    let done = cluster.wait_job(id, Duration::from_secs(120))?;
    println!("   job {id} ended {}; what its tasks saw:", done.state);
    let out = cluster.job_output(id);
    print!("{out}");
    // Each task can open exactly the devices its own host's cderd holds for the job.
    let mut hosts = BTreeSet::new();
    for line in out.lines().filter_map(|l| l.split("task on ").nth(1)) {
        let host = line.split(':').next().unwrap_or_default();
        let opened = line.rsplit("can open GPUs ").next().unwrap_or_default();
        hosts.insert(host.to_string());
        if held.get(host).map(String::as_str) != Some(opened) {
            println!("   UNEXPECTED: the task on {host} could open {opened:?}; its cderd holds {:?}", held.get(host));
            ok = false;
        }
    }
    if hosts.len() != 2 {
        println!("   UNEXPECTED: tasks ran on {hosts:?}, not two hosts");
        ok = false;
    }

    // The ledgers printed below show what is left after 30 s.
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        (!cluster.workers.iter().any(|w| w.cderd_status().map_or(true, |s| s.counts["gpgpu"].free != GPUS)))
            .then_some(())
    });
    println!("\n   cderd ledgers after the job: {}", ledgers(&cluster));
    // What the demo prints, it asserts: every worker's GPUs back in its pool.
    for w in &cluster.workers {
        match w.cderd_status() {
            Ok(s) if s.counts["gpgpu"].free == GPUS => {}
            Ok(s) => {
                println!(
                    "   UNEXPECTED: {} has {} of {GPUS} GPUs free after the job ended",
                    w.name, s.counts["gpgpu"].free
                );
                ok = false;
            }
            Err(e) => {
                println!("   UNEXPECTED: {}: {e}", w.name);
                ok = false;
            }
        }
    }
    println!("\n== stopping the cluster and removing its namespaces");
    Ok(ok)
}
