//! Discovery of the kernel's DRM devices, without a vendor library: what a
//! node without ROCm SMI, Level Zero or NVML still shows.
//!
//! AMD and Intel: each `<sysfs_root>/class/drm/renderD*` whose PCI
//! `device/vendor` is the type's vendor is one device; cards without a
//! render node (a BMC's VGA) and render nodes of other vendors or of no PCI
//! device (vgem) are not. NVIDIA: CUDA does not compute through a render
//! node, and a node without `nvidia-drm` has none (an H200 node seen had no
//! `class/drm` at all), so each display-class PCI device
//! (`<sysfs_root>/bus/pci/devices/*/class` 0x03….) of vendor 0x10de is one.
//! Devices are numbered in PCI bus order, as the vendors' runtimes number
//! them (`ROCR_VISIBLE_DEVICES`, `ZE_AFFINITY_MASK`, CUDA's `PCI_BUS_ID`).
//!
//! What each device is, from sysfs:
//!
//! | field | from | when absent |
//! |---|---|---|
//! | `pci_bus_id` | `device/uevent` `PCI_SLOT_NAME=` | the `device` link's name, else an error |
//! | `dev` | the render node's `dev` (`226:128`); NVIDIA: `proc_devices`' `nvidia` major and the driver's minor | an error |
//! | `path` | `render_node_path` with `{minor}` (AMD, Intel); NVIDIA: `device_path` with the minor of the driver's `gpus/<bus>/information` | an error |
//! | `model` | amdgpu's `device/product_name`; NVIDIA: the driver's `Model:` | `"<Vendor> GPU 0x<device id>"` |
//! | `memory_mib` | amdgpu's `device/mem_info_vram_total` | 0, with a note |
//! | `architecture` | KFD's `class/kfd/kfd/topology/nodes/*/properties` `gfx_target_version` | none |
//! | `uuid` | amdgpu's `device/unique_id`, as ROCr's `GPU-<hex>`; NVIDIA: the driver's `GPU UUID:`, as NVML's | `<vendor>-<pci bus id>` (`amd-0000:c1:00.0`) |
//! | `numa_node` | `device/numa_node` (`-1`: node 0) | 0, with a note |
//!
//! sysfs is the kernel's, not a user's, but an attribute read goes into the
//! driver, and a hung GPU can hang it: the scan runs on a thread of its
//! own and discovery gives up on it after [`SCAN_DEADLINE`], naming the
//! type; the thread is left blocked in the kernel, cderd goes on.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cder_model::{CderType, Device, DeviceAttributes, DeviceNumber, Health, VendorKind};

use crate::InventoryError;

/// How long a scan may take before discovery gives up on it.
pub const SCAN_DEADLINE: Duration = Duration::from_secs(10);

/// sysfs attributes are at most a page; anything longer is not one.
const ATTRIBUTE_LIMIT: u64 = 4096;

/// What one scan found: the devices, and a note for every file it could
/// not read and what it used instead.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub devices: Vec<Device>,
    pub notes: Vec<String>,
}

/// Discovers the render nodes of this type's vendor under `sysfs_root`,
/// logging each file it could not read.
pub fn discover(cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    let scan = scan_within(cder, SCAN_DEADLINE)?;
    for note in &scan.notes {
        tracing::warn!(cder_type = cder.name(), "/dev scan: {note}");
    }
    Ok(scan.devices)
}

/// How many devices of this type's vendor sysfs shows (for checking a
/// library's count); `None` when the vendor has no PCI id cder knows or
/// the directory cannot be read (no DRM at all).
pub(crate) fn count(cder: &CderType) -> Option<usize> {
    let vendor = pci_vendor(&cder.vendor)?;
    let cder = cder.clone();
    within(cder.name().to_string(), scan_dir(&cder), SCAN_DEADLINE, move || {
        let found = candidates(&cder).ok()?;
        Some(found.iter().filter(|c| is_ours(&cder, vendor, c).unwrap_or(false)).count())
    })
    .ok()
    .flatten()
}

