//! `cderctl reconcile --from slurm` against a real slurmctld (Debian's
//! SLURM 22.05 on 127.0.0.1) and a real cderd: allocations of jobs that
//! squeue no longer lists are freed; live jobs and other batch systems'
//! jobs are kept; a failing squeue frees nothing. Only the GPUs are fake
//! (files in gres.conf); the SPANK plugin is not loaded, so cderd's
//! allocations are made here by hand.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cder_protocol::{AllocRequest, Client};
use cder_tests::slurm::{require_slurm, serial, target_debug_dir, workspace_root, SlurmCluster, SlurmConfig};

/// target/debug/cderctl, built once per process.
fn cderctl() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if std::env::var_os("CDER_TESTS_NO_BUILD").is_none() {
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let status = Command::new(cargo)
                    .args(["build", "-j", "2", "-p", "cderctl"])
                    .current_dir(workspace_root())
                    .stdin(Stdio::null())
                    .status()
                    .expect("running cargo build -p cderctl");
                assert!(status.success(), "cargo build -p cderctl failed");
            }
            let path = target_debug_dir().join("cderctl");
            assert!(path.exists(), "{} is missing", path.display());
            path
        })
        .clone()
}

fn holders(cluster: &SlurmCluster) -> Vec<String> {
    let mut jobs: Vec<String> = cluster.cderd_status().unwrap().devices.iter().filter_map(|d| d.job.as_ref().map(ToString::to_string)).collect();
    jobs.sort();
    jobs
}

#[test]
fn reconcile_from_slurm_frees_only_jobs_squeue_no_longer_lists() {
    if !require_slurm() {
        return;
    }
    let _guard = serial();
    let config = SlurmConfig { spank: false, job_submit: false, ..SlurmConfig::default() };
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let id = cluster.sbatch(&[], "#!/bin/sh\nsleep 300\n").unwrap();
    cluster.wait_running(id, Duration::from_secs(60)).unwrap();

    let live = format!("slurm:{id}");
    let mut c = Client::connect(cluster.cderd_socket(), Duration::from_secs(10)).unwrap();
    for job in [live.as_str(), "slurm:999999", "torque:5.ce.example.org"] {
        c.alloc(&AllocRequest::new(job.parse().unwrap(), 0, 1)).unwrap();
    }

    let reconcile = |slurm_conf: &std::path::Path| {
        Command::new(cderctl())
            .args(["reconcile", "--from", "slurm", "--socket"])
            .arg(cluster.cderd_socket())
            .env("SLURM_CONF", slurm_conf)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };

    // squeue cannot reach a controller: an error, and nothing is freed.
    let out = reconcile(std::path::Path::new("/nonexistent/slurm.conf"));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("squeue"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(holders(&cluster).len(), 3);

    let out = reconcile(cluster.slurm_conf());
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), cluster.logs());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "released slurm:999999\n1 job(s) released\n");
    let mut expected = vec![live.clone(), "torque:5.ce.example.org".to_string()];
    expected.sort();
    assert_eq!(holders(&cluster), expected);

    // Once the job is gone from squeue, its allocation goes too.
    let _ = cluster.run("scancel", &[&id.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cluster.run("squeue", &["-h", "-j", &id.to_string(), "-t", "PD,R,S,CG,CF", "-o", "%A"]).unwrap();
        if String::from_utf8_lossy(&out.stdout).trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "job {id} did not leave squeue");
        std::thread::sleep(Duration::from_millis(250));
    }
    let out = reconcile(cluster.slurm_conf());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("released {live}\n1 job(s) released\n"));
    assert_eq!(holders(&cluster), vec!["torque:5.ce.example.org".to_string()]);
}
