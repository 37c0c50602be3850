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
//! MIG: the file may carry a top-level `"mig"` list ([`FakeMig`]), one
//! entry per GPU that supports MIG, with its mode and instances. A MIG
//! instance's handle is answered like a device's (UUID `MIG-…`, name
//! `<parent name> MIG <profile>`, its own memory) plus the MIG calls
//! nvml-wrapper makes. The list sits beside `devices` rather than inside
//! each device so that descriptions written before MIG stay valid.
//!
//! Health events: `CDER_FAKE_NVML_EVENTS` names a control file of JSON
//! lines ([`FakeEvent`]) the library re-reads at every call that needs it,
//! so a test injects an event by appending a line. `xid` and
//! `double_bit_ecc` lines appended after `nvmlInit` are delivered once each
//! by `nvmlEventSetWait_v2` (to a set the device is registered in); every
//! `double_bit_ecc` line also counts in `nvmlDeviceGetTotalEccErrors`
//! (volatile, uncorrected); after a `lost` line every call on that GPU
//! answers `NVML_ERROR_GPU_IS_LOST`, as for a GPU fallen off the bus.
//!
//! Use: `CDER_FAKE_NVML_USAGE` names a JSON file ([`FakeUsage`]) of what
//! each device (GPU or MIG instance, by UUID) is doing: utilisation, memory
//! in use, compute processes. The library re-reads it whenever it changes
//! (size, mtime or inode), so a test changes a running daemon's answers by
//! rewriting it ([`FakeUsage::write`] replaces it whole, by rename). The
//! answers keep real NVML's shapes: `nvmlDeviceGetUtilizationRates` and
//! `nvmlDeviceGetProcessUtilization` answer NOT_SUPPORTED for a MIG
//! instance, and for a GPU in MIG mode; a MIG instance's utilisation comes
//! from GPM (`nvmlGpmMigSampleGet`, `nvmlGpmMetricsGet`), where the file
//! says the GPU has GPM (`"gpm": true`, as Hopper does; Ampere has none).
//! A device the file does not list is idle, with no process.
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
    #[serde(alias = "memory_mb")]
    pub memory_mib: u64,
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

impl FakeDevice {
    /// An A100 as the tests describe one: GPU `i` at PCI bus
    /// `0000:(7+i):00.0`, `/dev/nvidia<i>`, NUMA node 0, ECC on; `tag`
    /// (8 hex digits) keeps one test's UUIDs apart from another's.
    pub fn a100(tag: &str, i: u32, memory_mib: u64) -> FakeDevice {
        FakeDevice {
            uuid: format!("GPU-{tag}-0000-4000-8000-{i:012}"),
            name: format!("NVIDIA A100-SXM4-{}GB", memory_mib / 1024),
            pci_bus_id: format!("0000:{:02x}:00.0", 7 + i),
            memory_mib,
            compute_capability: "8.0".into(),
            cores: Some(6912),
            clock_mhz: Some(1410),
            ecc: Some(true),
            numa_node: Some(0),
            minor: i,
        }
    }
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

/// MIG on one GPU, as the file's `"mig"` list describes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeMig {
    /// Index of the GPU in `devices`.
    pub device: u32,
    /// Whether MIG mode is on now (`nvmlDeviceGetMigMode`'s current mode).
    pub enabled: bool,
    /// `nvmlDeviceGetMaxMigDeviceCount`: MIG slots the GPU has.
    pub max_count: u32,
    /// The instances that exist, by MIG index (position in this list).
    #[serde(default)]
    pub instances: Vec<FakeMigInstance>,
}

/// One MIG instance (a GPU instance with one compute instance).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeMigInstance {
    /// `MIG-…`.
    pub uuid: String,
    /// The profile name NVIDIA gives it, e.g. `1g.10gb`.
    pub profile: String,
    /// GPU instance id.
    pub gpu_instance: u32,
    /// Compute instance id within the GPU instance.
    pub compute_instance: u32,
    /// The instance's memory, in MiB.
    #[serde(alias = "memory_mb")]
    pub memory_mib: u64,
    /// Streaming multiprocessors of the instance.
    pub multiprocessors: u32,
    /// GPU instance slices (`1` for `1g.*`).
    pub slices: u32,
}

/// One line of the `CDER_FAKE_NVML_EVENTS` control file.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FakeEvent {
    /// The GPU (`GPU-…`) it happens on.
    pub uuid: String,
    /// An Xid critical error with this number (e.g. 79: fallen off the bus).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
    /// A double-bit (uncorrectable) ECC error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub double_bit_ecc: bool,
    /// The GPU is lost from now on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
}

