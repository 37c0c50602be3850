//! A fake ROCm SMI for machines without AMD GPUs.
//!
//! Debian's real `librocm_smi64.so.1` loads on any machine but sees a GPU
//! only where the amdgpu driver runs one, which CI cannot have. This cdylib
//! (the file is `librocm_smi64.so`) exports the `rsmi_*` functions cder
//! calls, with the header's signatures, struct layouts and status codes (from
//! `cder-rocm-smi-sys`, the bindings the caller uses), and answers them from
//! a JSON file ([`FakeRocmSmi`]) named by `CDER_FAKE_ROCM_SMI`. cder loads it
//! through `rocm_smi_library`, as it loads AMD's, so discovery's FFI path is
//! what the tests exercise.
//!
//! Without `CDER_FAKE_ROCM_SMI`, `rsmi_init` answers
//! `RSMI_STATUS_INIT_ERROR`, as the real 5.2.3 library does on a node without
//! the amdgpu driver (it finds no `/sys/class/drm`); as there,
//! `rsmi_num_monitor_devices` then answers success and 0, and
//! `rsmi_shut_down` `RSMI_STATUS_INIT_ERROR`.
//!
//! The file is re-read at every call, so a test changes what a running
//! process sees (an ECC count grows, a GPU is lost, its use changes) by
//! rewriting it ([`FakeRocmSmi::write`] replaces it whole, by rename). A
//! lost GPU stays enumerated, as one fallen off the bus stays in sysfs: its
//! PCI id (which ROCm SMI keeps from enumeration) still answers, every other
//! call on it `RSMI_STATUS_FILE_ERROR`. An unreadable file makes `rsmi_init`
//! answer `RSMI_STATUS_FILE_ERROR` (missing) or `RSMI_STATUS_UNEXPECTED_DATA`
//! (not the JSON below), with the reason on stderr.
//!
//! Two knobs stand for a node where other processes use ROCm SMI too:
//! `busy` (its shared lock is held) and `delay_ms` (a call that keeps its
//! caller waiting).
//!
//! No panic crosses the FFI boundary: each function answers
//! `RSMI_STATUS_INTERNAL_EXCEPTION` instead, as ROCm SMI does for a C++
//! exception.
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU32, Ordering};

use cder_rocm_smi_sys::*;
use serde::{Deserialize, Serialize};

/// The whole file: the GPUs, and calls to fail.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeRocmSmi {
    /// The GPUs, in ROCm SMI's index order.
    pub devices: Vec<FakeGpu>,
    /// `rsmi_*` function names that answer `RSMI_STATUS_UNKNOWN_ERROR`, so
    /// tests can check that a failing call is reported by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail: Vec<String>,
    /// Every per-device call answers `RSMI_STATUS_BUSY`, as when another
    /// process on the node holds ROCm SMI's shared lock past its wait.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub busy: bool,
    /// `rsmi_num_monitor_devices` (once per enumeration) first sleeps this
    /// long: a driver or lock that keeps the caller waiting.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One fake AMD GPU.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FakeGpu {
    /// `rsmi_dev_unique_id_get`; `null`: `RSMI_STATUS_NOT_SUPPORTED`, as on
    /// boards without a fused id.
    pub unique_id: Option<u64>,
    /// `rsmi_dev_name_get` (`AMD Instinct MI210`).
    pub name: String,
    /// VRAM, MiB (`rsmi_dev_memory_total_get`).
    pub vram_total_mib: u64,
    /// VRAM in use, MiB (`rsmi_dev_memory_usage_get`).
    #[serde(default)]
    pub vram_used_mib: u64,
    /// `rsmi_dev_busy_percent_get`.
    #[serde(default)]
    pub busy_percent: u32,
    /// `0000:c1:00.0`, packed into `rsmi_dev_pci_id_get`'s BDFID.
    pub pci_bus_id: String,
    /// `rsmi_topo_numa_affinity_get`; `null`: the kernel's -1 (no NUMA).
    pub numa_node: Option<u32>,
    /// `rsmi_dev_drm_render_minor_get` (128 + N).
    pub render_minor: u32,
    /// Uncorrectable ECC errors per block (`"umc"`, `"gfx"`, …, the
    /// `RSMI_GPU_BLOCK_*` names); the blocks listed are those with ECC on.
    /// `null`: `rsmi_dev_ecc_enabled_get` answers `RSMI_STATUS_NOT_SUPPORTED`.
    pub ecc: Option<BTreeMap<String, u64>>,
    /// Fallen off the bus.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
}

