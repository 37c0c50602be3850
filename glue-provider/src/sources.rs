//! Where the dynamic numbers come from: cderd's `status` on a single node,
//! the LRMS for a cluster (SLURM `scontrol -d show node -o`, TORQUE
//! `pbsnodes -x`), or values written in the config; and the vGPGPU counts
//! behind [`VirtualGpgpuSource`].

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_protocol::DeviceState;

use crate::config::{CountSourceKind, ProviderConfig, VirtualConfig, VirtualSourceKind};
use crate::site::{DeviceClass, NodeGroup};
use crate::error::ProviderError;

/// Device counts of one type over a whole group. Offline counts drained,
/// unhealthy and down-node devices, which are neither free nor used:
/// `total = free + used + offline`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u32,
    pub free: u32,
    pub used: u32,
    pub offline: u32,
}

impl Counts {
    /// Adds `other`, or names the first count that would not fit in a u32
    /// (a listing that claims more devices than any site has is refused,
    /// never wrapped or capped).
    fn checked_add(self, other: Counts) -> Result<Counts, &'static str> {
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
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError>;
}

/// One virtual-GPGPU service (an API-interception method such as rCUDA or
/// VCL) as published: a GLUE2ApplicationEnvironment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualEnvironment {
    /// `rCUDA`, `VCL`: the AppName.
    pub method: String,
    /// `GLUE2ApplicationEnvironmentID`; `None` means `<manager id>_<method>`.
    pub id: Option<String>,
    pub version: Option<String>,
    pub total: u32,
    pub free: u32,
}

/// Where vGPGPU counts come from. Today the config ([`StaticVirtual`]); the
/// cluster registry implements this trait to publish live counts.
pub trait VirtualGpgpuSource {
    fn environments(&self) -> Result<Vec<VirtualEnvironment>, ProviderError>;
}

/// vGPGPU counts written in `[[virtual]]`.
#[derive(Debug, Clone, Default)]
pub struct StaticVirtual(pub Vec<VirtualEnvironment>);

impl StaticVirtual {
    /// The `[[virtual]]` entries with their `total` and `free` (0 when absent).
    pub fn from_config(entries: &[VirtualConfig]) -> StaticVirtual {
        StaticVirtual(
            entries
                .iter()
                .map(|v| VirtualEnvironment {
                    method: v.method.get_ref().clone(),
                    id: v.id.clone(),
                    version: v.version.clone(),
                    total: v.total.unwrap_or(0),
                    free: v.free.unwrap_or(0),
                })
                .collect(),
        )
    }
}

/// vGPGPU counts from the cluster registry (`cder-registryd`): one
/// environment per method the registry has backends for, or that
/// `[[virtual]]` names (which also gives its id and version).
#[derive(Debug, Clone)]
pub struct RegistryVirtual {
    pub registry: cder_model::RegistryConfig,
    pub described: Vec<VirtualConfig>,
}

impl VirtualGpgpuSource for RegistryVirtual {
    fn environments(&self) -> Result<Vec<VirtualEnvironment>, ProviderError> {
        let failed = |e: cder_registry_client::ClientError| ProviderError::Runtime(format!("vGPGPU registry {}: {e}", self.registry.url));
        let status = cder_registry_client::Client::from_config(&self.registry).and_then(|c| c.status()).map_err(failed)?;
        let mut out = Vec::new();
        for method in cder_model::VgpgpuMethod::ALL {
            let counts = status.counts_for(Some(method));
            let described = self.described.iter().find(|v| v.method.get_ref().eq_ignore_ascii_case(method.name()));
            if counts.total == 0 && described.is_none() {
                continue;
            }
            // A count past u32 is a registry gone wrong: refuse it rather than publish a capped number.
            let count = |field: &str, n: u64| {
                u32::try_from(n).map_err(|_| ProviderError::Runtime(format!("vGPGPU registry {}: {} {field} = {n} is out of range", self.registry.url, method.name())))
            };
            out.push(VirtualEnvironment {
                method: method.name().to_string(),
                id: described.and_then(|v| v.id.clone()),
                version: described.and_then(|v| v.version.clone()),
                total: count("total", counts.total)?,
                free: count("free", counts.free)?,
            });
        }
        if let Some(unknown) = self.described.iter().find(|v| !cder_model::VgpgpuMethod::ALL.iter().any(|m| v.method.get_ref().eq_ignore_ascii_case(m.name()))) {
            return Err(ProviderError::Input(format!("[[virtual]] method {:?} is not one the registry serves (rCUDA, VCL)", unknown.method.get_ref())));
        }
        Ok(out)
    }
}

