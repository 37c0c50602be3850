//! Keeping the batch system's jobs off a device cderd keeps out of the pool
//! (`[node.batch]`).
//!
//! cderd keeps a device out of the pool when a process still holds it after
//! its job (a leftover), when it is drained (an operator, the health watch,
//! its file vanished), or when discovery found it unhealthy. The batch
//! system does not know: SLURM would place the next job on it, and that
//! job's prolog would be refused. Neither SLURM nor TORQUE can take one GPU
//! of a node out of the schedule (SLURM changes the count of a GRES bound
//! to files only to zero, and back only with a restart of its daemons), so
//! cderd drains the whole node, with a reason naming each device and why,
//! and returns the node once every device is back:
//!
//! * SLURM: `scontrol update NodeName=N State=DRAIN Reason="cder: gpgpu:1
//!   (/dev/nvidia1) kept out: …"`, and `State=UNDRAIN` (which leaves a DOWN
//!   node down) when every device is back;
//! * TORQUE: `pbsnodes -o -N "cder: …" N`, and `pbsnodes -c -N "" N`.
//!
//! Only a drain of cderd's own is ever returned: its reason begins with
//! [`MARK`]. A node drained with any other reason (an admin's, SLURM's own
//! "Kill task failed") is left as it is, whatever cderd keeps out; if it is
//! returned while a device is still kept out, cderd drains it again.
//!
//! Every call runs on one thread of its own, never under the ledger lock,
//! each killed after `timeout_s` (scontrol waits for slurmctld, which may
//! not answer); a failed call is tried again later. The ledger only tells
//! the thread that something may have changed ([`NodeDrain::poke`], from
//! the store's commits), so a release never waits for the batch system.
//! The reason holds only facts cderd has from the ledger and the admin's
//! config (device names and files, job ids, drain reasons, the characters
//! of each limited): never a process name or anything else a user chose.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cder_model::config::{BatchNode, DrainNode};

use crate::store::{LedgerRow, Leftover};

/// Every reason cderd writes begins so: a drain whose reason does not is
/// not cderd's, and cderd never returns it.
pub const MARK: &str = "cder: ";

/// How often cderd looks at the node again while it keeps a device out (an
/// admin may have returned the node meanwhile).
pub const RECHECK: Duration = Duration::from_secs(30);
/// The first wait after a failed call before trying again; it doubles up
/// to [`RECHECK`].
const RETRY_FIRST: Duration = Duration::from_secs(2);
/// The longest reason cderd writes (SLURM and TORQUE print it whole).
const MAX_NOTE: usize = 256;
/// The longest part of it taken from a drain's own reason.
const MAX_WHY: usize = 80;

/// A device kept out of the pool, as the reason names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptOut {
    /// `<type>:<index>`.
    pub name: String,
    /// Its device file.
    pub path: String,
    /// Why, in a few words of cderd's.
    pub why: String,
}

/// The devices of `devices` kept out of the pool with no job on them: each
/// present device that is neither free nor held, and a drained one still
/// shared (its sharers keep it, but no new share is recorded, while SLURM
/// would go on placing shard jobs there). `leftovers` say which job's
/// release left one out.
pub fn kept_out(devices: &[LedgerRow], leftovers: &[Leftover]) -> Vec<KeptOut> {
    let mut out = Vec::new();
    let out_of_pool = |d: &&LedgerRow| d.present && d.job.is_none() && (d.drained || (d.shared == 0 && !d.is_free()));
    for d in devices.iter().filter(out_of_pool) {
        let why = if d.drained {
            match d.drain_reason.as_deref().map(|r| plain(r, MAX_WHY)).filter(|r| !r.is_empty()) {
                Some(r) => format!("drained ({r})"),
                None => "drained".to_string(),
            }
        } else if let Some(l) = leftovers.iter().find(|l| l.device == d.uuid) {
            let job = plain(&l.job.to_string(), MAX_WHY);
            if l.reason.contains("still being ended") {
                format!("the processes of job {job} are still being ended")
            } else {
                format!("still held after job {job} ended")
            }
        } else if d.leftover.is_some() {
            "still held after its job ended".to_string()
        } else {
            "reported unhealthy by discovery".to_string()
        };
        out.push(KeptOut { name: d.name(), path: plain(&d.path.display().to_string(), MAX_WHY), why });
    }
    out
}

