//! What cderd's sampler measured, in the shape the APEL records need.

use std::collections::{BTreeMap, HashMap};

use cder_model::JobKey;
use cder_protocol::{Client, ClientError, UsageRequest};

use super::apel::{Measured, Month};

/// Active seconds per job and device of every job that held a device since
/// `since`, from cderd's `usage`, in all and per month. A device the sampler
/// got no utilisation for (`active_seconds` null) is left out: its activity
/// is unknown. Where one of a job's rows on a device has no months (sampled
/// by a cderd before it kept them), the device has none.
pub fn measured(client: &mut Client, since: i64) -> Result<HashMap<(JobKey, String), Measured>, ClientError> {
    let usage = client.usage(&UsageRequest { since: Some(since), ..UsageRequest::default() })?;
    let mut out: HashMap<(JobKey, String), Measured> = HashMap::new();
    for d in usage.devices {
        let Some(active) = d.active_seconds else { continue };
        // A job requeued onto the same device has one row per allocation.
        let m = out
            .entry((d.job, d.uuid))
            .or_insert_with(|| Measured { months: Some(BTreeMap::new()), ..Measured::default() });
        m.device_seconds += d.device_seconds;
        m.active_seconds += active.round() as i64;
        if d.months.is_empty() && d.samples > 0 {
            m.months = None;
        }
        if let Some(months) = &mut m.months {
            for u in &d.months {
                // cderd writes `YYYY-MM`; a month it cannot name is no month.
                let Ok(month) = u.month.parse::<Month>() else { continue };
                let slot = months.entry(month).or_insert(Some(0.0));
                *slot = slot.zip(u.active_seconds).map(|(a, b)| a + b);
            }
        }
    }
    Ok(out)
}