/// The vGPGPU source the config names.
pub fn virtual_from_config(config: &ProviderConfig) -> Result<Box<dyn VirtualGpgpuSource>, ProviderError> {
    match config.counts.virtual_source {
        VirtualSourceKind::Config => Ok(Box::new(StaticVirtual::from_config(&config.virtual_environments))),
        VirtualSourceKind::Registry => {
            let path = cder_model::Config::resolve_path(config.site.cder_config.as_deref());
            let node = cder_model::Config::load(Some(&path))?;
            let registry = node.registry.ok_or_else(|| {
                ProviderError::Input(format!("counts.virtual_source = \"registry\" needs a [registry] section in {}", path.display()))
            })?;
            Ok(Box::new(RegistryVirtual { registry, described: config.virtual_environments.clone() }))
        }
    }
}

impl VirtualGpgpuSource for StaticVirtual {
    fn environments(&self) -> Result<Vec<VirtualEnvironment>, ProviderError> {
        Ok(self.0.clone())
    }
}

/// The count source the config names.
pub fn from_config(config: &ProviderConfig) -> Box<dyn CountSource> {
    let timeout = Duration::from_secs((*config.counts.timeout_s.get_ref()).max(1));
    match config.counts.source.get_ref() {
        CountSourceKind::Cderd => Box::new(CderdCounts {
            socket: config.counts.socket.clone().unwrap_or_else(|| cder_model::DEFAULT_SOCKET.into()),
            timeout,
        }),
        CountSourceKind::Slurm => Box::new(SlurmCounts { scontrol: config.counts.scontrol.clone(), gres: gres_map(config), timeout }),
        CountSourceKind::Torque => Box::new(TorqueCounts { pbsnodes: config.counts.pbsnodes.clone(), timeout }),
        CountSourceKind::Static => Box::new(ConfiguredCounts),
    }
}

fn gres_map(config: &ProviderConfig) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for group in &config.groups {
        for dev in &group.devices {
            map.insert(dev.cder_type.clone(), config.counts.gres_name(&dev.cder_type));
        }
    }
    for (k, v) in &config.counts.gres {
        map.insert(k.clone(), v.clone());
    }
    map
}

/// Counts from the local cderd's `status` reply.
#[derive(Debug, Clone)]
pub struct CderdCounts {
    pub socket: PathBuf,
    pub timeout: Duration,
}

impl CountSource for CderdCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        let status = cder_protocol::Client::connect(&self.socket, self.timeout)
            .and_then(|mut client| client.status())
            .map_err(|e| ProviderError::Runtime(format!("cderd status: {e}")))?;
        groups
            .iter()
            .map(|group| {
                let mut devices = BTreeMap::new();
                for class in &group.classes {
                    let counts = if class.members.is_empty() {
                        let c = status.counts.get(&class.cder_type).ok_or_else(|| {
                            ProviderError::Runtime(format!("cderd at {} reports no {} devices, but group {:?} has them", self.socket.display(), class.cder_type, group.id()))
                        })?;
                        let offline = c.offline.checked_add(c.unhealthy).ok_or_else(|| {
                            ProviderError::Runtime(format!("cderd at {} reports {} offline and {} unhealthy {} devices: more than a count holds", self.socket.display(), c.offline, c.unhealthy, class.cder_type))
                        })?;
                        Counts { total: c.total, free: c.free, used: c.allocated, offline }
                    } else {
                        // Per device, so that each kind of device gets its own counts.
                        let mut c = Counts::default();
                        for uuid in &class.members {
                            let d = status.devices.iter().find(|d| &d.uuid == uuid).ok_or_else(|| {
                                ProviderError::Runtime(format!("device {uuid} of this node's inventory is unknown to cderd at {}: do the provider and cderd read the same cder.toml?", self.socket.display()))
                            })?;
                            c.total += 1;
                            match d.state {
                                DeviceState::Free => c.free += 1,
                                DeviceState::Allocated => c.used += 1,
                                DeviceState::Offline | DeviceState::Unhealthy => c.offline += 1,
                            }
                        }
                        c
                    };
                    devices.insert(class.key.clone(), counts);
                }
                Ok(GroupCounts { devices, nodes_used: None, nodes_unavailable: None })
            })
            .collect()
    }
}

