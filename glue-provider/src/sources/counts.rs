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
