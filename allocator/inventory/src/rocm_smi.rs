//! Discovery of AMD GPUs through ROCm SMI.
//!
//! The library is `librocm_smi64.so.1` unless the type names another
//! (`rocm_smi_library`; the tests name the fake built in this workspace). It
//! is loaded at run time, never linked, so a node without ROCm runs cder for
//! its other devices; once loaded it stays loaded (ROCm SMI is C++ with
//! static state that an unload and reload would not rebuild cleanly).
//!
//! Each GPU's `uuid` is `GPU-` and its unique id (`rsmi_dev_unique_id_get`,
//! fused in the chip, so stable across reboots and slots) in 16 lowercase
//! hex digits: the form ROCm's `ROCR_VISIBLE_DEVICES` accepts. A board
//! without a unique id is `AMD-PCI-<bus id>` (stable while it stays in its
//! slot). Its device file is its DRM render node (`render_node_path` with
//! `{minor}`, DRM's major 226); its index is ROCm SMI's. The architecture
//! (`gfx90a`) is not in ROCm SMI 5.2.3's API: it is read from the kernel's
//! KFD topology (`<sysfs_root>/class/kfd/kfd/topology/nodes/*/properties`,
//! the node whose `drm_render_minor` is the GPU's), and left unset where
//! that is missing.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cder_model::{CderType, Device, DeviceAttributes, DeviceNumber, Health};
use cder_rocm_smi_sys::{
    RocmSmi, Status, RSMI_GPU_BLOCK_FIRST, RSMI_GPU_BLOCK_LAST, RSMI_MEM_TYPE_VRAM, RSMI_STATUS_BUSY,
    RSMI_STATUS_FILE_ERROR, RSMI_STATUS_INIT_ERROR, RSMI_STATUS_NOT_SUPPORTED, RSMI_STATUS_NOT_YET_IMPLEMENTED,
};

use crate::{DeviceReading, InventoryError};

/// ROCm SMI's library name, as the dynamic loader finds it.
pub const LIBRARY: &str = "librocm_smi64.so.1";

/// The DRM subsystem's character-device major (`/dev/dri/*`).
pub const DRM_MAJOR: u32 = 226;

/// Discovers every device the library reports for this type. A GPU whose
/// sysfs files cannot be read (fallen off the bus) is left out, loudly: the
/// node's other devices stay usable, and cderd drains the missing one.
pub fn discover(cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    let session = Session::open(cder)?;
    let count = session.call("rsmi_num_monitor_devices", None, session.lib.num_monitor_devices())?;
    let mut devices = Vec::with_capacity(count as usize);
    for index in 0..count {
        let at = Some(index);
        let bdfid = session.call("rsmi_dev_pci_id_get", at, session.lib.dev_pci_id(index))?;
        let pci_bus_id = bus_id(bdfid);
        let uuid = match device_uuid(&session.lib, index, &pci_bus_id) {
            Ok(uuid) => uuid,
            Err(status) if status == RSMI_STATUS_FILE_ERROR => {
                tracing::error!(
                    cder_type = cder.name(),
                    index,
                    pci_bus_id,
                    "ROCm SMI: GPU {index} ({pci_bus_id}) is unreadable (fell off the bus?): {}; left out of the inventory",
                    session.lib.status_string(status)
                );
                continue;
            }
            Err(status) => return Err(session.failed("rsmi_dev_unique_id_get", at, status)),
        };
        remember(bdfid, &uuid);
        let model = session.call("rsmi_dev_name_get", at, session.lib.dev_name(index))?;
        let vram =
            session.call("rsmi_dev_memory_total_get", at, session.lib.dev_memory_total(index, RSMI_MEM_TYPE_VRAM))?;
        let numa = session.call("rsmi_topo_numa_affinity_get", at, session.lib.topo_numa_affinity(index))?;
        let minor = session.call("rsmi_dev_drm_render_minor_get", at, session.lib.dev_drm_render_minor(index))?;
        // Boards without ECC answer "not supported": that is "no ECC".
        let ecc = optional(session.lib.dev_ecc_enabled(index))
            .map_err(|status| session.failed("rsmi_dev_ecc_enabled_get", at, status))?
            .is_some_and(|blocks| blocks != 0);
        devices.push(Device {
            cder_type: cder.name().to_string(),
            vendor: cder.vendor.published_name().to_string(),
            index,
            uuid,
            pci_bus_id,
            attributes: DeviceAttributes {
                model,
                memory_mib: vram / (1024 * 1024),
                compute_capability: None,
                architecture: kfd_architecture(&cder.sysfs_root, minor),
                multiprocessors: None,
                cores_per_mp: None,
                cores: None,
                clock_mhz: None,
                ecc,
            },
            path: cder.render_node_path.replace("{minor}", &minor.to_string()).into(),
            dev: Some(DeviceNumber { major: DRM_MAJOR, minor }),
            numa_node: numa_node(numa),
            health: Health::Healthy,
        });
    }
    Ok(devices)
}

