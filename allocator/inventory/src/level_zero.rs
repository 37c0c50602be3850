//! Discovery of Intel GPUs through the Level Zero loader, health and use
//! through its Sysman API.
//!
//! The loader is `libze_loader.so.1` unless the type names another
//! (`level_zero_library`; the tests name the fake loader built in this
//! workspace). It is opened at run time and kept for the life of the
//! process: Intel's driver initialises once per process and cannot be
//! unloaded and started again.
//!
//! What a device becomes:
//! - `uuid`: `GPU-` and the 16 bytes of `ze_device_properties_t.uuid` in
//!   order, as lowercase hex grouped 8-4-4-4-12 (the shape NVIDIA's have);
//!   a tile's is its own sub-device UUID in the same form. With
//!   `tiles = "tiles"` every UUID of the type ends in the `ZE_AFFINITY_MASK`
//!   entry that selects the device (`GPU-…@0.1`: tile 1 of GPU 0; `@1`: GPU
//!   1 whole), which the job environment writes.
//! - `model`: the device name; `memory_mib`: the sum of its memory regions.
//! - `multiprocessors`: Xe-cores (sub-slices), `cores_per_mp`: EUs per
//!   Xe-core, `cores`: EUs, `clock_mhz`: the core clock.
//! - `architecture`: from the PCI device id ([`architecture`]); the 1.8.12
//!   headers (API 1.4) have no IP-version query.
//! - `path`/`dev`: the DRM render node the kernel lists under
//!   `<sysfs_root>/bus/pci/devices/<bdf>/drm/renderD<minor>`, written with
//!   `render_node_path`, and `226:<minor>`; `numa_node` from that
//!   directory's `numa_node` (-1 or missing: 0).
//! - With `tiles = "tiles"`, a GPU with sub-devices is offered as its tiles
//!   (each with the parent's render node, bus and NUMA node), and indices
//!   number the type's devices in that order, as MIG instances do.
//!
//! Sysman: Intel's driver serves `zes*` calls on `ze` handles only when
//! `ZES_ENABLE_SYSMAN=1` was in the process's environment at its first
//! `zeInit` (API 1.4 has no `zesInit`). cder does not set it: changing the
//! environment of a running multi-threaded daemon races with every other
//! thread's `getenv`. cderd's systemd unit sets it; without it, [`read`]
//! answers [`InventoryError::LevelZeroSysmanOff`], naming the variable.

use std::collections::HashMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cder_level_zero_sys as ze;
use cder_model::{CderType, Device, DeviceAttributes, DeviceNumber, Health, TileOffer};

use crate::{DeviceReading, InventoryError};

/// The loader's library name, as the dynamic loader finds it.
pub const LOADER_LIBRARY: &str = "libze_loader.so.1";

/// The DRM subsystem's character-device major: render nodes are `226:<minor>`.
pub const DRM_MAJOR: u32 = 226;

/// Time between the two engine-activity samples of one reading.
const ACTIVITY_GAP: Duration = Duration::from_millis(100);

