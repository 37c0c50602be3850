//! Per-VO shares from SLURM, all read through `scontrol` (what slurmctld
//! enforces, not what the database was once told):
//!
//! * `scontrol --all show partition -o`: `Nodes=`, `AllowAccounts=`,
//!   `AllowGroups=`, `AllowQos=` (and `DenyAccounts=`, `DenyQos=`), `QoS=`
//!   (the partition QOS), `State=` (`--all`: without it SLURM hides a
//!   partition whose `AllowGroups` leave out the asking user, the BDII's);
//! * `scontrol -d show node -o`: each node's `Gres=` / `GresUsed=` and state;
//! * `scontrol --all -d show job -o`: the running jobs' `Partition=`, `Account=`,
//!   `GroupId=`, `UserId=`, `QOS=` and devices (`JOB_GRES=gpu:2`, else the
//!   `gres/gpu` of `AllocTRES=` / `TRES=`);
//! * only when a partition has a QOS or a VO names one: `scontrol show
//!   assoc_mgr flags=qos`, whose `GrpTRES=gres/gpu=4(3)` is the limit and
//!   what the QOS holds now, and `MaxTRESPJ=gres/gpu=2` the per-job limit.
//!   QOS exist only with slurmdbd (`AccountingStorageType=accounting_storage/slurmdbd`).
//!
//! A partition admits a VO when each of its Allow lists is `ALL` or names
//! one of the VO's accounts / groups / QOS (SLURM checks all three), and
//! its Deny lists do not name all of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cder_request::hostlist::Hostlist;

use crate::config::{ProviderConfig, VoConfig};
use crate::error::ProviderError;
use crate::shares::{
    job_is_vos, queue_devices, share_devices, share_id, share_memory, waiting_times, GroupLimit, SharePolicy, VoShare,
    UNLIMITED_TIME,
};
use crate::site::NodeGroup;
use crate::sources::walk::node_counts;
use crate::sources::{gres_count, parse_gres, parse_scontrol, run_command, SlurmNode};

/// Reads per-VO shares from SLURM.
#[derive(Debug, Clone)]
pub struct SlurmShares {
    /// The `scontrol` program.
    pub scontrol: PathBuf,
    /// How long each `scontrol` may run.
    pub timeout: Duration,
}

/// One partition as `scontrol show partition -o` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// `PartitionName=`.
    pub name: String,
    /// `Nodes=`, expanded.
    pub nodes: Vec<String>,
    /// `AllowAccounts=`; `None` for `ALL`.
    pub allow_accounts: Option<Vec<String>>,
    /// `AllowGroups=`; `None` for `ALL`.
    pub allow_groups: Option<Vec<String>>,
    /// `AllowQos=`; `None` for `ALL`.
    pub allow_qos: Option<Vec<String>>,
    /// `DenyAccounts=`.
    pub deny_accounts: Vec<String>,
    /// `DenyQos=`.
    pub deny_qos: Vec<String>,
    /// `QoS=` (the partition QOS), when not `N/A`.
    pub qos: Option<String>,
    /// `State=`: `UP`, `DOWN`, `DRAIN`, `INACTIVE`.
    pub state: String,
    /// `MaxTime=` in seconds; `None` for `UNLIMITED`.
    pub max_time: Option<u64>,
    /// `DefaultTime=` in seconds; `None` for `NONE` (SLURM then gives `MaxTime`).
    pub default_time: Option<u64>,
    /// `MaxNodes=`; `None` for `UNLIMITED`.
    pub max_nodes: Option<u32>,
    /// `MaxCPUsPerNode=`; `None` for `UNLIMITED`.
    pub max_cpus_per_node: Option<u32>,
    /// `MaxMemPerNode=` (MB), or `MaxMemPerCPU=` × the CPUs of a node, when limited.
    pub max_mem_per_node: Option<u64>,
    /// `MaxMemPerCPU=` (MB), when limited.
    pub max_mem_per_cpu: Option<u64>,
    /// `DefMemPerNode=` (MB), when set.
    pub def_mem_per_node: Option<u64>,
    /// `DefMemPerCPU=` (MB), when set.
    pub def_mem_per_cpu: Option<u64>,
}

