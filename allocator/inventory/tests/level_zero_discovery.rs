//! Level Zero discovery and readings, against the fake loader built in this
//! workspace (Intel's GPU driver cannot exist on CI; the fake is needed only
//! for that) and against Debian's real `libze_loader.so.1`, which loads here
//! and finds no driver. The real FFI path runs: cder dlopens the fake
//! exactly as it would the real loader. The kernel's side (the render node
//! under /sys/bus/pci/devices) is a tree the test writes, named by
//! `sysfs_root`, as the kernel would lay it out.

use std::path::{Path, PathBuf};

use cder_inventory::{DeviceReading, InventoryError};
use cder_model::{Config, Device, JobEnvironment};
use fake_level_zero::{FakeControl, FakeDevice, FakeHealth, FakeLevelZero, FakeSubDevice};

const MAX_1550: &str = "Intel(R) Data Center GPU Max 1550";
const FLEX_170: &str = "Intel(R) Data Center GPU Flex 170";

/// A Max 1550 with two tiles at 0000:29:00.0 (NUMA node 1, renderD128) and
/// a Flex 170 without tiles at 0000:9a:00.0 (no NUMA, renderD129).
fn machine() -> FakeLevelZero {
    let health =
        |busy, used| FakeHealth { busy_percent: Some(busy), memory_used_mib: Some(used), ..Default::default() };
    FakeLevelZero {
        devices: vec![
            FakeDevice {
                name: MAX_1550.into(),
                uuid: "8680d50b000000000000290000000000".into(),
                device_id: 0x0bd5,
                device_type: "gpu".into(),
                bdf: "0000:29:00.0".into(),
                memory_mib: vec![131072],
                xe_cores: 128,
                eus_per_xe_core: 8,
                clock_mhz: 1600,
                sub_devices: (0..2)
                    .map(|t| FakeSubDevice {
                        uuid: format!("8680d50b00000000000029000000000{}", t + 1),
                        memory_mib: 65536,
                        xe_cores: 64,
                        busy_percent: 20 + 50 * t,
                        memory_used_mib: 1000 * (t as u64 + 1),
                    })
                    .collect(),
                health: health(60, 0),
            },
            FakeDevice {
                name: FLEX_170.into(),
                uuid: "8680c0560000000000009a0000000000".into(),
                device_id: 0x56c0,
                device_type: "gpu".into(),
                bdf: "0000:9a:00.0".into(),
                memory_mib: vec![16384],
                xe_cores: 32,
                eus_per_xe_core: 16,
                clock_mhz: 2050,
                sub_devices: vec![],
                health: health(75, 4096),
            },
        ],
        unsupported: vec![],
        fail: vec![],
    }
}

/// The kernel's view of the two GPUs, as sysfs lays it out.
fn sysfs(root: &Path) {
    for (bdf, render, numa) in [("0000:29:00.0", 128, "1"), ("0000:9a:00.0", 129, "-1")] {
        let dir = root.join("bus/pci/devices").join(bdf);
        std::fs::create_dir_all(dir.join("drm").join(format!("card{}", render - 128))).unwrap();
        std::fs::create_dir_all(dir.join("drm").join(format!("renderD{render}"))).unwrap();
        std::fs::write(dir.join("numa_node"), format!("{numa}\n")).unwrap();
    }
}

fn config(dir: &Path, library: &Path, extra: &str) -> Config {
    let text = format!(
        "[[cder]]\nname = \"xe\"\nvendor = \"intel\"\ndiscovery = \"level-zero\"\nlevel_zero_library = {:?}\nsysfs_root = {:?}\n{extra}",
        library.to_str().unwrap(),
        dir.join("sys").to_str().unwrap(),
    );
    let path = dir.join("cder.toml");
    std::fs::write(&path, &text).unwrap();
    Config::load(Some(&path)).unwrap()
}

fn reading<'a>(readings: &'a [DeviceReading], uuid: &str) -> &'a DeviceReading {
    readings.iter().find(|r| r.uuid == uuid).unwrap_or_else(|| panic!("no reading for {uuid} in {readings:?}"))
}

fn near(got: Option<u32>, want: u32) -> bool {
    got.is_some_and(|g| g.abs_diff(want) <= 2)
}

