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
    /// The group's CPUs, slots, memory and OS as the source reports them.
    pub hosts: HostFacts,
    /// By class key: the shares of GPUs offered as shares (SLURM
    /// `gres/shard`), where the source knows them; absent where none is shared.
    pub shares: BTreeMap<String, ShareCounts>,
}

/// The shares of one class's GPUs offered as shares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareCounts {
    /// Every share of those GPUs.
    pub total: u32,
    /// Shares a job could be given now.
    pub free: u32,
    /// Shares jobs hold.
    pub used: u32,
    /// Shares per GPU (the most one job can hold: its shares come from one GPU).
    pub per_gpu: u32,
}

/// What a source reports of one node besides its devices; `None` where it does not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    /// CPU sockets (SLURM `Sockets=`, TORQUE 6 `<total_sockets>`, distinct `physical id`s in /proc/cpuinfo).
    pub physical_cpus: Option<u32>,
    /// Logical CPUs, hardware threads (SLURM `CPUTot=`, TORQUE `ncpus=`, `processor` lines in /proc/cpuinfo).
    pub logical_cpus: Option<u32>,
    /// Job slots the LRMS schedules (SLURM `CPUTot=`, TORQUE `<np>`).
    pub slots: Option<u32>,
    /// RAM plus swap, MiB (TORQUE `totmem=`, /proc/meminfo `MemTotal` + `SwapTotal`).
    pub virtual_memory_mib: Option<u64>,
    /// The LRMS daemon's version on the node (SLURM `Version=`, TORQUE `version=`).
    pub lrms_version: Option<String>,
}

/// A group's CPUs, slots and memory from its nodes' [`NodeFacts`], and its
/// OS where the source can see it (cderd: this node's /etc/os-release).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// Sockets per node, when the nodes that report it agree.
    pub physical_cpus: Option<u32>,
    /// Logical CPUs per node, when the nodes that report it agree.
    pub logical_cpus: Option<u32>,
    /// Sockets of all the group's nodes.
    pub total_physical_cpus: Option<u32>,
    /// Logical CPUs of all the group's nodes.
    pub total_logical_cpus: Option<u32>,
    /// Job slots of all the group's nodes.
    pub total_slots: Option<u32>,
    /// RAM plus swap per node, MB: the smallest any node reports (identical
    /// nodes differ by the kernel's reservations).
    pub virtual_memory_mib: Option<u64>,
    /// `GLUE2ExecutionEnvironmentOSName` in GLUE's spelling (`Debian`, `CentOS` …).
    pub os_name: Option<String>,
    /// `GLUE2ExecutionEnvironmentOSVersion`.
    pub os_version: Option<String>,
    /// The LRMS version, when the nodes that report one agree (`GLUE2ManagerProductVersion`).
    pub lrms_version: Option<String>,
}

/// The one value all of `values` are, if they are one.
pub(crate) fn agreed<T: PartialEq>(mut values: impl Iterator<Item = T>) -> Option<T> {
    let first = values.next()?;
    values.all(|v| v == first).then_some(first)
}

/// A per-node figure over a group: the value when the nodes that report it
/// agree, and the group's total (every node's sum, or, when some node does
/// not report, the agreed value times the nodes: a group is identical nodes).
/// `Err` names the figure whose total passes a u32.
fn per_node_and_total(values: &[Option<u32>], what: &'static str) -> Result<(Option<u32>, Option<u32>), &'static str> {
    let reported: Vec<u32> = values.iter().flatten().copied().collect();
    let agreed = reported.first().copied().filter(|first| reported.iter().all(|v| v == first));
    let n = u32::try_from(values.len()).map_err(|_| what)?;
    let total = if !reported.is_empty() && reported.len() == values.len() {
        Some(reported.iter().try_fold(0u32, |sum, v| sum.checked_add(*v)).ok_or(what)?)
    } else {
        agreed.map(|v| v.checked_mul(n).ok_or(what)).transpose()?
    };
    Ok((agreed, total))
}

impl HostFacts {
    /// The group's facts from each of its nodes' (in any order). `Err` names
    /// the figure (`logical CPUs` …) whose total does not fit a u32.
    pub fn from_nodes(nodes: &[NodeFacts]) -> Result<HostFacts, &'static str> {
        let column = |f: fn(&NodeFacts) -> Option<u32>| nodes.iter().map(f).collect::<Vec<_>>();
        let (physical_cpus, total_physical_cpus) = per_node_and_total(&column(|n| n.physical_cpus), "CPU sockets")?;
        let (logical_cpus, total_logical_cpus) = per_node_and_total(&column(|n| n.logical_cpus), "logical CPUs")?;
        let slots = column(|n| n.slots);
        // Slots are the LRMS's own figure: a total only when every node has one.
        let total_slots = if slots.iter().all(Option::is_some) && !slots.is_empty() {
            Some(slots.iter().flatten().try_fold(0u32, |sum, v| sum.checked_add(*v)).ok_or("slots")?)
        } else {
            None
        };
        Ok(HostFacts {
            physical_cpus,
            logical_cpus,
            total_physical_cpus,
            total_logical_cpus,
            total_slots,
            virtual_memory_mib: nodes.iter().filter_map(|n| n.virtual_memory_mib).min(),
            os_name: None,
            os_version: None,
            lrms_version: agreed(nodes.iter().filter_map(|n| n.lrms_version.as_ref())).cloned(),
        })
    }
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
    /// The queue's limits, slots, jobs and waiting times as the VO sees them.
    pub policy: SharePolicy,
}

