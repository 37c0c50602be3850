//! Live cluster-wide counts from the real controller of a real cluster
//! (tests/src/cluster.rs: three workers w1-w3 of two GPUs each, every one
//! its own host with slurmd and cderd). `cder-glue-provider` with
//! `counts.source = "slurm"` runs on the head, as on a CE, and reads
//! `scontrol -d show node -o` over the test network: the free / used /
//! offline GPU counts of the one ExecutionEnvironment follow jobs that run
//! on several hosts and a host that is drained under a running job, and
//! the LDIF loads into slapd.

use std::time::Duration;

use cder_glue_provider::ldif;
use cder_tests::cluster::{require_cluster, Cluster, ClusterConfig};
use cder_tests::glue::{assert_reads_back, other_info, provider, slurm_ce_config};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::slurm::{serial, SlurmClient};

const EE: &str = "ce.example.org_workers";

/// Runs the provider on the head and returns (total, free, used, offline)
/// GPUs and (total, used, unavailable) nodes of the ExecutionEnvironment.
fn publish(cluster: &Cluster, config: &std::path::Path) -> (String, [u32; 4], [u32; 3]) {
    let out = cluster
        .head
        .command(&provider().to_string_lossy())
        .arg("--config")
        .arg(config)
        .env("SLURM_CONF", cluster.slurm_conf())
        .output()
        .unwrap();
    assert!(out.status.success(), "cder-glue-provider: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let entries = ldif::parse(&text).unwrap();
    let ee = entries
        .iter()
        .find(|e| e.values("GLUE2ResourceID").any(|i| i == EE))
        .unwrap_or_else(|| panic!("no EE {EE} in {text}"));
    let info = other_info(ee);
    let gpus = ["GPGPUTotalInstances", "GPGPUFreeInstances", "GPGPUUsedInstances", "GPGPUOfflineInstances"]
        .map(|k| info.get(k).unwrap_or_else(|| panic!("no {k} in {text}")).parse().unwrap());
    let nodes = [
        "GLUE2ExecutionEnvironmentTotalInstances",
        "GLUE2ExecutionEnvironmentUsedInstances",
        "GLUE2ExecutionEnvironmentUnavailableInstances",
    ]
    .map(|a| ee.values(a).next().unwrap_or("0").parse().unwrap());
    (text, gpus, nodes)
}

#[test]
fn the_provider_follows_jobs_and_drains_across_the_cluster() {
    if !require_cluster() || !require_slapd() {
        return;
    }
    let _g = serial();
    let cluster = Cluster::start(&ClusterConfig::default()).unwrap_or_else(|e| panic!("{e}"));
    let config = cluster.dir().join("glue-provider.toml");
    std::fs::write(
        &config,
        slurm_ce_config("")
            + &format!(
                "\n[[group]]\nid = \"{EE}\"\nnodes = [\"w[1-3]\"]\nplatform = \"amd64\"\nmain_memory_mib = 1000\n\
                 virtual_memory_mib = 1000\nos_name = \"Debian\"\nos_version = \"12\"\n\n\
             [[group.device]]\nmodel = \"Tesla K20m\"\ncount = {}\nmemory_mib = 4800\n",
                cluster.config.gpus
            ),
    )
    .unwrap();

    let (_, gpus, nodes) = publish(&cluster, &config);
    assert_eq!(
        (gpus, nodes),
        ([6, 6, 0, 0], [3, 0, 0]),
        "idle\n{}",
        cluster.scontrol(&["-d", "show", "node", "-o"]).unwrap_or_default()
    );

    // Two GPUs on each of w1 and w2, one on w3.
    let wide = cluster
        .sbatch(
            &["-N", "2", "-w", "w1,w2", "--gpgpu-per-node=2"],
            "#!/bin/sh\nsrun -N2 --ntasks-per-node=1 sleep 300\n",
        )
        .unwrap();
    let one = cluster.sbatch(&["-w", "w3", "--gpgpu-per-node=1"], "#!/bin/sh\nsleep 300\n").unwrap();
    for id in [wide, one] {
        cluster.wait_running(id, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{e}"));
    }
    let (busy, gpus, nodes) = publish(&cluster, &config);
    assert_eq!((gpus, nodes), ([6, 1, 5, 0], [3, 3, 0]), "busy\n{busy}");

    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&busy).unwrap_or_else(|e| panic!("{e}"));
    assert_reads_back(&slapd, &busy);

    // w3 drained under its job: the job keeps its GPU, the idle one is offline.
    cluster.scontrol(&["update", "nodename=w3", "state=drain", "reason=cluster glue test"]).unwrap();
    let (text, gpus, nodes) = publish(&cluster, &config);
    assert_eq!((gpus, nodes), ([6, 0, 5, 1], [3, 2, 1]), "drained\n{text}");

    // The jobs end: w1 and w2 are free again, w3 stays drained (both offline).
    cluster.cancel_all();
    let (text, gpus, nodes) = publish(&cluster, &config);
    assert_eq!((gpus, nodes), ([6, 4, 0, 2], [3, 0, 1]), "after\n{text}");
}
