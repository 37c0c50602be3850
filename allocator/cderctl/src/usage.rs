//! What cderd's sampler measured, in the shape the exporters here need.

use std::collections::HashMap;

use cder_model::JobKey;
use cder_protocol::{Client, ClientError};

use crate::apel::Measured;

/// Active seconds per job and device from cderd's `usage`.
pub fn measured(_client: &mut Client) -> Result<HashMap<(JobKey, String), Measured>, ClientError> {
    Ok(HashMap::new())
}
