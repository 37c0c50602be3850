//! A fake NVML for machines without the NVIDIA driver.
//!
//! The real `libnvidia-ml.so.1` cannot exist on CI, so this cdylib exports the
//! NVML C symbols cder calls and answers them from a JSON file named by
//! `CDER_FAKE_NVML` (see [`FakeDevice`]). cder loads it through nvml-wrapper's
//! `lib_path`, exactly as it loads the driver's library, so discovery's FFI
//! path is what the tests exercise. Without `CDER_FAKE_NVML`, `nvmlInit_v2`
//! answers `NVML_ERROR_DRIVER_NOT_LOADED`, as a node without a driver does.
//!
//! Compute modes set through `nvmlDeviceSetComputeMode` are written to
//! `<CDER_FAKE_NVML_STATE>/<uuid>.compute_mode` when that variable is set, so
//! a test can see what a daemon did.
//!
//! Struct layouts and return codes come from `nvml-wrapper-sys`, the same
//! bindings the caller uses.
#![deny(missing_docs)]


#![allow(non_snake_case, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::RwLock;

use nvml_wrapper_sys::bindings::*;
use serde::{Deserialize, Serialize};

/// One fake device, as the JSON file describes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeDevice {
    /// The device UUID NVML reports (`GPU-…`).
    pub uuid: String,
    /// The product name (`nvmlDeviceGetName`).
    pub name: String,
    /// `0000:3B:00.0`, NVML's 8-digit-domain form is produced from it.
    pub pci_bus_id: String,
    /// Total memory in MiB.
    pub memory_mb: u64,
    /// `"8.0"`.
    pub compute_capability: String,
    /// CUDA cores; `null` = the query is not supported.
    pub cores: Option<u32>,
    /// Maximum SM clock in MHz; `null` = not supported.
    pub clock_mhz: Option<u32>,
    /// `null` = the board does not support ECC (NVML_ERROR_NOT_SUPPORTED).
    pub ecc: Option<bool>,
    /// `null` = the query is not supported.
    pub numa_node: Option<u32>,
    /// The `/dev/nvidia<minor>` number.
    pub minor: u32,
}

/// The whole file: devices, and NVML calls to fail (by symbol name), so
/// tests can check that a failing call is reported by name.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FakeNvml {
    /// The GPUs, in NVML index order.
    pub devices: Vec<FakeDevice>,
    /// NVML symbols that fail with `NVML_ERROR_UNKNOWN`.
    #[serde(default)]
    pub fail: Vec<String>,
}

/// Where cargo put this library, for tests: beside the test executable or
/// one folder up (`target/debug/deps` → `target/debug`). A dependent crate's
/// test build builds it, since cargo builds every crate type a package declares.
pub fn library_path() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join("libcder_fake_nvml.so"))
        .find(|candidate| candidate.is_file())
}

impl FakeNvml {
    /// Writes the description to `path`, for `CDER_FAKE_NVML`.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, serde_json::to_vec_pretty(self)?)
    }
}

/// The loaded description; re-read at every `nvmlInit`, so one process can
/// see several fake machines in turn, as a test suite may.
static STATE: RwLock<Option<&'static FakeNvml>> = RwLock::new(None);

fn load() -> Option<&'static FakeNvml> {
    let path = std::env::var_os("CDER_FAKE_NVML")?;
    let text = std::fs::read_to_string(path).ok()?;
    let nvml: FakeNvml = serde_json::from_str(&text).ok()?;
    // Leaked on purpose: handles into it must outlive any nvmlShutdown race,
    // and a test process inits only a handful of times.
    Some(Box::leak(Box::new(nvml)))
}

fn state() -> Option<&'static FakeNvml> {
    *STATE.read().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the device behind a handle, or answers the NVML error.
fn with_device(call: &str, handle: nvmlDevice_t, f: impl FnOnce(&FakeDevice) -> nvmlReturn_t) -> nvmlReturn_t {
    let Some(nvml) = state() else { return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED };
    if nvml.fail.iter().any(|c| c == call) {
        return nvmlReturn_enum_NVML_ERROR_UNKNOWN;
    }
    // Handles are 1-based indices, so a handle is never null.
    let index = (handle as usize).wrapping_sub(1);
    match nvml.devices.get(index) {
        Some(device) => f(device),
        None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    }
}