/// Discovers every GPU the loader reports for this type.
pub fn discover(cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    let session = Session::open(cder)?;
    let remembered = session.remembered();
    let mut devices = Vec::new();
    let mut known = Vec::new();
    for (index, root) in session.root_devices()?.into_iter().enumerate() {
        let seen = remembered.get(index).cloned().unwrap_or_default();
        let index = index as u32;
        let props = match session.properties(root, index) {
            Err(Lost) => {
                tracing::error!(
                    cder_type = cder.name(),
                    index,
                    "Level Zero: GPU {index} is lost; left out of the inventory"
                );
                // Still read as lost under the UUIDs it had, until it returns.
                known.push(seen);
                continue;
            }
            Ok(p) => p?,
        };
        if props.type_ != ze::ZE_DEVICE_TYPE_GPU {
            tracing::debug!(cder_type = cder.name(), index, "Level Zero: device {index} is not a GPU; skipped");
            known.push(Vec::new());
            continue;
        }
        let uuid = uuid_text(&props.uuid.id);
        let at = format!(" on device {index} ({uuid})");
        let bdf = session.pci_bus_id(root, &at)?;
        let (path, dev, numa_node) = render_node(cder, &format!("{index} ({uuid}) at {bdf}"), &bdf)?;
        let xe_cores = props.numSlices * props.numSubslicesPerSlice;
        let whole = Device {
            cder_type: cder.name().to_string(),
            vendor: cder.vendor.published_name().to_string(),
            index,
            uuid: uuid.clone(),
            pci_bus_id: bdf,
            attributes: DeviceAttributes {
                model: c_text(&props.name),
                memory_mib: session.memory_mib(root, &at)?,
                compute_capability: None,
                architecture: architecture(props.deviceId).map(str::to_string),
                multiprocessors: nonzero(xe_cores),
                cores_per_mp: nonzero(props.numEUsPerSubslice),
                cores: nonzero(xe_cores * props.numEUsPerSubslice),
                clock_mhz: nonzero(props.coreClockRate),
                ecc: props.flags & ze::ZE_DEVICE_PROPERTY_FLAG_ECC != 0,
            },
            path,
            dev,
            numa_node,
            health: Health::Healthy,
        };
        let tiles = match cder.tiles {
            TileOffer::Tiles => session.sub_devices(root, &at)?,
            TileOffer::Whole => Vec::new(),
        };
        if tiles.is_empty() {
            let uuid = offered_uuid(cder, &uuid, index, None);
            known.push(vec![uuid.clone()]);
            devices.push(Device { uuid, ..whole });
            continue;
        }
        let mut uuids = Vec::new();
        for (t, tile) in tiles.into_iter().enumerate() {
            let at = format!(" on tile {t} of device {index} ({uuid})");
            let tp = session
                .properties(tile, index)
                .map_err(|Lost| session.failed("zeDeviceGetProperties", &at, ze::ZE_RESULT_ERROR_DEVICE_LOST))??;
            let memory_mib = session.memory_mib(tile, &at)?;
            let uuid = offered_uuid(cder, &uuid_text(&tp.uuid.id), index, Some(t as u32));
            let tile_cores = tp.numSlices * tp.numSubslicesPerSlice;
            let attributes = DeviceAttributes {
                model: format!("{} (tile {t})", whole.attributes.model),
                memory_mib,
                multiprocessors: nonzero(tile_cores),
                cores: nonzero(tile_cores * tp.numEUsPerSubslice),
                ..whole.attributes.clone()
            };
            uuids.push(uuid.clone());
            devices.push(Device { uuid, attributes, ..whole.clone() });
        }
        known.push(uuids);
    }
    if cder.tiles == TileOffer::Tiles {
        for (index, device) in devices.iter_mut().enumerate() {
            device.index = index as u32;
        }
    }
    session.remember(known);
    Ok(devices)
}

/// Reads health and use of every device the loader reports, as discovery
/// offers them (whole GPUs, or tiles with `tiles = "tiles"`). A GPU that
/// is lost is read as a fault under the UUID it had when last seen.
pub fn read(cder: &CderType) -> Result<Vec<DeviceReading>, InventoryError> {
    let session = Session::open(cder)?;
    let remembered = session.remembered();
    let mut targets = Vec::new();
    let mut known = Vec::new();
    for (index, root) in session.root_devices()?.into_iter().enumerate() {
        let props = match session.properties(root, index as u32) {
            Err(Lost) => {
                let uuids = remembered.get(index).cloned().unwrap_or_default();
                if uuids.is_empty() {
                    tracing::error!(
                        cder_type = cder.name(),
                        index,
                        "Level Zero: GPU {index} is lost and was not seen before"
                    );
                }
                for uuid in &uuids {
                    targets.push(Target::lost(uuid));
                }
                known.push(uuids);
                continue;
            }
            Ok(p) => p?,
        };
        if props.type_ != ze::ZE_DEVICE_TYPE_GPU {
            known.push(Vec::new());
            continue;
        }
        let uuid = uuid_text(&props.uuid.id);
        let at = format!(" on device {index} ({uuid})");
        let tiles = match cder.tiles {
            TileOffer::Tiles => session.sub_devices(root, &at)?,
            TileOffer::Whole => Vec::new(),
        };
        let mut uuids = Vec::new();
        if tiles.is_empty() {
            let uuid = offered_uuid(cder, &uuid, index as u32, None);
            targets.push(session.read_target(root, None, &uuid, &at)?);
            uuids.push(uuid);
        } else {
            for (t, tile) in tiles.into_iter().enumerate() {
                let tile_at = format!(" on tile {t} of device {index} ({uuid})");
                let tp = session.properties(tile, index as u32).map_err(|Lost| {
                    session.failed("zeDeviceGetProperties", &tile_at, ze::ZE_RESULT_ERROR_DEVICE_LOST)
                })??;
                let tile_uuid = offered_uuid(cder, &uuid_text(&tp.uuid.id), index as u32, Some(t as u32));
                targets.push(session.read_target(root, Some(t as u32), &tile_uuid, &at)?);
                uuids.push(tile_uuid);
            }
        }
        known.push(uuids);
    }
    session.remember(known);
    // One pause for all devices: two activity samples each, a moment apart.
    if targets.iter().any(|t| !t.engines.is_empty()) {
        std::thread::sleep(ACTIVITY_GAP);
    }
    let mut readings = Vec::with_capacity(targets.len());
    for target in targets {
        let mut busy = Vec::new();
        for (engine, first) in &target.engines {
            if let Some(second) = session.activity(*engine, &target.at)? {
                let (active, time) = (
                    second.activeTime.saturating_sub(first.activeTime),
                    second.timestamp.saturating_sub(first.timestamp),
                );
                if time > 0 {
                    busy.push((active as f64 / time as f64 * 100.0).clamp(0.0, 100.0));
                }
            }
        }
        let utilisation_percent =
            (!busy.is_empty()).then(|| (busy.iter().sum::<f64>() / busy.len() as f64).round() as u32);
        readings.push(DeviceReading {
            uuid: target.uuid,
            fault: target.fault,
            uncorrected_errors: target.uncorrected_errors,
            utilisation_percent,
            memory_used_mib: target.memory_used_mib,
        });
    }
    Ok(readings)
}

