//! The whole path from the grid user to the device: `cder-jdl submit --via
//! slurm` queries a real BDII (slapd, BDII config, GLUE schemas) holding
//! this CE and three other GPU sites as the real `cder-glue-provider`
//! publishes them, matches the job, refines the JDL, translates it for
//! SLURM and submits it with sbatch to a real slurmctld/slurmd with the
//! cder plugins and cderd. The job must run on the CE's queue and see
//! exactly the GPUs it asked for. Only the GPUs are fake (files, as
//! gres.conf names them).

use std::process::{Command, Stdio};
use std::time::Duration;

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::slurm::{parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};
use cder_tests::twophase::{cder_jdl, gpu_sites, grid_ldif, index_env, local_slurm_site, provider, VO};

const JOB: &str = "#!/bin/sh\necho CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\necho GPGPUPerNode=$GPGPUPerNode\necho PARTITION=$SLURM_JOB_PARTITION\n";

#[test]
fn submit_via_slurm_runs_the_job_on_its_gpus() {
    if !require_slapd() || !require_slurm() {
        return;
    }
    let _guard = serial();
    let cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let local = local_slurm_site(cluster.config.gpus);
    let mut sites = gpu_sites();
    sites.push(local.clone());
    let ldif =
        grid_ldif(&provider(), &sites, &["attribute-extension"], 1, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));

    let script = dir.path().join("gpu_job.sh");
    std::fs::write(&script, JOB).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let jdl = dir.path().join("gpu.jdl");
    std::fs::write(
        &jdl,
        format!(
            "[\n  Executable = \"gpu_job.sh\";\n  StdOutput = \"std.out\";\n  StdError = \"std.err\";\n  VirtualOrganisation = \"{VO}\";\n  \
             GPGPUPerNode = 2;\n  Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 4096;\n]\n"
        ),
    )
    .unwrap();
    let local_ce = local.ce_id("debug");
    let run = |extra: &[&str]| {
        Command::new(cder_jdl())
            .envs(index_env(dir.path()))
            .args(["submit", "--via", "slurm", "--bdii", &slapd.url(), "--ce", &local_ce])
            .args(extra)
            .arg(&jdl)
            .env("SLURM_CONF", cluster.slurm_conf())
            .stdin(Stdio::null())
            .output()
            .expect("running cder-jdl submit")
    };

    // The dry run shows the refined JDL and the batch script.
    let dry = run(&["--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(dry.status.success(), "{}", String::from_utf8_lossy(&dry.stderr));
    assert!(text.contains(&format!("other.GlueCEUniqueID == \"{local_ce}\"")), "{text}");
    assert!(text.contains("#SBATCH --gres=gpu:2") && text.contains("#SBATCH --partition=debug"), "{text}");

    let out = run(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "submit failed: {}{}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr),
        cluster.logs()
    );
    let id: u32 = stdout
        .trim()
        .strip_prefix("slurm:")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no slurm:<id> in {stdout:?}"));
    let info = cluster.wait_job(id, Duration::from_secs(120)).unwrap();
    let job_out = std::fs::read_to_string(dir.path().join("std.out")).unwrap_or_default();
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{job_out}\n{}", cluster.logs());
    let env = parse_env_lines(&job_out);
    assert_eq!(
        visible_set(&env["CUDA_VISIBLE_DEVICES"]).len(),
        2,
        "the job sees {:?}\n{job_out}",
        env["CUDA_VISIBLE_DEVICES"]
    );
    assert_eq!(env["PARTITION"], "debug");
    assert_eq!(info.fields.get("TresPerNode").map(String::as_str), Some("gres:gpu:2"), "{info:?}");

    // A job only another CE can run (AMD GPUs are at ce-c): exit 1, nothing submitted.
    std::fs::write(&jdl, "[ Executable = \"gpu_job.sh\"; GPGPUPerNode = 1; Requirements = GPGPUVendor == \"AMD\" ]")
        .unwrap();
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not among the matching CEs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
