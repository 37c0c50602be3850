//! Discovery of Intel GPUs through the Level Zero loader.

use cder_model::{CderType, Device};

use crate::{DeviceReading, InventoryError};

/// Discovers every device the library reports for this type.
pub fn discover(_cder: &CderType) -> Result<Vec<Device>, InventoryError> {
    unimplemented!("issue 46: level_zero discovery")
}

/// Reads health and use of every device the library reports.
pub fn read(_cder: &CderType) -> Result<Vec<DeviceReading>, InventoryError> {
    unimplemented!("issue 46: level_zero readings")
}