/// The reason cderd writes for `kept` (none when nothing is kept out):
/// `cder: gpgpu:1 (/dev/nvidia1) kept out: …; gpgpu:3 (…) kept out: …`, at
/// most [`MAX_NOTE`] characters, the devices that do not fit counted.
pub fn note(kept: &[KeptOut]) -> Option<String> {
    let parts: Vec<String> = kept.iter().map(|k| format!("{} ({}) kept out: {}", k.name, k.path, k.why)).collect();
    let first = parts.first()?;
    let mut text = format!("{MARK}{first}");
    for (i, part) in parts.iter().enumerate().skip(1) {
        let more = parts.len() - i;
        let tail = format!("; and {more} more (cderctl status)");
        if text.len() + 2 + part.len() + if more > 1 { tail.len() } else { 0 } > MAX_NOTE {
            text.push_str(&tail);
            return Some(text);
        }
        text.push_str("; ");
        text.push_str(part);
    }
    if text.len() > MAX_NOTE {
        let mut cut = MAX_NOTE - 3;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    Some(text)
}

/// `text` with only characters that read the same in every listing of the
/// batch system: letters, digits, blanks and `.,:;_/()+-#@%`; a line break
/// or tab is a blank, anything else (`=`, quotes, brackets) an `_`; blanks
/// run together; at most `max` characters.
pub fn plain(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = if c.is_ascii_alphanumeric() || ".,:;_/()+-#@%".contains(c) {
            c
        } else if c.is_whitespace() {
            ' '
        } else {
            '_'
        };
        if c == ' ' && (out.is_empty() || out.ends_with(' ')) {
            continue;
        }
        if out.len() >= max {
            break;
        }
        out.push(c);
    }
    out.trim_end().to_string()
}

/// The batch system cderd tells, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Batch {
    /// SLURM, through this `scontrol`.
    Slurm(PathBuf),
    /// TORQUE, through this `pbsnodes`.
    Torque(PathBuf),
}

impl Batch {
    /// `SLURM` or `TORQUE`, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Batch::Slurm(_) => "SLURM",
            Batch::Torque(_) => "TORQUE",
        }
    }
}

/// `[node.batch]` as decided at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The batch system told; `None`: none.
    pub batch: Option<Batch>,
    /// This node's name there.
    pub node: String,
    /// The bound on each call.
    pub timeout: Duration,
    /// How it was decided, for the start's log line.
    pub decided: String,
}

/// Where SLURM's configuration is found on a node that runs slurmd:
/// `SLURM_CONF`'s file first (given apart), then these.
pub const SLURM_CONFIGS: [&str; 4] = [
    "/etc/slurm/slurm.conf",
    "/etc/slurm-llnl/slurm.conf",
    "/run/slurm/conf/slurm.conf",
    "/var/spool/slurmd/conf-cache/slurm.conf",
];
/// Where TORQUE's `server_name` is found on a node that runs pbs_mom.
pub const TORQUE_SERVER_NAMES: [&str; 2] = ["/var/spool/torque/server_name", "/var/lib/torque/server_name"];