/// The architecture of an Intel GPU by PCI device id, as Intel's compute
/// runtime's device tables group them; `None` for ids not listed here.
pub fn architecture(device_id: u32) -> Option<&'static str> {
    Some(match device_id {
        // Ponte Vecchio: Data Center GPU Max 1100/1350/1550.
        0x0bd0..=0x0bdb | 0x0b69 | 0x0b6e => "Xe-HPC",
        // Alchemist (Arc A-series) and Arctic Sound-M (Data Center GPU Flex).
        0x5690..=0x56c2 => "Xe-HPG",
        // Battlemage (Arc B-series).
        0xe202..=0xe212 => "Xe2-HPG",
        // Meteor Lake and Arrow Lake integrated GPUs.
        0x7d40..=0x7d67 => "Xe-LPG",
        // Lunar Lake integrated GPUs.
        0x6420 | 0x64a0 | 0x64b0 => "Xe2-LPG",
        // Tiger Lake, Rocket Lake, Alder Lake, Raptor Lake integrated; DG1.
        0x9a40..=0x9a7f | 0x4c8a..=0x4c9a | 0x4680..=0x46d4 | 0xa780..=0xa7ad | 0x4905..=0x4909 => "Xe-LP",
        _ => return None,
    })
}

/// `GPU-` and 16 bytes as 8-4-4-4-12 lowercase hex.
pub fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// The UUID a device is offered under. With `tiles = "tiles"` it ends in
/// the `ZE_AFFINITY_MASK` entry that selects it (`@0.1`, `@2`; see
/// [`cder_model::ze_affinity`]): once tiles are devices, the type's indices
/// no longer match the loader's GPU numbers, and the environment needs both.
fn offered_uuid(cder: &CderType, uuid: &str, gpu: u32, tile: Option<u32>) -> String {
    match (cder.tiles, tile) {
        (TileOffer::Whole, _) => uuid.to_string(),
        (TileOffer::Tiles, None) => format!("{uuid}@{gpu}"),
        (TileOffer::Tiles, Some(t)) => format!("{uuid}@{gpu}.{t}"),
    }
}

/// The name of a `ze_result_t`, as ze_api.h spells it.
pub fn result_name(result: ze::ze_result_t) -> String {
    let name = match result {
        ze::ZE_RESULT_SUCCESS => "ZE_RESULT_SUCCESS",
        ze::ZE_RESULT_NOT_READY => "ZE_RESULT_NOT_READY",
        ze::ZE_RESULT_ERROR_DEVICE_LOST => "ZE_RESULT_ERROR_DEVICE_LOST",
        ze::ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY => "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY",
        ze::ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY => "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY",
        ze::ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET => "ZE_RESULT_ERROR_DEVICE_REQUIRES_RESET",
        ze::ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE => "ZE_RESULT_ERROR_DEVICE_IN_LOW_POWER_STATE",
        ze::ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS => "ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS",
        ze::ZE_RESULT_ERROR_NOT_AVAILABLE => "ZE_RESULT_ERROR_NOT_AVAILABLE",
        ze::ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE => "ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE",
        ze::ZE_RESULT_ERROR_UNINITIALIZED => "ZE_RESULT_ERROR_UNINITIALIZED",
        ze::ZE_RESULT_ERROR_UNSUPPORTED_VERSION => "ZE_RESULT_ERROR_UNSUPPORTED_VERSION",
        ze::ZE_RESULT_ERROR_UNSUPPORTED_FEATURE => "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE",
        ze::ZE_RESULT_ERROR_INVALID_ARGUMENT => "ZE_RESULT_ERROR_INVALID_ARGUMENT",
        ze::ZE_RESULT_ERROR_INVALID_NULL_HANDLE => "ZE_RESULT_ERROR_INVALID_NULL_HANDLE",
        ze::ZE_RESULT_ERROR_INVALID_NULL_POINTER => "ZE_RESULT_ERROR_INVALID_NULL_POINTER",
        ze::ZE_RESULT_ERROR_INVALID_SIZE => "ZE_RESULT_ERROR_INVALID_SIZE",
        ze::ZE_RESULT_ERROR_INVALID_ENUMERATION => "ZE_RESULT_ERROR_INVALID_ENUMERATION",
        ze::ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION => "ZE_RESULT_ERROR_UNSUPPORTED_ENUMERATION",
        ze::ZE_RESULT_ERROR_UNKNOWN => "ZE_RESULT_ERROR_UNKNOWN",
        other => return format!("ze_result_t {other:#x}"),
    };
    name.to_string()
}

