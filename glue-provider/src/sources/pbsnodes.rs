//! What TORQUE says: the counts of `pbsnodes -x`, and the [`Facts`]
//! per-VO shares are made of:
//!
//! * `qstat -Qf`: each queue's `acl_group_enable` / `acl_groups`,
//!   `acl_user_enable` / `acl_users` (who may submit), `enabled` / `started`
//!   (serving state), `resources_max` / `resources_default` limits and
//!   `resources_default.neednodes` (the node properties that pick its
//!   nodes; without it, every node);
//! * `pbsnodes -x`: each node's GPUs and `<properties>` (as for the EE);
//! * `qstat -f -1`: the running jobs' `queue`, `euser`, `egroup`,
//!   `Account_Name`, `exec_host` and `exec_gpus` (`wn01-gpu/0+wn01-gpu/1`: two GPUs).
//!
//! TORQUE has no per-queue GPU limit: the shares differ by which nodes a
//! queue runs on, who it admits and what the VO's jobs hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use crate::config::ProviderConfig;
use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::command::run_command;
use crate::sources::counts::{CountSource, DeviceKind, Facts, GroupCounts, Job, Node, NodeFacts, Queue};
use crate::sources::walk::{node_counts, walk_groups, LrmsNode};

/// Counts from TORQUE: `pbsnodes -x`. A node's `<gpus>` is its total; a GPU
/// is used when its `gpu_state` in `<gpu_status>` is not `Unallocated`
/// (without `<gpu_status>`, a `job-exclusive` node's GPUs are all used), and
/// offline when idle with `gpu_mode=Prohibited` (the compute mode an admin
/// sets to take a GPU out of service); a `down`, `offline` or `unknown`
/// node's idle GPUs are all offline.
#[derive(Debug, Clone)]
pub struct TorqueCounts {
    /// The `pbsnodes` program.
    pub pbsnodes: PathBuf,
    /// How long `pbsnodes -x` may run before the provider gives up.
    pub timeout: Duration,
}

/// One `<Node>` of `pbsnodes -x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorqueNode {
    /// The node's `<name>`.
    pub name: String,
    /// The comma-separated words of `<state>` (`free`, `job-exclusive`, `down` …).
    pub states: Vec<String>,
    /// `<gpus>`: the GPUs TORQUE manages on the node.
    pub gpus: u32,
    /// GPUs whose `gpu_state` is not `Unallocated`; `None` without `<gpu_status>`.
    pub gpus_allocated: Option<u32>,
    /// Idle GPUs in compute mode `Prohibited`.
    pub gpus_prohibited: u32,
    /// The node lists running jobs (`<jobs>`).
    pub has_jobs: bool,
    /// The jobs `<jobs>` lists (`0/7.srv,1/7.srv`), by [`job_number`] (`7`).
    pub jobs: Vec<String>,
    /// `<properties>`: the node's features, by which queues choose nodes (`resources_default.neednodes`).
    pub properties: Vec<String>,
    /// `<np>`: the job slots TORQUE schedules on the node.
    pub np: Option<u32>,
    /// `ncpus=` of `<status>`: the logical CPUs pbs_mom counts.
    pub ncpus: Option<u32>,
    /// `totmem=` of `<status>` (RAM plus swap, `kb`), in MB.
    pub totmem_mb: Option<u64>,
    /// `<total_sockets>` (TORQUE 6 built with hwloc).
    pub sockets: Option<u32>,
    /// `version=` of `<status>`: the pbs_mom's TORQUE version.
    pub version: Option<String>,
}

impl TorqueNode {
    /// Down, offline or in an unknown state: its idle GPUs count as offline.
    pub fn unavailable(&self) -> bool {
        self.states.iter().any(|s| matches!(s.as_str(), "down" | "offline" | "unknown" | "state-unknown"))
    }

    /// GPUs held by jobs: from `<gpu_status>`, else all of a `job-exclusive` node's.
    pub fn gpus_used(&self) -> u32 {
        match self.gpus_allocated {
            Some(n) => n.min(self.gpus),
            None if self.states.iter().any(|s| s == "job-exclusive") => self.gpus,
            None => 0,
        }
    }
}

