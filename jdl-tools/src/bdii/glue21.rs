//! GLUE 2.1 accelerator entities as phase-1 input.
//!
//! A site publishing with the provider's `glue21-accelerator` strategy
//! (deploy/bdii/GLUE21-accelerator.schema) describes its devices with a
//! `GLUE2AcceleratorEnvironment` per kind of device of an
//! ExecutionEnvironment instead of CDER keys. Each one is read here as the
//! `GLUE2Extension`s the class-extension strategy would have published on
//! that ExecutionEnvironment, under the same JDL names (`GPGPUModel`,
//! `GPGPUMainMemorySize`, …), so the rest of phase 1 treats both alike.
//!
//! Type → prefix: `GPU` → `GPGPU` (cder's GPGPU prefix), any other type → its
//! upper-cased name (`FPGA`, `MIC`). Attributes: Vendor → `Vendor`, Model →
//! `Model`, Memory → `MainMemorySize`, ClockSpeed → `ClockSpeed`,
//! ComputeCapability → `CUDAComputeCapability`, LogicalAccelerators →
//! `PerNode`. The share and manager AcceleratorInfo counts are not read.

use cder_request::glue;

use crate::bdii::entry::{service_dn, Entry};

/// The discovery filter: every AcceleratorEnvironment of the grid. (A BDII
/// without the GLUE 2.1 schema answers it with nothing.)
pub const FILTER: &str = "(objectClass=GLUE2AcceleratorEnvironment)";

/// The attributes [`FILTER`]'s search asks for.
pub const ATTRIBUTES: &[&str] = &[
    "GLUE2AcceleratorEnvironmentID",
    "GLUE2AcceleratorEnvironmentType",
    "GLUE2AcceleratorEnvironmentLogicalAccelerators",
    "GLUE2AcceleratorEnvironmentVendor",
    "GLUE2AcceleratorEnvironmentModel",
    "GLUE2AcceleratorEnvironmentClockSpeed",
    "GLUE2AcceleratorEnvironmentMemory",
    "GLUE2AcceleratorEnvironmentComputeCapability",
    "GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey",
];

/// GLUE 2.1 attribute → CDER key suffix.
const KEYS: [(&str, &str); 6] = [
    ("GLUE2AcceleratorEnvironmentVendor", "Vendor"),
    ("GLUE2AcceleratorEnvironmentModel", "Model"),
    ("GLUE2AcceleratorEnvironmentMemory", "MainMemorySize"),
    ("GLUE2AcceleratorEnvironmentClockSpeed", "ClockSpeed"),
    ("GLUE2AcceleratorEnvironmentComputeCapability", "CUDAComputeCapability"),
    ("GLUE2AcceleratorEnvironmentLogicalAccelerators", glue::PER_NODE_SUFFIX),
];

/// The CDER key prefix of a GLUE 2.1 accelerator type.
pub fn prefix(accelerator_type: &str) -> String {
    if accelerator_type.eq_ignore_ascii_case("GPU") {
        glue::GPGPU_PREFIX.to_string()
    } else {
        accelerator_type.to_ascii_uppercase()
    }
}

/// The Extensions an AcceleratorEnvironment stands for, each placed under
/// its ExecutionEnvironment's DN in the same ComputingService (where the
/// provider puts EEs) with that EE's ID as foreign key. An entry without a
/// type, an EE foreign key or a service above it stands for nothing.
pub fn as_extensions(environments: Vec<Entry>) -> Vec<Entry> {
    let mut out = Vec::new();
    for ae in environments {
        let (Some(kind), Some(ee), Some(service)) =
            (ae.first("GLUE2AcceleratorEnvironmentType"), ae.first("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey"), service_dn(&ae.dn))
        else {
            continue;
        };
        let prefix = prefix(kind);
        for (attribute, suffix) in KEYS {
            let Some(value) = ae.first(attribute) else { continue };
            let key = glue::key(&prefix, suffix);
            let dn = format!("GLUE2ExtensionLocalID={key},GLUE2ResourceID={ee},{service}");
            out.push(Entry::from_pairs(
                &dn,
                [("objectClass", "GLUE2Extension"), ("GLUE2ExtensionKey", key.as_str()), ("GLUE2ExtensionValue", value), ("GLUE2ExtensionEntityForeignKey", ee)],
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accelerator_environment_reads_as_extensions_of_its_ee() {
        let ae = Entry::from_pairs(
            "GLUE2AcceleratorEnvironmentID=ee1_gpgpu,GLUE2ServiceID=ce1,GLUE2GroupID=resource,o=glue",
            [
                ("GLUE2AcceleratorEnvironmentID", "ee1_gpgpu"),
                ("GLUE2AcceleratorEnvironmentType", "GPU"),
                ("GLUE2AcceleratorEnvironmentLogicalAccelerators", "4"),
                ("GLUE2AcceleratorEnvironmentModel", "Tesla K20m"),
                ("GLUE2AcceleratorEnvironmentMemory", "4800"),
                ("GLUE2AcceleratorEnvironmentExecutionEnvironmentForeignKey", "ee1"),
            ],
        );
        let orphan = Entry::from_pairs("GLUE2AcceleratorEnvironmentID=x,o=glue", [("GLUE2AcceleratorEnvironmentType", "GPU")]);
        let x = as_extensions(vec![ae, orphan]);
        let pairs: Vec<(&str, &str, &str)> =
            x.iter().map(|e| (e.first("GLUE2ExtensionKey").unwrap(), e.first("GLUE2ExtensionValue").unwrap(), e.first("GLUE2ExtensionEntityForeignKey").unwrap())).collect();
        assert_eq!(pairs, [("GPGPUModel", "Tesla K20m", "ee1"), ("GPGPUMainMemorySize", "4800", "ee1"), ("GPGPUPerNode", "4", "ee1")]);
        assert_eq!(x[0].dn, "GLUE2ExtensionLocalID=GPGPUModel,GLUE2ResourceID=ee1,GLUE2ServiceID=ce1,GLUE2GroupID=resource,o=glue");
        assert_eq!(prefix("FPGA"), "FPGA");
    }
}
