//! The group walk both batch-system sources share: one listing of nodes
//! gives every group its counts.

use std::collections::BTreeMap;

use crate::error::ProviderError;
use crate::site::{DeviceClass, NodeGroup};
use crate::sources::counts::{Counts, GroupCounts, HostFacts, NodeFacts};

/// What the group walk needs to know of a batch system's view of a node.
pub(crate) trait LrmsNode {
    /// Down, drained, offline: takes no jobs.
    fn unavailable(&self) -> bool;
    /// Runs at least one job.
    fn busy(&self) -> bool;
    /// Its CPUs, slots and memory, as far as the listing says.
    fn facts(&self) -> NodeFacts;
}

/// Counts every group from one batch-system listing of its nodes: used and
/// unavailable nodes, and each device class's counts as `devices` reads
/// them off a node. A node the listing (`listing`, for messages) lacks is an
/// error, never "all free".
pub(crate) fn walk_groups<N: LrmsNode>(
    groups: &[NodeGroup],
    nodes: &BTreeMap<String, N>,
    listing: &str,
    mut devices: impl FnMut(&str, &N, &DeviceClass) -> Result<Counts, ProviderError>,
) -> Result<Vec<GroupCounts>, ProviderError> {
    groups
        .iter()
        .map(|group| {
            let mut out = GroupCounts::default();
            let (mut used, mut unavailable) = (0, 0);
            let mut facts = Vec::with_capacity(group.nodes.len());
            for host in &group.nodes {
                let node = nodes.get(host).ok_or_else(|| {
                    ProviderError::Runtime(format!("group {:?}: node {host:?} is not known to {listing}", group.id()))
                })?;
                if node.unavailable() {
                    unavailable += 1;
                } else if node.busy() {
                    used += 1;
                }
                facts.push(node.facts());
                for class in &group.classes {
                    let sum = out.devices.entry(class.key.clone()).or_default();
                    *sum = sum.checked_add(devices(host, node, class)?).map_err(|field| {
                        ProviderError::Runtime(format!(
                            "group {:?}: {listing} gives more {field} {} devices than a count holds (at node {host:?})",
                            group.id(),
                            class.key
                        ))
                    })?;
                }
            }
            out.nodes_used = Some(used);
            out.nodes_unavailable = Some(unavailable);
            out.hosts = HostFacts::from_nodes(&facts).map_err(|what| {
                ProviderError::Runtime(format!(
                    "group {:?}: {listing} gives more {what} than a count holds",
                    group.id()
                ))
            })?;
            Ok(out)
        })
        .collect()
}

/// A node's devices: those in use stay used; the rest are free, or offline
/// when the node cannot take jobs.
pub(crate) fn node_counts(total: u32, used: u32, unavailable: bool) -> Counts {
    // The callers cap used at total; capping here too keeps the sum exact
    // whatever a listing claims.
    let used = used.min(total);
    let idle = total - used;
    if unavailable {
        Counts { total, free: 0, used, offline: idle }
    } else {
        Counts { total, free: idle, used, offline: 0 }
    }
}