/// Decides `[node.batch]`: `drain_node = "auto"` looks for SLURM's
/// configuration (`slurm_conf_env`, then [`SLURM_CONFIGS`]), then TORQUE's
/// ([`TORQUE_SERVER_NAMES`]), through `exists`. The node's name:
/// `node_name`, else `slurm_node_name` (for SLURM), else `host` up to its
/// first dot.
pub fn resolve(
    config: &BatchNode,
    slurm_node_name: Option<&str>,
    host: &str,
    slurm_conf_env: Option<&Path>,
    exists: impl Fn(&Path) -> bool,
) -> Resolved {
    let slurm = || Batch::Slurm(config.scontrol.clone());
    let torque = || Batch::Torque(config.pbsnodes.clone());
    let (batch, decided) = match config.drain_node {
        DrainNode::Off => (None, "drain_node = \"off\"".to_string()),
        DrainNode::Slurm => (Some(slurm()), "drain_node = \"slurm\"".to_string()),
        DrainNode::Torque => (Some(torque()), "drain_node = \"torque\"".to_string()),
        DrainNode::Auto => {
            let slurm_conf = slurm_conf_env
                .map(Path::to_path_buf)
                .into_iter()
                .chain(SLURM_CONFIGS.iter().map(PathBuf::from))
                .find(|p| exists(p));
            let torque_conf = TORQUE_SERVER_NAMES.iter().map(PathBuf::from).find(|p| exists(p));
            match (slurm_conf, torque_conf) {
                (Some(found), _) => {
                    (Some(slurm()), format!("drain_node = \"auto\": SLURM ({} found)", found.display()))
                }
                (None, Some(found)) => {
                    (Some(torque()), format!("drain_node = \"auto\": TORQUE ({} found)", found.display()))
                }
                (None, None) => (
                    None,
                    "drain_node = \"auto\": neither SLURM's slurm.conf nor TORQUE's server_name is on this node".into(),
                ),
            }
        }
    };
    let short = host.trim().split('.').next().unwrap_or_default().to_string();
    let node = match (&config.node_name, &batch) {
        (Some(n), _) => n.clone(),
        (None, Some(Batch::Slurm(_))) => slurm_node_name.map_or(short, str::to_string),
        (None, _) => short,
    };
    Resolved { batch, node, timeout: Duration::from_secs(config.timeout_s), decided }
}

/// What the batch system says of the node now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeView {
    /// Drained (SLURM's DRAIN flag) or offline (TORQUE).
    pub drained: bool,
    /// Its reason or note, without SLURM's `[user@time]`.
    pub reason: Option<String>,
}

/// What to do about the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Drain it with this reason (or give cderd's own drain this new reason).
    Drain(String),
    /// Return cderd's own drain.
    Resume,
    /// Someone else's drain (this reason): left as it is.
    Leave(Option<String>),
    /// It is as it should be.
    Nothing,
}

/// Whether a drain's reason is cderd's.
pub fn is_ours(reason: Option<&str>) -> bool {
    reason.is_some_and(|r| r.starts_with(MARK))
}

/// What to do with a node the batch system describes as `view`, when
/// cderd wants it drained with reason `want` (or not drained by cderd).
pub fn decide(view: &NodeView, want: Option<&str>) -> Action {
    let ours = is_ours(view.reason.as_deref());
    match want {
        Some(note) if !view.drained => Action::Drain(note.to_string()),
        Some(note) if ours && view.reason.as_deref() != Some(note) => Action::Drain(note.to_string()),
        Some(_) if ours => Action::Nothing,
        Some(_) => Action::Leave(view.reason.clone()),
        None if view.drained && ours => Action::Resume,
        None if view.drained => Action::Leave(view.reason.clone()),
        None => Action::Nothing,
    }
}