/// One running or pending job's owner, devices and time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    /// `JobState=RUNNING` (else `PENDING`).
    pub running: bool,
    /// `NumCPUs=`: the slots it holds (running) or asks for.
    pub cpus: u32,
    /// `TimeLimit=` less `RunTime=` in seconds; `None` for `UNLIMITED`.
    pub remaining: Option<u64>,
    /// `Partition=`.
    pub partition: String,
    /// `Account=`.
    pub account: String,
    /// `GroupId=` without the `(gid)`.
    pub group: String,
    /// `UserId=` without the `(uid)`.
    pub user: String,
    /// `QOS=`.
    pub qos: String,
    /// `gres/<name>=N` items of the allocated TRES (`gres/gpu` → N).
    pub gres: BTreeMap<String, u32>,
}

/// A QOS's limits on one GRES as the association manager holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QosLimits {
    /// `GrpTRES=gres/<name>=limit(held)` per GRES name, where limited.
    pub group: BTreeMap<String, GroupLimit>,
    /// `MaxTRESPJ=gres/<name>=limit` per GRES name.
    pub per_job: BTreeMap<String, u32>,
}

/// `key=value` fields of one `-o` line, the first of each key, as the one
/// `-o` grammar (`cder_request::gres::ScontrolLine`) reads them.
fn fields(line: &str) -> BTreeMap<&str, &str> {
    cder_request::gres::ScontrolLine::parse(line).fields.into_iter().rev().map(|(k, v, _)| (k, v)).collect()
}

fn text(output: &[u8], what: &str) -> Result<String, ProviderError> {
    String::from_utf8(output.to_vec()).map_err(|e| {
        ProviderError::Runtime(format!("{what}: not valid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
    })
}

fn list(value: Option<&&str>) -> Option<Vec<String>> {
    match value.copied() {
        None | Some("ALL") => None,
        Some(v) => Some(v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect()),
    }
}

/// A SLURM time (`UNLIMITED`, `minutes`, `MM:SS`, `HH:MM:SS`, `D-HH[:MM[:SS]]`)
/// in seconds; `Ok(None)` for no limit.
pub fn parse_time(value: &str) -> Result<Option<u64>, String> {
    if matches!(value, "UNLIMITED" | "INFINITE" | "NONE" | "Partition_Limit") {
        return Ok(None);
    }
    let bad = || format!("{value:?} is not a SLURM time");
    let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let (days, rest) = match value.split_once('-') {
        Some((d, r)) => (Some(number(d)?), r),
        None => (None, value),
    };
    let parts: Vec<u64> = rest.split(':').map(number).collect::<Result<_, _>>()?;
    let (h, m, sec) = match (days, parts.as_slice()) {
        (None, [m]) => (0, *m, 0),
        (None, [m, s]) => (0, *m, *s),
        (_, [h, m, s]) => (*h, *m, *s),
        (Some(_), [h]) => (*h, 0, 0),
        (Some(_), [h, m]) => (*h, *m, 0),
        _ => return Err(bad()),
    };
    let total = [(days.unwrap_or(0), 86_400u64), (h, 3600), (m, 60), (sec, 1)]
        .into_iter()
        .try_fold(0u64, |sum, (n, unit)| n.checked_mul(unit).and_then(|x| sum.checked_add(x)));
    total.map(Some).ok_or_else(bad)
}

/// `name(id)` → `name`.
fn strip_id(v: &str) -> &str {
    v.split_once('(').map_or(v, |(n, _)| n)
}

/// Parses `scontrol show partition -o`.
pub fn parse_partitions(output: &[u8]) -> Result<Vec<Partition>, ProviderError> {
    let text = text(output, "scontrol show partition -o")?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f = fields(line);
        let Some(name) = f.get("PartitionName") else { continue };
        let bad = |m: String| ProviderError::Runtime(format!("scontrol show partition -o line {}: {m}", n + 1));
        let nodes = match f.get("Nodes").copied() {
            None | Some("(null)") => Vec::new(),
            Some(list) => Hostlist::HOSTS.expand_all(&[list.to_string()]).map_err(|e| bad(format!("Nodes: {e}")))?,
        };
        let time = |key: &str| match f.get(key) {
            None => Ok(None),
            Some(v) => parse_time(v).map_err(|m| bad(format!("{key}: {m}"))),
        };
        let limit = |key: &str| match f.get(key).copied() {
            None | Some("UNLIMITED") | Some("0") => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| bad(format!("{key}={v:?} is not a number"))),
        };
        let count = |key: &str| limit(key).map(|n| n.map(|n| u32::try_from(n).unwrap_or(u32::MAX)));
        out.push(Partition {
            max_time: time("MaxTime")?,
            default_time: time("DefaultTime")?,
            max_nodes: count("MaxNodes")?,
            max_cpus_per_node: count("MaxCPUsPerNode")?,
            max_mem_per_node: limit("MaxMemPerNode")?,
            max_mem_per_cpu: limit("MaxMemPerCPU")?,
            def_mem_per_node: limit("DefMemPerNode")?,
            def_mem_per_cpu: limit("DefMemPerCPU")?,
            name: name.to_string(),
            nodes,
            allow_accounts: list(f.get("AllowAccounts")),
            allow_groups: list(f.get("AllowGroups")),
            allow_qos: list(f.get("AllowQos")),
            deny_accounts: list(f.get("DenyAccounts")).unwrap_or_default(),
            deny_qos: list(f.get("DenyQos")).unwrap_or_default(),
            qos: f.get("QoS").filter(|q| !matches!(**q, "N/A" | "(null)" | "")).map(|q| q.to_string()),
            state: f.get("State").unwrap_or(&"UP").to_string(),
        });
    }
    Ok(out)
}

