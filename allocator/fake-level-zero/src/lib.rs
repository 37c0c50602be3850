//! A fake Level Zero loader for machines without an Intel GPU.
//!
//! Debian's real `libze_loader.so.1` loads here but finds no driver, so this
//! cdylib (built as `libze_loader.so`) exports the `ze*`/`zes*` functions
//! cder calls, with the signatures, struct layouts and result codes of the
//! bindings cder itself uses (`cder-level-zero-sys`), and answers them from
//! a JSON file named by `CDER_FAKE_LEVEL_ZERO` ([`FakeLevelZero`]). cder
//! loads it exactly as it loads the real loader (`level_zero_library`), so
//! discovery's FFI path is what the tests exercise. Without the variable,
//! `zeInit` answers `ZE_RESULT_ERROR_UNINITIALIZED`, as the real loader does
//! on a node without a driver.
//!
//! The file is re-read at every `zeInit` (the real driver initialises once
//! per process; a test process sees several fake machines in turn).
//! Sysman answers only if `ZES_ENABLE_SYSMAN=1` was in the environment at
//! that `zeInit`, as Intel's driver requires; otherwise every `zes*` call
//! answers `ZE_RESULT_ERROR_UNINITIALIZED`.
//!
//! Health while a process runs: `CDER_FAKE_LEVEL_ZERO_CONTROL` names a JSON
//! file ([`FakeControl`]) re-read at every call, whose entries (by device
//! UUID, 32 hex digits) override a device's health and use: lost (every
//! call on it then answers `ZE_RESULT_ERROR_DEVICE_LOST`), reset required,
//! memory health, uncorrectable errors, busy percentage, memory in use.
//!
//! Engine activity: a device's `busy_percent` becomes counters against the
//! fake's monotonic clock (`activeTime = timestamp × busy / 100`), so two
//! samples a moment apart give that percentage back, as a real engine's do.
//!
//! Every exported function catches panics and answers
//! `ZE_RESULT_ERROR_UNKNOWN`: no unwind crosses the C boundary.
#![deny(missing_docs)]
#![allow(non_snake_case)]

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Instant;

use cder_level_zero_sys::*;
use serde::{Deserialize, Serialize};

/// The environment variable naming the machine description.
pub const DESCRIPTION_ENV: &str = "CDER_FAKE_LEVEL_ZERO";
/// The environment variable naming the control file.
pub const CONTROL_ENV: &str = "CDER_FAKE_LEVEL_ZERO_CONTROL";

/// The whole description file.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FakeLevelZero {
    /// The root devices, in the driver's order.
    pub devices: Vec<FakeDevice>,
    /// Functions (by symbol name) that answer `ZE_RESULT_ERROR_UNSUPPORTED_FEATURE`,
    /// as Sysman does for what a device or driver lacks.
    #[serde(default)]
    pub unsupported: Vec<String>,
    /// Functions (by symbol name) that answer `ZE_RESULT_ERROR_UNKNOWN`.
    #[serde(default)]
    pub fail: Vec<String>,
}

/// One root device.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeDevice {
    /// `ze_device_properties_t.name`.
    pub name: String,
    /// `ze_device_properties_t.uuid`: 32 hex digits, bytes in order.
    pub uuid: String,
    /// The PCI device id (`0x0bd5`: Data Center GPU Max 1550).
    pub device_id: u32,
    /// `gpu` (default), `cpu`, `fpga`, `mca` or `vpu`.
    #[serde(default = "gpu")]
    pub device_type: String,
    /// `zeDevicePciGetPropertiesExt`'s address, `0000:29:00.0`.
    pub bdf: String,
    /// Memory regions (`zeDeviceGetMemoryProperties`), MiB each.
    pub memory_mib: Vec<u64>,
    /// Xe-cores (`numSlices` × `numSubslicesPerSlice`, one slice here).
    #[serde(default)]
    pub xe_cores: u32,
    /// EUs per Xe-core (`numEUsPerSubslice`).
    #[serde(default)]
    pub eus_per_xe_core: u32,
    /// `coreClockRate`, MHz.
    #[serde(default)]
    pub clock_mhz: u32,
    /// Tiles (`zeDeviceGetSubDevices`).
    #[serde(default)]
    pub sub_devices: Vec<FakeSubDevice>,
    /// What the device is doing now.
    #[serde(default)]
    pub health: FakeHealth,
}