/// Copies `text` into a caller's buffer of `length` bytes, NUL-terminated.
///
/// # Safety
/// `out` must be valid for `length` bytes, as NVML's contract requires.
unsafe fn write_c_string(text: &str, out: *mut c_char, length: c_uint) -> nvmlReturn_t {
    if out.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if bytes.len() + 1 > length as usize {
        return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), out, bytes.len());
    *out.add(bytes.len()) = 0;
    nvmlReturn_enum_NVML_SUCCESS
}

/// Writes `value` through `out` unless it is null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> nvmlReturn_t {
    if out.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    out.write(value);
    nvmlReturn_enum_NVML_SUCCESS
}

/// NVML `nvmlInit_v2`: reads the JSON file `$CDER_FAKE_NVML` names; "driver not
/// loaded" without a readable one.
#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    let loaded = load();
    *STATE.write().unwrap_or_else(|e| e.into_inner()) = loaded;
    match loaded {
        Some(_) => nvmlReturn_enum_NVML_SUCCESS,
        None => nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
    }
}

/// NVML `nvmlInitWithFlags`: as `nvmlInit_v2` (flags ignored).
#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    nvmlInit_v2()
}

/// NVML `nvmlShutdown`.
#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    nvmlReturn_enum_NVML_SUCCESS
}

/// NVML `nvmlErrorString`: the text of a return code.
#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let text: &'static CStr = match result {
        nvmlReturn_enum_NVML_SUCCESS => c"Success",
        nvmlReturn_enum_NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => c"Not Supported",
        nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        _ => c"Unknown Error",
    };
    text.as_ptr()
}

/// # Safety
/// NVML contract: `version` valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    write_c_string("550.54.15", version, length)
}

/// # Safety
/// NVML contract: `count` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    match state() {
        Some(nvml) if nvml.fail.iter().any(|c| c == "nvmlDeviceGetCount_v2") => nvmlReturn_enum_NVML_ERROR_UNKNOWN,
        Some(nvml) => put(count, nvml.devices.len() as c_uint),
        None => nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
    }
}

/// # Safety
/// NVML contract: `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    match state() {
        Some(nvml) if (index as usize) < nvml.devices.len() => put(device, (index as usize + 1) as nvmlDevice_t),
        Some(_) => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        None => nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
    }
}

/// # Safety
/// NVML contract: `uuid` valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    with_device("nvmlDeviceGetUUID", device, |d| write_c_string(&d.uuid, uuid, length))
}

/// # Safety
/// NVML contract: `name` valid for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    with_device("nvmlDeviceGetName", device, |d| write_c_string(&d.name, name, length))
}

/// # Safety
/// NVML contract: `pci` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    with_device("nvmlDeviceGetPciInfo_v3", device, |d| {
        // NVML's busId is "00000000:3B:00.0": an 8-digit domain.
        let (domain, rest) = d.pci_bus_id.split_once(':').unwrap_or(("0", &d.pci_bus_id));
        let domain = u32::from_str_radix(domain, 16).unwrap_or(0);
        let bus = rest.split(':').next().and_then(|b| u32::from_str_radix(b, 16).ok()).unwrap_or(0);
        let long = format!("{domain:08X}:{}", rest.to_ascii_uppercase());
        let mut info: nvmlPciInfo_t = std::mem::zeroed();
        info.domain = domain;
        info.bus = bus;
        info.pciDeviceId = 0x20B010DE;
        for (slot, byte) in info.busId.iter_mut().zip(long.bytes().take(31)) {
            *slot = byte as c_char;
        }
        for (slot, byte) in info.busIdLegacy.iter_mut().zip(long.bytes().skip(4).take(15)) {
            *slot = byte as c_char;
        }
        put(pci, info)
    })
}

/// # Safety
/// NVML contract: `memory` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    with_device("nvmlDeviceGetMemoryInfo_v2", device, |d| {
        if memory.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let total = d.memory_mb * 1024 * 1024;
        let m = &mut *memory;
        m.total = total;
        m.reserved = 0;
        m.used = 0;
        m.free = total;
        nvmlReturn_enum_NVML_SUCCESS
    })
}

