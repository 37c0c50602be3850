//! Device discovery: what CDERs this node has.
//!
//! Each configured type is discovered its own way: `static` types are taken
//! from the config as written, `nvml` types are asked of the NVIDIA driver
//! through nvml-wrapper (or of the fake NVML library the tests build),
//! `rocm-smi` types of AMD's through ROCm SMI, `level-zero` types of Intel's
//! through the Level Zero loader, `dev-scan` types of the kernel's DRM
//! devices, and `auto` types of the vendor's library or else the scan.

#![deny(missing_docs)]

use cder_model::{CderType, Config, Device, Discovery};

// The error is a module of its own because nvml.rs returns it and the
// root calls nvml.rs: in the root, the two would import each other.
mod dev_scan;
mod error;
mod level_zero;
mod nvml;
mod reading;
mod rocm_smi;
mod sys;

pub use error::InventoryError;
pub use nvml::{char_major, discover_nvml, open_nvml, DRIVER_LIBRARY};
pub use reading::DeviceReading;
pub use sys::mig_instance_ids;

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
/// memory_mib = 65536
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
        Discovery::RocmSmi => rocm_smi::discover(cder)?,
        Discovery::LevelZero => level_zero::discover(cder)?,
        Discovery::DevScan => dev_scan::discover(cder)?,
        Discovery::Auto => unimplemented!("issue 46: auto discovery"),
    };
    devices.sort_by_key(|d| d.index);
    Ok(devices)
}

/// Whether [`read_devices`] reads a type of this discovery through its
/// vendor's library: the types whose health and use cderd watches through
/// it (NVML types have a watch of their own).
///
/// ```
/// use cder_model::Discovery;
/// assert!(cder_inventory::reads_devices(Discovery::RocmSmi) && cder_inventory::reads_devices(Discovery::LevelZero));
/// assert!(!cder_inventory::reads_devices(Discovery::Nvml) && !cder_inventory::reads_devices(Discovery::Static));
/// ```
pub fn reads_devices(discovery: Discovery) -> bool {
    matches!(discovery, Discovery::RocmSmi | Discovery::LevelZero)
}

/// Reads every device of a `rocm-smi` or `level-zero` type (an `auto` type
/// through its vendor's library); an empty list for the other sources,
/// which have nothing to say.
pub fn read_devices(cder: &CderType) -> Result<Vec<DeviceReading>, InventoryError> {
    match cder.discovery {
        Discovery::RocmSmi => rocm_smi::read(cder),
        Discovery::LevelZero => level_zero::read(cder),
        Discovery::Auto => unimplemented!("issue 46: auto discovery"),
        Discovery::Nvml | Discovery::DevScan | Discovery::Static => Ok(Vec::new()),
    }
}
