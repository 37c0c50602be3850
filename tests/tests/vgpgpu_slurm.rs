//! The SLURM vGPGPU flow on a real slurmctld/slurmd (one node with 2 fake
//! GPUs) with a real cder-registryd + munged, and 6 backends on three other
//! "nodes" (loopback addresses 127.0.2.2-4) started by cder-vgpgpu-factory
//! through a launcher that runs `cder-test-vgpgpu-backend`, a small TCP
//! server per device standing in for an rCUDA server in a container.
//! Jobs with `--vgpgpu-per-node=3` (more than the node's 2 GPUs) run with
//! three rCUDA endpoints and reach them; `Licenses=vgpgpu:6` keeps the third
//! such job pending; everything is released at the end and after scancel.

use std::collections::BTreeSet;
use std::time::Duration;

use cder_registry::api::QueryName;
use cder_testkit::wait_for;
use cder_tests::munge::require_munge;
use cder_tests::slurm::{parse_env_lines, require_slurm, serial, SlurmCluster, SlurmConfig};
use cder_tests::vgpgpu::{binary, kill_backends, start_backends, Registryd, RCUDA_JOB};

struct Cleanup(std::path::PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        kill_backends(&self.0);
    }
}

/// A registry with 6 backends on three loopback "nodes", and a one-node SLURM
/// (2 GPUs, `Licenses=vgpgpu:6`) whose plugin uses it.
fn registry_and_cluster() -> (Registryd, Cleanup, SlurmCluster) {
    let r = Registryd::start("").unwrap();
    let cleanup = Cleanup(r.dir().to_path_buf());
    start_backends(&r, &[("127.0.2.2", 2), ("127.0.2.3", 2), ("127.0.2.4", 2)]).unwrap();
    assert_eq!(r.client().query(QueryName::Total, None).unwrap(), 6);
    let config = SlurmConfig {
        gpus: 2,
        spank_args: vec![format!("config={}", r.config_path().display())],
        extra_slurm_conf: "Licenses=vgpgpu:6\n".into(),
        ..SlurmConfig::default()
    };
    (r, cleanup, SlurmCluster::start(&config).unwrap())
}

#[test]
fn vgpgpu_jobs_get_remote_backends_and_licences_hold_the_surplus() {
    if !require_munge() || !require_slurm() {
        return;
    }
    let _serial = serial();
    let (r, _cleanup, cluster) = registry_and_cluster();
    let c = r.client();

    // The admin's check: the licence count equals the registry's total.
    let cderctl = binary("cderctl", "cderctl").unwrap();
    let out = std::process::Command::new(&cderctl)
        .args(["--config", &r.config_path().display().to_string(), "registry", "slurm-licenses", "--slurm-conf"])
        .arg(cluster.slurm_conf())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().next(), Some("Licenses=vgpgpu:6"));

    let flag = cluster.jobs_dir().join("go");
    let flag_env = [("FLAG", flag.to_str().unwrap())];
    let submit = || cluster.sbatch_env(&["--vgpgpu-per-node=3", "--export=ALL"], RCUDA_JOB, &flag_env).unwrap();
    let jobs = [submit(), submit(), submit()];
    cluster.wait_running(jobs[0], Duration::from_secs(60)).unwrap();
    cluster.wait_running(jobs[1], Duration::from_secs(60)).unwrap();
    for &j in &jobs[..2] {
        let info = cluster.job(j).unwrap();
        assert_eq!(
            info.fields.get("Licenses").map(String::as_str),
            Some("vgpgpu:3"),
            "job_submit set the licences: {:?}",
            info.fields
        );
    }
    // The third job waits for licences, not for GPUs or CPUs.
    std::thread::sleep(Duration::from_secs(2));
    let third = cluster.job(jobs[2]).unwrap();
    assert_eq!((third.state.as_str(), third.reason.as_str()), ("PENDING", "Licenses"), "{}", cluster.squeue());

    // Each running job has three rCUDA endpoints and reached all of them.
    let mut endpoints = BTreeSet::new();
    for &j in &jobs[..2] {
        wait_for("three banners", Duration::from_secs(30), || cluster.job_output(j).matches("BANNER").count() == 3);
        let out = cluster.job_output(j);
        let env = parse_env_lines(&out);
        assert_eq!(env.get("RCUDA_DEVICE_COUNT").map(String::as_str), Some("3"), "{out}");
        for i in 0..3 {
            let e = env.get(&format!("RCUDA_DEVICE_{i}")).unwrap_or_else(|| panic!("no RCUDA_DEVICE_{i}: {out}"));
            assert!(e.ends_with(":0") && e.contains('@'), "{e}");
            assert!(endpoints.insert(e.clone()), "{e} given to two jobs");
        }
        let hosts: BTreeSet<&str> = out
            .lines()
            .filter(|l| l.starts_with("BANNER"))
            .filter_map(|l| l.split("host=").nth(1))
            .map(|h| h.split(' ').next().unwrap_or(""))
            .collect();
        assert!(hosts.len() >= 2, "three backends come from more than one node: {out}");
    }
    assert_eq!(endpoints.len(), 6);
    assert_eq!(c.query(QueryName::InUse, None).unwrap(), 6);

    // Let them finish: the licences and backends come back, the third runs.
    std::fs::write(&flag, "").unwrap();
    for &j in &jobs {
        let done = cluster.wait_job(j, Duration::from_secs(90)).unwrap();
        assert_eq!(done.state, "COMPLETED", "job {j}: {}\n{}", cluster.job_output(j), cluster.logs());
    }
    assert_eq!(cluster.job_output(jobs[2]).matches("BANNER").count(), 3);
    wait_for("all backends free", Duration::from_secs(30), || c.query(QueryName::Free, None).unwrap() == 6);

    // scancel: the epilog gives the backends back.
    std::fs::remove_file(&flag).unwrap();
    let j = submit();
    cluster.wait_running(j, Duration::from_secs(60)).unwrap();
    wait_for("three in use", Duration::from_secs(30), || c.query(QueryName::InUse, None).unwrap() == 3);
    cluster.run("scancel", &[&j.to_string()]).unwrap();
    wait_for("release after scancel", Duration::from_secs(60), || c.query(QueryName::InUse, None).unwrap() == 0);
    assert_eq!(c.status().unwrap().backends.iter().filter(|b| b.job.is_some()).count(), 0);

    // VCL, asked with the JDL keys a CE puts into the job's environment:
    // a node file with two endpoints, removed at the end.
    let script = "#!/bin/sh\necho VCL_NODEFILE=$VCL_NODEFILE\necho VCL_DEVICE_COUNT=$VCL_DEVICE_COUNT\nsed 's/^/NODE /' \"$VCL_NODEFILE\"\n";
    let j = cluster
        .sbatch_env(&["--export=ALL"], script, &[("VirtualGPGPUPerNode", "2"), ("VirtualGPGPUMethod", "VCL")])
        .unwrap();
    let done = cluster.wait_job(j, Duration::from_secs(60)).unwrap();
    let out = cluster.job_output(j);
    assert_eq!(done.state, "COMPLETED", "{out}\n{}", cluster.logs());
    assert_eq!(done.fields.get("Licenses").map(String::as_str), Some("vgpgpu:2"));
    let env = parse_env_lines(&out);
    assert_eq!(env.get("VCL_DEVICE_COUNT").map(String::as_str), Some("2"), "{out}");
    let nodes: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("NODE ")).collect();
    assert_eq!(nodes.len(), 2, "{out}");
    assert!(nodes.iter().all(|n| n.starts_with("127.0.2.") && n.contains(':')), "{nodes:?}");
    let nodefile = std::path::PathBuf::from(env.get("VCL_NODEFILE").unwrap());
    wait_for("VCL node file removed and backends free", Duration::from_secs(30), || {
        !nodefile.exists() && c.query(QueryName::InUse, None).unwrap() == 0
    });

    // A job asking for more than exist is refused at submit time by SLURM.
    let e = cluster.sbatch(&["--vgpgpu-per-node=7"], "#!/bin/sh\ntrue\n").unwrap_err();
    assert!(e.to_lowercase().contains("licen"), "{e}");
}