/// Parses the running and pending jobs of `scontrol -d show job -o`.
pub fn parse_jobs(output: &[u8]) -> Result<Vec<RunningJob>, ProviderError> {
    let text = text(output, "scontrol -d show job -o")?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f = fields(line);
        let running = match f.get("JobState") {
            Some(&"RUNNING") => true,
            Some(&"PENDING") => false,
            _ => continue,
        };
        let bad = |what: String| ProviderError::Runtime(format!("scontrol -d show job -o line {}: {what}", n + 1));
        let time = |key: &str| f.get(key).map_or(Ok(None), |v| parse_time(v)).map_err(|m| bad(format!("{key}: {m}")));
        let remaining = match time("TimeLimit")? {
            None => None,
            Some(limit) => Some(limit.saturating_sub(time("RunTime")?.unwrap_or(0))),
        };
        let cpus = match f.get("NumCPUs") {
            None => 1,
            Some(v) => v.parse::<u32>().map_err(|_| bad(format!("NumCPUs={v:?} is not a count")))?,
        };
        // The job's devices: `JOB_GRES=gpu:2` (-d, the allocation), else the
        // GRES items of the allocated TRES (only those in AccountingStorageTRES).
        let mut gres = BTreeMap::new();
        if let Some(list) = f.get("JOB_GRES").filter(|v| **v != "(null)") {
            for g in parse_gres(list).map_err(|m| bad(format!("JOB_GRES: {m}")))? {
                let sum = gres.entry(g.name).or_insert(0u32);
                *sum =
                    sum.checked_add(g.count).ok_or_else(|| bad(format!("JOB_GRES {list:?} adds up past a count")))?;
            }
        } else {
            let tres = f.get("AllocTRES").or_else(|| f.get("TRES")).copied().unwrap_or("");
            for item in tres.split(',') {
                let Some((k, v)) = item.split_once('=') else { continue };
                // Typed items (`gres/gpu:tesla=2`) repeat the untyped total.
                let Some(name) = k.strip_prefix("gres/").filter(|n| !n.contains(':')) else { continue };
                let count = v.parse::<u32>().map_err(|_| bad(format!("{k}={v:?} is not a count")))?;
                gres.insert(name.to_string(), count);
            }
        }
        out.push(RunningJob {
            running,
            cpus,
            remaining,
            partition: f.get("Partition").unwrap_or(&"").to_string(),
            account: f.get("Account").unwrap_or(&"").to_string(),
            group: strip_id(f.get("GroupId").unwrap_or(&"")).to_string(),
            user: strip_id(f.get("UserId").unwrap_or(&"")).to_string(),
            qos: f.get("QOS").unwrap_or(&"").to_string(),
            gres,
        });
    }
    Ok(out)
}