impl FakeGpu {
    /// An MI210 as the tests describe one: GPU `i` at PCI bus
    /// `0000:(c1+i):00.0`, render node 128 + i, NUMA node `i % 2`, ECC on
    /// with no error; `tag` keeps one test's unique ids apart from another's.
    pub fn mi210(tag: u32, i: u32) -> FakeGpu {
        FakeGpu {
            unique_id: Some((u64::from(tag) << 32) | u64::from(0x1000 + i)),
            name: "AMD Instinct MI210".into(),
            vram_total_mib: 65520,
            vram_used_mib: 0,
            busy_percent: 0,
            pci_bus_id: format!("0000:{:02x}:00.0", 0xc1 + i),
            numa_node: Some(i % 2),
            render_minor: 128 + i,
            ecc: Some(BTreeMap::from([("umc".to_string(), 0), ("gfx".to_string(), 0)])),
            lost: false,
        }
    }

    /// The uuid cder gives this GPU: `GPU-` and its unique id in 16 hex
    /// digits, as ROCm's `ROCR_VISIBLE_DEVICES` writes one; `AMD-PCI-` and
    /// its bus id without a unique id.
    pub fn uuid(&self) -> String {
        match self.unique_id {
            Some(id) => format!("GPU-{id:016x}"),
            None => format!("AMD-PCI-{}", self.pci_bus_id),
        }
    }
}

impl FakeRocmSmi {
    /// Replaces the file at `path` whole (a write beside it, then a rename),
    /// so that a process reading it never sees half of it.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, path)
    }
}

/// Where cargo put this library, for tests: beside the test executable or
/// one folder up (`target/debug/deps` → `target/debug`). A dependent crate's
/// test build builds it, since cargo builds every crate type a package declares.
pub fn library_path() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(3).map(|dir| dir.join("librocm_smi64.so")).find(|candidate| candidate.is_file())
}

/// `rsmi_init` calls not yet matched by `rsmi_shut_down`.
static INITIALISED: AtomicU32 = AtomicU32::new(0);

/// The file now; the status `rsmi_init` answers when it cannot be had.
fn machine() -> Result<FakeRocmSmi, rsmi_status_t> {
    let Some(path) = std::env::var_os("CDER_FAKE_ROCM_SMI") else { return Err(RSMI_STATUS_INIT_ERROR) };
    let bytes = std::fs::read(&path).map_err(|e| {
        eprintln!("fake ROCm SMI: {}: {e}", std::path::Path::new(&path).display());
        RSMI_STATUS_FILE_ERROR
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        eprintln!("fake ROCm SMI: {}: {e}", std::path::Path::new(&path).display());
        RSMI_STATUS_UNEXPECTED_DATA
    })
}

/// Runs one exported function's body: no panic leaves it.
fn guard(body: impl FnOnce() -> rsmi_status_t + std::panic::UnwindSafe) -> rsmi_status_t {
    std::panic::catch_unwind(body).unwrap_or(RSMI_STATUS_INTERNAL_EXCEPTION)
}

/// The GPU at `index`, for a per-device call named `call` whose
/// out-pointer is `out`: the status to answer instead when there is none
/// (not initialised, bad index, null pointer, lost, told to fail).
fn gpu<T>(call: &str, index: u32, out: *mut T) -> Result<FakeGpu, rsmi_status_t> {
    if INITIALISED.load(Ordering::SeqCst) == 0 {
        return Err(RSMI_STATUS_INIT_ERROR);
    }
    if out.is_null() {
        return Err(RSMI_STATUS_INVALID_ARGS);
    }
    let machine = machine()?;
    if machine.fail.iter().any(|f| f == call) {
        return Err(RSMI_STATUS_UNKNOWN_ERROR);
    }
    if machine.busy {
        return Err(RSMI_STATUS_BUSY);
    }
    let gpu = machine.devices.get(index as usize).cloned().ok_or(RSMI_STATUS_INVALID_ARGS)?;
    if gpu.lost && call != "rsmi_dev_pci_id_get" {
        return Err(RSMI_STATUS_FILE_ERROR);
    }
    Ok(gpu)
}