/// The directory the scan reads, for messages: `class/drm`, or NVIDIA's
/// `bus/pci/devices`.
pub(crate) fn scan_dir(cder: &CderType) -> PathBuf {
    match cder.vendor {
        VendorKind::Nvidia => cder.sysfs_root.join("bus/pci/devices"),
        _ => cder.sysfs_root.join("class/drm"),
    }
}

/// A device the scan looks at: its PCI directory and, for a render node,
/// the node's `dev` file.
struct Candidate {
    device_dir: PathBuf,
    dev_file: Option<PathBuf>,
}

/// The render nodes (or, for NVIDIA, the PCI devices), sorted by name.
fn candidates(cder: &CderType) -> std::io::Result<Vec<Candidate>> {
    let nvidia = cder.vendor == VendorKind::Nvidia;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(scan_dir(cder))?
        .filter_map(|e| e.ok())
        .filter(|e| nvidia || e.file_name().to_str().is_some_and(|n| n.starts_with("renderD")))
        .map(|e| e.path())
        .collect();
    entries.sort();
    Ok(entries
        .into_iter()
        .map(|path| match nvidia {
            true => Candidate { device_dir: path, dev_file: None },
            false => Candidate { device_dir: path.join("device"), dev_file: Some(path.join("dev")) },
        })
        .collect())
}

/// Whether a candidate is a GPU of `vendor`; an error names the file that
/// could not tell.
fn is_ours(cder: &CderType, vendor: u32, candidate: &Candidate) -> Result<bool, (PathBuf, String)> {
    let vendor_file = candidate.device_dir.join("vendor");
    match read_hex(&vendor_file) {
        Ok(v) if v == vendor => {}
        Ok(_) => return Ok(false),
        // No PCI device behind it (vgem, a virtual display): not a GPU to hand out.
        Err(Unread::Missing) => {
            tracing::debug!(device = %candidate.device_dir.display(), "no vendor file: not a PCI device, skipped");
            return Ok(false);
        }
        Err(e) => return Err((vendor_file, format!("{e} (needed to tell whose device it is)"))),
    }
    if cder.vendor != VendorKind::Nvidia {
        return Ok(true);
    }
    // NVIDIA's NVSwitches (0x0680) and HDMI audio (0x0403) are no GPUs.
    let class_file = candidate.device_dir.join("class");
    read_hex(&class_file)
        .map(|class| class >> 16 == 0x03)
        .map_err(|e| (class_file, format!("{e} (the PCI class, whether it is a GPU)")))
}

/// The PCI vendor id of a vendor cder knows.
pub(crate) fn pci_vendor(vendor: &VendorKind) -> Option<u32> {
    match vendor {
        VendorKind::Nvidia => Some(0x10de),
        VendorKind::Amd => Some(0x1002),
        VendorKind::Intel => Some(0x8086),
        VendorKind::XeonPhi | VendorKind::Other(_) => None,
    }
}

/// Runs the scan on a thread of its own and waits at most `deadline`.
pub(crate) fn scan_within(cder: &CderType, deadline: Duration) -> Result<Scan, InventoryError> {
    let owned = cder.clone();
    within(cder.name().to_string(), scan_dir(cder), deadline, move || scan(&owned))?
}

/// `work` on a thread of its own, or an error naming the type when it has
/// not returned after `deadline` (the thread is left to finish or not).
fn within<T: Send + 'static>(
    cder_type: String,
    dir: PathBuf,
    deadline: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, InventoryError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name(format!("dev-scan-{cder_type}")).spawn(move || {
        let _ = tx.send(work());
    });
    let timed_out = |reason: String| InventoryError::DevScan {
        cder_type: cder_type.clone(),
        path: dir.display().to_string(),
        reason,
    };
    spawned.map_err(|e| timed_out(format!("cannot start the scan thread: {e}")))?;
    rx.recv_timeout(deadline).map_err(|_| {
        timed_out(format!(
            "the scan did not finish within {} ms (a read hung in the driver?); left behind",
            deadline.as_millis()
        ))
    })
}

