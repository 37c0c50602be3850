//! MIG discovery through nvml-wrapper's MIG calls, against the fake NVML
//! library built in this workspace (no GPU and no NVIDIA driver exist on CI;
//! nvml-wrapper dlopens the fake exactly as it would the driver).

use std::path::Path;

use cder_fake_nvml::{FakeDevice, FakeMig, FakeMigInstance, FakeNvml};
use cder_model::{Config, JobEnvironment};

fn gpu(i: u32, name: &str, mem: u64, cc: &str, cores: u32) -> FakeDevice {
    FakeDevice {
        uuid: format!("GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd"),
        name: name.to_string(),
        pci_bus_id: format!("0000:{:02x}:00.0", 0x1b + i * 0x20),
        memory_mib: mem,
        compute_capability: cc.to_string(),
        cores: Some(cores),
        clock_mhz: Some(1410),
        ecc: Some(true),
        numa_node: Some(i / 2),
        minor: i,
    }
}

fn instance(n: u32, profile: &str, gi: u32, memory_mib: u64, multiprocessors: u32, slices: u32) -> FakeMigInstance {
    FakeMigInstance {
        uuid: format!("MIG-{n:08x}-1111-4222-8333-444444444444"),
        profile: profile.to_string(),
        gpu_instance: gi,
        compute_instance: 0,
        memory_mib,
        multiprocessors,
        slices,
    }
}

/// GPU 0 in MIG mode with three of its seven slots used, GPU 1 able to but
/// not in MIG mode, GPU 2 without MIG.
fn machine() -> (FakeNvml, Vec<FakeMig>) {
    let nvml = FakeNvml {
        devices: vec![
            gpu(0, "NVIDIA A100-SXM4-80GB", 81920, "8.0", 6912),
            gpu(1, "NVIDIA A100-SXM4-80GB", 81920, "8.0", 6912),
            gpu(2, "Tesla T4", 15360, "7.5", 2560),
        ],
        fail: vec![],
    };
    let mig = vec![
        FakeMig {
            device: 0,
            enabled: true,
            max_count: 7,
            instances: vec![
                instance(1, "3g.40gb", 2, 40192, 42, 3),
                instance(2, "1g.10gb", 9, 9728, 14, 1),
                instance(3, "1g.10gb", 10, 9728, 14, 1),
            ],
        },
        FakeMig { device: 1, enabled: false, max_count: 7, instances: vec![] },
    ];
    (nvml, mig)
}

fn config(dir: &Path, library: &Path, mig: &str) -> Config {
    let text = format!(
        "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\nmig = \"{mig}\"\nmig_capabilities = {:?}\nproc_devices = {:?}\n",
        library.to_str().unwrap(),
        dir.join("capabilities").to_str().unwrap(),
        dir.join("devices").to_str().unwrap()
    );
    let path = dir.join(format!("cder-{mig}.toml"));
    std::fs::write(&path, &text).unwrap();
    Config::load(Some(&path)).unwrap()
}

/// What the test compares of a device: index, UUID, MIG profile, memory, MPs, cores, path.
type Seen<'a> = (u32, &'a str, Option<&'a str>, u64, Option<u32>, Option<u32>, &'a str);

