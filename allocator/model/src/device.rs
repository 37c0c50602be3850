//! One device and its quantitative attributes.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a device is, as a site publishes it (design.md's attribute list):
/// the one set that a static `[[cder.device]]`, a provider's
/// `[[group.device]]` and discovery each state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceAttributes {
    /// Model name as published (`Tesla K20m`).
    pub model: String,
    /// Device memory, in MiB.
    #[serde(alias = "memory_mb")]
    pub memory_mib: u64,
    /// CUDA compute capability, when the vendor has one.
    pub compute_capability: Option<ComputeCapability>,
    /// The instruction set's name where the vendor gives one instead
    /// (`gfx90a` for an MI250, `Xe-HPC` for a Data Center GPU Max).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Streaming multiprocessors.
    pub multiprocessors: Option<u32>,
    /// Cores per multiprocessor.
    pub cores_per_mp: Option<u32>,
    /// Total cores: multiprocessors × cores per MP unless configured.
    pub cores: Option<u32>,
    /// Clock speed, in MHz.
    pub clock_mhz: Option<u32>,
    /// Whether ECC is on.
    pub ecc: bool,
}

/// Declares a config table that states a device's [`DeviceAttributes`]
/// (`[[cder.device]]`, a provider's `[[group.device]]`): the table's own
/// fields, `@attributes` where the attribute keys stand, and `attributes()`
/// to read them. The keys stay flat fields, not `#[serde(flatten)]`, so an
/// error keeps its line and key and unknown keys are still refused.
#[macro_export]
macro_rules! device_table {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$before_meta:meta])* pub $before:ident : $before_ty:ty,)*
            @attributes
            $($(#[$after_meta:meta])* pub $after:ident : $after_ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$before_meta])* pub $before: $before_ty,)*
            /// Model name as published (`Tesla K20m`).
            pub model: $crate::device::Spanned<String>,
            /// Device memory, in MiB.
            #[serde(alias = "memory_mb")]
            pub memory_mib: u64,
            /// CUDA compute capability (`"8.6"`).
            #[serde(default)]
            pub compute_capability: Option<$crate::ComputeCapability>,
            /// The vendor's architecture name (`"gfx90a"`, `"Xe-HPC"`).
            #[serde(default)]
            pub architecture: Option<String>,
            /// Streaming multiprocessors.
            #[serde(default)]
            pub multiprocessors: Option<u32>,
            /// Cores per multiprocessor; with `multiprocessors` it gives `cores` when that is not set.
            #[serde(default)]
            pub cores_per_mp: Option<u32>,
            /// Total cores.
            #[serde(default)]
            pub cores: Option<u32>,
            /// Clock speed, in MHz.
            #[serde(default)]
            pub clock_mhz: Option<u32>,
            /// Whether ECC memory is on.
            #[serde(default)]
            pub ecc: bool,
            $($(#[$after_meta])* pub $after: $after_ty,)*
        }

        impl $name {
            /// The attributes as published: `cores` is multiprocessors ×
            /// cores per MP when not given (none when that overflows).
            pub fn attributes(&self) -> $crate::DeviceAttributes {
                $crate::DeviceAttributes {
                    model: self.model.get_ref().clone(),
                    memory_mib: self.memory_mib,
                    compute_capability: self.compute_capability,
                    architecture: self.architecture.clone(),
                    multiprocessors: self.multiprocessors,
                    cores_per_mp: self.cores_per_mp,
                    cores: self.cores.or_else(|| self.multiprocessors?.checked_mul(self.cores_per_mp?)),
                    clock_mhz: self.clock_mhz,
                    ecc: self.ecc,
                }
            }
        }
    };
}

#[doc(hidden)]
pub use toml::Spanned;

/// A device as discovery reports it and as `cderctl inventory --json` prints
/// it. Field names are the snake_case names used in `[[cder.device]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    /// The CDER type this device belongs to (`gpgpu`, `fpga`, …).
    #[serde(rename = "type")]
    pub cder_type: String,
    /// The vendor's name for it as published (`Nvidia`, `AMD`, …).
    pub vendor: String,
    /// Index in the vendor's enumeration; for NVIDIA this is PCI bus order.
    pub index: u32,
    /// Stable identity (`GPU-…` for NVIDIA, `<type>-<index>` for static devices).
    pub uuid: String,
    /// PCI bus id (`0000:3b:00.0`), empty when unknown.
    pub pci_bus_id: String,
    /// What it is: model, memory, cores… (flat keys in the JSON, in this place).
    #[serde(flatten)]
    pub attributes: DeviceAttributes,
    /// The device file that guards it (`/dev/nvidia0`).
    pub path: PathBuf,
    /// The number of that file's character device, as discovery knows it
    /// (NVML's minor, the MIG capability's minor, the majors in
    /// `/proc/devices`, or the static config's `dev`): what the device
    /// cgroups deny while the file itself does not exist yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<DeviceNumber>,
    /// NUMA node / locality domain, used by the allocator's locality policy.
    pub numa_node: u32,
    /// Whether it may be handed out.
    pub health: Health,
}

