//! Device discovery: what CDERs this node has.
//!
//! Each configured type is discovered its own way: `static` types are taken
//! from the config as written, `nvml` types are asked of the NVIDIA driver
//! through nvml-wrapper (or of the fake NVML library the tests build).

#![deny(missing_docs)]

use cder_model::{CderType, Config, Device, Discovery};

mod nvml;
mod sys;

pub use nvml::{char_major, discover_nvml, open_nvml, DRIVER_LIBRARY};
pub use sys::mig_instance_ids;

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
}

/// Discovers the devices of every configured type, in config order and,
/// within a type, by index.
///
/// ```
/// use std::path::Path;
/// let config = cder_model::Config::parse(r#"
/// [[cder]]
/// name = "fpga"
/// vendor = "Xilinx"
/// discovery = "static"
/// visible_env = ["XILINX_VISIBLE_DEVICES"]
///
/// [[cder.device]]
/// index = 0
/// model = "Alveo U250"
/// memory_mb = 65536
/// path = "/dev/xclmgmt0"
/// "#, Path::new("cder.toml")).unwrap();
/// let devices = cder_inventory::discover(&config).unwrap();
/// assert_eq!(devices.len(), 1);
/// assert_eq!((devices[0].cder_type.as_str(), devices[0].attributes.model.as_str()), ("fpga", "Alveo U250"));
/// ```
pub fn discover(config: &Config) -> Result<Vec<Device>, InventoryError> {
    let mut devices = Vec::new();
    for cder in &config.cders {
        devices.extend(discover_type(cder)?);
    }
    Ok(devices)
}

/// Discovers the devices of one type.
pub fn discover_type(cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    let mut devices = match cder.discovery {
        Discovery::Static => cder.static_devices(),
        Discovery::Nvml => discover_nvml(cder)?,
    };
    devices.sort_by_key(|d| d.index);
    Ok(devices)
}
