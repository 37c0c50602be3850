//! `discovery = "auto"` and "never a silent 0", as an admin meets them.
//!
//! The GPUs are fakes, because no GPU driver can exist on CI: a fake sysfs
//! tree in a temp dir for the kernel's DRM devices, and the fake NVML
//! library built in this workspace for NVIDIA's. The vendor libraries AMD
//! and Intel ship are real (Debian's `librocm-smi64-1`, `libze1`): they load
//! here and see no device.

use std::path::{Path, PathBuf};

use cder_fake_nvml::{FakeDevice, FakeNvml};
use cder_model::{Config, Discovery};

/// A node's fake `/sys` and `/dev` in a temp dir.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let node = Node { dir: tempfile::tempdir().unwrap() };
        std::fs::create_dir_all(node.path("sys/class/drm")).unwrap();
        std::fs::create_dir_all(node.path("sys/bus/pci/devices")).unwrap();
        std::fs::write(node.path("kfd"), "").unwrap();
        node
    }

    /// An NVIDIA GPU as the kernel lists it among PCI devices.
    fn nvidia_gpu(&self, slot: &str) {
        let dir = self.path(&format!("sys/bus/pci/devices/{slot}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(dir.join("device"), "0x20b0\n").unwrap();
        std::fs::write(dir.join("class"), "0x030200\n").unwrap();
        std::fs::write(dir.join("uevent"), format!("DRIVER=nvidia\nPCI_SLOT_NAME={slot}\n")).unwrap();
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A render node of PCI vendor `vendor` at `slot`, with the files every DRM driver has.
    fn render_node(&self, minor: u32, vendor: u32, device: u32, slot: &str) {
        let dir = self.path(&format!("sys/class/drm/renderD{minor}"));
        std::fs::create_dir_all(dir.join("device")).unwrap();
        std::fs::write(dir.join("dev"), format!("226:{minor}\n")).unwrap();
        std::fs::write(dir.join("device/vendor"), format!("{vendor:#06x}\n")).unwrap();
        std::fs::write(dir.join("device/device"), format!("{device:#06x}\n")).unwrap();
        std::fs::write(dir.join("device/uevent"), format!("PCI_SLOT_NAME={slot}\n")).unwrap();
        std::fs::write(dir.join("device/numa_node"), "0\n").unwrap();
    }

    /// `cder.toml` with one `[[cder]]` table per item of `types` (the keys
    /// after `name`), every path pointing into this node.
    fn config(&self, types: &[(&str, &str)]) -> Config {
        let mut text = String::new();
        for (name, keys) in types {
            text += &format!(
                "[[cder]]\nname = \"{name}\"\n{keys}\nsysfs_root = {:?}\nkfd_path = {:?}\nrender_node_path = \"{}/renderD{{minor}}\"\n",
                self.path("sys"),
                self.path("kfd"),
                self.path("dev").display()
            );
        }
        let file = self.path("cder.toml");
        std::fs::write(&file, text).unwrap();
        Config::load(Some(&file)).unwrap()
    }
}

fn fake_nvml() -> PathBuf {
    cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary")
}

fn one_gpu(machine: &Path, gpus: u32) {
    let devices = (0..gpus).map(|i| FakeDevice::a100("0a0a0a0a", i, 40960)).collect();
    FakeNvml { devices, fail: vec![] }.write(machine).unwrap();
}

#[test]
fn auto_falls_back_to_the_dev_scan_when_the_vendor_library_is_absent() {
    let node = Node::new();
    node.render_node(129, 0x1002, 0x740c, "0000:c1:00.0");
    node.render_node(128, 0x1002, 0x740c, "0000:03:00.0");
    node.render_node(130, 0x8086, 0x0bd5, "0000:3a:00.0");
    let absent = node.path("opt/rocm/lib/librocm_smi64.so.1");
    let config = node.config(&[
        ("amd", &format!("vendor = \"amd\"\ndiscovery = \"auto\"\nrocm_smi_library = {absent:?}")),
        (
            "xe",
            &format!(
                "vendor = \"intel\"\ndiscovery = \"auto\"\nlevel_zero_library = {:?}",
                node.path("libze_loader.so.1")
            ),
        ),
    ]);
    assert_eq!(cder_inventory::resolve(&config.cders[0]).unwrap(), Discovery::DevScan);
    let resolved = cder_inventory::resolved(&config).unwrap();
    let sources: Vec<Discovery> = resolved.cders.iter().map(|c| c.discovery).collect();
    assert_eq!(sources, [Discovery::DevScan, Discovery::DevScan]);

    let devices = cder_inventory::discover(&config).unwrap();
    let got: Vec<(&str, u32, &str, &str, String)> = devices
        .iter()
        .map(|d| {
            (d.cder_type.as_str(), d.index, d.vendor.as_str(), d.pci_bus_id.as_str(), d.path.display().to_string())
        })
        .collect();
    let dev = node.path("dev").display().to_string();
    assert_eq!(
        got,
        [
            ("amd", 0, "AMD", "0000:03:00.0", format!("{dev}/renderD128")),
            ("amd", 1, "AMD", "0000:c1:00.0", format!("{dev}/renderD129")),
            ("xe", 0, "Intel", "0000:3a:00.0", format!("{dev}/renderD130")),
        ]
    );
    assert_eq!(devices[0].attributes.model, "AMD GPU 0x740c");
}

/// Debian's libraries, as a node with ROCm or oneAPI installed but no GPU
/// driver loaded has them: they load, their init says there is no driver,
/// and `auto` takes the scan, saying why.
#[test]
fn auto_leaves_the_real_rocm_smi_and_level_zero_for_the_scan_without_a_driver() {
    if !cder_testkit::require_programs(&["/usr/lib/librocm_smi64.so.1", "/usr/lib/x86_64-linux-gnu/libze_loader.so.1"])
    {
        return;
    }
    let node = Node::new();
    let config = node.config(&[
        ("amd", "vendor = \"amd\"\ndiscovery = \"auto\""),
        ("xe", "vendor = \"intel\"\ndiscovery = \"auto\""),
        ("fpga", "vendor = \"Xilinx\"\ndiscovery = \"auto\"\nvisible_env = [\"XILINX_VISIBLE_DEVICES\"]"),
    ]);
    assert_eq!(cder_inventory::resolve(&config.cders[0]).unwrap(), Discovery::DevScan);
    assert_eq!(cder_inventory::resolve(&config.cders[1]).unwrap(), Discovery::DevScan);
    for (cder, why) in [(&config.cders[0], "no AMD GPU driver loaded"), (&config.cders[1], "no driver")] {
        let err = cder_inventory::discover_type(cder).unwrap_err().to_string();
        assert!(err.contains("discovery through dev-scan found no device"), "{err}");
        assert!(err.contains("did not use the vendor's library") && err.contains(why), "{err}");
    }
    let err = cder_inventory::resolve(&config.cders[2]).unwrap_err().to_string();
    assert!(err.starts_with("type \"fpga\": vendor \"Xilinx\" is none whose GPUs cder can find"), "{err}");
}

/// One test walks the NVIDIA cases in turn: the fake reads `CDER_FAKE_NVML`
/// at each `nvmlInit`, and the environment is process-wide.
#[test]
fn auto_for_nvidia_uses_nvml_while_the_driver_answers() {
    let _env = cder_testkit::env_lock();
    let node = Node::new();
    let machine = node.path("machine.json");
    let keys =
        |discovery: &str| format!("vendor = \"nvidia\"\ndiscovery = \"{discovery}\"\nnvml_library = {:?}", fake_nvml());
    let auto = node.config(&[("gpgpu", &keys("auto"))]);

    // 1. The driver answers: NVML, with everything it tells.
    one_gpu(&machine, 2);
    std::env::set_var("CDER_FAKE_NVML", &machine);
    assert_eq!(cder_inventory::resolve(&auto.cders[0]).unwrap(), Discovery::Nvml);
    let devices = cder_inventory::discover(&auto).unwrap();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1].attributes.model, "NVIDIA A100-SXM4-40GB");
    assert!(devices[1].attributes.compute_capability.is_some());

    // 2. The library loads but the driver is down: the scan, and since it
    //    shows no NVIDIA GPU either, an error that says both.
    std::env::remove_var("CDER_FAKE_NVML");
    assert_eq!(cder_inventory::resolve(&auto.cders[0]).unwrap(), Discovery::DevScan);
    let err = cder_inventory::discover(&auto).unwrap_err().to_string();
    assert!(err.starts_with("type \"gpgpu\": discovery through dev-scan found no device"), "{err}");
    assert!(err.contains(&node.path("sys/bus/pci/devices").display().to_string()), "{err}");
    assert!(err.contains("did not use the vendor's library") && err.contains("cannot load NVML"), "{err}");
}

