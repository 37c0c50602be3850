//! Per-VO ComputingShares: what each VO can get of a queue's devices.
//!
//! A site gives VOs different parts of its cluster: a SLURM partition open
//! to some accounts (`AllowAccounts`, `AllowGroups`, `AllowQos`), a QOS
//! that caps a VO's GPUs (`GrpTRES=gres/gpu=4`) or a job's
//! (`MaxTRESPerJob=gres/gpu=2`); a TORQUE queue with `acl_groups` and
//! `resources_max`. The `[[vo]]` tables of the config say which accounts,
//! groups, users and QOS are each VO's, as sites map a VO to pool accounts.
//!
//! This is one pass over the [`Facts`] an LRMS reader filled
//! ([`crate::sources::share_facts`]): it never asks the batch system
//! anything, so SLURM and TORQUE shares are made by the same code. One
//! [`VoShare`] per (queue, VO) the queue admits. Its figures per device
//! type are what a job of that VO could get now:
//!
//! * `free` = min(the queue's free devices, the room left under each QOS
//!   limit that applies: limit − devices the QOS already holds);
//! * `used` = devices held by the VO's running jobs in the queue;
//! * `total` = min(the queue's devices, each applying limit);
//! * `max_per_job` = min(the most devices on one node of the queue, each
//!   applying per-job limit).

use std::collections::BTreeMap;

use crate::config::{ProviderConfig, VoConfig};
use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::counts::{Counts, DeviceKind, Facts, Job, Node, QosLimits, Queue};

pub use crate::sources::counts::{GroupLimit, ShareDevices, SharePolicy, VoShare, UNLIMITED_TIME};

/// The share ID of `queue` for `vo`: `<queue>_<vo>_<service id>`.
pub fn share_id(queue: &str, vo: &str, service_id: &str) -> String {
    format!("{queue}_{vo}_{service_id}")
}

/// Whether a job run as `account`/`group`/`user`/`qos` is the VO's.
pub fn job_is_vos(vo: &VoConfig, account: &str, group: &str, user: &str, qos: &str) -> bool {
    let has = |list: &[String], v: &str| !v.is_empty() && list.iter().any(|x| x == v);
    has(&vo.accounts, account) || has(&vo.groups, group) || has(&vo.users, user) || has(&vo.qos, qos)
}

/// Whether a job of `vo` may run in `queue`, and under which of the VO's
/// QOS (all of them when the queue does not restrict QOS). Each allow list
/// must be open or name one of the VO's names (SLURM checks accounts,
/// groups and QOS alike; TORQUE groups and users), and the deny lists must
/// not name all of them.
pub fn admits<'v>(queue: &Queue, vo: &'v VoConfig) -> Option<Vec<&'v String>> {
    let allowed = |allow: &Option<Vec<String>>, mine: &[String]| match allow {
        None => true,
        Some(list) => mine.iter().any(|m| list.contains(m)),
    };
    if !queue.runs_jobs
        || !allowed(&queue.allow_accounts, &vo.accounts)
        || !allowed(&queue.allow_groups, &vo.groups)
        || !allowed(&queue.allow_users, &vo.users)
    {
        return None;
    }
    if !vo.accounts.is_empty() && vo.accounts.iter().all(|a| queue.deny_accounts.contains(a)) {
        return None;
    }
    let qos: Vec<&String> = vo
        .qos
        .iter()
        .filter(|q| queue.allow_qos.as_ref().map_or(true, |l| l.contains(q)) && !queue.deny_qos.contains(q))
        .collect();
    if queue.allow_qos.is_some() && qos.is_empty() {
        return None;
    }
    Some(qos)
}