/// A character device's number, as cgroup rules and `/proc/devices` name
/// it; written `MAJOR:MINOR` (`195:0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceNumber {
    /// The driver's major number (195 for `/dev/nvidia0`).
    pub major: u32,
    /// The device's minor number within that driver.
    pub minor: u32,
}

impl DeviceNumber {
    /// Splits a `st_rdev` the way glibc's `major()`/`minor()` do.
    pub fn from_rdev(rdev: u64) -> DeviceNumber {
        let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
        let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
        DeviceNumber { major: major as u32, minor: minor as u32 }
    }

    /// The number of the character device at `path`; `None` when the path
    /// is missing or not a character device (nothing a cgroup can guard).
    pub fn of_path(path: &std::path::Path) -> Option<DeviceNumber> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let meta = std::fs::metadata(path).ok()?;
        meta.file_type().is_char_device().then(|| DeviceNumber::from_rdev(meta.rdev()))
    }
}

impl fmt::Display for DeviceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl FromStr for DeviceNumber {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("device number {s:?} is not of the form MAJOR:MINOR (e.g. \"195:0\")");
        let (major, minor) = s.trim().split_once(':').ok_or_else(bad)?;
        let (major, minor): (u32, u32) = (major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?);
        // Linux's dev_t: 12-bit majors, 20-bit minors.
        if major >= 1 << 12 || minor >= 1 << 20 {
            return Err(format!("device number {s:?} is out of range (major below 4096, minor below 1048576)"));
        }
        Ok(DeviceNumber { major, minor })
    }
}

impl Serialize for DeviceNumber {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DeviceNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether a UUID names a MIG instance (`MIG-…`, NVIDIA's form since
/// driver R470; the older `MIG-GPU-…/gi/ci` form starts the same way).
pub fn is_mig_uuid(uuid: &str) -> bool {
    uuid.starts_with("MIG-")
}

impl Device {
    /// The MIG profile (`1g.10gb`) when this device is a MIG instance: its
    /// UUID is `MIG-…` and its model is NVML's `<GPU model> MIG <profile>`.
    /// A MIG instance's `pci_bus_id` and `path` are its parent GPU's.
    pub fn mig_profile(&self) -> Option<&str> {
        if !is_mig_uuid(&self.uuid) {
            return None;
        }
        self.attributes.model.rsplit_once(" MIG ").map(|(_, profile)| profile.trim()).filter(|p| !p.is_empty())
    }

    /// The published attributes of this device under the type's prefix, in
    /// the order design.md lists them (`GPGPUMainMemorySize` …). Per-node
    /// counts (`…TotalInstances`) are the provider's business, not a device's.
    pub fn published_attributes(&self, prefix: &str) -> Vec<(String, String)> {
        self.attributes.published(prefix, &self.vendor)
    }
}

impl DeviceAttributes {
    /// A device known only by its model and memory (a ledger row, a test).
    pub fn new(model: impl Into<String>, memory_mib: u64) -> DeviceAttributes {
        DeviceAttributes {
            model: model.into(),
            memory_mib,
            compute_capability: None,
            architecture: None,
            multiprocessors: None,
            cores_per_mp: None,
            cores: None,
            clock_mhz: None,
            ecc: false,
        }
    }

    /// These attributes and the `vendor` under `prefix` (`GPGPUVendor`,
    /// `GPGPUModel`, `GPGPUMainMemorySize` …): the one source of the names.
    pub fn published(&self, prefix: &str, vendor: &str) -> Vec<(String, String)> {
        let mut out = vec![
            (format!("{prefix}Vendor"), vendor.to_string()),
            (format!("{prefix}Model"), self.model.clone()),
            (format!("{prefix}MainMemorySize"), self.memory_mib.to_string()),
        ];
        if let Some(cc) = self.compute_capability {
            out.push((format!("{prefix}CUDAComputeCapability"), cc.to_string()));
        }
        if let Some(v) = self.multiprocessors {
            out.push((format!("{prefix}MP"), v.to_string()));
        }
        if let Some(v) = self.cores_per_mp {
            out.push((format!("{prefix}CoresPerMP"), v.to_string()));
        }
        if let Some(v) = self.cores {
            out.push((format!("{prefix}Cores"), v.to_string()));
        }
        if let Some(v) = self.clock_mhz {
            out.push((format!("{prefix}ClockSpeed"), v.to_string()));
        }
        out.push((format!("{prefix}ECCSupport"), if self.ecc { "true" } else { "false" }.into()));
        out
    }
}

/// Whether a device can be given to a job. Administrative draining is a
/// state of the allocator, not of the device, so it is not listed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// In service.
    #[default]
    Healthy,
    /// Out of service: never handed out, counted offline.
    Unhealthy,
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
        })
    }
}

