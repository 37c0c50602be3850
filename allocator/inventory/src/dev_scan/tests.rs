//! The scan over fake sysfs trees: the files amdgpu, i915 and nvidia-drm
//! publish, written into a temp dir as the kernel lays them out.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cder_model::{CderType, Config};

use super::*;

/// A fake `/sys` (and `/dev`, `/proc`) in a temp dir.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        let tree = Tree { dir: tempfile::tempdir().unwrap() };
        std::fs::create_dir_all(tree.root().join("sys/class/drm")).unwrap();
        std::fs::create_dir_all(tree.root().join("dev/dri")).unwrap();
        // /dev/kfd is a character device on a real node; here existence is what is checked.
        std::fs::write(tree.root().join("dev/kfd"), "").unwrap();
        tree
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `files` (paths relative to `class/drm/<node>`).
    fn node(&self, node: &str, files: &[(&str, &str)]) {
        for (file, text) in files {
            let path = self.root().join("sys/class/drm").join(node).join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    /// An amdgpu render node at PCI `slot` with every file the driver publishes.
    fn amd(&self, minor: u32, slot: &str, name: &str, vram: u64, unique: &str, numa: &str) {
        let uevent = format!("DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:740C\nPCI_SLOT_NAME={slot}\n");
        self.node(
            &format!("renderD{minor}"),
            &[
                ("dev", &format!("226:{minor}\n")),
                ("device/vendor", "0x1002\n"),
                ("device/device", "0x740c\n"),
                ("device/uevent", &uevent),
                ("device/numa_node", &format!("{numa}\n")),
                ("device/product_name", &format!("{name}\n")),
                ("device/mem_info_vram_total", &format!("{vram}\n")),
                ("device/unique_id", &format!("{unique}\n")),
            ],
        );
    }

    /// A KFD topology node for the GPU at PCI bus `bus`, device 0.
    fn kfd_node(&self, n: u32, gfx_target_version: u32, bus: u32) {
        let dir = self.root().join(format!("sys/class/kfd/kfd/topology/nodes/{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        let text = format!(
            "cpu_cores_count 0\nsimd_count 440\ngfx_target_version {gfx_target_version}\nlocation_id {}\ndomain 0\n",
            bus << 8
        );
        std::fs::write(dir.join("properties"), text).unwrap();
    }

    fn config(&self, vendor: &str, discovery: &str) -> CderType {
        let root = self.root().display();
        let text = format!(
            "[[cder]]\nname = \"gpu\"\nvendor = \"{vendor}\"\ndiscovery = \"{discovery}\"\n\
             sysfs_root = \"{root}/sys\"\nrender_node_path = \"{root}/dev/dri/renderD{{minor}}\"\n\
             kfd_path = \"{root}/dev/kfd\"\nmig_capabilities = \"{root}/proc/driver/nvidia/capabilities\"\n\
             proc_devices = \"{root}/proc/devices\"\ndevice_path = \"{root}/dev/nvidia{{minor}}\"\n\
             rocm_smi_library = \"{root}/absent/librocm_smi64.so.1\"\nlevel_zero_library = \"{root}/absent/libze_loader.so.1\"\n\
             nvml_library = \"{root}/absent/libnvidia-ml.so.1\"\n"
        );
        Config::parse(&text, Path::new("cder.toml")).unwrap().cders.remove(0)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }
}

fn scan_of(cder: &CderType) -> Result<Scan, InventoryError> {
    scan_within(cder, Duration::from_secs(10))
}

#[test]
fn amd_gpus_are_numbered_in_pci_bus_order_with_what_amdgpu_publishes() {
    let tree = Tree::new();
    tree.amd(128, "0000:c1:00.0", "AMD Instinct MI210", 68_702_699_520, "0x7f3a5c0012345678", "1");
    tree.amd(129, "0000:03:00.0", "AMD Instinct MI250X", 68_702_699_520, "0x1b2c3d4e5f607182", "0");
    tree.kfd_node(0, 0, 0); // the CPU
    tree.kfd_node(1, 90010, 0xc1);
    tree.kfd_node(2, 90010, 0x03);
    // Not GPUs to hand out: a BMC's VGA card without a render node, its
    // connector, an Intel GPU, and vgem (no PCI device behind it).
    tree.node("card0", &[("dev", "226:0\n"), ("device/vendor", "0x1a03\n")]);
    tree.node("card0-VGA-1", &[("status", "connected\n")]);
    tree.node(
        "renderD130",
        &[("dev", "226:130\n"), ("device/vendor", "0x8086\n"), ("device/uevent", "PCI_SLOT_NAME=0000:00:02.0\n")],
    );
    tree.node("renderD131", &[("dev", "226:131\n")]);

    let scan = scan_of(&tree.config("amd", "dev-scan")).unwrap();
    let got: Vec<_> = scan
        .devices
        .iter()
        .map(|d| {
            (
                d.index,
                d.pci_bus_id.as_str(),
                d.attributes.model.as_str(),
                d.attributes.memory_mib,
                d.uuid.as_str(),
                d.numa_node,
                d.dev.unwrap().to_string(),
                d.attributes.architecture.as_deref(),
                d.vendor.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                0,
                "0000:03:00.0",
                "AMD Instinct MI250X",
                65520,
                "GPU-1b2c3d4e5f607182",
                0,
                "226:129".into(),
                Some("gfx90a"),
                "AMD"
            ),
            (
                1,
                "0000:c1:00.0",
                "AMD Instinct MI210",
                65520,
                "GPU-7f3a5c0012345678",
                1,
                "226:128".into(),
                Some("gfx90a"),
                "AMD"
            ),
        ]
    );
    assert_eq!(scan.devices[0].path, tree.path("dev/dri/renderD129"));
    assert_eq!(scan.devices[1].path, tree.path("dev/dri/renderD128"));
    // The only notes: the device files, which these tests do not make.
    assert!(scan.notes.iter().all(|n| n.contains("the device file; fenced by its number")), "{:?}", scan.notes);
    assert_eq!(scan.notes.len(), 2, "{:?}", scan.notes);
}

#[test]
fn what_amdgpu_does_not_publish_is_named_and_replaced() {
    let tree = Tree::new();
    tree.node(
        "renderD128",
        &[
            ("dev", "226:128\n"),
            ("device/vendor", "0x1002\n"),
            ("device/device", "0x740c\n"),
            ("device/uevent", "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0\n"),
            ("device/numa_node", "-1\n"),
            ("device/product_name", "\n"),
            ("device/mem_info_vram_total", "lots\n"),
        ],
    );
    let scan = scan_of(&tree.config("amd", "dev-scan")).unwrap();
    let d = &scan.devices[0];
    assert_eq!(
        (d.attributes.model.as_str(), d.attributes.memory_mib, d.uuid.as_str(), d.numa_node),
        ("AMD GPU 0x740c", 0, "amd-0000:03:00.0", 0)
    );
    assert_eq!(d.attributes.architecture, None);
    let notes = scan.notes.join("\n");
    let dir = tree.path("sys/class/drm/renderD128/device");
    for needle in [
        format!("{}/product_name: empty (the model name)", dir.display()),
        format!("{}/mem_info_vram_total: \"lots\" is not a byte count; memory 0", dir.display()),
        format!("{}/unique_id: no such file (the stable identity; the PCI bus id instead)", dir.display()),
        format!("{}: No such file or directory", tree.path("sys/class/kfd/kfd/topology/nodes").display()),
    ] {
        assert!(notes.contains(&needle), "no note {needle:?} in:\n{notes}");
    }
}

#[test]
fn odd_contents_of_needed_files_are_errors_naming_the_file() {
    let good = [("dev", "226:128\n"), ("device/vendor", "0x1002\n"), ("device/uevent", "PCI_SLOT_NAME=0000:03:00.0\n")];
    for (file, text, needle) in [
        ("device/vendor", "banana\n", "\"banana\" is not a hexadecimal id (needed to tell whose device it is)"),
        ("dev", "226\n", "(the render node's MAJOR:MINOR, which fences it)"),
        ("device/uevent", "DRIVER=amdgpu\n", "no PCI_SLOT_NAME= line (PCI_SLOT_NAME: the PCI bus id"),
        ("device/uevent", "PCI_SLOT_NAME=slot-3\n", "PCI_SLOT_NAME=\"slot-3\" is no PCI bus id"),
    ] {
        let tree = Tree::new();
        let files: Vec<(&str, &str)> = good.iter().map(|&(f, t)| if f == file { (f, text) } else { (f, t) }).collect();
        tree.node("renderD128", &files);
        let err = scan_of(&tree.config("amd", "dev-scan")).unwrap_err().to_string();
        let named = if file == "device/uevent" { "device/uevent" } else { file };
        let path = tree.path("sys/class/drm/renderD128").join(named);
        assert!(err.starts_with("type \"gpu\": /dev scan: "), "{err}");
        assert!(err.contains(&path.display().to_string()) && err.contains(needle), "{file}: {err}");
    }
    // A dev file that is missing altogether.
    let tree = Tree::new();
    tree.node("renderD128", &good[1..]);
    let err = scan_of(&tree.config("amd", "dev-scan")).unwrap_err().to_string();
    assert!(err.contains("renderD128/dev: no such file (the render node's MAJOR:MINOR"), "{err}");
}

#[test]
fn an_amd_type_needs_kfd_and_a_drm_directory() {
    let tree = Tree::new();
    tree.amd(128, "0000:03:00.0", "MI210", 1 << 30, "0x1", "0");
    std::fs::remove_file(tree.path("dev/kfd")).unwrap();
    let err = scan_of(&tree.config("amd", "dev-scan")).unwrap_err().to_string();
    assert!(err.contains(&tree.path("dev/kfd").display().to_string()), "{err}");
    assert!(err.contains("kfd_path: AMD's compute interface"), "{err}");
    // Intel has no /dev/kfd and does not need one.
    assert!(scan_of(&tree.config("intel", "dev-scan")).unwrap().devices.is_empty());

    std::fs::remove_dir_all(tree.path("sys/class/drm")).unwrap();
    let err = scan_of(&tree.config("intel", "dev-scan")).unwrap_err().to_string();
    assert!(err.contains(&tree.path("sys/class/drm").display().to_string()), "{err}");
    assert!(err.contains("where the kernel lists DRM devices"), "{err}");
}

#[test]
fn a_vendor_cder_cannot_scan_for_is_an_error_naming_the_type() {
    let tree = Tree::new();
    let text = format!(
        "[[cder]]\nname = \"fpga\"\nvendor = \"Xilinx\"\ndiscovery = \"dev-scan\"\nvisible_env = [\"XILINX_VISIBLE_DEVICES\"]\nsysfs_root = \"{}\"\n",
        tree.path("sys").display()
    );
    let cder = Config::parse(&text, Path::new("cder.toml")).unwrap().cders.remove(0);
    let err = crate::discover_type(&cder).unwrap_err().to_string();
    assert_eq!(
        err,
        "type \"fpga\": vendor \"Xilinx\" is none whose GPUs cder can find (NVIDIA, AMD, Intel); list its devices with discovery = \"static\""
    );
}

#[test]
fn a_type_whose_vendor_has_no_render_node_finds_no_device_and_says_so() {
    let tree = Tree::new();
    tree.amd(128, "0000:03:00.0", "MI210", 1 << 30, "0x1", "0");
    let cder = tree.config("intel", "dev-scan");
    assert!(scan_of(&cder).unwrap().devices.is_empty());
    let err = crate::discover_type(&cder).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "type \"gpu\": discovery through dev-scan found no device (devices of vendor Intel in {})",
            tree.path("sys/class/drm").display()
        )
    );
}

