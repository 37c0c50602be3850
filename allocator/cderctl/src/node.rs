//! The cderd subcommands of cderctl: alloc, release, env, status, drain,
//! resume, reconcile, accounting, usage. Each talks to the node daemon over its
//! socket (`--socket`, else `[node] socket` of the config).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Context};
use cder_model::{Config, JobKey};
use cder_protocol::{
    Accounting, AccountingRequest, AllocRequest, Allocation, Client, ClientError, DeviceStatus, ErrorCode, IdleDevice,
    ReconcileRequest, Status, Usage, UsageRequest,
};

use super::Failure;

/// How to reach cderd; shared by every daemon subcommand.
#[derive(clap::Args, Debug)]
pub struct Connection {
    /// The daemon's socket [default: [node] socket of the config, else /run/cder/cderd.sock]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Seconds to wait for each reply
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    timeout: u64,
}

impl Connection {
    fn connect(&self, config_path: Option<&Path>) -> Result<Client, Failure> {
        let socket = match &self.socket {
            Some(s) => s.clone(),
            None => Config::load(config_path).map_err(Failure::usage)?.node.socket,
        };
        Client::connect(&socket, Duration::from_secs(self.timeout.max(1))).map_err(refused)
    }
}

/// A client error with the exit status it deserves: the daemon saying the
/// request itself was malformed is bad input (2); everything else is a
/// runtime failure (1).
fn refused(e: ClientError) -> Failure {
    match e.code() {
        Some(ErrorCode::BadRequest | ErrorCode::UnsupportedVersion | ErrorCode::TooLarge) => Failure::usage(e),
        _ => Failure::runtime(e),
    }
}

fn json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value).map_err(Failure::runtime)?;
    super::print(&(text + "\n"))
}

