//! Discovery through NVML, by way of nvml-wrapper.
//!
//! The library is the driver's `libnvidia-ml.so.1` unless the type names
//! another (`nvml_library`): the tests point it at the fake NVML cdylib built
//! in this workspace, so the same FFI path runs on CI as on a GPU node.

use std::ffi::OsStr;

use cder_model::{CderType, ComputeCapability, Device, DeviceAttributes, DeviceNumber, Health, MigOffer};
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::error::InventoryError;

/// The driver's library name, as the dynamic loader finds it.
pub const DRIVER_LIBRARY: &str = "libnvidia-ml.so.1";

/// Opens NVML for a type: its configured library, or the driver's.
pub fn open_nvml(cder: &CderType) -> Result<Nvml, InventoryError> {
    let library = cder.nvml_library.as_ref().map(|p| p.as_os_str().to_owned()).unwrap_or_else(|| DRIVER_LIBRARY.into());
    Nvml::builder().lib_path(OsStr::new(&library)).init().map_err(|source| InventoryError::NvmlLoad {
        cder_type: cder.name().to_string(),
        library: library.to_string_lossy().into_owned(),
        source,
    })
}

/// Discovers every device NVML reports for this type. With
/// `mig = "instances"`, a GPU in MIG mode is replaced by its MIG instances;
/// indices then number the type's devices in that order (GPU by GPU, a
/// GPU's instances by MIG index), no longer NVML's GPU indices.
pub fn discover_nvml(cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    let nvml = open_nvml(cder)?;
    let call_failed = |call: &'static str, index: Option<u32>| {
        let device = index.map(|i| format!(" for device {i}")).unwrap_or_default();
        move |source: NvmlError| InventoryError::NvmlCall { cder_type: cder.name().to_string(), call, device, source }
    };
    let count = nvml.device_count().map_err(call_failed("nvmlDeviceGetCount_v2", None))?;
    // The device files may not exist yet (nvidia-modprobe makes them on
    // first use): the cgroups deny these numbers meanwhile.
    let majors = std::fs::read_to_string(&cder.proc_devices).unwrap_or_default();
    let gpu_major = char_major(&majors, "nvidia-frontend").or_else(|| char_major(&majors, "nvidia"));
    let caps_major = char_major(&majors, "nvidia-caps");
    let mut devices = Vec::with_capacity(count as usize);
    for index in 0..count {
        let at = Some(index);
        // A GPU fallen off the bus is left out, loudly: the node's other
        // devices stay usable, and cderd marks the missing one unhealthy.
        let device = match nvml.device_by_index(index) {
            Err(NvmlError::GpuLost) => {
                tracing::error!(
                    cder_type = cder.name(),
                    index,
                    "NVML: GPU {index} is lost (fell off the bus); left out of the inventory"
                );
                continue;
            }
            other => other.map_err(call_failed("nvmlDeviceGetHandleByIndex_v2", at))?,
        };
        let uuid = match device.uuid() {
            Err(NvmlError::GpuLost) => {
                tracing::error!(
                    cder_type = cder.name(),
                    index,
                    "NVML: GPU {index} is lost (fell off the bus); left out of the inventory"
                );
                continue;
            }
            other => other.map_err(call_failed("nvmlDeviceGetUUID", at))?,
        };
        let model = device.name().map_err(call_failed("nvmlDeviceGetName", at))?;
        let pci_bus_id = device.pci_info().map_err(call_failed("nvmlDeviceGetPciInfo_v3", at))?.bus_id;
        let memory_mib =
            device.memory_info().map_err(call_failed("nvmlDeviceGetMemoryInfo_v2", at))?.total / (1024 * 1024);
        let cc = device.cuda_compute_capability().map_err(call_failed("nvmlDeviceGetCudaComputeCapability", at))?;
        let compute_capability = ComputeCapability { major: cc.major as u32, minor: cc.minor as u32 };
        let cores = optional(device.num_cores()).map_err(call_failed("nvmlDeviceGetNumGpuCores", at))?;
        let clock_mhz =
            optional(device.max_clock_info(Clock::Graphics)).map_err(call_failed("nvmlDeviceGetMaxClockInfo", at))?;
        // Boards without ECC answer NotSupported: that is "no ECC", not a failure.
        let ecc = optional(device.is_ecc_enabled())
            .map_err(call_failed("nvmlDeviceGetEccMode", at))?
            .is_some_and(|state| state.currently_enabled);
        let numa_node = optional(device.numa_node_id()).map_err(call_failed("nvmlDeviceGetNumaNodeId", at))?;
        let numa_node = match numa_node {
            Some(node) => node,
            None => sysfs_numa_node(&pci_bus_id).unwrap_or(0),
        };
        let minor = device.minor_number().map_err(call_failed("nvmlDeviceGetMinorNumber", at))?;
        let cores_per_mp = cores_per_multiprocessor(compute_capability);
        let multiprocessors = match (cores, cores_per_mp) {
            (Some(c), Some(per)) if per > 0 => Some(c / per),
            _ => None,
        };
        let whole = Device {
            cder_type: cder.name().to_string(),
            vendor: cder.vendor.published_name().to_string(),
            index,
            uuid,
            pci_bus_id,
            attributes: DeviceAttributes {
                model,
                memory_mib,
                compute_capability: Some(compute_capability),
                architecture: None,
                multiprocessors,
                cores_per_mp,
                cores,
                clock_mhz,
                ecc,
            },
            path: cder.device_path.replace("{index}", &index.to_string()).replace("{minor}", &minor.to_string()).into(),
            dev: gpu_major.map(|major| DeviceNumber { major, minor }),
            numa_node,
            health: Health::Healthy,
        };
        if cder.mig == MigOffer::Instances && mig_enabled(&device).map_err(call_failed("nvmlDeviceGetMigMode", at))? {
            let slots = device.mig_device_count().map_err(call_failed("nvmlDeviceGetMaxMigDeviceCount", at))?;
            for slot in 0..slots {
                let instance = match device.mig_device_by_index(slot) {
                    Ok(instance) => instance,
                    // An empty slot: fewer instances exist than the GPU could hold.
                    Err(NvmlError::NotFound) => continue,
                    Err(e) => return Err(call_failed("nvmlDeviceGetMigDeviceHandleByIndex", at)(e)),
                };
                let uuid = instance.uuid().map_err(call_failed("nvmlDeviceGetUUID", at))?;
                let model = instance.name().map_err(call_failed("nvmlDeviceGetName", at))?;
                let memory_mib = instance.memory_info().map_err(call_failed("nvmlDeviceGetMemoryInfo_v2", at))?.total
                    / (1024 * 1024);
                let multiprocessors = optional(instance.attributes())
                    .map_err(call_failed("nvmlDeviceGetAttributes_v2", at))?
                    .map(|a| a.multiprocessor_count);
                let cores = match (multiprocessors, whole.attributes.cores_per_mp) {
                    (Some(mp), Some(per)) => Some(mp * per),
                    _ => None,
                };
                let (gi, ci) =
                    crate::sys::mig_instance_ids(&instance).map_err(call_failed("nvmlDeviceGetGpuInstanceId", at))?;
                let cap = mig_access_minor(cder, minor, gi, ci, &uuid)?;
                let path = cder.mig_device_path.replace("{cap}", &cap.to_string()).into();
                let dev = caps_major.map(|major| DeviceNumber { major, minor: cap });
                let attributes =
                    DeviceAttributes { model, memory_mib, multiprocessors, cores, ..whole.attributes.clone() };
                devices.push(Device { index: 0, uuid, attributes, path, dev, ..whole.clone() });
            }
        } else {
            devices.push(whole);
        }
    }
    if cder.mig == MigOffer::Instances {
        for (index, device) in devices.iter_mut().enumerate() {
            device.index = index as u32;
        }
    }
    Ok(devices)
}