/// Writes `value` through `out` (checked non-null by [`gpu`]).
fn answer<T>(out: *mut T, value: Result<T, rsmi_status_t>) -> rsmi_status_t {
    match value {
        Ok(v) => {
            // SAFETY: `out` is the caller's non-null out-pointer to a `T`,
            // as the function's C signature requires.
            unsafe { out.write(v) };
            RSMI_STATUS_SUCCESS
        }
        Err(status) => status,
    }
}

/// `RSMI_GPU_BLOCK_*` by the name the JSON file uses.
fn block_bit(name: &str) -> Option<rsmi_gpu_block_t> {
    Some(match name {
        "umc" => RSMI_GPU_BLOCK_UMC,
        "sdma" => RSMI_GPU_BLOCK_SDMA,
        "gfx" => RSMI_GPU_BLOCK_GFX,
        "mmhub" => RSMI_GPU_BLOCK_MMHUB,
        "athub" => RSMI_GPU_BLOCK_ATHUB,
        "pcie_bif" => RSMI_GPU_BLOCK_PCIE_BIF,
        "hdp" => RSMI_GPU_BLOCK_HDP,
        "xgmi_wafl" => RSMI_GPU_BLOCK_XGMI_WAFL,
        "df" => RSMI_GPU_BLOCK_DF,
        "smn" => RSMI_GPU_BLOCK_SMN,
        "sem" => RSMI_GPU_BLOCK_SEM,
        "mp0" => RSMI_GPU_BLOCK_MP0,
        "mp1" => RSMI_GPU_BLOCK_MP1,
        "fuse" => RSMI_GPU_BLOCK_FUSE,
        _ => return None,
    })
}

/// `0000:c1:00.0` as ROCm SMI's BDFID.
fn bdfid(bus_id: &str) -> Option<u64> {
    let (domain, rest) = bus_id.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    Some((hex(domain)? << 32) | (hex(bus)? << 8) | (hex(device)? << 3) | hex(function)?)
}

/// `rsmi_init`: succeeds where `CDER_FAKE_ROCM_SMI` names a readable file.
#[no_mangle]
pub extern "C" fn rsmi_init(_init_flags: u64) -> rsmi_status_t {
    guard(|| match machine() {
        Ok(m) if m.fail.iter().any(|f| f == "rsmi_init") => RSMI_STATUS_UNKNOWN_ERROR,
        Ok(_) => {
            INITIALISED.fetch_add(1, Ordering::SeqCst);
            RSMI_STATUS_SUCCESS
        }
        Err(status) => status,
    })
}

/// `rsmi_shut_down`.
#[no_mangle]
pub extern "C" fn rsmi_shut_down() -> rsmi_status_t {
    guard(|| match INITIALISED.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
        Ok(_) => RSMI_STATUS_SUCCESS,
        Err(_) => RSMI_STATUS_INIT_ERROR,
    })
}

/// `rsmi_status_string`: the real library's own words (5.2.3).
///
/// # Safety
/// `status_string` is null or valid for one write, as rocm_smi.h says.
#[no_mangle]
pub unsafe extern "C" fn rsmi_status_string(status: rsmi_status_t, status_string: *mut *const c_char) -> rsmi_status_t {
    guard(|| {
        if status_string.is_null() {
            return RSMI_STATUS_INVALID_ARGS;
        }
        let text: &'static CStr = match status {
            RSMI_STATUS_SUCCESS => c"RSMI_STATUS_SUCCESS: The function has been executed successfully.",
            RSMI_STATUS_INVALID_ARGS => c"RSMI_STATUS_INVALID_ARGS: The provided arguments do not meet the preconditions required for calling this function.",
            RSMI_STATUS_NOT_SUPPORTED => c"RSMI_STATUS_NOT_SUPPORTED: This function is not supported in the current environment.",
            RSMI_STATUS_FILE_ERROR => c"RSMI_STATUS_FILE_ERROR: There was an error in finding or opening a file or directory. The operation may not be supported by this Linux kernel version.",
            RSMI_STATUS_PERMISSION => c"RSMI_STATUS_PERMISSION: The user ID of the calling process does not have sufficient permission to execute a command.  Often this is fixed by running as root (sudo).",
            RSMI_STATUS_OUT_OF_RESOURCES => c"Unable to acquire memory or other resource",
            RSMI_STATUS_INTERNAL_EXCEPTION => c"An internal exception was caught",
            RSMI_STATUS_INPUT_OUT_OF_BOUNDS => c"The provided input is out of allowable or safe range",
            RSMI_STATUS_INIT_ERROR => c"An error occurred during initialization, during monitor discovery or when when initializing internal data structures",
            RSMI_STATUS_NOT_YET_IMPLEMENTED => c"The called function has not been implemented in this system for this device type",
            RSMI_STATUS_NOT_FOUND => c"An item required to complete the call was not found",
            RSMI_STATUS_INSUFFICIENT_SIZE => c"Not enough resources were available to fully execute the call",
            RSMI_STATUS_INTERRUPT => c"An interrupt occurred while executing the function",
            RSMI_STATUS_UNEXPECTED_SIZE => c"Data (usually from reading a file) was out of range from what was expected",
            RSMI_STATUS_NO_DATA => c"No data was found (usually from reading a file) where data was expected",
            RSMI_STATUS_UNEXPECTED_DATA => c"Data (usually from reading a file) was not of the type that was expected",
            RSMI_STATUS_BUSY => c"A resource or mutex could not be acquired because it is already being used",
            RSMI_STATUS_REFCOUNT_OVERFLOW => c"An internal reference counter exceeded INT32_MAX",
            RSMI_STATUS_UNKNOWN_ERROR => c"An unknown error prevented the call from completing successfully",
            // The real one points at this text and answers RSMI_STATUS_UNKNOWN_ERROR.
            _ => {
                // SAFETY: checked non-null; the string is static.
                unsafe { status_string.write(c"An unknown error occurred".as_ptr()) };
                return RSMI_STATUS_UNKNOWN_ERROR;
            }
        };
        // SAFETY: checked non-null; the string is static.
        unsafe { status_string.write(text.as_ptr()) };
        RSMI_STATUS_SUCCESS
    })
}