fn scan(cder: &CderType) -> Result<Scan, InventoryError> {
    let name = cder.name().to_string();
    let failed = |path: &Path, reason: String| InventoryError::DevScan {
        cder_type: name.clone(),
        path: path.display().to_string(),
        reason,
    };
    let vendor_id = pci_vendor(&cder.vendor).ok_or_else(|| InventoryError::UnknownVendor {
        cder_type: name.clone(),
        vendor: cder.vendor.published_name().to_string(),
    })?;
    let mut out = Scan::default();
    if cder.vendor == VendorKind::Amd {
        // ROCm computes through /dev/kfd: without it an AMD GPU is no compute device.
        std::fs::metadata(&cder.kfd_path).map_err(|e| {
            failed(&cder.kfd_path, format!("{e} (kfd_path: AMD's compute interface; is the amdgpu driver loaded?)"))
        })?;
    }
    let dir = scan_dir(cder);
    let where_listed = match cder.vendor {
        VendorKind::Nvidia => "where the kernel lists PCI devices",
        _ => "where the kernel lists DRM devices",
    };
    let candidates = candidates(cder).map_err(|e| failed(&dir, format!("{e} ({where_listed})")))?;
    let kfd = kfd_architectures(cder, &mut out.notes);
    let mut found: Vec<((u32, u32, u32, u32), Device)> = Vec::new();
    for candidate in candidates {
        if !is_ours(cder, vendor_id, &candidate).map_err(|(path, e)| failed(&path, e))? {
            continue;
        }
        let render_dev = match &candidate.dev_file {
            Some(dev_file) => Some(
                read_attr(dev_file)
                    .map_err(|e| e.to_string())
                    .and_then(|t| t.parse::<DeviceNumber>().map_err(|e| format!("{t:?}: {e}")))
                    .map_err(|e| failed(dev_file, format!("{e} (the render node's MAJOR:MINOR, which fences it)")))?,
            ),
            None => None,
        };
        let device_dir = candidate.device_dir;
        let pci_bus_id = pci_slot(&device_dir).map_err(|e| {
            failed(&device_dir.join("uevent"), format!("{e} (PCI_SLOT_NAME: the PCI bus id that orders devices)"))
        })?;
        let order = bus_order(&pci_bus_id).ok_or_else(|| {
            failed(&device_dir.join("uevent"), format!("PCI_SLOT_NAME={pci_bus_id:?} is no PCI bus id"))
        })?;
        let device_id = read_hex(&device_dir.join("device")).ok();
        if device_id.is_none() {
            out.notes.push(format!(
                "{}: unreadable (the device id, for the model name)",
                device_dir.join("device").display()
            ));
        }
        let numa_file = device_dir.join("numa_node");
        let numa_node = match read_attr(&numa_file).map(|t| t.parse::<i64>()) {
            Ok(Ok(n)) => n.max(0) as u32,
            Ok(Err(_)) | Err(_) => {
                out.notes.push(format!("{}: unreadable or not a number (the NUMA node); node 0", numa_file.display()));
                0
            }
        };
        let (path, dev, nvidia) = match render_dev {
            Some(dev) => (PathBuf::from(cder.render_node_path.replace("{minor}", &dev.minor.to_string())), dev, None),
            None => {
                let info = nvidia_driver_info(cder, &pci_bus_id).map_err(|(p, e)| failed(&p, e))?;
                (info.path.clone(), info.dev, Some(info))
            }
        };
        let (model, memory_mib, uuid) = match cder.vendor {
            VendorKind::Amd => amdgpu_identity(&device_dir, device_id, &pci_bus_id, &mut out.notes),
            _ => {
                out.notes.push(format!(
                    "{}: the {} driver publishes no memory size in sysfs; memory 0",
                    device_dir.display(),
                    cder.vendor.published_name()
                ));
                // NVIDIA's driver names the GPU as NVML does (model, `GPU-…` UUID).
                let named = nvidia.as_ref().and_then(|n| n.model.clone());
                let uuid = nvidia.as_ref().and_then(|n| n.uuid.clone());
                (
                    named.unwrap_or_else(|| generic_model(&cder.vendor, device_id)),
                    0,
                    uuid.unwrap_or_else(|| fallback_uuid(&cder.vendor, &pci_bus_id)),
                )
            }
        };

        check_device_file(&path, dev, &mut out.notes).map_err(|e| failed(&path, e))?;
        let architecture = kfd.iter().find(|(at, _)| *at == order).map(|(_, arch)| arch.clone());
        let device = Device {
            cder_type: name.clone(),
            vendor: cder.vendor.published_name().to_string(),
            index: 0,
            uuid,
            pci_bus_id,
            attributes: DeviceAttributes {
                model,
                memory_mib,
                compute_capability: None,
                architecture,
                multiprocessors: None,
                cores_per_mp: None,
                cores: None,
                clock_mhz: None,
                ecc: false,
            },
            path,
            dev: Some(dev),
            numa_node,
            health: Health::Healthy,
        };
        found.push((order, device));
    }
    found.sort_by_key(|(order, _)| *order);
    for (index, (_, mut device)) in found.into_iter().enumerate() {
        device.index = index as u32;
        out.devices.push(device);
    }
    Ok(out)
}

