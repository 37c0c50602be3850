//! The job's GPU use reaches SLURM's accounting as its `AdminComment`
//! (`[slurm] admin_comment = "merge"`), on a real slurmctld and slurmd
//! (Debian's SLURM 22.05) with a real cderd whose driver is the fake NVML:
//! two A100s, the fake saying GPU 0 is 80 % busy and GPU 1 idle.
//!
//! The harness has no slurmdbd, so `sacct` has nothing to show: the comment
//! is read back from slurmctld's record (`scontrol show job`), which
//! `MinJobAge=3600` keeps after the job ends. slurmdbd stores the same
//! field from that record.

use std::time::Duration;

use cder_tests::slurm::{fake_nvml_library, require_slurm, serial, SlurmCluster, SlurmConfig};
use serde_json::{json, Value};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);
const BUSY: &str = "GPU-a1000000-0000-4000-8000-000000000000";
const IDLE: &str = "GPU-a1000000-0000-4000-8000-000000000001";

fn config() -> Result<SlurmConfig, String> {
    let library = fake_nvml_library()?;
    let gpu = |i: u32| {
        json!({"uuid": format!("GPU-a1000000-0000-4000-8000-00000000000{i}"), "name": "NVIDIA A100-SXM4-80GB",
            "pci_bus_id": format!("0000:{:02x}:00.0", 7 + i), "memory_mib": 81920, "compute_capability": "8.0", "cores": 6912,
            "clock_mhz": 1410, "ecc": true, "numa_node": 0, "minor": i})
    };
    let machine = json!({"devices": [gpu(0), gpu(1)]}).to_string();
    let usage = json!({"devices": {
        BUSY: {"gpu_percent": 80, "memory_percent": 40, "memory_used_mib": 2048, "processes": []},
        IDLE: {"gpu_percent": 0, "memory_percent": 0, "memory_used_mib": 0, "processes": []},
    }})
    .to_string();
    Ok(SlurmConfig {
        gpus: 0,
        gres_conf: Some("NodeName=node1 Name=gpu File={dir}/dev/nvidia[0-1]\n".into()),
        node_gres: Some("gpu:2".into()),
        device_files: vec!["dev/nvidia0".into(), "dev/nvidia1".into()],
        files: vec![("machine.json".into(), machine), ("usage.json".into(), usage)],
        cder_types: Some(format!(
            "[node.usage]\nsample_period_s = 0.2\n\n\
             [slurm]\nadmin_comment = \"merge\"\n\n\
             [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = \"{}\"\n\
             device_path = \"{{dir}}/dev/nvidia{{minor}}\"\n",
            library.display()
        )),
        cderd_env: vec![
            ("CDER_FAKE_NVML".into(), "{dir}/machine.json".into()),
            ("CDER_FAKE_NVML_USAGE".into(), "{dir}/usage.json".into()),
        ],
        // The plugin reads `[slurm]` from the same cder.toml as cderd.
        spank_args: vec!["config={dir}/cder/cder.toml".into()],
        ..SlurmConfig::default()
    })
}

/// The `AdminComment=` line of `scontrol show job` (on a line of its own).
fn admin_comment(cluster: &SlurmCluster, id: u32) -> Option<String> {
    let text = cluster.scontrol(&["show", "job", &id.to_string()]).unwrap();
    text.lines().find_map(|l| l.trim_start().strip_prefix("AdminComment=")).map(|c| c.trim_end().to_string())
}

/// Runs a job on `gres` until its devices have been sampled for a while,
/// with `comment` set as its AdminComment by the admin meanwhile.
fn run_job(cluster: &SlurmCluster, gres: &str, comment: Option<&str>) -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let flag = cluster.jobs_dir().join(format!("go-{n}"));
    let script = format!("#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.2; done\n", flag.display());
    let id =
        cluster.sbatch(&[&format!("--gres={gres}")], &script).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    if let Some(c) = comment {
        cluster.scontrol(&["update", &format!("JobId={id}"), &format!("AdminComment={c}")]).unwrap();
    }
    // 3 s at a 0.2 s period: about 15 samples.
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(&flag, b"").unwrap();
    let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(done.state, "COMPLETED", "{}", cluster.logs());
    id
}