/// Parses `pbsnodes -x` XML (flat `<Data><Node>…</Node></Data>`).
pub fn parse_pbsnodes(output: &[u8]) -> Result<Vec<TorqueNode>, ProviderError> {
    let text = std::str::from_utf8(output).map_err(|e| {
        ProviderError::Runtime(format!("pbsnodes -x output is not valid UTF-8 at byte {}", e.valid_up_to()))
    })?;
    let bad = |m: String| ProviderError::Runtime(format!("pbsnodes -x output: {m}"));
    if !text.trim_start().starts_with("<Data>") && !text.trim_start().starts_with("<?xml") {
        return Err(bad(format!("expected <Data>, got {:?}", text.chars().take(40).collect::<String>())));
    }
    let mut nodes = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<Node>") {
        let end = rest[start..].find("</Node>").ok_or_else(|| bad("a <Node> is not closed".into()))? + start;
        let body = &rest[start + 6..end];
        let name = xml_element(body, "name").ok_or_else(|| bad("a <Node> has no <name>".into()))?;
        let states = xml_element(body, "state")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let gpus = match xml_element(body, "gpus") {
            Some(g) => g.trim().parse().map_err(|_| bad(format!("node {name}: <gpus>{g}</gpus> is not a count")))?,
            None => 0,
        };
        let status = xml_element(body, "gpu_status");
        // gpu[1]=gpu_id=…;gpu_mode=Exclusive_Thread;gpu_state=Exclusive,gpu[0]=…
        let gpu_field = |gpu: &str, key: &str| {
            gpu.split_once("]=")
                .map_or(gpu, |(_, fields)| fields)
                .split(';')
                .find_map(|kv| kv.split_once('=').filter(|(k, _)| k.ends_with(key)).map(|(_, v)| v.to_string()))
        };
        let allocated = |gpu: &str| gpu_field(gpu, "gpu_state").is_some_and(|s| s != "Unallocated");
        let gpu_count = |n: usize| {
            u32::try_from(n).map_err(|_| bad(format!("node {name}: <gpu_status> lists more than {} GPUs", u32::MAX)))
        };
        let gpus_allocated =
            status.as_ref().map(|s| gpu_count(s.split(',').filter(|g| allocated(g)).count())).transpose()?;
        let gpus_prohibited = gpu_count(status.as_ref().map_or(0, |s| {
            s.split(',').filter(|g| !allocated(g) && gpu_field(g, "gpu_mode").as_deref() == Some("Prohibited")).count()
        }))?;
        let job_list = xml_element(body, "jobs").unwrap_or_default();
        let has_jobs = !job_list.trim().is_empty();
        let mut jobs: Vec<String> = job_list
            .split(',')
            .map(|slot| job_number(slot.rsplit_once('/').map_or(slot, |(_, id)| id).trim()).to_string())
            .filter(|id| !id.is_empty())
            .collect();
        jobs.dedup();
        let properties = xml_element(body, "properties")
            .unwrap_or_default()
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        let count = |what: &str, v: &str| {
            v.trim().parse::<u32>().map_err(|_| bad(format!("node {name}: {what} {v:?} is not a count")))
        };
        let np = xml_element(body, "np").map(|v| count("<np>", &v)).transpose()?;
        let sockets = xml_element(body, "total_sockets").map(|v| count("<total_sockets>", &v)).transpose()?;
        // <status>: rectime=…,ncpus=8,physmem=16330000kb,totmem=20426028kb,…,opsys=linux
        let status = xml_element(body, "status").unwrap_or_default();
        // pbs_mom writes `?` and an error code for a figure it could not read (`sessions=? 15201`): unknown.
        let status_field = |key: &str| {
            status.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')).filter(|v| !v.starts_with('?'))
        };
        let ncpus = status_field("ncpus").map(|v| count("ncpus=", v)).transpose()?;
        let totmem_mb = status_field("totmem")
            .map(|v| {
                let kb = v.strip_suffix("kb").unwrap_or(v);
                kb.parse::<u64>()
                    .map(|kb| kb / 1024)
                    .map_err(|_| bad(format!("node {name}: totmem={v} is not a size in kb")))
            })
            .transpose()?;
        let version = status_field("version").filter(|v| !v.is_empty()).map(str::to_string);
        nodes.push(TorqueNode {
            name,
            states,
            gpus,
            gpus_allocated,
            gpus_prohibited,
            has_jobs,
            jobs,
            properties,
            np,
            ncpus,
            totmem_mb,
            sockets,
            version,
        });
        rest = &rest[end + 7..];
    }
    Ok(nodes)
}

fn xml_element(body: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..].find(&close)? + start;
    Some(
        body[start..end]
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

impl CountSource for TorqueCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        if let Some(other) = groups.iter().flat_map(|g| &g.classes).find(|c| c.cder_type != "gpgpu") {
            return Err(ProviderError::Input(format!(
                "TORQUE counts only GPUs (<gpus>), not {} devices: count them with another source",
                other.cder_type
            )));
        }
        if let Some(mixed) = groups.iter().find(|g| g.is_mixed()) {
            return Err(ProviderError::Input(format!(
                "group {:?} has several kinds of GPU, which TORQUE's <gpus> count cannot tell apart",
                mixed.id()
            )));
        }
        let output = run_command(&self.pbsnodes, &["-x"], self.timeout)?;
        self.counts_from_output(groups, &output)
    }
}

impl TorqueCounts {
    /// Counts `groups` from the output of `pbsnodes -x` (what
    /// [`CountSource::counts`] runs, after checking that TORQUE can count
    /// the groups at all); separate so that it can be tested and fuzzed
    /// without TORQUE.
    pub fn counts_from_output(&self, groups: &[NodeGroup], output: &[u8]) -> Result<Vec<GroupCounts>, ProviderError> {
        let nodes: BTreeMap<String, TorqueNode> =
            parse_pbsnodes(output)?.into_iter().map(|n| (n.name.clone(), n)).collect();
        let listing = format!("TORQUE ({} -x)", self.pbsnodes.display());
        walk_groups(groups, &nodes, &listing, |_, node, _| {
            let mut c = node_counts(node.gpus, node.gpus_used(), node.unavailable());
            let prohibited = node.gpus_prohibited.min(c.free);
            c.free -= prohibited;
            c.offline += prohibited;
            Ok(c)
        })
    }
}

impl LrmsNode for TorqueNode {
    fn unavailable(&self) -> bool {
        TorqueNode::unavailable(self)
    }
    fn busy(&self) -> bool {
        self.has_jobs
    }
    fn facts(&self) -> NodeFacts {
        NodeFacts {
            physical_cpus: self.sockets,
            logical_cpus: self.ncpus,
            slots: self.np,
            virtual_memory_mib: self.totmem_mb,
            lrms_version: self.version.clone(),
        }
    }
}

/// One queue of `qstat -Qf`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TorqueQueue {
    /// `Queue: <name>`.
    pub name: String,
    /// Every `key = value` of the queue (continuation lines joined).
    pub attributes: BTreeMap<String, String>,
}