/// Reads `scontrol -o show node N`: `State=` (drained when one of its
/// `+`-parts begins `DRAIN`) and `Reason=`, the last field (SLURM prints it
/// last on every release cder supports), without SLURM's ` [user@time]`.
pub fn parse_scontrol_node(text: &str) -> Result<NodeView, String> {
    let line = text
        .lines()
        .find(|l| l.contains("NodeName="))
        .ok_or_else(|| format!("scontrol printed no node: {:?}", text.chars().take(200).collect::<String>()))?;
    let state = line
        .split(' ')
        .find_map(|w| w.strip_prefix("State="))
        .ok_or_else(|| format!("scontrol printed no State= for the node: {line:?}"))?;
    let drained = state.split('+').any(|s| s.starts_with("DRAIN"));
    let reason = line.find(" Reason=").map(|at| {
        let value = line[at + " Reason=".len()..].trim_end();
        match value.rfind(" [") {
            Some(cut) if value.ends_with(']') && value[cut..].contains('@') => value[..cut].to_string(),
            _ => value.to_string(),
        }
    });
    let reason = reason.filter(|r| !r.is_empty() && r != "(null)" && r != "none");
    Ok(NodeView { drained, reason })
}

/// Reads `pbsnodes -x N`'s XML: the `<Node>` named `node` (the only one
/// when none is named so), its `<state>` (offline when one of its
/// comma-separated words is) and `<note>`.
pub fn parse_pbsnodes_xml(text: &str, node: &str) -> Result<NodeView, String> {
    let element = |block: &str, tag: &str| -> Option<String> {
        let open = format!("<{tag}>");
        let start = block.find(&open)? + open.len();
        let end = block[start..].find(&format!("</{tag}>"))? + start;
        Some(unescape(&block[start..end]))
    };
    let blocks: Vec<&str> = text.split("<Node>").skip(1).map(|b| b.split("</Node>").next().unwrap_or(b)).collect();
    let block = blocks
        .iter()
        .find(|b| element(b, "name").as_deref() == Some(node))
        .or(if blocks.len() == 1 { blocks.first() } else { None })
        .ok_or_else(|| format!("pbsnodes -x printed no node {node}"))?;
    let state = element(block, "state").ok_or_else(|| format!("pbsnodes -x printed no <state> for {node}"))?;
    let drained = state.split(',').any(|s| s.trim() == "offline");
    let reason = element(block, "note").filter(|n| !n.is_empty());
    Ok(NodeView { drained, reason })
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// Runs `program` with `args`, killed (with its process group) after
/// `timeout`; its stdout, or why it failed.
pub fn run(program: &Path, args: &[&str], timeout: Duration) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let shown = || {
        let mut s = program.display().to_string();
        for a in args {
            s.push(' ');
            s.push_str(&if a.is_empty() || a.contains(' ') { format!("{a:?}") } else { a.to_string() });
        }
        s
    };
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{}: cannot run it: {e}", shown()))?;
    // Read on threads of their own: a full pipe must not stall the child,
    // and a grandchild keeping the pipe open must not stall cderd.
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = std::sync::mpsc::channel();
        if let Some(mut pipe) = pipe {
            let _ = std::thread::Builder::new().name("cderd-batch-pipe".into()).spawn(move || {
                let mut buf = Vec::new();
                let _ = pipe.by_ref().take(1 << 20).read_to_end(&mut buf);
                let _ = tx.send(buf);
            });
        }
        rx
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                // The child leads its own group: its children go with it.
                let _ = crate::sys::kill_process_group(child.id());
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{}: killed after {} s without an answer", shown(), timeout.as_secs_f64()));
            }
            Err(e) => return Err(format!("{}: waiting for it: {e}", shown())),
        }
    };
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
    let stdout = String::from_utf8_lossy(&out.recv_timeout(left).unwrap_or_default()).into_owned();
    if status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&err.recv_timeout(left).unwrap_or_default()).into_owned();
    let said = if stderr.trim().is_empty() { stdout.trim().to_string() } else { stderr.trim().to_string() };
    Err(format!("{}: {status}: {}", shown(), said.chars().take(300).collect::<String>()))
}

impl Batch {
    fn read(&self, node: &str, timeout: Duration) -> Result<NodeView, String> {
        match self {
            Batch::Slurm(scontrol) => parse_scontrol_node(&run(scontrol, &["-o", "show", "node", node], timeout)?),
            Batch::Torque(pbsnodes) => parse_pbsnodes_xml(&run(pbsnodes, &["-x", node], timeout)?, node),
        }
    }