impl FakeEvent {
    /// Appends this event to the control file at `path`.
    pub fn append(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write;
        let mut line = serde_json::to_vec(self)?;
        line.push(b'\n');
        // One write of a whole line, so a reader never sees half of it.
        std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(&line)
    }
}

/// The control file's events, in order; unreadable lines are skipped.
fn events() -> Vec<FakeEvent> {
    let Some(path) = std::env::var_os("CDER_FAKE_NVML_EVENTS") else { return Vec::new() };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter(|l| l.ends_with('}')).filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// What the devices are doing, as the `CDER_FAKE_NVML_USAGE` file says.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeUsage {
    /// By device UUID (`GPU-…`, or `MIG-…` for an instance).
    #[serde(default)]
    pub devices: std::collections::BTreeMap<String, FakeDeviceUsage>,
    /// Whether the GPUs offer GPM (GPU performance monitoring, Hopper and
    /// later): the only per-MIG-instance utilisation NVML has.
    #[serde(default)]
    pub gpm: bool,
}

/// One device's activity.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeDeviceUsage {
    /// `nvmlUtilization_t.gpu` (or GPM's graphics utilisation for a MIG
    /// instance), percent.
    #[serde(default)]
    pub gpu_percent: u32,
    /// `nvmlUtilization_t.memory`, percent.
    #[serde(default)]
    pub memory_percent: u32,
    /// Memory in use, MiB (`nvmlMemory_v2_t.used`).
    #[serde(default)]
    pub memory_used_mib: u64,
    /// Compute processes on the device.
    #[serde(default)]
    pub processes: Vec<FakeProcess>,
}

/// One compute process on a device.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeProcess {
    /// Its pid.
    pub pid: u32,
    /// Memory it uses, MiB; `null`: NVML_VALUE_NOT_AVAILABLE, as the driver
    /// answers an unprivileged caller.
    #[serde(default)]
    pub used_memory_mib: Option<u64>,
    /// Its SM utilisation, percent (`nvmlProcessUtilizationSample_t.smUtil`).
    #[serde(default)]
    pub sm_percent: u32,
    /// Its memory utilisation, percent.
    #[serde(default)]
    pub memory_percent: u32,
}

impl FakeUsage {
    /// Replaces the file at `path` whole (a write beside it, then a
    /// rename), so that a reader never sees half of it.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, path)
    }
}

/// The usage file as last read, with what identifies that version of it.
type UsageCache = Option<((u64, u64, i64, i64), std::sync::Arc<FakeUsage>)>;
static USAGE: std::sync::Mutex<UsageCache> = std::sync::Mutex::new(None);

/// The usage file's current contents (re-read only when it changed); an
/// unreadable file is all idle.
fn usage() -> std::sync::Arc<FakeUsage> {
    use std::os::unix::fs::MetadataExt;
    let Some(path) = std::env::var_os("CDER_FAKE_NVML_USAGE") else { return Default::default() };
    let Ok(meta) = std::fs::metadata(&path) else { return Default::default() };
    let key = (meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec());
    let mut cache = USAGE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((seen, usage)) = cache.as_ref() {
        if *seen == key {
            return std::sync::Arc::clone(usage);
        }
    }
    let read: FakeUsage =
        std::fs::read(&path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or_default();
    let read = std::sync::Arc::new(read);
    *cache = Some((key, std::sync::Arc::clone(&read)));
    read
}

fn device_usage(uuid: &str) -> FakeDeviceUsage {
    usage().devices.get(uuid).cloned().unwrap_or_default()
}

/// Serialises deliveries.
static DELIVERING: std::sync::Mutex<()> = std::sync::Mutex::new(());
/// Control-file lines delivered or passed over so far. The process's first
/// `nvmlInit` sets it to the file's length ([`history_length`]): older events are history (a restarted daemon does
/// not see old Xids again). An event for a GPU in no set is passed over.
static EVENTS_DELIVERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Event sets: an id (the opaque handle) and the GPUs registered in it.
static EVENT_SETS: std::sync::Mutex<Vec<(usize, Vec<usize>)>> = std::sync::Mutex::new(Vec::new());
static NEXT_EVENT_SET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);