/// One running or waiting job of `qstat -f -1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorqueJob {
    /// `Job Id:` (`7.srv.example.org`).
    pub id: String,
    /// `job_state = R` (else `Q`, `H`, `W`: waiting).
    pub running: bool,
    /// `exec_host` (`wn01/0-1+wn02/3`): the slots held on each node.
    pub exec_slots: Vec<(String, u32)>,
    /// `Resource_List.walltime` less `resources_used.walltime` in seconds;
    /// `None` without a limit.
    pub remaining: Option<u64>,
    /// `queue`.
    pub queue: String,
    /// `euser`: the account the job runs as.
    pub user: String,
    /// `egroup`.
    pub group: String,
    /// `Account_Name`, when given.
    pub account: String,
    /// GPUs in `exec_gpus`.
    pub gpus: u32,
}

/// One `Queue: x` / `Job Id: x` block of `qstat -f`-style output.
#[derive(Debug, Clone, Default)]
struct Block {
    /// The header's value.
    name: String,
    /// The attributes, by key.
    attrs: BTreeMap<String, String>,
    /// Keys printed more than once: qstat prints each once, so a second is
    /// a line inside some value (a job's name, its variables) that only
    /// looks like an attribute.
    repeated: BTreeSet<String>,
    /// The keys in the order printed.
    order: Vec<String>,
}

/// The blocks of `qstat -f`-style output. An attribute is a line of four
/// blanks, a key and ` = `; any other line continues the previous value
/// (qstat wraps long values without `-1`, and a value may hold line breaks).
fn blocks(text: &str, header: &str) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix(header) {
            out.push(Block { name: name.trim().to_string(), ..Block::default() });
            last = None;
            continue;
        }
        let Some(block) = out.last_mut() else { continue };
        match attribute(line) {
            Some((k, v)) => {
                if block.attrs.insert(k.to_string(), v.trim().to_string()).is_some() {
                    block.repeated.insert(k.to_string());
                }
                block.order.push(k.to_string());
                last = Some(k.to_string());
            }
            None if !line.trim().is_empty() => {
                if let Some(v) = last.as_ref().and_then(|k| block.attrs.get_mut(k)) {
                    v.push_str(line.trim());
                }
            }
            None => {}
        }
    }
    out
}

/// `    key = value` → (`key`, `value`); a key is letters, digits, `_` and `.`.
fn attribute(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.strip_prefix("    ")?.split_once(" = ")?;
    let is_key = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
    is_key.then_some((key, value))
}

/// A TORQUE job id's sequence number, the part before the server's name
/// (`7.srv.example.org` → `7`, `8[1].srv` → `8[1]`): `pbsnodes` and
/// `qstat` may spell the server differently.
pub fn job_number(id: &str) -> &str {
    id.split('.').next().unwrap_or(id)
}

fn qstat_text(output: &[u8], what: &str) -> Result<String, ProviderError> {
    String::from_utf8(output.to_vec()).map_err(|e| {
        ProviderError::Runtime(format!("{what}: not valid UTF-8 at byte {}", e.utf8_error().valid_up_to()))
    })
}

/// Parses `qstat -Qf`.
pub fn parse_queues(output: &[u8]) -> Result<Vec<TorqueQueue>, ProviderError> {
    let text = qstat_text(output, "qstat -Qf")?;
    Ok(blocks(&text, "Queue:").into_iter().map(|b| TorqueQueue { name: b.name, attributes: b.attrs }).collect())
}

/// A TORQUE time (`HH:MM:SS`, `MM:SS` or seconds) in seconds.
pub fn parse_qstat_time(value: &str) -> Result<u64, String> {
    let parts: Vec<u64> = value
        .split(':')
        .map(|p| p.parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{value:?} is not a time"))?;
    let (h, m, s) = match parts.as_slice() {
        [s] => (0, 0, *s),
        [m, s] => (0, *m, *s),
        [h, m, s] => (*h, *m, *s),
        _ => return Err(format!("{value:?} is not a time")),
    };
    [(h, 3600u64), (m, 60), (s, 1)]
        .into_iter()
        .try_fold(0u64, |sum, (n, unit)| n.checked_mul(unit).and_then(|x| sum.checked_add(x)))
        .ok_or_else(|| format!("{value:?} is longer than a time holds"))
}

/// A TORQUE size (`4gb`, `512mb`, `1048576kb`, `100b`; `w`: 8-byte words) in MB.
pub fn parse_size_mb(value: &str) -> Result<u64, String> {
    let v = value.to_ascii_lowercase();
    let digits = v.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits.parse().map_err(|_| format!("{value:?} is not a size"))?;
    let bytes_per_unit: u64 = match &v[digits.len()..] {
        "" | "b" => 1,
        "w" => 8,
        "kb" => 1 << 10,
        "kw" => 8 << 10,
        "mb" => 1 << 20,
        "mw" => 8 << 20,
        "gb" => 1 << 30,
        "gw" => 8 << 30,
        "tb" => 1 << 40,
        "tw" => 8 << 40,
        _ => return Err(format!("{value:?} is not a size")),
    };
    Ok(n.saturating_mul(bytes_per_unit) >> 20)
}

/// `wn01/0-1+wn02/3` → `[("wn01", 2), ("wn02", 1)]`.
fn exec_slots(value: &str) -> Result<Vec<(String, u32)>, String> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for item in value.split('+').map(str::trim).filter(|s| !s.is_empty()) {
        let (host, slots) = item.split_once('/').unwrap_or((item, "0"));
        let mut n = 0u32;
        for range in slots.split(',') {
            let count = match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (a.parse::<u32>(), b.parse::<u32>());
                    match (a, b) {
                        (Ok(a), Ok(b)) if b >= a => (b - a).saturating_add(1),
                        _ => return Err(format!("{item:?} is not a host/slots item")),
                    }
                }
                None => {
                    range.parse::<u32>().map_err(|_| format!("{item:?} is not a host/slots item"))?;
                    1
                }
            };
            n = n.saturating_add(count);
        }
        match out.iter_mut().find(|(h, _)| h == host) {
            Some((_, m)) => *m = m.saturating_add(n),
            None => out.push((host.to_string(), n)),
        }
    }
    Ok(out)
}