/// A share's limits and load, the ComputingShare attributes EGI's profile
/// asks for. Times in seconds, memory in MB; a time limit of `None` is one
/// the LRMS does not set (unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharePolicy {
    /// `MaxWallTime`: the longest wall time a job may ask for.
    pub max_wall_time: Option<u64>,
    /// `DefaultWallTime`: the limit of a job that asks for none.
    pub default_wall_time: Option<u64>,
    /// `MaxCPUTime` (per slot).
    pub max_cpu_time: Option<u64>,
    /// `DefaultCPUTime` (per slot).
    pub default_cpu_time: Option<u64>,
    /// `MaxSlotsPerJob`.
    pub max_slots_per_job: u32,
    /// `MaxMainMemory`.
    pub max_main_memory_mib: u64,
    /// `GuaranteedMainMemory`.
    pub guaranteed_main_memory_mib: u64,
    /// `MaxVirtualMemory`.
    pub max_virtual_memory_mib: u64,
    /// `GuaranteedVirtualMemory`.
    pub guaranteed_virtual_memory_mib: u64,
    /// `MaxRunningJobs`, where the queue has such a limit.
    pub max_running_jobs: Option<u32>,
    /// `MaxTotalJobs`, where the queue has such a limit.
    pub max_total_jobs: Option<u32>,
    /// `RunningJobs`: the VO's running jobs in the queue.
    pub running_jobs: u32,
    /// `WaitingJobs`: the VO's queued (and held) jobs in the queue.
    pub waiting_jobs: u32,
    /// `FreeSlots`: the queue's idle slots (CPUs) on nodes that take jobs.
    pub free_slots: u32,
    /// `UsedSlots`: slots held by the VO's running jobs.
    pub used_slots: u32,
    /// `EstimatedAverageWaitingTime`.
    pub estimated_average_waiting_time: u64,
    /// `EstimatedWorstWaitingTime`.
    pub estimated_worst_waiting_time: u64,
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

/// What GLUE publishes for a time the LRMS does not bound (no limit, or a
/// wait behind jobs without one): the "unlimited" value of CREAM's and the
/// GLUE 1.3 providers, which glue-validator knows (an INFO, "default value").
pub const UNLIMITED_TIME: u64 = 999_999_999;

/// What per-VO shares are made of, as an LRMS reader found it: the queues
/// (SLURM partitions, TORQUE queues) with who they admit and their limits,
/// the nodes, the running and waiting jobs, and the QOS limits. Each reader
/// ([`crate::sources::scontrol`], [`crate::sources::pbsnodes`]) fills it and
/// nothing else; [`crate::shares`] turns it and the `[[vo]]` tables into
/// shares without asking which batch system it came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// What the LRMS calls a queue (`partition`, `queue`), for messages.
    pub queue_word: &'static str,
    /// The listing the nodes come from (`scontrol show node`), for messages.
    pub node_listing: &'static str,
    /// Every queue, in the LRMS's order (the shares' order).
    pub queues: Vec<Queue>,
    /// Every node the LRMS lists, by name.
    pub nodes: BTreeMap<String, Node>,
    /// The running and waiting jobs of every queue.
    pub jobs: Vec<Job>,
    /// QOS limits by QOS name (SLURM; empty elsewhere).
    pub qos: BTreeMap<String, QosLimits>,
}