/// How many control-file lines are history for this process. nvml-wrapper
/// unloads the library when its last `Nvml` is dropped, which resets every
/// static here, so the answer of the process's first init is kept in a
/// marker file beside the control file (`<file>.seen-<pid>`).
fn history_length() -> usize {
    let Some(path) = std::env::var_os("CDER_FAKE_NVML_EVENTS") else { return 0 };
    let mut marker = path.clone();
    marker.push(format!(".seen-{}", std::process::id()));
    if let Some(n) = std::fs::read_to_string(&marker).ok().and_then(|t| t.trim().parse().ok()) {
        return n;
    }
    let n = events().len();
    let _ = std::fs::write(&marker, n.to_string());
    n
}

fn is_lost(uuid: &str) -> bool {
    events().iter().any(|e| e.lost && e.uuid == uuid)
}

/// A whole description: [`FakeNvml`] plus the MIG list, as one file.
#[derive(Debug, Clone, Serialize, Default)]
struct Machine {
    #[serde(flatten)]
    nvml: FakeNvml,
    #[serde(default)]
    mig: Vec<FakeMig>,
}

/// Where cargo put this library, for tests: beside the test executable or
/// one folder up (`target/debug/deps` → `target/debug`). A dependent crate's
/// test build builds it, since cargo builds every crate type a package declares.
pub fn library_path() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(3).map(|dir| dir.join("libcder_fake_nvml.so")).find(|candidate| candidate.is_file())
}

impl FakeNvml {
    /// Writes the description to `path`, for `CDER_FAKE_NVML`.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, serde_json::to_vec_pretty(self)?)
    }

    /// Writes the description with MIG on some GPUs to `path`.
    pub fn write_with_mig(&self, mig: &[FakeMig], path: &std::path::Path) -> std::io::Result<()> {
        let machine = Machine { nvml: self.clone(), mig: mig.to_vec() };
        std::fs::write(path, serde_json::to_vec_pretty(&machine)?)
    }
}

/// The loaded description; re-read at every `nvmlInit`, so one process can
/// see several fake machines in turn, as a test suite may.
static STATE: RwLock<Option<&'static Machine>> = RwLock::new(None);

fn load() -> Option<&'static Machine> {
    let path = std::env::var_os("CDER_FAKE_NVML")?;
    let text = std::fs::read_to_string(path).ok()?;
    // `flatten` cannot honour deny_unknown_fields, so the two halves are
    // read separately and FakeNvml keeps refusing unknown keys.
    let mut value: serde_json::Value = serde_json::from_str(&text).ok()?;
    let mig = match value.as_object_mut()?.remove("mig") {
        Some(list) => serde_json::from_value(list).ok()?,
        None => Vec::new(),
    };
    let nvml = Machine { nvml: serde_json::from_value(value).ok()?, mig };
    // Leaked on purpose: handles into it must outlive any nvmlShutdown race,
    // and a test process inits only a handful of times.
    Some(Box::leak(Box::new(nvml)))
}

fn state() -> Option<&'static Machine> {
    *STATE.read().unwrap_or_else(|e| e.into_inner())
}

/// A GPU's handle is its 1-based index; a MIG instance's is
/// `(GPU index + 1) << 16 | (MIG index + 1)`, so neither is ever null and
/// the two never collide.
const MIG_SHIFT: usize = 16;