/// `rsmi_num_monitor_devices`: 0 with success before a successful init,
/// as the real library answers.
///
/// # Safety
/// `num_devices` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_num_monitor_devices(num_devices: *mut u32) -> rsmi_status_t {
    guard(|| {
        if num_devices.is_null() {
            return RSMI_STATUS_INVALID_ARGS;
        }
        if INITIALISED.load(Ordering::SeqCst) == 0 {
            return answer(num_devices, Ok(0));
        }
        let machine = machine();
        if let Ok(m) = &machine {
            std::thread::sleep(std::time::Duration::from_millis(m.delay_ms));
        }
        answer(num_devices, machine.map(|m| m.devices.len() as u32))
    })
}

/// `rsmi_dev_unique_id_get`.
///
/// # Safety
/// `id` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_unique_id_get(dv_ind: u32, id: *mut u64) -> rsmi_status_t {
    guard(|| {
        let value =
            gpu("rsmi_dev_unique_id_get", dv_ind, id).and_then(|g| g.unique_id.ok_or(RSMI_STATUS_NOT_SUPPORTED));
        answer(id, value)
    })
}

/// `rsmi_dev_name_get`: the name, cut to `len - 1` bytes, as the real one
/// does (it answers `RSMI_STATUS_INSUFFICIENT_SIZE` then, with the cut name).
///
/// # Safety
/// `name` is null or valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_name_get(dv_ind: u32, name: *mut c_char, len: usize) -> rsmi_status_t {
    guard(|| {
        let gpu = match gpu("rsmi_dev_name_get", dv_ind, name) {
            Ok(gpu) => gpu,
            Err(status) => return status,
        };
        if len == 0 {
            return RSMI_STATUS_INVALID_ARGS;
        }
        let bytes = gpu.name.as_bytes();
        let n = bytes.len().min(len - 1);
        // SAFETY: `name` is non-null and valid for `len` bytes; n + 1 <= len.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), name, n);
            name.add(n).write(0);
        }
        if n < bytes.len() {
            RSMI_STATUS_INSUFFICIENT_SIZE
        } else {
            RSMI_STATUS_SUCCESS
        }
    })
}

/// `rsmi_dev_memory_total_get`: VRAM only (the others are not supported here).
///
/// # Safety
/// `total` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_memory_total_get(
    dv_ind: u32,
    mem_type: rsmi_memory_type_t,
    total: *mut u64,
) -> rsmi_status_t {
    guard(|| {
        let value = gpu("rsmi_dev_memory_total_get", dv_ind, total).and_then(|g| match mem_type {
            RSMI_MEM_TYPE_VRAM => Ok(g.vram_total_mib << 20),
            _ => Err(RSMI_STATUS_NOT_SUPPORTED),
        });
        answer(total, value)
    })
}

