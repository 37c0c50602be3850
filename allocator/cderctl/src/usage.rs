//! What cderd's sampler measured, in the shape the APEL records need.

use std::collections::HashMap;

use cder_model::JobKey;
use cder_protocol::{Client, ClientError, UsageRequest};

use super::apel::Measured;

/// Active seconds per job and device of every job that held a device since
/// `since`, from cderd's `usage`. A device the sampler got no utilisation
/// for (`active_seconds` null) is left out: its activity is unknown.
pub fn measured(client: &mut Client, since: i64) -> Result<HashMap<(JobKey, String), Measured>, ClientError> {
    let usage = client.usage(&UsageRequest { since: Some(since), ..UsageRequest::default() })?;
    let mut out: HashMap<(JobKey, String), Measured> = HashMap::new();
    for d in usage.devices {
        let Some(active) = d.active_seconds else { continue };
        // A job requeued onto the same device has one row per allocation.
        let m = out.entry((d.job, d.uuid)).or_insert(Measured { device_seconds: 0, active_seconds: 0 });
        m.device_seconds += d.device_seconds;
        m.active_seconds += active.round() as i64;
    }
    Ok(out)
}
