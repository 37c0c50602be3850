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
                        if c.shares_total > 0 {
                            // cderd's shared GPUs all have the same number of shares.
                            let per_gpu = status.shares.iter().find(|s| s.cder_type == class.cder_type).map(|s| s.total);
                            let present = c.total.saturating_sub(c.unhealthy).max(1);
                            let per_gpu = per_gpu.unwrap_or(c.shares_total / present);
                            let s = ShareCounts { total: c.shares_total, free: c.shares_free, used: c.shares_used, per_gpu };
                            shares.insert(class.key.clone(), s);
                        }
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
                    devices.insert(class.key.clone(), counts);
                }
                Ok(GroupCounts { devices, nodes_used: None, nodes_unavailable: None, hosts: hosts.clone(), shares })
            })
            .collect()
    }
}