/// What `qstat -f -1` listed: the jobs read, and a warning for each job skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QstatJobs {
    /// The running and waiting jobs.
    pub jobs: Vec<TorqueJob>,
    /// One message per job that could not be read, naming it.
    pub skipped: Vec<String>,
}

/// Parses the running and waiting jobs of `qstat -f -1` (see [`parse_qstat_job_listing`]).
pub fn parse_qstat_jobs(output: &[u8]) -> Result<Vec<TorqueJob>, ProviderError> {
    Ok(parse_qstat_job_listing(output).jobs)
}

/// Parses the running and waiting jobs of `qstat -f -1`, skipping with a
/// warning each job whose block cannot be trusted or read: one printing an
/// attribute twice (a value of the job's own, its name or variables, holds
/// a line that looks like one), one whose id is printed twice (a forged
/// `Job Id:` line), one without `job_state` or `queue` (a block a forged
/// header cut short), one whose values do not read. Running jobs are
/// checked against `pbsnodes` by [`running_on_nodes`]. Bytes that are not
/// UTF-8 are replaced, never fatal: a job's name may hold any.
pub fn parse_qstat_job_listing(output: &[u8]) -> QstatJobs {
    let text = String::from_utf8_lossy(output);
    let blocks = blocks(&text, "Job Id:");
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for b in &blocks {
        *seen.entry(job_number(&b.name)).or_default() += 1;
    }
    let mut listing = QstatJobs::default();
    for b in &blocks {
        let id = &b.name;
        match qstat_job(b, seen[job_number(id)]) {
            Ok(Some(job)) => listing.jobs.push(job),
            Ok(None) => {}
            Err(why) => listing.skipped.push(format!("qstat -f -1: skipping job {id:?}: {why}")),
        }
    }
    listing
}

/// One job block; `Ok(None)` for a job neither running nor waiting.
fn qstat_job(b: &Block, blocks_of_id: usize) -> Result<Option<TorqueJob>, String> {
    let a = &b.attrs;
    if blocks_of_id > 1 {
        return Err(format!("{blocks_of_id} blocks carry its id"));
    }
    // qstat prints Job_Owner right after Job_Name: a line between them is the name's.
    let at = |key: &str| b.order.iter().position(|k| k == key);
    if let (Some(name), Some(owner)) = (at("Job_Name"), at("Job_Owner")) {
        if owner != name + 1 {
            return Err("Job_Name spans lines that look like attributes".into());
        }
    }
    if !b.repeated.is_empty() {
        let keys: Vec<&str> = b.repeated.iter().map(String::as_str).collect();
        return Err(format!("{} printed twice: a value holds a line that looks like an attribute", keys.join(", ")));
    }
    let running = match a.get("job_state").map(String::as_str) {
        Some("R") => true,
        Some("Q" | "H" | "W") => false,
        Some(_) => return Ok(None),
        None if a.is_empty() => return Ok(None),
        None => return Err("no job_state: its block was cut short".into()),
    };
    let queue = a.get("queue").ok_or("no queue: its block was cut short")?;
    let time = |k: &str| a.get(k).map(|v| parse_qstat_time(v)).transpose().map_err(|m| format!("{k}: {m}"));
    let remaining = match time("Resource_List.walltime")? {
        None => None,
        Some(limit) => Some(limit.saturating_sub(time("resources_used.walltime")?.unwrap_or(0))),
    };
    let exec_slots = match a.get("exec_host") {
        Some(v) if running => exec_slots(v).map_err(|m| format!("exec_host: {m}"))?,
        _ => Vec::new(),
    };
    let gpus = a.get("exec_gpus").map_or(0, |g| g.split('+').filter(|s| !s.trim().is_empty()).count());
    let gpus = u32::try_from(gpus).map_err(|_| "exec_gpus lists too many GPUs".to_string())?;
    let get = |k: &str| a.get(k).cloned().unwrap_or_default();
    Ok(Some(TorqueJob {
        id: b.name.clone(),
        running,
        exec_slots,
        remaining,
        queue: queue.clone(),
        user: get("euser"),
        group: get("egroup"),
        account: get("Account_Name"),
        gpus,
    }))
}

/// Keeps the waiting jobs, and the running ones that a node's `<jobs>` in
/// `pbsnodes -x` lists; a running block no node knows is text that spans
/// lines and forges a whole job (a `Job Id:` line inside a value): it is
/// skipped, with a warning.
pub fn running_on_nodes(jobs: Vec<TorqueJob>, nodes: &[TorqueNode]) -> (Vec<TorqueJob>, Vec<String>) {
    let on_nodes: BTreeSet<&str> = nodes.iter().flat_map(|n| &n.jobs).map(String::as_str).collect();
    let mut skipped = Vec::new();
    let kept = jobs
        .into_iter()
        .filter(|j| {
            let known = !j.running || on_nodes.contains(job_number(&j.id));
            if !known {
                skipped.push(format!("qstat -f -1: skipping job {:?}: running, but no node's <jobs> lists it", j.id));
            }
            known
        })
        .collect();
    (kept, skipped)
}

