//! What SLURM says, read through `scontrol` and `squeue` (what slurmctld
//! enforces, not what the database was once told): the counts of
//! `scontrol -d show node -o` with its GRES lists, and the [`Facts`]
//! per-VO shares are made of:
//!
//! * `scontrol --all show partition -o`: `Nodes=`, `AllowAccounts=`,
//!   `AllowGroups=`, `AllowQos=` (and `DenyAccounts=`, `DenyQos=`), `QoS=`
//!   (the partition QOS), `State=` (`--all`: without it SLURM hides a
//!   partition whose `AllowGroups` leave out the asking user, the BDII's);
//! * `scontrol -d show node -o`: each node's `Gres=` / `GresUsed=` and state;
//! * `squeue --all --noheader --states=PENDING,RUNNING --Format ...`: the
//!   jobs' `Partition`, `Account`, `GroupName`, `UserName`, `QOS`, CPUs,
//!   times and devices (the `gres/gpu` of `tres-alloc`, else `tres-per-job`,
//!   `tres-per-node` × nodes, `tres-per-task` × tasks), each field ended by
//!   a separator drawn for the run. Not `scontrol show job -o`: it prints the
//!   job's name, the user's text, before the facts, where it can spell them;
//! * only when a partition has a QOS or a VO names one: `scontrol show
//!   assoc_mgr flags=qos`, whose `GrpTRES=gres/gpu=4(3)` is the limit and
//!   what the QOS holds now, and `MaxTRESPJ=gres/gpu=2` the per-job limit.
//!   QOS exist only with slurmdbd (`AccountingStorageType=accounting_storage/slurmdbd`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use cder_request::gres::ScontrolLine;
use cder_request::hostlist::Hostlist;

use crate::config::ProviderConfig;
use crate::error::ProviderError;
use crate::site::NodeGroup;
use crate::sources::command::run_command;
use crate::sources::counts::{
    CountSource, DeviceKind, Facts, GroupCounts, GroupLimit, Job, Node, NodeFacts, QosLimits, Queue,
};
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
        self.check_kinds_apart(groups)?;
        let nodes: BTreeMap<String, SlurmNode> =
            parse_scontrol(output)?.into_iter().map(|n| (n.name.clone(), n)).collect();
        let listing = format!("SLURM ({} -d show node -o)", self.scontrol.display());
        walk_groups(groups, &nodes, &listing, |host, node, class| {
            let gres = self.gres_name(&class.cder_type);
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

impl SlurmCounts {
    /// The GRES name that counts `cder_type`'s devices.
    fn gres_name(&self, cder_type: &str) -> String {
        self.gres.get(cder_type).cloned().unwrap_or_else(|| cder_type.to_string())
    }

    /// Refuses a group where two classes are counted by one GRES name and a
    /// GRES type does not tell them apart (an inventory group whose NVIDIA
    /// and AMD types are both `gpu`): each would be given the other's devices.
    fn check_kinds_apart(&self, groups: &[NodeGroup]) -> Result<(), ProviderError> {
        for group in groups {
            for (i, a) in group.classes.iter().enumerate() {
                let gres = self.gres_name(&a.cder_type);
                let clash = group.classes[i + 1..].iter().find(|b| {
                    self.gres_name(&b.cder_type) == gres
                        && (a.gres_type.is_none() || b.gres_type.is_none() || a.gres_type == b.gres_type)
                });
                if let Some(b) = clash {
                    return Err(ProviderError::Input(format!(
                        "group {:?}: {} and {} devices are both counted by SLURM's GRES {gres:?} with no GRES type to tell them apart: list them in [[group.device]] with gres_type, or give each type its own GRES name in counts.gres",
                        group.id(),
                        a.attribute("Model").unwrap_or(&a.cder_type),
                        b.attribute("Model").unwrap_or(&b.cder_type),
                    )));
                }
            }
        }
        Ok(())
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
            virtual_memory_mib: None,
            lrms_version: self.version.clone(),
        }
    }
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
    /// `State` `RUNNING` (else `PENDING`).
    pub running: bool,
    /// `NumCPUs`: the slots it holds (running) or asks for.
    pub cpus: u32,
    /// `TimeLimit` less `TimeUsed` in seconds; `None` for `UNLIMITED`.
    pub remaining: Option<u64>,
    /// `Partition`.
    pub partition: String,
    /// `Account`.
    pub account: String,
    /// `GroupName`.
    pub group: String,
    /// `UserName`.
    pub user: String,
    /// `QOS`.
    pub qos: String,
    /// Devices by GRES name (`gpu` → N): see [`parse_jobs`].
    pub gres: BTreeMap<String, u32>,
}

/// `key=value` tokens of one `-o` line, the first of each key.
fn fields(line: &str) -> BTreeMap<&str, &str> {
    // Reversed so that the first field of a key is the one kept.
    ScontrolLine::parse(line).fields.into_iter().rev().map(|(k, v, _)| (k, v)).collect()
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

/// The `squeue --Format` fields the provider reads, in the order printed.
/// None of them is text a user writes (no name, comment, command or
/// directory): each is a number, a state, or a name SLURM or the admin
/// controls. The job id comes first, so that a skipped line can be named.
pub const SQUEUE_FIELDS: [&str; 16] = [
    "JobID",
    "State",
    "Partition",
    "Account",
    "QOS",
    "UserName",
    "GroupName",
    "NumCPUs",
    "NumNodes",
    "NumTasks",
    "TimeLimit",
    "TimeUsed",
    "tres-alloc",
    "tres-per-job",
    "tres-per-node",
    "tres-per-task",
];

/// A field separator no submitted text can contain: it is drawn anew for
/// each run, so a value cannot be written in advance to spell it.
pub fn squeue_separator() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS's randomness; two draws give 128 bits.
    let draw = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u32(std::process::id());
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        h.finish()
    };
    format!("|cder{:016x}{:016x}|", draw(1), draw(2))
}