/// Parses the QOS records of `scontrol show assoc_mgr flags=qos`:
/// `QOS=name(id)` headers, then `GrpTRES=…,gres/gpu=4(3)` (limit, held;
/// `N` for no limit) and `MaxTRESPJ=…,gres/gpu=2`. Account and user limits
/// inside a record (`MaxTRESPA=`, `MaxTRESPU=`) are not the QOS's own.
pub fn parse_assoc_mgr_qos(output: &[u8]) -> Result<BTreeMap<String, QosLimits>, ProviderError> {
    let text = text(output, "scontrol show assoc_mgr flags=qos")?;
    let mut out: BTreeMap<String, QosLimits> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("QOS=") {
            current = Some(strip_id(rest).to_string());
            out.entry(strip_id(rest).to_string()).or_default();
            continue;
        }
        let Some(qos) = &current else { continue };
        if t == "Account Limits" || t == "User Limits" {
            current = None;
            continue;
        }
        for token in t.split_whitespace() {
            let (key, value) = match token.split_once('=') {
                Some(kv) => kv,
                None => continue,
            };
            if key != "GrpTRES" && key != "MaxTRESPJ" {
                continue;
            }
            for item in value.split(',') {
                let Some((tres, amount)) = item.split_once('=') else { continue };
                let Some(name) = tres.strip_prefix("gres/").filter(|n| !n.contains(':')) else { continue };
                let (limit, held) = match amount.split_once('(') {
                    Some((l, rest)) => (l, Some(rest.trim_end_matches(')'))),
                    None => (amount, None),
                };
                if limit == "N" || limit.is_empty() {
                    continue;
                }
                let bad = || {
                    ProviderError::Runtime(format!(
                        "scontrol show assoc_mgr flags=qos: QOS {qos}: {key} {tres}={amount:?} is not a count"
                    ))
                };
                let limit: u32 = limit.parse().map_err(|_| bad())?;
                let entry = out.entry(qos.clone()).or_default();
                if key == "GrpTRES" {
                    let held: u32 = held.unwrap_or("0").parse().map_err(|_| bad())?;
                    entry.group.insert(name.to_string(), GroupLimit { limit, held });
                } else {
                    entry.per_job.insert(name.to_string(), limit);
                }
            }
        }
    }
    Ok(out)
}

impl Partition {
    /// Whether a job of `vo` may run here, and under which of its QOS
    /// (all of them when the partition does not restrict QOS).
    pub fn admits<'v>(&self, vo: &'v VoConfig) -> Option<Vec<&'v String>> {
        let allowed = |allow: &Option<Vec<String>>, mine: &[String]| match allow {
            None => true,
            Some(list) => mine.iter().any(|m| list.contains(m)),
        };
        if !allowed(&self.allow_accounts, &vo.accounts) || !allowed(&self.allow_groups, &vo.groups) {
            return None;
        }
        if !vo.accounts.is_empty() && vo.accounts.iter().all(|a| self.deny_accounts.contains(a)) {
            return None;
        }
        let qos: Vec<&String> = vo
            .qos
            .iter()
            .filter(|q| self.allow_qos.as_ref().map_or(true, |l| l.contains(q)) && !self.deny_qos.contains(q))
            .collect();
        if self.allow_qos.is_some() && qos.is_empty() {
            return None;
        }
        Some(qos)
    }

    /// `GLUE2ComputingShareServingState` of the partition's `State=`.
    pub fn serving_state(&self) -> &'static str {
        match self.state.as_str() {
            "UP" => "production",
            "DRAIN" => "draining",
            _ => "closed",
        }
    }
}

impl SlurmShares {
    /// From `[counts]`.
    pub fn from_config(config: &ProviderConfig, timeout: Duration) -> SlurmShares {
        SlurmShares { scontrol: config.counts.scontrol.clone(), timeout }
    }

    fn scontrol(&self, args: &[&str]) -> Result<Vec<u8>, ProviderError> {
        run_command(&self.scontrol, args, self.timeout)
    }

    /// Asks SLURM and builds the shares.
    pub fn shares(&self, config: &ProviderConfig, groups: &[NodeGroup]) -> Result<Vec<VoShare>, ProviderError> {
        // --all: SLURM hides the partitions (and their jobs) whose AllowGroups
        // leave out the asking user, and the BDII's user is in no VO's group.
        let partitions = parse_partitions(&self.scontrol(&["--all", "show", "partition", "-o"])?)?;
        let nodes = parse_scontrol(&self.scontrol(&["-d", "show", "node", "-o"])?)?;
        let jobs = parse_jobs(&self.scontrol(&["--all", "-d", "show", "job", "-o"])?)?;
        let wants_qos = partitions.iter().any(|p| p.qos.is_some()) || config.vos.iter().any(|v| !v.qos.is_empty());
        let qos = if wants_qos {
            parse_assoc_mgr_qos(&self.scontrol(&["show", "assoc_mgr", "flags=qos"])?)?
        } else {
            BTreeMap::new()
        };
        build(config, groups, &partitions, &nodes, &jobs, &qos)
    }
}