/// Counts written in the config (`free`, `used`, `offline` of each `[[group.device]]`).
#[derive(Debug, Clone, Copy)]
pub struct ConfiguredCounts;

impl CountSource for ConfiguredCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        groups
            .iter()
            .map(|group| {
                let mut devices = BTreeMap::new();
                // Configured groups have one class per [[group.device]], in order.
                for (dev, class) in group.config.devices.iter().zip(&group.classes) {
                    let total = static_total(dev.count, group.nodes.len()).ok_or_else(|| {
                        ProviderError::Input(format!("group {:?}, type {}: group.device.count {} × {} nodes is more devices than a count holds", group.id(), dev.cder_type, dev.count, group.nodes.len()))
                    })?;
                    let used = dev.used.unwrap_or(0);
                    let offline = dev.offline.unwrap_or(0);
                    let free = dev.free.unwrap_or_else(|| total.saturating_sub(used.saturating_add(offline)));
                    // In u64: three u32s cannot overflow it, so a sum past u32 is "not the total", not a wrap.
                    if u64::from(free) + u64::from(used) + u64::from(offline) != u64::from(total) {
                        return Err(ProviderError::Input(format!(
                            "group {:?}, type {}: free {free} + used {used} + offline {offline} is not the {total} devices of {} nodes × {}",
                            group.id(),
                            dev.cder_type,
                            group.nodes.len(),
                            dev.count
                        )));
                    }
                    devices.insert(class.key.clone(), Counts { total, free, used, offline });
                }
                Ok(GroupCounts { devices, nodes_used: None, nodes_unavailable: None })
            })
            .collect()
    }
}

/// The devices of a configured group: `count` per node × nodes, `None`
/// when that does not fit in a u32.
pub fn static_total(count: u32, nodes: usize) -> Option<u32> {
    u32::try_from(nodes).ok()?.checked_mul(count)
}

/// Counts from SLURM: `scontrol -d show node -o`, one line per node with
/// `Gres=`, `GresUsed=` and `State=`.
#[derive(Debug, Clone)]
pub struct SlurmCounts {
    pub scontrol: PathBuf,
    /// CDER type → GRES name.
    pub gres: BTreeMap<String, String>,
    pub timeout: Duration,
}

/// One node as `scontrol show node -o` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    /// The base state and flags, upper-case (`IDLE`, `MIXED`, `DRAIN` …).
    pub states: Vec<String>,
    /// True when the state carries `*` (not responding).
    pub not_responding: bool,
    /// Configured GRES.
    pub gres: Vec<Gres>,
    /// GRES in use; `None` when scontrol printed no `GresUsed=` at all.
    pub gres_used: Option<Vec<Gres>>,
}

/// One item of a GRES list: `gpu:tesla:2` is name `gpu`, type `tesla`, count 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gres {
    pub name: String,
    pub gres_type: Option<String>,
    pub count: u32,
}

/// The count of GRES `name` (of `gres_type` only, when given) in a list;
/// `None` when the items add up past a u32 (no node has that many).
pub fn gres_count(list: &[Gres], name: &str, gres_type: Option<&str>) -> Option<u32> {
    list.iter().filter(|g| g.name == name && (gres_type.is_none() || g.gres_type.as_deref() == gres_type)).try_fold(0u32, |sum, g| sum.checked_add(g.count))
}