impl TorqueQueue {
    fn flag(&self, key: &str) -> bool {
        self.attributes.get(key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }

    fn list(&self, key: &str) -> Vec<String> {
        // ACL entries may carry a host (`atlas@ui.example.org`).
        self.attributes
            .get(key)
            .map(|v| v.split(',').map(|e| e.split('@').next().unwrap_or(e).trim().to_string()).collect())
            .unwrap_or_default()
    }

    /// The node properties `resources_default.neednodes` asks for (`gpu` in `1:ppn=4:gpu`).
    pub fn needed_properties(&self) -> Vec<String> {
        self.attributes
            .get("resources_default.neednodes")
            .map(|v| {
                v.split([':', '+'])
                    .filter(|p| !p.is_empty() && !p.contains('=') && !p.bytes().all(|b| b.is_ascii_digit()))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    fn time(&self, key: &str) -> Result<Option<u64>, ProviderError> {
        self.attributes
            .get(key)
            .map(|v| parse_qstat_time(v))
            .transpose()
            .map_err(|m| ProviderError::Runtime(format!("qstat -Qf: queue {}: {key}: {m}", self.name)))
    }

    fn size_mb(&self, key: &str) -> Result<Option<u64>, ProviderError> {
        self.attributes
            .get(key)
            .map(|v| parse_size_mb(v))
            .transpose()
            .map_err(|m| ProviderError::Runtime(format!("qstat -Qf: queue {}: {key}: {m}", self.name)))
    }

    fn count(&self, key: &str) -> Result<Option<u32>, ProviderError> {
        self.attributes
            .get(key)
            .map(|v| v.parse::<u32>())
            .transpose()
            .map_err(|_| ProviderError::Runtime(format!("qstat -Qf: queue {}: {key} is not a count", self.name)))
    }

    /// `GLUE2ComputingShareServingState`: a disabled queue takes no jobs
    /// (closed); a stopped one takes but does not run them (queueing).
    pub fn serving_state(&self) -> &'static str {
        if self.attributes.get("enabled").is_some_and(|v| v.eq_ignore_ascii_case("false")) {
            "closed"
        } else if self.attributes.get("started").is_some_and(|v| v.eq_ignore_ascii_case("false")) {
            "queueing"
        } else {
            "production"
        }
    }
}

/// Asks TORQUE what per-VO shares are made of: the queues, the nodes and
/// the jobs, for the device kinds of `groups`.
pub fn share_facts(config: &ProviderConfig, groups: &[NodeGroup]) -> Result<Facts, ProviderError> {
    let timeout = Duration::from_secs((*config.counts.timeout_s.get_ref()).max(1));
    let queues = parse_queues(&run_command(&config.counts.qstat, &["-Qf"], timeout)?)?;
    let nodes = parse_pbsnodes(&run_command(&config.counts.pbsnodes, &["-x"], timeout)?)?;
    let listing = parse_qstat_job_listing(&run_command(&config.counts.qstat, &["-f", "-1"], timeout)?);
    let (jobs, unknown) = running_on_nodes(listing.jobs, &nodes);
    for warning in listing.skipped.iter().chain(&unknown) {
        eprintln!("cder-glue-provider: warning: {warning}");
    }
    facts(groups, &queues, &nodes, &jobs)
}

/// The [`Facts`] in what `qstat` and `pbsnodes` printed, separate from the
/// commands so that they can be tested without TORQUE. A queue's nodes are
/// those with every property its `neednodes` asks for; a node's held slots
/// are what the jobs' `exec_host` give it.
pub fn facts(
    groups: &[NodeGroup],
    queues: &[TorqueQueue],
    nodes: &[TorqueNode],
    jobs: &[TorqueJob],
) -> Result<Facts, ProviderError> {
    let nodes: BTreeMap<&str, &TorqueNode> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    // TORQUE counts GPUs only (the count source refuses other types), so
    // every kind the groups ask for is a node's <gpus>.
    let kinds: BTreeSet<DeviceKind> = groups
        .iter()
        .flat_map(|g| &g.classes)
        .map(|c| DeviceKind { cder_type: c.cder_type.clone(), gres_type: c.gres_type.clone() })
        .collect();
    let held = |host: &str| {
        jobs.iter()
            .flat_map(|j| &j.exec_slots)
            .filter(|(h, _)| h == host)
            .fold(0u32, |sum, (_, n)| sum.saturating_add(*n))
    };
    let node = |n: &TorqueNode| {
        let mut c = node_counts(n.gpus, n.gpus_used(), n.unavailable());
        // An idle GPU in compute mode Prohibited is out of service.
        let prohibited = n.gpus_prohibited.min(c.free);
        c.free -= prohibited;
        c.offline += prohibited;
        Node {
            unavailable: n.unavailable(),
            slots: n.np,
            slots_used: Some(held(&n.name)),
            virtual_memory_mib: n.totmem_mb,
            devices: kinds.iter().map(|k| (k.clone(), c)).collect(),
        }
    };
    let mut out = Facts {
        queue_word: "queue",
        node_listing: "pbsnodes -x",
        nodes: nodes.iter().map(|(name, n)| (name.to_string(), node(n))).collect(),
        ..Facts::default()
    };
    for q in queues {
        let needed = q.needed_properties();
        let runs_on = nodes
            .values()
            .filter(|n| needed.iter().all(|p| n.properties.contains(p)))
            .map(|n| n.name.clone())
            .collect();
        let enabled_acl = |flag: &str, list: &str| q.flag(flag).then(|| q.list(list));
        // Without a default, a job is held to the queue's maximum.
        let max_wall = q.time("resources_max.walltime")?;
        let max_cpu = q.time("resources_max.cput")?;
        let max_slots_per_job = q.count("resources_max.procs")?.or(q.count("resources_max.ncpus")?);
        out.queues.push(Queue {
            name: q.name.clone(),
            nodes: runs_on,
            serving_state: q.serving_state(),
            runs_jobs: !q.attributes.get("queue_type").is_some_and(|t| !t.eq_ignore_ascii_case("execution")),
            allow_groups: enabled_acl("acl_group_enable", "acl_groups"),
            allow_users: enabled_acl("acl_user_enable", "acl_users"),
            max_wall_time: max_wall,
            default_wall_time: q.time("resources_default.walltime")?.or(max_wall),
            max_cpu_time: max_cpu,
            default_cpu_time: q.time("resources_default.cput")?.or(max_cpu),
            max_slots_per_job,
            max_memory_per_node_mb: q.size_mb("resources_max.mem")?,
            default_memory_mib: q.size_mb("resources_default.mem")?,
            max_virtual_memory_mib: q.size_mb("resources_max.vmem")?,
            max_running_jobs: q.count("max_running")?.filter(|n| *n > 0),
            max_total_jobs: q.count("max_queuable")?.filter(|n| *n > 0),
            ..Queue::default()
        });
    }
    let types: BTreeSet<&str> = kinds.iter().map(|k| k.cder_type.as_str()).collect();
    out.jobs = jobs
        .iter()
        .map(|j| Job {
            running: j.running,
            slots: j.exec_slots.iter().fold(0u32, |sum, (_, n)| sum.saturating_add(*n)),
            remaining: j.remaining,
            queue: j.queue.clone(),
            account: j.account.clone(),
            group: j.group.clone(),
            user: j.user.clone(),
            qos: String::new(),
            devices: types.iter().map(|t| (t.to_string(), j.gpus)).collect(),
        })
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Counts;
    use std::path::Path;

    const QUEUES: &[u8] = b"Queue: gpu\n    queue_type = Execution\n    total_jobs = 1\n    acl_group_enable = True\n    acl_groups = atlas,cms@ui.example.org\n    resources_default.neednodes = 1:gpu\n    enabled = True\n    started = True\n\n\
Queue: atlasonly\n    queue_type = Execution\n    acl_group_enable = True\n    acl_groups = atlas\n    enabled = True\n    started = False\n\n\
Queue: route\n    queue_type = Route\n    route_destinations = gpu\n    enabled = True\n    started = True\n\n\
Queue: cpu\n    queue_type = Execution\n    resources_default.neednodes = cpu\n    enabled = True\n    started = True\n";

    const NODES: &[u8] =
        b"<Data><Node><name>wn01</name><state>job-exclusive</state><properties>gpu,k20</properties><gpus>2</gpus>\
<gpu_status>gpu[1]=gpu_state=Exclusive,gpu[0]=gpu_state=Exclusive</gpu_status><jobs>0/7.srv</jobs></Node>\
<Node><name>wn02</name><state>free</state><np>2</np><properties>gpu</properties><gpus>2</gpus></Node></Data>";

    const JOBS: &[u8] = b"Job Id: 7.srv\n    Job_Name = train\n    job_state = R\n    queue = gpu\n    euser = cms001\n    egroup = cms\n    exec_host = wn01/0\n    exec_gpus = wn01-gpu/0+wn01-gpu/1\n\n\
Job Id: 8.srv\n    job_state = Q\n    queue = gpu\n    euser = atlas001\n    egroup = atlas\n";

    fn config() -> ProviderConfig {
        let text = crate::config::tests::SAMPLE
            .replace("source = \"static\"", "source = \"torque\"")
            .replace("wn[01-16]", "wn[01-02]")
            .replace("used = 2\n", "");
        let vos = "\n[[vo]]\nname = \"atlas\"\ngroups = [\"atlas\"]\n\n[[vo]]\nname = \"cms\"\ngroups = [\"cms\"]\n";
        ProviderConfig::parse(&format!("{text}{vos}"), Path::new("t.toml")).unwrap()
    }

    fn listed(groups: &[NodeGroup]) -> Facts {
        let queues = parse_queues(QUEUES).unwrap();
        facts(groups, &queues, &parse_pbsnodes(NODES).unwrap(), &parse_qstat_jobs(JOBS).unwrap()).unwrap()
    }

    #[test]
    fn qstat_listings_parse() {
        let queues = parse_queues(QUEUES).unwrap();
        assert_eq!(queues[0].needed_properties(), ["gpu"]);
        assert_eq!(queues[0].attributes["acl_groups"], "atlas,cms@ui.example.org");
        let jobs = parse_qstat_jobs(JOBS).unwrap();
        assert_eq!(jobs.len(), 2, "running and queued");
        assert_eq!((jobs[0].group.as_str(), jobs[0].gpus, jobs[0].running), ("cms", 2, true));
        assert_eq!(jobs[0].exec_slots, [("wn01".to_string(), 1)]);
        assert!(!jobs[1].running);
        assert_eq!(exec_slots("wn01/0-1,4+wn02/3").unwrap(), [("wn01".to_string(), 3), ("wn02".to_string(), 1)]);
        assert_eq!((parse_qstat_time("48:00:00"), parse_qstat_time("90")), (Ok(172_800), Ok(90)));
        assert_eq!((parse_size_mb("4gb"), parse_size_mb("2097152kb")), (Ok(4096), Ok(2048)));
        assert!(parse_size_mb("4xb").is_err());
        assert!(parse_qstat_time("99999999999999999:00:00").is_err());
    }

    #[test]
    fn qstat_and_pbsnodes_text_becomes_facts() {
        let groups = crate::site::node_groups(&config()).unwrap();
        let f = listed(&groups);
        assert_eq!((f.queue_word, f.node_listing), ("queue", "pbsnodes -x"));
        let q: Vec<(&str, &[String], bool, &str)> =
            f.queues.iter().map(|q| (q.name.as_str(), q.nodes.as_slice(), q.runs_jobs, q.serving_state)).collect();
        let both = ["wn01".to_string(), "wn02".to_string()];
        assert_eq!(
            q,
            [
                ("gpu", &both[..], true, "production"),
                ("atlasonly", &both[..], true, "queueing"),
                ("route", &both[..], false, "production"),
                ("cpu", &[][..], true, "production"),
            ],
            "neednodes picks nodes by property; a routing queue runs no jobs"
        );
        // An ACL entry's host is dropped; a queue without an enabled ACL admits everyone.
        assert_eq!(f.queues[0].allow_groups.as_deref(), Some(&["atlas".to_string(), "cms".to_string()][..]));
        assert_eq!((f.queues[0].allow_users.as_ref(), f.queues[3].allow_groups.as_ref()), (None, None));
        let kind = DeviceKind { cder_type: "gpgpu".into(), gres_type: None };
        assert_eq!(f.nodes["wn01"].devices[&kind], Counts { total: 2, free: 0, used: 2, offline: 0 });
        // wn02's two slots are idle; wn01's one is held by job 7.
        assert_eq!(
            (f.nodes["wn01"].slots_used, f.nodes["wn02"].slots, f.nodes["wn02"].slots_used),
            (Some(1), Some(2), Some(0))
        );
        assert_eq!(f.jobs.len(), 2);
        assert_eq!((f.jobs[0].slots, f.jobs[0].devices.get("gpgpu"), f.jobs[0].qos.as_str()), (1, Some(&2), ""));
    }

    #[test]
    fn queue_limits_and_out_of_service_gpus_become_facts() {
        let groups = crate::site::node_groups(&config()).unwrap();
        let queues = parse_queues(b"Queue: q\n    resources_max.walltime = 48:00:00\n    resources_default.cput = 01:00:00\n    resources_max.mem = 8gb\n    resources_default.mem = 2048mb\n    resources_max.vmem = 12gb\n    resources_max.ncpus = 3\n    max_running = 10\n    max_queuable = 0\n    enabled = False\n").unwrap();
        let nodes = parse_pbsnodes(b"<Data><Node><name>wn01</name><state>free</state><np>4</np><status>totmem=2097152kb</status><gpus>2</gpus><gpu_status>gpu[1]=gpu_mode=Prohibited;gpu_state=Unallocated,gpu[0]=gpu_state=Exclusive</gpu_status></Node></Data>").unwrap();
        let f = facts(&groups, &queues, &nodes, &[]).unwrap();
        let q = &f.queues[0];
        assert_eq!(
            (q.max_wall_time, q.default_wall_time),
            (Some(172_800), Some(172_800)),
            "no default: held to the maximum"
        );
        assert_eq!((q.max_cpu_time, q.default_cpu_time), (None, Some(3600)));
        assert_eq!(
            (q.max_memory_per_node_mb, q.default_memory_mib, q.max_virtual_memory_mib),
            (Some(8192), Some(2048), Some(12288))
        );
        assert_eq!(
            (q.max_slots_per_job, q.max_running_jobs, q.max_total_jobs),
            (Some(3), Some(10), None),
            "0 is no limit"
        );
        assert_eq!(q.serving_state, "closed");
        let n = &f.nodes["wn01"];
        let kind = DeviceKind { cder_type: "gpgpu".into(), gres_type: None };
        assert_eq!(
            n.devices[&kind],
            Counts { total: 2, free: 0, used: 1, offline: 1 },
            "the Prohibited GPU is offline"
        );
        assert_eq!(n.virtual_memory_mib, Some(2048));
        let bad = parse_queues(b"Queue: q\n    resources_max.walltime = soon\n").unwrap();
        let e = facts(&groups, &bad, &nodes, &[]).unwrap_err();
        assert!(e.to_string().contains("qstat -Qf: queue q: resources_max.walltime"), "{e}");
    }

    #[test]
    fn qstat_text_through_the_shares_gives_each_vo_its_figures() {
        let cfg = config();
        let groups = crate::site::node_groups(&cfg).unwrap();
        let shares = crate::shares::from_facts(&cfg, &groups, &listed(&groups)).unwrap();
        let got: Vec<(&str, &str, [u32; 4], &str)> = shares
            .iter()
            .map(|s| {
                let d = s.devices["GPGPU"];
                (s.queue.as_str(), s.vo.as_str(), [d.total, d.free, d.used, d.max_per_job], s.serving_state)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("gpu", "atlas", [4, 2, 0, 2], "production"),
                ("gpu", "cms", [4, 2, 2, 2], "production"),
                ("atlasonly", "atlas", [4, 2, 0, 2], "queueing"),
            ],
            "the route queue takes no jobs itself, cpu's nodes carry none of the groups"
        );
        // gpu has idle slots (wn02's 2) for its one queued job; the stopped atlasonly starts none.
        assert_eq!(shares[0].policy.estimated_worst_waiting_time, 0);
        assert_eq!((shares[0].policy.waiting_jobs, shares[1].policy.running_jobs), (1, 1));
        assert_eq!((shares[0].policy.free_slots, shares[1].policy.used_slots), (2, 1));
        assert_eq!(shares[2].policy.estimated_worst_waiting_time, crate::sources::UNLIMITED_TIME);
    }

    /// Blocks of realistic `qstat -f -1` output (Job_Owner right after
    /// Job_Name, as qstat prints it), hostile where the owner writes: the
    /// job's name and its variables.
    const HOSTILE: &str = "Job Id: 30.srv\n    Job_Name = x\n    exec_gpus = wn02-gpu/0+wn02-gpu/1\n    Account_Name = atlas\n    Job_Owner = cms001@ui\n    job_state = R\n    queue = gpu\n    exec_host = wn02/0\n    euser = cms001\n    egroup = cms\n\n\
Job Id: 31.srv\n    Job_Name = v\n    Job_Owner = cms001@ui\n    job_state = Q\n    queue = gpu\n    Variable_List = PBS_O_HOME=/home/cms001,X=a\n    queue = atlasonly\n    egroup = atlas\n    euser = cms001\n    egroup = cms\n\n\
Job Id: 32.srv\n    Job_Name = a = b    queue = other euser = root\n    Job_Owner = atlas001@ui\n    job_state = Q\n    queue = gpu\n    euser = atlas001\n    egroup = atlas\n\n\
Job Id: 35.srv\n    Job_Name = ok\n    Job_Owner = atlas001@ui\n    job_state = R\n    queue = gpu\n    exec_host = wn01/1\n    euser = atlas001\n    egroup = atlas\n";

    #[test]
    fn lines_inside_a_job_s_own_values_are_not_attributes() {
        let jobs = parse_qstat_jobs(HOSTILE.as_bytes()).unwrap();
        let got: Vec<(&str, &str, &str, u32, bool)> =
            jobs.iter().map(|j| (j.id.as_str(), j.queue.as_str(), j.group.as_str(), j.gpus, j.running)).collect();
        assert_eq!(got, [("32.srv", "gpu", "atlas", 0, false), ("35.srv", "gpu", "atlas", 0, true)]);
        let skipped = parse_qstat_job_listing(HOSTILE.as_bytes()).skipped.join("\n");
        assert!(skipped.contains("job \"30.srv\": Job_Name spans lines"), "{skipped}");
        assert!(skipped.contains("job \"31.srv\": egroup, queue printed twice"), "{skipped}");
    }

    #[test]
    fn one_unreadable_job_is_skipped_and_the_rest_read() {
        let mut text = b"Job Id: 40.srv\n    Job_Name = \xff\xfe".to_vec();
        text.extend("n".repeat(200_000).as_bytes());
        text.extend(b"\n    Job_Owner = atlas001@ui\n    job_state = Q\n    queue = gpu\n    euser = atlas001\n    egroup = atlas\n\n");
        text.extend(b"Job Id: 41.srv\n    Job_Name = t\n    Job_Owner = atlas001@ui\n    job_state = Q\n    queue = gpu\n    Resource_List.walltime = soon\n\n");
        text.extend(b"Job Id: 42.srv\n    Job_Name = t\n    Job_Owner = cms001@ui\n    job_state = R\n    queue = gpu\n    exec_host = wn01/many\n");
        let jobs = parse_qstat_jobs(&text).unwrap();
        assert_eq!(
            jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
            ["40.srv"],
            "a name that is not UTF-8 is only a name"
        );
        let skipped = parse_qstat_job_listing(&text).skipped;
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(
            skipped[0].contains("\"41.srv\": Resource_List.walltime") && skipped[1].contains("\"42.srv\": exec_host")
        );
    }

    /// A name that holds `Job Id:` lines forges whole jobs: the job it cuts
    /// short is skipped, and a forged running job no node runs is too.
    #[test]
    fn forged_job_blocks_are_skipped() {
        let text = "Job Id: 50.srv\n    Job_Name = x\nJob Id: 99.srv\n    Job_Name = y\n    Job_Owner = cms001@ui\n    job_state = R\n    queue = gpu\n    euser = cms001\n    egroup = cms\n    exec_host = wn02/0-1\n    exec_gpus = wn02-gpu/0+wn02-gpu/1\nJob Id: 7.other\n    Job_Name = z\n    Job_Owner = cms001@ui\n    job_state = R\n    queue = gpu\n    euser = cms001\n    egroup = cms\n    exec_host = wn01/0\n\n\
Job Id: 7.srv\n    Job_Name = train\n    Job_Owner = cms001@ui\n    job_state = R\n    queue = gpu\n    euser = cms001\n    egroup = cms\n    exec_host = wn01/0\n    exec_gpus = wn01-gpu/0+wn01-gpu/1\n";
        let listing = parse_qstat_job_listing(text.as_bytes());
        let skipped = listing.skipped.join("\n");
        assert!(skipped.contains("\"50.srv\": no job_state"), "{skipped}");
        assert!(
            skipped.contains("\"7.other\": 2 blocks carry its id") && skipped.contains("\"7.srv\": 2 blocks"),
            "{skipped}"
        );
        let (jobs, unknown) = running_on_nodes(listing.jobs, &parse_pbsnodes(NODES).unwrap());
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(unknown, ["qstat -f -1: skipping job \"99.srv\": running, but no node's <jobs> lists it"]);
        // The real job alone is kept: wn01's <jobs> lists it.
        let (jobs, unknown) = running_on_nodes(parse_qstat_jobs(JOBS).unwrap(), &parse_pbsnodes(NODES).unwrap());
        assert_eq!((jobs.len(), unknown.len()), (2, 0));
    }
}
