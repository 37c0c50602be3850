//! The real cderd binary with a `discovery = "rocm-smi"` type. The AMD
//! driver is the fake ROCm SMI library built in this workspace (loaded as
//! AMD's `librocm_smi64.so.1` is; no AMD GPU exists on CI), whose JSON
//! description a test rewrites while cderd runs: an ECC count grows, a GPU
//! falls off the bus, a GPU gets busy.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use cder_fake_rocm_smi::{FakeGpu, FakeRocmSmi};
use cder_protocol::{AllocRequest, DeviceState, DeviceStatus, DeviceUsage, UsageRequest};
use common::Node;

fn gpu(i: u32) -> FakeGpu {
    FakeGpu::mi210(0xa3d0, i)
}

/// A node of `n` fake MI210s with `[node.health]` and `[node.usage]` as
/// given; returns it and the fake's description file.
fn amd_node(machine: &FakeRocmSmi, health: &str, usage: &str) -> (Node, PathBuf) {
    let library = cder_fake_rocm_smi::library_path().expect("librocm_smi64.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let description = dir.path().join("machine.json");
    machine.write(&description).unwrap();
    let devices: Vec<PathBuf> =
        machine.devices.iter().map(|g| dir.path().join(format!("renderD{}", g.render_minor))).collect();
    for d in devices.iter().chain([&dir.path().join("kfd")]) {
        std::fs::write(d, b"").unwrap();
    }
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.health]\n{health}\n[node.usage]\n{usage}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"rocm-smi\"\nrocm_smi_library = {:?}\n\
         sysfs_root = \"{dir}/sys\"\nrender_node_path = \"{dir}/renderD{{minor}}\"\nkfd_path = \"{dir}/kfd\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        library,
        dir = dir.path().display()
    );
    let env = vec![("CDER_FAKE_ROCM_SMI".to_string(), description.clone())];
    (Node::custom(dir, &text, devices, env), description)
}

/// Waits (generously: the machine may be loaded) until GPU `i` matches.
fn wait_for(node: &Node, i: u32, what: &str, ok: impl Fn(&DeviceStatus) -> bool) -> DeviceStatus {
    let mut last = None;
    cder_testkit::wait_for_value(Duration::from_secs(180), Duration::from_millis(100), || {
        let device = node.status().devices.into_iter().find(|d| d.uuid == gpu(i).uuid()).expect("GPU in status");
        if ok(&device) {
            return Some(device);
        }
        last = Some(device);
        None
    })
    .unwrap_or_else(|| panic!("GPU {i} never became {what}: {last:?}\nlog:\n{}", node.log()))
}

fn set_umc(machine: &mut FakeRocmSmi, i: usize, count: u64) {
    machine.devices[i].ecc.as_mut().unwrap().insert("umc".into(), count);
}

#[test]
fn a_grown_ecc_count_or_a_lost_gpu_drains_it_with_the_reason() {
    // GPU 1 comes with errors from before cderd: the baseline, not a drain.
    let mut machine = FakeRocmSmi { devices: (0..3).map(gpu).collect(), ..Default::default() };
    set_umc(&mut machine, 1, 4);
    let (mut node, description) = amd_node(&machine, "interval_s = 1", "sample = false");
    let status = node.status();
    let found: Vec<(String, String)> = status.devices.iter().map(|d| (d.uuid.clone(), d.model.clone())).collect();
    let expected: Vec<(String, String)> = (0..3).map(|i| (gpu(i).uuid(), "AMD Instinct MI210".to_string())).collect();
    assert_eq!(found, expected);
    cder_testkit::wait_for("the watch to take GPU 1's old errors as its baseline", Duration::from_secs(180), || {
        node.log().contains("4 uncorrectable ECC errors since the driver loaded, from before cderd watched this device")
    });

    // 1. An uncorrectable error on a GPU a job holds: drained with the
    //    counts, and the job keeps it.
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new("slurm:1".parse().unwrap(), 4321, 1)).unwrap();
    assert_eq!(a.devices[0].uuid, gpu(0).uuid());
    set_umc(&mut machine, 0, 1);
    machine.write(&description).unwrap();
    let d0 = wait_for(&node, 0, "drained by ECC", |d| d.reason.is_some());
    assert_eq!(d0.reason.as_deref(), Some("uncorrectable ECC error (1 since the driver loaded, 0 before)"));
    assert_eq!((d0.state, d0.job.map(|j| j.to_string())), (DeviceState::Allocated, Some("slurm:1".to_string())));
    assert_eq!(wait_for(&node, 1, "still free", |_| true).reason, None, "old errors drained GPU 1");

    // 2. A GPU fallen off the bus: drained as lost, with ROCm SMI's words.
    machine.devices[2].lost = true;
    machine.write(&description).unwrap();
    let d2 = wait_for(&node, 2, "drained as lost", |d| d.reason.is_some());
    assert!(
        d2.reason.as_deref().is_some_and(|r| r.starts_with("GPU lost: rsmi_dev_unique_id_get: RSMI_STATUS_FILE_ERROR")),
        "{d2:?}"
    );
    assert_eq!(d2.state, DeviceState::Offline);

    // 3. GPU 1's count grows while cderd is down: drained at its start; an
    //    operator's undrain is not undone by the next check.
    node.terminate();
    set_umc(&mut machine, 1, 6);
    machine.write(&description).unwrap();
    node.start();
    let d1 = wait_for(&node, 1, "drained by ECC grown while down", |d| d.reason.is_some());
    assert_eq!(
        d1.reason.as_deref(),
        Some("uncorrectable ECC error (6 since the driver loaded, 4 before) while cderd was not watching")
    );
    let mut c = node.client();
    c.resume(&gpu(1).uuid()).unwrap();
    // Two checks later (interval 1 s) it is still in service.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(wait_for(&node, 1, "free", |_| true).state, DeviceState::Free, "log:\n{}", node.log());
    // The lost GPU stays out of service across the restart.
    assert!(wait_for(&node, 2, "still drained", |_| true).reason.is_some_and(|r| r.starts_with("GPU lost")));
}