#[derive(clap::Args, Debug)]
pub struct AllocArgs {
    /// The job, as <lrms>:<id> (slurm:4242, torque:17.ce.example.org, local:demo-1)
    #[arg(long, value_name = "JOB")]
    job: JobKey,
    /// The uid the job runs as (it may then read the allocation with `cderctl env`)
    #[arg(long, value_name = "UID")]
    uid: u32,
    /// How many devices
    #[arg(long, value_name = "N")]
    count: u32,
    /// The CDER type
    #[arg(long = "type", value_name = "TYPE", default_value = cder_protocol::DEFAULT_TYPE)]
    cder_type: String,
    /// Only devices with at least this much memory
    #[arg(long, value_name = "MB")]
    min_memory: Option<u64>,
    /// Only devices whose model contains this text (case-insensitive)
    #[arg(long, value_name = "SUBSTR")]
    model: Option<String>,
    /// Record exactly these device indices (comma-separated) instead of letting cderd choose
    #[arg(long, value_name = "I,J,…", value_delimiter = ',')]
    devices: Option<Vec<u32>>,
    /// Print {"job":…,"uid":…,"devices":[{"type":…,"index":…,"uuid":…}],"env":{…}} instead of
    /// KEY=VALUE lines
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

pub fn alloc(config: Option<&Path>, args: &AllocArgs) -> Result<(), Failure> {
    let mut client = args.connection.connect(config)?;
    let request = AllocRequest {
        job: args.job.clone(),
        uid: args.uid,
        count: args.count,
        cder_type: args.cder_type.clone(),
        min_memory_mib: args.min_memory,
        model: args.model.clone(),
        devices: args.devices.clone(),
        device_files: None,
        wait_ms: None,
        prepare_cgroups: None,
        shares: None,
    };
    let allocation = client.alloc(&request).map_err(refused)?;
    print_allocation(&allocation, args.json)
}

fn print_allocation(allocation: &Allocation, as_json: bool) -> Result<(), Failure> {
    if as_json {
        json(allocation)
    } else {
        super::print(&allocation.env.to_lines())
    }
}

#[derive(clap::Args, Debug)]
pub struct JobArgs {
    /// The job, as <lrms>:<id>
    #[arg(long, value_name = "JOB")]
    job: JobKey,
    /// Print the daemon's JSON result
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

pub fn release(config: Option<&Path>, args: &JobArgs) -> Result<(), Failure> {
    let released = args.connection.connect(config)?.release(&args.job).map_err(refused)?;
    if args.json {
        json(&released)
    } else {
        super::print(&format!("{}: released {} device(s)\n", released.job, released.released))
    }
}

pub fn env(config: Option<&Path>, args: &JobArgs) -> Result<(), Failure> {
    let allocation = args.connection.connect(config)?.env(&args.job).map_err(refused)?;
    print_allocation(&allocation, args.json)
}

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Print the daemon's JSON result: {"devices":[…],"counts":{type:{total,free,allocated,offline,unhealthy}}}
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

pub fn status(config: Option<&Path>, args: &StatusArgs) -> Result<(), Failure> {
    let status = args.connection.connect(config)?.status().map_err(refused)?;
    if args.json {
        json(&status)
    } else {
        super::print(&status_table(&status))
    }
}

fn status_table(status: &Status) -> String {
    let header = ["TYPE", "IDX", "STATE", "JOB", "UID", "NUMA", "MEM(MiB)", "PATH", "MODEL", "REASON"];
    let rows: Vec<[String; 10]> = status.devices.iter().map(device_cells).collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let text: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        text.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&header.map(String::from));
    for row in &rows {
        out += &line(row);
    }
    for (t, c) in &status.counts {
        out += &format!(
            "{t}: {} total, {} free, {} allocated, {} offline, {} unhealthy\n",
            c.total, c.free, c.allocated, c.offline, c.unhealthy
        );
    }
    out += &idle_lines(&status.idle);
    out
}

/// One line per idle device of a running job.
fn idle_lines(idle: &[IdleDevice]) -> String {
    idle.iter()
        .map(|d| {
            format!(
                "idle: job {} (uid {}) holds {}:{} {} {}, idle since {} ({:.0} s)\n",
                d.job, d.uid, d.cder_type, d.index, d.model, d.uuid, d.idle_since, d.idle_seconds
            )
        })
        .collect()
}

fn device_cells(d: &DeviceStatus) -> [String; 10] {
    [
        d.cder_type.clone(),
        d.index.to_string(),
        serde_json::to_value(d.state).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        d.job.as_ref().map_or("-".into(), ToString::to_string),
        d.uid.map_or("-".into(), |u| u.to_string()),
        d.numa_node.to_string(),
        d.memory_mib.to_string(),
        // The file a batch system's configuration names the device by
        // (gres.conf `File=`): what the job prolog maps SLURM's GPUs with.
        d.path.clone().unwrap_or_else(|| "-".into()),
        d.model.clone(),
        d.reason.clone().unwrap_or_else(|| "-".into()),
    ]
}

#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    /// The device: <type>:<index> (gpgpu:3) or its UUID
    #[arg(value_name = "DEVICE")]
    device: String,
    /// Why (shown in status and published monitoring)
    #[arg(long, value_name = "TEXT")]
    reason: String,
    /// Print the device's JSON status entry
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

pub fn drain(config: Option<&Path>, args: &DrainArgs) -> Result<(), Failure> {
    let device = args.connection.connect(config)?.drain(&args.device, &args.reason).map_err(refused)?;
    print_device(&device, args.json)
}

#[derive(clap::Args, Debug)]
pub struct ResumeArgs {
    /// The device: <type>:<index> (gpgpu:3) or its UUID
    #[arg(value_name = "DEVICE")]
    device: String,
    /// Print the device's JSON status entry
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

pub fn resume(config: Option<&Path>, args: &ResumeArgs) -> Result<(), Failure> {
    let device = args.connection.connect(config)?.resume(&args.device).map_err(refused)?;
    print_device(&device, args.json)
}

fn print_device(d: &DeviceStatus, as_json: bool) -> Result<(), Failure> {
    if as_json {
        return json(d);
    }
    let [t, i, state, job, _, _, _, _, _, reason] = device_cells(d);
    super::print(&format!(
        "{t}:{i} {state}{}{}\n",
        if job == "-" { String::new() } else { format!(" job={job}") },
        if reason == "-" { String::new() } else { format!(" reason={reason}") }
    ))
}

/// Where reconcile learns which jobs are alive.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum LiveSource {
    /// `squeue --all --states=all`, every job not in a terminal state
    Slurm,
}

/// The SLURM job states after which a job never runs again on its
/// allocation (interfaces.md); every other state, known today or added by a
/// later SLURM (STOPPED, SIGNALING, STAGE_OUT, RESIZING, REQUEUED, …), is live.
pub const SLURM_TERMINAL_STATES: &[&str] = &[
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

#[derive(clap::Args, Debug)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["live_jobs", "from"]))]
pub struct ReconcileArgs {
    /// A file of live job keys, one per line (<lrms>:<id>; blank lines and # comments ignored); - for stdin
    #[arg(long, value_name = "FILE|-")]
    live_jobs: Option<PathBuf>,
    /// Ask the batch system for its live jobs; only its own jobs are then considered
    #[arg(long, value_enum, value_name = "LRMS")]
    from: Option<LiveSource>,
    /// Only consider jobs of this batch system (slurm, torque, local)
    #[arg(long, value_name = "LRMS")]
    lrms: Option<String>,
    /// Never release allocations newer than this ledger generation (`cderctl status --json`'s
    /// "generation", read before the live-jobs file was written) [default with --from: read
    /// just before asking the batch system]
    #[arg(long, value_name = "GENERATION")]
    as_of: Option<u64>,
    /// Print the daemon's JSON result
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

/// Parses a live-jobs list; errors name the source and line.
fn parse_live_jobs(text: &str, source: &str) -> Result<Vec<JobKey>, Failure> {
    let mut jobs = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let job = line.parse::<JobKey>().map_err(|e| Failure::usage(anyhow!("{source}:{}: {e}", n + 1)))?;
        jobs.push(job);
    }
    Ok(jobs)
}

/// The jobs SLURM knows in any non-terminal state. A failed squeue is an
/// error, never an empty list: that would free every job.
fn slurm_live_jobs() -> Result<Vec<JobKey>, Failure> {
    let squeue = std::env::var_os("CDER_SQUEUE").unwrap_or_else(|| "squeue".into());
    // Every state and every partition (hidden ones too): a job left out of
    // the list is a job whose devices get freed.
    let output = std::process::Command::new(&squeue)
        .args(["--noheader", "--all", "--states=all", "--format=%A %T"])
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {}", squeue.to_string_lossy()))
        .map_err(Failure::runtime)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Failure::runtime(anyhow!("squeue failed ({}): {}", output.status, stderr.trim())));
    }
    parse_squeue(&String::from_utf8_lossy(&output.stdout))
}