fn gpu() -> String {
    "gpu".into()
}

/// One tile of a root device.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeSubDevice {
    /// The tile's own UUID, 32 hex digits.
    pub uuid: String,
    /// The tile's memory, MiB.
    pub memory_mib: u64,
    /// The tile's Xe-cores.
    #[serde(default)]
    pub xe_cores: u32,
    /// The tile's compute engines' busy percentage (0-100).
    #[serde(default)]
    pub busy_percent: u32,
    /// The tile's memory in use, MiB.
    #[serde(default)]
    pub memory_used_mib: u64,
}

/// A device's health and use; in the control file every field is an override.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeHealth {
    /// Fallen off the bus: every call on it answers `ZE_RESULT_ERROR_DEVICE_LOST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<bool>,
    /// `zesDeviceGetState` reports `ZES_RESET_REASON_FLAG_WEDGED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_required: Option<bool>,
    /// Memory modules' health: `ok`, `degraded`, `critical`, `replace`, `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_health: Option<String>,
    /// Uncorrectable errors in the RAS set (category compute errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrectable: Option<u64>,
    /// Correctable errors in the RAS set (category cache errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correctable: Option<u64>,
    /// Busy percentage of the whole device's compute engines (0-100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_percent: Option<u32>,
    /// Memory in use on a device without tiles, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<u64>,
}

impl FakeHealth {
    fn overridden_by(&self, o: &FakeHealth) -> FakeHealth {
        FakeHealth {
            lost: o.lost.or(self.lost),
            reset_required: o.reset_required.or(self.reset_required),
            memory_health: o.memory_health.clone().or_else(|| self.memory_health.clone()),
            uncorrectable: o.uncorrectable.or(self.uncorrectable),
            correctable: o.correctable.or(self.correctable),
            busy_percent: o.busy_percent.or(self.busy_percent),
            memory_used_mib: o.memory_used_mib.or(self.memory_used_mib),
        }
    }
}

/// The control file: health overrides by device UUID (32 hex digits).
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeControl {
    /// Overrides, by root device UUID.
    #[serde(default)]
    pub devices: BTreeMap<String, FakeHealth>,
}

impl FakeControl {
    /// Replaces the control file at `path` whole (write, then rename), so a
    /// reader never sees half of it.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(self)?)?;
        std::fs::rename(tmp, path)
    }
}

/// Where cargo put this library (`libze_loader.so`), for tests: beside the
/// test executable or one folder up (`target/debug/deps` → `target/debug`).
pub fn library_path() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(3).map(|dir| dir.join("libze_loader.so")).find(|candidate| candidate.is_file())
}

impl FakeLevelZero {
    /// Writes the description to `path`, for `CDER_FAKE_LEVEL_ZERO`.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, serde_json::to_vec_pretty(self)?)
    }
}

struct Machine {
    description: FakeLevelZero,
    sysman: bool,
}

/// The machine loaded by the last `zeInit`; leaked on purpose, since
/// handles are only numbers into it and a test process inits a few times.
static STATE: RwLock<Option<&'static Machine>> = RwLock::new(None);

fn state() -> Option<&'static Machine> {
    *STATE.read().unwrap_or_else(|e| e.into_inner())
}

fn load() -> Option<FakeLevelZero> {
    let path = std::env::var_os(DESCRIPTION_ENV)?;
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str(&text) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("fake level zero: {}: {e}", std::path::Path::new(&path).display());
            None
        }
    }
}

fn control() -> FakeControl {
    let Some(path) = std::env::var_os(CONTROL_ENV) else { return FakeControl::default() };
    std::fs::read_to_string(path).ok().and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default()
}