/// One test walks every scenario: the fake reads `CDER_FAKE_NVML` at each
/// `nvmlInit`, and the environment is process-wide.
#[test]
fn mig_instances_or_whole_gpus_by_config() {
    let _env = cder_testkit::env_lock();
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("machine.json");
    let (nvml, mig) = machine();
    nvml.write_with_mig(&mig, &file).unwrap();
    std::env::set_var("CDER_FAKE_NVML", &file);
    // The driver's capability tree (/proc/driver/nvidia/capabilities), as the
    // fake driver would show it: GPU minor 0, each instance's access minor.
    for (gi, cap) in [(2, 30), (9, 111), (10, 120)] {
        let at = dir.path().join(format!("capabilities/gpu0/mig/gi{gi}/ci0"));
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(
            at.join("access"),
            format!("DeviceFileMinor: {cap}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"),
        )
        .unwrap();
    }

    // The kernel's majors (/proc/devices): nvidia-caps' is dynamic.
    std::fs::write(
        dir.path().join("devices"),
        "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n\nBlock devices:\n  8 sd\n",
    )
    .unwrap();

    // 1. mig = "whole": three GPUs, as without MIG.
    let whole = cder_inventory::discover(&config(dir.path(), &library, "whole")).unwrap();
    let ids: Vec<(u32, &str)> = whole.iter().map(|d| (d.index, d.uuid.as_str())).collect();
    assert_eq!(
        ids,
        vec![
            (0, nvml.devices[0].uuid.as_str()),
            (1, nvml.devices[1].uuid.as_str()),
            (2, nvml.devices[2].uuid.as_str())
        ]
    );
    assert!(whole.iter().all(|d| d.mig_profile().is_none()));

    // 2. mig = "instances": GPU 0 becomes its three instances, the others stay whole.
    let config = config(dir.path(), &library, "instances");
    let devices = cder_inventory::discover(&config).unwrap();
    let got: Vec<Seen<'_>> = devices
        .iter()
        .map(|d| {
            (
                d.index,
                d.uuid.as_str(),
                d.mig_profile(),
                d.attributes.memory_mib,
                d.attributes.multiprocessors,
                d.attributes.cores,
                d.path.to_str().unwrap(),
            )
        })
        .collect();
    let mig0 = &mig[0].instances;
    assert_eq!(
        got,
        vec![
            (
                0,
                mig0[0].uuid.as_str(),
                Some("3g.40gb"),
                40192,
                Some(42),
                Some(42 * 64),
                "/dev/nvidia-caps/nvidia-cap30"
            ),
            (
                1,
                mig0[1].uuid.as_str(),
                Some("1g.10gb"),
                9728,
                Some(14),
                Some(14 * 64),
                "/dev/nvidia-caps/nvidia-cap111"
            ),
            (
                2,
                mig0[2].uuid.as_str(),
                Some("1g.10gb"),
                9728,
                Some(14),
                Some(14 * 64),
                "/dev/nvidia-caps/nvidia-cap120"
            ),
            (3, nvml.devices[1].uuid.as_str(), None, 81920, Some(108), Some(6912), "/dev/nvidia1"),
            (4, nvml.devices[2].uuid.as_str(), None, 15360, Some(40), Some(2560), "/dev/nvidia2"),
        ],
        "{devices:#?}"
    );
    // Each device's number is known without its file (none of these exist):
    // an instance's is nvidia-caps' major and its access minor.
    let numbers: Vec<String> = devices.iter().map(|d| d.dev.map(|n| n.to_string()).unwrap_or_default()).collect();
    assert_eq!(numbers, ["237:30", "237:111", "237:120", "195:1", "195:2"]);
    // An instance carries its parent's bus id (its parent), model and capability.
    assert_eq!(devices[1].pci_bus_id, "00000000:1B:00.0");
    assert_eq!(devices[1].attributes.model, "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
    assert_eq!(devices[1].attributes.compute_capability.unwrap().to_string(), "8.0");

    // 3. A job holding a MIG instance and a whole GPU sees the instance by UUID.
    let env = JobEnvironment::for_devices(&config.cders, &[devices[2].clone(), devices[4].clone()]);
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some(format!("{},4", mig0[2].uuid).as_str()));
    let env = JobEnvironment::for_devices_relative(&config.cders, &[devices[2].clone(), devices[4].clone()]);
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES"), Some(format!("{},0", mig0[2].uuid).as_str()));

    // 4. An instance whose access file is missing is named with the file.
    std::fs::remove_file(dir.path().join("capabilities/gpu0/mig/gi10/ci0/access")).unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(err.contains(&mig0[2].uuid) && err.contains("gpu0/mig/gi10/ci0/access"), "{err}");

    // 5. A failing MIG call is reported by name and GPU.
    let failing = FakeNvml { fail: vec!["nvmlDeviceGetMigDeviceHandleByIndex".into()], ..nvml.clone() };
    failing.write_with_mig(&mig, &file).unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(err.contains("nvmlDeviceGetMigDeviceHandleByIndex") && err.contains("device 0"), "{err}");
    // ... and a description with no MIG at all still discovers whole GPUs under "instances".
    nvml.write(&file).unwrap();
    assert_eq!(cder_inventory::discover(&config).unwrap().len(), 3);
}
