//! Counts from SLURM: `scontrol -d show node -o` and its GRES lists.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use cder_request::gres::ScontrolLine;

use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::command::run_command;
use crate::sources::counts::{CountSource, GroupCounts, NodeFacts};
use crate::sources::walk::{node_counts, walk_groups, LrmsNode};

/// Counts from SLURM: `scontrol -d show node -o`, one line per node with
/// `Gres=`, `GresUsed=` and `State=`.
#[derive(Debug, Clone)]
pub struct SlurmCounts {
    /// The `scontrol` program.
    pub scontrol: PathBuf,
    /// CDER type → GRES name.
    pub gres: BTreeMap<String, String>,
    /// How long `scontrol` may run before the provider gives up.
    pub timeout: Duration,
}

/// One node as `scontrol show node -o` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    /// `NodeName=`.
    pub name: String,
    /// The base state and flags, upper-case (`IDLE`, `MIXED`, `DRAIN` …).
    pub states: Vec<String>,
    /// True when the state carries `*` (not responding).
    pub not_responding: bool,
    /// Configured GRES.
    pub gres: Vec<Gres>,
    /// GRES in use; `None` when scontrol printed no `GresUsed=` at all.
    pub gres_used: Option<Vec<Gres>>,
    /// `CPUTot=`: the node's CPUs as SLURM schedules them (logical CPUs, and SLURM's slots).
    pub cpus: Option<u32>,
    /// `Sockets=`: CPU sockets of the whole node (over all its boards).
    pub sockets: Option<u32>,
    /// `CPUAlloc=`: CPUs held by jobs.
    pub cpu_alloc: Option<u32>,
    /// `Version=`: the node's slurmd version.
    pub version: Option<String>,
}

/// One item of a GRES list: `gpu:tesla:2` is name `gpu`, type `tesla`, count 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gres {
    /// The GRES name (`gpu`).
    pub name: String,
    /// The GRES type (`tesla`), when given.
    pub gres_type: Option<String>,
    /// How many.
    pub count: u32,
}

/// The count of GRES `name` (of `gres_type` only, when given) in a list;
/// `None` when the items add up past a u32 (no node has that many).
pub fn gres_count(list: &[Gres], name: &str, gres_type: Option<&str>) -> Option<u32> {
    list.iter()
        .filter(|g| g.name == name && (gres_type.is_none() || g.gres_type.as_deref() == gres_type))
        .try_fold(0u32, |sum, g| sum.checked_add(g.count))
}

impl SlurmNode {
    /// Down, drained, failed, in maintenance or not responding: its free
    /// devices cannot be given to a job.
    pub fn unavailable(&self) -> bool {
        self.not_responding
            || self.states.iter().any(|s| {
                matches!(
                    s.as_str(),
                    "DOWN"
                        | "DRAIN"
                        | "DRAINED"
                        | "DRAINING"
                        | "FAIL"
                        | "FAILING"
                        | "FUTURE"
                        | "MAINT"
                        | "REBOOT_ISSUED"
                        | "REBOOT_REQUESTED"
                        | "UNKNOWN"
                        | "NOT_RESPONDING"
                        | "INVALID_REG"
                )
            })
    }

    /// Running jobs (allocated, mixed or completing): counts toward `UsedInstances`.
    pub fn busy(&self) -> bool {
        self.states.iter().any(|s| matches!(s.as_str(), "ALLOCATED" | "MIXED" | "COMPLETING"))
    }
}

