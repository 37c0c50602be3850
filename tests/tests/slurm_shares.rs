//! GPUs offered as shares (SLURM 22.05's `gres/shard`), counted by the
//! real slurmctld, recorded and fenced by a real cderd: the node's one
//! fake GPU is offered as 4 shares (gres.conf `Name=shard Count=4` on its
//! file, and cder.toml `[node.sharing]`). SLURM 22.05 spreads a node's
//! shards over all its GPUs whatever `File=` says, so a node shares all its
//! GPUs or none. Jobs run as `nobody`, on task/none (cderd's `confine`
//! fences) and task/cgroup (SLURM's).
//!
//! What is asserted is what each job can open, its `CUDA_VISIBLE_DEVICES`,
//! SLURM's job states and cderd's ledger of shares (`status`).

use std::path::Path;
use std::time::{Duration, Instant};

use cder_tests::slurm::{parse_env_lines, require_slurm, serial, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// One node whose one fake GPU is shared four ways.
pub fn shared_config(cgroup: bool) -> SlurmConfig {
    SlurmConfig {
        cgroup,
        gpus: 1,
        gres_types: "gpu,shard".into(),
        node_gres: Some("gpu:1,shard:4".into()),
        gres_conf: Some(
            "NodeName=node1 Name=gpu File={dir}/dev/gpu0\nNodeName=node1 Name=shard Count=4 File={dir}/dev/gpu0\n"
                .into(),
        ),
        cderd_sharing: "shares_per_gpu = 4\nslurm_gres_conf = \"{dir}/gres.conf\"\nslurm_node_name = \"node1\"\n"
            .into(),
        ..SlurmConfig::default()
    }
}

/// A job that prints what it can open and sees, then waits for `flag`.
fn probe(cluster: &SlurmCluster, flag: &Path) -> String {
    format!(
        "#!/bin/sh\n{}echo CVD=${{CUDA_VISIBLE_DEVICES-unset}}\nwhile [ ! -e '{}' ]; do sleep 0.2; done\n",
        cluster.open_probe(),
        flag.display()
    )
}

fn wait_output(cluster: &SlurmCluster, id: u32) -> std::collections::BTreeMap<String, String> {
    let out = cluster.wait_output(id, "CVD=", JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    parse_env_lines(&out)
}

fn shares_case(cgroup: bool) {
    let name = if cgroup { "task/cgroup" } else { "task/none" };
    let cluster =
        SlurmCluster::start(&shared_config(cgroup)).unwrap_or_else(|e| panic!("starting SLURM ({name}): {e}"));
    let flag = cluster.jobs_dir().join("release-shares");
    let script = probe(&cluster, &flag);
    // Four one-share jobs land on GPU 0 together, each seeing and opening it.
    let sharers: Vec<u32> = (0..4)
        .map(|i| {
            let args = if i % 2 == 0 { "--gpgpu-shares-per-node=1" } else { "--gres=shard:1" };
            cluster.sbatch_as_user(&[args], &script).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    for &id in &sharers {
        cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{name}: {e}"));
        let env = wait_output(&cluster, id);
        assert_eq!(env["OPEN"], "0", "{name}: sharer {id} opens GPU 0 only\n{}", cluster.logs());
        assert_eq!(env["CVD"], "0", "{name}: sharer {id} sees its GPU as 0 inside its device cgroup");
    }
    let status = cluster.cderd_status().unwrap();
    let mut held: Vec<(String, u32, u32, u32)> =
        status.shares.iter().map(|s| (s.job.to_string(), s.index, s.shares, s.total)).collect();
    held.sort();
    let mut want: Vec<(String, u32, u32, u32)> = sharers.iter().map(|id| (format!("slurm:{id}"), 0, 1, 4)).collect();
    want.sort();
    assert_eq!(held, want, "{name}: cderd's ledger of shares");
    assert!(status.devices.iter().all(|d| d.index != 0 || d.job.is_none()), "{name}: nobody holds GPU 0 whole");

    // A fifth waits: SLURM has no shard left.
    let fifth = cluster.sbatch_as_user(&["--gpgpu-shares-per-node=1"], &script).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let info = cluster.job(fifth).unwrap();
    assert_eq!(info.state, "PENDING", "{name}: the fifth share job waits while four run ({})", info.reason);

    // A job without a share cannot open GPU 0; a whole-GPU job never gets it.
    let none = cluster.sbatch_as_user(&[], &script).unwrap();
    let env = wait_output(&cluster, none);
    assert!(!env["OPEN"].split(',').any(|i| i == "0"), "{name}: a job without a share opened GPU 0: {env:?}");
    // job_submit keeps whole-GPU jobs, cder's and native, off nodes that
    // share their GPUs (SLURM 22.05 itself would start them on GPU 0 beside
    // the shards): with this one node, SLURM refuses them at submit time.
    for args in [["--gpgpu-per-node=1"], ["--gres=gpu:1"]] {
        match cluster.sbatch_as_user(&args, &script) {
            Err(e) => assert!(e.contains("Requested node configuration is not available"), "{name}: {args:?}: {e}"),
            Ok(id) => {
                std::thread::sleep(Duration::from_secs(4));
                let info = cluster.job(id).unwrap();
                assert_eq!(info.state, "PENDING", "{name}: whole-GPU job {id} started on a shared node");
                assert_eq!(info.fields.get("ExcNodeList").map(String::as_str), Some("node1"), "{name}: {info:?}");
                let _ = cluster.run("scancel", &[&id.to_string()]);
            }
        }
    }
    let status = cluster.cderd_status().unwrap();
    assert!(status.devices.iter().all(|d| d.job.is_none()), "{name}: nobody holds the shared GPU whole");

    // The four end; the fifth gets its share.
    std::fs::write(&flag, b"").unwrap();
    for &id in &sharers {
        assert_eq!(cluster.wait_job(id, JOB_TIMEOUT).unwrap().state, "COMPLETED", "{name}: sharer {id}");
    }
    let env = wait_output(&cluster, fifth);
    assert_eq!(env["OPEN"], "0", "{name}: the fifth sharer opens GPU 0");
    assert_eq!(cluster.wait_job(fifth, JOB_TIMEOUT).unwrap().state, "COMPLETED");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cluster.cderd_status().unwrap().shares.is_empty() {
        assert!(Instant::now() < deadline, "{name}: shares still recorded after every sharer ended");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn four_sharers_land_on_one_gpu_a_fifth_waits_and_others_stay_out() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    shares_case(false);
    shares_case(true);
}

#[test]
fn cderd_refuses_a_gres_conf_that_contradicts_its_sharing() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    // gres.conf shares GPU 0 three ways; cder.toml says four: cderd does
    // not start, naming the line.
    let mut config = shared_config(false);
    config.gres_conf = Some(
        "NodeName=node1 Name=gpu File={dir}/dev/gpu0\nNodeName=node1 Name=shard Count=3 File={dir}/dev/gpu0\n".into(),
    );
    config.node_gres = Some("gpu:1,shard:3".into());
    let e = match SlurmCluster::start(&config) {
        Ok(_) => panic!("cderd started on a gres.conf that contradicts [node.sharing]"),
        Err(e) => e,
    };
    assert!(
        e.contains("gres.conf:2: Name=shard") && e.contains("Count=3, but cder.toml offers gpgpu:0 as 4 shares"),
        "{e}"
    );
}