/// # Safety
/// NVML contract: `major` and `minor` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(device: nvmlDevice_t, major: *mut c_int, minor: *mut c_int) -> nvmlReturn_t {
    with_device("nvmlDeviceGetCudaComputeCapability", device, |d| {
        let (ma, mi) = d.compute_capability.split_once('.').unwrap_or(("0", "0"));
        let status = put(major, ma.parse().unwrap_or(0));
        if status != nvmlReturn_enum_NVML_SUCCESS {
            return status;
        }
        put(minor, mi.parse().unwrap_or(0))
    })
}

/// Answers an optional integer query: unsupported when the file says `null`.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn optional_uint(call: &str, device: nvmlDevice_t, out: *mut c_uint, pick: fn(&FakeDevice) -> Option<u32>) -> nvmlReturn_t {
    with_device(call, device, |d| match pick(d) {
        Some(v) => put(out, v),
        None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    })
}

/// # Safety
/// NVML contract: `cores` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumGpuCores(device: nvmlDevice_t, cores: *mut c_uint) -> nvmlReturn_t {
    optional_uint("nvmlDeviceGetNumGpuCores", device, cores, |d| d.cores)
}

/// # Safety
/// NVML contract: `clock` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(device: nvmlDevice_t, kind: nvmlClockType_t, clock: *mut c_uint) -> nvmlReturn_t {
    // Graphics and SM clocks are the same on the boards cder cares about.
    if kind != nvmlClockType_enum_NVML_CLOCK_GRAPHICS && kind != nvmlClockType_enum_NVML_CLOCK_SM {
        return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
    }
    optional_uint("nvmlDeviceGetMaxClockInfo", device, clock, |d| d.clock_mhz)
}

/// # Safety
/// NVML contract: `node` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetNumaNodeId(device: nvmlDevice_t, node: *mut c_uint) -> nvmlReturn_t {
    optional_uint("nvmlDeviceGetNumaNodeId", device, node, |d| d.numa_node)
}

/// # Safety
/// NVML contract: `minor` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minor: *mut c_uint) -> nvmlReturn_t {
    optional_uint("nvmlDeviceGetMinorNumber", device, minor, |d| Some(d.minor))
}

/// # Safety
/// NVML contract: `current` and `pending` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEccMode(device: nvmlDevice_t, current: *mut nvmlEnableState_t, pending: *mut nvmlEnableState_t) -> nvmlReturn_t {
    with_device("nvmlDeviceGetEccMode", device, |d| match d.ecc {
        Some(on) => {
            let state = if on { nvmlEnableState_enum_NVML_FEATURE_ENABLED } else { nvmlEnableState_enum_NVML_FEATURE_DISABLED };
            let status = put(current, state);
            if status != nvmlReturn_enum_NVML_SUCCESS {
                return status;
            }
            put(pending, state)
        }
        None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    })
}

fn compute_mode_file(d: &FakeDevice) -> Option<std::path::PathBuf> {
    std::env::var_os("CDER_FAKE_NVML_STATE").map(|dir| std::path::Path::new(&dir).join(format!("{}.compute_mode", d.uuid)))
}

/// # Safety
/// NVML contract: `mode` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeMode(device: nvmlDevice_t, mode: *mut nvmlComputeMode_t) -> nvmlReturn_t {
    with_device("nvmlDeviceGetComputeMode", device, |d| {
        let stored = compute_mode_file(d)
            .and_then(|f| std::fs::read_to_string(f).ok())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(nvmlComputeMode_enum_NVML_COMPUTEMODE_DEFAULT);
        put(mode, stored)
    })
}

/// NVML `nvmlDeviceSetComputeMode`: kept in `$CDER_FAKE_NVML_STATE/<uuid>.compute_mode`
/// (when set), so that a later process reads it back as from the driver.
#[no_mangle]
pub extern "C" fn nvmlDeviceSetComputeMode(device: nvmlDevice_t, mode: nvmlComputeMode_t) -> nvmlReturn_t {
    with_device("nvmlDeviceSetComputeMode", device, |d| {
        if let Some(file) = compute_mode_file(d) {
            if std::fs::write(file, mode.to_string()).is_err() {
                return nvmlReturn_enum_NVML_ERROR_UNKNOWN;
            }
        }
        nvmlReturn_enum_NVML_SUCCESS
    })
}
