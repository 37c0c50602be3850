//! Faults under the real cderd binary: its wall clock stepped back and
//! forward (libfaketime, monotonic clock untouched), a device file removed
//! while a job holds it, and a GPU gone from NVML across a restart.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cder_fake_nvml::{FakeDevice, FakeNvml};
use cder_protocol::{AccountingRequest, AllocRequest, DeviceState, EnvRequest, ErrorCode};
use cder_testkit::faults::{drop_gpu, remove_device_file, require_faketime, WallClock};
use common::Node;

fn request(job: &str, devices: Option<Vec<u32>>, count: u32) -> AllocRequest {
    let mut r = AllocRequest::new(job.parse().unwrap(), 0, count);
    r.devices = devices;
    r
}

fn real_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// A static node of `n` devices (plain files), started with `env`.
fn static_node(n: u32, dir: tempfile::TempDir, env: Vec<(String, PathBuf)>) -> Node {
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let mut text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.enforcement]\ncgroup_parent = {:?}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        common::unique_cgroup_parent(),
    );
    let mut devices = Vec::new();
    for i in 0..n {
        let path = dir.path().join(format!("nvidia{i}"));
        std::fs::write(&path, b"").unwrap();
        text += &format!(
            "[[cder.device]]\nindex = {i}\nuuid = \"GPU-fault-{i}\"\nmodel = \"Tesla T4\"\nmemory_mib = 15360\npath = {path:?}\n"
        );
        devices.push(path);
    }
    Node::custom(dir, &text, devices, env)
}

/// The wall clock steps back two hours, then forward a day, under a running
/// cderd: no allocation changes, an `alloc` waiting out a conflict waits its
/// whole `wait_ms` (a monotonic timeout) across the jump, and accounting
/// records no negative interval and no second count of a device's seconds.
#[test]
fn wall_clock_jumps_change_no_allocation_break_no_timeout_and_count_nothing_twice() {
    if !require_faketime() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut clock = WallClock::new(dir.path()).unwrap();
    let env = clock.env().into_iter().map(|(k, v)| (k.to_string_lossy().into_owned(), PathBuf::from(v))).collect();
    let node = static_node(2, dir, env);
    let mut c = node.client();
    let a = c.alloc(&request("slurm:1", Some(vec![0]), 1)).unwrap();
    let before = node.status();

    clock.jump(-7200).unwrap();
    let after = node.status();
    let owners = |s: &cder_protocol::Status| -> Vec<(u32, Option<String>)> {
        s.devices.iter().map(|d| (d.index, d.job.as_ref().map(ToString::to_string))).collect()
    };
    assert_eq!(owners(&after), owners(&before), "a clock step changed the ledger");
    assert_eq!(c.env(&"slurm:1".parse().unwrap()).unwrap().devices, a.devices);
    // Released "before" it began: recorded as 0 s, with a warning.
    c.release(&"slurm:1".parse().unwrap()).unwrap();
    // The next job on the device, on the stepped-back clock.
    c.alloc(&request("slurm:2", Some(vec![0]), 1)).unwrap();
    let log = node.log();
    assert!(log.contains("wall clock is"), "no warning about the stepped-back clock:\n{log}");

    // A day forward while an alloc waits out a conflict (device 0 is held).
    let socket = node.socket.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = cder_protocol::Client::connect(&socket, Duration::from_secs(30)).unwrap();
        let mut r = request("slurm:3", Some(vec![0]), 1);
        r.wait_ms = Some(2000);
        let started = Instant::now();
        let answer = c.alloc(&r);
        (answer, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    clock.jump(86_400).unwrap();
    let (answer, waited) = waiter.join().unwrap();
    let e = answer.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Conflict), "{e}");
    // The wait is measured on the monotonic clock: all of it, and no more
    // than a hang's bound, whatever the wall clock did.
    assert!(waited >= Duration::from_millis(2000) && waited < Duration::from_secs(30), "waited {waited:?}");
    assert_eq!(owners(&node.status()), vec![(0, Some("slurm:2".into())), (1, None)]);
    c.release(&"slurm:2".parse().unwrap()).unwrap();

    let acc = c.accounting(&AccountingRequest::default()).unwrap();
    let mut spans: Vec<(String, i64, i64, i64)> =
        acc.records.iter().map(|r| (r.job.to_string(), r.start, r.end.unwrap(), r.device_seconds)).collect();
    spans.sort_by_key(|s| s.1);
    assert_eq!(spans.len(), 2, "{spans:?}");
    let (first, second) = (&spans[0], &spans[1]);
    assert_eq!((first.0.as_str(), first.3), ("slurm:1", 0), "released before its start: 0 s, {spans:?}");
    assert_eq!(first.1, first.2, "{spans:?}");
    assert!(spans.iter().all(|s| s.3 >= 0 && s.2 >= s.1), "a negative interval: {spans:?}");
    assert!(second.1 >= first.2, "the device's intervals overlap (counted twice): {spans:?}");
    // The clock cderd read did move: slurm:2 ended on the forward clock.
    assert!(second.2 - real_now() > 86_400 - 7200 - 600, "libfaketime did not reach cderd: {spans:?}");
    assert!(acc.utilisation.device_seconds >= 0);
}