#[test]
fn a_busy_amd_gpu_shows_in_the_jobs_usage() {
    let mut machine = FakeRocmSmi { devices: (0..2).map(gpu).collect(), ..Default::default() };
    let (node, description) =
        amd_node(&machine, "watch = false", "sample_period_s = 0.2\nactive_threshold_percent = 5");
    let mut request = AllocRequest::new("slurm:7".parse().unwrap(), 4321, 1);
    request.devices = Some(vec![1]);
    assert_eq!(node.client().alloc(&request).unwrap().devices[0].uuid, gpu(1).uuid());
    machine.devices[1].busy_percent = 75;
    machine.devices[1].vram_used_mib = 30_000;
    machine.write(&description).unwrap();
    let usage_of = || -> Option<DeviceUsage> {
        let request = UsageRequest { job: Some("slurm:7".parse().unwrap()), ..Default::default() };
        node.client().usage(&request).unwrap().devices.into_iter().next()
    };
    let u = cder_testkit::wait_for_value(Duration::from_secs(120), Duration::from_millis(200), || {
        usage_of().filter(|u| u.peak_utilisation_percent == Some(75))
    })
    .unwrap_or_else(|| panic!("no busy sample: {:?}\nlog:\n{}", usage_of(), node.log()));
    assert_eq!(
        (u.uuid.as_str(), u.model.as_str(), u.utilisation_source.as_str(), u.peak_memory_mib),
        (gpu(1).uuid().as_str(), "AMD Instinct MI210", "device", 30_000)
    );
    assert!(u.active_seconds.is_some_and(|s| s > 0.0), "{u:?}");
    // The idle GPU nobody holds is not sampled for anyone.
    let all = node.client().usage(&UsageRequest::default()).unwrap().devices;
    assert!(all.iter().all(|d| d.uuid == gpu(1).uuid()), "{all:?}");
}

/// Other processes on the node use ROCm SMI too: one holding its shared
/// lock, or a call that keeps cderd waiting, must drain nothing and delay no
/// request; the watch takes up again once the library answers.
#[test]
fn a_held_or_slow_rocm_smi_drains_nothing_and_stalls_no_request() {
    let mut machine = FakeRocmSmi { devices: (0..2).map(gpu).collect(), ..Default::default() };
    let (node, description) = amd_node(&machine, "interval_s = 1", "sample = false");

    // 1. The lock is held: each check is skipped, and says why.
    machine.busy = true;
    machine.write(&description).unwrap();
    cder_testkit::wait_for("a skipped check", Duration::from_secs(180), || {
        node.log().contains("A resource or mutex could not be acquired")
    });

    // 2. The library answers after 15 s: the read is given up at 10 s.
    machine.busy = false;
    machine.delay_ms = 15_000;
    machine.write(&description).unwrap();
    cder_testkit::wait_for("a read past its deadline", Duration::from_secs(180), || {
        node.log().contains("ROCm SMI did not answer within 10 s")
    });
    // Meanwhile every request is answered at once.
    let asked = std::time::Instant::now();
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new("slurm:3".parse().unwrap(), 4321, 1)).unwrap();
    let status = c.status().unwrap();
    c.release(&"slurm:3".parse().unwrap()).unwrap();
    assert!(asked.elapsed() < Duration::from_secs(2), "requests took {:?}", asked.elapsed());
    assert_eq!(a.devices.len(), 1);
    assert!(status.devices.iter().all(|d| d.reason.is_none()), "drained while unreadable: {:?}", status.devices);

    // 3. It answers again: an error that came meanwhile drains.
    machine.delay_ms = 0;
    set_umc(&mut machine, 1, 2);
    machine.write(&description).unwrap();
    let d1 = wait_for(&node, 1, "drained by ECC", |d| d.reason.is_some());
    assert_eq!(d1.reason.as_deref(), Some("uncorrectable ECC error (2 since the driver loaded, 0 before)"));
    assert_eq!(wait_for(&node, 0, "healthy", |_| true).reason, None);
}