/// Why an attribute gave no value.
#[derive(Debug)]
enum Unread {
    /// The file is not there.
    Missing,
    /// It could not be read.
    Io(std::io::Error),
    /// It was read but is not what it should be.
    Odd(String),
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unread::Missing => write!(f, "no such file"),
            Unread::Io(e) => write!(f, "{e}"),
            Unread::Odd(why) => write!(f, "{why}"),
        }
    }
}

/// One attribute, trimmed; at most [`ATTRIBUTE_LIMIT`] bytes are read.
fn read_attr(path: &Path) -> Result<String, Unread> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Unread::Missing,
        _ => Unread::Io(e),
    })?;
    let mut bytes = Vec::new();
    file.take(ATTRIBUTE_LIMIT).read_to_end(&mut bytes).map_err(Unread::Io)?;
    let text = String::from_utf8(bytes).map_err(|_| Unread::Odd("not text".into()))?;
    Ok(text.trim().to_string())
}

/// A `0x1002`-style attribute.
fn read_hex(path: &Path) -> Result<u32, Unread> {
    let text = read_attr(path)?;
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(&text);
    u32::from_str_radix(digits, 16).map_err(|_| Unread::Odd(format!("{text:?} is not a hexadecimal id")))
}

/// The PCI bus id: uevent's `PCI_SLOT_NAME`, else the name the `device`
/// link points to (`../../../0000:c1:00.0`).
fn pci_slot(device_dir: &Path) -> Result<String, Unread> {
    let from_uevent = read_attr(&device_dir.join("uevent"))
        .map(|t| t.lines().find_map(|l| l.strip_prefix("PCI_SLOT_NAME=")).map(|s| s.trim().to_ascii_lowercase()));
    match from_uevent {
        Ok(Some(slot)) => Ok(slot),
        other => {
            let target = std::fs::read_link(device_dir).ok();
            let name =
                target.as_deref().and_then(Path::file_name).and_then(|n| n.to_str()).map(str::to_ascii_lowercase);
            match (name, other) {
                (Some(name), _) if bus_order(&name).is_some() => Ok(name),
                (_, Err(e)) => Err(e),
                (_, Ok(_)) => Err(Unread::Odd("no PCI_SLOT_NAME= line".into())),
            }
        }
    }
}

/// `0000:c1:00.0` as numbers (domain, bus, device, function), for PCI bus order.
fn bus_order(id: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = id.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(dev)?, hex(func)?))
}