/// What a handle names.
enum Target {
    Gpu(usize),
    Instance { gpu: usize, mig: &'static FakeMig, slot: usize },
}

fn mig_of(machine: &'static Machine, gpu: usize) -> Option<&'static FakeMig> {
    machine.mig.iter().find(|m| m.device as usize == gpu)
}

fn target(machine: &'static Machine, handle: nvmlDevice_t) -> Option<Target> {
    let raw = handle as usize;
    let (high, low) = (raw >> MIG_SHIFT, raw & ((1 << MIG_SHIFT) - 1));
    if high == 0 {
        let gpu = low.checked_sub(1)?;
        return (gpu < machine.nvml.devices.len()).then_some(Target::Gpu(gpu));
    }
    let (gpu, slot) = (high - 1, low.checked_sub(1)?);
    let mig = mig_of(machine, gpu)?;
    (mig.enabled && slot < mig.instances.len()).then_some(Target::Instance { gpu, mig, slot })
}

/// A MIG instance seen as a device: its own UUID, name and memory, the
/// parent's bus, minor and capabilities.
fn instance_device(parent: &FakeDevice, instance: &FakeMigInstance) -> FakeDevice {
    FakeDevice {
        uuid: instance.uuid.clone(),
        name: format!("{} MIG {}", parent.name, instance.profile),
        memory_mib: instance.memory_mib,
        cores: None,
        ..parent.clone()
    }
}

/// Runs `f` on the device behind a handle, or answers the NVML error.
fn with_device(call: &str, handle: nvmlDevice_t, f: impl FnOnce(&FakeDevice) -> nvmlReturn_t) -> nvmlReturn_t {
    with_target(call, handle, |machine, target| match target {
        Target::Gpu(gpu) => f(&machine.nvml.devices[gpu]),
        Target::Instance { gpu, mig, slot } => f(&instance_device(&machine.nvml.devices[gpu], &mig.instances[slot])),
    })
}

/// Runs `f` on what a handle names, or answers the NVML error.
fn with_target(
    call: &str,
    handle: nvmlDevice_t,
    f: impl FnOnce(&'static Machine, Target) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let Some(machine) = state() else { return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED };
    if machine.nvml.fail.iter().any(|c| c == call) {
        return nvmlReturn_enum_NVML_ERROR_UNKNOWN;
    }
    match target(machine, handle) {
        Some(Target::Gpu(gpu)) if is_lost(&machine.nvml.devices[gpu].uuid) => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        Some(Target::Instance { gpu, .. }) if is_lost(&machine.nvml.devices[gpu].uuid) => {
            nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST
        }
        Some(t) => f(machine, t),
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
    // Events written before the process's first init are history.
    static FIRST_INIT: std::sync::Once = std::sync::Once::new();
    FIRST_INIT.call_once(|| EVENTS_DELIVERED.store(history_length(), std::sync::atomic::Ordering::SeqCst));
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
        nvmlReturn_enum_NVML_ERROR_NOT_FOUND => c"Not Found",
        nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => c"GPU is lost",
        nvmlReturn_enum_NVML_ERROR_TIMEOUT => c"Timeout",
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
        Some(m) if m.nvml.fail.iter().any(|c| c == "nvmlDeviceGetCount_v2") => nvmlReturn_enum_NVML_ERROR_UNKNOWN,
        Some(m) => put(count, m.nvml.devices.len() as c_uint),
        None => nvmlReturn_enum_NVML_ERROR_UNINITIALIZED,
    }
}

/// # Safety
/// NVML contract: `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    match state() {
        Some(m) if (index as usize) < m.nvml.devices.len() => put(device, (index as usize + 1) as nvmlDevice_t),
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
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: nvmlDevice_t,
    memory: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    with_device("nvmlDeviceGetMemoryInfo_v2", device, |d| {
        if memory.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let total = d.memory_mib * 1024 * 1024;
        let used = (device_usage(&d.uuid).memory_used_mib * 1024 * 1024).min(total);
        let m = &mut *memory;
        m.total = total;
        m.reserved = 0;
        m.used = used;
        m.free = total - used;
        nvmlReturn_enum_NVML_SUCCESS
    })
}

/// # Safety
/// NVML contract: `major` and `minor` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCudaComputeCapability(
    device: nvmlDevice_t,
    major: *mut c_int,
    minor: *mut c_int,
) -> nvmlReturn_t {
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
unsafe fn optional_uint(
    call: &str,
    device: nvmlDevice_t,
    out: *mut c_uint,
    pick: fn(&FakeDevice) -> Option<u32>,
) -> nvmlReturn_t {
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
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    kind: nvmlClockType_t,
    clock: *mut c_uint,
) -> nvmlReturn_t {
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
pub unsafe extern "C" fn nvmlDeviceGetEccMode(
    device: nvmlDevice_t,
    current: *mut nvmlEnableState_t,
    pending: *mut nvmlEnableState_t,
) -> nvmlReturn_t {
    with_device("nvmlDeviceGetEccMode", device, |d| match d.ecc {
        Some(on) => {
            let state =
                if on { nvmlEnableState_enum_NVML_FEATURE_ENABLED } else { nvmlEnableState_enum_NVML_FEATURE_DISABLED };
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
    std::env::var_os("CDER_FAKE_NVML_STATE")
        .map(|dir| std::path::Path::new(&dir).join(format!("{}.compute_mode", d.uuid)))
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

/// MIG support of a whole GPU, or the error NVML gives for a handle that is
/// not one.
fn gpu_mig(call: &str, device: nvmlDevice_t, f: impl FnOnce(usize, &'static FakeMig) -> nvmlReturn_t) -> nvmlReturn_t {
    with_target(call, device, |machine, target| match target {
        Target::Gpu(gpu) => match mig_of(machine, gpu) {
            Some(mig) => f(gpu, mig),
            None => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
        },
        Target::Instance { .. } => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// # Safety
/// NVML contract: `current` and `pending` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    gpu_mig("nvmlDeviceGetMigMode", device, |_, mig| {
        let mode = if mig.enabled { NVML_DEVICE_MIG_ENABLE } else { NVML_DEVICE_MIG_DISABLE };
        let status = put(current, mode);
        if status != nvmlReturn_enum_NVML_SUCCESS {
            return status;
        }
        put(pending, mode)
    })
}

/// # Safety
/// NVML contract: `count` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> nvmlReturn_t {
    gpu_mig("nvmlDeviceGetMaxMigDeviceCount", device, |_, mig| put(count, mig.max_count))
}

/// # Safety
/// NVML contract: `mig_device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    gpu_mig("nvmlDeviceGetMigDeviceHandleByIndex", device, |gpu, mig| {
        if !mig.enabled || index >= mig.max_count {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        // A slot below the maximum with no instance in it, as NVML answers.
        if index as usize >= mig.instances.len() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        put(mig_device, (((gpu + 1) << MIG_SHIFT) | (index as usize + 1)) as nvmlDevice_t)
    })
}

/// # Safety
/// NVML contract: `is_mig` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, is_mig: *mut c_uint) -> nvmlReturn_t {
    with_target("nvmlDeviceIsMigDeviceHandle", device, |_, target| {
        put(is_mig, matches!(target, Target::Instance { .. }) as c_uint)
    })
}

/// # Safety
/// NVML contract: `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    with_target("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig_device, |_, target| match target {
        Target::Instance { gpu, .. } => put(device, (gpu + 1) as nvmlDevice_t),
        Target::Gpu(_) => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// Answers a query about a MIG instance; a whole GPU's handle is refused.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn instance_uint(
    call: &str,
    device: nvmlDevice_t,
    out: *mut c_uint,
    pick: fn(&FakeMigInstance) -> u32,
) -> nvmlReturn_t {
    with_target(call, device, |_, target| match target {
        Target::Instance { mig, slot, .. } => put(out, pick(&mig.instances[slot])),
        Target::Gpu(_) => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// # Safety
/// NVML contract: `id` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    instance_uint("nvmlDeviceGetGpuInstanceId", device, id, |i| i.gpu_instance)
}

/// # Safety
/// NVML contract: `id` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    instance_uint("nvmlDeviceGetComputeInstanceId", device, id, |i| i.compute_instance)
}

/// Attributes of a MIG instance. A whole GPU answers NOT_SUPPORTED here
/// (the real driver answers it; cder asks only for instances).
///
/// # Safety
/// NVML contract: `attributes` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetAttributes_v2(
    device: nvmlDevice_t,
    attributes: *mut nvmlDeviceAttributes_t,
) -> nvmlReturn_t {
    with_target("nvmlDeviceGetAttributes_v2", device, |_, target| match target {
        Target::Instance { mig, slot, .. } => {
            let instance = &mig.instances[slot];
            let mut attrs: nvmlDeviceAttributes_t = std::mem::zeroed();
            attrs.multiprocessorCount = instance.multiprocessors;
            attrs.gpuInstanceSliceCount = instance.slices;
            attrs.computeInstanceSliceCount = instance.slices;
            attrs.memorySizeMB = instance.memory_mib;
            put(attributes, attrs)
        }
        Target::Gpu(_) => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    })
}

/// # Safety
/// NVML contract: `uuid` a NUL-terminated string, `device` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    let Some(machine) = state() else { return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED };
    if uuid.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let wanted = CStr::from_ptr(uuid).to_string_lossy();
    match machine.nvml.devices.iter().position(|d| d.uuid == wanted) {
        Some(_) if is_lost(&wanted) => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
        Some(gpu) => put(device, (gpu + 1) as nvmlDevice_t),
        // A MIG instance's UUID names its handle, as drivers since R470 do.
        None => {
            let instance =
                machine.mig.iter().filter(|m| m.enabled).find_map(|m| {
                    m.instances.iter().position(|i| i.uuid == wanted).map(|slot| (m.device as usize, slot))
                });
            match instance {
                Some((gpu, _)) if is_lost(&machine.nvml.devices[gpu].uuid) => nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST,
                Some((gpu, slot)) => put(device, (((gpu + 1) << MIG_SHIFT) | (slot + 1)) as nvmlDevice_t),
                None => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
            }
        }
    }
}

/// Uncorrected errors are the control file's `double_bit_ecc` lines for the
/// GPU; corrected ones are 0.
///
/// # Safety
/// NVML contract: `count` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: nvmlDevice_t,
    error_type: nvmlMemoryErrorType_t,
    _counter_type: nvmlEccCounterType_t,
    count: *mut std::ffi::c_ulonglong,
) -> nvmlReturn_t {
    with_device("nvmlDeviceGetTotalEccErrors", device, |d| match d.ecc {
        Some(true) if error_type == nvmlMemoryErrorType_enum_NVML_MEMORY_ERROR_TYPE_UNCORRECTED => {
            put(count, events().iter().filter(|e| e.double_bit_ecc && e.uuid == d.uuid).count() as u64)
        }
        Some(true) => put(count, 0),
        _ => nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED,
    })
}

const FAKE_EVENT_TYPES: u64 =
    (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError) as u64;

/// # Safety
/// NVML contract: `types` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    types: *mut std::ffi::c_ulonglong,
) -> nvmlReturn_t {
    with_device("nvmlDeviceGetSupportedEventTypes", device, |_| put(types, FAKE_EVENT_TYPES))
}