/// A one-licence job that runs twenty steps, each naming another node in
/// its own `SLURMD_NODENAME` (and a `CDER_CONFIG` of the user's that names
/// another registry), holds one backend: the node name is slurmd's and the
/// registry counts the job's backends across nodes against its licences.
#[test]
fn steps_that_name_their_own_node_get_no_more_backends_than_the_licences() {
    if !require_munge() || !require_slurm() {
        return;
    }
    let _serial = serial();
    let (r, _cleanup, cluster) = registry_and_cluster();
    let c = r.client();
    // A config the user wrote: another registry, which the plugin must not read.
    let user_config = cluster.jobs_dir().join("user-cder.toml");
    std::fs::write(&user_config, "[registry]\nurl = \"http://127.0.0.1:1\"\nlisten = \"127.0.0.1:1\"\n").unwrap();
    let flag = cluster.jobs_dir().join("go-loop");
    let script = "#!/bin/sh\n\
        for i in $(seq 20); do\n\
          SLURMD_NODENAME=x$i CDER_CONFIG=$USER_CONFIG srun -n1 sh -c 'echo STEP count=$RCUDA_DEVICE_COUNT first=$RCUDA_DEVICE_0'\n\
        done\n\
        echo LOOP DONE\n\
        while [ ! -e \"$FLAG\" ]; do sleep 0.2; done\n";
    let env = [("FLAG", flag.to_str().unwrap()), ("USER_CONFIG", user_config.to_str().unwrap())];
    let j = cluster.sbatch_env(&["--vgpgpu-per-node=1", "--export=ALL"], script, &env).unwrap();
    let out = cluster.wait_output(j, "LOOP DONE", Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cluster.job(j).unwrap().fields.get("Licenses").map(String::as_str), Some("vgpgpu:1"));
    let held = c.query(QueryName::InUse, None).unwrap();
    assert_eq!(held, 1, "a one-licence job holds {held} backends:\n{out}\n{:?}", c.status().unwrap().backends);
    let steps: Vec<&str> = out.lines().filter(|l| l.starts_with("STEP ")).collect();
    assert_eq!(steps.len(), 20, "every step ran, with the job's one backend:\n{out}\n{}", cluster.logs());
    let distinct: BTreeSet<&str> = steps.iter().copied().collect();
    assert_eq!(distinct.len(), 1, "the steps saw different backends:\n{out}");
    assert!(steps[0].starts_with("STEP count=1 first=") && steps[0].ends_with(":0"), "{}", steps[0]);
    std::fs::write(&flag, "").unwrap();
    let done = cluster.wait_job(j, Duration::from_secs(90)).unwrap();
    assert_eq!(done.state, "COMPLETED", "{}\n{}", cluster.job_output(j), cluster.logs());
    wait_for("all backends free", Duration::from_secs(30), || c.query(QueryName::Free, None).unwrap() == 6);
}