/// The arguments of the `squeue` run that lists the running and pending
/// jobs of every partition (`--all`: hidden ones too), each field followed
/// by `separator` (`:0`: never cut to a width).
pub fn squeue_args(separator: &str) -> Vec<String> {
    let format: Vec<String> = SQUEUE_FIELDS.iter().map(|f| format!("{f}:0{separator}")).collect();
    ["--all", "--noheader", "--states=PENDING,RUNNING", "--Format"]
        .into_iter()
        .map(str::to_string)
        .chain([format.join(",")])
        .collect()
}

/// What `squeue` listed: the jobs read, and a warning for each line skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobListing {
    /// The running and pending jobs.
    pub jobs: Vec<RunningJob>,
    /// One message per line that could not be read, naming its job where it can.
    pub skipped: Vec<String>,
}

/// Parses the output of `squeue` run with [`squeue_args`]`(separator)`. A
/// line that does not hold exactly the fields asked for, each ended by the
/// separator, or whose values do not read, is skipped with a warning: one
/// job's line never stops the listing. A value holding a line break splits
/// its line into pieces that each lack fields, so both are skipped.
pub fn parse_jobs(output: &[u8], separator: &str) -> JobListing {
    let mut listing = JobListing::default();
    if separator.is_empty() {
        listing.skipped.push("squeue: no field separator".into());
        return listing;
    }
    for (n, raw) in output.split(|&b| b == b'\n').enumerate() {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = String::from_utf8_lossy(raw);
        let mut fields: Vec<&str> = line.split(separator).collect();
        // Every field ends with the separator: the last piece is what follows the last one.
        let trailer = fields.pop().unwrap_or_default();
        let id = fields.first().map(|id| id.trim()).filter(|id| is_job_id(id));
        let name = match id {
            Some(id) => format!("job {id}"),
            None => format!("line {}", n + 1),
        };
        let result = if std::str::from_utf8(raw).is_err() {
            Err("not valid UTF-8".to_string())
        } else if fields.len() != SQUEUE_FIELDS.len() || !trailer.trim().is_empty() {
            Err(format!("{} fields where {} were asked for", fields.len(), SQUEUE_FIELDS.len()))
        } else if id.is_none() {
            Err("no job id".to_string())
        } else {
            squeue_job(&fields)
        };
        match result {
            Ok(Some(job)) => listing.jobs.push(job),
            Ok(None) => {}
            Err(why) => listing.skipped.push(format!("squeue: skipping {name}: {why}")),
        }
    }
    listing
}

/// A SLURM job id as squeue's `JobID` prints it: digits.
fn is_job_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= 20 && text.bytes().all(|b| b.is_ascii_digit())
}

/// The value of [`SQUEUE_FIELDS`]' `name` in a line's `fields`.
fn squeue_field<'a>(fields: &[&'a str], name: &str) -> &'a str {
    let at = SQUEUE_FIELDS.iter().position(|f| *f == name).unwrap_or(0);
    fields.get(at).map_or("", |v| v.trim())
}