/// A device answered `ZE_RESULT_ERROR_DEVICE_LOST`.
struct Lost;

/// What one reading knows before its second activity sample.
struct Target {
    uuid: String,
    at: String,
    fault: Option<String>,
    uncorrected_errors: Option<u64>,
    memory_used_mib: Option<u64>,
    engines: Vec<(ze::zes_engine_handle_t, ze::zes_engine_stats_t)>,
}

impl Target {
    fn lost(uuid: &str) -> Target {
        Target {
            uuid: uuid.to_string(),
            at: String::new(),
            fault: Some("lost (ZE_RESULT_ERROR_DEVICE_LOST): fell off the bus or needs a reset".into()),
            uncorrected_errors: None,
            memory_used_mib: None,
            engines: Vec::new(),
        }
    }
}

/// The loaders opened by this process, by the name they were opened with,
/// and the UUIDs each last offered at each root index (for a GPU later
/// lost), whole (`[0]`) and by tiles (`[1]`).
struct Loaded {
    loader: &'static ze::ZeLoader,
    seen: [Vec<Vec<String>>; 2],
}

fn loaders() -> &'static Mutex<HashMap<PathBuf, Loaded>> {
    static LOADERS: OnceLock<Mutex<HashMap<PathBuf, Loaded>>> = OnceLock::new();
    LOADERS.get_or_init(Default::default)
}

/// One use of the loader for one type.
struct Session<'a> {
    cder: &'a CderType,
    library: PathBuf,
    lib: &'static ze::ZeLoader,
}

impl<'a> Session<'a> {
    /// Opens (once per process) and initialises the type's loader.
    fn open(cder: &'a CderType) -> Result<Session<'a>, InventoryError> {
        let library = cder.level_zero_library.clone().unwrap_or_else(|| PathBuf::from(LOADER_LIBRARY));
        let lib = {
            let mut map = loaders().lock().unwrap_or_else(|e| e.into_inner());
            match map.get(&library) {
                Some(l) => l.loader,
                None => {
                    // SAFETY: opening the loader runs its initialisers, which
                    // is what every Level Zero program does; the symbols are
                    // looked up with ze_api.h's signatures, which bindgen
                    // generated from the same headers the loader implements.
                    let loaded = unsafe { ze::ZeLoader::new(&library) }.map_err(|e| InventoryError::LevelZeroLoad {
                        cder_type: cder.name().to_string(),
                        library: library.display().to_string(),
                        reason: e.to_string(),
                    })?;
                    // Kept for the process's life: the driver cannot be unloaded and started again.
                    let loader: &'static ze::ZeLoader = Box::leak(Box::new(loaded));
                    map.insert(library.clone(), Loaded { loader, seen: Default::default() });
                    loader
                }
            }
        };
        let session = Session { cder, library, lib };
        let init = session.symbol(&lib.zeInit, "zeInit")?;
        // SAFETY: zeInit takes flags by value; repeated calls are allowed.
        let result = unsafe { init(ze::ZE_INIT_FLAG_GPU_ONLY) };
        match result {
            ze::ZE_RESULT_SUCCESS => Ok(session),
            ze::ZE_RESULT_ERROR_UNINITIALIZED => Err(session.no_driver("zeInit", result_name(result))),
            other => Err(session.failed("zeInit", "", other)),
        }
    }

    fn by_tiles(&self) -> usize {
        usize::from(self.cder.tiles == TileOffer::Tiles)
    }

    fn library_name(&self) -> String {
        self.library.display().to_string()
    }

    fn failed(&self, call: &'static str, at: &str, result: ze::ze_result_t) -> InventoryError {
        InventoryError::LevelZeroCall {
            cder_type: self.cder.name().to_string(),
            library: self.library_name(),
            call,
            device: at.to_string(),
            result: result_name(result),
        }
    }

    fn no_driver(&self, call: &'static str, result: String) -> InventoryError {
        InventoryError::LevelZeroNoDriver {
            cder_type: self.cder.name().to_string(),
            library: self.library_name(),
            call,
            result,
        }
    }

    fn symbol<T: Copy>(&self, f: &Result<T, libloading::Error>, call: &str) -> Result<T, InventoryError> {
        f.as_ref().copied().map_err(|e| InventoryError::LevelZeroLoad {
            cder_type: self.cder.name().to_string(),
            library: self.library_name(),
            reason: format!("no {call}: {e}"),
        })
    }

    /// A Sysman function, or `None` where the loader predates it.
    fn sysman<T: Copy>(&self, f: &Result<T, libloading::Error>) -> Option<T> {
        f.as_ref().copied().ok()
    }

    /// Sysman's answer: `Some(())` on success, `None` where the driver does
    /// not offer it, an error otherwise (Sysman off named as such).
    fn sysman_result(
        &self,
        call: &'static str,
        at: &str,
        result: ze::ze_result_t,
    ) -> Result<Option<()>, InventoryError> {
        match result {
            ze::ZE_RESULT_SUCCESS => Ok(Some(())),
            ze::ZE_RESULT_ERROR_UNSUPPORTED_FEATURE => Ok(None),
            ze::ZE_RESULT_ERROR_UNINITIALIZED => Err(InventoryError::LevelZeroSysmanOff {
                cder_type: self.cder.name().to_string(),
                library: self.library_name(),
                call,
                result: result_name(result),
            }),
            other => Err(self.failed(call, at, other)),
        }
    }

    fn remember(&self, seen: Vec<Vec<String>>) {
        if let Some(l) = loaders().lock().unwrap_or_else(|e| e.into_inner()).get_mut(&self.library) {
            l.seen[self.by_tiles()] = seen;
        }
    }

    fn remembered(&self) -> Vec<Vec<String>> {
        loaders()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&self.library)
            .map(|l| l.seen[self.by_tiles()].clone())
            .unwrap_or_default()
    }