/// A CUDA-style compute capability, `major.minor`. Written as the string
/// `"8.6"` (or the TOML float `8.6`) so that `8.10` never collapses to `8.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// The major version.
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl FromStr for ComputeCapability {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("compute capability {s:?} is not of the form MAJOR.MINOR (e.g. \"8.6\")");
        let (major, minor) = s.trim().split_once('.').ok_or_else(bad)?;
        Ok(ComputeCapability { major: major.parse().map_err(|_| bad())?, minor: minor.parse().map_err(|_| bad())? })
    }
}

impl Serialize for ComputeCapability {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ComputeCapability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Number(f64),
        }
        match Repr::deserialize(d)? {
            Repr::Text(s) => s.parse().map_err(serde::de::Error::custom),
            // A TOML float 8.6 is taken at its one-decimal reading.
            Repr::Number(f) if f >= 0.0 && f.is_finite() => format!("{f:.1}").parse().map_err(serde::de::Error::custom),
            Repr::Number(f) => Err(serde::de::Error::custom(format!("compute capability {f} is negative"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_capability_round_trips_as_text() {
        let cc: ComputeCapability = "8.10".parse().unwrap();
        assert_eq!(cc, ComputeCapability { major: 8, minor: 10 });
        assert_eq!(cc.to_string(), "8.10");
        assert_eq!(serde_json::to_string(&cc).unwrap(), "\"8.10\"");
        assert!("eight".parse::<ComputeCapability>().is_err());
        assert!("8".parse::<ComputeCapability>().is_err());
    }

    #[test]
    fn device_numbers_parse_split_and_print() {
        let n: DeviceNumber = "195:3".parse().unwrap();
        assert_eq!(n, DeviceNumber { major: 195, minor: 3 });
        assert_eq!(n.to_string(), "195:3");
        assert!("195".parse::<DeviceNumber>().unwrap_err().contains("MAJOR:MINOR"));
        assert!("4096:0".parse::<DeviceNumber>().unwrap_err().contains("out of range"));
        // /dev/null is 1:3; a large minor lands in the high bits.
        assert_eq!(DeviceNumber::from_rdev(0x0103), DeviceNumber { major: 1, minor: 3 });
        let rdev = (0x12u64 << 8) | 0x34 | (0x567u64 << 20);
        assert_eq!(DeviceNumber::from_rdev(rdev), DeviceNumber { major: 0x12, minor: 0x56734 });
        assert_eq!(DeviceNumber::of_path(std::path::Path::new("/dev/null")), Some(DeviceNumber { major: 1, minor: 3 }));
        assert_eq!(DeviceNumber::of_path(std::path::Path::new("/etc/hostname")), None);
    }

    #[test]
    fn published_attributes_use_the_prefix() {
        let d = Device {
            cder_type: "gpgpu".into(),
            vendor: "Nvidia".into(),
            index: 0,
            uuid: "GPU-1".into(),
            pci_bus_id: "0000:01:00.0".into(),
            attributes: DeviceAttributes {
                model: "GeForce GTS 450".into(),
                memory_mib: 1023,
                compute_capability: Some("2.1".parse().unwrap()),
                architecture: None,
                multiprocessors: Some(4),
                cores_per_mp: Some(48),
                cores: Some(192),
                clock_mhz: Some(1566),
                ecc: false,
            },
            path: "/dev/nvidia0".into(),
            dev: None,
            numa_node: 0,
            health: Health::Healthy,
        };
        assert_eq!(d.mig_profile(), None);
        let mig_attributes =
            DeviceAttributes { model: "NVIDIA A100 80GB PCIe MIG 1g.10gb".into(), ..d.attributes.clone() };
        let mig = Device { uuid: "MIG-1".into(), attributes: mig_attributes, ..d.clone() };
        assert_eq!(mig.mig_profile(), Some("1g.10gb"));
        let attrs = d.published_attributes("GPGPU");
        assert!(attrs.contains(&("GPGPUCUDAComputeCapability".into(), "2.1".into())));
        assert!(attrs.contains(&("GPGPUCores".into(), "192".into())));
        assert!(attrs.contains(&("GPGPUECCSupport".into(), "false".into())));
        // Flat keys in the JSON, in their old place.
        let json = serde_json::to_string(&d).unwrap();
        assert!(json.contains(r#""pci_bus_id":"0000:01:00.0","model":"GeForce GTS 450","memory_mib":1023,"#), "{json}");
        assert!(json.contains(r#""ecc":false,"path":"/dev/nvidia0""#), "{json}");
        assert_eq!(serde_json::from_str::<Device>(&json).unwrap(), d);
    }
}
