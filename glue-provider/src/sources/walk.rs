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

#[cfg(test)]
mod tests {
    use crate::sources::{parse_pbsnodes, parse_scontrol, HostFacts, NodeFacts};

    use super::LrmsNode;

    #[test]
    fn listings_give_each_node_its_cpus_slots_memory_and_version() {
        let slurm = parse_scontrol(b"NodeName=wn01 CoresPerSocket=8 CPUAlloc=4 CPUTot=32 Gres=gpu:2 GresUsed=gpu:0 Version=22.05.8 OS=Linux 5.10.0 #1 SMP RealMemory=64000 Sockets=2 Boards=1 State=MIXED ThreadsPerCore=2\n").unwrap();
        assert_eq!(
            slurm[0].facts(),
            NodeFacts {
                physical_cpus: Some(2),
                logical_cpus: Some(32),
                slots: Some(32),
                virtual_memory_mib: None,
                lrms_version: Some("22.05.8".into())
            }
        );
        assert!(parse_scontrol(b"NodeName=wn01 CPUTot=lots State=IDLE\n")
            .unwrap_err()
            .to_string()
            .contains("CPUTot=lots"));
        let torque = parse_pbsnodes(b"<Data><Node><name>wn01</name><state>free</state><np>40</np>\
<status>opsys=linux,uname=Linux wn01 3.10.0 #1 SMP x86_64,totmem=20971520kb,physmem=16777216kb,ncpus=32,version=6.1.3,jobs=</status>\
<total_sockets>2</total_sockets><gpus>2</gpus></Node><Node><name>wn02</name><state>down</state><np>40</np></Node></Data>").unwrap();
        assert_eq!(
            torque[0].facts(),
            NodeFacts {
                physical_cpus: Some(2),
                logical_cpus: Some(32),
                slots: Some(40),
                virtual_memory_mib: Some(20480),
                lrms_version: Some("6.1.3".into())
            }
        );
        assert_eq!(torque[1].facts(), NodeFacts { slots: Some(40), ..NodeFacts::default() });
        assert!(parse_pbsnodes(b"<Data><Node><name>x</name><status>totmem=much</status></Node></Data>").is_err());
        let unknown =
            parse_pbsnodes(b"<Data><Node><name>x</name><status>totmem=? 15201,ncpus=4</status></Node></Data>").unwrap();
        assert_eq!((unknown[0].totmem_mb, unknown[0].ncpus), (None, Some(4)));
    }

    #[test]
    fn a_group_sums_its_nodes_and_fills_silent_ones_from_the_others() {
        let node = |sockets, cpus, slots, mb| NodeFacts {
            physical_cpus: sockets,
            logical_cpus: cpus,
            slots,
            virtual_memory_mib: mb,
            lrms_version: None,
        };
        // Every node reports: sums, and the smallest memory.
        let h = HostFacts::from_nodes(&[
            node(Some(2), Some(32), Some(32), Some(81000)),
            node(Some(2), Some(32), Some(32), Some(80999)),
        ])
        .unwrap();
        assert_eq!(
            (h.physical_cpus, h.total_physical_cpus, h.total_logical_cpus, h.total_slots),
            (Some(2), Some(4), Some(64), Some(64))
        );
        assert_eq!(h.virtual_memory_mib, Some(80999));
        // A down node without figures: identical nodes, so the agreed value times the nodes; no slot total.
        let h =
            HostFacts::from_nodes(&[node(Some(2), Some(32), Some(32), None), node(None, None, None, None)]).unwrap();
        assert_eq!((h.total_physical_cpus, h.total_logical_cpus, h.total_slots), (Some(4), Some(64), None));
        // Nodes that disagree: no per-node value; the sum when all report, else unknown.
        let h = HostFacts::from_nodes(&[node(None, Some(32), None, None), node(None, Some(16), None, None)]).unwrap();
        assert_eq!((h.logical_cpus, h.total_logical_cpus), (None, Some(48)));
        let h = HostFacts::from_nodes(&[
            node(None, Some(32), None, None),
            node(None, Some(16), None, None),
            node(None, None, None, None),
        ])
        .unwrap();
        assert_eq!(h.total_logical_cpus, None);
        assert_eq!(
            HostFacts::from_nodes(&[node(None, Some(u32::MAX), None, None), node(None, Some(1), None, None)]),
            Err("logical CPUs")
        );
    }
}