#[test]
fn intel_gpus_are_named_by_device_id_and_numbered_by_bus() {
    let tree = Tree::new();
    for (minor, slot, id) in [(128, "0000:8a:00.0", "0x0bd5"), (129, "0000:3a:00.0", "0x0bd6")] {
        tree.node(
            &format!("renderD{minor}"),
            &[
                ("dev", &format!("226:{minor}\n")),
                ("device/vendor", "0x8086\n"),
                ("device/device", &format!("{id}\n")),
                ("device/uevent", &format!("DRIVER=i915\nPCI_SLOT_NAME={slot}\n")),
                ("device/numa_node", "1\n"),
            ],
        );
    }
    let scan = scan_of(&tree.config("intel", "dev-scan")).unwrap();
    let got: Vec<_> =
        scan.devices.iter().map(|d| (d.index, d.attributes.model.as_str(), d.uuid.as_str(), d.numa_node)).collect();
    assert_eq!(
        got,
        [(0, "Intel GPU 0x0bd6", "intel-0000:3a:00.0", 1), (1, "Intel GPU 0x0bd5", "intel-0000:8a:00.0", 1)]
    );
    assert_eq!(scan.devices[0].path, tree.path("dev/dri/renderD129"));
    assert!(scan.notes.iter().any(|n| n.contains("publishes no memory size in sysfs; memory 0")), "{:?}", scan.notes);
}