/// The device's health now: the description's, overridden by the control file.
fn health(device: &FakeDevice) -> FakeHealth {
    match control().devices.get(&device.uuid.to_ascii_lowercase()) {
        Some(o) => device.health.overridden_by(o),
        None => device.health.clone(),
    }
}

/// Microseconds since the library was first used: the engines' clock.
fn now_us() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64 + 1
}

// Handles are numbers, never null: kind in bits 24.., root device + 1 in
// bits 16..24, tile + 1 in bits 8..16 (0: the root), item in bits 0..8.
const DRIVER: usize = 0xD0;
const KIND_DEVICE: usize = 1;
const KIND_ENGINE: usize = 2;
const KIND_MEMORY: usize = 3;
const KIND_RAS: usize = 4;

fn handle(kind: usize, device: usize, tile: Option<usize>, item: usize) -> usize {
    kind << 24 | (device + 1) << 16 | tile.map_or(0, |t| t + 1) << 8 | item
}

/// What a handle names: `(kind, device, tile, item)`.
fn decode(raw: usize) -> Option<(usize, usize, Option<usize>, usize)> {
    let (kind, device, tile, item) = (raw >> 24, (raw >> 16) & 0xff, (raw >> 8) & 0xff, raw & 0xff);
    Some((kind, device.checked_sub(1)?, tile.checked_sub(1), item))
}

/// A root device and tile by handle of `kind`, checked against the machine.
fn lookup(machine: &'static Machine, raw: usize, kind: usize) -> Option<(&'static FakeDevice, Option<usize>, usize)> {
    let (k, device, tile, item) = decode(raw)?;
    let d = machine.description.devices.get(device)?;
    (k == kind && !matches!(tile, Some(t) if t >= d.sub_devices.len())).then_some((d, tile, item))
}

/// Runs an exported function: catches panics, answers the description's
/// `fail`/`unsupported` lists and the Sysman switch.
fn guard(call: &str, f: impl FnOnce(&'static Machine) -> ze_result_t) -> ze_result_t {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(machine) = state() else { return ZE_RESULT_ERROR_UNINITIALIZED };
        if call.starts_with("zes") && !machine.sysman {
            return ZE_RESULT_ERROR_UNINITIALIZED;
        }
        if machine.description.fail.iter().any(|c| c == call) {
            return ZE_RESULT_ERROR_UNKNOWN;
        }
        if machine.description.unsupported.iter().any(|c| c == call) {
            return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
        }
        f(machine)
    }))
    .unwrap_or(ZE_RESULT_ERROR_UNKNOWN)
}

/// As [`guard`], for a call on one device: a lost device answers DEVICE_LOST.
fn on_device(
    call: &str,
    raw: usize,
    kind: usize,
    f: impl FnOnce(&'static FakeDevice, Option<usize>, usize, FakeHealth) -> ze_result_t,
) -> ze_result_t {
    guard(call, |machine| {
        let Some((device, tile, item)) = lookup(machine, raw, kind) else {
            return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        };
        let health = health(device);
        if health.lost == Some(true) {
            return ZE_RESULT_ERROR_DEVICE_LOST;
        }
        f(device, tile, item, health)
    })
}

/// Level Zero's count-then-fill protocol: `*count == 0` asks how many;
/// otherwise up to `*count` handles are written and `*count` set to those.
///
/// # Safety
/// `count` must be valid; `out`, when `*count > 0`, must hold `*count` handles.
unsafe fn fill<T>(count: *mut u32, out: *mut *mut T, handles: &[usize]) -> ze_result_t {
    if count.is_null() {
        return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
    }
    if *count == 0 || out.is_null() {
        *count = handles.len() as u32;
        return ZE_RESULT_SUCCESS;
    }
    let n = (*count as usize).min(handles.len());
    for (i, h) in handles.iter().take(n).enumerate() {
        *out.add(i) = *h as *mut T;
    }
    *count = n as u32;
    ZE_RESULT_SUCCESS
}

fn uuid_bytes(hex: &str) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = hex.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()).unwrap_or(0);
    }
    bytes
}

