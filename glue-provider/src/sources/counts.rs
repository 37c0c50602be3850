//! The vocabulary every count source shares: a group's device counts and
//! the [`CountSource`] trait.

use std::collections::BTreeMap;

use crate::error::ProviderError;
use crate::site::NodeGroup;

/// Device counts of one type over a whole group. Offline counts drained,
/// unhealthy and down-node devices, which are neither free nor used:
/// `total = free + used + offline`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Devices of the type over the group.
    pub total: u32,
    /// Devices a job could be given now.
    pub free: u32,
    /// Devices held by jobs.
    pub used: u32,
    /// Devices drained, unhealthy or on an unavailable node.
    pub offline: u32,
}

impl Counts {
    /// Adds `other`, or names the first count that would not fit in a u32
    /// (a listing that claims more devices than any site has is refused,
    /// never wrapped or capped).
    pub(crate) fn checked_add(self, other: Counts) -> Result<Counts, &'static str> {
        Ok(Counts {
            total: self.total.checked_add(other.total).ok_or("total")?,
            free: self.free.checked_add(other.free).ok_or("free")?,
            used: self.used.checked_add(other.used).ok_or("used")?,
            offline: self.offline.checked_add(other.offline).ok_or("offline")?,
        })
    }
}

/// The dynamic state of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupCounts {
    /// By class key ([`crate::site::DeviceClass::key`]: the type name unless mixed).
    pub devices: BTreeMap<String, Counts>,
    /// Nodes running jobs, where the source knows it.
    pub nodes_used: Option<u32>,
    /// Nodes down, drained or otherwise unavailable, where the source knows it.
    pub nodes_unavailable: Option<u32>,
}

/// A source of dynamic counts: one [`GroupCounts`] per group, in order.
pub trait CountSource {
    /// The counts of each group in `groups`, in the same order; an error when the LRMS cannot be
    /// asked or answers nonsense, so nothing stale is published.
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError>;
}

/// One per-VO ComputingShare: a queue as one VO sees it (filled by
/// [`crate::shares`]; here so that the snapshot holds it without a circle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoShare {
    /// `GLUE2ShareID`: `<queue>_<vo>_<service id>`, as CREAM names its VO shares.
    pub id: String,
    /// The queue (SLURM partition, TORQUE queue): `GLUE2ComputingShareMappingQueue`.
    pub queue: String,
    /// The VO (`GLUE2PolicyRule: VO:<vo>`).
    pub vo: String,
    /// `GLUE2ComputingShareServingState`: `production`, `draining`, `closed`.
    pub serving_state: &'static str,
    /// The ExecutionEnvironments the queue's nodes belong to.
    pub environments: Vec<String>,
    /// Per device prefix (`GPGPU`): the VO's figures.
    pub devices: BTreeMap<String, ShareDevices>,
}

/// A share's figures for one device type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareDevices {
    /// The most the VO can hold in the queue at once.
    pub total: u32,
    /// What a job of the VO could be given now.
    pub free: u32,
    /// Held by the VO's running jobs in the queue.
    pub used: u32,
    /// The most one job can get (on one node).
    pub max_per_job: u32,
}