/// # Safety
/// NVML contract: `set` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    if state().is_none() {
        return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
    }
    let id = NEXT_EVENT_SET.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    EVENT_SETS.lock().unwrap_or_else(|e| e.into_inner()).push((id, Vec::new()));
    put(set, id as nvmlEventSet_t)
}

/// Adds `device` to an event set; types the fake cannot inject are refused
/// with NOT_SUPPORTED, as the driver refuses types a GPU does not have.
#[no_mangle]
pub extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: std::ffi::c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    with_target("nvmlDeviceRegisterEvents", device, |_, target| {
        let Target::Gpu(gpu) = target else { return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED };
        if types & !FAKE_EVENT_TYPES != 0 {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        let mut sets = EVENT_SETS.lock().unwrap_or_else(|e| e.into_inner());
        match sets.iter_mut().find(|(id, _)| *id == set as usize) {
            Some((_, gpus)) => {
                gpus.push(gpu);
                nvmlReturn_enum_NVML_SUCCESS
            }
            None => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

/// Forgets an event set made by `nvmlEventSetCreate`.
#[no_mangle]
pub extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    EVENT_SETS.lock().unwrap_or_else(|e| e.into_inner()).retain(|(id, _)| *id != set as usize);
    nvmlReturn_enum_NVML_SUCCESS
}

/// Delivers the next new `xid` / `double_bit_ecc` line of the control file
/// for a GPU registered in `set`, waiting up to `timeout_ms` for one.
///
/// # Safety
/// NVML contract: `data` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    use std::sync::atomic::Ordering::SeqCst;
    let Some(machine) = state() else { return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms.into());
    loop {
        let registered: Vec<usize> =
            match EVENT_SETS.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|(id, _)| *id == set as usize) {
                Some((_, gpus)) => gpus.clone(),
                None => return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
            };
        {
            // One delivery at a time, so each line goes to one waiter once.
            let _one = DELIVERING.lock().unwrap_or_else(|e| e.into_inner());
            let from = EVENTS_DELIVERED.load(SeqCst);
            for (n, event) in events().iter().enumerate().skip(from) {
                let kind = match (event.xid, event.double_bit_ecc) {
                    (Some(_), _) => nvmlEventTypeXidCriticalError,
                    (None, true) => nvmlEventTypeDoubleBitEccError,
                    (None, false) => continue,
                };
                let gpu = machine.nvml.devices.iter().position(|d| d.uuid == event.uuid);
                let Some(gpu) = gpu.filter(|g| registered.contains(g)) else { continue };
                EVENTS_DELIVERED.store(n + 1, SeqCst);
                let mut out: nvmlEventData_t = std::mem::zeroed();
                out.device = (gpu + 1) as nvmlDevice_t;
                out.eventType = kind as u64;
                out.eventData = event.xid.unwrap_or(0);
                return put(data, out);
            }
        }
        if std::time::Instant::now() >= deadline {
            return nvmlReturn_enum_NVML_ERROR_TIMEOUT;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether the GPU behind a target is in MIG mode.
fn in_mig_mode(machine: &'static Machine, target: &Target) -> bool {
    match target {
        Target::Gpu(gpu) => mig_of(machine, *gpu).is_some_and(|m| m.enabled),
        Target::Instance { .. } => true,
    }
}

/// The UUID of what a handle names.
fn target_uuid(machine: &'static Machine, target: &Target) -> String {
    match target {
        Target::Gpu(gpu) => machine.nvml.devices[*gpu].uuid.clone(),
        Target::Instance { mig, slot, .. } => mig.instances[*slot].uuid.clone(),
    }
}

/// NVML answers utilisation for whole GPUs outside MIG mode only.
///
/// # Safety
/// NVML contract: `utilization` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    utilization: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    with_target("nvmlDeviceGetUtilizationRates", device, |machine, target| {
        if in_mig_mode(machine, &target) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        let u = device_usage(&target_uuid(machine, &target));
        put(utilization, nvmlUtilization_t { gpu: u.gpu_percent.min(100), memory: u.memory_percent.min(100) })
    })
}

/// nvml.h's `NVML_VALUE_NOT_AVAILABLE` for an unsigned long long.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;

/// The compute processes, in the `nvmlProcessInfo_t` layout both the v2
/// and v3 calls take in nvml-wrapper's bindings: a too small buffer gets
/// INSUFFICIENT_SIZE and the count, as from the driver.
///
/// # Safety
/// `count` valid for a read and a write, `infos` for `*count` entries.
unsafe fn compute_processes(
    call: &str,
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    with_target(call, device, |machine, target| {
        if count.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let (gi, ci) = match &target {
            Target::Instance { mig, slot, .. } => {
                (mig.instances[*slot].gpu_instance, mig.instances[*slot].compute_instance)
            }
            Target::Gpu(_) => (u32::MAX, u32::MAX),
        };
        let processes = device_usage(&target_uuid(machine, &target)).processes;
        let room = *count as usize;
        *count = processes.len() as c_uint;
        if processes.len() > room || (infos.is_null() && !processes.is_empty()) {
            return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (n, p) in processes.iter().enumerate() {
            infos.add(n).write(nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used_memory_mib.map_or(VALUE_NOT_AVAILABLE, |m| m * 1024 * 1024),
                gpuInstanceId: gi,
                computeInstanceId: ci,
            });
        }
        nvmlReturn_enum_NVML_SUCCESS
    })
}

/// # Safety
/// NVML contract: `count` valid, `infos` valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    compute_processes("nvmlDeviceGetComputeRunningProcesses_v3", device, count, infos)
}