/// `rsmi_dev_memory_usage_get`: VRAM only.
///
/// # Safety
/// `used` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_memory_usage_get(
    dv_ind: u32,
    mem_type: rsmi_memory_type_t,
    used: *mut u64,
) -> rsmi_status_t {
    guard(|| {
        let value = gpu("rsmi_dev_memory_usage_get", dv_ind, used).and_then(|g| match mem_type {
            RSMI_MEM_TYPE_VRAM => Ok(g.vram_used_mib << 20),
            _ => Err(RSMI_STATUS_NOT_SUPPORTED),
        });
        answer(used, value)
    })
}

/// `rsmi_dev_pci_id_get`.
///
/// # Safety
/// `bdfid` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_pci_id_get(dv_ind: u32, bdfid_out: *mut u64) -> rsmi_status_t {
    guard(|| {
        let value = gpu("rsmi_dev_pci_id_get", dv_ind, bdfid_out)
            .and_then(|g| bdfid(&g.pci_bus_id).ok_or(RSMI_STATUS_UNEXPECTED_DATA));
        answer(bdfid_out, value)
    })
}

/// `rsmi_topo_numa_affinity_get`.
///
/// # Safety
/// `numa_node` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_topo_numa_affinity_get(dv_ind: u32, numa_node: *mut u32) -> rsmi_status_t {
    guard(|| {
        let value = gpu("rsmi_topo_numa_affinity_get", dv_ind, numa_node).map(|g| g.numa_node.unwrap_or(u32::MAX));
        answer(numa_node, value)
    })
}

/// `rsmi_dev_drm_render_minor_get`.
///
/// # Safety
/// `minor` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_drm_render_minor_get(dv_ind: u32, minor: *mut u32) -> rsmi_status_t {
    guard(|| answer(minor, gpu("rsmi_dev_drm_render_minor_get", dv_ind, minor).map(|g| g.render_minor)))
}

/// `rsmi_dev_busy_percent_get`.
///
/// # Safety
/// `busy_percent` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_busy_percent_get(dv_ind: u32, busy_percent: *mut u32) -> rsmi_status_t {
    guard(|| answer(busy_percent, gpu("rsmi_dev_busy_percent_get", dv_ind, busy_percent).map(|g| g.busy_percent)))
}

/// `rsmi_dev_ecc_enabled_get`: the blocks the file lists.
///
/// # Safety
/// `enabled_blocks` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_ecc_enabled_get(dv_ind: u32, enabled_blocks: *mut u64) -> rsmi_status_t {
    guard(|| {
        let value = gpu("rsmi_dev_ecc_enabled_get", dv_ind, enabled_blocks).and_then(|g| {
            let ecc = g.ecc.ok_or(RSMI_STATUS_NOT_SUPPORTED)?;
            Ok(ecc.keys().filter_map(|b| block_bit(b)).fold(0, |mask, bit| mask | bit))
        });
        answer(enabled_blocks, value)
    })
}

/// `rsmi_dev_ecc_count_get`: a listed block's uncorrectable count (no
/// correctable ones); `RSMI_STATUS_NOT_SUPPORTED` for the others.
///
/// # Safety
/// `ec` is null or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn rsmi_dev_ecc_count_get(
    dv_ind: u32,
    block: rsmi_gpu_block_t,
    ec: *mut rsmi_error_count_t,
) -> rsmi_status_t {
    guard(|| {
        let value = gpu("rsmi_dev_ecc_count_get", dv_ind, ec).and_then(|g| {
            let ecc = g.ecc.ok_or(RSMI_STATUS_NOT_SUPPORTED)?;
            let count = ecc.iter().find(|(name, _)| block_bit(name) == Some(block)).map(|(_, n)| *n);
            let uncorrectable_err = count.ok_or(RSMI_STATUS_NOT_SUPPORTED)?;
            Ok(rsmi_error_count_t { correctable_err: 0, uncorrectable_err })
        });
        answer(ec, value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bus_id_packs_as_rocm_smi_packs_it() {
        // Domain in the high word, then bus << 8 | device << 3 | function.
        assert_eq!(bdfid("0000:c1:00.0"), Some(0xc100));
        assert_eq!(bdfid("0001:03:1f.7"), Some((1 << 32) | 0x0300 | (0x1f << 3) | 7));
        assert_eq!(bdfid("c1:00.0"), None);
    }
}
