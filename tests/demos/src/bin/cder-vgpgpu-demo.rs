//! Demo: one SLURM job using GPUs of two other "nodes" through the vGPGPU
//! registry.
//!
//! Starts a real munged and cder-registryd, runs cder-vgpgpu-factory for
//! two GPU "nodes" (the loopback addresses 127.0.3.2 and 127.0.3.3, two
//! fake NVIDIA GPUs each; the backends are `cder-test-vgpgpu-backend`, a
//! small TCP server standing in for an rCUDA server in a container), then a
//! real one-node SLURM cluster whose only node has ONE GPU, and submits
//! `sbatch --vgpgpu-per-node=3`. The job prints its rCUDA variables and
//! talks to each of its three backends, which answer from both nodes.
//! Needs root, slurm-wlm and munge (deploy/install-deps.sh).
//!
//! ```text
//! deploy/demo-vgpgpu.sh
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use cder_registry::api::QueryName;
use cder_tests::munge::require_munge;
use cder_tests::slurm::{require_slurm, SlurmCluster, SlurmConfig};
use cder_tests::vgpgpu::{kill_backends, start_backends, Registryd, RCUDA_JOB};

fn main() -> ExitCode {
    if !require_munge() || !require_slurm() {
        return ExitCode::from(1);
    }
    match demo() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("cder-vgpgpu-demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn demo() -> Result<bool, String> {
    println!("== starting munged and cder-registryd on 127.0.0.1 ...");
    let r = Registryd::start("policy = \"spread\"")?;
    let dir = r.dir().to_path_buf();
    let result = run(&r);
    kill_backends(&dir);
    result
}

fn run(r: &Registryd) -> Result<bool, String> {
    println!("== cder-vgpgpu-factory on node 127.0.3.2 (2 GPUs) and node 127.0.3.3 (2 GPUs) ...");
    start_backends(r, &[("127.0.3.2", 2), ("127.0.3.3", 2)])?;
    let c = r.client();
    let status = c.status().map_err(|e| e.to_string())?;
    for b in &status.backends {
        println!("   backend {} on {}:{} (GPU {})", b.uuid, b.host, b.port, b.device);
    }
    println!("== starting slurmctld and slurmd: one node with ONE GPU, Licenses=vgpgpu:4 ...");
    let config = SlurmConfig {
        gpus: 1,
        spank_args: vec![format!("config={}", r.config_path().display())],
        extra_slurm_conf: "Licenses=vgpgpu:4\n".into(),
        ..SlurmConfig::default()
    };
    let cluster = SlurmCluster::start(&config)?;
    println!("== sbatch --vgpgpu-per-node=3 (three GPUs on a node that has one) ...");
    let job = cluster.sbatch(&["--vgpgpu-per-node=3"], RCUDA_JOB)?;
    let done = cluster.wait_job(job, Duration::from_secs(90))?;
    let out = cluster.job_output(job);
    println!("-- job {job} ({}), licences {}:", done.state, done.fields.get("Licenses").cloned().unwrap_or_default());
    for line in out.lines() {
        println!("   {line}");
    }
    let hosts: BTreeSet<&str> =
        out.lines().filter_map(|l| l.split("host=").nth(1)).filter_map(|h| h.split(' ').next()).collect();
    let banners = out.matches("BANNER").count();
    let in_use = c.query(QueryName::InUse, None).map_err(|e| e.to_string())?;
    println!(
        "== the job reached {banners} backends on {} node(s): {}",
        hosts.len(),
        hosts.iter().copied().collect::<Vec<_>>().join(", ")
    );
    println!("== registry after the job: {in_use} backend(s) in use");
    let ok = done.state == "COMPLETED" && banners == 3 && hosts.len() == 2 && in_use == 0;
    println!("{}", if ok { "OK: one job used GPUs from two nodes, and gave them back" } else { "FAILED" });
    Ok(ok)
}
