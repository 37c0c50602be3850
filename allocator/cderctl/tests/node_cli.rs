//! The cderd subcommands of cderctl against the real cderd binary: what an
//! admin, a prologue and a job see. The devices are `discovery = "static"`
//! (no NVIDIA driver involved).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use cder_testkit::TestNode;

const CDERCTL: &str = env!("CARGO_BIN_EXE_cderctl");

/// The cderd binary beside cderctl, built first.
fn cderd_binary() -> PathBuf {
    cder_testkit::built("cderd", "cderd")
}

/// Fields drop in order: the daemon stops before its dir goes.
pub(crate) struct Daemon {
    cderd: TestNode,
    pub(crate) dir: tempfile::TempDir,
    config: PathBuf,
}

impl Daemon {
    pub(crate) fn start() -> Daemon {
        Daemon::start_with("")
    }

    /// A daemon whose config ends in `extra` (`[node.sharing]` …).
    pub(crate) fn start_with(extra: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("cderd.sock");
        let mut text = format!(
            "[node]\nsocket = {:?}\nstate_dir = {:?}\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
            socket,
            dir.path().join("state")
        );
        for i in 0..4 {
            text += &format!(
                "[[cder.device]]\nindex = {i}\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = \"/dev/nvidia{i}\"\nnuma_node = {}\n{}",
                i / 2,
                // The files do not exist here: root's `env` sets up the job's groups, which deny by number.
                format_args!("dev = \"195:{i}\"\n"),
            );
        }
        text += extra;
        let config = dir.path().join("cder.toml");
        std::fs::write(&config, text).unwrap();
        let cderd = TestNode::started(cderd_binary(), &config, &socket, dir.path().join("cderd.log"));
        Daemon { cderd, dir, config }
    }

    /// A protocol client as root: what SLURM's prologue plugin sends for a
    /// `gres/shard` job (shares of the GPU slurmd chose), which cderctl
    /// has no flag for.
    pub(crate) fn alloc_shares(&self, job: &str, device: u32, shares: u32) {
        let request = cder_protocol::AllocRequest {
            devices: Some(vec![device]),
            shares: Some(shares),
            ..cder_protocol::AllocRequest::new(job.parse().unwrap(), 1000, 1)
        };
        let mut client =
            cder_protocol::Client::connect(self.cderd.socket(), std::time::Duration::from_secs(10)).unwrap();
        let a = client.alloc(&request).unwrap();
        assert_eq!(a.shares, Some(shares), "{a:?}");
    }