#[test]
fn a_library_that_sees_fewer_devices_than_the_kernel_is_an_error() {
    let _env = cder_testkit::env_lock();
    let node = Node::new();
    let machine = node.path("machine.json");
    let config = node
        .config(&[("gpgpu", &format!("vendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}", fake_nvml()))]);
    std::env::set_var("CDER_FAKE_NVML", &machine);

    // NVML sees two GPUs, as many as the kernel lists: fine.
    one_gpu(&machine, 2);
    node.nvidia_gpu("0000:07:00.0");
    node.nvidia_gpu("0000:08:00.0");
    node.render_node(130, 0x1002, 0x740c, "0000:c1:00.0");
    assert_eq!(cder_inventory::discover(&config).unwrap().len(), 2);

    // One GPU the driver no longer serves: the kernel still shows it.
    one_gpu(&machine, 1);
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "type \"gpgpu\": {} sees 1 device(s), but {} shows 2 device(s) of vendor Nvidia; a device the library misses would be given to no job and fenced from none",
            fake_nvml().display(),
            node.path("sys/bus/pci/devices").display()
        )
    );

    // None at all, and no render node either: still no silent 0.
    one_gpu(&machine, 0);
    std::fs::remove_dir_all(node.path("sys/bus/pci/devices/0000:07:00.0")).unwrap();
    std::fs::remove_dir_all(node.path("sys/bus/pci/devices/0000:08:00.0")).unwrap();
    let err = cder_inventory::discover(&config).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("type \"gpgpu\": discovery through nvml found no device (library {})", fake_nvml().display())
    );
    std::env::remove_var("CDER_FAKE_NVML");
}