/// Reads health and use of every device the library reports. A GPU whose
/// unique id (or busy percentage) can no longer be read is reported with a
/// fault, under the uuid it had when last read. What a board does not
/// report is `None`, as is what ROCm SMI's lock (shared with every process
/// on the node that uses ROCm SMI) kept from being read now; a read that
/// cannot name every GPU for that reason fails as a whole, since a GPU left
/// out would look lost.
pub fn read(cder: &CderType) -> Result<Vec<DeviceReading>, InventoryError> {
    let session = Session::open(cder)?;
    let lib = &session.lib;
    let count = session.call("rsmi_num_monitor_devices", None, lib.num_monitor_devices())?;
    let mut readings = Vec::with_capacity(count as usize);
    for index in 0..count {
        let at = Some(index);
        // A GPU that cannot be named fails the whole read: a reading left
        // out would look like a GPU gone.
        let bdfid = session.call("rsmi_dev_pci_id_get", at, lib.dev_pci_id(index))?;
        let pci_bus_id = bus_id(bdfid);
        let mut fault = None;
        let uuid = match device_uuid(lib, index, &pci_bus_id) {
            Ok(uuid) => {
                remember(bdfid, &uuid);
                uuid
            }
            Err(status) if status == RSMI_STATUS_BUSY => {
                return Err(session.failed("rsmi_dev_unique_id_get", at, status))
            }
            Err(status) => match remembered(bdfid) {
                Some(uuid) => {
                    fault = Some(format!("GPU lost: rsmi_dev_unique_id_get: {}", lib.status_string(status)));
                    uuid
                }
                None => {
                    tracing::warn!(cder_type = cder.name(), index, pci_bus_id, "ROCm SMI: GPU {index} ({pci_bus_id}) has no readable unique id and was never seen: not read: {}", lib.status_string(status));
                    continue;
                }
            },
        };
        let busy = lib.dev_busy_percent(index);
        // Its sysfs files gone: a board without the busy file says "not supported".
        match busy {
            Err(status) if status == RSMI_STATUS_FILE_ERROR => {
                fault.get_or_insert_with(|| {
                    format!("GPU lost: rsmi_dev_busy_percent_get: {}", lib.status_string(status))
                });
            }
            _ => {}
        }
        readings.push(DeviceReading {
            uuid,
            fault,
            uncorrected_errors: uncorrected_errors(lib, index),
            utilisation_percent: busy.ok().map(|p| p.min(100)),
            memory_used_mib: lib.dev_memory_usage(index, RSMI_MEM_TYPE_VRAM).ok().map(|b| b / (1024 * 1024)),
        });
    }
    Ok(readings)
}

/// Uncorrectable ECC errors summed over the blocks with ECC on; `None` where
/// the board has no ECC or no block's count could be read.
fn uncorrected_errors(lib: &RocmSmi, index: u32) -> Option<u64> {
    let enabled = lib.dev_ecc_enabled(index).ok()?;
    let blocks = (0..64).map(|bit| 1u64 << bit).filter(|b| (RSMI_GPU_BLOCK_FIRST..=RSMI_GPU_BLOCK_LAST).contains(b));
    blocks
        .filter(|b| enabled & b != 0)
        .filter_map(|b| lib.dev_ecc_count(index, b).ok())
        .map(|count| count.uncorrectable_err)
        .reduce(u64::saturating_add)
}

/// One `rsmi_init` … `rsmi_shut_down` span.
struct Session {
    lib: Arc<RocmSmi>,
    cder_type: String,
    library: String,
}