impl SlurmNode {
    /// Down, drained, failed, in maintenance or not responding: its free
    /// devices cannot be given to a job.
    pub fn unavailable(&self) -> bool {
        self.not_responding
            || self.states.iter().any(|s| {
                matches!(s.as_str(), "DOWN" | "DRAIN" | "DRAINED" | "DRAINING" | "FAIL" | "FAILING" | "FUTURE" | "MAINT" | "REBOOT_ISSUED" | "REBOOT_REQUESTED" | "UNKNOWN" | "NOT_RESPONDING" | "INVALID_REG")
            })
    }

    pub fn busy(&self) -> bool {
        self.states.iter().any(|s| matches!(s.as_str(), "ALLOCATED" | "MIXED" | "COMPLETING"))
    }
}

/// Parses `scontrol show node -o` output.
pub fn parse_scontrol(output: &[u8]) -> Result<Vec<SlurmNode>, ProviderError> {
    let mut nodes = Vec::new();
    for (n, line) in output.split(|&b| b == b'\n').enumerate() {
        let line = std::str::from_utf8(line).map_err(|e| ProviderError::Runtime(format!("scontrol output line {}: not valid UTF-8 at byte {}", n + 1, e.valid_up_to())))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut fields = BTreeMap::new();
        for token in line.split_whitespace() {
            if let Some((k, v)) = token.split_once('=') {
                if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    fields.entry(k).or_insert(v);
                }
            }
        }
        let bad = |what: &str| ProviderError::Runtime(format!("scontrol output line {}: {what}: {line:?}", n + 1));
        let name = fields.get("NodeName").ok_or_else(|| bad("no NodeName="))?;
        let state = fields.get("State").ok_or_else(|| bad("no State="))?;
        let not_responding = state.contains('*');
        let states = state.split('+').map(|s| s.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']).to_ascii_uppercase()).collect();
        let gres = parse_gres(fields.get("Gres").copied().unwrap_or("(null)")).map_err(|m| bad(&format!("Gres: {m}")))?;
        let gres_used = fields.get("GresUsed").map(|v| parse_gres(v)).transpose().map_err(|m| bad(&format!("GresUsed: {m}")))?;
        nodes.push(SlurmNode { name: name.to_string(), states, not_responding, gres, gres_used });
    }
    Ok(nodes)
}

