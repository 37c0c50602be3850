//! Device discovery: what CDERs this node has.
//!
//! Each configured type is discovered its own way: `static` types are taken
//! from the config as written, `nvml` types are asked of the NVIDIA driver
//! through nvml-wrapper (or of the fake NVML library the tests build),
//! `rocm-smi` types of AMD's through ROCm SMI, `level-zero` types of Intel's
//! through the Level Zero loader, `dev-scan` types of the kernel's DRM
//! devices, and `auto` types of the vendor's library or else the scan.

#![deny(missing_docs)]

use std::collections::BTreeSet;
use std::ffi::OsString;

use cder_model::{CderType, Config, Device, Discovery, VendorKind};

// The error and the reading are modules of their own because the vendor
// modules return them and the root calls those: in the root, the two would
// import each other.
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

/// Discovers the devices of one type, through its source (for `auto`, the
/// one [`resolve`] picks).
///
/// Never a silent 0: every source but `static` that finds no device is an
/// error naming the type and the source, and a vendor library that sees
/// fewer devices than sysfs shows of that vendor (render nodes in
/// `<sysfs_root>/class/drm`; NVIDIA's display-class devices in
/// `<sysfs_root>/bus/pci/devices`) is an error naming both counts.
pub fn discover_type(cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    let (source, fallback) = resolution(cder)?;
    let mut devices = match source {
        Discovery::Static => cder.static_devices(),
        Discovery::Nvml => discover_nvml(cder)?,
        Discovery::RocmSmi => rocm_smi::discover(cder)?,
        Discovery::LevelZero => level_zero::discover(cder)?,
        // Resolution never leaves `auto`; the scan is its last resort.
        Discovery::DevScan | Discovery::Auto => dev_scan::discover(cder)?,
    };
    devices.sort_by_key(|d| d.index);
    if source == Discovery::Static {
        return Ok(devices);
    }
    if let Some(library) = library(cder, source) {
        let found = library_count(cder, source, &devices);
        if let Some(scanned) = dev_scan::count(cder).filter(|&n| n > found) {
            return Err(InventoryError::FewerThanScan {
                cder_type: cder.name().to_string(),
                library: library.to_string_lossy().into_owned(),
                found,
                sysfs: dev_scan::scan_dir(cder).display().to_string(),
                scanned,
                vendor: cder.vendor.published_name().to_string(),
            });
        }
    }
    if devices.is_empty() {
        let place = match library(cder, source) {
            Some(library) => format!(" (library {})", library.to_string_lossy()),
            None => format!(
                " (devices of vendor {} in {})",
                cder.vendor.published_name(),
                dev_scan::scan_dir(cder).display()
            ),
        };
        let why = match fallback {
            Some(reason) => format!("{place}; discovery = \"auto\" did not use the vendor's library: {reason}"),
            None => place,
        };
        return Err(InventoryError::NoDevice {
            cder_type: cder.name().to_string(),
            source_name: source_name(source),
            why,
        });
    }
    Ok(devices)
}

/// The source `auto` stands for on this node: the vendor's library when it
/// loads and its driver answers (`nvmlInit`, `rsmi_init`, `zeInit`), else
/// the `/dev` scan, logging why. Any other `discovery` is itself. A vendor
/// with no library cder knows is an error naming the type.
pub fn resolve(cder: &CderType) -> Result<Discovery, InventoryError> {
    resolution(cder).map(|(source, _)| source)
}

/// A copy of `config` whose `auto` types name the source [`resolve`] picked
/// for them: what cderd runs with, so that its NVML-only features (health
/// watch, usage sampler, MIG, enforcement) follow what was actually used.
pub fn resolved(config: &Config) -> Result<Config, InventoryError> {
    let mut config = config.clone();
    for cder in &mut config.cders {
        cder.discovery = resolve(cder)?;
    }
    Ok(config)
}

/// The name a source has in the config (`dev-scan`).
pub fn source_name(source: Discovery) -> &'static str {
    source.name()
}