/// One job of [`SQUEUE_FIELDS`]; `Ok(None)` for a job neither running nor pending.
fn squeue_job(fields: &[&str]) -> Result<Option<RunningJob>, String> {
    let field = |name: &str| squeue_field(fields, name);
    let running = match field("State") {
        "RUNNING" => true,
        "PENDING" => false,
        _ => return Ok(None),
    };
    // Names the admin or the system gives; one with a blank or a control
    // character is no such name, and is not guessed at.
    let name = |key: &str| {
        let v = field(key);
        if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            Err(format!("{key} {v:?} is not a name"))
        } else {
            Ok(v.to_string())
        }
    };
    let count = |key: &str| field(key).parse::<u32>().map_err(|_| format!("{key} {:?} is not a count", field(key)));
    let time = |key: &str| parse_time(field(key)).map_err(|m| format!("{key}: {m}"));
    let remaining = match time("TimeLimit")? {
        None => None,
        // squeue prints INVALID for a time clock skew made negative: none used yet.
        Some(_) if field("TimeUsed") == "INVALID" => time("TimeLimit")?,
        Some(limit) => Some(limit.saturating_sub(time("TimeUsed")?.unwrap_or(0))),
    };
    Ok(Some(RunningJob {
        running,
        cpus: count("NumCPUs")?,
        remaining,
        partition: name("Partition")?,
        account: name("Account")?,
        group: name("GroupName")?,
        user: name("UserName")?,
        qos: name("QOS")?,
        gres: job_gres(fields)?,
    }))
}

/// A job's devices by GRES name: the GRES items of `tres-alloc` (the
/// allocation of a running job, the request of a pending one) where SLURM
/// accounts for them (`AccountingStorageTRES`), else what the job asked
/// for: per job, per node times its nodes, per task times its tasks.
fn job_gres(fields: &[&str]) -> Result<BTreeMap<String, u32>, String> {
    let field = |name: &str| squeue_field(fields, name);
    let mut alloc = BTreeMap::new();
    for entry in cder_request::gres::tres_entries(field("tres-alloc")) {
        let item = entry.item.map_err(|e| format!("tres-alloc {:?}: {e}", field("tres-alloc")))?;
        // Typed items (`gres/gpu:tesla=2`) repeat the untyped total.
        if item.gres_type.is_none() {
            let count = u32::try_from(item.count).map_err(|_| format!("tres-alloc: {} is past a count", item.count))?;
            alloc.insert(item.name, count);
        }
    }
    if !alloc.is_empty() {
        return Ok(alloc);
    }
    let mut asked: BTreeMap<String, u32> = BTreeMap::new();
    for (key, times) in [("tres-per-job", "1"), ("tres-per-node", "NumNodes"), ("tres-per-task", "NumTasks")] {
        let list = field(key);
        let entries = cder_request::gres::tres_entries(list);
        if entries.is_empty() {
            continue;
        }
        let times: u32 = if times == "1" {
            1
        } else {
            field(times).parse().map_err(|_| format!("{times} {:?} is not a count", field(times)))?
        };
        for entry in entries {
            let item = entry.item.map_err(|e| format!("{key} {list:?}: {e}"))?;
            let count = u32::try_from(item.count)
                .ok()
                .and_then(|c| c.checked_mul(times))
                .ok_or_else(|| format!("{key} {list:?}: past a count"))?;
            let sum = asked.entry(item.name).or_insert(0);
            *sum = sum.checked_add(count).ok_or_else(|| format!("{key} {list:?}: past a count"))?;
        }
    }
    Ok(asked)
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
    /// `GLUE2ComputingShareServingState` of the partition's `State=`.
    pub fn serving_state(&self) -> &'static str {
        match self.state.as_str() {
            "UP" => "production",
            "DRAIN" => "draining",
            _ => "closed",
        }
    }
}

