//! AMD discovery through ROCm SMI. The GPUs are the fake ROCm SMI library
//! built in this workspace (no amdgpu driver can run on CI): cder loads it
//! at run time as it loads AMD's `librocm_smi64.so.1`, so the FFI path is
//! the real one. Debian's real library is loaded too, and must tell a node
//! without the driver apart from a node without GPUs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cder_fake_rocm_smi::{FakeGpu, FakeRocmSmi};
use cder_inventory::InventoryError;
use cder_model::Config;

/// Two MI210s and a workstation board without unique id, ECC or NUMA.
fn fake_machine() -> FakeRocmSmi {
    let w6800 = FakeGpu {
        unique_id: None,
        name: "AMD Radeon PRO W6800".into(),
        vram_total_mib: 32752,
        vram_used_mib: 0,
        busy_percent: 0,
        pci_bus_id: "0000:e3:00.0".into(),
        numa_node: None,
        render_minor: 130,
        ecc: None,
        lost: false,
    };
    FakeRocmSmi { devices: vec![FakeGpu::mi210(0x5eed, 0), FakeGpu::mi210(0x5eed, 1), w6800], ..Default::default() }
}

/// A sysfs tree with the KFD topology of the two MI210s (gfx90a) and a
/// CPU node; the W6800 has none, so its architecture stays unknown.
fn fake_sysfs(root: &Path) {
    for (node, text) in [
        (0, "cpu_cores_count 64\ngfx_target_version 0\ndrm_render_minor 0\n"),
        (1, "gfx_target_version 90010\ndrm_render_minor 128\n"),
        (2, "gfx_target_version 90010\ndrm_render_minor 129\n"),
    ] {
        let dir = root.join(format!("class/kfd/kfd/topology/nodes/{node}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("properties"), text).unwrap();
    }
}

fn config(dir: &Path, library: Option<&Path>, sysfs: &Path) -> Config {
    let mut text = format!(
        "[[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"rocm-smi\"\nsysfs_root = {:?}\n",
        sysfs.to_str().unwrap()
    );
    if let Some(library) = library {
        text += &format!("rocm_smi_library = {:?}\n", library.to_str().unwrap());
    }
    let path = dir.join("cder.toml");
    std::fs::write(&path, &text).unwrap();
    Config::load(Some(&path)).unwrap()
}

/// One test walks every scenario in turn: the fake reads
/// `CDER_FAKE_ROCM_SMI` at each call, and the environment is process-wide.
#[test]
fn rocm_smi_discovery_through_the_fake_library() {
    let _env = cder_testkit::env_lock();
    let library: PathBuf =
        cder_fake_rocm_smi::library_path().expect("librocm_smi64.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let sysfs = dir.path().join("sys");
    fake_sysfs(&sysfs);
    let config = config(dir.path(), Some(&library), &sysfs);
    let machine = dir.path().join("machine.json");
    let gpus = fake_machine();

    // 1. Three GPUs, field for field.
    gpus.write(&machine).unwrap();
    std::env::set_var("CDER_FAKE_ROCM_SMI", &machine);
    let devices = cder_inventory::discover(&config).unwrap();
    let got = serde_json::to_value(&devices).unwrap();
    let expected = serde_json::json!([
        {"type":"gpgpu","vendor":"AMD","index":0,"uuid":"GPU-00005eed00001000","pci_bus_id":"0000:c1:00.0",
         "model":"AMD Instinct MI210","memory_mib":65520,"compute_capability":null,"architecture":"gfx90a",
         "multiprocessors":null,"cores_per_mp":null,"cores":null,"clock_mhz":null,"ecc":true,
         "path":"/dev/dri/renderD128","dev":"226:128","numa_node":0,"health":"healthy"},
        {"type":"gpgpu","vendor":"AMD","index":1,"uuid":"GPU-00005eed00001001","pci_bus_id":"0000:c2:00.0",
         "model":"AMD Instinct MI210","memory_mib":65520,"compute_capability":null,"architecture":"gfx90a",
         "multiprocessors":null,"cores_per_mp":null,"cores":null,"clock_mhz":null,"ecc":true,
         "path":"/dev/dri/renderD129","dev":"226:129","numa_node":1,"health":"healthy"},
        {"type":"gpgpu","vendor":"AMD","index":2,"uuid":"AMD-PCI-0000:e3:00.0","pci_bus_id":"0000:e3:00.0",
         "model":"AMD Radeon PRO W6800","memory_mib":32752,"compute_capability":null,
         "multiprocessors":null,"cores_per_mp":null,"cores":null,"clock_mhz":null,"ecc":false,
         "path":"/dev/dri/renderD130","dev":"226:130","numa_node":0,"health":"healthy"}
    ]);
    assert_eq!(got, expected, "discovered:\n{}", serde_json::to_string_pretty(&got).unwrap());
    let uuids: Vec<String> = devices.iter().map(|d| d.uuid.clone()).collect();
    assert_eq!(uuids, gpus.devices.iter().map(FakeGpu::uuid).collect::<Vec<_>>());

    // 2. What the health watch and the usage sampler read.
    let mut busy = gpus.clone();
    busy.devices[0].busy_percent = 87;
    busy.devices[0].vram_used_mib = 40000;
    busy.devices[1].ecc = Some(BTreeMap::from([("umc".to_string(), 2), ("gfx".to_string(), 1)]));
    busy.write(&machine).unwrap();
    let readings = cder_inventory::read_devices(&config.cders[0]).unwrap();
    let seen: Vec<_> = readings
        .iter()
        .map(|r| (r.uuid.as_str(), r.fault.is_some(), r.uncorrected_errors, r.utilisation_percent, r.memory_used_mib))
        .collect();
    assert_eq!(
        seen,
        [
            ("GPU-00005eed00001000", false, Some(0), Some(87), Some(40000)),
            ("GPU-00005eed00001001", false, Some(3), Some(0), Some(0)),
            ("AMD-PCI-0000:e3:00.0", false, None, Some(0), Some(0)),
        ]
    );

    // 3. A GPU fallen off the bus: left out of discovery, read as lost
    //    under the uuid it had.
    let mut lost = busy.clone();
    lost.devices[1].lost = true;
    lost.write(&machine).unwrap();
    let found: Vec<String> = cder_inventory::discover(&config).unwrap().into_iter().map(|d| d.uuid).collect();
    assert_eq!(found, ["GPU-00005eed00001000", "AMD-PCI-0000:e3:00.0"]);
    let readings = cder_inventory::read_devices(&config.cders[0]).unwrap();
    let fault = readings.iter().find(|r| r.uuid == "GPU-00005eed00001001").and_then(|r| r.fault.clone());
    assert!(
        fault.as_deref().is_some_and(|f| f.starts_with("GPU lost: rsmi_dev_unique_id_get: RSMI_STATUS_FILE_ERROR")),
        "{readings:?}"
    );
    assert!(readings.iter().filter(|r| r.uuid != "GPU-00005eed00001001").all(|r| r.fault.is_none()), "{readings:?}");

    // 4. Another process holds ROCm SMI's lock: no GPU can be named now,
    //    which is no fault of theirs, so the read fails as a whole (a GPU
    //    left out of it would look lost).
    let mut held = busy.clone();
    held.busy = true;
    held.write(&machine).unwrap();
    let err = cder_inventory::read_devices(&config.cders[0]).unwrap_err().to_string();
    assert!(
        err.contains("rsmi_dev_pci_id_get failed for device 0")
            && err.contains("A resource or mutex could not be acquired because it is already being used"),
        "{err}"
    );
    // Discovery too fails, naming the call (cderd then does not start).
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(err.contains("rsmi_dev_pci_id_get failed for device 0: A resource or mutex"), "{err}");

    // 5. A failing call is reported by name, with the device, the library
    //    and ROCm SMI's own words.
    let mut failing = gpus.clone();
    failing.fail = vec!["rsmi_dev_name_get".into()];
    failing.write(&machine).unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(
        err.contains(&format!("ROCm SMI ({})", library.display()))
            && err.contains("rsmi_dev_name_get failed for device 0")
            && err.contains("An unknown error prevented the call from completing successfully"),
        "{err}"
    );

    // 6. A library that reports no GPU: never a silent 0, the error names
    //    the library.
    FakeRocmSmi::default().write(&machine).unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("type \"gpgpu\": discovery through rocm-smi found no device (library {})", library.display())
    );

    // 7. A description the fake cannot read: rsmi_init fails, named.
    std::fs::write(&machine, b"{\"devices\": [ {").unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert!(err.contains("rsmi_init failed") && err.contains("not of the type that was expected"), "{err}");

    // 8. No amdgpu driver: rsmi_init fails as the real library's does, and
    //    the error says what is missing.
    std::env::remove_var("CDER_FAKE_ROCM_SMI");
    let err = cder_inventory::discover(&config).unwrap_err();
    assert!(matches!(err, InventoryError::RocmSmiNoDriver { .. }), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains(&format!("ROCm SMI ({}): no AMD GPU driver loaded: rsmi_init:", library.display()))
            && err.contains(&format!("{}/module/amdgpu does not exist", sysfs.display())),
        "{err}"
    );
    // ... while with the driver loaded the same failure is ROCm SMI's own.
    std::fs::create_dir_all(sysfs.join("module/amdgpu")).unwrap();
    let err = cder_inventory::read_devices(&config.cders[0]).unwrap_err().to_string();
    assert!(err.contains("rsmi_init failed: An error occurred during initialization"), "{err}");

    // 9. A library that does not exist at all.
    let mut missing = config.clone();
    missing.cders[0].rocm_smi_library = Some(dir.path().join("librocm_smi64.so.1"));
    let err = cder_inventory::discover(&missing).unwrap_err().to_string();
    assert!(
        err.contains("cannot load ROCm SMI from")
            && err.contains("librocm_smi64.so.1")
            && err.contains("librocm-smi64-1"),
        "{err}"
    );
}

/// Debian's `librocm_smi64.so.1` (librocm-smi64-1), loaded by its default
/// name: here, without the amdgpu driver, cder must say so rather than
/// report no GPU; with the driver (a lent AMD machine), the GPUs it finds
/// must be well formed.
#[test]
fn the_real_rocm_smi_library_says_why_it_sees_no_gpu() {
    let real = Path::new("/usr/lib/librocm_smi64.so.1");
    if !cder_testkit::require(real.exists(), "librocm-smi64-1 (/usr/lib/librocm_smi64.so.1)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), None, Path::new("/sys"));
    let found = cder_inventory::discover(&config);
    if !Path::new("/sys/module/amdgpu").exists() {
        let err = found.unwrap_err();
        assert!(matches!(err, InventoryError::RocmSmiNoDriver { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("ROCm SMI (librocm_smi64.so.1): no AMD GPU driver loaded: rsmi_init: An error occurred during initialization")
                && text.contains("/sys/module/amdgpu does not exist"),
            "{text}"
        );
        let err = cder_inventory::read_devices(&config.cders[0]).unwrap_err();
        assert!(matches!(err, InventoryError::RocmSmiNoDriver { .. }), "{err:?}");
        return;
    }
    // The driver runs here: whatever ROCm SMI finds is described fully.
    for device in found.unwrap() {
        assert!(device.uuid.starts_with("GPU-") || device.uuid.starts_with("AMD-PCI-"), "{device:?}");
        assert!(device.path.to_string_lossy().starts_with("/dev/dri/renderD"), "{device:?}");
        assert_eq!(device.dev.map(|d| d.major), Some(226), "{device:?}");
        assert!(device.attributes.memory_mib > 0 && !device.attributes.model.is_empty(), "{device:?}");
    }
}

/// The fake's status strings are the real library's, code for code: the
/// errors cder prints through the fake read as they will on an AMD node.
#[test]
fn the_fake_speaks_the_real_librarys_words() {
    let real = Path::new("/usr/lib/librocm_smi64.so.1");
    if !cder_testkit::require(real.exists(), "librocm-smi64-1 (/usr/lib/librocm_smi64.so.1)") {
        return;
    }
    let fake = cder_fake_rocm_smi::library_path().expect("librocm_smi64.so is built beside the test binary");
    let real = cder_rocm_smi_sys::RocmSmi::load(real.as_os_str()).unwrap();
    let fake = cder_rocm_smi_sys::RocmSmi::load(fake.as_os_str()).unwrap();
    for code in (0..=17).chain([0x55, cder_rocm_smi_sys::RSMI_STATUS_UNKNOWN_ERROR]) {
        assert_eq!(fake.status_string(code), real.status_string(code), "status {code}");
    }
    // Without the driver (and, for the fake, without its file), both fail
    // to start alike, and answer alike after.
    if !Path::new("/sys/module/amdgpu").exists() {
        let _env = cder_testkit::env_lock();
        std::env::remove_var("CDER_FAKE_ROCM_SMI");
        let answers = |lib: &cder_rocm_smi_sys::RocmSmi| (lib.init(0), lib.num_monitor_devices(), lib.shut_down());
        let init_error = cder_rocm_smi_sys::RSMI_STATUS_INIT_ERROR;
        assert_eq!(answers(&real), (Err(init_error), Ok(0), Err(init_error)));
        assert_eq!(answers(&fake), answers(&real));
    }
}