impl Session {
    /// Loads the type's library (once per process) and initialises it.
    fn open(cder: &CderType) -> Result<Session, InventoryError> {
        let library: OsString =
            cder.rocm_smi_library.as_ref().map(|p| p.as_os_str().to_owned()).unwrap_or_else(|| LIBRARY.into());
        let shown = library.to_string_lossy().into_owned();
        let lib = loaded(&library).map_err(|reason| InventoryError::RocmSmiLoad {
            cder_type: cder.name().to_string(),
            library: shown.clone(),
            reason,
        })?;
        if let Err(status) = lib.init(0) {
            let module = cder.sysfs_root.join("module/amdgpu");
            if status == RSMI_STATUS_INIT_ERROR && !module.exists() {
                return Err(InventoryError::RocmSmiNoDriver {
                    cder_type: cder.name().to_string(),
                    library: shown,
                    status: lib.status_string(status),
                    module: module.display().to_string(),
                });
            }
            // The failed init took no reference: nothing to shut down.
            return Err(InventoryError::RocmSmiCall {
                cder_type: cder.name().to_string(),
                library: shown,
                call: "rsmi_init",
                device: String::new(),
                status: lib.status_string(status),
            });
        }
        Ok(Session { lib, cder_type: cder.name().to_string(), library: shown })
    }

    /// The error of a failed call on device `index` (`None`: library-wide).
    fn failed(&self, call: &'static str, index: Option<u32>, status: Status) -> InventoryError {
        InventoryError::RocmSmiCall {
            cder_type: self.cder_type.clone(),
            library: self.library.clone(),
            call,
            device: index.map(|i| format!(" for device {i}")).unwrap_or_default(),
            status: self.lib.status_string(status),
        }
    }

    /// A call's answer, or its error naming the call and the device.
    fn call<T>(&self, call: &'static str, index: Option<u32>, result: Result<T, Status>) -> Result<T, InventoryError> {
        result.map_err(|status| self.failed(call, index, status))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(status) = self.lib.shut_down() {
            tracing::debug!(library = self.library, "rsmi_shut_down: {}", self.lib.status_string(status));
        }
    }
}

/// The library at `name`, loaded once per process and never unloaded.
fn loaded(name: &OsString) -> Result<Arc<RocmSmi>, String> {
    static LOADED: Mutex<Vec<(OsString, Arc<RocmSmi>)>> = Mutex::new(Vec::new());
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, lib)) = loaded.iter().find(|(n, _)| n == name) {
        return Ok(Arc::clone(lib));
    }
    let lib = Arc::new(RocmSmi::load(name).map_err(|e| e.to_string())?);
    loaded.push((name.clone(), Arc::clone(&lib)));
    Ok(lib)
}

/// Uuids by ROCm SMI's BDFID, as last read: a GPU whose unique id can no
/// longer be read is still named by the uuid it had.
static SEEN: Mutex<BTreeMap<u64, String>> = Mutex::new(BTreeMap::new());

fn remember(bdfid: u64, uuid: &str) {
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).insert(bdfid, uuid.to_string());
}

fn remembered(bdfid: u64) -> Option<String> {
    SEEN.lock().unwrap_or_else(|e| e.into_inner()).get(&bdfid).cloned()
}

/// A GPU's uuid (see the module's doc).
fn device_uuid(lib: &RocmSmi, index: u32, pci_bus_id: &str) -> Result<String, Status> {
    match lib.dev_unique_id(index) {
        Ok(id) => Ok(uuid_of(id)),
        Err(status) if status == RSMI_STATUS_NOT_SUPPORTED => Ok(format!("AMD-PCI-{pci_bus_id}")),
        Err(status) => Err(status),
    }
}

/// `GPU-` and the unique id in 16 hex digits, as ROCm writes it.
pub fn uuid_of(unique_id: u64) -> String {
    format!("GPU-{unique_id:016x}")
}

/// ROCm SMI's BDFID (`domain << 32 | bus << 8 | device << 3 | function`)
/// as a PCI bus id, `0000:c1:00.0`.
pub fn bus_id(bdfid: u64) -> String {
    let domain = (bdfid >> 32) & 0xffff_ffff;
    let bus = (bdfid >> 8) & 0xff;
    let device = (bdfid >> 3) & 0x1f;
    let function = bdfid & 0x7;
    format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
}

