//! Why discovery failed.

/// Why discovery failed; each variant names what failed so that an admin
/// can act on it.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The NVML library of a type could not be loaded (no driver, wrong path).
    #[error("type {cder_type:?}: cannot load NVML from {library}: {source}")]
    NvmlLoad {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The library path tried.
        library: String,
        /// NVML's own error.
        source: nvml_wrapper::error::NvmlError,
    },
    /// An NVML call failed, for the whole library or for one device.
    #[error("type {cder_type:?}: NVML call {call} failed{device}: {source}")]
    NvmlCall {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The NVML function, e.g. `nvmlDeviceGetUUID`.
        call: &'static str,
        /// ` on device N`, or empty for a library-wide call.
        device: String,
        /// NVML's own error.
        source: nvml_wrapper::error::NvmlError,
    },
    /// A MIG instance's `access` file in the driver's capability tree is
    /// missing or unreadable, so the device file that grants it is unknown.
    #[error("type {cder_type:?}: MIG instance {uuid}: {path}: {reason}")]
    MigAccess {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The instance's `MIG-…` UUID.
        uuid: String,
        /// The `access` file read.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The `/dev` scan could not read a file it needs (or took too long).
    #[error("type {cder_type:?}: /dev scan: {path}: {reason}")]
    DevScan {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The file or directory at fault.
        path: String,
        /// What was wrong with it, and what it was needed for.
        reason: String,
    },
    /// A type whose vendor has no PCI vendor id cder knows asked for the
    /// `/dev` scan or `auto`.
    #[error("type {cder_type:?}: vendor {vendor:?} is none whose GPUs cder can find (NVIDIA, AMD, Intel); list its devices with discovery = \"static\"")]
    UnknownVendor {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// Its vendor as configured.
        vendor: String,
    },
    /// A configured type found no device at all: never a silent 0.
    #[error("type {cder_type:?}: discovery through {source_name} found no device{why}")]
    NoDevice {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The source used (`nvml`, `dev-scan` …).
        source_name: &'static str,
        /// Where it looked, and for `auto` why the library was not used.
        why: String,
    },
    /// A vendor library sees fewer devices than sysfs shows of that vendor
    /// (render nodes; NVIDIA's display-class PCI devices): the ones it misses would be left unmanaged.
    #[error("type {cder_type:?}: {library} sees {found} device(s), but {sysfs} shows {scanned} device(s) of vendor {vendor}; a device the library misses would be given to no job and fenced from none")]
    FewerThanScan {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The library loaded.
        library: String,
        /// Devices it reports.
        found: usize,
        /// The sysfs directory scanned.
        sysfs: String,
        /// Devices of the vendor there.
        scanned: usize,
        /// The vendor.
        vendor: String,
    },
    /// The Level Zero loader of a type could not be opened, or lacks a
    /// function discovery needs.
    #[error("type {cder_type:?}: cannot load Level Zero ({library}): {reason}")]
    LevelZeroLoad {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The loader tried (`libze_loader.so.1` or `level_zero_library`).
        library: String,
        /// The dynamic loader's own words.
        reason: String,
    },
    /// The Level Zero loader loaded but found no driver (or no GPU driver):
    /// what a node without Intel's compute runtime answers.
    #[error("type {cder_type:?}: Level Zero ({library}): no driver: {call} answered {result}")]
    LevelZeroNoDriver {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The loader.
        library: String,
        /// `zeInit` or `zeDriverGet`.
        call: &'static str,
        /// The `ze_result_t` name, or what was missing.
        result: String,
    },
    /// A Level Zero call failed, for the whole driver or for one device.
    #[error("type {cder_type:?}: Level Zero ({library}): {call} failed{device}: {result}")]
    LevelZeroCall {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The loader.
        library: String,
        /// The function, e.g. `zeDeviceGetProperties`.
        call: &'static str,
        /// ` on device N (GPU-…)`, or empty for a driver-wide call.
        device: String,
        /// The `ze_result_t` name (`ZE_RESULT_ERROR_DEVICE_LOST`).
        result: String,
    },
    /// Sysman answered that it is not initialised: the process started
    /// without `ZES_ENABLE_SYSMAN=1`, which Intel's driver reads once, at
    /// the process's first `zeInit`.
    #[error(
        "type {cder_type:?}: Level Zero ({library}): Sysman is off ({call} answered {result}): start cderd with ZES_ENABLE_SYSMAN=1 in its environment"
    )]
    LevelZeroSysmanOff {
        /// The CDER type whose reading failed.
        cder_type: String,
        /// The loader.
        library: String,
        /// The first Sysman function that refused.
        call: &'static str,
        /// Its `ze_result_t` name.
        result: String,
    },
    /// What the kernel says of a Level Zero device (its DRM render node)
    /// could not be read under `sysfs_root`.
    #[error("type {cder_type:?}: Level Zero device {device}: {path}: {reason}")]
    LevelZeroSysfs {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The device, `N (GPU-…) at <bdf>`.
        device: String,
        /// The sysfs path read.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The ROCm SMI library of a type could not be loaded (not installed,
    /// wrong path, not ROCm SMI).
    #[error("type {cder_type:?}: cannot load ROCm SMI from {library}: {reason} (install librocm-smi64-1 or set rocm_smi_library)")]
    RocmSmiLoad {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The library name or path tried.
        library: String,
        /// The dynamic loader's words.
        reason: String,
    },
    /// `rsmi_init` failed on a node where the amdgpu driver is not loaded.
    #[error("type {cder_type:?}: ROCm SMI ({library}): no AMD GPU driver loaded: rsmi_init: {status} ({module} does not exist)")]
    RocmSmiNoDriver {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The library loaded.
        library: String,
        /// ROCm SMI's own words for its status (`rsmi_status_string`).
        status: String,
        /// The sysfs directory the loaded driver would have made.
        module: String,
    },
    /// A ROCm SMI call failed, for the whole library or for one device.
    #[error("type {cder_type:?}: ROCm SMI ({library}): {call} failed{device}: {status}")]
    RocmSmiCall {
        /// The CDER type whose discovery failed.
        cder_type: String,
        /// The library loaded.
        library: String,
        /// The ROCm SMI function, e.g. `rsmi_dev_unique_id_get`.
        call: &'static str,
        /// ` for device N`, or empty for a library-wide call.
        device: String,
        /// ROCm SMI's own words for its status (`rsmi_status_string`).
        status: String,
    },
}