#[test]
fn nvidia_gpus_are_the_display_class_pci_devices_with_the_drivers_device_file() {
    let tree = Tree::new();
    // What an H200 node showed: no class/drm at all (no nvidia-drm), the
    // GPU as a PCI device with the nvidia driver's proc entry.
    std::fs::remove_dir_all(tree.path("sys/class/drm")).unwrap();
    let pci = |slot: &str, vendor: &str, class: &str| {
        let dir = tree.path(&format!("sys/bus/pci/devices/{slot}"));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, text) in [
            ("vendor", vendor.to_string()),
            ("device", "0x2335".to_string()),
            ("class", class.to_string()),
            ("numa_node", "-1".to_string()),
            ("uevent", format!("DRIVER=nvidia\nPCI_CLASS={}\nPCI_SLOT_NAME={slot}", &class[2..])),
        ] {
            std::fs::write(dir.join(file), text + "\n").unwrap();
        }
    };
    pci("0000:00:06.0", "0x10de", "0x030200");
    pci("0000:00:07.0", "0x10de", "0x068000"); // an NVSwitch
    pci("0000:00:06.1", "0x10de", "0x040300"); // HDMI audio
    pci("0000:00:01.0", "0x8086", "0x030000"); // another vendor's VGA
    let cder = tree.config("nvidia", "dev-scan");
    let err = scan_of(&cder).unwrap_err().to_string();
    assert!(err.contains("gpus/0000:00:06.0/information: no such file (the GPU's /dev/nvidiaN minor)"), "{err}");
    let info = tree.path("proc/driver/nvidia/gpus/0000:00:06.0/information");
    std::fs::create_dir_all(info.parent().unwrap()).unwrap();
    // The H200's own file, as its driver (580.159.04) wrote it.
    std::fs::write(
        &info,
        "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nGPU UUID: \t GPU-54403f61-0734-043b-fae7-ea09302624a4\n\
         Video BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\n\
         Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\nGPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n",
    )
    .unwrap();
    let err = scan_of(&cder).unwrap_err().to_string();
    assert!(err.contains("no \"nvidia\" character device (the driver's major)"), "{err}");
    std::fs::write(
        tree.path("proc/devices"),
        "Character devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n241 nvidia-caps\n\n",
    )
    .unwrap();
    let scan = scan_of(&cder).unwrap();
    assert_eq!(scan.devices.len(), 1, "{:?}", scan.devices);
    let d = &scan.devices[0];
    assert_eq!(
        (d.attributes.model.as_str(), d.uuid.as_str()),
        ("NVIDIA H200", "GPU-54403f61-0734-043b-fae7-ea09302624a4")
    );
    assert_eq!((d.path.clone(), d.dev.unwrap().to_string()), (tree.path("dev/nvidia0"), "195:0".to_string()));
    assert_eq!(count(&cder), Some(1));

    // An older driver's file without Model or UUID: the device id and the bus.
    std::fs::write(&info, "IRQ: 41\nDevice Minor: 0\n").unwrap();
    let d = scan_of(&cder).unwrap().devices.remove(0);
    assert_eq!((d.attributes.model.as_str(), d.uuid.as_str()), ("NVIDIA GPU 0x2335", "nvidia-0000:00:06.0"));
}