/// `%A %T` lines: the live jobs among them. A line that is not an id and
/// a state fails the whole list.
fn parse_squeue(text: &str) -> Result<Vec<JobKey>, Failure> {
    let mut live = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(id), Some(state), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(Failure::runtime(anyhow!("squeue line {}: {line:?} is not \"<job id> <state>\"", n + 1)));
        };
        let job: JobKey = id
            .parse::<u64>()
            .ok()
            .and_then(|_| format!("slurm:{id}").parse().ok())
            .ok_or_else(|| Failure::runtime(anyhow!("squeue line {}: {id:?} is not a job id", n + 1)))?;
        // Some SLURM versions mark a state with a trailing `+`.
        let state = state.trim_end_matches('+').to_ascii_uppercase();
        if !SLURM_TERMINAL_STATES.contains(&state.as_str()) {
            live.insert(job);
        }
    }
    Ok(live.into_iter().collect())
}

pub fn reconcile(config: Option<&Path>, args: &ReconcileArgs) -> Result<(), Failure> {
    let (live_jobs, implied_lrms) = match (&args.live_jobs, args.from) {
        (Some(path), _) if path.as_os_str() == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading live jobs from stdin")
                .map_err(Failure::usage)?;
            (parse_live_jobs(&text, "<stdin>")?, None)
        }
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))
                .map_err(Failure::usage)?;
            (parse_live_jobs(&text, &path.display().to_string())?, None)
        }
        (None, Some(LiveSource::Slurm)) => {
            // The ledger's generation BEFORE the snapshot: an allocation made
            // while squeue runs is newer than it and is kept.
            let as_of = match args.as_of {
                Some(g) => g,
                None => args.connection.connect(config)?.status().map_err(refused)?.generation,
            };
            let live = slurm_live_jobs()?;
            let lrms = args.lrms.clone().unwrap_or_else(|| "slurm".to_string());
            let mut client = args.connection.connect(config)?;
            let reconciled = client
                .reconcile(&ReconcileRequest { live_jobs: live, lrms: Some(lrms), as_of: Some(as_of) })
                .map_err(refused)?;
            return print_reconciled(&reconciled, args.json);
        }
        (None, None) => return Err(Failure::usage(anyhow!("reconcile needs --live-jobs FILE|- or --from slurm"))),
    };
    let lrms = args.lrms.clone().or(implied_lrms);
    let mut client = args.connection.connect(config)?;
    let reconciled = client.reconcile(&ReconcileRequest { live_jobs, lrms, as_of: args.as_of }).map_err(refused)?;
    print_reconciled(&reconciled, args.json)
}