fn device_type(name: &str) -> ze_device_type_t {
    match name {
        "cpu" => ZE_DEVICE_TYPE_CPU,
        "fpga" => ZE_DEVICE_TYPE_FPGA,
        "mca" => ZE_DEVICE_TYPE_MCA,
        "vpu" => ZE_DEVICE_TYPE_VPU,
        _ => ZE_DEVICE_TYPE_GPU,
    }
}

fn mem_health(name: Option<&str>) -> zes_mem_health_t {
    match name {
        Some("ok") | None => ZES_MEM_HEALTH_OK,
        Some("degraded") => ZES_MEM_HEALTH_DEGRADED,
        Some("critical") => ZES_MEM_HEALTH_CRITICAL,
        Some("replace") => ZES_MEM_HEALTH_REPLACE,
        Some(_) => ZES_MEM_HEALTH_UNKNOWN,
    }
}

fn copy_name(dst: &mut [std::ffi::c_char], name: &str) {
    let room = dst.len() - 1;
    for (d, s) in dst.iter_mut().zip(name.bytes().take(room).chain(std::iter::once(0))) {
        *d = s as std::ffi::c_char;
    }
}

/// `zeInit`: (re)reads the description; no variable, no driver.
#[no_mangle]
pub extern "C" fn zeInit(flags: ze_init_flags_t) -> ze_result_t {
    std::panic::catch_unwind(|| {
        if flags & !(ZE_INIT_FLAG_GPU_ONLY | ZE_INIT_FLAG_VPU_ONLY) != 0 {
            return ZE_RESULT_ERROR_INVALID_ENUMERATION;
        }
        let sysman = std::env::var("ZES_ENABLE_SYSMAN").is_ok_and(|v| v == "1");
        let machine = load().map(|description| &*Box::leak(Box::new(Machine { description, sysman })));
        *STATE.write().unwrap_or_else(|e| e.into_inner()) = machine;
        if machine.is_some() {
            ZE_RESULT_SUCCESS
        } else {
            ZE_RESULT_ERROR_UNINITIALIZED
        }
    })
    .unwrap_or(ZE_RESULT_ERROR_UNKNOWN)
}

/// `zeDriverGet`: one driver.
///
/// # Safety
/// As Level Zero's: `pCount` valid, `phDrivers` holding `*pCount` handles.
#[no_mangle]
pub unsafe extern "C" fn zeDriverGet(pCount: *mut u32, phDrivers: *mut ze_driver_handle_t) -> ze_result_t {
    guard("zeDriverGet", |_| fill(pCount, phDrivers, &[DRIVER]))
}

/// `zeDeviceGet`: the root devices.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zeDeviceGet(
    hDriver: ze_driver_handle_t,
    pCount: *mut u32,
    phDevices: *mut ze_device_handle_t,
) -> ze_result_t {
    guard("zeDeviceGet", |machine| {
        if hDriver as usize != DRIVER {
            return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
        }
        let handles: Vec<usize> =
            (0..machine.description.devices.len()).map(|i| handle(KIND_DEVICE, i, None, 0)).collect();
        fill(pCount, phDevices, &handles)
    })
}

/// `zeDeviceGetSubDevices`: a root device's tiles; a tile has none.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zeDeviceGetSubDevices(
    hDevice: ze_device_handle_t,
    pCount: *mut u32,
    phSubdevices: *mut ze_device_handle_t,
) -> ze_result_t {
    let raw = hDevice as usize;
    on_device("zeDeviceGetSubDevices", raw, KIND_DEVICE, |device, tile, _, _| {
        let index = decode(raw).map_or(0, |(_, d, _, _)| d);
        let handles: Vec<usize> = match tile {
            Some(_) => Vec::new(),
            None => (0..device.sub_devices.len()).map(|t| handle(KIND_DEVICE, index, Some(t), 0)).collect(),
        };
        fill(pCount, phSubdevices, &handles)
    })
}

