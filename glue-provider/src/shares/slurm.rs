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
use crate::shares::{job_is_vos, queue_devices, share_devices, share_id, GroupLimit, VoShare};
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
}

/// One running job's owner and devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
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

/// `key=value` tokens of one `-o` line, the first of each key.
fn fields(line: &str) -> BTreeMap<&str, &str> {
    let mut out = BTreeMap::new();
    for token in line.split_whitespace() {
        if let Some((k, v)) = token.split_once('=') {
            if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                out.entry(k).or_insert(v);
            }
        }
    }
    out
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
        out.push(Partition {
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

/// Parses the running jobs of `scontrol -d show job -o`.
pub fn parse_jobs(output: &[u8]) -> Result<Vec<RunningJob>, ProviderError> {
    let text = text(output, "scontrol -d show job -o")?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let f = fields(line);
        if f.get("JobState") != Some(&"RUNNING") {
            continue;
        }
        let bad = |what: String| ProviderError::Runtime(format!("scontrol -d show job -o line {}: {what}", n + 1));
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
                    .filter(|j| j.partition == p.name && job_is_vos(vo, &j.account, &j.group, &j.user, &j.qos))
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
        assert_eq!(j.len(), 1, "only running jobs");
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