fn print_reconciled(reconciled: &cder_protocol::Reconciled, as_json: bool) -> Result<(), Failure> {
    if as_json {
        json(reconciled)
    } else {
        let mut out = String::new();
        for job in &reconciled.released {
            out += &format!("released {job}\n");
        }
        out += &format!("{} job(s) released\n", reconciled.released.len());
        super::print(&out)
    }
}

#[derive(clap::Args, Debug)]
pub struct ConfineArgs {
    /// The job, as <lrms>:<id>; this process (and COMMAND) joins its device cgroups
    #[arg(long, value_name = "JOB")]
    job: JobKey,
    /// Print the daemon's JSON result (without COMMAND)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
    /// Run this command inside the job's device cgroups, with the job's environment
    /// using indices relative to its own devices (0..n-1)
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

pub fn confine(config: Option<&Path>, args: &ConfineArgs) -> Result<(), Failure> {
    let mut client = args.connection.connect(config)?;
    let confined = client.confine(&args.job).map_err(refused)?;
    let Some((program, rest)) = args.command.split_first() else {
        return if args.json {
            json(&confined)
        } else {
            super::print(&format!(
                "{}: pid {} confined to {}\n",
                confined.job,
                confined.pid,
                confined.cgroups.join(" ")
            ))
        };
    };
    // Inside the groups the runtime numbers the job's devices from 0.
    let types = Config::load(config).map_err(Failure::usage)?.cders;
    let allocation = client.env(&args.job).map_err(refused)?;
    let env = allocation.relative_env(&types);
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(program).args(rest).envs(&env.0).exec();
    Err(Failure::runtime(anyhow!("running {}: {error}", program.to_string_lossy())))
}

#[derive(clap::Args, Debug)]
pub struct AccountingArgs {
    /// Start of the period: unix seconds, or an age such as 90s, 30m, 12h, 7d [default: the first record]
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// End of the period, in the same forms [default: now]
    #[arg(long, value_name = "T")]
    until: Option<String>,
    /// Print the daemon's JSON result
    #[arg(long)]
    json: bool,
    /// Write APEL accelerator records (APEL-accelerator-message v0.1) for --month instead
    #[arg(long, requires_all = ["month", "site"], conflicts_with_all = ["since", "until", "json"])]
    apel: bool,
    /// The month of the APEL records, in UTC
    #[arg(long, value_name = "YYYY-MM", requires = "apel")]
    month: Option<super::apel::Month>,
    /// The site's GOCDB name, the records' SiteName
    #[arg(long, value_name = "NAME", requires = "apel")]
    site: Option<String>,
    /// The dirq spool ssmsend sends from (its [outgoing] path); without it the messages go to stdout
    #[arg(long, value_name = "DIR", requires = "apel")]
    spool: Option<PathBuf>,
    /// The CE's mapping of local accounts to FQAN and GlobalUserName (TOML: [[user]] uid or uids, fqan,
    /// global_user_name; default_fqan) [default: every user's FQAN is "local"]
    #[arg(long, value_name = "FILE", requires = "apel")]
    user_map: Option<PathBuf>,
    #[command(flatten)]
    connection: Connection,
}

/// `1700000000` (unix seconds) or `<n>s|m|h|d` (that long ago).
fn parse_time(text: &str, now: i64) -> Result<i64, String> {
    if let Ok(t) = text.parse::<i64>() {
        return if t >= 0 { Ok(t) } else { Err(format!("{text:?}: a time must not be negative")) };
    }
    let bad = || format!("{text:?} is neither unix seconds nor an age like 90s, 30m, 12h, 7d");
    let unit = text.chars().last().ok_or_else(bad)?;
    let n: i64 = text[..text.len() - unit.len_utf8()].parse().map_err(|_| bad())?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).filter(|s| *s >= 0).map(|s| (now - s).max(0)).ok_or_else(bad)
}

