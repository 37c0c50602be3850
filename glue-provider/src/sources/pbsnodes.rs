//! Counts from TORQUE: `pbsnodes -x`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::command::run_command;
use crate::sources::counts::{CountSource, GroupCounts, NodeFacts};
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
        let has_jobs = xml_element(body, "jobs").is_some_and(|j| !j.trim().is_empty());
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
            virtual_memory_mb: self.totmem_mb,
            lrms_version: self.version.clone(),
        }
    }
}