/// One queue: where its jobs run, who may submit to it, and its limits.
/// An allow list of `None` admits everyone; a limit of `None` is one the
/// LRMS does not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    /// The queue's name (`GLUE2ComputingShareMappingQueue`).
    pub name: String,
    /// The nodes its jobs run on.
    pub nodes: Vec<String>,
    /// `GLUE2ComputingShareServingState`: `production`, `draining`, `queueing`, `closed`.
    pub serving_state: &'static str,
    /// Whether it runs jobs itself (a TORQUE routing queue does not).
    pub runs_jobs: bool,
    /// Accounts allowed (SLURM `AllowAccounts`).
    pub allow_accounts: Option<Vec<String>>,
    /// Unix groups allowed (SLURM `AllowGroups`, TORQUE `acl_groups`).
    pub allow_groups: Option<Vec<String>>,
    /// Users allowed (TORQUE `acl_users`).
    pub allow_users: Option<Vec<String>>,
    /// QOS allowed (SLURM `AllowQos`).
    pub allow_qos: Option<Vec<String>>,
    /// Accounts refused (SLURM `DenyAccounts`).
    pub deny_accounts: Vec<String>,
    /// QOS refused (SLURM `DenyQos`).
    pub deny_qos: Vec<String>,
    /// The queue's own QOS, binding every job in it (SLURM's partition QOS).
    pub qos: Option<String>,
    /// The longest wall time a job may ask for, seconds.
    pub max_wall_time: Option<u64>,
    /// The wall time limit of a job that asks for none, seconds.
    pub default_wall_time: Option<u64>,
    /// The longest CPU time per slot a job may ask for, seconds.
    pub max_cpu_time: Option<u64>,
    /// The CPU time limit of a job that asks for none, seconds.
    pub default_cpu_time: Option<u64>,
    /// The most nodes one job may use.
    pub max_nodes_per_job: Option<u32>,
    /// The most slots a job may use on one node.
    pub max_slots_per_node: Option<u32>,
    /// The most slots one job may use.
    pub max_slots_per_job: Option<u32>,
    /// The most memory a job may use on one node, MB.
    pub max_memory_per_node_mb: Option<u64>,
    /// The most memory a job may use per slot, MB.
    pub max_memory_per_slot_mb: Option<u64>,
    /// The memory of a job that asks for none, MB.
    pub default_memory_mib: Option<u64>,
    /// The most virtual memory a job may use, MB.
    pub max_virtual_memory_mib: Option<u64>,
    /// The most jobs running at once.
    pub max_running_jobs: Option<u32>,
    /// The most jobs in the queue at once.
    pub max_total_jobs: Option<u32>,
}

/// A kind of device the shares count: a CDER type and, where the LRMS
/// tells them apart, its GRES type (`gpu:tesla`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceKind {
    /// The CDER type (`gpgpu`).
    pub cder_type: String,
    /// The SLURM GRES type, when a class names one.
    pub gres_type: Option<String>,
}

/// One node as a share sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// Down, drained or offline: takes no jobs.
    pub unavailable: bool,
    /// Job slots (SLURM `CPUTot=`, TORQUE `<np>`).
    pub slots: Option<u32>,
    /// Slots jobs hold now (SLURM `CPUAlloc=`, TORQUE the jobs' `exec_host`).
    pub slots_used: Option<u32>,
    /// RAM plus swap, MiB (TORQUE `totmem=`), where the LRMS reports it.
    pub virtual_memory_mib: Option<u64>,
    /// Its devices of each kind the groups have.
    pub devices: BTreeMap<DeviceKind, Counts>,
}

/// One running or waiting job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    /// Running (else waiting: queued or held).
    pub running: bool,
    /// Slots it holds (running) or asks for.
    pub slots: u32,
    /// Its time limit less what it has run, seconds; `None` without a limit.
    pub remaining: Option<u64>,
    /// Its queue.
    pub queue: String,
    /// The account it is charged to.
    pub account: String,
    /// The Unix group it runs as.
    pub group: String,
    /// The user it runs as.
    pub user: String,
    /// Its QOS.
    pub qos: String,
    /// Devices it holds, by CDER type.
    pub devices: BTreeMap<String, u32>,
}

/// A QOS's limits on devices: by GRES name as `scontrol` prints them, by
/// CDER type in [`Facts`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QosLimits {
    /// The most its jobs may hold together, and what they hold now.
    pub group: BTreeMap<String, GroupLimit>,
    /// The most one job may hold.
    pub per_job: BTreeMap<String, u32>,
}

/// A limit on a VO's devices: `limit` of them, `held` already taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimit {
    /// The most the jobs under the limit may hold together.
    pub limit: u32,
    /// What they hold now.
    pub held: u32,
}