/// Asks SLURM what per-VO shares are made of (the partitions, nodes, jobs
/// and, where any applies, the QOS limits) for the device kinds of `groups`.
pub fn share_facts(config: &ProviderConfig, groups: &[NodeGroup]) -> Result<Facts, ProviderError> {
    let timeout = Duration::from_secs((*config.counts.timeout_s.get_ref()).max(1));
    let scontrol = |args: &[&str]| run_command(&config.counts.scontrol, args, timeout);
    // --all: SLURM hides the partitions (and their jobs) whose AllowGroups
    // leave out the asking user, and the BDII's user is in no VO's group.
    let partitions = parse_partitions(&scontrol(&["--all", "show", "partition", "-o"])?)?;
    let nodes = parse_scontrol(&scontrol(&["-d", "show", "node", "-o"])?)?;
    // Jobs from squeue's fixed fields, never scontrol's `-o` line: there the
    // job's name, user text, comes before the facts and can spell them.
    let separator = squeue_separator();
    let args = squeue_args(&separator);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // MUTATION provider-job-name (test builds only): the `-o` line, its job name read as facts.
    let listing = if cder_model::mutation::on("provider-job-name") {
        mutated_scontrol_jobs(&scontrol(&["--all", "-d", "show", "job", "-o"])?)?
    } else {
        parse_jobs(&run_command(&config.counts.squeue, &args, timeout)?, &separator)
    };
    for warning in &listing.skipped {
        eprintln!("cder-glue-provider: warning: {warning}");
    }
    let jobs = listing.jobs;
    let wants_qos = partitions.iter().any(|p| p.qos.is_some()) || config.vos.iter().any(|v| !v.qos.is_empty());
    let qos =
        if wants_qos { parse_assoc_mgr_qos(&scontrol(&["show", "assoc_mgr", "flags=qos"])?)? } else { BTreeMap::new() };
    Ok(facts(config, groups, &partitions, &nodes, &jobs, &qos))
}

/// The regression the `provider-job-name` mutation puts back: jobs read
/// from `scontrol -d show job -o`, where the job's name comes before every
/// fact and the first of each key is taken, and a value that does not read
/// stops the provider.
fn mutated_scontrol_jobs(output: &[u8]) -> Result<JobListing, ProviderError> {
    let text = text(output, "scontrol -d show job -o")?;
    let mut listing = JobListing::default();
    for line in text.lines() {
        let f = fields(line);
        let get = |k: &str| f.get(k).copied().unwrap_or("");
        let values: Vec<String> = SQUEUE_FIELDS
            .iter()
            .map(|k| match *k {
                "JobID" => get("JobId").to_string(),
                "State" => get("JobState").to_string(),
                "UserName" => strip_id(get("UserId")).to_string(),
                "GroupName" => strip_id(get("GroupId")).to_string(),
                "TimeUsed" => get("RunTime").to_string(),
                "tres-alloc" => get("AllocTRES").to_string(),
                "tres-per-job" => get("TresPerJob").to_string(),
                "tres-per-node" => get("TresPerNode").to_string(),
                "tres-per-task" => get("TresPerTask").to_string(),
                other => get(other).to_string(),
            })
            .collect();
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        match squeue_job(&values) {
            Ok(Some(job)) => listing.jobs.push(job),
            Ok(None) => {}
            Err(why) => return Err(ProviderError::Runtime(format!("scontrol -d show job -o: {why}"))),
        }
    }
    Ok(listing)
}