/// A partition's limits, free slots and waiting times: the same for every VO
/// it admits (the VO's jobs and slots are added by [`PartitionLoad::for_vo`]).
struct PartitionLoad {
    policy: SharePolicy,
}

/// The ComputingShare figures of a partition, from its `scontrol show
/// partition` limits, its nodes' CPUs and memory and its jobs.
fn partition_load(
    p: &Partition,
    groups: &[NodeGroup],
    nodes: &BTreeMap<&str, &SlurmNode>,
    jobs: &[RunningJob],
) -> Result<PartitionLoad, ProviderError> {
    let members: Vec<&SlurmNode> = p.nodes.iter().filter_map(|h| nodes.get(h.as_str()).copied()).collect();
    let cpus = |n: &SlurmNode| n.cpus.unwrap_or(0).min(p.max_cpus_per_node.unwrap_or(u32::MAX));
    // The most slots one job gets: MaxNodes of the partition's largest nodes.
    let mut sizes: Vec<u32> = members.iter().map(|n| cpus(n)).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let take = usize::try_from(p.max_nodes.unwrap_or(u32::MAX)).unwrap_or(usize::MAX);
    let max_slots_per_job = sizes.iter().take(take).fold(0u32, |sum, n| sum.saturating_add(*n));
    let free_slots = members
        .iter()
        .filter(|n| !n.unavailable())
        .map(|n| cpus(n).saturating_sub(n.cpu_alloc.unwrap_or(0)))
        .fold(0u32, u32::saturating_add);
    let largest_node = sizes.first().copied().unwrap_or(0);
    let in_partition = |h: &str| p.nodes.iter().any(|n| n == h);
    let per_cpu = |mb: u64| mb.saturating_mul(u64::from(largest_node.max(1)));
    let max_main_limit = match (p.max_mem_per_node, p.max_mem_per_cpu) {
        (Some(n), _) => Some(n),
        (None, Some(c)) => Some(per_cpu(c)),
        (None, None) => None,
    };
    // A job that asks for no memory gets DefMemPerNode, or DefMemPerCPU for each of its CPUs (one at least).
    let default_main = p.def_mem_per_node.or(p.def_mem_per_cpu);
    let (max_main, guaranteed_main, max_virtual, guaranteed_virtual) =
        share_memory(groups, &in_partition, &|_| None, max_main_limit, default_main, None);
    let queued_ahead =
        jobs.iter().filter(|j| !j.running && j.partition == p.name).fold(0u32, |n, _| n.saturating_add(1));
    let remaining = jobs.iter().filter(|j| j.running && j.partition == p.name).map(|j| j.remaining).collect();
    // A partition that is not UP starts no job: the wait has no bound.
    let (average, worst) = match p.serving_state() {
        "production" => waiting_times(free_slots, queued_ahead, remaining),
        _ => (UNLIMITED_TIME, UNLIMITED_TIME),
    };
    // SLURM limits wall time only; a slot's CPU time cannot exceed it.
    let default_time = p.default_time.or(p.max_time);
    Ok(PartitionLoad {
        policy: SharePolicy {
            max_wall_time: p.max_time,
            default_wall_time: default_time,
            max_cpu_time: p.max_time,
            default_cpu_time: default_time,
            max_slots_per_job,
            max_main_memory_mb: max_main,
            guaranteed_main_memory_mb: guaranteed_main,
            max_virtual_memory_mb: max_virtual,
            guaranteed_virtual_memory_mb: guaranteed_virtual,
            free_slots,
            estimated_average_waiting_time: average,
            estimated_worst_waiting_time: worst,
            ..SharePolicy::default()
        },
    })
}

impl PartitionLoad {
    /// The share of `vo`: the partition's figures with the VO's own jobs and slots.
    fn for_vo(&self, vo: &VoConfig, jobs: &[RunningJob], partition: &str) -> SharePolicy {
        let mut policy = self.policy;
        for j in
            jobs.iter().filter(|j| j.partition == partition && job_is_vos(vo, &j.account, &j.group, &j.user, &j.qos))
        {
            if j.running {
                policy.running_jobs = policy.running_jobs.saturating_add(1);
                policy.used_slots = policy.used_slots.saturating_add(j.cpus);
            } else {
                policy.waiting_jobs = policy.waiting_jobs.saturating_add(1);
            }
        }
        policy
    }
}

