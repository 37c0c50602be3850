//! Virtual GPGPUs across real hosts (tests/src/cluster.rs): the registry
//! and munged run on the head; `cder-vgpgpu-factory` runs on w2 and w3 and
//! starts there one stand-in backend per GPU (`cder-test-vgpgpu-backend`,
//! listening on its host's own address) and registers it. A job on w1 that
//! asks `--vgpgpu-per-node=3` gets three rCUDA endpoints on the other hosts
//! and reaches each of them over the test network; `Licenses=vgpgpu:4`
//! holds a second such job; the epilog gives every backend back.

use std::collections::BTreeSet;
use std::time::Duration;

use cder_testkit::wait_for;
use cder_tests::cluster::{require_cluster, Cluster, ClusterConfig};
use cder_tests::munge::require_munge;
use cder_tests::slurm::{parse_env_lines, serial, SlurmClient};
use cder_tests::vgpgpu::RCUDA_JOB;

#[test]
fn jobs_get_backends_that_factories_on_other_hosts_registered() {
    if !require_munge() || !require_cluster() {
        return;
    }
    let _g = serial();
    let config =
        ClusterConfig { registry: true, extra_slurm_conf: "Licenses=vgpgpu:4\n".into(), ..ClusterConfig::default() };
    let cluster = Cluster::start(&config).unwrap_or_else(|e| panic!("{e}"));
    cluster.start_backends(&[("w2", 2), ("w3", 2)]).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    assert_eq!(cluster.registry_query("total").unwrap(), 4);
    assert_eq!(cluster.registry_query("free").unwrap(), 4);

    let flag = cluster.jobs_dir().join("go");
    let flag_env = [("FLAG", flag.to_str().unwrap())];
    let submit =
        || cluster.sbatch_env(&["-w", "w1", "--vgpgpu-per-node=3", "--export=ALL"], RCUDA_JOB, &flag_env).unwrap();
    let (first, second) = (submit(), submit());
    cluster.wait_running(first, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    wait_for("three banners", Duration::from_secs(60), || cluster.job_output(first).matches("BANNER").count() == 3);
    let out = cluster.job_output(first);
    let env = parse_env_lines(&out);
    assert_eq!(env.get("RCUDA_DEVICE_COUNT").map(String::as_str), Some("3"), "{out}");
    let addrs: BTreeSet<String> = ["w2", "w3"].iter().map(|w| cluster.worker(w).addr.clone()).collect();
    let mut endpoints = BTreeSet::new();
    for i in 0..3 {
        let e = env.get(&format!("RCUDA_DEVICE_{i}")).unwrap_or_else(|| panic!("no RCUDA_DEVICE_{i}: {out}"));
        let host = e.split('@').next().unwrap_or("");
        assert!(addrs.contains(host), "{e} is not on w2 or w3 ({addrs:?})");
        assert!(endpoints.insert(e.clone()), "{e} twice");
    }
    // Each banner is the backend's own answer, from the host that runs it.
    let banner_hosts: BTreeSet<&str> = out
        .lines()
        .filter(|l| l.starts_with("BANNER"))
        .filter_map(|l| l.split("host=").nth(1))
        .map(|h| h.split(' ').next().unwrap_or(""))
        .collect();
    assert!(banner_hosts.iter().all(|h| addrs.contains(*h)) && banner_hosts.len() == 2, "{out}");
    assert_eq!(cluster.registry_query("in-use").unwrap(), 3);

    // Only one backend is left: the second job waits for licences.
    std::thread::sleep(Duration::from_secs(2));
    let waiting = cluster.job(second).unwrap();
    assert_eq!((waiting.state.as_str(), waiting.reason.as_str()), ("PENDING", "Licenses"), "{}", cluster.squeue());

    std::fs::write(&flag, "").unwrap();
    for id in [first, second] {
        let done = cluster.wait_job(id, Duration::from_secs(120)).unwrap();
        assert_eq!(done.state, "COMPLETED", "job {id}: {}\n{}", cluster.job_output(id), cluster.logs());
    }
    assert_eq!(cluster.job_output(second).matches("BANNER").count(), 3);
    wait_for("all backends free", Duration::from_secs(30), || cluster.registry_query("free").is_ok_and(|n| n == 4));
}
