//! Counts written in the config.

use std::collections::BTreeMap;

pub use crate::config::static_total;
use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::counts::{CountSource, Counts, GroupCounts};

/// Counts written in the config (`free`, `used`, `offline` of each `[[group.device]]`).
#[derive(Debug, Clone, Copy)]
pub struct ConfiguredCounts;

impl CountSource for ConfiguredCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        groups
            .iter()
            .map(|group| {
                let mut devices = BTreeMap::new();
                // Configured groups have one class per [[group.device]], in order.
                for (dev, class) in group.config.devices.iter().zip(&group.classes) {
                    let total = static_total(dev.count, group.nodes.len()).ok_or_else(|| {
                        ProviderError::Input(format!("group {:?}, type {}: group.device.count {} × {} nodes is more devices than a count holds", group.id(), dev.cder_type, dev.count, group.nodes.len()))
                    })?;
                    let used = dev.used.unwrap_or(0);
                    let offline = dev.offline.unwrap_or(0);
                    let free = dev.free.unwrap_or_else(|| total.saturating_sub(used.saturating_add(offline)));
                    // In u64: three u32s cannot overflow it, so a sum past u32 is "not the total", not a wrap.
                    if u64::from(free) + u64::from(used) + u64::from(offline) != u64::from(total) {
                        return Err(ProviderError::Input(format!(
                            "group {:?}, type {}: free {free} + used {used} + offline {offline} is not the {total} devices of {} nodes × {}",
                            group.id(),
                            dev.cder_type,
                            group.nodes.len(),
                            dev.count
                        )));
                    }
                    devices.insert(class.key.clone(), Counts { total, free, used, offline });
                }
                Ok(GroupCounts { devices, ..GroupCounts::default() })
            })
            .collect()
    }
}