/// The minor of the device file that grants a MIG instance, from the
/// driver's `gpu<minor>/mig/gi<G>/ci<C>/access` (`DeviceFileMinor: N`).
fn mig_access_minor(cder: &CderType, gpu_minor: u32, gi: u32, ci: u32, uuid: &str) -> Result<u32, InventoryError> {
    let path = cder.mig_capabilities.join(format!("gpu{gpu_minor}/mig/gi{gi}/ci{ci}/access"));
    let failed = |reason: String| InventoryError::MigAccess {
        cder_type: cder.name().to_string(),
        uuid: uuid.to_string(),
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| failed(e.to_string()))?;
    text.lines()
        .find_map(|line| line.strip_prefix("DeviceFileMinor:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| failed("no \"DeviceFileMinor: N\" line".to_string()))
}

/// The major of the character-device driver `name` in `/proc/devices`'s
/// text (its "Character devices:" section, `<major> <name>` lines).
pub fn char_major(proc_devices: &str, name: &str) -> Option<u32> {
    cder_model::shared::char_major(proc_devices, name)
}

/// Whether a GPU is in MIG mode now; a GPU without MIG support is not.
fn mig_enabled(device: &nvml_wrapper::Device<'_>) -> Result<bool, NvmlError> {
    Ok(optional(device.mig_mode())?.is_some_and(|mode| mode.current == NVML_DEVICE_MIG_ENABLE))
}

