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
}