/// Model, memory and uuid of an amdgpu device from what the driver
/// publishes beside it.
fn amdgpu_identity(
    device_dir: &Path,
    device_id: Option<u32>,
    pci_bus_id: &str,
    notes: &mut Vec<String>,
) -> (String, u64, String) {
    let vendor = VendorKind::Amd;
    let optional = |file: &str, purpose: &str, notes: &mut Vec<String>| {
        let path = device_dir.join(file);
        match read_attr(&path) {
            Ok(text) if !text.is_empty() => Some(text),
            Ok(_) => {
                notes.push(format!("{}: empty ({purpose})", path.display()));
                None
            }
            Err(e) => {
                notes.push(format!("{}: {e} ({purpose})", path.display()));
                None
            }
        }
    };
    let model = optional("product_name", "the model name", notes).unwrap_or_else(|| generic_model(&vendor, device_id));
    let memory = optional("mem_info_vram_total", "the memory size; memory 0", notes);
    let memory_mib = match memory.as_deref().map(|text| (text, text.parse::<u64>())) {
        Some((_, Ok(bytes))) => bytes / (1024 * 1024),
        Some((text, Err(_))) => {
            notes.push(format!("{}/mem_info_vram_total: {text:?} is not a byte count; memory 0", device_dir.display()));
            0
        }
        None => 0,
    };
    // ROCr names a GPU `GPU-<unique_id>`, which ROCR_VISIBLE_DEVICES accepts.
    let uuid = match optional("unique_id", "the stable identity; the PCI bus id instead", notes) {
        Some(id) => format!("GPU-{}", id.trim_start_matches("0x").to_ascii_lowercase()),
        None => fallback_uuid(&vendor, pci_bus_id),
    };
    (model, memory_mib, uuid)
}

/// `AMD GPU 0x740c`: what a device without a published name is called.
fn generic_model(vendor: &VendorKind, device_id: Option<u32>) -> String {
    match device_id {
        Some(id) => format!("{} GPU {id:#06x}", vendor_label(vendor)),
        None => format!("{} GPU", vendor_label(vendor)),
    }
}

fn vendor_label(vendor: &VendorKind) -> &'static str {
    match vendor {
        VendorKind::Nvidia => "NVIDIA",
        VendorKind::Amd => "AMD",
        _ => "Intel",
    }
}

/// `amd-0000:c1:00.0`: stable while the board stays in its slot.
fn fallback_uuid(vendor: &VendorKind, pci_bus_id: &str) -> String {
    format!("{}-{pci_bus_id}", vendor_label(vendor).to_ascii_lowercase())
}

/// What NVIDIA's driver says of one GPU in `gpus/<bus id>/information`.
struct NvidiaInfo {
    /// `device_path` with the GPU's minor (`/dev/nvidia0`).
    path: PathBuf,
    /// The `nvidia` major of `proc_devices` and that minor.
    dev: DeviceNumber,
    /// `Model:` (`NVIDIA H200`), as NVML names it.
    model: Option<String>,
    /// `GPU UUID:` (`GPU-54403f61-…`), as NVML gives it.
    uuid: Option<String>,
}