/// Every scenario in turn, under the environment lock: the fake reads
/// `CDER_FAKE_LEVEL_ZERO` and `ZES_ENABLE_SYSMAN` at each `zeInit`.
#[test]
fn level_zero_discovery_and_readings_through_the_fake_loader() {
    let _env = cder_testkit::env_lock();
    let library: PathBuf = fake_level_zero::library_path().expect("libze_loader.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    sysfs(&dir.path().join("sys"));
    let whole = config(dir.path(), &library, "");
    let tiles = config(dir.path(), &library, "tiles = \"tiles\"\n");
    let description = dir.path().join("machine.json");
    let control = dir.path().join("control.json");
    machine().write(&description).unwrap();
    std::env::set_var("CDER_FAKE_LEVEL_ZERO", &description);
    std::env::set_var("CDER_FAKE_LEVEL_ZERO_CONTROL", &control);
    std::env::remove_var("ZES_ENABLE_SYSMAN");

    // 1. Two GPUs, whole, field for field.
    let devices = cder_inventory::discover(&whole).unwrap();
    let got = serde_json::to_value(&devices).unwrap();
    let expected = serde_json::json!([
        {"type":"xe","vendor":"Intel","index":0,"uuid":"GPU-8680d50b-0000-0000-0000-290000000000",
         "pci_bus_id":"0000:29:00.0","model":MAX_1550,"memory_mib":131072,"compute_capability":null,
         "architecture":"Xe-HPC","multiprocessors":128,"cores_per_mp":8,"cores":1024,"clock_mhz":1600,
         "ecc":true,"path":"/dev/dri/renderD128","dev":"226:128","numa_node":1,"health":"healthy"},
        {"type":"xe","vendor":"Intel","index":1,"uuid":"GPU-8680c056-0000-0000-0000-9a0000000000",
         "pci_bus_id":"0000:9a:00.0","model":FLEX_170,"memory_mib":16384,"compute_capability":null,
         "architecture":"Xe-HPG","multiprocessors":32,"cores_per_mp":16,"cores":512,"clock_mhz":2050,
         "ecc":true,"path":"/dev/dri/renderD129","dev":"226:129","numa_node":0,"health":"healthy"}
    ]);
    assert_eq!(got, expected, "discovered:\n{}", serde_json::to_string_pretty(&got).unwrap());

    // 2. Offered as tiles: the Max's two tiles, then the Flex whole; each
    // tile has its own UUID and memory and its GPU's render node.
    let devices: Vec<Device> = cder_inventory::discover(&tiles).unwrap();
    type Summary<'a> = (u32, &'a str, &'a str, u64, Option<u32>, String);
    let summary: Vec<Summary> = devices
        .iter()
        .map(|d| {
            (
                d.index,
                d.uuid.as_str(),
                d.attributes.model.as_str(),
                d.attributes.memory_mib,
                d.attributes.cores,
                d.path.display().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                0,
                "GPU-8680d50b-0000-0000-0000-290000000001@0.0",
                "Intel(R) Data Center GPU Max 1550 (tile 0)",
                65536,
                Some(512),
                "/dev/dri/renderD128".into()
            ),
            (
                1,
                "GPU-8680d50b-0000-0000-0000-290000000002@0.1",
                "Intel(R) Data Center GPU Max 1550 (tile 1)",
                65536,
                Some(512),
                "/dev/dri/renderD128".into()
            ),
            (2, "GPU-8680c056-0000-0000-0000-9a0000000000@1", FLEX_170, 16384, Some(512), "/dev/dri/renderD129".into()),
        ]
    );
    assert!(devices[..2].iter().all(|d| d.dev == devices[0].dev && d.numa_node == 1 && d.pci_bus_id == "0000:29:00.0"));
    // A job holding tile 1 of the Max and the Flex sees them as Level Zero
    // names them: by the loader's GPU numbers, not the type's indices.
    let held = [devices[1].clone(), devices[2].clone()];
    let env = JobEnvironment::for_devices(&tiles.cders, &held);
    assert_eq!(env.get("ZE_AFFINITY_MASK"), Some("0.1,1"));
    let env = JobEnvironment::for_devices_relative(&tiles.cders, &devices[2..]);
    assert_eq!(env.get("ZE_AFFINITY_MASK"), Some("0"), "in its device cgroup the job opens one GPU");

    // 3. Readings without Sysman: an error that says what to set.
    let err = cder_inventory::read_devices(&whole.cders[0]).unwrap_err();
    assert!(matches!(err, InventoryError::LevelZeroSysmanOff { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("ZES_ENABLE_SYSMAN=1") && text.contains("ZE_RESULT_ERROR_UNINITIALIZED"), "{text}");

    // 4. With Sysman: healthy, busy as the engines' counters say, memory in use.
    std::env::set_var("ZES_ENABLE_SYSMAN", "1");
    let readings = cder_inventory::read_devices(&whole.cders[0]).unwrap();
    assert_eq!(readings.len(), 2, "{readings:?}");
    let max = reading(&readings, "GPU-8680d50b-0000-0000-0000-290000000000");
    assert_eq!((max.fault.as_deref(), max.uncorrected_errors), (None, Some(0)), "{max:?}");
    assert!(near(max.utilisation_percent, 60), "the device-wide engines: {max:?}");
    assert_eq!(max.memory_used_mib, Some(3000), "the tiles' memory modules add up: {max:?}");
    let flex = reading(&readings, "GPU-8680c056-0000-0000-0000-9a0000000000");
    assert!(near(flex.utilisation_percent, 75) && flex.memory_used_mib == Some(4096), "{flex:?}");

    // 4b. Where the driver has only the tiles' engine groups, the whole GPU
    // reads as their average.
    let mut per_tile = machine();
    per_tile.devices[0].health.busy_percent = None;
    per_tile.write(&description).unwrap();
    let readings = cder_inventory::read_devices(&whole.cders[0]).unwrap();
    let max = reading(&readings, "GPU-8680d50b-0000-0000-0000-290000000000");
    assert!(near(max.utilisation_percent, 45), "tiles at 20 and 70: {max:?}");
    machine().write(&description).unwrap();

    // 5. Tiles read apart: each its own engines and memory.
    let readings = cder_inventory::read_devices(&tiles.cders[0]).unwrap();
    let (t0, t1) = (
        reading(&readings, "GPU-8680d50b-0000-0000-0000-290000000001@0.0"),
        reading(&readings, "GPU-8680d50b-0000-0000-0000-290000000002@0.1"),
    );
    assert!(near(t0.utilisation_percent, 20) && near(t1.utilisation_percent, 70), "{t0:?} {t1:?}");
    assert_eq!((t0.memory_used_mib, t1.memory_used_mib), (Some(1000), Some(2000)));

    // 6. Health changes while the process runs: the control file is re-read
    // at every call. The Flex's memory goes critical with 3 uncorrectable
    // errors; the Max needs a reset.
    let mut faults = FakeControl::default();
    faults.devices.insert(
        "8680c0560000000000009a0000000000".into(),
        FakeHealth { memory_health: Some("critical".into()), uncorrectable: Some(3), ..Default::default() },
    );
    faults.devices.insert(
        "8680d50b000000000000290000000000".into(),
        FakeHealth { reset_required: Some(true), ..Default::default() },
    );
    faults.write(&control).unwrap();
    let readings = cder_inventory::read_devices(&whole.cders[0]).unwrap();
    let flex = reading(&readings, "GPU-8680c056-0000-0000-0000-9a0000000000");
    assert_eq!(flex.uncorrected_errors, Some(3), "{flex:?}");
    assert!(flex.fault.as_deref().is_some_and(|f| f.contains("memory health critical")), "{flex:?}");
    let max = reading(&readings, "GPU-8680d50b-0000-0000-0000-290000000000");
    assert!(max.fault.as_deref().is_some_and(|f| f.contains("needs a reset")), "{max:?}");

    // 7. A GPU lost: read as a fault under the UUID discovery gave it, and
    // left out of a new discovery, loudly, while the other stays.
    faults
        .devices
        .insert("8680d50b000000000000290000000000".into(), FakeHealth { lost: Some(true), ..Default::default() });
    faults.write(&control).unwrap();
    let readings = cder_inventory::read_devices(&whole.cders[0]).unwrap();
    let max = reading(&readings, "GPU-8680d50b-0000-0000-0000-290000000000");
    assert!(max.fault.as_deref().is_some_and(|f| f.contains("ZE_RESULT_ERROR_DEVICE_LOST")), "{max:?}");
    let uuids: Vec<String> = cder_inventory::discover(&whole).unwrap().into_iter().map(|d| d.uuid).collect();
    assert_eq!(uuids, ["GPU-8680c056-0000-0000-0000-9a0000000000"]);
    std::fs::remove_file(&control).unwrap();

    // 8. Sysman features the driver does not offer read as None, not errors.
    let mut sparse = machine();
    sparse.unsupported = vec![
        "zesDeviceEnumRasErrorSets".into(),
        "zesDeviceEnumEngineGroups".into(),
        "zesDeviceEnumMemoryModules".into(),
    ];
    sparse.write(&description).unwrap();
    let readings = cder_inventory::read_devices(&whole.cders[0]).unwrap();
    assert_eq!(readings.len(), 2);
    for r in &readings {
        assert_eq!(
            (r.fault.as_deref(), r.uncorrected_errors, r.utilisation_percent, r.memory_used_mib),
            (None, None, None, None),
            "{r:?}"
        );
    }

    // 9. A failing call is named, with the device and the result code.
    let mut failing = machine();
    failing.fail = vec!["zeDevicePciGetPropertiesExt".into()];
    failing.write(&description).unwrap();
    let err = cder_inventory::discover(&whole).unwrap_err().to_string();
    assert!(
        err.contains("zeDevicePciGetPropertiesExt failed on device 0 (GPU-8680d50b-0000-0000-0000-290000000000)")
            && err.contains("ZE_RESULT_ERROR_UNKNOWN")
            && err.contains(library.to_str().unwrap()),
        "{err}"
    );

    // 10. Devices that are not GPUs are not offered.
    let mut with_vpu = machine();
    with_vpu.devices[1].device_type = "vpu".into();
    with_vpu.write(&description).unwrap();
    assert_eq!(cder_inventory::discover(&whole).unwrap().len(), 1);

    // 11. A GPU the kernel shows no render node for: named, with the path.
    machine().write(&description).unwrap();
    let drm = dir.path().join("sys/bus/pci/devices/0000:9a:00.0/drm");
    std::fs::remove_dir(drm.join("renderD129")).unwrap();
    let err = cder_inventory::discover(&whole).unwrap_err().to_string();
    assert!(
        err.contains("0000:9a:00.0") && err.contains(drm.to_str().unwrap()) && err.contains("render node"),
        "{err}"
    );
    std::fs::create_dir(drm.join("renderD129")).unwrap();

    // 12. No driver: the loader loads, zeInit refuses, never a silent 0.
    std::env::remove_var("CDER_FAKE_LEVEL_ZERO");
    let err = cder_inventory::discover(&whole).unwrap_err();
    assert!(matches!(err, InventoryError::LevelZeroNoDriver { .. }), "{err}");
    assert!(err.to_string().contains("no driver: zeInit answered ZE_RESULT_ERROR_UNINITIALIZED"), "{err}");

    // 13. A loader that is not there at all.
    let mut absent = whole.clone();
    absent.cders[0].level_zero_library = Some(dir.path().join("libze_loader.so.1"));
    let err = cder_inventory::discover(&absent).unwrap_err();
    assert!(matches!(err, InventoryError::LevelZeroLoad { .. }), "{err}");
    assert!(err.to_string().contains(dir.path().join("libze_loader.so.1").to_str().unwrap()), "{err}");

    std::env::remove_var("CDER_FAKE_LEVEL_ZERO_CONTROL");
    std::env::remove_var("ZES_ENABLE_SYSMAN");
}

/// Debian's real loader (libze1) on a node without Intel's GPU driver: it
/// loads, and cder says there is no driver instead of reporting no GPUs.
#[test]
fn the_real_loader_without_a_driver_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[cder]]\nname = \"xe\"\nvendor = \"intel\"\ndiscovery = \"level-zero\"\n";
    let path = dir.path().join("cder.toml");
    std::fs::write(&path, text).unwrap();
    let config = Config::load(Some(&path)).unwrap();
    match cder_inventory::discover(&config) {
        Err(InventoryError::LevelZeroLoad { reason, .. }) => {
            cder_testkit::missing(&format!("Debian's libze1 (libze_loader.so.1): {reason}"));
        }
        Err(e @ InventoryError::LevelZeroNoDriver { .. }) => {
            let text = e.to_string();
            assert!(text.contains("Level Zero (libze_loader.so.1): no driver"), "{text}");
            assert!(text.contains("ZE_RESULT_ERROR_UNINITIALIZED"), "{text}");
        }
        Err(other) => panic!("the real loader answered something else: {other}"),
        Ok(devices) => {
            // A node with Intel's driver: the devices are real ones.
            assert!(
                devices.iter().all(|d| d.uuid.starts_with("GPU-") && d.dev.is_some_and(|n| n.major == 226)),
                "{devices:?}"
            );
        }
    }
}