/// # Safety
/// NVML contract: `count` valid, `infos` valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> nvmlReturn_t {
    compute_processes("nvmlDeviceGetComputeRunningProcesses_v2", device, count, infos)
}

/// Microseconds since the epoch: the driver's sample timestamps.
fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The driver's per-process sample buffer: how many entries a query
/// without a buffer is told to bring (an H100 with driver 580 says 72).
const PROCESS_SAMPLE_BUFFER: c_uint = 72;

/// One sample per process with SM utilisation, stamped now (µs since the
/// epoch, as the driver stamps them), newer than `last_seen`. As the
/// driver answers: without a buffer (or with one too small), INSUFFICIENT_SIZE
/// and the size of its sample buffer, even when idle; with one, NOT_FOUND
/// when no process ran since `last_seen`. NOT_SUPPORTED in MIG mode.
///
/// # Safety
/// NVML contract: `count` valid, `samples` valid for `*count` entries.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    samples: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen: std::ffi::c_ulonglong,
) -> nvmlReturn_t {
    with_target("nvmlDeviceGetProcessUtilization", device, |machine, target| {
        if in_mig_mode(machine, &target) {
            return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
        }
        if count.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let stamp = now_us();
        let busy: Vec<FakeProcess> = device_usage(&target_uuid(machine, &target))
            .processes
            .into_iter()
            .filter(|p| p.sm_percent > 0 && stamp > last_seen)
            .collect();
        if samples.is_null() || (*count as usize) < busy.len().max(1) {
            *count = PROCESS_SAMPLE_BUFFER.max(busy.len() as c_uint);
            return nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if busy.is_empty() {
            return nvmlReturn_enum_NVML_ERROR_NOT_FOUND;
        }
        *count = busy.len() as c_uint;
        for (n, p) in busy.iter().enumerate() {
            samples.add(n).write(nvmlProcessUtilizationSample_t {
                pid: p.pid,
                timeStamp: stamp,
                smUtil: p.sm_percent.min(100),
                memUtil: p.memory_percent.min(100),
                encUtil: 0,
                decUtil: 0,
            });
        }
        nvmlReturn_enum_NVML_SUCCESS
    })
}

/// A GPM sample: the graphics utilisation of what was sampled, when.
#[derive(Default)]
struct GpmSampleData {
    utilisation: Option<u32>,
}

/// # Safety
/// NVML contract: `support` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(
    device: nvmlDevice_t,
    support: *mut nvmlGpmSupport_t,
) -> nvmlReturn_t {
    with_target("nvmlGpmQueryDeviceSupport", device, |_, target| {
        if support.is_null() {
            return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
        }
        let supported = matches!(target, Target::Gpu(_)) && usage().gpm;
        (*support).isSupportedDevice = supported as c_uint;
        nvmlReturn_enum_NVML_SUCCESS
    })
}