/// The shares of every (queue, VO) pair the facts admit; none without `[[vo]]`.
pub fn from_facts(config: &ProviderConfig, groups: &[NodeGroup], facts: &Facts) -> Result<Vec<VoShare>, ProviderError> {
    // The CDER type a prefix's devices are counted by: its first class's.
    let mut type_of: BTreeMap<&str, &str> = BTreeMap::new();
    for class in groups.iter().flat_map(|g| &g.classes) {
        type_of.entry(class.prefix.as_str()).or_insert(class.cder_type.as_str());
    }
    let service = config.site.computing_service_id.get_ref();
    let mut out = Vec::new();
    for q in &facts.queues {
        let in_queue = |h: &str| q.nodes.iter().any(|n| n == h);
        let (environments, devices) = queue_devices(groups, &in_queue, |host, kind| {
            let node = facts.nodes.get(host).ok_or_else(|| {
                ProviderError::Runtime(format!(
                    "{} {}: node {host:?} is not known to {}",
                    facts.queue_word, q.name, facts.node_listing
                ))
            })?;
            Ok(node.devices.get(&kind).copied().unwrap_or_default())
        })?;
        if environments.is_empty() {
            continue;
        }
        let load = queue_load(q, groups, facts);
        for vo in &config.vos {
            if vo.queues.as_ref().is_some_and(|list| !list.contains(&q.name)) {
                continue;
            }
            let Some(vo_qos) = admits(q, vo) else { continue };
            let vo_name = vo.name.get_ref();
            // The one tally of the VO's jobs: what they hold, run and wait.
            let jobs: Vec<&Job> = facts
                .jobs
                .iter()
                .filter(|j| j.queue == q.name && job_is_vos(vo, &j.account, &j.group, &j.user, &j.qos))
                .collect();
            let mut figures = BTreeMap::new();
            for (prefix, (counts, per_node_max)) in &devices {
                let cder_type = type_of.get(prefix.as_str()).copied().unwrap_or_default();
                let used_by_vo = jobs
                    .iter()
                    .filter(|j| j.running)
                    .try_fold(0u32, |sum, j| sum.checked_add(j.devices.get(cder_type).copied().unwrap_or(0)))
                    .ok_or_else(|| {
                        ProviderError::Runtime(format!(
                            "{} {}: the {vo_name} jobs hold more {cder_type} devices than a count holds",
                            facts.queue_word, q.name
                        ))
                    })?;
                let (group_limits, job_limits) = qos_limits(q, &vo_qos, &facts.qos, cder_type);
                figures.insert(
                    prefix.clone(),
                    share_devices(*counts, *per_node_max, used_by_vo, &group_limits, &job_limits),
                );
            }
            let mut policy = load;
            for j in &jobs {
                if j.running {
                    policy.running_jobs = policy.running_jobs.saturating_add(1);
                    policy.used_slots = policy.used_slots.saturating_add(j.slots);
                } else {
                    policy.waiting_jobs = policy.waiting_jobs.saturating_add(1);
                }
            }
            out.push(VoShare {
                id: share_id(&q.name, vo_name, service),
                queue: q.name.clone(),
                vo: vo_name.clone(),
                serving_state: q.serving_state,
                environments: environments.clone(),
                devices: figures,
                policy,
            });
        }
    }
    Ok(out)
}

/// The group and per-job limits on `cder_type` devices that bind a job of
/// a VO whose QOS the queue takes are `vo_qos`. The queue's own QOS binds
/// every job; of the VO's own QOS a job runs under one, so the most
/// generous one is what it can get (and none binds when one of them has no
/// such limit).
fn qos_limits(
    q: &Queue,
    vo_qos: &[&String],
    qos: &BTreeMap<String, QosLimits>,
    cder_type: &str,
) -> (Vec<GroupLimit>, Vec<u32>) {
    let mut group_limits = Vec::new();
    let mut job_limits = Vec::new();
    if let Some(pq) = q.qos.as_ref().and_then(|name| qos.get(name)) {
        group_limits.extend(pq.group.get(cder_type).copied());
        job_limits.extend(pq.per_job.get(cder_type).copied());
    }
    if !vo_qos.is_empty() {
        let mine: Vec<&QosLimits> = vo_qos.iter().filter_map(|name| qos.get(name.as_str())).collect();
        let unlimited_group = mine.len() < vo_qos.len() || mine.iter().any(|l| !l.group.contains_key(cder_type));
        if !unlimited_group {
            let best =
                mine.iter().filter_map(|l| l.group.get(cder_type)).max_by_key(|l| l.limit.saturating_sub(l.held));
            group_limits.extend(best.copied());
        }
        let unlimited_job = mine.len() < vo_qos.len() || mine.iter().any(|l| !l.per_job.contains_key(cder_type));
        if !unlimited_job {
            job_limits.extend(mine.iter().filter_map(|l| l.per_job.get(cder_type)).max().copied());
        }
    }
    (group_limits, job_limits)
}

