//! The usage sampler of the real cderd binary, against the fake NVML
//! library (loaded through nvml-wrapper, as the driver's is), whose
//! utilisation, memory and processes a test changes by rewriting its usage
//! file while cderd runs.
//!
//! Time is scaled: cderd samples every 0.1–0.2 s here instead of every
//! 10 s, so "a minute at 80 %" is 6 s — 60 samples, as many as a minute at
//! one sample a second. What is compared with the truth is the test's own
//! clock around the moments it changed the fake's answers, with the
//! tolerance the issue sets (10 %).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cder_fake_nvml::{FakeDevice, FakeDeviceUsage, FakeMig, FakeMigInstance, FakeNvml, FakeProcess, FakeUsage};
use cder_protocol::{AllocRequest, DeviceUsage, UsageRequest};
use cder_testkit::wait_for;
use common::Node;

fn gpu(i: u32) -> FakeDevice {
    FakeDevice::a100("5a3e0000", i, 40960)
}

/// A node whose `gpgpu` type is discovered through the fake NVML, with
/// `usage` as its `[node.usage]` table; returns it and the usage file.
fn nvml_node(gpus: u32, mig: &[FakeMig], usage: &str, start: &FakeUsage) -> (Node, PathBuf) {
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    let usage_file = dir.path().join("usage.json");
    let devices: Vec<FakeDevice> = (0..gpus).map(gpu).collect();
    FakeNvml { devices, fail: vec![] }.write_with_mig(mig, &machine).unwrap();
    start.write(&usage_file).unwrap();
    let mut files = Vec::new();
    for m in mig {
        for i in &m.instances {
            let at = dir.path().join(format!("caps/gpu{}/mig/gi{}/ci0", m.device, i.gpu_instance));
            std::fs::create_dir_all(&at).unwrap();
            std::fs::write(at.join("access"), format!("DeviceFileMinor: {}\n", 100 + i.gpu_instance)).unwrap();
            files.push(dir.path().join(format!("nvidia-cap{}", 100 + i.gpu_instance)));
        }
    }
    for i in 0..gpus {
        files.push(dir.path().join(format!("nvidia{i}")));
    }
    for f in &files {
        std::fs::write(f, b"").unwrap();
    }
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.health]\nwatch = false\n[node.usage]\n{usage}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\nmig = \"instances\"\n\
         mig_capabilities = {:?}\nmig_device_path = \"{dir}/nvidia-cap{{cap}}\"\ndevice_path = \"{dir}/nvidia{{minor}}\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        library,
        dir.path().join("caps"),
        dir = dir.path().display()
    );
    let env = vec![("CDER_FAKE_NVML".to_string(), machine), ("CDER_FAKE_NVML_USAGE".to_string(), usage_file.clone())];
    (Node::custom(dir, &text, files, env), usage_file)
}

fn busy(percent: u32, memory_mib: u64, pids: &[u32]) -> FakeDeviceUsage {
    FakeDeviceUsage {
        gpu_percent: percent,
        memory_percent: percent / 2,
        memory_used_mib: memory_mib,
        processes: pids
            .iter()
            .map(|&pid| FakeProcess {
                pid,
                used_memory_mib: Some(memory_mib),
                sm_percent: percent,
                memory_percent: percent / 2,
            })
            .collect(),
    }
}

fn usage_of(node: &Node, job: &str) -> Vec<DeviceUsage> {
    let request = UsageRequest { job: Some(job.parse().unwrap()), ..Default::default() };
    node.client().usage(&request).unwrap().devices
}

fn alloc(node: &Node, job: &str, index: u32) -> String {
    let mut request = AllocRequest::new(job.parse().unwrap(), 4321, 1);
    request.devices = Some(vec![index]);
    node.client().alloc(&request).unwrap().devices[0].uuid.clone()
}

