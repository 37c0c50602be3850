//! Demo: a one-node SLURM cluster honouring cder.
//!
//! Starts real slurmctld and slurmd on 127.0.0.1 (private ports, a temp
//! dir, `auth/none`), four fake GPUs in gres.conf, cderd with the same four
//! devices, and both plugins (spank_cder.so, job_submit_cder.so). Submits
//! two `sbatch --gpgpu-per-node=2` jobs, shows what cderd holds while they
//! run and what each job saw and could open, and checks the devices they
//! could open are disjoint (each is confined to its own and numbers them
//! from 0, so `CUDA_VISIBLE_DEVICES` is `0,1` in both). Needs
//! root and Debian's slurm-wlm (deploy/install-deps.sh).
//!
//! ```text
//! cargo run -p cder-tests --bin cder-slurm-demo
//! ```

use std::process::ExitCode;
use std::time::Duration;

use cder_tests::slurm::{parse_env_lines, require_slurm, visible_set, SlurmCluster, SlurmConfig};

fn job(cluster: &SlurmCluster) -> String {
    format!(
        "#!/bin/sh\n{}\
echo \"job $SLURM_JOB_ID on $(hostname -s): CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES, can open GPUs ${{open%,}}\"\n\
sleep 5\n",
        cluster.open_probe()
    )
}

fn main() -> ExitCode {
    if !require_slurm() {
        return ExitCode::from(1);
    }
    match demo() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cder-slurm-demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn demo() -> Result<bool, String> {
    println!("== starting slurmctld, slurmd (4 fake GPUs) and cderd on 127.0.0.1 ...");
    let cluster = SlurmCluster::start(&SlurmConfig::default())?;
    println!(
        "   cluster in {} (slurmctld port {}, slurmd port {})",
        cluster.dir().display(),
        cluster.ctld_port,
        cluster.slurmd_port
    );
    println!(
        "   plugstack.conf: {}",
        std::fs::read_to_string(cluster.dir().join("plugstack.conf")).unwrap_or_default().trim()
    );

    println!("\n== a bad request is refused at submit time:");
    println!("$ sbatch --gpgpu-per-node=5 job.sh");
    let script = job(&cluster);
    match cluster.sbatch(&["--gpgpu-per-node=5"], &script) {
        Err(e) => println!("   {}", e.lines().filter(|l| l.contains("error")).collect::<Vec<_>>().join("\n   ")),
        Ok(id) => println!("   unexpectedly accepted as job {id}"),
    }

    println!("\n== two jobs, two GPUs each:");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let id = cluster.sbatch(&["--gpgpu-per-node=2"], &script)?;
        println!("$ sbatch --gpgpu-per-node=2 job.sh   -> job {id}");
        ids.push(id);
    }
    for &id in &ids {
        cluster.wait_running(id, Duration::from_secs(60))?;
    }
    // After 20 s the status as it is: the demo shows it.
    let mut last = None;
    let all = cder_testkit::try_wait_for(Duration::from_secs(20), Duration::from_millis(200), || {
        let s = cluster.cderd_status()?;
        if s.counts.get("gpgpu").is_some_and(|c| c.allocated == 4) {
            return Ok(Some(s));
        }
        last = Some(s);
        Ok::<_, String>(None)
    })?;
    let status = all.or(last).ok_or("no status from cderd")?;
    println!("\n== cderd while they run:");
    for d in &status.devices {
        let job = d.job.as_ref().map(|j| j.to_string()).unwrap_or_else(|| "-".into());
        println!("   {}:{}  {:<18} {:?}  {}", d.cder_type, d.index, d.model, d.state, job);
    }
    println!("$ scontrol show job {} | grep TresPerNode", ids[0]);
    let shown = cluster.scontrol(&["show", "job", &ids[0].to_string()])?;
    println!("   {}", shown.lines().find(|l| l.contains("TresPerNode")).unwrap_or("").trim());

    let mut sets = Vec::new();
    println!("\n== what each job saw:");
    for &id in &ids {
        let info = cluster.wait_job(id, Duration::from_secs(60))?;
        let out = cluster.job_output(id);
        println!("   {} [{}]", out.lines().find(|l| l.starts_with("job ")).unwrap_or(""), info.state);
        sets.push(visible_set(parse_env_lines(&out).get("OPEN").map(String::as_str).unwrap_or("")));
    }
    let disjoint = sets[0].len() == 2 && sets[1].len() == 2 && sets[0].iter().all(|g| !sets[1].contains(g));
    // Each job's epilog releases its GPUs before the job is done; a GPU
    // still out once both are is a failure of the demo, not a detail.
    let free_now = || cluster.cderd_status().map(|s| s.counts.get("gpgpu").map(|c| c.free).unwrap_or(0));
    let _ = cder_testkit::try_wait_for(Duration::from_secs(10), Duration::from_millis(200), || {
        Ok::<_, String>((free_now()? == 4).then_some(()))
    })?;
    let free = free_now()?;
    println!("\n== after both finished: {free} of 4 GPUs free in cderd");
    println!("   GPUs disjoint: {}", if disjoint { "yes" } else { "NO" });
    if free != 4 {
        println!("   UNEXPECTED: {} GPU(s) still out of the pool after both jobs ended", 4 - free);
        for d in cluster.cderd_status()?.devices.iter().filter(|d| d.reason.is_some()) {
            println!("   {}:{} {:?}: {}", d.cder_type, d.index, d.state, d.reason.as_deref().unwrap_or(""));
        }
    }
    Ok(disjoint && free == 4)
}