#[test]
fn a_device_file_that_is_not_the_render_node_is_refused() {
    let tree = Tree::new();
    tree.amd(128, "0000:03:00.0", "MI210", 1 << 30, "0x1", "0");
    std::fs::write(tree.path("dev/dri/renderD128"), "a plain file").unwrap();
    let err = scan_of(&tree.config("amd", "dev-scan")).unwrap_err().to_string();
    assert!(err.contains(&tree.path("dev/dri/renderD128").display().to_string()), "{err}");
    assert!(err.contains("is not the character device 226:128 that sysfs names (it is no character device)"), "{err}");
}

#[test]
fn a_read_that_hangs_does_not_hang_discovery() {
    let tree = Tree::new();
    tree.node("renderD128", &[("dev", "226:128\n")]);
    // A FIFO blocks its reader until a writer opens it, as a read stuck in a hung driver would.
    let fifo = tree.path("sys/class/drm/renderD128/device/vendor");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo (coreutils) failed");
    let started = std::time::Instant::now();
    let err = scan_within(&tree.config("amd", "dev-scan"), Duration::from_millis(300)).unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(5), "waited {:?}", started.elapsed());
    assert!(err.contains("the scan did not finish within 300 ms"), "{err}");
    // Release the scan thread left behind.
    let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
}

#[test]
fn kfd_gfx_target_versions_read_as_llvm_targets() {
    assert_eq!(gfx_name(90010), "gfx90a");
    assert_eq!(gfx_name(90402), "gfx942");
    assert_eq!(gfx_name(90008), "gfx908");
    assert_eq!(gfx_name(110000), "gfx1100");
    assert_eq!(gfx_name(100300), "gfx1030");
}

#[test]
fn pci_bus_ids_order_numerically() {
    assert!(bus_order("0000:03:00.0") < bus_order("0000:c1:00.0"));
    assert!(bus_order("0000:ff:1f.7") < bus_order("0001:00:00.0"));
    assert!(bus_order("10000:00:00.0") > bus_order("ffff:ff:1f.7"));
    assert_eq!(bus_order("03:00.0"), None);
    assert_eq!(bus_order("0000:zz:00.0"), None);
}