/// The NUMA node, 0 where the kernel says -1 (no NUMA).
fn numa_node(affinity: u32) -> u32 {
    if affinity == u32::MAX {
        0
    } else {
        affinity
    }
}

/// The architecture name of the GPU with render node `minor`, from the KFD
/// topology under `sysfs_root`.
fn kfd_architecture(sysfs_root: &Path, minor: u32) -> Option<String> {
    let nodes = std::fs::read_dir(sysfs_root.join("class/kfd/kfd/topology/nodes")).ok()?;
    nodes.flatten().find_map(|node| {
        let text = std::fs::read_to_string(node.path().join("properties")).ok()?;
        let property =
            |key: &str| text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse::<u64>().ok());
        (property("drm_render_minor")? == u64::from(minor)).then(|| gfx_name(property("gfx_target_version")?))?
    })
}

/// KFD's `gfx_target_version` (`major * 10000 + minor * 100 + stepping`)
/// as LLVM's target name: 90010 → `gfx90a`. `None` for 0 (a CPU node).
pub fn gfx_name(version: u64) -> Option<String> {
    (version != 0).then(|| format!("gfx{}{:x}{:x}", version / 10000, (version / 100) % 100, version % 100))
}

/// Turns "this board does not report it" into `None`; other errors stay errors.
fn optional<T>(result: Result<T, Status>) -> Result<Option<T>, Status> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(status) if status == RSMI_STATUS_NOT_SUPPORTED || status == RSMI_STATUS_NOT_YET_IMPLEMENTED => Ok(None),
        Err(status) => Err(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bdfid_is_written_as_a_pci_bus_id() {
        assert_eq!(bus_id(0xc100), "0000:c1:00.0");
        assert_eq!(bus_id((1 << 32) | 0x0300 | (0x1f << 3) | 7), "0001:03:1f.7");
        // Bits 16..32 are reserved: they never leak into the bus.
        assert_eq!(bus_id(0xabcd_c108), "0000:c1:01.0");
    }

    #[test]
    fn a_unique_id_is_a_rocr_uuid() {
        assert_eq!(uuid_of(0x18f6_8e60_2b8a_790f), "GPU-18f68e602b8a790f");
        assert_eq!(uuid_of(1), "GPU-0000000000000001");
    }

    #[test]
    fn kfd_target_versions_are_llvm_names() {
        assert_eq!(gfx_name(90010).as_deref(), Some("gfx90a"));
        assert_eq!(gfx_name(90008).as_deref(), Some("gfx908"));
        assert_eq!(gfx_name(90402).as_deref(), Some("gfx942"));
        assert_eq!(gfx_name(100300).as_deref(), Some("gfx1030"));
        assert_eq!(gfx_name(110000).as_deref(), Some("gfx1100"));
        assert_eq!(gfx_name(0), None);
    }

    #[test]
    fn the_architecture_is_the_kfd_node_of_the_render_minor() {
        let sys = tempfile::tempdir().unwrap();
        let node = |n: u32, text: &str| {
            let dir = sys.path().join(format!("class/kfd/kfd/topology/nodes/{n}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("properties"), text).unwrap();
        };
        // A CPU node, then two GPUs; drm_render_minor_x must not be taken for drm_render_minor.
        node(0, "cpu_cores_count 64\ngfx_target_version 0\ndrm_render_minor 0\n");
        node(1, "drm_render_minor_x 129\ngfx_target_version 90010\ndrm_render_minor 128\n");
        node(2, "gfx_target_version 90400\ndrm_render_minor 129\n");
        assert_eq!(kfd_architecture(sys.path(), 128).as_deref(), Some("gfx90a"));
        assert_eq!(kfd_architecture(sys.path(), 129).as_deref(), Some("gfx940"));
        assert_eq!(kfd_architecture(sys.path(), 130), None);
        assert_eq!(kfd_architecture(Path::new("/nonexistent"), 128), None);
    }

    #[test]
    fn no_numa_is_node_0() {
        assert_eq!(numa_node(u32::MAX), 0);
        assert_eq!(numa_node(3), 3);
    }
}