pub fn accounting(config: Option<&Path>, args: &AccountingArgs) -> Result<(), Failure> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let time = |t: &Option<String>, flag: &str| {
        t.as_deref().map(|t| parse_time(t, now).map_err(|e| Failure::usage(anyhow!("--{flag}: {e}")))).transpose()
    };
    if args.apel {
        return apel(config, args, now);
    }
    let request = AccountingRequest { since: time(&args.since, "since")?, until: time(&args.until, "until")? };
    let accounting = args.connection.connect(config)?.accounting(&request).map_err(refused)?;
    if args.json {
        json(&accounting)
    } else {
        super::print(&accounting_table(&accounting))
    }
}

/// `accounting --apel`: the month's records, into the spool or to stdout.
fn apel(config: Option<&Path>, args: &AccountingArgs, now: i64) -> Result<(), Failure> {
    use super::apel::{self, DeviceInfo, Inputs, UserMap};
    let (Some(month), Some(site)) = (args.month, args.site.as_deref()) else {
        return Err(Failure::usage(anyhow!("--apel needs --month and --site")));
    };
    if apel::is_apel_null(site) {
        return Err(Failure::usage(anyhow!("--site {site:?}: APEL reads that as null, and SiteName is mandatory")));
    }
    let users = match &args.user_map {
        Some(path) => UserMap::load(path).map_err(Failure::usage)?,
        None => UserMap::default(),
    };
    let mut client = args.connection.connect(config)?;
    let request = AccountingRequest { since: Some(month.start()), until: Some(month.end() - 1) };
    let accounting = client.accounting(&request).map_err(refused)?;
    let status = client.status().map_err(refused)?;
    let measured = super::usage::measured(&mut client, month.start()).map_err(refused)?;
    // The config says which types are GPUs; discovery knows their cores.
    // Neither is needed for a valid record, so a node without them still reports.
    let loaded = Config::load(config).ok();
    let gpu_types: BTreeSet<String> = loaded
        .iter()
        .flat_map(|c| &c.cders)
        .filter(|t| {
            matches!(
                t.vendor,
                cder_model::VendorKind::Nvidia | cder_model::VendorKind::Amd | cder_model::VendorKind::Intel
            )
        })
        .map(|t| t.name.get_ref().clone())
        .collect();
    let cores: std::collections::HashMap<String, u32> = loaded
        .as_ref()
        .and_then(|c| cder_inventory::discover(c).ok())
        .into_iter()
        .flatten()
        .filter_map(|d| d.attributes.cores.map(|c| (d.uuid, c)))
        .collect();
    let devices = status
        .devices
        .iter()
        .map(|d| {
            let kind = if gpu_types.contains(&d.cder_type) { "GPU".to_string() } else { d.cder_type.clone() };
            (d.uuid.clone(), DeviceInfo { model: d.model.clone(), kind, cores: cores.get(&d.uuid).copied() })
        })
        .collect();
    let records = apel::records(&Inputs {
        site,
        month,
        now,
        records: &accounting.records,
        devices: &devices,
        measured: &measured,
        users: &users,
    });
    let messages = apel::messages(&records);
    match &args.spool {
        Some(spool) => {
            for m in &messages {
                apel::spool_add(spool, m).map_err(Failure::runtime)?;
            }
            eprintln!(
                "cderctl: {} record(s) in {} message(s) added to {}",
                records.len(),
                messages.len(),
                spool.display()
            );
            Ok(())
        }
        None => super::print(&messages.iter().map(|m| format!("{m}\n")).collect::<String>()),
    }
}

