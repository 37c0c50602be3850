//! Discovery of AMD GPUs through ROCm SMI.

use cder_model::{CderType, Device};

use crate::{DeviceReading, InventoryError};

/// Discovers every device the library reports for this type.
pub fn discover(_cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    unimplemented!("issue 46: rocm_smi discovery")
}

/// Reads health and use of every device the library reports.
pub fn read(_cder: &CderType) -> Result<Vec<DeviceReading>, InventoryError> {
    unimplemented!("issue 46: rocm_smi readings")
}