/// A queue's devices of one prefix: the sum of its nodes' counts and the
/// most devices on one node.
type QueueDevices = BTreeMap<String, (Counts, u32)>;

/// The device classes of the nodes `hosts`, per prefix: the sum of each
/// node's counts (as `node` reads them) and the most devices on one node;
/// and the ExecutionEnvironments those nodes belong to.
fn queue_devices(
    groups: &[NodeGroup],
    hosts: &dyn Fn(&str) -> bool,
    mut node: impl FnMut(&str, DeviceKind) -> Result<Counts, ProviderError>,
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
                let kind = DeviceKind { cder_type: class.cder_type.clone(), gres_type: class.gres_type.clone() };
                let c = node(host, kind)?;
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

/// The ComputingShare figures of a queue, the same for every VO it admits
/// (the VO's own jobs and slots are added per VO): its limits, its nodes'
/// idle slots, what one job can get, and the waiting time behind its
/// queued jobs.
fn queue_load(q: &Queue, groups: &[NodeGroup], facts: &Facts) -> SharePolicy {
    let members: Vec<&Node> = q.nodes.iter().filter_map(|h| facts.nodes.get(h.as_str())).collect();
    let slots = |n: &Node| n.slots.unwrap_or(0).min(q.max_slots_per_node.unwrap_or(u32::MAX));
    // The most slots one job gets: the largest nodes it may use, as many as
    // it may use, under the queue's own cap.
    let mut sizes: Vec<u32> = members.iter().map(|n| slots(n)).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let take = usize::try_from(q.max_nodes_per_job.unwrap_or(u32::MAX)).unwrap_or(usize::MAX);
    let by_nodes = sizes.iter().take(take).fold(0u32, |sum, n| sum.saturating_add(*n));
    let max_slots_per_job = q.max_slots_per_job.map_or(by_nodes, |n| n.min(by_nodes));
    let free_slots = members
        .iter()
        .filter(|n| !n.unavailable)
        .map(|n| slots(n).saturating_sub(n.slots_used.unwrap_or(0)))
        .fold(0u32, u32::saturating_add);
    let largest_node = sizes.first().copied().unwrap_or(0);
    let max_main_limit = q
        .max_memory_per_node_mb
        .or(q.max_memory_per_slot_mb.map(|mb| mb.saturating_mul(u64::from(largest_node.max(1)))));
    // A node's RAM plus swap where the LRMS reports it: the smallest of the group's nodes that do.
    let virtual_of = |g: &NodeGroup| {
        g.nodes.iter().filter_map(|h| facts.nodes.get(h.as_str()).and_then(|n| n.virtual_memory_mib)).min()
    };
    let in_queue = |h: &str| q.nodes.iter().any(|n| n == h);
    let (max_main, guaranteed_main, max_virtual, guaranteed_virtual) =
        share_memory(groups, &in_queue, &virtual_of, max_main_limit, q.default_memory_mib, q.max_virtual_memory_mib);
    let queued_ahead =
        facts.jobs.iter().filter(|j| !j.running && j.queue == q.name).fold(0u32, |n, _| n.saturating_add(1));
    let remaining = facts.jobs.iter().filter(|j| j.running && j.queue == q.name).map(|j| j.remaining).collect();
    // A queue that is not in production starts no job: the wait has no bound.
    let (average, worst) = match q.serving_state {
        "production" => waiting_times(free_slots, queued_ahead, remaining),
        _ => (UNLIMITED_TIME, UNLIMITED_TIME),
    };
    SharePolicy {
        max_wall_time: q.max_wall_time,
        default_wall_time: q.default_wall_time,
        max_cpu_time: q.max_cpu_time,
        default_cpu_time: q.default_cpu_time,
        max_slots_per_job,
        max_main_memory_mib: max_main,
        guaranteed_main_memory_mib: guaranteed_main,
        max_virtual_memory_mib: max_virtual,
        guaranteed_virtual_memory_mib: guaranteed_virtual,
        max_running_jobs: q.max_running_jobs,
        max_total_jobs: q.max_total_jobs,
        free_slots,
        estimated_average_waiting_time: average,
        estimated_worst_waiting_time: worst,
        ..SharePolicy::default()
    }
}

/// `EstimatedAverageWaitingTime` and `EstimatedWorstWaitingTime` of a new
/// job from what the queue holds now: with more idle slots than jobs queued
/// ahead of it, it starts at once (0). Otherwise it waits for the running
/// job whose end makes room for it: the worst case is every running job
/// using its whole time limit (`remaining`: each one's limit less what it
/// has run, `None` without a limit); the average halves it, jobs ending
/// anywhere before their limits. A wait behind an unlimited job, or with
/// nothing running to make room, is [`UNLIMITED_TIME`].
pub fn waiting_times(free_slots: u32, queued_ahead: u32, mut remaining: Vec<Option<u64>>) -> (u64, u64) {
    if free_slots > queued_ahead {
        return (0, 0);
    }
    remaining.sort_by_key(|r| r.unwrap_or(u64::MAX));
    let index = usize::try_from(queued_ahead - free_slots).unwrap_or(usize::MAX);
    match remaining.get(index).copied().flatten() {
        Some(worst) if worst < UNLIMITED_TIME => (worst / 2, worst),
        _ => (UNLIMITED_TIME, UNLIMITED_TIME),
    }
}

/// A share's memory figures (MB): `(max main, guaranteed main, max virtual,
/// guaranteed virtual)` over the groups with nodes in the queue — the
/// largest node is what a job can get at most, the smallest what it is
/// sure of —, cut by the queue's limits where the LRMS sets them
/// (`default_main`: what a job gets without asking). A node's virtual
/// memory is its group's `virtual_memory_mib`, else `virtual_of` (the
/// LRMS's figure), else its RAM; never below its RAM.
fn share_memory(
    groups: &[NodeGroup],
    hosts: &dyn Fn(&str) -> bool,
    virtual_of: &dyn Fn(&NodeGroup) -> Option<u64>,
    max_main_limit: Option<u64>,
    default_main: Option<u64>,
    max_virtual_limit: Option<u64>,
) -> (u64, u64, u64, u64) {
    let mut main: Vec<u64> = Vec::new();
    let mut virt: Vec<u64> = Vec::new();
    for g in groups.iter().filter(|g| g.nodes.iter().any(|h| hosts(h))) {
        let ram = g.config.main_memory_mib;
        main.push(ram);
        virt.push(g.config.virtual_memory_mib.or_else(|| virtual_of(g)).unwrap_or(ram).max(ram));
    }
    let largest = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    let smallest = |v: &[u64]| v.iter().copied().min().unwrap_or(0);
    let max_virtual = max_virtual_limit.map_or(largest(&virt), |l| l.min(largest(&virt)));
    // A job past its virtual memory limit is killed: it gets no more RAM than that.
    let max_main = max_main_limit.map_or(largest(&main), |l| l.min(largest(&main))).min(max_virtual);
    let guaranteed_main = default_main.unwrap_or(smallest(&main)).min(max_main);
    let guaranteed_virtual = smallest(&virt).max(guaranteed_main).min(max_virtual);
    (max_main, guaranteed_main, max_virtual, guaranteed_virtual)
}

/// The share's figures: the queue's counts cut by the limits that apply.
pub fn share_devices(
    queue: Counts,
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
    use std::path::Path;

    /// Two groups: `wn[01-02]` with 4 GTS 450 each (16 GB), `big01` with 2 (64 GB).
    fn config(vos: &str) -> ProviderConfig {
        let text = crate::config::tests::SAMPLE
            .replace("source = \"static\"", "source = \"slurm\"")
            .replace("wn[01-16]", "wn[01-02]")
            .replace("count = 2", "count = 4")
            .replace("used = 2\n", "")
            .replace("virtual_memory_mib = 20480\n", "");
        let big = "\n[[group]]\nid = \"big\"\nnodes = [\"big01\"]\nplatform = \"amd64\"\nmain_memory_mib = 65536\n\
                   os_name = \"CentOS\"\nos_version = \"7.9\"\nphysical_cpus = 2\nlogical_cpus = 32\n\n\
                   [[group.device]]\nmodel = \"GeForce GTS 450\"\ncount = 2\nmemory_mib = 1024\n";
        ProviderConfig::parse(&format!("{text}{big}{vos}"), Path::new("t.toml")).unwrap()
    }

    const VOS: &str = "\n[[vo]]\nname = \"atlas\"\naccounts = [\"atlas\"]\nqos = [\"atlas-gpu\"]\n\n\
                       [[vo]]\nname = \"cms\"\ngroups = [\"cms\"]\n\n[[vo]]\nname = \"ops\"\nusers = [\"ops001\"]\n";

    fn gpus(total: u32, free: u32, used: u32, offline: u32) -> BTreeMap<DeviceKind, Counts> {
        let kind = DeviceKind { cder_type: "gpgpu".into(), gres_type: None };
        [(kind, Counts { total, free, used, offline })].into()
    }

    fn node(slots: u32, slots_used: u32, devices: BTreeMap<DeviceKind, Counts>) -> Node {
        Node { unavailable: false, slots: Some(slots), slots_used: Some(slots_used), virtual_memory_mib: None, devices }
    }

    /// A job of `queue` run as `[account, group, user, qos]`.
    fn job(queue: &str, running: bool, [account, group, user, qos]: [&str; 4], slots: u32, gpus: u32) -> Job {
        Job {
            running,
            slots,
            remaining: Some(3600),
            queue: queue.into(),
            account: account.into(),
            group: group.into(),
            user: user.into(),
            qos: qos.into(),
            devices: [("gpgpu".to_string(), gpus)].into(),
        }
    }

    /// `gpu` on every node, open to all; `cmsq` on wn02 and big01, for group cms only.
    fn facts() -> Facts {
        let queue = |name: &str, nodes: &[&str]| Queue {
            name: name.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            serving_state: "production",
            runs_jobs: true,
            ..Queue::default()
        };
        Facts {
            queue_word: "queue",
            node_listing: "the listing",
            queues: vec![
                queue("gpu", &["wn01", "wn02", "big01"]),
                Queue { allow_groups: Some(vec!["cms".into()]), ..queue("cmsq", &["wn02", "big01"]) },
            ],
            nodes: [
                ("wn01".to_string(), node(16, 16, gpus(4, 1, 3, 0))),
                ("wn02".to_string(), Node { unavailable: true, ..node(16, 0, gpus(4, 0, 0, 4)) }),
                ("big01".to_string(), node(32, 8, gpus(2, 1, 1, 0))),
                ("cpu01".to_string(), node(8, 0, BTreeMap::new())),
            ]
            .into(),
            jobs: vec![
                job("gpu", true, ["atlas", "atlas", "atlas001", "atlas-gpu"], 16, 3),
                job("gpu", true, ["cms", "cms", "cms001", "normal"], 8, 1),
                job("gpu", false, ["cms", "cms", "cms002", "normal"], 4, 0),
                job("cmsq", false, ["x", "cms", "cms003", ""], 1, 0),
                job("gpu", false, ["ops", "ops", "ops001", ""], 1, 0),
            ],
            qos: [(
                "atlas-gpu".to_string(),
                QosLimits {
                    group: [("gpgpu".to_string(), GroupLimit { limit: 4, held: 3 })].into(),
                    per_job: [("gpgpu".to_string(), 2)].into(),
                },
            )]
            .into(),
        }
    }

    #[test]
    fn facts_and_vos_make_one_share_per_admitted_pair() {
        let cfg = config(VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let shares = from_facts(&cfg, &groups, &facts()).unwrap();
        let got: Vec<(&str, &str, [u32; 4])> = shares
            .iter()
            .map(|s| {
                let d = s.devices["GPGPU"];
                (s.queue.as_str(), s.vo.as_str(), [d.total, d.free, d.used, d.max_per_job])
            })
            .collect();
        assert_eq!(
            got,
            [
                // 10 GPUs, 2 free; atlas's QOS caps it at 4 with 3 held, 2 per job.
                ("gpu", "atlas", [4, 1, 3, 2]),
                ("gpu", "cms", [10, 2, 1, 4]),
                ("gpu", "ops", [10, 2, 0, 4]),
                // cmsq admits group cms only; wn02 is down: its 4 are offline.
                ("cmsq", "cms", [6, 1, 0, 4]),
            ]
        );
        assert_eq!(shares[0].id, "gpu_atlas_ce.example.org_ComputingElement");
        assert_eq!(shares[0].environments, ["ce.example.org_gts450", "big"]);
        assert_eq!(shares[3].environments, ["ce.example.org_gts450", "big"]);
        // Each VO's own jobs: cms runs one (8 slots) and waits for one; ops waits.
        let p = |i: usize| {
            let p = shares[i].policy;
            (p.running_jobs, p.used_slots, p.waiting_jobs)
        };
        assert_eq!((p(0), p(1), p(2), p(3)), ((1, 16, 0), (1, 8, 1), (0, 0, 1), (0, 0, 1)));
        // The queue's load is every VO's: wn02 is down, so 24 idle slots only on big01.
        assert!(shares.iter().take(3).all(|s| s.policy.free_slots == 24));
        assert_eq!(shares[0].policy.max_slots_per_job, 64);
        // Memory: the largest node at most, the smallest for sure; no LRMS figure, so RAM.
        let m = shares[0].policy;
        assert_eq!(
            (m.max_main_memory_mib, m.guaranteed_main_memory_mib, m.max_virtual_memory_mib),
            (65536, 16384, 65536)
        );
    }

    #[test]
    fn queue_limits_cut_slots_memory_and_times() {
        let cfg = config(VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let mut f = facts();
        f.queues.truncate(1);
        let q = &mut f.queues[0];
        q.max_nodes_per_job = Some(1);
        q.max_slots_per_node = Some(12);
        q.max_memory_per_slot_mb = Some(1000);
        q.default_memory_mib = Some(2000);
        q.max_virtual_memory_mib = Some(40_000);
        q.max_wall_time = Some(7200);
        q.max_running_jobs = Some(5);
        f.nodes.get_mut("big01").unwrap().virtual_memory_mib = Some(70_000);
        let s = &from_facts(&cfg, &groups, &f).unwrap()[0];
        // One node of at most 12 slots; 12 × 1000 MB; the virtual cap below the largest node.
        assert_eq!(s.policy.max_slots_per_job, 12);
        assert_eq!((s.policy.max_main_memory_mib, s.policy.guaranteed_main_memory_mib), (12_000, 2000));
        assert_eq!((s.policy.max_virtual_memory_mib, s.policy.guaranteed_virtual_memory_mib), (40_000, 16384));
        assert_eq!((s.policy.max_wall_time, s.policy.max_running_jobs), (Some(7200), Some(5)));
        // big01's idle 4 of 12 allowed slots (8 held) against 3 queued jobs: they start at once.
        assert_eq!(s.policy.free_slots, 4);
        assert_eq!(s.policy.estimated_worst_waiting_time, 0);
        let mut slots_cap = f.clone();
        slots_cap.queues[0].max_slots_per_job = Some(5);
        assert_eq!(from_facts(&cfg, &groups, &slots_cap).unwrap()[0].policy.max_slots_per_job, 5);
    }

    #[test]
    fn a_node_the_listing_lacks_is_an_error_naming_the_queue() {
        let cfg = config(VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let mut f = facts();
        f.nodes.remove("wn02");
        let e = from_facts(&cfg, &groups, &f).unwrap_err();
        assert!(e.to_string().contains("queue gpu: node \"wn02\" is not known to the listing"), "{e}");
        f.jobs.push(job("gpu", true, ["cms", "cms", "cms009", ""], 1, u32::MAX));
        f.nodes.insert("wn02".into(), node(16, 0, gpus(4, 4, 0, 0)));
        let e = from_facts(&cfg, &groups, &f).unwrap_err();
        assert!(e.to_string().contains("queue gpu: the cms jobs hold more gpgpu devices than a count holds"), "{e}");
    }

    #[test]
    fn queues_admit_by_every_allow_list() {
        let cfg = config(VOS);
        let (atlas, cms, ops) = (&cfg.vos[0], &cfg.vos[1], &cfg.vos[2]);
        let open = Queue { runs_jobs: true, ..Queue::default() };
        assert_eq!(admits(&open, atlas).unwrap(), [&"atlas-gpu".to_string()]);
        assert!(admits(&Queue { runs_jobs: false, ..open.clone() }, atlas).is_none(), "a routing queue");
        let only = |f: fn(&mut Queue, Vec<String>), names: &[&str]| {
            let mut q = open.clone();
            f(&mut q, names.iter().map(|n| n.to_string()).collect());
            q
        };
        let accounts = only(|q, l| q.allow_accounts = Some(l), &["atlas"]);
        assert!(admits(&accounts, atlas).is_some() && admits(&accounts, cms).is_none());
        let users = only(|q, l| q.allow_users = Some(l), &["ops001"]);
        assert!(admits(&users, ops).is_some() && admits(&users, cms).is_none());
        // AllowQos restricts to the QOS named; a VO without one of them is out.
        let qos = only(|q, l| q.allow_qos = Some(l), &["atlas-gpu"]);
        assert_eq!(admits(&qos, atlas).unwrap(), [&"atlas-gpu".to_string()]);
        assert!(admits(&qos, cms).is_none());
        assert!(admits(&only(|q, l| q.allow_groups = Some(l), &["wheel"]), atlas).is_none());
        assert!(admits(&only(|q, l| q.deny_accounts = l, &["atlas"]), atlas).is_none());
        // A denied QOS is not one a job of the VO can run under.
        assert_eq!(admits(&only(|q, l| q.deny_qos = l, &["atlas-gpu"]), atlas).unwrap(), Vec::<&String>::new());
    }

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
    fn waiting_times_follow_idle_slots_and_time_limits() {
        // Idle slots for everyone queued and the new job: it starts at once.
        assert_eq!(waiting_times(4, 3, vec![Some(600)]), (0, 0));
        // Full, 1 queued ahead: it waits for the second job to end, at worst at its limit.
        assert_eq!(waiting_times(0, 1, vec![Some(3600), Some(600), None]), (1800, 3600));
        // Only an unlimited job could make room, or nothing runs at all.
        assert_eq!(waiting_times(0, 0, vec![None]), (UNLIMITED_TIME, UNLIMITED_TIME));
        assert_eq!(waiting_times(0, 0, vec![]), (UNLIMITED_TIME, UNLIMITED_TIME));
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