fn accounting_table(a: &Accounting) -> String {
    let mut out = format!(
        "{:<28} {:>6} {:<10} {:>4} {:>11} {:>11} {:>7} {:>14}\n",
        "JOB", "UID", "TYPE", "IDX", "START", "END", "SHARE", "DEVICE-SECONDS"
    );
    for r in &a.records {
        // SHARE: the part of the device held, `1` whole, `k/N` in shares;
        // the utilisation below counts the seconds by it.
        let share = match (r.shares, r.shares_total) {
            (Some(k), Some(n)) => format!("{k}/{n}"),
            _ => "1".into(),
        };
        out += &format!(
            "{:<28} {:>6} {:<10} {:>4} {:>11} {:>11} {:>7} {:>14}\n",
            r.job.to_string(),
            r.uid,
            r.cder_type,
            r.index,
            r.start,
            r.end.map_or("-".into(), |e| e.to_string()),
            share,
            r.device_seconds
        );
    }
    for d in &a.drains {
        out += &format!(
            "drained {}:{} {} from {} to {}: {}\n",
            d.cder_type,
            d.index,
            d.uuid,
            d.start,
            d.end.map_or("-".into(), |e| e.to_string()),
            d.reason
        );
    }
    let u = &a.utilisation;
    out += &format!(
        "utilisation {:.4} = {} device-seconds (each x SHARE) / ({} devices x {} s), from {} to {}\n",
        u.ratio,
        u.device_seconds,
        u.pool_size,
        u.until.saturating_sub(u.since),
        u.since,
        u.until
    );
    out
}

#[derive(clap::Args, Debug)]
pub struct UsageArgs {
    /// Only this job, as <lrms>:<id>
    #[arg(long, value_name = "JOB")]
    job: Option<JobKey>,
    /// Only jobs that held a device since: unix seconds, or an age such as 90s, 30m, 12h, 7d
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Also the N most recent samples (time, job, device, utilisation, memory, processes)
    #[arg(long, value_name = "N")]
    recent: Option<u32>,
    /// Print the daemon's JSON result
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    connection: Connection,
}

pub fn usage(config: Option<&Path>, args: &UsageArgs) -> Result<(), Failure> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let since = args
        .since
        .as_deref()
        .map(|t| parse_time(t, now).map_err(|e| Failure::usage(anyhow!("--since: {e}"))))
        .transpose()?;
    if args.recent.is_some_and(|n| n > cder_protocol::MAX_RECENT_SAMPLES) {
        return Err(Failure::usage(anyhow!("--recent: at most {} samples", cder_protocol::MAX_RECENT_SAMPLES)));
    }
    let request = UsageRequest { job: args.job.clone(), since, recent: args.recent };
    let usage = args.connection.connect(config)?.usage(&request).map_err(refused)?;
    if args.json {
        json(&usage)
    } else {
        super::print(&usage_table(&usage))
    }
}