/// `zeDeviceGetProperties`.
///
/// # Safety
/// As Level Zero's: `pDeviceProperties` a valid `ze_device_properties_t`.
#[no_mangle]
pub unsafe extern "C" fn zeDeviceGetProperties(
    hDevice: ze_device_handle_t,
    pDeviceProperties: *mut ze_device_properties_t,
) -> ze_result_t {
    on_device("zeDeviceGetProperties", hDevice as usize, KIND_DEVICE, |device, tile, _, _| {
        let Some(p) = pDeviceProperties.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if p.stype != ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        p.type_ = device_type(&device.device_type);
        p.vendorId = 0x8086;
        p.deviceId = device.device_id;
        p.flags = ZE_DEVICE_PROPERTY_FLAG_ECC;
        p.subdeviceId = 0;
        p.coreClockRate = device.clock_mhz;
        p.numSlices = 1;
        p.numSubslicesPerSlice = device.xe_cores;
        p.numEUsPerSubslice = device.eus_per_xe_core;
        p.physicalEUSimdWidth = 8;
        p.numThreadsPerEU = 8;
        p.uuid.id = uuid_bytes(&device.uuid);
        if let Some(t) = tile {
            p.flags |= ZE_DEVICE_PROPERTY_FLAG_SUBDEVICE;
            p.subdeviceId = t as u32;
            p.numSubslicesPerSlice = device.sub_devices[t].xe_cores;
            p.uuid.id = uuid_bytes(&device.sub_devices[t].uuid);
        }
        copy_name(&mut p.name, &device.name);
        ZE_RESULT_SUCCESS
    })
}

/// `zeDeviceGetMemoryProperties`: the device's regions, or the tile's one.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zeDeviceGetMemoryProperties(
    hDevice: ze_device_handle_t,
    pCount: *mut u32,
    pMemProperties: *mut ze_device_memory_properties_t,
) -> ze_result_t {
    on_device("zeDeviceGetMemoryProperties", hDevice as usize, KIND_DEVICE, |device, tile, _, _| {
        let regions = match tile {
            Some(t) => vec![device.sub_devices[t].memory_mib],
            None => device.memory_mib.clone(),
        };
        let Some(count) = pCount.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if *count == 0 || pMemProperties.is_null() {
            *count = regions.len() as u32;
            return ZE_RESULT_SUCCESS;
        }
        let n = (*count as usize).min(regions.len());
        for (i, mib) in regions.iter().take(n).enumerate() {
            let p = &mut *pMemProperties.add(i);
            if p.stype != ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES {
                return ZE_RESULT_ERROR_INVALID_ARGUMENT;
            }
            p.totalSize = mib * 1024 * 1024;
            p.maxClockRate = 1600;
            p.maxBusWidth = 8192;
            copy_name(&mut p.name, "HBM");
        }
        *count = n as u32;
        ZE_RESULT_SUCCESS
    })
}

/// `zeDevicePciGetPropertiesExt`: the BDF; a tile answers its parent's.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zeDevicePciGetPropertiesExt(
    hDevice: ze_device_handle_t,
    pPciProperties: *mut ze_pci_ext_properties_t,
) -> ze_result_t {
    on_device("zeDevicePciGetPropertiesExt", hDevice as usize, KIND_DEVICE, |device, _, _, _| {
        let Some(p) = pPciProperties.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if p.stype != ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        let parts: Vec<u32> =
            device.bdf.split([':', '.']).map(|x| u32::from_str_radix(x, 16).unwrap_or(u32::MAX)).collect();
        let [domain, bus, dev, function] = parts[..] else { return ZE_RESULT_ERROR_UNKNOWN };
        p.address = ze_pci_address_ext_t { domain, bus, device: dev, function };
        p.maxSpeed = ze_pci_speed_ext_t { genVersion: 5, width: 16, maxBandwidth: 63_000_000_000 };
        ZE_RESULT_SUCCESS
    })
}