#[test]
fn a_busy_job_gets_its_active_seconds_and_an_idle_one_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let hook_out = dir.path().join("hook.txt");
    let hook = dir.path().join("hook.sh");
    std::fs::write(
        &hook,
        format!("#!/bin/sh\nenv | grep ^CDER_ | sort > {}.tmp && mv {0}.tmp {0}\n", hook_out.display()),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let usage = format!(
        "sample_period_s = 0.1\nactive_threshold_percent = 5\nidle_below_percent = 5\nidle_after_s = 1.0\nidle_hook = [{:?}]\n",
        hook.display().to_string()
    );
    let (node, usage_file) = nvml_node(2, &[], &usage, &FakeUsage::default());
    let (busy_gpu, idle_gpu) = (gpu(0).uuid, gpu(1).uuid);
    let me = std::process::id();
    let mut answers = FakeUsage::default();
    answers.devices.insert(busy_gpu.clone(), busy(80, 12_000, &[me]));
    answers.write(&usage_file).unwrap();

    let started = Instant::now();
    assert_eq!(alloc(&node, "slurm:1", 0), busy_gpu);
    assert_eq!(alloc(&node, "slurm:2", 1), idle_gpu);
    // "A minute" at 80 %: 60 samples.
    std::thread::sleep(Duration::from_secs(6));
    answers.devices.insert(busy_gpu.clone(), busy(0, 12_000, &[]));
    answers.write(&usage_file).unwrap();
    let busy_for = started.elapsed().as_secs_f64();

    // The idle job is flagged: in status, in the log, through the hook.
    wait_for("the idle job in status", Duration::from_secs(30), || {
        node.status().idle.iter().any(|d| d.job.to_string() == "slurm:2" && d.uuid == idle_gpu)
    });
    let status = node.status();
    assert!(status.idle.iter().all(|d| d.job.to_string() == "slurm:2"), "busy job flagged: {:?}", status.idle);
    let log = node.log();
    assert!(log.contains(&format!("idle GPU: job slurm:2 (uid 4321) holds NVIDIA A100-SXM4-40GB {idle_gpu}")), "{log}");
    wait_for("the idle hook", Duration::from_secs(30), || hook_out.exists());
    let env = std::fs::read_to_string(&hook_out).unwrap();
    for want in ["CDER_JOB=slurm:2", "CDER_UID=4321", &format!("CDER_DEVICE_UUID={idle_gpu}"), "CDER_DEVICE=gpgpu:1"] {
        assert!(env.lines().any(|l| l == want), "{want} not in the hook's environment:\n{env}");
    }

    // Two more seconds idle, then the job ends.
    std::thread::sleep(Duration::from_secs(2));
    node.client().release(&"slurm:1".parse().unwrap()).unwrap();
    let held_for = started.elapsed().as_secs_f64();
    let u = &usage_of(&node, "slurm:1")[0];
    eprintln!("busy job: {u:?}; truth: active {busy_for:.2} s, held {held_for:.2} s");
    let active = u.active_seconds.expect("a whole GPU has utilisation");
    assert!((active - busy_for).abs() <= 0.1 * busy_for, "active {active} s, truth {busy_for:.2} s: {u:?}");
    assert!(
        (u.sampled_seconds - held_for).abs() <= 0.1 * held_for,
        "sampled {} s of {held_for:.2} s",
        u.sampled_seconds
    );
    let mean = u.mean_utilisation_percent.unwrap();
    let truth = 80.0 * busy_for / held_for;
    assert!((mean - truth).abs() <= 0.1 * truth, "mean {mean} %, truth {truth:.1} %");
    assert_eq!((u.peak_utilisation_percent, u.peak_memory_mib), (Some(80), 12_000));
    assert_eq!(
        (u.uuid.as_str(), u.model.as_str(), u.utilisation_source.as_str()),
        (busy_gpu.as_str(), "NVIDIA A100-SXM4-40GB", "device")
    );
    assert!(u.samples >= 60, "{} samples", u.samples);
    // After its release, a job is no longer idle; the idle one still is.
    let idle: Vec<String> = node.status().idle.iter().map(|d| d.job.to_string()).collect();
    assert_eq!(idle, ["slurm:2"]);
    let v = &usage_of(&node, "slurm:2")[0];
    assert_eq!((v.active_seconds, v.peak_utilisation_percent), (Some(0.0), Some(0)));

    // The ring kept the processes NVML listed, with their memory and SM use.
    let request = UsageRequest { job: Some("slurm:1".parse().unwrap()), recent: Some(10_000), ..Default::default() };
    let recent = node.client().usage(&request).unwrap().recent;
    let p = recent.iter().flat_map(|s| &s.processes).find(|p| p.pid == me).expect("the test's pid in a sample");
    assert_eq!((p.memory_mib, p.sm_percent), (Some(12_000), Some(80)));
}