/// # Safety
/// NVML contract: `sample` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut nvmlGpmSample_t) -> nvmlReturn_t {
    if state().is_none() {
        return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
    }
    put(sample, Box::into_raw(Box::<GpmSampleData>::default()).cast())
}

/// # Safety
/// `sample` must come from `nvmlGpmSampleAlloc` and not be freed yet.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: nvmlGpmSample_t) -> nvmlReturn_t {
    if sample.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    drop(Box::from_raw(sample.cast::<GpmSampleData>()));
    nvmlReturn_enum_NVML_SUCCESS
}

/// Fills a GPM sample with the utilisation of `uuid`, where the GPU has GPM.
///
/// # Safety
/// `sample` must come from `nvmlGpmSampleAlloc`.
unsafe fn gpm_fill(sample: nvmlGpmSample_t, uuid: &str) -> nvmlReturn_t {
    if sample.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    if !usage().gpm {
        return nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
    }
    (*sample.cast::<GpmSampleData>()).utilisation = Some(device_usage(uuid).gpu_percent.min(100));
    nvmlReturn_enum_NVML_SUCCESS
}

/// # Safety
/// NVML contract: `sample` from `nvmlGpmSampleAlloc`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleGet(device: nvmlDevice_t, sample: nvmlGpmSample_t) -> nvmlReturn_t {
    with_target("nvmlGpmSampleGet", device, |machine, target| match target {
        Target::Gpu(gpu) => gpm_fill(sample, &machine.nvml.devices[gpu].uuid),
        Target::Instance { .. } => nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
    })
}