    /// Every driver's root devices, in the loader's order.
    fn root_devices(&self) -> Result<Vec<ze::ze_device_handle_t>, InventoryError> {
        let driver_get = self.symbol(&self.lib.zeDriverGet, "zeDriverGet")?;
        let device_get = self.symbol(&self.lib.zeDeviceGet, "zeDeviceGet")?;
        // SAFETY: count-then-fill with a count and a buffer of that many handles.
        let drivers =
            enumerate(|count, out| unsafe { driver_get(count, out) }).map_err(|r| self.failed("zeDriverGet", "", r))?;
        if drivers.is_empty() {
            return Err(self.no_driver("zeDriverGet", "no driver".into()));
        }
        let mut devices = Vec::new();
        for driver in drivers {
            // SAFETY: as above; the driver handle came from zeDriverGet.
            devices.extend(
                enumerate(|count, out| unsafe { device_get(driver, count, out) })
                    .map_err(|r| self.failed("zeDeviceGet", "", r))?,
            );
        }
        Ok(devices)
    }

    /// `zeDeviceGetProperties`; a lost device is `Err(Lost)`.
    fn properties(
        &self,
        device: ze::ze_device_handle_t,
        index: u32,
    ) -> Result<Result<ze::ze_device_properties_t, InventoryError>, Lost> {
        let get = match self.symbol(&self.lib.zeDeviceGetProperties, "zeDeviceGetProperties") {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        // SAFETY: ze_device_properties_t is plain data (integers, arrays, a
        // null pNext), valid all-zero; stype says which struct it is.
        let mut props: ze::ze_device_properties_t = unsafe { std::mem::zeroed() };
        props.stype = ze::ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
        // SAFETY: the handle came from the loader; props is a valid, writable struct.
        match unsafe { get(device, &mut props) } {
            ze::ZE_RESULT_SUCCESS => Ok(Ok(props)),
            ze::ZE_RESULT_ERROR_DEVICE_LOST => Err(Lost),
            other => Ok(Err(self.failed("zeDeviceGetProperties", &format!(" on device {index}"), other))),
        }
    }

    fn sub_devices(
        &self,
        device: ze::ze_device_handle_t,
        at: &str,
    ) -> Result<Vec<ze::ze_device_handle_t>, InventoryError> {
        let get = self.symbol(&self.lib.zeDeviceGetSubDevices, "zeDeviceGetSubDevices")?;
        // SAFETY: count-then-fill on a handle from the loader.
        enumerate(|count, out| unsafe { get(device, count, out) })
            .map_err(|r| self.failed("zeDeviceGetSubDevices", at, r))
    }

    fn memory_mib(&self, device: ze::ze_device_handle_t, at: &str) -> Result<u64, InventoryError> {
        let get = self.symbol(&self.lib.zeDeviceGetMemoryProperties, "zeDeviceGetMemoryProperties")?;
        let call = "zeDeviceGetMemoryProperties";
        let mut count = 0u32;
        // SAFETY: a null array with count 0 asks for the count.
        let r = unsafe { get(device, &mut count, std::ptr::null_mut()) };
        if r != ze::ZE_RESULT_SUCCESS {
            return Err(self.failed(call, at, r));
        }
        let regions: Vec<ze::ze_device_memory_properties_t> = (0..count)
            .map(|_| {
                // SAFETY: plain data, valid all-zero (null pNext).
                let mut p: ze::ze_device_memory_properties_t = unsafe { std::mem::zeroed() };
                p.stype = ze::ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
                p
            })
            .collect();
        let mut regions = regions;
        // SAFETY: `count` structs, each with its stype set, as the API requires.
        let r = unsafe { get(device, &mut count, regions.as_mut_ptr()) };
        if r != ze::ZE_RESULT_SUCCESS {
            return Err(self.failed(call, at, r));
        }
        let bytes: u64 = regions.iter().take(count as usize).map(|p| p.totalSize).sum();
        Ok(bytes / (1024 * 1024))
    }

    /// The PCI address, `dddd:bb:dd.f` as sysfs names it.
    fn pci_bus_id(&self, device: ze::ze_device_handle_t, at: &str) -> Result<String, InventoryError> {
        let get = self.symbol(&self.lib.zeDevicePciGetPropertiesExt, "zeDevicePciGetPropertiesExt")?;
        // SAFETY: plain data, valid all-zero (null pNext).
        let mut p: ze::ze_pci_ext_properties_t = unsafe { std::mem::zeroed() };
        p.stype = ze::ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES;
        // SAFETY: a handle from the loader and a valid, writable struct.
        let r = unsafe { get(device, &mut p) };
        if r != ze::ZE_RESULT_SUCCESS {
            return Err(self.failed("zeDevicePciGetPropertiesExt", at, r));
        }
        let a = p.address;
        Ok(format!("{:04x}:{:02x}:{:02x}.{:x}", a.domain, a.bus, a.device, a.function))
    }

    /// Everything of one reading but its second activity sample.
    fn read_target(
        &self,
        root: ze::ze_device_handle_t,
        tile: Option<u32>,
        uuid: &str,
        at: &str,
    ) -> Result<Target, InventoryError> {
        let mut target = Target {
            uuid: uuid.to_string(),
            at: at.to_string(),
            fault: None,
            uncorrected_errors: None,
            memory_used_mib: None,
            engines: Vec::new(),
        };
        // Whether a handle that is on `sub` (a tile, or the whole device)
        // belongs to this reading: a tile reads its own and device-wide ones.
        let mine = |on_sub: bool, sub: u32| match tile {
            None => true,
            Some(t) => !on_sub || sub == t,
        };

        if let Some(get_state) = self.sysman(&self.lib.zesDeviceGetState) {
            // SAFETY: plain data, valid all-zero (null pNext).
            let mut state: ze::zes_device_state_t = unsafe { std::mem::zeroed() };
            state.stype = ze::ZES_STRUCTURE_TYPE_DEVICE_STATE;
            // SAFETY: a Sysman-enabled device handle and a valid struct.
            let r = unsafe { get_state(root, &mut state) };
            if r == ze::ZE_RESULT_ERROR_DEVICE_LOST {
                return Ok(Target { at: at.to_string(), ..Target::lost(uuid) });
            }
            if self.sysman_result("zesDeviceGetState", at, r)?.is_some() {
                if state.reset & ze::ZES_RESET_REASON_FLAG_WEDGED != 0 {
                    target.fault = Some("needs a reset: the driver reports it wedged".into());
                } else if state.reset & ze::ZES_RESET_REASON_FLAG_REPAIR != 0 {
                    target.fault = Some("needs a repair: the driver reports a hardware fault".into());
                }
            }
        }

        // Memory modules: health and use.
        if let (Some(enum_mem), Some(mem_props), Some(mem_state)) = (
            self.sysman(&self.lib.zesDeviceEnumMemoryModules),
            self.sysman(&self.lib.zesMemoryGetProperties),
            self.sysman(&self.lib.zesMemoryGetState),
        ) {
            // SAFETY: count-then-fill on a Sysman-enabled handle.
            let modules = self.sysman_list("zesDeviceEnumMemoryModules", at, |c, o| unsafe { enum_mem(root, c, o) })?;
            let mut used = None;
            for module in modules.unwrap_or_default() {
                // SAFETY: plain data, valid all-zero (null pNext).
                let mut p: ze::zes_mem_properties_t = unsafe { std::mem::zeroed() };
                p.stype = ze::ZES_STRUCTURE_TYPE_MEM_PROPERTIES;
                // SAFETY: a module handle from the driver and a valid struct.
                if self.sysman_result("zesMemoryGetProperties", at, unsafe { mem_props(module, &mut p) })?.is_none()
                    || !mine(p.onSubdevice != 0, p.subdeviceId)
                {
                    continue;
                }
                // SAFETY: as above.
                let mut s: ze::zes_mem_state_t = unsafe { std::mem::zeroed() };
                s.stype = ze::ZES_STRUCTURE_TYPE_MEM_STATE;
                // SAFETY: a module handle from the driver and a valid struct.
                if self.sysman_result("zesMemoryGetState", at, unsafe { mem_state(module, &mut s) })?.is_none() {
                    continue;
                }
                *used.get_or_insert(0) += s.size.saturating_sub(s.free) / (1024 * 1024);
                let health = match s.health {
                    ze::ZES_MEM_HEALTH_CRITICAL => Some("critical"),
                    ze::ZES_MEM_HEALTH_REPLACE => Some("to be replaced"),
                    _ => None,
                };
                if let (Some(h), None) = (health, &target.fault) {
                    target.fault = Some(format!("memory health {h} (zesMemoryGetState)"));
                }
            }
            target.memory_used_mib = used;
        }

        // RAS: uncorrectable errors since the driver loaded.
        if let (Some(enum_ras), Some(ras_props), Some(ras_state)) = (
            self.sysman(&self.lib.zesDeviceEnumRasErrorSets),
            self.sysman(&self.lib.zesRasGetProperties),
            self.sysman(&self.lib.zesRasGetState),
        ) {
            // SAFETY: count-then-fill on a Sysman-enabled handle.
            let sets = self.sysman_list("zesDeviceEnumRasErrorSets", at, |c, o| unsafe { enum_ras(root, c, o) })?;
            for set in sets.unwrap_or_default() {
                // SAFETY: plain data, valid all-zero (null pNext).
                let mut p: ze::zes_ras_properties_t = unsafe { std::mem::zeroed() };
                p.stype = ze::ZES_STRUCTURE_TYPE_RAS_PROPERTIES;
                // SAFETY: a RAS handle from the driver and a valid struct.
                if self.sysman_result("zesRasGetProperties", at, unsafe { ras_props(set, &mut p) })?.is_none()
                    || p.type_ != ze::ZES_RAS_ERROR_TYPE_UNCORRECTABLE
                    || !mine(p.onSubdevice != 0, p.subdeviceId)
                {
                    continue;
                }
                // SAFETY: as above.
                let mut s: ze::zes_ras_state_t = unsafe { std::mem::zeroed() };
                s.stype = ze::ZES_STRUCTURE_TYPE_RAS_STATE;
                // SAFETY: clear = 0 only reads the counters.
                if self.sysman_result("zesRasGetState", at, unsafe { ras_state(set, 0, &mut s) })?.is_none() {
                    continue;
                }
                *target.uncorrected_errors.get_or_insert(0) += s.category.iter().sum::<u64>();
            }
        }

        // Engines: the compute group of this device or tile, first sample.
        if let (Some(enum_eng), Some(eng_props)) =
            (self.sysman(&self.lib.zesDeviceEnumEngineGroups), self.sysman(&self.lib.zesEngineGetProperties))
        {
            // SAFETY: count-then-fill on a Sysman-enabled handle.
            let groups = self.sysman_list("zesDeviceEnumEngineGroups", at, |c, o| unsafe { enum_eng(root, c, o) })?;
            // (handle, on a tile, that tile, kind) of every group.
            let mut all = Vec::new();
            for group in groups.unwrap_or_default() {
                // SAFETY: plain data, valid all-zero (null pNext).
                let mut p: ze::zes_engine_properties_t = unsafe { std::mem::zeroed() };
                p.stype = ze::ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES;
                // SAFETY: an engine handle from the driver and a valid struct.
                if self.sysman_result("zesEngineGetProperties", at, unsafe { eng_props(group, &mut p) })?.is_none() {
                    continue;
                }
                all.push((group, p.onSubdevice != 0, p.subdeviceId, p.type_));
            }
            // A tile reads its own groups; a whole device its device-wide
            // ones, or, where the driver has only per-tile groups (as on
            // GPUs with tiles), every tile's, averaged.
            let scope = |device_wide: bool| -> Vec<_> {
                all.iter()
                    .filter(|(_, on_sub, sub, _)| match tile {
                        Some(t) => *on_sub && *sub == t,
                        None => *on_sub != device_wide,
                    })
                    .collect()
            };
            let mut candidates = scope(true);
            if tile.is_none() && candidates.is_empty() {
                candidates = scope(false);
            }
            // The compute engines, or all engines where no compute group is offered.
            let kind = |k| candidates.iter().filter(|g| g.3 == k).map(|g| g.0).collect::<Vec<_>>();
            let mut compute = kind(ze::ZES_ENGINE_GROUP_COMPUTE_ALL);
            if compute.is_empty() {
                compute = kind(ze::ZES_ENGINE_GROUP_ALL);
            }
            for group in compute {
                if let Some(first) = self.activity(group, at)? {
                    target.engines.push((group, first));
                }
            }
        }
        Ok(target)
    }

    /// Count-then-fill of Sysman handles; `None` where not offered.
    fn sysman_list<T>(
        &self,
        call: &'static str,
        at: &str,
        f: impl Fn(*mut u32, *mut T) -> ze::ze_result_t,
    ) -> Result<Option<Vec<T>>, InventoryError> {
        match enumerate(f) {
            Ok(v) => Ok(Some(v)),
            Err(r) => self.sysman_result(call, at, r).map(|_| None),
        }
    }

    fn activity(
        &self,
        engine: ze::zes_engine_handle_t,
        at: &str,
    ) -> Result<Option<ze::zes_engine_stats_t>, InventoryError> {
        let Some(get) = self.sysman(&self.lib.zesEngineGetActivity) else { return Ok(None) };
        let mut s = ze::zes_engine_stats_t { activeTime: 0, timestamp: 0 };
        // SAFETY: an engine handle from the driver and a valid struct.
        let r = unsafe { get(engine, &mut s) };
        Ok(self.sysman_result("zesEngineGetActivity", at, r)?.map(|()| s))
    }
}

/// Level Zero's count-then-fill: ask how many, then fill that many.
fn enumerate<T>(f: impl Fn(*mut u32, *mut T) -> ze::ze_result_t) -> Result<Vec<T>, ze::ze_result_t> {
    let mut count = 0u32;
    let r = f(&mut count, std::ptr::null_mut());
    if r != ze::ZE_RESULT_SUCCESS {
        return Err(r);
    }
    let mut items = Vec::with_capacity(count as usize);
    if count == 0 {
        return Ok(items);
    }
    let r = f(&mut count, items.as_mut_ptr());
    if r != ze::ZE_RESULT_SUCCESS {
        return Err(r);
    }
    // SAFETY: the call wrote `count` handles (at most the capacity it was given).
    unsafe { items.set_len((count as usize).min(items.capacity())) };
    Ok(items)
}

/// The render node of the PCI device `bdf`: its path (from
/// `render_node_path`), its number, and the device's NUMA node.
fn render_node(
    cder: &CderType,
    device: &str,
    bdf: &str,
) -> Result<(PathBuf, Option<DeviceNumber>, u32), InventoryError> {
    let dir = cder.sysfs_root.join("bus/pci/devices").join(bdf);
    let drm = dir.join("drm");
    let failed = |path: &Path, reason: String| InventoryError::LevelZeroSysfs {
        cder_type: cder.name().to_string(),
        device: device.to_string(),
        path: path.display().to_string(),
        reason,
    };
    let entries = std::fs::read_dir(&drm).map_err(|e| failed(&drm, e.to_string()))?;
    let minor = entries
        .filter_map(|e| e.ok())
        .find_map(|e| {
            e.file_name().to_str().and_then(|n| n.strip_prefix("renderD")).and_then(|m| m.parse::<u32>().ok())
        })
        .ok_or_else(|| failed(&drm, "no renderD<minor> entry: the GPU has no render node".into()))?;
    let numa_node = std::fs::read_to_string(dir.join("numa_node"))
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok())
        .map_or(0, |n| n.max(0) as u32);
    let path = cder.render_node_path.replace("{minor}", &minor.to_string()).into();
    Ok((path, Some(DeviceNumber { major: DRM_MAJOR, minor }), numa_node))
}