    fn drain(&self, node: &str, note: &str, timeout: Duration) -> Result<(), String> {
        match self {
            Batch::Slurm(scontrol) => run(
                scontrol,
                &["update", &format!("NodeName={node}"), "State=DRAIN", &format!("Reason={note}")],
                timeout,
            ),
            Batch::Torque(pbsnodes) => run(pbsnodes, &["-o", "-N", note, node], timeout),
        }
        .map(|_| ())
    }

    fn resume(&self, node: &str, timeout: Duration) -> Result<(), String> {
        match self {
            Batch::Slurm(scontrol) => run(scontrol, &["update", &format!("NodeName={node}"), "State=UNDRAIN"], timeout),
            Batch::Torque(pbsnodes) => run(pbsnodes, &["-c", "-N", "", node], timeout),
        }
        .map(|_| ())
    }
}

/// The node's drain in the batch system, kept in step with the ledger by a
/// thread of its own ([`NodeDrain::run`]).
#[derive(Debug)]
pub struct NodeDrain {
    resolved: Resolved,
    /// Pokes so far.
    asked: Mutex<u64>,
    changed: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NodeDrain {
    /// As `[node.batch]` was decided.
    pub fn new(resolved: Resolved) -> NodeDrain {
        NodeDrain { resolved, asked: Mutex::new(0), changed: Condvar::new() }
    }

    /// The batch system told, if any.
    pub fn batch(&self) -> Option<&Batch> {
        self.resolved.batch.as_ref()
    }

    /// This node's name in it.
    pub fn node(&self) -> &str {
        &self.resolved.node
    }

    /// How `[node.batch]` was decided.
    pub fn decided(&self) -> &str {
        &self.resolved.decided
    }

    /// What is kept out may have changed: the thread looks again soon.
    /// Never blocks (called under the ledger lock).
    pub fn poke(&self) {
        *lock(&self.asked) += 1;
        self.changed.notify_all();
    }

    /// Waits until poked after `seen` or until `due`; the pokes so far.
    fn wait(&self, seen: u64, due: Instant) -> u64 {
        let mut asked = lock(&self.asked);
        while *asked == seen {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            asked = self.changed.wait_timeout(asked, left).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
        *asked
    }

    /// Brings the node in line with `want` once: what was done.
    pub fn sync(&self, want: Option<&str>) -> Result<Action, String> {
        let Some(batch) = &self.resolved.batch else { return Ok(Action::Nothing) };
        let (node, timeout) = (self.resolved.node.as_str(), self.resolved.timeout);
        let view = batch.read(node, timeout)?;
        let action = decide(&view, want);
        match &action {
            Action::Drain(note) => batch.drain(node, note, timeout)?,
            Action::Resume => batch.resume(node, timeout)?,
            Action::Leave(_) | Action::Nothing => {}
        }
        Ok(action)
    }

    /// The thread's loop: after each poke (and every [`RECHECK`] while a
    /// device is kept out) reads what is kept out with `kept_out` (which
    /// takes the ledger lock briefly) and brings the node in line. Returns
    /// at once where no batch system is told.
    pub fn run(&self, kept_out: impl Fn() -> Result<Vec<KeptOut>, String>) {
        let Some(batch) = self.resolved.batch.clone() else { return };
        let (name, node) = (batch.name(), self.resolved.node.clone());
        let mut seen = 0;
        // What the node was last brought in line with (`None`: not known).
        let mut applied: Option<Option<String>> = None;
        let mut due = Instant::now();
        let mut retry = RETRY_FIRST;
        // The other drain last logged as left alone, and whether cder wanted the node drained then.
        let mut left_alone: Option<(Option<String>, bool)> = None;
        loop {
            seen = self.wait(seen, due);
            let want = match kept_out() {
                Ok(kept) => note(&kept),
                Err(e) => {
                    tracing::warn!("[node.batch]: cannot read what the ledger keeps out: {e}");
                    due = Instant::now() + retry;
                    continue;
                }
            };
            if applied.as_ref() == Some(&want) && Instant::now() < due {
                continue;
            }
            match self.sync(want.as_deref()) {
                Ok(action) => {
                    match &action {
                        Action::Drain(note) => {
                            tracing::warn!(node = %node, "drained the node in {name}: {note}");
                        }
                        Action::Resume => {
                            tracing::info!(node = %node, "every device is back in the pool: returned the node to {name} (cder's drain ended)");
                        }
                        Action::Leave(reason) if left_alone.as_ref() != Some(&(reason.clone(), want.is_some())) => {
                            let reason = reason.as_deref().unwrap_or("none given");
                            match &want {
                                Some(note) => {
                                    tracing::warn!(node = %node, "{name} has drained the node already, not cder (reason: {reason}): left as it is; cder would say: {note}")
                                }
                                None => {
                                    tracing::info!(node = %node, "{name} has the node drained, not by cder (reason: {reason}): left as it is")
                                }
                            }
                        }
                        Action::Leave(_) | Action::Nothing => {}
                    }
                    left_alone = match &action {
                        Action::Leave(reason) => Some((reason.clone(), want.is_some())),
                        _ => None,
                    };
                    retry = RETRY_FIRST;
                    // Nothing kept out: nothing to look at until the ledger changes.
                    due = Instant::now() + if want.is_some() { RECHECK } else { Duration::from_secs(24 * 3600) };
                    applied = Some(want);
                }
                Err(e) => {
                    match &want {
                        Some(note) => {
                            tracing::error!(node = %node, "cannot drain the node in {name} ({e}); trying again in {retry:?}. It would say: {note}")
                        }
                        None => {
                            tracing::warn!(node = %node, "cannot look at the node in {name} ({e}); trying again in {retry:?}")
                        }
                    }
                    applied = None;
                    due = Instant::now() + retry;
                    retry = (retry * 2).min(RECHECK);
                }
            }
        }
    }
}

/// Starts the thread that keeps the node's drain in step with the ledger
/// (none where no batch system is told).
pub fn spawn(drain: Arc<NodeDrain>, kept_out: impl Fn() -> Result<Vec<KeptOut>, String> + Send + 'static) {
    let Some(batch) = drain.batch() else {
        tracing::info!(
            "[node.batch] {}: no batch system is told when a device is kept out of the pool",
            drain.decided()
        );
        return;
    };
    tracing::info!(
        node = drain.node(),
        "[node.batch] {}: a device kept out of the pool drains this node in {}",
        drain.decided(),
        batch.name()
    );
    let spawned = std::thread::Builder::new().name("cderd-node-drain".into()).spawn(move || drain.run(kept_out));
    if let Err(e) = spawned {
        tracing::error!("cannot start the thread that drains the node in the batch system: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(name: &str, why: &str) -> KeptOut {
        KeptOut { name: name.into(), path: format!("/dev/nvidia{}", &name[name.len() - 1..]), why: why.into() }
    }

    #[test]
    fn the_reason_names_each_device_and_why_within_its_bound() {
        assert_eq!(note(&[]), None);
        assert_eq!(
            note(&[k("gpgpu:1", "still held after job slurm:5 ended"), k("gpgpu:3", "drained (Xid 79)")]).unwrap(),
            "cder: gpgpu:1 (/dev/nvidia1) kept out: still held after job slurm:5 ended; gpgpu:3 (/dev/nvidia3) kept out: drained (Xid 79)"
        );
        let many: Vec<KeptOut> = (0..9).map(|i| k(&format!("gpgpu:{i}"), "drained (a long reason for it)")).collect();
        let text = note(&many).unwrap();
        assert!(text.len() <= MAX_NOTE && text.ends_with("more (cderctl status)"), "{text}");
        assert!(text.starts_with("cder: gpgpu:0 (/dev/nvidia0) kept out: drained"), "{text}");
    }

    #[test]
    fn every_device_out_of_the_pool_with_no_job_is_named_with_why() {
        let row = |i: u32| LedgerRow::for_test("gpgpu", i, &format!("GPU-{i}"), format!("/dev/nvidia{i}"));
        let mut rows: Vec<LedgerRow> = (0..7).map(row).collect();
        rows[1].leftover = Some("released by job slurm:5, but held open by pid 7 (uid 4242, \"x=1\")".into());
        rows[2].drained = true;
        rows[2].drain_reason = Some("Xid 79".into());
        rows[3].healthy = false;
        // Held by a job, drained meanwhile: the job keeps it, SLURM counts it taken.
        (rows[4].job, rows[4].drained) = (Some("slurm:9".parse().unwrap()), true);
        // Drained with sharers on it: no new sharer is recorded.
        (rows[5].shared, rows[5].drained) = (2, true);
        // Gone from discovery: not in SLURM's count either.
        rows[6].present = false;
        let leftovers = [Leftover {
            device: "GPU-1".into(),
            job: "slurm:5".parse().unwrap(),
            uid: 4242,
            token: "t".into(),
            reason: rows[1].leftover.clone().unwrap(),
        }];
        let kept = kept_out(&rows, &leftovers);
        let named: Vec<(&str, &str)> = kept.iter().map(|k| (k.name.as_str(), k.why.as_str())).collect();
        assert_eq!(
            named,
            [
                ("gpgpu:1", "still held after job slurm:5 ended"),
                ("gpgpu:2", "drained (Xid 79)"),
                ("gpgpu:3", "reported unhealthy by discovery"),
                ("gpgpu:5", "drained"),
            ]
        );
    }

    #[test]
    fn no_character_a_listing_could_misread_reaches_the_reason() {
        assert_eq!(plain("fan \"broken\"\n State=IDLE [x]", 80), "fan _broken_ State_IDLE _x_");
        assert_eq!(plain("  a\t\tb  ", 80), "a b");
        assert_eq!(plain(&"x".repeat(200), 80).len(), 80);
        assert_eq!(plain("é=1", 80), "__1");
    }

    #[test]
    fn only_a_drain_of_cders_own_is_returned_or_rewritten() {
        let view = |drained: bool, reason: Option<&str>| NodeView { drained, reason: reason.map(str::to_string) };
        let want = "cder: gpgpu:0 (/dev/nvidia0) kept out: drained (fan)";
        assert_eq!(decide(&view(false, None), Some(want)), Action::Drain(want.into()));
        assert_eq!(decide(&view(true, Some(want)), Some(want)), Action::Nothing);
        assert_eq!(decide(&view(true, Some("cder: gpgpu:1 (x) kept out: y")), Some(want)), Action::Drain(want.into()));
        assert_eq!(decide(&view(true, Some("admin: disk")), Some(want)), Action::Leave(Some("admin: disk".into())));
        assert_eq!(decide(&view(true, None), Some(want)), Action::Leave(None));
        assert_eq!(decide(&view(true, Some(want)), None), Action::Resume);
        assert_eq!(decide(&view(true, Some("Kill task failed")), None), Action::Leave(Some("Kill task failed".into())));
        assert_eq!(decide(&view(false, None), None), Action::Nothing);
        // A reason left behind on a node no longer drained is not a drain.
        assert_eq!(decide(&view(false, Some(want)), None), Action::Nothing);
    }

    #[test]
    fn scontrol_and_pbsnodes_are_read() {
        let line = "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 State=IDLE+DRAIN ThreadsPerCore=1 \
                    OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) \
                    Reason=cder: gpgpu:0 (/tmp/d/gpu0) kept out: drained (fan) [root@2025-01-01T10:00:00]\n";
        let v = parse_scontrol_node(line).unwrap();
        assert!(v.drained);
        assert_eq!(v.reason.as_deref(), Some("cder: gpgpu:0 (/tmp/d/gpu0) kept out: drained (fan)"));
        let v =
            parse_scontrol_node("NodeName=n1 State=MIXED+DRAIN+COMPLETING Reason=admin [slurm@2025-01-01T10:00:00]")
                .unwrap();
        assert_eq!((v.drained, v.reason.as_deref()), (true, Some("admin")));
        let v = parse_scontrol_node("NodeName=n1 Arch=x State=IDLE ThreadsPerCore=1\n").unwrap();
        assert_eq!(v, NodeView { drained: false, reason: None });
        assert!(parse_scontrol_node("Node n1 not found\n").is_err());
        let xml = "<Data><Node><name>wn1</name><state>offline,job-exclusive</state><np>8</np>\
                   <note>cder: gpgpu:0 (/dev/nvidia0) kept out: drained (fan &amp; noise)</note></Node>\
                   <Node><name>wn2</name><state>free</state></Node></Data>";
        let v = parse_pbsnodes_xml(xml, "wn1").unwrap();
        assert_eq!(
            v,
            NodeView {
                drained: true,
                reason: Some("cder: gpgpu:0 (/dev/nvidia0) kept out: drained (fan & noise)".into())
            }
        );
        assert_eq!(parse_pbsnodes_xml(xml, "wn2").unwrap(), NodeView::default());
        assert!(parse_pbsnodes_xml(xml, "wn3").is_err());
    }

    #[test]
    fn auto_finds_the_batch_system_whose_configuration_the_node_has() {
        assert_eq!(BatchNode::default().drain_node, DrainNode::Off, "a config without the key tells no one");
        let config = BatchNode { drain_node: DrainNode::Auto, ..BatchNode::default() };
        let with = |files: &'static [&'static str]| move |p: &Path| files.iter().any(|f| Path::new(f) == p);
        let r = resolve(&config, Some("wn01"), "wn01-host.example.org\n", None, with(&["/etc/slurm/slurm.conf"]));
        assert_eq!((r.batch, r.node.as_str()), (Some(Batch::Slurm("scontrol".into())), "wn01"));
        let r = resolve(&config, None, "wn7.example.org", None, with(&["/var/spool/torque/server_name"]));
        assert_eq!((r.batch, r.node.as_str()), (Some(Batch::Torque("pbsnodes".into())), "wn7"));
        let r = resolve(
            &config,
            None,
            "wn7",
            Some(Path::new("/opt/slurm/etc/slurm.conf")),
            with(&["/opt/slurm/etc/slurm.conf"]),
        );
        assert!(r.decided.contains("/opt/slurm/etc/slurm.conf"), "{}", r.decided);
        let r = resolve(&config, None, "wn7", None, with(&[]));
        assert_eq!(r.batch, None);
        let off = BatchNode { drain_node: DrainNode::Off, ..BatchNode::default() };
        assert_eq!(resolve(&off, None, "wn7", None, with(&["/etc/slurm/slurm.conf"])).batch, None);
        let named = BatchNode { drain_node: DrainNode::Torque, node_name: Some("gpu-7".into()), ..config.clone() };
        assert_eq!(resolve(&named, Some("wn01"), "wn7", None, with(&[])).node, "gpu-7");
    }

    #[test]
    fn a_program_that_does_not_answer_is_killed_at_its_deadline() {
        let started = Instant::now();
        let e = run(Path::new("/bin/sh"), &["-c", "sleep 30 & sleep 30"], Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("killed after 0.3 s"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!(run(Path::new("/bin/echo"), &["hi"], Duration::from_secs(5)).unwrap(), "hi\n");
        let e = run(Path::new("/bin/sh"), &["-c", "echo no >&2; exit 3"], Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("exit status: 3: no"), "{e}");
    }
}
