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
