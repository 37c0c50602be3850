//! NVML discovery through nvml-wrapper, against the fake NVML library built in
//! this workspace (the NVIDIA driver cannot exist on CI). The real FFI path
//! runs: nvml-wrapper dlopens the fake exactly as it would the driver.

use std::path::Path;

use cder_fake_nvml::{FakeDevice, FakeNvml};
use cder_model::Config;

fn fake_machine() -> FakeNvml {
    let device = |i: u32, name: &str, mem: u64, cc: &str, cores, ecc, numa| FakeDevice {
        uuid: format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"),
        name: name.to_string(),
        pci_bus_id: format!("0000:{:02x}:00.0", 0x1b + i * 0x20),
        memory_mib: mem,
        compute_capability: cc.to_string(),
        cores: Some(cores),
        clock_mhz: Some(1410 - i * 10),
        ecc,
        numa_node: Some(numa),
        minor: i,
    };
    FakeNvml {
        devices: vec![
            device(0, "NVIDIA A100-SXM4-40GB", 40960, "8.0", 6912, Some(true), 0),
            device(1, "NVIDIA A100-SXM4-40GB", 40960, "8.0", 6912, Some(true), 0),
            device(2, "Tesla T4", 15360, "7.5", 2560, Some(false), 1),
            device(3, "Tesla T4", 15360, "7.5", 2560, None, 1),
        ],
        fail: vec![],
    }
}

fn config(dir: &Path, library: &Path) -> Config {
    let text = format!(
        "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\n",
        library.to_str().unwrap()
    );
    let path = dir.join("cder.toml");
    std::fs::write(&path, &text).unwrap();
    Config::load(Some(&path)).unwrap()
}

/// One test walks every scenario in turn: the fake reads `CDER_FAKE_NVML` at
/// each `nvmlInit`, and the environment is process-wide.
#[test]
fn nvml_discovery_through_the_fake_library() {
    let _env = cder_testkit::env_lock();
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &library);
    let machine = dir.path().join("machine.json");

    // 1. Four heterogeneous devices, field for field.
    fake_machine().write(&machine).unwrap();
    std::env::set_var("CDER_FAKE_NVML", &machine);
    let devices = cder_inventory::discover(&config).unwrap();
    let got = serde_json::to_value(&devices).unwrap();
    let expected = serde_json::json!([
        {"type":"gpgpu","vendor":"Nvidia","index":0,"uuid":"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd",
         "pci_bus_id":"00000000:1B:00.0","model":"NVIDIA A100-SXM4-40GB","memory_mib":40960,
         "compute_capability":"8.0","multiprocessors":108,"cores_per_mp":64,"cores":6912,"clock_mhz":1410,
         "ecc":true,"path":"/dev/nvidia0","numa_node":0,"health":"healthy"},
        {"type":"gpgpu","vendor":"Nvidia","index":1,"uuid":"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",
         "pci_bus_id":"00000000:3B:00.0","model":"NVIDIA A100-SXM4-40GB","memory_mib":40960,
         "compute_capability":"8.0","multiprocessors":108,"cores_per_mp":64,"cores":6912,"clock_mhz":1400,
         "ecc":true,"path":"/dev/nvidia1","numa_node":0,"health":"healthy"},
        {"type":"gpgpu","vendor":"Nvidia","index":2,"uuid":"GPU-00000002-aaaa-bbbb-cccc-dddddddddddd",
         "pci_bus_id":"00000000:5B:00.0","model":"Tesla T4","memory_mib":15360,
         "compute_capability":"7.5","multiprocessors":40,"cores_per_mp":64,"cores":2560,"clock_mhz":1390,
         "ecc":false,"path":"/dev/nvidia2","numa_node":1,"health":"healthy"},
        {"type":"gpgpu","vendor":"Nvidia","index":3,"uuid":"GPU-00000003-aaaa-bbbb-cccc-dddddddddddd",
         "pci_bus_id":"00000000:7B:00.0","model":"Tesla T4","memory_mib":15360,
         "compute_capability":"7.5","multiprocessors":40,"cores_per_mp":64,"cores":2560,"clock_mhz":1380,
         "ecc":false,"path":"/dev/nvidia3","numa_node":1,"health":"healthy"}
    ]);
    assert_eq!(got, expected, "discovered:\n{}", serde_json::to_string_pretty(&got).unwrap());

    // 2. A failing NVML call is reported by name, with the device.
    let mut failing = fake_machine();
    failing.fail = vec!["nvmlDeviceGetUUID".into()];
    failing.write(&machine).unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(err.contains("nvmlDeviceGetUUID") && err.contains("device 0"), "{err}");

    // 3. No driver: nvmlInit fails, and the error names the library.
    std::env::remove_var("CDER_FAKE_NVML");
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(err.contains("cannot load NVML") && err.contains("libcder_fake_nvml.so"), "{err}");
    assert!(err.contains("river"), "driver-not-loaded reason missing: {err}");

    // 4. A library that does not exist at all.
    let mut missing = config.clone();
    missing.cders[0].nvml_library = Some(dir.path().join("libnvidia-ml.so.1"));
    let err = cder_inventory::discover(&missing).unwrap_err().to_string();
    assert!(err.contains("cannot load NVML from") && err.contains("libnvidia-ml.so.1"), "{err}");
}
