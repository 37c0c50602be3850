//! Demo: two-phase grid submission landing on the local SLURM.
//!
//! Starts a BDII (real slapd, Debian's BDII config, GLUE schemas) holding
//! four GPU CEs as the real `cder-glue-provider` publishes them (this
//! node's SLURM CE among them) and a CE without GPUs, and a one-node SLURM
//! cluster (real slurmctld/slurmd, four fake GPUs, cderd, the cder
//! plugins). Then, as a grid user would:
//!
//! 1. `cder-jdl list-match --explain` — phase 1: the matching CEs, ranked;
//! 2. `cder-jdl submit --dry-run` — the refined JDL (CELIST ∧ Requirements);
//! 3. `cder-jdl submit --via slurm` — phase 2 on this CE: the JDL becomes
//!    `#SBATCH --gres=gpu:2`, sbatch runs it, and the job prints the GPUs it got.
//!
//! ```text
//! deploy/demo-twophase.sh        # or: cargo run -p cder-tests --bin cder-twophase-demo
//! ```

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::slurm::{require_slurm, SlurmCluster, SlurmConfig};
use cder_tests::twophase::{cder_jdl, gpu_sites, grid_ldif, local_slurm_site, provider, VO};

const JOB_SCRIPT: &str = "#!/bin/sh\necho \"job $SLURM_JOB_ID on partition $SLURM_JOB_PARTITION sees CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"\n";

fn main() -> ExitCode {
    if !require_slapd() || !require_slurm() {
        return ExitCode::from(1);
    }
    match demo() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cder-twophase-demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn show(title: &str, cmd: &mut Command) -> Result<String, String> {
    println!("\n== {title}");
    let out =
        cmd.stdin(Stdio::null()).output().map_err(|e| format!("{title}: cannot run {:?}: {e}", cmd.get_program()))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("{title}: exit status {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn demo() -> Result<(), String> {
    println!("== starting slurmctld, slurmd (4 fake GPUs) and cderd on 127.0.0.1 ...");
    let cluster = SlurmCluster::start(&SlurmConfig::default())?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let local = local_slurm_site(cluster.config.gpus);
    let mut sites = gpu_sites();
    sites.push(local.clone());
    println!("== publishing 4 GPU CEs with cder-glue-provider (and 1 CE without GPUs) into a BDII (slapd) ...");
    let ldif = grid_ldif(&provider(), &sites, &["attribute-extension"], 1, dir.path())?;
    let slapd = Slapd::start(&SlapdOptions::default())?;
    slapd.add_base_entries()?;
    slapd.add(&ldif)?;
    let script = dir.path().join("gpu_job.sh");
    std::fs::write(&script, JOB_SCRIPT).map_err(|e| e.to_string())?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let jdl = dir.path().join("gpu.jdl");
    let jdl_text = format!(
        "[\n  Executable = \"gpu_job.sh\";\n  StdOutput = \"std.out\";\n  StdError = \"std.err\";\n  VirtualOrganisation = \"{VO}\";\n  GPGPUPerNode = 2;\n  \
         Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 4096;\n  Rank = other.GPGPUFreeInstances;\n]\n"
    );
    std::fs::write(&jdl, &jdl_text).map_err(|e| e.to_string())?;
    println!("\n== the grid user's job ({}):\n{jdl_text}", jdl.display());
    let bin = cder_jdl();
    let url = slapd.url();
    let local_ce = local.ce_id("debug");
    // The demo's index lives with its BDII, not in the user's cache.
    let index = dir.path().join("index");
    show(
        &format!(
            "phase 1: cder-jdl list-match --bdii {url} --explain gpu.jdl (from the local index, made on first use)"
        ),
        Command::new(&bin).args(["list-match", "--bdii", &url, "--explain"]).arg(&jdl).env("CDER_INDEX_DIR", &index),
    )?;
    show(
        "the snapshot phase 1 answered from: cder-jdl index show",
        Command::new(&bin).args(["index", "show", "--bdii", &url]).env("CDER_INDEX_DIR", &index),
    )?;
    show(
        "phase 2 (dry run): cder-jdl submit --dry-run gpu.jdl",
        Command::new(&bin).args(["submit", "--dry-run", "--bdii", &url]).arg(&jdl).env("CDER_INDEX_DIR", &index),
    )?;
    let out = show(
        &format!("phase 1 + 2 on this CE: cder-jdl submit --via slurm --ce {local_ce} gpu.jdl"),
        Command::new(&bin)
            .args(["submit", "--via", "slurm", "--bdii", &url, "--ce", &local_ce])
            .arg(&jdl)
            .env("CDER_INDEX_DIR", &index)
            .env("SLURM_CONF", cluster.slurm_conf()),
    )?;
    let id: u32 = out
        .trim()
        .strip_prefix("slurm:")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no job id in {out:?}"))?;
    let info = cluster.wait_job(id, Duration::from_secs(120))?;
    let job_out = std::fs::read_to_string(dir.path().join("std.out")).unwrap_or_default();
    println!(
        "\n== job {id}: {} (TresPerNode={})\n{job_out}",
        info.state,
        info.fields.get("TresPerNode").map(String::as_str).unwrap_or("-")
    );
    if info.state != "COMPLETED" || !job_out.contains("CUDA_VISIBLE_DEVICES=") {
        return Err(format!("the job did not complete with its GPUs: {info:?}\n{}", cluster.logs()));
    }
    println!("== done: grid JDL → BDII match → refined JDL → sbatch --gres=gpu:2 → 2 exclusive GPUs");
    Ok(())
}
