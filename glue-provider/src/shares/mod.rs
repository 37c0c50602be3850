//! Per-VO ComputingShares: what each VO can get of a queue's devices.
//!
//! A site gives VOs different parts of its cluster: a SLURM partition open
//! to some accounts (`AllowAccounts`, `AllowGroups`, `AllowQos`), a QOS
//! that caps a VO's GPUs (`GrpTRES=gres/gpu=4`) or a job's
//! (`MaxTRESPerJob=gres/gpu=2`); a TORQUE queue with `acl_groups` and
//! `resources_max`. The `[[vo]]` tables of the config say which accounts,
//! groups, users and QOS are each VO's, as sites map a VO to pool accounts.
//!
//! One [`VoShare`] per (queue, VO) the queue admits. Its figures per device
//! type are what a job of that VO could get now:
//!
//! * `free` = min(the queue's free devices, the room left under each QOS
//!   limit that applies: limit − devices the QOS already holds);
//! * `used` = devices held by the VO's running jobs in the queue;
//! * `total` = min(the queue's devices, each applying limit);
//! * `max_per_job` = min(the most devices on one node of the queue, each
//!   applying per-job limit).
//!
//! [`slurm`] and [`torque`] read them off the batch system.

pub mod slurm;
pub mod torque;

use std::collections::BTreeMap;

use crate::config::{CountSourceKind, ProviderConfig, VoConfig};
use crate::error::ProviderError;
use crate::site::NodeGroup;

pub use crate::sources::counts::{ShareDevices, VoShare};

/// The share ID of `queue` for `vo`: `<queue>_<vo>_<service id>`.
pub fn share_id(queue: &str, vo: &str, service_id: &str) -> String {
    format!("{queue}_{vo}_{service_id}")
}

/// Whether a job run as `account`/`group`/`user`/`qos` is the VO's.
pub fn job_is_vos(vo: &VoConfig, account: &str, group: &str, user: &str, qos: &str) -> bool {
    let has = |list: &[String], v: &str| !v.is_empty() && list.iter().any(|x| x == v);
    has(&vo.accounts, account) || has(&vo.groups, group) || has(&vo.users, user) || has(&vo.qos, qos)
}

/// The per-VO shares, from the batch system the counts come from; none
/// without `[[vo]]`.
pub fn from_config(config: &ProviderConfig, groups: &[NodeGroup]) -> Result<Vec<VoShare>, ProviderError> {
    if config.vos.is_empty() {
        return Ok(Vec::new());
    }
    let timeout = std::time::Duration::from_secs((*config.counts.timeout_s.get_ref()).max(1));
    match config.counts.source.get_ref() {
        CountSourceKind::Slurm => slurm::SlurmShares::from_config(config, timeout).shares(config, groups),
        CountSourceKind::Torque => torque::TorqueShares::from_config(config, timeout).shares(config, groups),
        // The config check refuses [[vo]] with other sources.
        _ => Ok(Vec::new()),
    }
}

/// A queue's devices of one prefix: the sum of its nodes' counts and the
/// most devices on one node.
pub(crate) type QueueDevices = BTreeMap<String, (crate::sources::Counts, u32)>;

/// The device classes of the nodes `hosts`, per prefix: the sum of each
/// node's counts (as `node` reads them) and the most devices on one node;
/// and the ExecutionEnvironments those nodes belong to.
pub(crate) fn queue_devices(
    groups: &[NodeGroup],
    hosts: &dyn Fn(&str) -> bool,
    mut node: impl FnMut(&str, &crate::site::DeviceClass) -> Result<crate::sources::Counts, ProviderError>,
) -> Result<(Vec<String>, QueueDevices), ProviderError> {
    let mut environments = Vec::new();
    let mut out = QueueDevices::new();
    for group in groups {
        let members: Vec<&String> = group.nodes.iter().filter(|h| hosts(h)).collect();
        if members.is_empty() {
            continue;
        }
        for env in group.environments() {
            environments.push(env.id);
        }
        for host in members {
            let mut per_node: BTreeMap<&str, u32> = BTreeMap::new();
            for class in &group.classes {
                let c = node(host, class)?;
                let slot = out.entry(class.prefix.clone()).or_default();
                slot.0 = slot.0.checked_add(c).map_err(|field| {
                    ProviderError::Runtime(format!(
                        "node {host}: more {field} {} devices than a count holds",
                        class.key
                    ))
                })?;
                let n = per_node.entry(class.prefix.as_str()).or_default();
                *n = n.saturating_add(class.per_node);
            }
            for (prefix, n) in per_node {
                let slot = out.entry(prefix.to_string()).or_default();
                slot.1 = slot.1.max(n);
            }
        }
    }
    Ok((environments, out))
}

/// A limit on a VO's devices: `limit` of them, `held` already taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimit {
    /// The most the jobs under the limit may hold together.
    pub limit: u32,
    /// What they hold now.
    pub held: u32,
}

/// The share's figures: the queue's counts cut by the limits that apply.
pub fn share_devices(
    queue: crate::sources::Counts,
    per_node_max: u32,
    used_by_vo: u32,
    group_limits: &[GroupLimit],
    job_limits: &[u32],
) -> ShareDevices {
    let room = group_limits.iter().map(|l| l.limit.saturating_sub(l.held)).min().unwrap_or(u32::MAX);
    let cap = group_limits.iter().map(|l| l.limit).min().unwrap_or(u32::MAX);
    ShareDevices {
        total: queue.total.min(cap),
        free: queue.free.min(room),
        used: used_by_vo.min(queue.used),
        max_per_job: job_limits.iter().copied().fold(per_node_max, u32::min),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Counts;

    #[test]
    fn a_group_limit_leaves_only_its_room_free() {
        let queue = Counts { total: 8, free: 5, used: 3, offline: 0 };
        // GrpTRES=gres/gpu=4 with 3 held: 1 free though the partition has 5.
        let d = share_devices(queue, 4, 3, &[GroupLimit { limit: 4, held: 3 }], &[]);
        assert_eq!(d, ShareDevices { total: 4, free: 1, used: 3, max_per_job: 4 });
        // No limit: the queue's own figures; a per-job cap below the node's devices.
        let d = share_devices(queue, 4, 0, &[], &[2]);
        assert_eq!(d, ShareDevices { total: 8, free: 5, used: 0, max_per_job: 2 });
        // A limit already overrun (lowered while jobs run) leaves nothing, never wraps.
        let d = share_devices(queue, 4, 3, &[GroupLimit { limit: 2, held: 3 }], &[]);
        assert_eq!((d.total, d.free), (2, 0));
    }

    #[test]
    fn jobs_belong_to_a_vo_by_any_of_its_names() {
        let vo = VoConfig {
            name: toml::Spanned::new(0..0, "atlas".into()),
            accounts: vec!["atlas".into()],
            groups: vec!["atlasgrp".into()],
            users: vec![],
            qos: vec!["atlas-gpu".into()],
            queues: None,
        };
        assert!(job_is_vos(&vo, "atlas", "", "", ""));
        assert!(job_is_vos(&vo, "other", "atlasgrp", "", ""));
        assert!(job_is_vos(&vo, "other", "x", "u", "atlas-gpu"));
        assert!(!job_is_vos(&vo, "cms", "cms", "cms001", "normal"));
        assert!(!job_is_vos(&vo, "", "", "", ""));
    }
}
