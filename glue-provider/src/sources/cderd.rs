//! Counts from the local cderd (`status`), on a single node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cder_protocol::DeviceState;

use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::counts::{CountSource, Counts, GroupCounts, ShareCounts};

/// Counts from the local cderd's `status` reply.
#[derive(Debug, Clone)]
pub struct CderdCounts {
    /// cderd's socket.
    pub socket: PathBuf,
    /// How long to wait for cderd's reply before publishing nothing.
    pub timeout: Duration,
}

/// The shares of `class`'s devices (its members, or every device of its
/// type) that cderd offers as shares; `None` where it shares none.
fn share_counts(status: &cder_protocol::Status, class: &crate::site::DeviceClass) -> Option<ShareCounts> {
    let per_gpu = status.counts.get(&class.cder_type).map_or(0, |c| c.shares_per_device);
    if per_gpu == 0 {
        return None;
    }
    let mut s = ShareCounts { per_gpu, ..ShareCounts::default() };
    let devices = status
        .devices
        .iter()
        .filter(|d| d.cder_type == class.cder_type && (class.members.is_empty() || class.members.contains(&d.uuid)));
    for d in devices {
        let held: u32 = status.shares.iter().filter(|h| h.uuid == d.uuid).map(|h| h.shares).sum();
        s.total += per_gpu;
        s.used += held;
        if matches!(d.state, DeviceState::Free | DeviceState::Allocated) {
            s.free += per_gpu.saturating_sub(held);
        }
    }
    Some(s)
}

impl CountSource for CderdCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        let status = cder_protocol::Client::connect(&self.socket, self.timeout)
            .and_then(|mut client| client.status())
            .map_err(|e| ProviderError::Runtime(format!("cderd status: {e}")))?;
        // A cderd site is this one node: its CPUs, memory and OS are the local ones.
        let hosts = crate::sources::host::local_facts(self.timeout)?;
        groups
            .iter()
            .map(|group| {
                let mut devices = BTreeMap::new();
                let mut shares = BTreeMap::new();
                for class in &group.classes {
                    let counts = if class.members.is_empty() {
                        let c = status.counts.get(&class.cder_type).ok_or_else(|| {
                            ProviderError::Runtime(format!("cderd at {} reports no {} devices, but group {:?} has them", self.socket.display(), class.cder_type, group.id()))
                        })?;
                        let offline = c.offline.checked_add(c.unhealthy).ok_or_else(|| {
                            ProviderError::Runtime(format!("cderd at {} reports {} offline and {} unhealthy {} devices: more than a count holds", self.socket.display(), c.offline, c.unhealthy, class.cder_type))
                        })?;
                        Counts { total: c.total, free: c.free, used: c.allocated, offline }
                    } else {
                        // Per device, so that each kind of device gets its own counts.
                        let mut c = Counts::default();
                        for uuid in &class.members {
                            let d = status.devices.iter().find(|d| &d.uuid == uuid).ok_or_else(|| {
                                ProviderError::Runtime(format!("device {uuid} of this node's inventory is unknown to cderd at {}: do the provider and cderd read the same cder.toml?", self.socket.display()))
                            })?;
                            c.total += 1;
                            match d.state {
                                DeviceState::Free => c.free += 1,
                                DeviceState::Allocated => c.used += 1,
                                DeviceState::Offline | DeviceState::Unhealthy => c.offline += 1,
                            }
                        }
                        c
                    };
                    if let Some(s) = share_counts(&status, class) {
                        shares.insert(class.key.clone(), s);
                    }
                    devices.insert(class.key.clone(), counts);
                }
                Ok(GroupCounts { devices, nodes_used: None, nodes_unavailable: None, hosts: hosts.clone(), shares })
            })
            .collect()
    }
}