/// Parses a GRES list (`gpu:tesla:2(S:0-1),fpga:1`, `gpu:1(IDX:0,2)`).
/// `(null)` is empty.
pub fn parse_gres(value: &str) -> Result<Vec<Gres>, String> {
    let mut out = Vec::new();
    if value.is_empty() || value == "(null)" {
        return Ok(out);
    }
    let mut depth = 0i32;
    let mut items = Vec::new();
    let mut start = 0;
    for (i, c) in value.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&value[start..]);
    for item in items {
        let item = item.split('(').next().unwrap_or(item);
        let parts: Vec<&str> = item.split(':').collect();
        let name = parts[0];
        if name.is_empty() {
            return Err(format!("empty GRES name in {value:?}"));
        }
        let last = parts[parts.len() - 1];
        let (gres_type, count) = match (parts.len(), last.parse::<u32>()) {
            // `gpu` alone is one device.
            (1, _) => (None, 1),
            (2, Ok(c)) => (None, c),
            // `gpu:tesla` is one device of a type.
            (2, Err(_)) if !last.is_empty() && !last.starts_with(|c: char| c.is_ascii_digit()) => (Some(last), 1),
            (3, Ok(c)) => (Some(parts[1]), c),
            _ => return Err(format!("{item:?} is not name[:type][:count]")),
        };
        out.push(Gres { name: name.to_string(), gres_type: gres_type.map(str::to_string), count });
    }
    Ok(out)
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
        let nodes: BTreeMap<String, SlurmNode> = parse_scontrol(output)?.into_iter().map(|n| (n.name.clone(), n)).collect();
        let listing = format!("SLURM ({} -d show node -o)", self.scontrol.display());
        walk_groups(groups, &nodes, &listing, |host, node, class| {
            let gres = self.gres.get(&class.cder_type).cloned().unwrap_or_else(|| class.cder_type.clone());
            let too_many = |field: &str| ProviderError::Runtime(format!("{listing}: node {host}: the {gres} items of {field}= add up past {}", u32::MAX));
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

/// What the group walk needs to know of a batch system's view of a node.
trait LrmsNode {
    /// Down, drained, offline: takes no jobs.
    fn unavailable(&self) -> bool;
    /// Runs at least one job.
    fn busy(&self) -> bool;
}

impl LrmsNode for SlurmNode {
    fn unavailable(&self) -> bool {
        SlurmNode::unavailable(self)
    }
    fn busy(&self) -> bool {
        SlurmNode::busy(self)
    }
}

impl LrmsNode for TorqueNode {
    fn unavailable(&self) -> bool {
        TorqueNode::unavailable(self)
    }
    fn busy(&self) -> bool {
        self.has_jobs
    }
}

/// Counts every group from one batch-system listing of its nodes: used and
/// unavailable nodes, and each device class's counts as `devices` reads
/// them off a node. A node the listing (`listing`, for messages) lacks is an
/// error, never "all free".
fn walk_groups<N: LrmsNode>(
    groups: &[NodeGroup],
    nodes: &BTreeMap<String, N>,
    listing: &str,
    mut devices: impl FnMut(&str, &N, &DeviceClass) -> Result<Counts, ProviderError>,
) -> Result<Vec<GroupCounts>, ProviderError> {
    groups
        .iter()
        .map(|group| {
            let mut out = GroupCounts::default();
            let (mut used, mut unavailable) = (0, 0);
            for host in &group.nodes {
                let node = nodes
                    .get(host)
                    .ok_or_else(|| ProviderError::Runtime(format!("group {:?}: node {host:?} is not known to {listing}", group.id())))?;
                if node.unavailable() {
                    unavailable += 1;
                } else if node.busy() {
                    used += 1;
                }
                for class in &group.classes {
                    let sum = out.devices.entry(class.key.clone()).or_default();
                    *sum = sum.checked_add(devices(host, node, class)?).map_err(|field| {
                        ProviderError::Runtime(format!("group {:?}: {listing} gives more {field} {} devices than a count holds (at node {host:?})", group.id(), class.key))
                    })?;
                }
            }
            out.nodes_used = Some(used);
            out.nodes_unavailable = Some(unavailable);
            Ok(out)
        })
        .collect()
}

/// A node's devices: those in use stay used; the rest are free, or offline
/// when the node cannot take jobs.
fn node_counts(total: u32, used: u32, unavailable: bool) -> Counts {
    // The callers cap used at total; capping here too keeps the sum exact
    // whatever a listing claims.
    let used = used.min(total);
    let idle = total - used;
    if unavailable {
        Counts { total, free: 0, used, offline: idle }
    } else {
        Counts { total, free: idle, used, offline: 0 }
    }
}

/// Counts from TORQUE: `pbsnodes -x`. A node's `<gpus>` is its total; a GPU
/// is used when its `gpu_state` in `<gpu_status>` is not `Unallocated`
/// (without `<gpu_status>`, a `job-exclusive` node's GPUs are all used), and
/// offline when idle with `gpu_mode=Prohibited` (the compute mode an admin
/// sets to take a GPU out of service); a `down`, `offline` or `unknown`
/// node's idle GPUs are all offline.
#[derive(Debug, Clone)]
pub struct TorqueCounts {
    pub pbsnodes: PathBuf,
    pub timeout: Duration,
}

/// One `<Node>` of `pbsnodes -x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorqueNode {
    pub name: String,
    pub states: Vec<String>,
    pub gpus: u32,
    /// GPUs whose `gpu_state` is not `Unallocated`; `None` without `<gpu_status>`.
    pub gpus_allocated: Option<u32>,
    /// Idle GPUs in compute mode `Prohibited`.
    pub gpus_prohibited: u32,
    pub has_jobs: bool,
}

impl TorqueNode {
    pub fn unavailable(&self) -> bool {
        self.states.iter().any(|s| matches!(s.as_str(), "down" | "offline" | "unknown" | "state-unknown"))
    }

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
    let text = std::str::from_utf8(output).map_err(|e| ProviderError::Runtime(format!("pbsnodes -x output is not valid UTF-8 at byte {}", e.valid_up_to())))?;
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
        let states = xml_element(body, "state").unwrap_or_default().split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        let gpus = match xml_element(body, "gpus") {
            Some(g) => g.trim().parse().map_err(|_| bad(format!("node {name}: <gpus>{g}</gpus> is not a count")))?,
            None => 0,
        };
        let status = xml_element(body, "gpu_status");
        // gpu[1]=gpu_id=…;gpu_mode=Exclusive_Thread;gpu_state=Exclusive,gpu[0]=…
        let gpu_field = |gpu: &str, key: &str| gpu.split_once("]=").map_or(gpu, |(_, fields)| fields).split(';').find_map(|kv| kv.split_once('=').filter(|(k, _)| k.ends_with(key)).map(|(_, v)| v.to_string()));
        let allocated = |gpu: &str| gpu_field(gpu, "gpu_state").is_some_and(|s| s != "Unallocated");
        let gpu_count = |n: usize| u32::try_from(n).map_err(|_| bad(format!("node {name}: <gpu_status> lists more than {} GPUs", u32::MAX)));
        let gpus_allocated = status.as_ref().map(|s| gpu_count(s.split(',').filter(|g| allocated(g)).count())).transpose()?;
        let gpus_prohibited = gpu_count(status.as_ref().map_or(0, |s| s.split(',').filter(|g| !allocated(g) && gpu_field(g, "gpu_mode").as_deref() == Some("Prohibited")).count()))?;
        let has_jobs = xml_element(body, "jobs").is_some_and(|j| !j.trim().is_empty());
        nodes.push(TorqueNode { name, states, gpus, gpus_allocated, gpus_prohibited, has_jobs });
        rest = &rest[end + 7..];
    }
    Ok(nodes)
}

