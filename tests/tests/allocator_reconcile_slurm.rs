//! `cderctl reconcile --from slurm` against a real slurmctld (Debian's
//! SLURM 22.05 on 127.0.0.1) and a real cderd: allocations of jobs that
//! squeue no longer lists are freed; live jobs and other batch systems'
//! jobs are kept; a failing squeue frees nothing. Only the GPUs are fake
//! (files in gres.conf); the SPANK plugin is not loaded, so cderd's
//! allocations are made here by hand.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use cder_protocol::{AllocRequest, Client};
use cder_tests::slurm::{require_slurm, serial, SlurmCluster, SlurmConfig};

/// target/debug/cderctl, built once per process (the SLURM harness's).
fn cderctl() -> PathBuf {
    cder_tests::slurm::cderctl().unwrap_or_else(|e| panic!("{e}"))
}

fn holders(cluster: &SlurmCluster) -> Vec<String> {
    let mut jobs: Vec<String> = cluster
        .cderd_status()
        .unwrap()
        .devices
        .iter()
        .filter_map(|d| d.job.as_ref().map(ToString::to_string))
        .collect();
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
    // Explicit devices, as the batch system's choice is recorded: the
    // harness's fake GPUs are shared character devices that other
    // processes hold open, which cderd would otherwise not choose.
    for (device, job) in [live.as_str(), "slurm:999999", "torque:5.ce.example.org"].into_iter().enumerate() {
        let mut request = AllocRequest::new(job.parse().unwrap(), 0, 1);
        request.devices = Some(vec![device as u32]);
        c.alloc(&request).unwrap();
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
    let left = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(250), || {
        let out = cluster.run("squeue", &["-h", "-j", &id.to_string(), "-t", "PD,R,S,CG,CF", "-o", "%A"]).unwrap();
        String::from_utf8_lossy(&out.stdout).trim().is_empty().then_some(())
    });
    assert!(left.is_some(), "job {id} did not leave squeue");
    let out = reconcile(cluster.slurm_conf());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("released {live}\n1 job(s) released\n"));
    assert_eq!(holders(&cluster), vec!["torque:5.ce.example.org".to_string()]);
}

/// The GRES indices SLURM gave a job (`scontrol show job -d`: `GRES=gpu:2(IDX:0-1)`).
fn gres_indices(cluster: &SlurmCluster, id: u32) -> Vec<u32> {
    let out = cluster.run("scontrol", &["show", "job", "-d", "-o", &id.to_string()]).unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let at = text.find("IDX:").unwrap_or_else(|| panic!("no GRES IDX for job {id}: {text}"));
    let list: String = text[at + 4..].chars().take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '-').collect();
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

fn wait_state(cluster: &SlurmCluster, id: u32, state: &str) {
    let mut last = String::new();
    let reached = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(200), || {
        last = cluster.job(id).unwrap().state;
        (last == state).then_some(())
    });
    assert!(reached.is_some(), "job {id} is {last}, not {state}\n{}", cluster.logs());
}

/// A STOPPED job (`scancel --signal=STOP`) is live. The
/// old reconcile listed only PENDING/RUNNING/SUSPENDED/COMPLETING/
/// CONFIGURING and freed its two GPUs, so the next job got the same two.
/// And an allocation made while squeue runs (after the ledger's generation
/// was read) is newer than the snapshot and survives.
#[test]
fn stopped_two_gpu_job_and_an_allocation_newer_than_the_snapshot_survive_reconcile() {
    if !require_slurm() {
        return;
    }
    let _guard = serial();
    let config = SlurmConfig { spank: false, job_submit: false, ..SlurmConfig::default() };
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let id = cluster.sbatch(&["--gres=gpu:2"], "#!/bin/sh\nsleep 300\n").unwrap();
    cluster.wait_running(id, Duration::from_secs(60)).unwrap();
    let gpus = gres_indices(&cluster, id);
    assert_eq!(gpus.len(), 2, "{gpus:?}");
    let job = format!("slurm:{id}");
    let mut c = Client::connect(cluster.cderd_socket(), Duration::from_secs(10)).unwrap();
    let mut request = AllocRequest::new(job.parse().unwrap(), 0, 2);
    request.devices = Some(gpus.clone());
    c.alloc(&request).unwrap();

    let out = cluster.run("scancel", &["--signal=STOP", &id.to_string()]).unwrap();
    assert!(out.status.success(), "scancel --signal=STOP: {}", String::from_utf8_lossy(&out.stderr));
    wait_state(&cluster, id, "STOPPED");

    // squeue is wrapped: a prologue allocates while the snapshot is taken.
    let squeue = cluster.dir().join("squeue-with-prologue.sh");
    std::fs::write(
        &squeue,
        format!(
            "#!/bin/sh\n{} alloc --job slurm:888888 --uid 0 --count 1 --devices {} --socket {} >/dev/null || exit 3\nexec squeue \"$@\"\n",
            cderctl().display(),
            (0..4).find(|i| !gpus.contains(i)).unwrap(),
            cluster.cderd_socket().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(cderctl())
        .args(["reconcile", "--from", "slurm", "--json", "--socket"])
        .arg(cluster.cderd_socket())
        .env("SLURM_CONF", cluster.slurm_conf())
        .env("CDER_SQUEUE", &squeue)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), cluster.logs());
    let reconciled: cder_protocol::Reconciled = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        reconciled.released.is_empty(),
        "reconcile freed {:?} (STOPPED job {id}, newer slurm:888888)",
        reconciled.released
    );
    let mut expected = vec![job.clone(), "slurm:888888".to_string()];
    expected.sort();
    let mut held = holders(&cluster);
    held.dedup();
    assert_eq!(held, expected);

    // The ledger still refuses the stopped job's two GPUs to anyone else.
    let mut next = AllocRequest::new("slurm:777777".parse().unwrap(), 0, 2);
    next.devices = Some(gpus.clone());
    let e = c.alloc(&next).unwrap_err();
    assert_eq!(e.code(), Some(cder_protocol::ErrorCode::Conflict), "{e}");

    // Once the batch system has forgotten the newer job, the next reconcile frees it.
    let out = Command::new(cderctl())
        .args(["reconcile", "--from", "slurm", "--socket"])
        .arg(cluster.cderd_socket())
        .env("SLURM_CONF", cluster.slurm_conf())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "released slurm:888888\n1 job(s) released\n");
    assert_eq!(holders(&cluster), vec![job.clone(), job]);

    let _ = cluster.run("scancel", &["--signal=CONT", &id.to_string()]);
    cluster.cancel_all();
}