/// NVIDIA's render node gives no CUDA access: the device file is the
/// driver's `/dev/nvidiaN` (`device_path`), N from the driver's
/// `gpus/<bus id>/information` beside `mig_capabilities`
/// (`/proc/driver/nvidia`), its major from `proc_devices`.
fn nvidia_driver_info(cder: &CderType, pci_bus_id: &str) -> Result<NvidiaInfo, (PathBuf, String)> {
    let driver = cder.mig_capabilities.parent().unwrap_or(Path::new("/proc/driver/nvidia"));
    let info = driver.join("gpus").join(pci_bus_id).join("information");
    let text = read_attr(&info).map_err(|e| (info.clone(), format!("{e} (the GPU's /dev/nvidiaN minor)")))?;
    // `Key: \t value` lines.
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == key).map(|(_, v)| v.trim().to_string()))
            .filter(|v| !v.is_empty())
    };
    let minor = field("Device Minor")
        .and_then(|v| v.parse::<u32>().ok())
        .ok_or_else(|| (info.clone(), "no \"Device Minor: N\" line (the GPU's /dev/nvidiaN minor)".to_string()))?;
    let majors = std::fs::read_to_string(&cder.proc_devices).unwrap_or_default();
    let major =
        crate::char_major(&majors, "nvidia-frontend").or_else(|| crate::char_major(&majors, "nvidia")).ok_or_else(
            || (cder.proc_devices.clone(), "no \"nvidia\" character device (the driver's major)".to_string()),
        )?;
    let path = cder.device_path.replace("{index}", &minor.to_string()).replace("{minor}", &minor.to_string());
    Ok(NvidiaInfo {
        path: PathBuf::from(path),
        dev: DeviceNumber { major, minor },
        model: field("Model"),
        uuid: field("GPU UUID").filter(|u| u.starts_with("GPU-")),
    })
}

/// A device file that exists must be the character device sysfs names: a
/// `render_node_path` that points elsewhere would fence one file and give
/// out another. One that does not exist yet is fenced by number.
fn check_device_file(path: &Path, dev: DeviceNumber, notes: &mut Vec<String>) -> Result<(), String> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            notes.push(format!("{}: {e} (the device file; fenced by its number {dev} meanwhile)", path.display()));
            return Ok(());
        }
    };
    let found = DeviceNumber::from_rdev(meta.rdev());
    if !meta.file_type().is_char_device() || found != dev {
        return Err(format!(
            "is not the character device {dev} that sysfs names (it is {}); check render_node_path / device_path",
            if meta.file_type().is_char_device() { found.to_string() } else { "no character device".to_string() }
        ));
    }
    Ok(())
}

/// The gfx names of the GPUs KFD knows, by PCI bus order: its topology
/// nodes' `properties` carry `gfx_target_version` (90010 is gfx90a),
/// `domain` and `location_id` (bus << 8 | device << 3 | function). CPU
/// nodes have version 0 and are left out.
fn kfd_architectures(cder: &CderType, notes: &mut Vec<String>) -> Vec<((u32, u32, u32, u32), String)> {
    if cder.vendor != VendorKind::Amd {
        return Vec::new();
    }
    let dir = cder.sysfs_root.join("class/kfd/kfd/topology/nodes");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            notes.push(format!("{}: {e} (KFD's topology, for the gfx architecture)", dir.display()));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for entry in entries.filter_map(|e| e.ok()) {
        let file = entry.path().join("properties");
        let Ok(text) = read_attr(&file) else {
            notes.push(format!("{}: unreadable (KFD's topology, for the gfx architecture)", file.display()));
            continue;
        };
        let get = |key: &str| {
            text.lines().find_map(|l| {
                l.split_once(' ').filter(|(k, _)| *k == key).and_then(|(_, v)| v.trim().parse::<u64>().ok())
            })
        };
        let (Some(version), Some(location)) = (get("gfx_target_version"), get("location_id")) else { continue };
        if version == 0 {
            continue;
        }
        let domain = get("domain").unwrap_or(0) as u32;
        let at = (domain, (location >> 8) as u32 & 0xff, (location >> 3) as u32 & 0x1f, location as u32 & 0x7);
        out.push((at, gfx_name(version)));
    }
    out
}

/// KFD's `gfx_target_version` (major·10000 + minor·100 + stepping) as
/// LLVM's target name: 90010 → `gfx90a`, 90402 → `gfx942`, 110000 → `gfx1100`.
fn gfx_name(version: u64) -> String {
    format!("gfx{}{:x}{:x}", version / 10000, (version / 100) % 100, version % 100)
}

#[cfg(test)]
mod tests;