/// A MIG instance's GPM sample, asked of its GPU by GPU instance id.
///
/// # Safety
/// NVML contract: `sample` from `nvmlGpmSampleAlloc`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: nvmlDevice_t,
    gpu_instance: c_uint,
    sample: nvmlGpmSample_t,
) -> nvmlReturn_t {
    gpm_mig_sample(device, gpu_instance, sample)
}

unsafe fn gpm_mig_sample(device: nvmlDevice_t, gpu_instance: c_uint, sample: nvmlGpmSample_t) -> nvmlReturn_t {
    gpu_mig("nvmlGpmMigSampleGet", device, |_, mig| {
        match mig.instances.iter().find(|i| i.gpu_instance == gpu_instance).filter(|_| mig.enabled) {
            Some(instance) => gpm_fill(sample, &instance.uuid),
            None => nvmlReturn_enum_NVML_ERROR_NOT_FOUND,
        }
    })
}

/// GPM metrics between two samples: graphics and SM utilisation are the
/// later sample's; other metrics are NOT_SUPPORTED.
///
/// # Safety
/// NVML contract: `request` valid, its samples from `nvmlGpmSampleAlloc`.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(request: *mut nvmlGpmMetricsGet_t) -> nvmlReturn_t {
    if state().is_none() {
        return nvmlReturn_enum_NVML_ERROR_UNINITIALIZED;
    }
    let Some(request) = request.as_mut() else { return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT };
    if request.version != NVML_GPM_METRICS_GET_VERSION || request.sample1.is_null() || request.sample2.is_null() {
        return nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
    }
    let later = (*request.sample2.cast::<GpmSampleData>()).utilisation;
    let earlier = (*request.sample1.cast::<GpmSampleData>()).utilisation;
    let count = (request.numMetrics as usize).min(request.metrics.len());
    for metric in &mut request.metrics[..count] {
        let (short, long): (&'static CStr, &'static CStr) = match metric.metricId {
            nvmlGpmMetricId_t_NVML_GPM_METRIC_GRAPHICS_UTIL => (c"gract", c"Graphics utilization"),
            nvmlGpmMetricId_t_NVML_GPM_METRIC_SM_UTIL => (c"sm_util", c"SM utilization"),
            _ => {
                metric.nvmlReturn = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;
                continue;
            }
        };
        match (earlier, later) {
            (Some(_), Some(u)) => {
                metric.value = f64::from(u);
                metric.nvmlReturn = nvmlReturn_enum_NVML_SUCCESS;
                metric.metricInfo.shortName = short.as_ptr().cast_mut();
                metric.metricInfo.longName = long.as_ptr().cast_mut();
                metric.metricInfo.unit = c"%".as_ptr().cast_mut();
            }
            _ => metric.nvmlReturn = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT,
        }
    }
    nvmlReturn_enum_NVML_SUCCESS
}