/// nvml.h's `NVML_DEVICE_MIG_ENABLE` (nvml-wrapper does not re-export it).
const NVML_DEVICE_MIG_ENABLE: u32 = 1;

/// Turns "this board does not support the query" into `None`; other errors stay errors.
fn optional<T>(result: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported | NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The NUMA node the kernel reports for a PCI device, for drivers whose NVML
/// predates `nvmlDeviceGetNumaNodeId`. `-1` (no NUMA) reads as node 0.
fn sysfs_numa_node(pci_bus_id: &str) -> Option<u32> {
    // NVML writes an 8-digit PCI domain; sysfs uses 4.
    let id = pci_bus_id.to_ascii_lowercase();
    let short = id.strip_prefix("0000").filter(|rest| rest.len() == 8).unwrap_or(&id);
    let text = std::fs::read_to_string(format!("/sys/bus/pci/devices/{short}/numa_node")).ok()?;
    let node: i64 = text.trim().parse().ok()?;
    Some(node.max(0) as u32)
}

/// CUDA cores per multiprocessor by architecture, as the CUDA samples'
/// `_ConvertSMVer2Cores` table has it (NVML reports cores, not MPs).
pub fn cores_per_multiprocessor(cc: ComputeCapability) -> Option<u32> {
    Some(match (cc.major, cc.minor) {
        (1, _) => 8,
        (2, 0) => 32,
        (2, _) => 48,
        (3, _) => 192,
        (5, _) => 128,
        (6, 0) => 64,
        (6, _) => 128,
        (7, _) => 64,
        (8, 0) => 64,
        (8, _) => 128,
        (9, _) | (10, _) | (12, _) => 128,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_majors_come_from_the_character_section_only() {
        let text = "Character devices:\n  1 mem\n195 nvidia-frontend\n195 nvidia\n237 nvidia-caps\n508 nvidia-uvm\n\nBlock devices:\n  8 sd\n240 nvidia-caps\n";
        assert_eq!(char_major(text, "nvidia-frontend"), Some(195));
        assert_eq!(char_major(text, "nvidia-caps"), Some(237));
        assert_eq!(char_major(text, "mem"), Some(1));
        assert_eq!(char_major(text, "sd"), None);
        assert_eq!(char_major("", "nvidia"), None);
    }

    #[test]
    fn cores_per_mp_follows_the_cuda_table() {
        let cc = |major, minor| ComputeCapability { major, minor };
        assert_eq!(cores_per_multiprocessor(cc(2, 1)), Some(48)); // GTS 450, the thesis's card
        assert_eq!(cores_per_multiprocessor(cc(3, 5)), Some(192));
        assert_eq!(cores_per_multiprocessor(cc(8, 0)), Some(64));
        assert_eq!(cores_per_multiprocessor(cc(8, 6)), Some(128));
        assert_eq!(cores_per_multiprocessor(cc(4, 0)), None);
    }
}