#[test]
fn two_jobs_on_two_mig_instances_of_one_gpu_each_get_their_own_numbers() {
    let instance = |n: u32, gi: u32| FakeMigInstance {
        uuid: format!("MIG-{n:08x}-5a3e-4222-8333-444444444444"),
        profile: "3g.20gb".into(),
        gpu_instance: gi,
        compute_instance: 0,
        memory_mib: 19968,
        multiprocessors: 42,
        slices: 3,
    };
    let instances = vec![instance(1, 1), instance(2, 2)];
    let mig = [FakeMig { device: 0, enabled: true, max_count: 7, instances: instances.clone() }];
    let mut answers = FakeUsage { gpm: true, ..Default::default() };
    answers.devices.insert(instances[0].uuid.clone(), busy(90, 15_000, &[]));
    answers.devices.insert(instances[1].uuid.clone(), busy(10, 2_000, &[]));
    let (node, _usage) = nvml_node(1, &mig, "sample_period_s = 0.1\nidle_after_s = 60\n", &answers);
    assert_eq!(alloc(&node, "slurm:11", 0), instances[0].uuid);
    assert_eq!(alloc(&node, "slurm:12", 1), instances[1].uuid);
    wait_for("GPM utilisation for both instances", Duration::from_secs(30), || {
        ["slurm:11", "slurm:12"].iter().all(|j| usage_of(&node, j)[0].samples >= 10)
    });
    let (a, b) = (&usage_of(&node, "slurm:11")[0], &usage_of(&node, "slurm:12")[0]);
    assert_eq!((a.uuid.as_str(), b.uuid.as_str()), (instances[0].uuid.as_str(), instances[1].uuid.as_str()));
    for (u, peak, memory) in [(a, 90, 15_000), (b, 10, 2_000)] {
        assert_eq!(u.mig_parent.as_deref(), Some(gpu(0).uuid.as_str()));
        assert_eq!(u.utilisation_source, "gpm");
        assert_eq!((u.peak_utilisation_percent, u.peak_memory_mib), (Some(peak), memory), "{u:?}");
        assert!((u.mean_utilisation_percent.unwrap() - f64::from(peak)).abs() < 0.01, "{u:?}");
        assert_eq!(u.model, "NVIDIA A100-SXM4-40GB MIG 3g.20gb");
    }
}

#[test]
fn a_mig_instance_without_gpm_has_memory_but_no_utilisation() {
    let instance = FakeMigInstance {
        uuid: "MIG-00000003-5a3e-4222-8333-444444444444".into(),
        profile: "7g.40gb".into(),
        gpu_instance: 0,
        compute_instance: 0,
        memory_mib: 40192,
        multiprocessors: 98,
        slices: 7,
    };
    let mig = [FakeMig { device: 0, enabled: true, max_count: 7, instances: vec![instance.clone()] }];
    let mut answers = FakeUsage::default();
    answers.devices.insert(instance.uuid.clone(), busy(70, 5_000, &[]));
    let (node, _usage) = nvml_node(1, &mig, "sample_period_s = 0.1\n", &answers);
    alloc(&node, "slurm:21", 0);
    wait_for("samples", Duration::from_secs(30), || usage_of(&node, "slurm:21")[0].samples >= 3);
    let u = &usage_of(&node, "slurm:21")[0];
    assert_eq!((u.active_seconds, u.mean_utilisation_percent, u.peak_utilisation_percent), (None, None, None));
    assert_eq!((u.peak_memory_mib, u.utilisation_source.as_str()), (5_000, "none"));
}