fn xml_element(body: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = body.find(&open)? + open.len();
    let end = body[start..].find(&close)? + start;
    Some(body[start..end].replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&"))
}

impl CountSource for TorqueCounts {
    fn counts(&self, groups: &[NodeGroup]) -> Result<Vec<GroupCounts>, ProviderError> {
        if let Some(other) = groups.iter().flat_map(|g| &g.classes).find(|c| c.cder_type != "gpgpu") {
            return Err(ProviderError::Input(format!("TORQUE counts only GPUs (<gpus>), not {} devices: count them with another source", other.cder_type)));
        }
        if let Some(mixed) = groups.iter().find(|g| g.is_mixed()) {
            return Err(ProviderError::Input(format!("group {:?} has several kinds of GPU, which TORQUE's <gpus> count cannot tell apart", mixed.id())));
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
        let nodes: BTreeMap<String, TorqueNode> = parse_pbsnodes(output)?.into_iter().map(|n| (n.name.clone(), n)).collect();
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

/// Runs an LRMS query with a deadline and returns its stdout; a non-zero
/// exit, a missing command or the deadline is a runtime error naming it.
pub fn run_command(program: &Path, args: &[&str], timeout: Duration) -> Result<Vec<u8>, ProviderError> {
    let shown = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ProviderError::Runtime(format!("cannot run {shown}: {e}")))?;
    // Drain both pipes on threads so a chatty command cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProviderError::Runtime(format!("{shown} did not finish within {timeout:?}")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(ProviderError::Runtime(format!("waiting for {shown}: {e}"))),
        }
    };
    let out = out_reader.join().map_err(|_| ProviderError::Runtime(format!("reading {shown}")))?;
    let out = out.map_err(|e| ProviderError::Runtime(format!("reading the output of {shown}: {e}")))?;
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        let why = String::from_utf8_lossy(&err);
        let why = why.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        return Err(ProviderError::Runtime(format!("{shown} failed ({status}): {why}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_lists_parse() {
        let g = parse_gres("gpu:tesla:2(S:0-1)").unwrap();
        assert_eq!(g, vec![Gres { name: "gpu".into(), gres_type: Some("tesla".into()), count: 2 }]);
        let g = parse_gres("gpu:tesla:1(IDX:0,2),gpu:k80:3,fpga:1").unwrap();
        assert_eq!((gres_count(&g, "gpu", None), gres_count(&g, "gpu", Some("k80")), gres_count(&g, "fpga", None)), (Some(4), Some(3), Some(1)));
        assert_eq!(gres_count(&parse_gres("gpu").unwrap(), "gpu", None), Some(1));
        assert_eq!(gres_count(&parse_gres("gpu:a100").unwrap(), "gpu", Some("a100")), Some(1));
        assert!(parse_gres("(null)").unwrap().is_empty());
        assert!(parse_gres(":2").is_err());
        assert!(parse_gres("gpu:a:b:c").is_err());
    }

    #[test]
    fn scontrol_lines_parse_and_classify() {
        let out = b"NodeName=wn01 Arch=x86_64 CoresPerSocket=1 Gres=gpu:2 GresUsed=gpu:1(IDX:0) State=MIXED ThreadsPerCore=1\n\
NodeName=wn02 Gres=gpu:2(S:0) GresUsed=gpu:0(IDX:N/A) State=IDLE+DRAIN Reason=Xid 79 [root@2026-01-01]\n\
NodeName=wn03 Gres=gpu:2 State=IDLE* OS=Linux 6.1 #1 SMP\n";
        let nodes = parse_scontrol(out).unwrap();
        assert_eq!(nodes.len(), 3);
        assert!(nodes[0].busy() && !nodes[0].unavailable());
        assert_eq!(gres_count(nodes[0].gres_used.as_ref().unwrap(), "gpu", None), Some(1));
        assert!(nodes[2].gres_used.is_none());
        assert!(nodes[1].unavailable());
        assert!(nodes[2].not_responding && nodes[2].unavailable());
        assert!(parse_scontrol(b"Arch=x86_64 State=IDLE\n").is_err());
        let e = parse_scontrol(b"NodeName=wn01 Gres=gpu:\xff:2 State=IDLE\n").unwrap_err();
        assert!(e.to_string().contains("not valid UTF-8"), "{e}");
    }

    fn four_nodes(source: &str) -> Vec<NodeGroup> {
        let text = crate::config::tests::SAMPLE.replace("source = \"static\"", &format!("source = \"{source}\"")).replace("wn[01-16]", "wn[01-04]").replace("used = 2\n", "");
        crate::site::node_groups(&ProviderConfig::parse(&text, Path::new("t.toml")).unwrap()).unwrap()
    }

    #[test]
    fn lrms_counts_past_u32_are_refused() {
        let slurm = SlurmCounts { scontrol: "scontrol".into(), gres: [("gpgpu".to_string(), "gpu".to_string())].into(), timeout: Duration::from_secs(1) };
        let groups = four_nodes("slurm");
        let line = |n: u32, gres: &str| format!("NodeName=wn0{n} Gres={gres} GresUsed=gpu:0 State=IDLE\n");
        let ok: String = (1..=4).map(|n| line(n, "gpu:2")).collect();
        let counts = slurm.counts_from_output(&groups, ok.as_bytes()).unwrap();
        assert_eq!(counts[0].devices["gpgpu"], Counts { total: 8, free: 8, used: 0, offline: 0 });
        // One node whose GRES items add up past u32.
        let one = ok.replace("wn01 Gres=gpu:2", "wn01 Gres=gpu:a:4294967295,gpu:b:1");
        let e = slurm.counts_from_output(&groups, one.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("node wn01: the gpu items of Gres= add up past 4294967295"), "{e}");
        assert_eq!(e.exit_code(), 1);
        // Each node fits, the group's sum does not.
        let many: String = (1..=4).map(|n| line(n, "gpu:2147483648")).collect();
        let e = slurm.counts_from_output(&groups, many.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("more total gpgpu devices than a count holds (at node \"wn02\")"), "{e}");

        let torque = TorqueCounts { pbsnodes: "pbsnodes".into(), timeout: Duration::from_secs(1) };
        let groups = four_nodes("torque");
        let xml = |gpus: &str| format!("<Data>{}</Data>", (1..=4).map(|n| format!("<Node><name>wn0{n}</name><state>free</state><gpus>{gpus}</gpus></Node>")).collect::<String>());
        assert_eq!(torque.counts_from_output(&groups, xml("2").as_bytes()).unwrap()[0].devices["gpgpu"].total, 8);
        let e = torque.counts_from_output(&groups, xml("4294967295").as_bytes()).unwrap_err();
        assert!(e.to_string().contains("more total gpgpu devices than a count holds"), "{e}");
        assert!(torque.counts_from_output(&groups, xml("4294967296").as_bytes()).unwrap_err().to_string().contains("is not a count"));
    }

    #[test]
    fn node_counts_keep_used_and_offline_apart() {
        assert_eq!(node_counts(4, 1, false), Counts { total: 4, free: 3, used: 1, offline: 0 });
        assert_eq!(node_counts(4, 1, true), Counts { total: 4, free: 0, used: 1, offline: 3 });
        // A listing that claims more used than installed keeps the sum exact.
        assert_eq!(node_counts(2, 5, false), Counts { total: 2, free: 0, used: 2, offline: 0 });
    }

    #[test]
    fn pbsnodes_xml_parses() {
        let xml = b"<Data><Node><name>wn01</name><state>free</state><np>8</np><gpus>2</gpus><jobs>0/1.srv</jobs>\
<gpu_status>gpu[1]=gpu_id=0000:04:00.0;gpu_state=Exclusive;gpu_mode=Exclusive_Thread,gpu[0]=gpu_id=0000:03:00.0;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn02</name><state>down,offline</state><gpus>2</gpus></Node>\
<Node><name>wn04</name><state>free</state><gpus>2</gpus><gpu_status>gpu[1]=gpu_mode=Prohibited;gpu_state=Unallocated,gpu[0]=gpu_mode=Default;gpu_state=Unallocated</gpu_status></Node>\
<Node><name>wn03</name><state>job-exclusive</state><gpus>4</gpus><jobs>0-7/2.srv</jobs></Node></Data>";
        let nodes = parse_pbsnodes(xml).unwrap();
        assert_eq!(nodes[0].gpus_used(), 1);
        assert!(nodes[0].has_jobs && !nodes[0].unavailable());
        assert!(nodes[1].unavailable());
        assert_eq!(nodes[3].gpus_used(), 4);
        assert_eq!((nodes[2].gpus_used(), nodes[2].gpus_prohibited), (0, 1));
        assert_eq!(nodes[0].gpus_prohibited, 0);
        assert!(parse_pbsnodes(b"pbsnodes: cannot connect to server").is_err());
        assert!(parse_pbsnodes(b"<Data><Node><name>x</name><gpus>two</gpus></Node></Data>").is_err());
    }

    #[test]
    fn commands_fail_clearly() {
        let e = run_command(Path::new("/nonexistent/scontrol"), &["show"], Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("cannot run /nonexistent/scontrol show"), "{e}");
        let e = run_command(Path::new("sh"), &["-c", "echo 'slurm_load_node error: Unable to contact slurm controller' >&2; exit 1"], Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("Unable to contact slurm controller"), "{e}");
        let out = run_command(Path::new("sh"), &["-c", "echo hello"], Duration::from_secs(5)).unwrap();
        assert_eq!(out, b"hello\n");
    }
}