/// The [`Facts`] in what `scontrol` printed, separate from the commands so
/// that they can be tested without SLURM. GRES names become the CDER types
/// of `groups` (`[counts] gres`), so that nothing after this knows them.
pub fn facts(
    config: &ProviderConfig,
    groups: &[NodeGroup],
    partitions: &[Partition],
    nodes: &[SlurmNode],
    jobs: &[RunningJob],
    qos: &BTreeMap<String, QosLimits>,
) -> Facts {
    let kinds: BTreeSet<DeviceKind> = groups
        .iter()
        .flat_map(|g| &g.classes)
        .map(|c| DeviceKind { cder_type: c.cder_type.clone(), gres_type: c.gres_type.clone() })
        .collect();
    let types: BTreeMap<&str, String> =
        kinds.iter().map(|k| (k.cder_type.as_str(), config.counts.gres_name(&k.cder_type))).collect();
    // Per CDER type, what a GRES-keyed map holds under its GRES name.
    let by_type = |by_gres: &BTreeMap<String, u32>| -> BTreeMap<String, u32> {
        types.iter().filter_map(|(t, gres)| by_gres.get(gres).map(|n| (t.to_string(), *n))).collect()
    };
    let node = |n: &SlurmNode| {
        let devices = kinds
            .iter()
            .map(|kind| {
                let gres = &types[kind.cder_type.as_str()];
                let gres_type = kind.gres_type.as_deref();
                // A sum past a u32 is no real node's: all of its devices, all used.
                let total = gres_count(&n.gres, gres, gres_type).unwrap_or(u32::MAX);
                let used = n.gres_used.as_ref().map_or(0, |u| gres_count(u, gres, gres_type).unwrap_or(total));
                (kind.clone(), node_counts(total, used.min(total), n.unavailable()))
            })
            .collect();
        Node { unavailable: n.unavailable(), slots: n.cpus, slots_used: n.cpu_alloc, virtual_memory_mib: None, devices }
    };
    let queue = |p: &Partition| {
        // SLURM limits wall time only; a slot's CPU time cannot exceed it.
        let default_time = p.default_time.or(p.max_time);
        Queue {
            name: p.name.clone(),
            nodes: p.nodes.clone(),
            serving_state: p.serving_state(),
            runs_jobs: true,
            allow_accounts: p.allow_accounts.clone(),
            allow_groups: p.allow_groups.clone(),
            allow_users: None,
            allow_qos: p.allow_qos.clone(),
            deny_accounts: p.deny_accounts.clone(),
            deny_qos: p.deny_qos.clone(),
            qos: p.qos.clone(),
            max_wall_time: p.max_time,
            default_wall_time: default_time,
            max_cpu_time: p.max_time,
            default_cpu_time: default_time,
            max_nodes_per_job: p.max_nodes,
            max_slots_per_node: p.max_cpus_per_node,
            max_slots_per_job: None,
            max_memory_per_node_mb: p.max_mem_per_node,
            max_memory_per_slot_mb: p.max_mem_per_cpu,
            // A job that asks for no memory gets DefMemPerNode, or DefMemPerCPU for each of its CPUs (one at least).
            default_memory_mib: p.def_mem_per_node.or(p.def_mem_per_cpu),
            max_virtual_memory_mib: None,
            max_running_jobs: None,
            max_total_jobs: None,
        }
    };
    let job = |j: &RunningJob| Job {
        running: j.running,
        slots: j.cpus,
        remaining: j.remaining,
        queue: j.partition.clone(),
        account: j.account.clone(),
        group: j.group.clone(),
        user: j.user.clone(),
        qos: j.qos.clone(),
        devices: by_type(&j.gres),
    };
    let limits = |l: &QosLimits| QosLimits {
        group: types.iter().filter_map(|(t, gres)| l.group.get(gres).map(|g| (t.to_string(), *g))).collect(),
        per_job: by_type(&l.per_job),
    };
    Facts {
        queue_word: "partition",
        node_listing: "scontrol show node",
        queues: partitions.iter().map(queue).collect(),
        nodes: nodes.iter().map(|n| (n.name.clone(), node(n))).collect(),
        jobs: jobs.iter().map(job).collect(),
        qos: qos.iter().map(|(name, l)| (name.clone(), limits(l))).collect(),
    }
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

    /// The separator the tests' listings use (a run draws its own).
    const SEP: &str = "|cder0123456789abcdef|";

    /// `squeue` output of [`squeue_args`]`(SEP)`: each line's fields, `~` for the separator.
    fn squeue(lines: &str) -> Vec<u8> {
        lines.replace('~', SEP).into_bytes()
    }

    /// One running atlas job holding 3 GPUs, and one that has ended.
    const JOBS: &str = "1~RUNNING~gpu~atlas~atlas-gpu~atlas001~atlas~1~1~1~UNLIMITED~5:00~cpu=1,mem=100M,node=1,billing=1,gres/gpu=3~N/A~N/A~N/A~\n\
2~COMPLETED~gpu~cms~normal~cms001~cms~1~1~1~UNLIMITED~0:00~cpu=1,gres/gpu=2~N/A~N/A~N/A~\n";

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

    /// The facts of the listings above, as [`share_facts`] reads them.
    fn listed(cfg: &ProviderConfig, groups: &[NodeGroup]) -> Facts {
        facts(
            cfg,
            groups,
            &parse_partitions(PARTITIONS).unwrap(),
            &parse_scontrol(NODES).unwrap(),
            &parse_jobs(&squeue(JOBS), SEP).jobs,
            &parse_assoc_mgr_qos(ASSOC_QOS).unwrap(),
        )
    }

    #[test]
    fn scontrol_listings_parse() {
        let p = parse_partitions(PARTITIONS).unwrap();
        assert_eq!(p[0].nodes, ["wn01", "wn02"]);
        assert_eq!(p[0].allow_accounts.as_deref(), Some(&["atlas".to_string(), "cms".to_string()][..]));
        assert_eq!((p[0].allow_groups.clone(), p[0].qos.clone()), (None, None));
        assert_eq!(p[1].serving_state(), "draining");
        let listing = parse_jobs(&squeue(JOBS), SEP);
        let j = listing.jobs;
        assert_eq!((j.len(), listing.skipped.len()), (1, 0), "running and pending jobs only");
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
        let bad = parse_jobs(&squeue("3~RUNNING~gpu~a~q~u~g~1~1~1~1:00~0:01~gres/gpu=-1~N/A~N/A~N/A~\n"), SEP);
        assert_eq!(bad.jobs.len(), 0);
        assert!(bad.skipped[0].starts_with("squeue: skipping job 3: tres-alloc"), "{:?}", bad.skipped);
        // Not accounted in tres-alloc: what the job asked for, per node times its nodes.
        let j = parse_jobs(
            &squeue(
                "4~RUNNING~gpu~a~q~u~g~2~2~2~1:00~0:01~cpu=2,node=2~N/A~gres:gpu:tesla:1,gres:gpu:k80:2~N/A~\n\
                     5~PENDING~gpu~a~q~u~g~2~1~4~1:00~0:00~cpu=2,node=1~gres/gpu:2~N/A~gres/gpu=1~\n",
            ),
            SEP,
        )
        .jobs;
        assert_eq!((j[0].gres["gpu"], j[0].remaining, j[0].cpus), (6, Some(59), 2));
        assert_eq!((j[1].gres["gpu"], j[1].running), (6, false), "2 per job and 1 for each of 4 tasks");
        let skewed = parse_jobs(&squeue("6~RUNNING~gpu~a~q~u~g~1~1~1~1:00~INVALID~cpu=1~N/A~N/A~N/A~\n"), SEP);
        assert_eq!(skewed.jobs[0].remaining, Some(60), "{:?}", skewed.skipped);
    }

    #[test]
    fn squeue_is_asked_for_no_user_text() {
        // Every field the job's owner writes; none may be printed.
        for text in ["Name", "Comment", "Command", "WorkDir", "StdOut", "StdErr", "StdIn", "admin_comment", "Reason"] {
            assert!(!SQUEUE_FIELDS.iter().any(|f| f.eq_ignore_ascii_case(text)), "{text}");
        }
        let (a, b) = (squeue_separator(), squeue_separator());
        assert_ne!(a, b, "drawn anew for each run");
        assert!(a.len() >= 36 && !a.contains([',', ':', '%', ' ', '\n']), "{a}");
        let args = squeue_args(&a);
        assert_eq!(args[..4], ["--all", "--noheader", "--states=PENDING,RUNNING", "--Format"]);
        let format: Vec<&str> = args[4].split(',').collect();
        assert_eq!(format.len(), SQUEUE_FIELDS.len());
        assert!(format.iter().zip(SQUEUE_FIELDS).all(|(f, name)| *f == format!("{name}:0{a}")), "{format:?}");
    }

    /// What squeue prints when the values a user may choose (an account
    /// SLURM does not check, without slurmdbd) hold hostile text: each job
    /// keeps its own state, partition and VO, or is skipped with a warning
    /// naming it; the jobs around it are read as ever.
    #[test]
    fn hostile_text_in_squeue_values_is_never_a_fact() {
        let long = "A".repeat(200_000);
        let every_key = SQUEUE_FIELDS.join("=RUNNING,") + "=gpu-cms";
        let text = [
            "10~RUNNING~gpu~atlas~normal~atlas001~atlas~2~1~1~1:00:00~10:00~cpu=2,gres/gpu=1~N/A~N/A~N/A~".to_string(),
            // Blanks and scontrol's spelling of the facts: no account is named so.
            "11~PENDING~gpu~x Partition=gpu-cms GroupId=root(0) JobState=RUNNING JOB_GRES=gpu:4~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~".to_string(),
            // `=`, quotes and `|` are only characters of a name.
            "12~PENDING~gpu~a=\"b\"|RUNNING|gpu-cms|'c'~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~".to_string(),
            // A line break and a whole forged line, with a separator guessed (not this run's).
            "13~PENDING~gpu~p\n99|cderffffffffffffffff|RUNNING|cderffffffffffffffff|gpu-cms~cms~normal~cms001~cms~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~".to_string(),
            format!("14~PENDING~gpu~{long}~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~"),
            format!("15~PENDING~gpu~{every_key}~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~"),
            // A count that is none (the provider once stopped on `NumCPUs="many"`).
            "16~PENDING~gpu~atlas~normal~atlas001~atlas~many~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~".to_string(),
            // A field too many, one too few, no separator at all.
            "17~PENDING~gpu~atlas~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~extra~".to_string(),
            "18~PENDING~gpu~atlas~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~".to_string(),
            "JobId=19 JobName=y NumCPUs=many JobState=RUNNING Partition=gpu-cms".to_string(),
            "20~RUNNING~gpu~cms~normal~cms001~cms~1~1~1~UNLIMITED~1:00~cpu=1,gres/gpu=2~N/A~N/A~N/A~".to_string(),
        ]
        .join("\n");
        let mut bytes = squeue(&text);
        // An account that is not UTF-8.
        bytes.extend(squeue("\n21~PENDING~gpu~"));
        bytes.push(0xff);
        bytes.extend(squeue("~normal~atlas001~atlas~1~1~1~1:00:00~0:00~cpu=1~N/A~N/A~N/A~\n"));
        let listing = parse_jobs(&bytes, SEP);
        let ids: Vec<(&str, &str, &str, bool)> = listing
            .jobs
            .iter()
            .map(|j| (j.partition.as_str(), j.account.as_str(), j.group.as_str(), j.running))
            .collect();
        assert_eq!(
            ids,
            [
                ("gpu", "atlas", "atlas", true),
                ("gpu", "a=\"b\"|RUNNING|gpu-cms|'c'", "atlas", false),
                ("gpu", long.as_str(), "atlas", false),
                ("gpu", every_key.as_str(), "atlas", false),
                ("gpu", "cms", "cms", true),
            ]
        );
        assert_eq!((listing.jobs[0].gres["gpu"], listing.jobs[4].gres["gpu"]), (1, 2));
        assert!(listing.jobs[1..4].iter().all(|j| j.gres.is_empty()));
        let skipped = listing.skipped.join("\n");
        for id in [11, 13, 16, 17, 18, 21] {
            assert!(skipped.contains(&format!("skipping job {id}:")), "job {id}: {skipped}");
        }
        assert!(skipped.contains("NumCPUs \"many\" is not a count"), "{skipped}");
        // The forged piece of job 13 and scontrol's line hold no job id of this run's format.
        assert_eq!(listing.skipped.len(), 8, "{skipped}");
        assert!(!skipped.contains("job 99") && !skipped.contains("job 19"), "{skipped}");

        // Through the shares: cms's share holds cms's job only; atlas's pending jobs stay pending.
        let cfg = config(TWO_VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let nodes = parse_scontrol(NODES).unwrap();
        let f = facts(&cfg, &groups, &parse_partitions(PARTITIONS).unwrap(), &nodes, &listing.jobs, &BTreeMap::new());
        let shares = crate::shares::from_facts(&cfg, &groups, &f).unwrap();
        let figures = |id: &str| {
            let s = shares.iter().find(|s| s.id == id).unwrap_or_else(|| panic!("no {id}"));
            (s.policy.running_jobs, s.policy.waiting_jobs, s.devices["GPGPU"].used)
        };
        assert_eq!(figures("gpu_atlas_ce.example.org_ComputingElement"), (1, 0, 1));
        assert_eq!(figures("gpu_cms_ce.example.org_ComputingElement"), (1, 0, 2));
        assert_eq!(figures("cmsonly_cms_ce.example.org_ComputingElement").0, 0);
    }

    /// Any bytes: a listing never panics, and every job read is running or pending.
    #[test]
    fn squeue_listing_of_noise_is_skipped_line_by_line() {
        for noise in [&b""[..], b"\n\n", SEP.as_bytes(), b"|||||", &[0xff, 0xfe, b'\n', 0], b"1~RUNNING"] {
            let listing = parse_jobs(noise, SEP);
            assert!(listing.jobs.is_empty(), "{noise:?}");
        }
        assert_eq!(parse_jobs(&squeue(JOBS), "").skipped.len(), 1, "no separator: nothing read");
    }

    #[test]
    fn scontrol_text_becomes_facts_in_cder_words() {
        let cfg = config(TWO_VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let f = listed(&cfg, &groups);
        assert_eq!((f.queue_word, f.node_listing), ("partition", "scontrol show node"));
        let names: Vec<&str> = f.queues.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["gpu", "cmsonly", "cpu"]);
        let gpu = &f.queues[0];
        assert_eq!(gpu.nodes, ["wn01", "wn02"]);
        assert_eq!(gpu.allow_accounts.as_deref(), Some(&["atlas".to_string(), "cms".to_string()][..]));
        assert_eq!((gpu.allow_groups.as_ref(), gpu.allow_users.as_ref(), gpu.qos.as_ref()), (None, None, None));
        assert!(gpu.runs_jobs);
        assert_eq!((gpu.serving_state, f.queues[1].serving_state), ("production", "draining"));
        // Node devices per kind the groups have: GRES `gpu` is the CDER type `gpgpu`.
        let kind = DeviceKind { cder_type: "gpgpu".into(), gres_type: None };
        let wn01 = &f.nodes["wn01"];
        assert_eq!(wn01.devices[&kind], crate::sources::Counts { total: 4, free: 1, used: 3, offline: 0 });
        assert_eq!(f.nodes["cpu01"].devices[&kind].total, 0);
        // Jobs and QOS limits are keyed by the CDER type, not the GRES name.
        assert_eq!(f.jobs.len(), 1);
        let j = &f.jobs[0];
        assert_eq!(
            (j.queue.as_str(), j.account.as_str(), j.qos.as_str(), j.running),
            ("gpu", "atlas", "atlas-gpu", true)
        );
        assert_eq!(j.devices.get("gpgpu"), Some(&3));
        assert_eq!(f.qos["atlas-gpu"].group["gpgpu"], GroupLimit { limit: 4, held: 3 });
        assert_eq!(f.qos["atlas-gpu"].per_job["gpgpu"], 2);
        assert!(f.qos["normal"].group.is_empty(), "gres/gpu=N(0) is no limit");
    }

    #[test]
    fn partition_limits_become_queue_limits() {
        let cfg = config(TWO_VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let line = b"PartitionName=p Nodes=wn01 State=UP MaxTime=1-00:00:00 DefaultTime=01:00:00 MaxNodes=2 MaxCPUsPerNode=8 MaxMemPerCPU=4000 DefMemPerCPU=1000 QoS=gpuq DenyAccounts=lhcb DenyQos=slow AllowQos=fast\n";
        let nodes =
            parse_scontrol(b"NodeName=wn01 CPUTot=16 CPUAlloc=4 Gres=gpu:4 GresUsed=gpu:9 State=DOWN\n").unwrap();
        let f = facts(&cfg, &groups, &parse_partitions(line).unwrap(), &nodes, &[], &BTreeMap::new());
        let q = &f.queues[0];
        assert_eq!((q.max_wall_time, q.default_wall_time), (Some(86_400), Some(3600)));
        assert_eq!(
            (q.max_cpu_time, q.default_cpu_time),
            (Some(86_400), Some(3600)),
            "CPU time is bounded by wall time"
        );
        assert_eq!((q.max_nodes_per_job, q.max_slots_per_node, q.max_slots_per_job), (Some(2), Some(8), None));
        assert_eq!(
            (q.max_memory_per_node_mb, q.max_memory_per_slot_mb, q.default_memory_mib),
            (None, Some(4000), Some(1000))
        );
        assert_eq!(
            (q.qos.as_deref(), q.deny_accounts.as_slice(), q.deny_qos.as_slice()),
            (Some("gpuq"), &["lhcb".to_string()][..], &["slow".to_string()][..])
        );
        assert_eq!(q.allow_qos.as_deref(), Some(&["fast".to_string()][..]));
        let n = &f.nodes["wn01"];
        assert_eq!((n.unavailable, n.slots, n.slots_used, n.virtual_memory_mib), (true, Some(16), Some(4), None));
        // More used than installed: all used; the node is down, nothing free.
        let kind = DeviceKind { cder_type: "gpgpu".into(), gres_type: None };
        assert_eq!(n.devices[&kind], crate::sources::Counts { total: 4, free: 0, used: 4, offline: 0 });
    }

    #[test]
    fn scontrol_text_through_the_shares_gives_each_vo_its_figures() {
        let cfg = config(TWO_VOS);
        let groups = crate::site::node_groups(&cfg).unwrap();
        let shares = crate::shares::from_facts(&cfg, &groups, &listed(&cfg, &groups)).unwrap();
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
        let again = crate::shares::from_facts(&only_cms, &groups, &listed(&only_cms, &groups)).unwrap();
        assert_eq!(
            again.iter().map(|s| (s.queue.as_str(), s.vo.as_str())).collect::<Vec<_>>(),
            [("gpu", "atlas"), ("cmsonly", "cms")]
        );
        let cms_only = &shares[2];
        assert_eq!(cms_only.devices["GPGPU"].free, 4);
        assert_eq!(cms_only.serving_state, "draining");
        assert_eq!(cms_only.environments, ["ce.example.org_gts450"]);
    }
}