/// The comment once the epilog has written it (the job is COMPLETED while
/// its epilog may still run).
fn wait_comment(cluster: &SlurmCluster, id: u32, until: impl Fn(&str) -> bool) -> String {
    // After 30 s the comment as it is: the caller's assertion says what is wrong.
    let mut c = String::new();
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        c = admin_comment(cluster, id).unwrap_or_default();
        until(&c).then_some(())
    });
    c
}

#[test]
fn the_epilog_writes_each_gpus_measured_use_into_the_admin_comment() {
    if !require_slurm() {
        return;
    }
    let _g = serial();
    let config = config().unwrap_or_else(|e| panic!("{e}"));
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM: {e}"));

    // A site's own JSON comment keeps its keys; cder adds `cder`.
    let id = run_job(&cluster, "gpu:2", Some(r#"{"site":"kept"}"#));
    let text = wait_comment(&cluster, id, |c| c.contains("\"cder\""));
    eprintln!("AdminComment of job {id}: {text}");
    let comment: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("AdminComment {text:?}: {e}\n{}", cluster.logs()));
    assert_eq!(comment["site"], "kept", "{comment}");
    let cder = &comment["cder"];
    assert_eq!(cder["node"], "node1", "{comment}");
    let gpus = cder["gpus"].as_array().unwrap_or_else(|| panic!("{comment}"));
    assert_eq!(gpus.len(), 2, "{comment}");
    let by = |uuid: &str| gpus.iter().find(|g| g["uuid"] == uuid).unwrap_or_else(|| panic!("{uuid} in {comment}"));
    let (busy, idle) = (by(BUSY), by(IDLE));
    assert_eq!(busy["model"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(busy["peak_mem_mib"], 2048, "{comment}");
    assert_eq!(busy["mean_util"], 80.0, "{comment}");
    let (active, held) = (busy["active_s"].as_i64().unwrap(), busy["device_s"].as_i64().unwrap());
    assert!(active >= 2 && active <= held, "busy GPU: active {active} s of {held} s held\n{comment}");
    assert_eq!(idle["active_s"], 0, "{comment}");
    assert_eq!(idle["mean_util"], 0.0, "{comment}");
    // The comment carries what cderd's ledger keeps for the job.
    let mut client = cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
    let key: cder_model::JobKey = format!("slurm:{id}").parse().unwrap();
    let usage = client.usage(&cder_protocol::UsageRequest { job: Some(key), ..Default::default() }).unwrap();
    let ledger = usage.devices.iter().find(|d| d.uuid == BUSY).unwrap();
    let measured = ledger.active_seconds.unwrap();
    // The comment was taken just before the release: one more period may follow.
    assert!((measured - active as f64).abs() <= 1.0, "ledger {measured} s, comment {active} s");

    // Someone else's comment that is not JSON is left as it was.
    let id = run_job(&cluster, "gpu:1", Some("site note"));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(admin_comment(&cluster, id).as_deref(), Some("site note"), "{}", cluster.logs());
    let slurmd_log = std::fs::read_to_string(cluster.dir().join("log/slurmd.log")).unwrap_or_default();
    assert!(slurmd_log.contains("AdminComment is not JSON"), "{}", cluster.logs());

    // An scontrol that cannot run costs the comment, not the job or the
    // node: the plugin reads `[slurm]` at each release, cderd keeps its own.
    let toml = cluster.dir().join("cder/cder.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    let broken =
        text.replace("admin_comment = \"merge\"", "admin_comment = \"merge\"\nscontrol = \"/nonexistent/scontrol\"");
    std::fs::write(&toml, broken).unwrap();
    let id = run_job(&cluster, "gpu:1", None);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(admin_comment(&cluster, id), None, "{}", cluster.logs());
    let slurmd_log = std::fs::read_to_string(cluster.dir().join("log/slurmd.log")).unwrap_or_default();
    assert!(
        slurmd_log.contains(&format!("slurm:{id}: AdminComment not set (the epilog goes on)")),
        "{}",
        cluster.logs()
    );
    let node = cluster.scontrol(&["show", "node", "node1"]).unwrap();
    assert!(!node.contains("DRAIN"), "{node}");
    assert!(cluster.cderd_status().unwrap().devices.iter().all(|d| d.job.is_none()), "the devices were released");
}
