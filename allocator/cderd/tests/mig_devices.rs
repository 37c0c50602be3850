//! MIG instances as devices of the real cderd binary. The NVIDIA driver is
//! the fake NVML library built in this workspace (loaded through
//! nvml-wrapper's lib_path, as the real one is; no GPU exists on CI), with
//! one GPU in MIG mode (three instances) and one whole GPU; the driver's
//! capability tree is a temp dir.

use crate::common;

use std::time::Duration;

use cder_fake_nvml::{FakeDevice, FakeEvent, FakeMig, FakeMigInstance, FakeNvml};
use cder_protocol::{AllocRequest, DeviceState};
use common::Node;

fn gpu(i: u32) -> FakeDevice {
    FakeDevice::a100("a1000000", i, 81920)
}

fn instance(n: u32, profile: &str, gi: u32) -> FakeMigInstance {
    FakeMigInstance {
        uuid: format!("MIG-{n:08x}-1111-4222-8333-444444444444"),
        profile: profile.into(),
        gpu_instance: gi,
        compute_instance: 0,
        memory_mib: 9728,
        multiprocessors: 14,
        slices: 1,
    }
}

#[test]
fn mig_instances_are_allocated_by_uuid_and_drained_with_their_gpu() {
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, b"").unwrap();
    let instances = vec![instance(1, "1g.10gb", 9), instance(2, "1g.10gb", 10), instance(3, "1g.10gb", 11)];
    let mig = [FakeMig { device: 0, enabled: true, max_count: 7, instances: instances.clone() }];
    FakeNvml { devices: vec![gpu(0), gpu(1)], fail: vec![] }.write_with_mig(&mig, &machine).unwrap();
    let mut files = Vec::new();
    for (gi, cap) in [(9, 111), (10, 120), (11, 129)] {
        let at = dir.path().join(format!("caps/gpu0/mig/gi{gi}/ci0"));
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("access"), format!("DeviceFileMinor: {cap}\n")).unwrap();
        files.push(dir.path().join(format!("nvidia-cap{cap}")));
    }
    files.push(dir.path().join("nvidia1"));
    for f in &files {
        std::fs::write(f, b"").unwrap();
    }
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.health]\ninterval_s = 1\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\nmig = \"instances\"\n\
         mig_capabilities = {:?}\nmig_device_path = \"{dir}/nvidia-cap{{cap}}\"\ndevice_path = \"{dir}/nvidia{{minor}}\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        library,
        dir.path().join("caps"),
        dir = dir.path().display()
    );
    let env = vec![("CDER_FAKE_NVML".to_string(), machine), ("CDER_FAKE_NVML_EVENTS".to_string(), events.clone())];
    let node = Node::custom(dir, &text, files, env);

    let status = node.status();
    let uuids: Vec<&str> = status.devices.iter().map(|d| d.uuid.as_str()).collect();
    assert_eq!(
        uuids,
        [instances[0].uuid.as_str(), instances[1].uuid.as_str(), instances[2].uuid.as_str(), gpu(1).uuid.as_str()]
    );
    assert_eq!(status.devices[0].model, "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
    assert_eq!(status.counts["gpgpu"].free, 4);

    // A job asking for the profile's model gets instances, named by UUID.
    let mut c = node.client();
    let mut request = AllocRequest::new("slurm:7".parse().unwrap(), 4321, 2);
    request.model = Some("NVIDIA A100-SXM4-80GB MIG 1g.10gb".into());
    let a = c.alloc(&request).unwrap();
    let held: Vec<&str> = a.devices.iter().map(|d| d.uuid.as_str()).collect();
    assert!(held.iter().all(|u| u.starts_with("MIG-")), "{held:?}");
    let visible = a.env.get("CUDA_VISIBLE_DEVICES").expect("CUDA_VISIBLE_DEVICES").to_string();
    assert_eq!(visible, held.join(","));

    // An Xid on the MIG GPU drains every instance of it (the job keeps its two), not the other GPU.
    FakeEvent { uuid: gpu(0).uuid, xid: Some(48), ..Default::default() }.append(&events).unwrap();
    let mut last = None;
    let drained = cder_testkit::wait_for_value(Duration::from_secs(180), Duration::from_millis(100), || {
        let status = node.status();
        let drained = status.devices.iter().filter(|d| d.reason.as_deref() == Some("Xid 48")).count();
        if drained == 3 {
            return Some(status);
        }
        last = Some(status);
        None
    });
    let status = drained.unwrap_or_else(|| panic!("instances not drained: {last:?}\nlog:\n{}", node.log()));
    let free: Vec<&str> =
        status.devices.iter().filter(|d| d.state == DeviceState::Free).map(|d| d.uuid.as_str()).collect();
    assert_eq!(free, [gpu(1).uuid.as_str()]);
    assert_eq!(status.devices.iter().filter(|d| d.job.is_some()).count(), 2);
}