    /// cderctl with the config in CDER_CONFIG, as on a node.
    pub(crate) fn ctl(&self, args: &[&str]) -> Output {
        Command::new(CDERCTL).args(args).env("CDER_CONFIG", &self.config).stdin(Stdio::null()).output().unwrap()
    }
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn readme_demo_two_jobs_get_disjoint_devices() {
    let d = Daemon::start();
    let a = d.ctl(&["alloc", "--job", "local:demo-1", "--uid", "1000", "--count", "2"]);
    assert!(a.status.success(), "{}", text(&a.stderr));
    assert_eq!(text(&a.stdout), "CUDA_DEVICE_ORDER=PCI_BUS_ID\nCUDA_VISIBLE_DEVICES=0,1\n");
    let b = d.ctl(&["alloc", "--job", "local:demo-2", "--uid", "1000", "--count", "2", "--json"]);
    assert!(b.status.success(), "{}", text(&b.stderr));
    let json: serde_json::Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(json["job"], "local:demo-2");
    assert_eq!(json["devices"][0]["index"], 2);
    assert_eq!(json["devices"][1]["uuid"], "gpgpu-3");
    assert_eq!(json["env"]["CUDA_VISIBLE_DEVICES"], "2,3");

    let c = d.ctl(&["alloc", "--job", "local:demo-3", "--uid", "1000", "--count", "2"]);
    assert_eq!(c.status.code(), Some(1));
    assert!(text(&c.stderr).contains("2 gpgpu devices requested, 0 free"), "{}", text(&c.stderr));

    // Asking again is idempotent.
    let again = d.ctl(&["alloc", "--job", "local:demo-1", "--uid", "1000", "--count", "2"]);
    assert_eq!(text(&again.stdout), text(&a.stdout));

    let status = d.ctl(&["status", "--json"]);
    let s: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(s["counts"]["gpgpu"]["allocated"], 4);
    assert_eq!(s["devices"][0]["job"], "local:demo-1");
    let table = text(&d.ctl(&["status"]).stdout);
    assert!(table.contains("gpgpu: 4 total, 0 free, 4 allocated, 0 offline, 0 unhealthy"), "{table}");
    // Each device's file, as gres.conf names it, in its own column.
    let path0 = s["devices"][0]["path"].as_str().expect("a device file in the JSON");
    assert!(table.lines().next().is_some_and(|h| h.split_whitespace().any(|c| c == "PATH")), "{table}");
    assert!(table.lines().nth(1).is_some_and(|row| row.split_whitespace().any(|c| c == path0)), "{table}");

    let r = d.ctl(&["release", "--job", "local:demo-1"]);
    assert_eq!(text(&r.stdout), "local:demo-1: released 2 device(s)\n");
    let r = d.ctl(&["release", "--job", "local:demo-1"]);
    assert_eq!(text(&r.stdout), "local:demo-1: released 0 device(s)\n");
    let c = d.ctl(&["alloc", "--job", "local:demo-3", "--uid", "1000", "--count", "2"]);
    assert!(c.status.success());
    let env = d.ctl(&["env", "--job", "local:demo-3"]);
    assert_eq!(text(&env.stdout), "CUDA_DEVICE_ORDER=PCI_BUS_ID\nCUDA_VISIBLE_DEVICES=0,1\n");
}

#[test]
fn drain_resume_reconcile_accounting() {
    let d = Daemon::start();
    let out = d.ctl(&["drain", "gpgpu:3", "--reason", "Xid 79"]);
    assert_eq!(text(&out.stdout), "gpgpu:3 offline reason=Xid 79\n");
    let out = d.ctl(&["alloc", "--job", "slurm:1", "--uid", "1000", "--count", "4"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("3 free"), "{}", text(&out.stderr));
    assert_eq!(text(&d.ctl(&["resume", "gpgpu:3"]).stdout), "gpgpu:3 free\n");
    // `undrain` is the same operation (the health watch's logs name it).
    d.ctl(&["drain", "gpgpu:2", "--reason", "double-bit ECC error"]);
    assert_eq!(text(&d.ctl(&["undrain", "gpgpu:2"]).stdout), "gpgpu:2 free\n");
    for j in ["slurm:1", "slurm:2", "torque:3.ce"] {
        assert!(d.ctl(&["alloc", "--job", j, "--uid", "1000", "--count", "1"]).status.success());
    }
    let live = d.dir.path().join("live.txt");
    std::fs::write(&live, "# still running\nslurm:2\n").unwrap();
    let out = d.ctl(&["reconcile", "--live-jobs", live.to_str().unwrap(), "--lrms", "slurm"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "released slurm:1\n1 job(s) released\n");
    // From stdin, all batch systems.
    let mut child = Command::new(CDERCTL)
        .args(["reconcile", "--live-jobs", "-", "--json", "--socket"])
        .arg(d.cderd.socket())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"slurm:2\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["released"], serde_json::json!(["torque:3.ce"]));

    let out = d.ctl(&["accounting", "--json"]);
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["records"].as_array().unwrap().len(), 3);
    assert_eq!(a["utilisation"]["pool_size"], 4);
    let table = text(&d.ctl(&["accounting", "--since", "1h"]).stdout);
    assert!(table.starts_with("JOB") && table.contains("utilisation "), "{table}");
}

#[test]
fn share_jobs_are_accounted_by_their_fraction() {
    let d = Daemon::start_with("[node.sharing]\nshares_per_gpu = 4\n");
    d.alloc_shares("slurm:41", 0, 4);
    d.alloc_shares("slurm:42", 1, 1);
    // Accounting counts whole seconds: let the jobs hold their shares for some.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    for job in ["slurm:41", "slurm:42"] {
        assert!(d.ctl(&["release", "--job", job]).status.success());
    }

    let out = d.ctl(&["accounting", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = a["records"].as_array().unwrap();
    let record = |job: &str| {
        records.iter().find(|r| r["job"] == job).unwrap_or_else(|| panic!("no record of {job}: {a}")).clone()
    };
    let (all, one) = (record("slurm:41"), record("slurm:42"));
    assert_eq!(
        (&all["index"], &all["shares"], &all["shares_total"], &all["fraction"]),
        (&0.into(), &4.into(), &4.into(), &1.0.into())
    );
    assert_eq!(
        (&one["index"], &one["shares"], &one["shares_total"], &one["fraction"]),
        (&1.into(), &1.into(), &4.into(), &0.25.into())
    );
    let seconds = |r: &serde_json::Value| r["device_seconds"].as_i64().unwrap();
    assert!(seconds(&all) >= 2 && seconds(&one) >= 2, "{a}");
    // The utilisation counts the 1-of-4 job a quarter of its seconds.
    let held = seconds(&all) as f64 + seconds(&one) as f64 / 4.0;
    let u = &a["utilisation"];
    assert_eq!(u["device_seconds"].as_i64().unwrap(), held.round() as i64, "{a}");
    let capacity = 4.0 * (u["until"].as_i64().unwrap() - u["since"].as_i64().unwrap()) as f64;
    assert!((u["ratio"].as_f64().unwrap() - held / capacity).abs() < 1e-9, "{a}");

    let table = text(&d.ctl(&["accounting"]).stdout);
    let row =
        |job: &str| table.lines().find(|l| l.starts_with(job)).unwrap_or_else(|| panic!("{job}: {table}")).to_string();
    let columns = |l: String| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(columns(row("slurm:41"))[6], "4/4", "{table}");
    assert_eq!(columns(row("slurm:42"))[6], "1/4", "{table}");
    assert!(table.contains(&format!("= {} device-seconds", held.round() as i64)), "{table}");
}

#[test]
fn bad_input_exits_2_and_runtime_failures_exit_1() {
    let d = Daemon::start();
    let bad_job = d.ctl(&["alloc", "--job", "slurm:1;reboot", "--uid", "1", "--count", "1"]);
    assert_eq!(bad_job.status.code(), Some(2));
    let negative = d.ctl(&["alloc", "--job", "slurm:1", "--uid", "1", "--count", "-1"]);
    assert_eq!(negative.status.code(), Some(2));
    let bad_file = d.dir.path().join("bad.txt");
    std::fs::write(&bad_file, "slurm:1\nnot a job\n").unwrap();
    let out = d.ctl(&["reconcile", "--live-jobs", bad_file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bad.txt:2:"), "{}", text(&out.stderr));
    let out = d.ctl(&["accounting", "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    let out = d.ctl(&["drain", "gpgpu:9", "--reason", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown_device"), "{}", text(&out.stderr));
    let out = Command::new(CDERCTL).args(["status", "--socket", "/nonexistent/cderd.sock"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent/cderd.sock"), "{}", text(&out.stderr));
    let out = d.ctl(&["env", "--job", "slurm:77"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown_job"));
}

#[test]
fn another_user_cannot_alloc_or_read_foreign_jobs() {
    if !cder_testkit::require_root("to run cderctl as another uid") {
        return;
    }
    let d = Daemon::start();
    assert!(d.ctl(&["alloc", "--job", "slurm:1", "--uid", "1000", "--count", "1"]).status.success());
    assert!(d.ctl(&["alloc", "--job", "slurm:2", "--uid", "65534", "--count", "1"]).status.success());
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", CDERCTL])
            .args(args)
            .arg("--socket")
            .arg(d.cderd.socket())
            .output()
            .unwrap()
    };
    let out = as_nobody(&["alloc", "--job", "slurm:3", "--uid", "65534", "--count", "1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("permission_denied"), "{}", text(&out.stderr));
    let out = as_nobody(&["release", "--job", "slurm:1"]);
    assert!(text(&out.stderr).contains("permission_denied"), "{}", text(&out.stderr));
    let out = as_nobody(&["env", "--job", "slurm:1"]);
    assert!(text(&out.stderr).contains("permission_denied"), "{}", text(&out.stderr));
    let out = as_nobody(&["env", "--job", "slurm:2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("CUDA_VISIBLE_DEVICES="));
    assert!(as_nobody(&["status"]).status.success());
}

#[test]
fn usage_shows_each_jobs_devices_by_model_and_uuid_and_status_the_idle_ones() {
    use cder_fake_nvml::{FakeDevice, FakeDeviceUsage, FakeNvml, FakeUsage};
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (machine, usage) = (dir.path().join("machine.json"), dir.path().join("usage.json"));
    let gpus: Vec<FakeDevice> = (0..2).map(|i| FakeDevice::a100("0c71d000", i, 81920)).collect();
    FakeNvml { devices: gpus.clone(), fail: vec![] }.write(&machine).unwrap();
    let mut answers = FakeUsage::default();
    answers.devices.insert(
        gpus[0].uuid.clone(),
        FakeDeviceUsage { gpu_percent: 75, memory_used_mib: 20_480, ..Default::default() },
    );
    answers.write(&usage).unwrap();
    let socket = dir.path().join("cderd.sock");
    let text_config = format!(
        "[node]\nsocket = {socket:?}\nstate_dir = {:?}\n[node.health]\nwatch = false\n\
         [node.usage]\nsample_period_s = 0.1\nidle_after_s = 0.5\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {library:?}\n\
         device_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("state"),
        dir.path().display()
    );
    let config = dir.path().join("cder.toml");
    std::fs::write(&config, text_config).unwrap();
    let cderd = TestNode::new(cderd_binary(), &config, &socket, dir.path().join("cderd.log"))
        .env("CDER_FAKE_NVML", &machine)
        .env("CDER_FAKE_NVML_USAGE", &usage);
    let mut cderd = cderd;
    cderd.start(std::time::Duration::from_secs(30));
    let d = Daemon { cderd, dir, config };
    for (job, index) in [("slurm:5", "0"), ("slurm:6", "1")] {
        let out = d.ctl(&["alloc", "--job", job, "--uid", "1000", "--count", "1", "--devices", index]);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    cder_testkit::wait_for("samples and the idle job", std::time::Duration::from_secs(30), || {
        let out = d.ctl(&["usage", "--json"]);
        let u: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        u["devices"].as_array().is_some_and(|a| a.iter().all(|d| d["samples"].as_u64() >= Some(3)))
            && u["idle"].as_array().is_some_and(|a| a.len() == 1)
    });
    let out = d.ctl(&["usage", "--job", "slurm:5", "--json"]);
    let u: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = u["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    assert_eq!(devices[0]["uuid"], gpus[0].uuid.as_str());
    assert_eq!(devices[0]["model"], "NVIDIA A100-SXM4-80GB");
    assert_eq!(
        (devices[0]["peak_utilisation_percent"].as_u64(), devices[0]["peak_memory_mib"].as_u64()),
        (Some(75), Some(20_480))
    );
    assert_eq!(u["idle"], serde_json::json!([]));
    let table = text(&d.ctl(&["usage"]).stdout);
    let header = table.lines().next().unwrap_or_default();
    for column in ["JOB", "MODEL", "UUID", "DEV-S", "ACTIVE-S", "MEAN%", "PEAK%", "PEAK-MiB"] {
        assert!(header.split_whitespace().any(|c| c == column), "{column} missing: {table}");
    }
    let row = table.lines().find(|l| l.starts_with("slurm:5")).unwrap_or_default().to_string();
    for cell in ["NVIDIA A100-SXM4-80GB", gpus[0].uuid.as_str(), "75", "20480"] {
        assert!(row.split_whitespace().any(|c| c == cell) || row.contains(cell), "{cell} missing: {table}");
    }
    let status = text(&d.ctl(&["status"]).stdout);
    let idle = format!("idle: job slurm:6 (uid 1000) holds gpgpu:1 NVIDIA A100-SXM4-80GB {}", gpus[1].uuid);
    assert!(status.contains(&idle), "{status}");
    let out = d.ctl(&["usage", "--recent", "100000"]);
    assert_eq!(out.status.code(), Some(2));
}