/// A device file removed while its job holds it: the job keeps its record
/// (env, status), the device is drained with the reason, goes offline (not
/// free) at release, and the drain outlives a restart. A free device whose
/// file vanishes is never handed out.
#[test]
fn a_removed_device_file_keeps_the_job_and_drains_the_device() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = static_node(3, dir, Vec::new());
    let mut c = node.client();
    let job: cder_model::JobKey = "slurm:7".parse().unwrap();
    let held = c.alloc(&request("slurm:7", Some(vec![0]), 1)).unwrap();
    remove_device_file(&node.devices[0]).unwrap();
    remove_device_file(&node.devices[2]).unwrap();

    let s = node.status();
    let d0 = &s.devices[0];
    assert_eq!((d0.state, d0.job.as_ref()), (DeviceState::Allocated, Some(&job)), "{d0:?}");
    assert!(d0.reason.as_deref().is_some_and(|r| r.contains("vanished")), "{d0:?}");
    assert_eq!(c.env_for(&EnvRequest::new(job.clone())).unwrap().devices, held.devices);
    let d2 = &s.devices[2];
    assert_eq!(d2.state, DeviceState::Offline, "{d2:?}");
    // Only device 1 can be handed out.
    let e = c.alloc(&request("slurm:8", None, 2)).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Insufficient), "{e}");
    let e = c.alloc(&request("slurm:8", Some(vec![2]), 1)).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Conflict), "{e}");

    c.release(&job).unwrap();
    let d0 = node.status().devices[0].clone();
    assert_eq!(d0.state, DeviceState::Offline, "released, not back in the pool: {d0:?}");
    let acc = c.accounting(&AccountingRequest::default()).unwrap();
    assert!(acc.records.iter().any(|r| r.job == job && r.end.is_some()), "{acc:?}");
    node.kill();
    node.start();
    let s = node.status();
    assert_eq!(s.counts["gpgpu"].free, 1, "the drains are durable: {s:?}");
}

fn fake_gpu(i: u32) -> FakeDevice {
    FakeDevice::a100("d20b0001", i, 40960)
}

/// GPU 1 of 4 is gone when cderd starts again (NVML now numbers GPUs 2 and
/// 3 as 1 and 2): GPUs 0, 2, 3 keep their cder indices and UUIDs, the job
/// holding GPU 2 still holds GPU 2, and its environment names the GPU as
/// the runtime numbers it now (CUDA index 1, same UUID).
#[test]
fn a_gpu_gone_across_a_restart_renumbers_no_other_gpu() {
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    FakeNvml { devices: (0..4).map(fake_gpu).collect(), fail: Vec::new() }.write(&machine).unwrap();
    let devices: Vec<PathBuf> = (0..4).map(|i| dir.path().join(format!("nvidia{i}"))).collect();
    for d in &devices {
        std::fs::write(d, b"").unwrap();
    }
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.health]\nwatch = false\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {library:?}\ndevice_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        dir.path().display()
    );
    let env = vec![("CDER_FAKE_NVML".to_string(), machine.clone())];
    let mut node = Node::custom(dir, &text, devices, env);
    let mut c = node.client();
    let job: cder_model::JobKey = "slurm:42".parse().unwrap();
    let held = c.alloc(&request("slurm:42", Some(vec![2]), 1)).unwrap();
    assert_eq!((held.devices[0].index, held.devices[0].uuid.as_str()), (2, fake_gpu(2).uuid.as_str()));
    let before: Vec<(u32, String)> = node.status().devices.iter().map(|d| (d.index, d.uuid.clone())).collect();

    node.kill();
    drop_gpu(&machine, &fake_gpu(1).uuid).unwrap();
    node.start();
    let s = node.status();
    let after: Vec<(u32, String)> = s.devices.iter().map(|d| (d.index, d.uuid.clone())).collect();
    assert_eq!(after, before, "a device was renumbered:\n{s:?}");
    assert_eq!(s.devices[1].state, DeviceState::Unhealthy, "the gone GPU is out of service: {:?}", s.devices[1]);
    assert_eq!(s.devices[2].job.as_ref(), Some(&job));
    let mut c = node.client();
    let env = c.env(&job).unwrap();
    assert_eq!(env.devices, held.devices, "the job's record names the same GPU");
    // Without a device cgroup the runtime numbers the three GPUs 0..2 in
    // bus order: GPU 2 is CUDA's 1 now.
    assert_eq!(env.env.0.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some("1"), "{:?}", env.env);
    let other = c.alloc(&request("slurm:43", None, 2)).unwrap();
    let got: Vec<u32> = other.devices.iter().map(|d| d.index).collect();
    assert_eq!(got, vec![0, 3]);
    assert!(node.log().contains("the ledger keeps it"), "{}", node.log());
}