/// Parses `scontrol show node -o` output.
pub fn parse_scontrol(output: &[u8]) -> Result<Vec<SlurmNode>, ProviderError> {
    let mut nodes = Vec::new();
    for (n, line) in output.split(|&b| b == b'\n').enumerate() {
        let line = std::str::from_utf8(line).map_err(|e| {
            ProviderError::Runtime(format!(
                "scontrol output line {}: not valid UTF-8 at byte {}",
                n + 1,
                e.valid_up_to()
            ))
        })?;
        if line.trim().is_empty() {
            continue;
        }
        // The one `-o` line grammar (cder_request::gres): the first of a key wins.
        let fields: BTreeMap<&str, &str> =
            ScontrolLine::parse(line).fields.into_iter().rev().map(|(k, v, _)| (k, v)).collect();
        let bad = |what: &str| ProviderError::Runtime(format!("scontrol output line {}: {what}: {line:?}", n + 1));
        let name = fields.get("NodeName").ok_or_else(|| bad("no NodeName="))?;
        let state = fields.get("State").ok_or_else(|| bad("no State="))?;
        let not_responding = state.contains('*');
        let states = state
            .split('+')
            .map(|s| s.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']).to_ascii_uppercase())
            .collect();
        let gres =
            parse_gres(fields.get("Gres").copied().unwrap_or("(null)")).map_err(|m| bad(&format!("Gres: {m}")))?;
        let gres_used =
            fields.get("GresUsed").map(|v| parse_gres(v)).transpose().map_err(|m| bad(&format!("GresUsed: {m}")))?;
        let number = |key: &str| {
            fields.get(key).map(|v| v.parse::<u32>().map_err(|_| bad(&format!("{key}={v} is not a count")))).transpose()
        };
        let (cpus, sockets, cpu_alloc) = (number("CPUTot")?, number("Sockets")?, number("CPUAlloc")?);
        let version = fields.get("Version").filter(|v| !v.is_empty() && **v != "(null)").map(|v| v.to_string());
        nodes.push(SlurmNode {
            name: name.to_string(),
            states,
            not_responding,
            gres,
            gres_used,
            cpus,
            sockets,
            cpu_alloc,
            version,
        });
    }
    Ok(nodes)
}

/// Parses a GRES list (`gpu:tesla:2(S:0-1),fpga:1`, `gpu:1(IDX:0,2)`,
/// `gpu:4K`) with `cder_request::gres`, SLURM's own reading, so the provider
/// counts what the plugins count. `(null)` is empty; a count past a u32 is
/// an error (no node has that many).
pub fn parse_gres(value: &str) -> Result<Vec<Gres>, String> {
    let items = cder_request::gres::parse_list(value).map_err(|e| format!("{value:?}: {e}"))?;
    items
        .into_iter()
        .map(|item| {
            let count = u32::try_from(item.count)
                .map_err(|_| format!("{value:?}: {} {} is past {}", item.count, item.name, u32::MAX))?;
            Ok(Gres { name: item.name, gres_type: item.gres_type, count })
        })
        .collect()
}

impl CountSource for SlurmCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        // -d: SLURM 22.05 prints GresUsed= only in the detailed view.
        let output = run_command(&self.scontrol, &["-d", "show", "node", "-o"], self.timeout)?;
        self.counts_from_output(groups, &output)
    }
}

impl SlurmCounts {
    /// Counts `groups` from the output of `scontrol -d show node -o` (what
    /// [`CountSource::counts`] runs); separate so that the parsing and the
    /// sums can be tested and fuzzed without SLURM.
    pub fn counts_from_output(&self, groups: &[NodeGroup], output: &[u8]) -> Result<Vec<GroupCounts>, ProviderError> {
        let nodes: BTreeMap<String, SlurmNode> =
            parse_scontrol(output)?.into_iter().map(|n| (n.name.clone(), n)).collect();
        let listing = format!("SLURM ({} -d show node -o)", self.scontrol.display());
        walk_groups(groups, &nodes, &listing, |host, node, class| {
            let gres = self.gres.get(&class.cder_type).cloned().unwrap_or_else(|| class.cder_type.clone());
            let too_many = |field: &str| {
                ProviderError::Runtime(format!(
                    "{listing}: node {host}: the {gres} items of {field}= add up past {}",
                    u32::MAX
                ))
            };
            let total = gres_count(&node.gres, &gres, class.gres_type.as_deref()).ok_or_else(|| too_many("Gres"))?;
            let used = match &node.gres_used {
                Some(used) => gres_count(used, &gres, class.gres_type.as_deref()).ok_or_else(|| too_many("GresUsed"))?.min(total),
                None if total == 0 => 0,
                None => {
                    return Err(ProviderError::Runtime(format!(
                        "{} -d show node -o printed Gres= but no GresUsed= for node {host}: cannot tell used devices from free",
                        self.scontrol.display()
                    )))
                }
            };
            Ok(node_counts(total, used, node.unavailable()))
        })
    }
}

impl LrmsNode for SlurmNode {
    fn unavailable(&self) -> bool {
        SlurmNode::unavailable(self)
    }
    fn busy(&self) -> bool {
        SlurmNode::busy(self)
    }
    fn facts(&self) -> NodeFacts {
        // SLURM has no swap figure: virtual memory comes from the config.
        NodeFacts {
            physical_cpus: self.sockets,
            logical_cpus: self.cpus,
            slots: self.cpus,
            virtual_memory_mb: None,
            lrms_version: self.version.clone(),
        }
    }
}