fn usage_table(u: &Usage) -> String {
    let header =
        ["JOB", "UID", "DEVICE", "MODEL", "UUID", "DEV-S", "ACTIVE-S", "MEAN%", "PEAK%", "PEAK-MiB", "SAMPLES"];
    let percent = |v: Option<f64>| v.map_or("-".to_string(), |p| format!("{p:.1}"));
    let rows: Vec<[String; 11]> = u
        .devices
        .iter()
        .map(|d| {
            [
                d.job.to_string(),
                d.uid.to_string(),
                format!("{}:{}", d.cder_type, d.index),
                d.model.clone(),
                d.uuid.clone(),
                d.device_seconds.to_string(),
                d.active_seconds.map_or("-".to_string(), |s| format!("{s:.0}")),
                percent(d.mean_utilisation_percent),
                d.peak_utilisation_percent.map_or("-".to_string(), |p| p.to_string()),
                d.peak_memory_mib.to_string(),
                d.samples.to_string(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let text: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        text.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&header.map(String::from));
    for row in &rows {
        out += &line(row);
    }
    out += &format!(
        "sampled every {} s; active = utilisation at or above {}%\n",
        u.sample_period_s, u.active_threshold_percent
    );
    out += &idle_lines(&u.idle);
    for s in &u.recent {
        let processes: Vec<String> = s
            .processes
            .iter()
            .map(|p| {
                format!(
                    "pid {} {} MiB sm {}%{}",
                    p.pid,
                    p.memory_mib.map_or("?".into(), |m| m.to_string()),
                    p.sm_percent.map_or("?".into(), |v| v.to_string()),
                    p.job.as_ref().map_or(String::new(), |j| format!(" ({j})"))
                )
            })
            .collect();
        out += &format!(
            "sample {} {} {} util {} mem {} MiB{}\n",
            s.at_ms,
            s.job,
            s.uuid,
            s.utilisation_percent.map_or("-".into(), |v| format!("{v}%")),
            s.memory_mib.map_or("-".into(), |m| m.to_string()),
            if processes.is_empty() { String::new() } else { format!(": {}", processes.join(", ")) }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_jobs_file_errors_name_the_line() {
        let jobs = parse_live_jobs("# live\nslurm:1\n\ntorque:2.ce  # comment\n", "f").ok().unwrap();
        assert_eq!(jobs.len(), 2);
        let e = parse_live_jobs("slurm:1\nslurm:1;rm\n", "live.txt").err().unwrap();
        assert_eq!(e.status, 2);
        assert!(e.error.to_string().starts_with("live.txt:2:"), "{}", e.error);
    }

    #[test]
    fn squeue_states_every_non_terminal_one_is_live() {
        let text = "1 RUNNING\n2 STOPPED\n3 SIGNALING\n4 STAGE_OUT\n5 RESIZING\n6 COMPLETED\n7 CANCELLED\n8 PENDING\n\
                    9 COMPLETING\n10 OUT_OF_MEMORY\n11 SUSPENDED\n12 REQUEUED\n13 TIMEOUT\n14 NODE_FAIL\n15 PREEMPTED\n\
                    16 BOOT_FAIL\n17 DEADLINE\n18 FAILED\n19 SOME_FUTURE_STATE\n\n";
        let live: Vec<String> = parse_squeue(text).ok().unwrap().iter().map(ToString::to_string).collect();
        let mut want: Vec<String> = [1, 2, 3, 4, 5, 8, 9, 11, 12, 19].iter().map(|i| format!("slurm:{i}")).collect();
        want.sort();
        let mut live_sorted = live.clone();
        live_sorted.sort();
        assert_eq!(live_sorted, want);
        assert!(parse_squeue("12 RUNNING extra\n").is_err());
        assert!(parse_squeue("abc RUNNING\n").is_err());
        assert!(parse_squeue("12\n").is_err());
    }

    #[test]
    fn times_are_seconds_or_ages() {
        assert_eq!(parse_time("1700000000", 5), Ok(1_700_000_000));
        assert_eq!(parse_time("90s", 1000), Ok(910));
        assert_eq!(parse_time("2h", 10_000), Ok(2800));
        assert_eq!(parse_time("1d", 100_000), Ok(13_600));
        assert!(parse_time("-5", 0).is_err());
        assert!(parse_time("5y", 0).is_err());
        assert!(parse_time("", 0).is_err());
        assert!(parse_time("h", 0).is_err());
    }
}