#[test]
fn a_kill_9_of_cderd_loses_at_most_one_period() {
    let period = 0.2;
    let mut answers = FakeUsage::default();
    answers.devices.insert(gpu(0).uuid, busy(50, 1_000, &[]));
    let (mut node, _usage) = nvml_node(1, &[], &format!("sample_period_s = {period}\n"), &answers);
    let started = Instant::now();
    alloc(&node, "slurm:31", 0);
    std::thread::sleep(Duration::from_secs(3));
    node.kill();
    let truth = started.elapsed().as_secs_f64();
    // Restart without sampling: what is on disk is what survived the kill.
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, text.replace("[node.usage]\n", "[node.usage]\nsample = false\n")).unwrap();
    node.start();
    let u = &usage_of(&node, "slurm:31")[0];
    let lost = truth - u.sampled_seconds;
    eprintln!("after kill -9: sampled {:.3} s of {truth:.3} s held", u.sampled_seconds);
    // One period, and the time the kill and the alloc's reply took.
    assert!(lost <= period + 0.1, "lost {lost:.3} s of {truth:.3} s, more than one period: {u:?}");
    assert!(u.sampled_seconds <= truth + period, "{u:?}");
    assert_eq!(u.active_seconds, Some(u.sampled_seconds));
}

#[test]
fn the_sample_ring_never_exceeds_its_size() {
    let mut answers = FakeUsage::default();
    answers.devices.insert(gpu(0).uuid, busy(30, 100, &[]));
    answers.devices.insert(gpu(1).uuid, busy(60, 100, &[]));
    let (node, _usage) = nvml_node(2, &[], "sample_period_s = 0.05\nring_samples = 8\n", &answers);
    alloc(&node, "slurm:41", 0);
    alloc(&node, "slurm:42", 1);
    let db = node.db();
    let mut most = 0;
    wait_for("40 samples", Duration::from_secs(60), || {
        most = most.max(ring_rows(&db));
        usage_of(&node, "slurm:41")[0].samples + usage_of(&node, "slurm:42")[0].samples >= 40
    });
    assert!(most <= 8, "the ring held {most} rows");
    assert_eq!(ring_rows(&db), 8);
    let request = UsageRequest { recent: Some(100), ..Default::default() };
    let recent = node.client().usage(&request).unwrap().recent;
    assert_eq!(recent.len(), 8);
    assert!(recent.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
}

fn ring_rows(db: &Path) -> u64 {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT COUNT(*) FROM usage_samples", [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

#[test]
fn one_period_in_process_attributes_each_device_to_its_job_and_keeps_the_latest() {
    // The fake NVML reads its files from the environment of this process.
    let _env = cder_testkit::env_lock();
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let (machine, usage_file) = (dir.path().join("machine.json"), dir.path().join("usage.json"));
    FakeNvml { devices: vec![gpu(0), gpu(1)], fail: vec![] }.write(&machine).unwrap();
    let mut answers = FakeUsage::default();
    answers.devices.insert(gpu(0).uuid, busy(80, 3_000, &[4242]));
    answers.devices.insert(gpu(1).uuid, busy(20, 500, &[]));
    answers.write(&usage_file).unwrap();
    std::env::set_var("CDER_FAKE_NVML", &machine);
    std::env::set_var("CDER_FAKE_NVML_USAGE", &usage_file);
    let text = format!(
        "[node]\nstate_dir = {:?}\n[node.enforcement]\ncgroup = \"off\"\n[node.health]\nwatch = false\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {library:?}\n\
         device_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("state"),
        dir.path().display()
    );
    let config = cder_model::Config::parse(&text, Path::new("cder.toml")).unwrap();
    let daemon = cderd::Daemon::start(config).unwrap();
    for (job, index) in [("slurm:51", 0), ("slurm:52", 1)] {
        let mut request = AllocRequest::new(job.parse().unwrap(), 1000, 1);
        request.devices = Some(vec![index]);
        daemon.alloc(&request).unwrap();
    }
    assert!(daemon.latest_samples().is_empty());
    let nvmls = cderd::usage::open_types(&daemon);
    let mut sampler = cderd::usage::Sampler::new(&nvmls);
    assert_eq!(sampler.tick(&daemon).unwrap(), 2);
    let latest = daemon.latest_samples();
    let seen: Vec<(String, String, Option<u32>, Option<u64>)> =
        latest.iter().map(|s| (s.job.to_string(), s.uuid.clone(), s.utilisation_percent, s.memory_mib)).collect();
    assert_eq!(
        seen,
        [
            ("slurm:51".to_string(), gpu(0).uuid, Some(80), Some(3_000)),
            ("slurm:52".to_string(), gpu(1).uuid, Some(20), Some(500))
        ]
    );
    // pid 4242 is in no job's cgroup here: listed, attributed to none.
    assert_eq!(latest[0].processes.len(), 1);
    let p = &latest[0].processes[0];
    assert_eq!((p.pid, p.memory_mib, p.sm_percent, p.job.as_ref()), (4242, Some(3_000), Some(80), None));
    // A released job's device is not sampled the next period.
    daemon.release(&"slurm:52".parse().unwrap()).unwrap();
    assert_eq!(sampler.tick(&daemon).unwrap(), 1);
    assert_eq!(daemon.latest_samples().len(), 1);
    let root = cderd::Caller { uid: 0, pid: std::process::id() as i32, process: None };
    let usage = daemon.usage(root, &UsageRequest::default()).unwrap();
    let samples: Vec<(String, u64)> = usage.devices.iter().map(|d| (d.job.to_string(), d.samples)).collect();
    assert_eq!(samples, [("slurm:51".to_string(), 2), ("slurm:52".to_string(), 1)]);
    // Another user sees none of them.
    let other = cderd::Caller { uid: 4321, pid: std::process::id() as i32, process: None };
    assert!(daemon.usage(other, &UsageRequest::default()).unwrap().devices.is_empty());
    std::env::remove_var("CDER_FAKE_NVML");
    std::env::remove_var("CDER_FAKE_NVML_USAGE");
}

#[test]
fn a_whole_gpu_with_gpm_is_measured_over_the_period() {
    let mut answers = FakeUsage { gpm: true, ..Default::default() };
    answers.devices.insert(gpu(0).uuid, busy(40, 100, &[]));
    let (node, _usage) = nvml_node(1, &[], "sample_period_s = 0.1\n", &answers);
    alloc(&node, "slurm:61", 0);
    wait_for("samples", Duration::from_secs(30), || usage_of(&node, "slurm:61")[0].samples >= 5);
    let u = &usage_of(&node, "slurm:61")[0];
    assert_eq!((u.utilisation_source.as_str(), u.peak_utilisation_percent), ("gpm", Some(40)), "{u:?}");
    assert!((u.mean_utilisation_percent.unwrap() - 40.0).abs() < 0.01, "{u:?}");
}

#[test]
fn two_jobs_sharing_one_gpu_each_get_their_own_processes_use() {
    let _env = cder_testkit::env_lock();
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let (machine, usage_file) = (dir.path().join("machine.json"), dir.path().join("usage.json"));
    FakeNvml { devices: vec![gpu(0)], fail: vec![] }.write(&machine).unwrap();
    // The GPU is at 80 %: one sharer's process at 30 %, the other's at 50 %.
    let mut shared = busy(80, 3_000, &[]);
    shared.processes = vec![
        FakeProcess { pid: 3101, used_memory_mib: Some(1_000), sm_percent: 30, memory_percent: 5 },
        FakeProcess { pid: 3102, used_memory_mib: Some(2_000), sm_percent: 50, memory_percent: 10 },
        // Another user's process, in a cgroup of their own named after job 62.
        FakeProcess { pid: 3103, used_memory_mib: Some(4_000), sm_percent: 40, memory_percent: 20 },
    ];
    let mut answers = FakeUsage::default();
    answers.devices.insert(gpu(0).uuid, shared);
    answers.write(&usage_file).unwrap();
    // Each process sits in its SLURM job's cgroup.
    let proc_root = dir.path().join("proc");
    for (pid, job) in [(3101, 61), (3102, 62)] {
        std::fs::create_dir_all(proc_root.join(pid.to_string())).unwrap();
        let cgroup = format!("0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n");
        std::fs::write(proc_root.join(pid.to_string()).join("cgroup"), cgroup).unwrap();
    }
    // systemd delegates user@.service to its user, who may name a cgroup
    // job_62 there: that is not SLURM's job 62, and its use is no one's.
    std::fs::create_dir_all(proc_root.join("3103")).unwrap();
    std::fs::write(
        proc_root.join("3103/cgroup"),
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_62\n",
    )
    .unwrap();
    std::env::set_var("CDER_FAKE_NVML", &machine);
    std::env::set_var("CDER_FAKE_NVML_USAGE", &usage_file);
    let text = format!(
        "[node]\nstate_dir = {:?}\n[node.enforcement]\ncgroup = \"off\"\n[node.health]\nwatch = false\n\
         [node.sharing]\nshares_per_gpu = 4\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {library:?}\n\
         device_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("state"),
        dir.path().display()
    );
    std::fs::write(dir.path().join("nvidia0"), b"").unwrap();
    let config = cder_model::Config::parse(&text, Path::new("cder.toml")).unwrap();
    let daemon = cderd::Daemon::start(config).unwrap();
    for job in ["slurm:61", "slurm:62"] {
        let mut request = AllocRequest::new(job.parse().unwrap(), 1000, 1);
        request.devices = Some(vec![0]);
        request.shares = Some(2);
        daemon.alloc(&request).unwrap();
    }
    let nvmls = cderd::usage::open_types(&daemon);
    let mut sampler = cderd::usage::Sampler::new(&nvmls).with_proc_root(&proc_root);
    assert_eq!(sampler.tick(&daemon).unwrap(), 2);
    type Seen = (String, Option<u32>, Option<u64>, Vec<u32>);
    let mut seen: Vec<Seen> = daemon
        .latest_samples()
        .iter()
        .map(|s| {
            let pids = s.processes.iter().map(|p| p.pid).collect();
            (s.job.to_string(), s.utilisation_percent, s.memory_mib, pids)
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("slurm:61".to_string(), Some(30), Some(1_000), vec![3101]),
            ("slurm:62".to_string(), Some(50), Some(2_000), vec![3102])
        ]
    );
    // The durable record says the same, never the GPU's 80 %.
    let root = cderd::Caller { uid: 0, pid: std::process::id() as i32, process: None };
    let usage = daemon.usage(root, &UsageRequest::default()).unwrap();
    let peaks: Vec<(String, Option<u32>, u64)> =
        usage.devices.iter().map(|d| (d.job.to_string(), d.peak_utilisation_percent, d.peak_memory_mib)).collect();
    assert_eq!(peaks, [("slurm:61".to_string(), Some(30), 1_000), ("slurm:62".to_string(), Some(50), 2_000)]);
    std::env::remove_var("CDER_FAKE_NVML");
    std::env::remove_var("CDER_FAKE_NVML_USAGE");
}