/// The library name ROCm SMI is loaded by unless `rocm_smi_library` says otherwise.
const ROCM_SMI_LIBRARY: &str = "librocm_smi64.so.1";
/// The library name the Level Zero loader is loaded by unless `level_zero_library` says otherwise.
const LEVEL_ZERO_LIBRARY: &str = level_zero::LOADER_LIBRARY;

/// The library a library source loads for this type; `None` for the others.
fn library(cder: &CderType, source: Discovery) -> Option<OsString> {
    let (configured, default) = match source {
        Discovery::Nvml => (&cder.nvml_library, DRIVER_LIBRARY),
        Discovery::RocmSmi => (&cder.rocm_smi_library, ROCM_SMI_LIBRARY),
        Discovery::LevelZero => (&cder.level_zero_library, LEVEL_ZERO_LIBRARY),
        Discovery::DevScan | Discovery::Auto | Discovery::Static => return None,
    };
    Some(configured.as_ref().map(|p| p.as_os_str().to_owned()).unwrap_or_else(|| default.into()))
}

/// The source, and for `auto` that fell back to the scan, why.
fn resolution(cder: &CderType) -> Result<(Discovery, Option<String>), InventoryError> {
    if cder.discovery != Discovery::Auto {
        return Ok((cder.discovery, None));
    }
    let source = match cder.vendor {
        VendorKind::Nvidia => Discovery::Nvml,
        VendorKind::Amd => Discovery::RocmSmi,
        VendorKind::Intel => Discovery::LevelZero,
        VendorKind::XeonPhi | VendorKind::Other(_) => {
            return Err(InventoryError::UnknownVendor {
                cder_type: cder.name().to_string(),
                vendor: cder.vendor.published_name().to_string(),
            })
        }
    };
    // A library that is missing or finds no driver leaves the scan; one
    // that fails otherwise is a real failure, reported as it is.
    let loaded = match source {
        Discovery::Nvml => open_nvml(cder).map(drop).map_err(|e| e.to_string()),
        Discovery::RocmSmi => match rocm_smi::discover(cder) {
            Err(e @ (InventoryError::RocmSmiLoad { .. } | InventoryError::RocmSmiNoDriver { .. })) => {
                Err(e.to_string())
            }
            other => {
                other?;
                Ok(())
            }
        },
        _ => match level_zero::discover(cder) {
            Err(e @ (InventoryError::LevelZeroLoad { .. } | InventoryError::LevelZeroNoDriver { .. })) => {
                Err(e.to_string())
            }
            other => {
                other?;
                Ok(())
            }
        },
    };
    match loaded {
        Ok(()) => Ok((source, None)),
        Err(reason) => {
            tracing::warn!(
                cder_type = cder.name(),
                "discovery = \"auto\": {reason}; using the /dev scan (no health watch or usage sampling for this type)"
            );
            Ok((Discovery::DevScan, Some(reason)))
        }
    }
}

/// The physical devices a library sees: NVML's device count (which keeps a
/// GPU that fell off the bus, and counts a GPU, not its MIG instances),
/// else the distinct PCI bus ids discovery returned.
fn library_count(cder: &CderType, source: Discovery, devices: &[Device]) -> usize {
    if source == Discovery::Nvml {
        if let Ok(count) = open_nvml(cder).and_then(|nvml| {
            nvml.device_count().map_err(|source| InventoryError::NvmlCall {
                cder_type: cder.name().to_string(),
                call: "nvmlDeviceGetCount_v2",
                device: String::new(),
                source,
            })
        }) {
            return count as usize;
        }
    }
    let buses: BTreeSet<&str> = devices.iter().map(|d| d.pci_bus_id.as_str()).filter(|b| !b.is_empty()).collect();
    if buses.is_empty() {
        devices.len()
    } else {
        buses.len()
    }
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
        Discovery::Auto => match resolve(cder)? {
            Discovery::RocmSmi => rocm_smi::read(cder),
            Discovery::LevelZero => level_zero::read(cder),
            _ => Ok(Vec::new()),
        },
        Discovery::Nvml | Discovery::DevScan | Discovery::Static => Ok(Vec::new()),
    }
}