/// The shares from what `scontrol` printed (separate from the commands so
/// that the sums can be tested without SLURM).
pub fn build(
    config: &ProviderConfig,
    groups: &[NodeGroup],
    partitions: &[Partition],
    nodes: &[SlurmNode],
    jobs: &[RunningJob],
    qos: &BTreeMap<String, QosLimits>,
) -> Result<Vec<VoShare>, ProviderError> {
    let nodes: BTreeMap<&str, &SlurmNode> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    // GRES name per prefix, from the classes that publish under it.
    let mut gres_of: BTreeMap<String, String> = BTreeMap::new();
    for class in groups.iter().flat_map(|g| &g.classes) {
        gres_of.entry(class.prefix.clone()).or_insert_with(|| config.counts.gres_name(&class.cder_type));
    }
    let service = config.site.computing_service_id.get_ref();
    let mut out = Vec::new();
    for p in partitions {
        let in_partition = |h: &str| p.nodes.iter().any(|n| n == h);
        let (environments, devices) = queue_devices(groups, &in_partition, |host, class| {
            let node = nodes.get(host).ok_or_else(|| {
                ProviderError::Runtime(format!(
                    "partition {}: node {host:?} is not known to scontrol show node",
                    p.name
                ))
            })?;
            let gres = config.counts.gres_name(&class.cder_type);
            let total = gres_count(&node.gres, &gres, class.gres_type.as_deref()).unwrap_or(u32::MAX);
            let used = node
                .gres_used
                .as_ref()
                .map(|u| gres_count(u, &gres, class.gres_type.as_deref()).unwrap_or(total))
                .unwrap_or(0);
            Ok(node_counts(total, used.min(total), node.unavailable()))
        })?;
        if environments.is_empty() {
            continue;
        }
        let load = partition_load(p, groups, &nodes, jobs)?;
        for vo in &config.vos {
            if vo.queues.as_ref().is_some_and(|q| !q.contains(&p.name)) {
                continue;
            }
            let Some(vo_qos) = p.admits(vo) else { continue };
            let vo_name = vo.name.get_ref();
            let mut figures = BTreeMap::new();
            for (prefix, (counts, per_node_max)) in &devices {
                let gres = gres_of.get(prefix).cloned().unwrap_or_else(|| prefix.to_ascii_lowercase());
                let used_by_vo = jobs
                    .iter()
                    .filter(|j| {
                        j.running && j.partition == p.name && job_is_vos(vo, &j.account, &j.group, &j.user, &j.qos)
                    })
                    .try_fold(0u32, |sum, j| sum.checked_add(j.gres.get(&gres).copied().unwrap_or(0)))
                    .ok_or_else(|| {
                        ProviderError::Runtime(format!(
                            "partition {}: the {vo_name} jobs hold more {gres} than a count holds",
                            p.name
                        ))
                    })?;
                // The partition QOS binds every job; of the VO's own QOS a
                // job runs under one, so the most generous one is what it can get.
                let limits_of = |name: &String| qos.get(name);
                let mut group_limits = Vec::new();
                let mut job_limits = Vec::new();
                if let Some(pq) = p.qos.as_ref().and_then(limits_of) {
                    group_limits.extend(pq.group.get(&gres).copied());
                    job_limits.extend(pq.per_job.get(&gres).copied());
                }
                if !vo_qos.is_empty() {
                    let mine: Vec<&QosLimits> = vo_qos.iter().filter_map(|q| limits_of(q)).collect();
                    let unlimited_group =
                        mine.len() < vo_qos.len() || mine.iter().any(|l| !l.group.contains_key(&gres));
                    if !unlimited_group {
                        let best = mine
                            .iter()
                            .filter_map(|l| l.group.get(&gres))
                            .max_by_key(|l| l.limit.saturating_sub(l.held));
                        group_limits.extend(best.copied());
                    }
                    let unlimited_job =
                        mine.len() < vo_qos.len() || mine.iter().any(|l| !l.per_job.contains_key(&gres));
                    if !unlimited_job {
                        job_limits.extend(mine.iter().filter_map(|l| l.per_job.get(&gres)).max().copied());
                    }
                }
                figures.insert(
                    prefix.clone(),
                    share_devices(*counts, *per_node_max, used_by_vo, &group_limits, &job_limits),
                );
            }
            out.push(VoShare {
                id: share_id(&p.name, vo_name, service),
                queue: p.name.clone(),
                vo: vo_name.clone(),
                serving_state: p.serving_state(),
                environments: environments.clone(),
                devices: figures,
                policy: load.for_vo(vo, jobs, &p.name),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const PARTITIONS: &[u8] = b"PartitionName=gpu AllowGroups=ALL AllowAccounts=atlas,cms AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=wn[01-02] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=16 TotalNodes=2 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED\n\
PartitionName=cmsonly AllowGroups=ALL AllowAccounts=cms AllowQos=ALL QoS=N/A Nodes=wn02 State=DRAIN\n\
PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL QoS=N/A Nodes=cpu01 State=UP\n";

    const NODES: &[u8] = b"NodeName=wn01 Gres=gpu:4 GresUsed=gpu:3(IDX:0-2) State=MIXED\n\
NodeName=wn02 Gres=gpu:4 GresUsed=gpu:0(IDX:N/A) State=IDLE\n\
NodeName=cpu01 Gres=(null) GresUsed=(null) State=IDLE\n";

    const JOBS: &[u8] = b"JobId=1 JobName=a UserId=atlas001(1001) GroupId=atlas(1001) MCS_label=N/A Priority=1 Account=atlas QOS=atlas-gpu JobState=RUNNING Reason=None Partition=gpu AllocTRES=cpu=1,mem=100M,node=1,billing=1,gres/gpu=3 TRES=cpu=1,mem=100M,node=1,billing=1,gres/gpu=3\n\
JobId=2 UserId=cms001(2001) GroupId=cms(2001) Account=cms QOS=normal JobState=COMPLETED Partition=gpu TRES=cpu=1,gres/gpu=2\n";

    const ASSOC_QOS: &[u8] = b"Current Association Manager state\n\nQOS Records\n\nQOS=normal(1)\n    UsageRaw=0.000000\n    GrpJobs=N(0) GrpJobsAccrue=N(0) GrpSubmitJobs=N(0) GrpWall=N(0.00)\n    GrpTRES=cpu=N(0),mem=N(0),energy=N(0),node=N(0),billing=N(0),fs/disk=N(0),vmem=N(0),pages=N(0),gres/gpu=N(0)\n    MaxWallPJ=\n    MaxTRESPJ=\n    MaxTRESPN=\n    Account Limits\n        No Accounts\n    User Limits\n        No Users\n\
QOS=atlas-gpu(2)\n    UsageRaw=10.000000\n    GrpTRES=cpu=N(1),mem=N(100),gres/gpu=4(3),gres/gpu:tesla=4(3)\n    MaxTRESPJ=gres/gpu=2\n    Account Limits\n      atlas\n        MaxTRESPA=gres/gpu=1(3)\n    User Limits\n        No Users\n";

    fn config(vos: &str) -> ProviderConfig {
        let text = crate::config::tests::SAMPLE
            .replace("source = \"static\"", "source = \"slurm\"")
            .replace("wn[01-16]", "wn[01-02]")
            .replace("count = 2", "count = 4")
            .replace("used = 2\n", "");
        ProviderConfig::parse(&format!("{text}{vos}"), Path::new("t.toml")).unwrap()
    }

    const TWO_VOS: &str = "\n[[vo]]\nname = \"atlas\"\naccounts = [\"atlas\"]\nqos = [\"atlas-gpu\"]\n\n[[vo]]\nname = \"cms\"\naccounts = [\"cms\"]\n";

    #[test]
    fn scontrol_listings_parse() {
        let p = parse_partitions(PARTITIONS).unwrap();
        assert_eq!(p[0].nodes, ["wn01", "wn02"]);
        assert_eq!(p[0].allow_accounts.as_deref(), Some(&["atlas".to_string(), "cms".to_string()][..]));
        assert_eq!((p[0].allow_groups.clone(), p[0].qos.clone()), (None, None));
        assert_eq!(p[1].serving_state(), "draining");
        let j = parse_jobs(JOBS).unwrap();
        assert_eq!(j.len(), 1, "running and pending jobs only");
        assert_eq!(
            (parse_time("1-02:00:00"), parse_time("30"), parse_time("05:10")),
            (Ok(Some(93_600)), Ok(Some(1800)), Ok(Some(310)))
        );
        assert_eq!(parse_time("UNLIMITED"), Ok(None));
        assert!(parse_time("soon").is_err());
        assert!(parse_time("999999999999999-00:00:00").is_err(), "past a u64 of seconds");
        assert_eq!(p[0].max_time, None);
        assert_eq!((j[0].group.as_str(), j[0].user.as_str(), j[0].gres["gpu"]), ("atlas", "atlas001", 3));
        let q = parse_assoc_mgr_qos(ASSOC_QOS).unwrap();
        assert!(q["normal"].group.is_empty() && q["normal"].per_job.is_empty());
        assert_eq!(q["atlas-gpu"].group["gpu"], GroupLimit { limit: 4, held: 3 });
        assert_eq!(q["atlas-gpu"].per_job["gpu"], 2);
        let e = parse_assoc_mgr_qos(b"QOS=x(3)\n    GrpTRES=gres/gpu=lots(1)\n").unwrap_err();
        assert!(e.to_string().contains("QOS x: GrpTRES gres/gpu=\"lots(1)\" is not a count"), "{e}");
        assert!(parse_jobs(b"JobId=3 JobState=RUNNING Partition=gpu TRES=gres/gpu=-1\n").is_err());
        let j = parse_jobs(b"JobId=4 JobState=RUNNING Partition=gpu TRES=cpu=1,node=1 JOB_GRES=gpu:tesla:1,gpu:k80:2 Nodes=wn01 GRES=gpu:tesla:1(IDX:0)\n").unwrap();
        assert_eq!(j[0].gres["gpu"], 3);
    }

    #[test]
    fn each_vo_share_has_its_own_figures() {
        let cfg = config(TWO_VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let shares = build(
            &cfg,
            &groups,
            &parse_partitions(PARTITIONS).unwrap(),
            &parse_scontrol(NODES).unwrap(),
            &parse_jobs(JOBS).unwrap(),
            &parse_assoc_mgr_qos(ASSOC_QOS).unwrap(),
        )
        .unwrap();
        let ids: Vec<&str> = shares.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "gpu_atlas_ce.example.org_ComputingElement",
                "gpu_cms_ce.example.org_ComputingElement",
                "cmsonly_cms_ce.example.org_ComputingElement"
            ]
        );
        // The partition has 5 free of 8; atlas's QOS allows 4 and holds 3: 1 free, 2 per job.
        let atlas = shares[0].devices["GPGPU"];
        assert_eq!((atlas.total, atlas.free, atlas.used, atlas.max_per_job), (4, 1, 3, 2));
        let cms = shares[1].devices["GPGPU"];
        assert_eq!((cms.total, cms.free, cms.used, cms.max_per_job), (8, 5, 0, 4));
        let mut only_cms = cfg.clone();
        only_cms.vos[1].queues = Some(vec!["cmsonly".into()]);
        let again = build(
            &only_cms,
            &groups,
            &parse_partitions(PARTITIONS).unwrap(),
            &parse_scontrol(NODES).unwrap(),
            &parse_jobs(JOBS).unwrap(),
            &parse_assoc_mgr_qos(ASSOC_QOS).unwrap(),
        )
        .unwrap();
        assert_eq!(
            again.iter().map(|s| (s.queue.as_str(), s.vo.as_str())).collect::<Vec<_>>(),
            [("gpu", "atlas"), ("cmsonly", "cms")]
        );
        let cms_only = &shares[2];
        assert_eq!(cms_only.devices["GPGPU"].free, 4);
        assert_eq!(cms_only.serving_state, "draining");
        assert_eq!(cms_only.environments, ["ce.example.org_gts450"]);
    }

    #[test]
    fn partitions_admit_by_every_allow_list() {
        let cfg = config(TWO_VOS);
        let line = |extra: &str| parse_partitions(format!("PartitionName=p Nodes=wn01 {extra}\n").as_bytes()).unwrap();
        let (atlas, cms) = (&cfg.vos[0], &cfg.vos[1]);
        assert!(line("AllowAccounts=ALL").remove(0).admits(cms).is_some());
        assert!(line("AllowAccounts=atlas").remove(0).admits(cms).is_none());
        // AllowQos restricts to the QOS named; a VO without one of them is out.
        let p = line("AllowQos=atlas-gpu").remove(0);
        assert_eq!(p.admits(atlas).unwrap(), [&"atlas-gpu".to_string()]);
        assert!(p.admits(cms).is_none());
        assert!(line("AllowGroups=wheel").remove(0).admits(atlas).is_none());
        assert!(line("DenyAccounts=cms").remove(0).admits(cms).is_none());
    }
}
