//! What a vendor library says of a device now. A module of its own, as
//! `error` is, because the root calls the modules that make readings.

/// What a vendor library says of one device now: for the health watch and
/// the usage sampler of the types NVML does not serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceReading {
    /// The device's `uuid`, as discovery gave it.
    pub uuid: String,
    /// Why the device cannot be used now (lost, a RAS fault), if it cannot.
    pub fault: Option<String>,
    /// Uncorrectable memory errors since the driver loaded, where reported:
    /// a count that grows drains the device.
    pub uncorrected_errors: Option<u64>,
    /// Busy percentage of the device's compute engines, where reported.
    pub utilisation_percent: Option<u32>,
    /// Device memory in use, in MiB, where reported.
    pub memory_used_mib: Option<u64>,
}