/// `zesDeviceGetState`: reset required (wedged), repair status.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesDeviceGetState(
    hDevice: zes_device_handle_t,
    pState: *mut zes_device_state_t,
) -> ze_result_t {
    on_device("zesDeviceGetState", hDevice as usize, KIND_DEVICE, |_, _, _, health| {
        let Some(s) = pState.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if s.stype != ZES_STRUCTURE_TYPE_DEVICE_STATE {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        s.reset = if health.reset_required == Some(true) { ZES_RESET_REASON_FLAG_WEDGED } else { 0 };
        s.repaired = ZES_REPAIR_STATUS_NOT_PERFORMED;
        ZE_RESULT_SUCCESS
    })
}

/// `zesDeviceEnumEngineGroups`: a compute group for the device and one per tile.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesDeviceEnumEngineGroups(
    hDevice: zes_device_handle_t,
    pCount: *mut u32,
    phEngine: *mut zes_engine_handle_t,
) -> ze_result_t {
    let raw = hDevice as usize;
    on_device("zesDeviceEnumEngineGroups", raw, KIND_DEVICE, |device, _, _, health| {
        let index = decode(raw).map_or(0, |(_, d, _, _)| d);
        // A GPU with tiles has a device-wide group only where the
        // description gives it a `busy_percent`; otherwise only the tiles'
        // groups exist, as on a Data Center GPU Max.
        let device_wide = device.sub_devices.is_empty() || health.busy_percent.is_some();
        let mut handles: Vec<usize> = device_wide.then(|| handle(KIND_ENGINE, index, None, 0)).into_iter().collect();
        handles.extend((0..device.sub_devices.len()).map(|t| handle(KIND_ENGINE, index, Some(t), 0)));
        fill(pCount, phEngine, &handles)
    })
}

/// `zesEngineGetProperties`.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesEngineGetProperties(
    hEngine: zes_engine_handle_t,
    pProperties: *mut zes_engine_properties_t,
) -> ze_result_t {
    on_device("zesEngineGetProperties", hEngine as usize, KIND_ENGINE, |_, tile, _, _| {
        let Some(p) = pProperties.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if p.stype != ZES_STRUCTURE_TYPE_ENGINE_PROPERTIES {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        p.type_ = ZES_ENGINE_GROUP_COMPUTE_ALL;
        p.onSubdevice = tile.is_some() as ze_bool_t;
        p.subdeviceId = tile.unwrap_or(0) as u32;
        ZE_RESULT_SUCCESS
    })
}

/// `zesEngineGetActivity`: counters that give `busy_percent` between samples.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesEngineGetActivity(
    hEngine: zes_engine_handle_t,
    pStats: *mut zes_engine_stats_t,
) -> ze_result_t {
    on_device("zesEngineGetActivity", hEngine as usize, KIND_ENGINE, |device, tile, _, health| {
        let Some(s) = pStats.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        let busy = match tile {
            Some(t) => device.sub_devices[t].busy_percent,
            None => health.busy_percent.unwrap_or(0),
        }
        .min(100) as u64;
        s.timestamp = now_us();
        s.activeTime = s.timestamp * busy / 100;
        ZE_RESULT_SUCCESS
    })
}

/// `zesDeviceEnumMemoryModules`: one per tile, or one for a device without tiles.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesDeviceEnumMemoryModules(
    hDevice: zes_device_handle_t,
    pCount: *mut u32,
    phMemory: *mut zes_mem_handle_t,
) -> ze_result_t {
    let raw = hDevice as usize;
    on_device("zesDeviceEnumMemoryModules", raw, KIND_DEVICE, |device, _, _, _| {
        let index = decode(raw).map_or(0, |(_, d, _, _)| d);
        let handles: Vec<usize> = if device.sub_devices.is_empty() {
            vec![handle(KIND_MEMORY, index, None, 0)]
        } else {
            (0..device.sub_devices.len()).map(|t| handle(KIND_MEMORY, index, Some(t), 0)).collect()
        };
        fill(pCount, phMemory, &handles)
    })
}