fn c_text(chars: &[std::ffi::c_char]) -> String {
    // SAFETY: reinterpreting c_char as u8 of the same length.
    let bytes = unsafe { std::slice::from_raw_parts(chars.as_ptr() as *const u8, chars.len()) };
    CStr::from_bytes_until_nul(bytes).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

fn nonzero(n: u32) -> Option<u32> {
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_gpu_and_16_bytes_in_order() {
        let bytes = [0x86, 0x80, 0xd5, 0x0b, 0, 0, 0, 0, 0, 0, 0x29, 0, 0, 0, 0, 0xff];
        assert_eq!(uuid_text(&bytes), "GPU-8680d50b-0000-0000-0000-2900000000ff");
    }

    #[test]
    fn architecture_by_device_id() {
        assert_eq!(architecture(0x0bd5), Some("Xe-HPC")); // Max 1550
        assert_eq!(architecture(0x56c0), Some("Xe-HPG")); // Flex 170
        assert_eq!(architecture(0x56a0), Some("Xe-HPG")); // Arc A770
        assert_eq!(architecture(0xe20b), Some("Xe2-HPG")); // Arc B580
        assert_eq!(architecture(0x9a49), Some("Xe-LP"));
        assert_eq!(architecture(0x1234), None);
    }

    #[test]
    fn result_names_are_the_headers() {
        assert_eq!(result_name(0x7800_0001), "ZE_RESULT_ERROR_UNINITIALIZED");
        assert_eq!(result_name(ze::ZE_RESULT_ERROR_DEVICE_LOST), "ZE_RESULT_ERROR_DEVICE_LOST");
        assert_eq!(result_name(0x1234), "ze_result_t 0x1234");
    }

    #[test]
    fn enumerate_asks_then_fills() {
        let all = [7usize, 8, 9];
        let got = enumerate(|count: *mut u32, out: *mut usize| {
            // SAFETY: test double of the protocol on valid pointers.
            unsafe {
                if out.is_null() {
                    *count = 3;
                } else {
                    for (i, v) in all.iter().take(*count as usize).enumerate() {
                        *out.add(i) = *v;
                    }
                }
            }
            ze::ZE_RESULT_SUCCESS
        });
        assert_eq!(got, Ok(vec![7, 8, 9]));
        assert_eq!(enumerate(|_, _: *mut usize| ze::ZE_RESULT_ERROR_UNKNOWN), Err(ze::ZE_RESULT_ERROR_UNKNOWN));
    }
}
