//! Enforcement on NVIDIA devices discovered through NVML: device files and
//! compute mode EXCLUSIVE_PROCESS. The driver is the fake NVML library built
//! in this workspace (loaded through nvml-wrapper's lib_path, as the real
//! one is); it records compute modes in `CDER_FAKE_NVML_STATE`. Device
//! files are temp files standing in for /dev/nvidiaN.

use crate::common;

use std::os::unix::fs::MetadataExt;

use cder_fake_nvml::{FakeDevice, FakeNvml};
use cder_protocol::{AllocRequest, ReconcileRequest};
use cder_testkit::{is_root, require};
use common::Node;

/// NVML_COMPUTEMODE_DEFAULT and NVML_COMPUTEMODE_EXCLUSIVE_PROCESS.
const DEFAULT: &str = "0";
const EXCLUSIVE_PROCESS: &str = "3";

fn fake_device(i: u32) -> FakeDevice {
    FakeDevice { numa_node: Some(i / 2), ..FakeDevice::a100("fa4e0000", i, 40960) }
}

#[test]
fn nvml_compute_mode_and_device_files_follow_the_allocation() {
    if !require(is_root(), "root (to chown device files)") {
        return;
    }
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("nvml-state");
    std::fs::create_dir_all(&state).unwrap();
    let machine = dir.path().join("machine.json");
    FakeNvml { devices: (0..4).map(fake_device).collect(), fail: Vec::new() }.write(&machine).unwrap();
    let devices: Vec<_> = (0..4).map(|i| dir.path().join(format!("nvidia{i}"))).collect();
    for d in &devices {
        std::fs::write(d, b"").unwrap();
    }
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n\
         [node.enforcement]\ndevice_files = true\nnvml_exclusive_process = true\nidle_owner = 0\nidle_group = 0\nidle_mode = \"0666\"\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\ndevice_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        library,
        dir.path().display()
    );
    let env = vec![("CDER_FAKE_NVML".to_string(), machine), ("CDER_FAKE_NVML_STATE".to_string(), state.clone())];
    let node = Node::custom(dir, &text, devices.clone(), env);
    let mode = |i: u32| {
        std::fs::read_to_string(state.join(format!("{}.compute_mode", fake_device(i).uuid)))
            .unwrap_or_else(|_| DEFAULT.into())
    };
    let owner = |i: usize| {
        let m = std::fs::metadata(&devices[i]).unwrap();
        (m.uid(), m.mode() & 0o7777)
    };
    // At start every free device was put back to its idle state.
    for i in 0..4 {
        assert_eq!(mode(i), DEFAULT);
        assert_eq!(owner(i as usize), (0, 0o666));
    }
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new("slurm:1".parse().unwrap(), 4321, 2)).unwrap();
    assert_eq!(a.env.get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
    assert_eq!(a.devices[0].uuid, fake_device(0).uuid);
    for i in 0..2 {
        assert_eq!(mode(i), EXCLUSIVE_PROCESS, "device {i}");
        assert_eq!(owner(i as usize), (4321, 0o600));
    }
    assert_eq!(mode(2), DEFAULT);
    c.release(&"slurm:1".parse().unwrap()).unwrap();
    for i in 0..4 {
        assert_eq!(mode(i), DEFAULT, "device {i} after release");
        assert_eq!(owner(i as usize), (0, 0o666));
    }
    c.alloc(&AllocRequest::new("slurm:2".parse().unwrap(), 4321, 1)).unwrap();
    assert_eq!(mode(0), EXCLUSIVE_PROCESS);
    c.reconcile(&ReconcileRequest { live_jobs: vec![], lrms: None, as_of: None }).unwrap();
    assert_eq!(mode(0), DEFAULT);
    assert_eq!(owner(0), (0, 0o666));
}