/// `zesMemoryGetProperties`: which tile a module is on.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesMemoryGetProperties(
    hMemory: zes_mem_handle_t,
    pProperties: *mut zes_mem_properties_t,
) -> ze_result_t {
    on_device("zesMemoryGetProperties", hMemory as usize, KIND_MEMORY, |device, tile, _, _| {
        let Some(p) = pProperties.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if p.stype != ZES_STRUCTURE_TYPE_MEM_PROPERTIES {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        p.onSubdevice = tile.is_some() as ze_bool_t;
        p.subdeviceId = tile.unwrap_or(0) as u32;
        p.physicalSize = match tile {
            Some(t) => device.sub_devices[t].memory_mib,
            None => device.memory_mib.iter().sum(),
        } * 1024
            * 1024;
        ZE_RESULT_SUCCESS
    })
}

/// `zesMemoryGetState`: health, free and size of one module.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesMemoryGetState(hMemory: zes_mem_handle_t, pState: *mut zes_mem_state_t) -> ze_result_t {
    on_device("zesMemoryGetState", hMemory as usize, KIND_MEMORY, |device, tile, _, health| {
        let Some(s) = pState.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if s.stype != ZES_STRUCTURE_TYPE_MEM_STATE {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        let (size, used) = match tile {
            Some(t) => (device.sub_devices[t].memory_mib, device.sub_devices[t].memory_used_mib),
            None => (device.memory_mib.iter().sum(), health.memory_used_mib.unwrap_or(0)),
        };
        s.health = mem_health(health.memory_health.as_deref());
        s.size = size * 1024 * 1024;
        s.free = size.saturating_sub(used) * 1024 * 1024;
        ZE_RESULT_SUCCESS
    })
}

/// `zesDeviceEnumRasErrorSets`: a correctable and an uncorrectable set.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesDeviceEnumRasErrorSets(
    hDevice: zes_device_handle_t,
    pCount: *mut u32,
    phRas: *mut zes_ras_handle_t,
) -> ze_result_t {
    let raw = hDevice as usize;
    on_device("zesDeviceEnumRasErrorSets", raw, KIND_DEVICE, |_, _, _, _| {
        let index = decode(raw).map_or(0, |(_, d, _, _)| d);
        let handles = [handle(KIND_RAS, index, None, 0), handle(KIND_RAS, index, None, 1)];
        fill(pCount, phRas, &handles)
    })
}

/// `zesRasGetProperties`: set 0 correctable, set 1 uncorrectable, device-wide.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesRasGetProperties(
    hRas: zes_ras_handle_t,
    pProperties: *mut zes_ras_properties_t,
) -> ze_result_t {
    on_device("zesRasGetProperties", hRas as usize, KIND_RAS, |_, _, item, _| {
        let Some(p) = pProperties.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if p.stype != ZES_STRUCTURE_TYPE_RAS_PROPERTIES {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        p.type_ = if item == 1 { ZES_RAS_ERROR_TYPE_UNCORRECTABLE } else { ZES_RAS_ERROR_TYPE_CORRECTABLE };
        p.onSubdevice = 0;
        p.subdeviceId = 0;
        ZE_RESULT_SUCCESS
    })
}

/// `zesRasGetState`: the set's counts by category.
///
/// # Safety
/// As Level Zero's.
#[no_mangle]
pub unsafe extern "C" fn zesRasGetState(
    hRas: zes_ras_handle_t,
    _clear: ze_bool_t,
    pState: *mut zes_ras_state_t,
) -> ze_result_t {
    on_device("zesRasGetState", hRas as usize, KIND_RAS, |_, _, item, health| {
        let Some(s) = pState.as_mut() else { return ZE_RESULT_ERROR_INVALID_NULL_POINTER };
        if s.stype != ZES_STRUCTURE_TYPE_RAS_STATE {
            return ZE_RESULT_ERROR_INVALID_ARGUMENT;
        }
        s.category = [0; 7];
        if item == 1 {
            s.category[ZES_RAS_ERROR_CAT_COMPUTE_ERRORS as usize] = health.uncorrectable.unwrap_or(0);
        } else {
            s.category[ZES_RAS_ERROR_CAT_CACHE_ERRORS as usize] = health.correctable.unwrap_or(0);
        }
        ZE_RESULT_SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_are_never_null() {
        for (kind, device, tile, item) in
            [(KIND_DEVICE, 0, None, 0), (KIND_ENGINE, 3, Some(1), 0), (KIND_RAS, 7, None, 1)]
        {
            let raw = handle(kind, device, tile, item);
            assert_ne!(raw, 0);
            assert_eq!(decode(raw), Some((kind, device, tile, item)));
        }
        assert_eq!(decode(DRIVER), None, "the driver handle names no device");
    }

    #[test]
    fn uuid_text_becomes_bytes_in_order() {
        let b = uuid_bytes("8680d50b0000000000002900000000ff");
        assert_eq!((b[0], b[1], b[2], b[15]), (0x86, 0x80, 0xd5, 0xff));
    }

    /// The calls check `stype` as drivers do, follow count-then-fill, and
    /// answer as the real loader does without a description.
    #[test]
    fn calls_answer_with_the_headers_layouts_and_codes() {
        let dir = std::env::temp_dir().join(format!("fake-ze-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("machine.json");
        let device = FakeDevice {
            name: "Intel(R) Arc(TM) A770 Graphics".into(),
            uuid: "868056a0000000000000030000000000".into(),
            device_id: 0x56a0,
            device_type: "gpu".into(),
            bdf: "0000:03:00.0".into(),
            memory_mib: vec![16384],
            xe_cores: 32,
            eus_per_xe_core: 16,
            clock_mhz: 2400,
            sub_devices: vec![],
            health: FakeHealth::default(),
        };
        FakeLevelZero { devices: vec![device], ..Default::default() }.write(&path).unwrap();
        // The only test here that touches the environment.
        std::env::set_var(DESCRIPTION_ENV, &path);
        std::env::remove_var("ZES_ENABLE_SYSMAN");
        assert_eq!(zeInit(ZE_INIT_FLAG_GPU_ONLY), ZE_RESULT_SUCCESS);
        let mut count = 0u32;
        let mut driver: ze_driver_handle_t = std::ptr::null_mut();
        let mut root: ze_device_handle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointers, one slot each.
        unsafe {
            assert_eq!(zeDriverGet(&mut count, std::ptr::null_mut()), ZE_RESULT_SUCCESS);
            assert_eq!(count, 1);
            assert_eq!(zeDriverGet(&mut count, &mut driver), ZE_RESULT_SUCCESS);
            assert_eq!(zeDeviceGet(driver, &mut count, &mut root), ZE_RESULT_SUCCESS);
            let mut props: ze_device_properties_t = std::mem::zeroed();
            assert_eq!(zeDeviceGetProperties(root, &mut props), ZE_RESULT_ERROR_INVALID_ARGUMENT, "stype 0");
            props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES;
            assert_eq!(zeDeviceGetProperties(root, &mut props), ZE_RESULT_SUCCESS);
            assert_eq!((props.deviceId, props.type_, props.uuid.id[2]), (0x56a0, ZE_DEVICE_TYPE_GPU, 0x56));
            let mut state: zes_device_state_t = std::mem::zeroed();
            state.stype = ZES_STRUCTURE_TYPE_DEVICE_STATE;
            assert_eq!(zesDeviceGetState(root, &mut state), ZE_RESULT_ERROR_UNINITIALIZED, "Sysman is off");
            assert_eq!(
                zeDeviceGetProperties(0x1234 as ze_device_handle_t, &mut props),
                ZE_RESULT_ERROR_INVALID_NULL_HANDLE
            );
        }
        std::env::remove_var(DESCRIPTION_ENV);
        assert_eq!(zeInit(ZE_INIT_FLAG_GPU_ONLY), ZE_RESULT_ERROR_UNINITIALIZED);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn control_overrides_only_what_it_names() {
        let base = FakeHealth { busy_percent: Some(40), memory_health: Some("ok".into()), ..Default::default() };
        let o = FakeHealth { memory_health: Some("critical".into()), ..Default::default() };
        let h = base.overridden_by(&o);
        assert_eq!((h.busy_percent, h.memory_health.as_deref()), (Some(40), Some("critical")));
    }
}
