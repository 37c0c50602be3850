//! The durable state: SQLite under the state dir, WAL with
//! `synchronous=NORMAL`: a COMMIT is in the WAL before the reply, so it
//! survives any death of cderd, though not of the node (docs/architecture.md,
//! "Trust").
//!
//! Three tables. `devices` mirrors the inventory plus what operators set
//! (drained, reason). `jobs` holds one row per allocation lifetime of a job,
//! with its UUID token; a released job keeps its row with `end` set. An
//! `allocations` row ties one device to one job row from `start` to `end`.
//! Two partial unique indexes make the database itself refuse a second live
//! owner of a device, and a second live row for one job key. Accounting
//! reads the same rows, so it survives release.
//!
//! Every mutating method runs in one `BEGIN IMMEDIATE` transaction and
//! returns only after `COMMIT`, so a reply built from its result describes
//! state that is on disk.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, Transaction};

use cder_model::{Device, Health, JobKey};
use cder_protocol::{
    AccountingRecord, AllocRequest, DeviceState, DeviceStatus, DeviceUsage, DrainRecord, ErrorCode, ErrorReply,
    IdleDevice, MonthUsage, ProcessUsage, UsageSample,
};

use crate::durable::new_token;
use crate::policy::{Candidate, SelectionPolicy};

/// Bumped when the schema changes; a newer database is refused.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS devices (
    uuid         TEXT PRIMARY KEY,
    type         TEXT NOT NULL,
    idx          INTEGER NOT NULL,
    model        TEXT NOT NULL,
    -- MiB; the column keeps its first name, as every ledger on disk has it.
    memory_mb    INTEGER NOT NULL,
    numa_node    INTEGER NOT NULL,
    path         TEXT NOT NULL,
    present      INTEGER NOT NULL,
    healthy      INTEGER NOT NULL,
    drained      INTEGER NOT NULL DEFAULT 0,
    drain_reason TEXT,
    discovered   TEXT
);
CREATE TABLE IF NOT EXISTS jobs (
    id      INTEGER PRIMARY KEY,
    job     TEXT NOT NULL,
    uid     INTEGER NOT NULL,
    type    TEXT NOT NULL,
    count   INTEGER NOT NULL,
    token   TEXT NOT NULL UNIQUE,
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_live_row ON jobs(job) WHERE end IS NULL;
CREATE TABLE IF NOT EXISTS allocations (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL REFERENCES jobs(id),
    device  TEXT NOT NULL REFERENCES devices(uuid),
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS allocations_one_live_owner ON allocations(device) WHERE end IS NULL;
CREATE INDEX IF NOT EXISTS allocations_by_job ON allocations(job_id);
-- The live owner of a device in one probe, however long the history grows.
CREATE INDEX IF NOT EXISTS allocations_by_device ON allocations(device, end);
-- Drain history (operator and health watch), for accounting; additive, so
-- databases made before it gain it at open.
CREATE TABLE IF NOT EXISTS drains (
    id      INTEGER PRIMARY KEY,
    device  TEXT NOT NULL REFERENCES devices(uuid),
    reason  TEXT NOT NULL,
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE INDEX IF NOT EXISTS drains_by_device ON drains(device, end);
-- Allocations whose job the batch system confines (its alloc said
-- prepare_cgroups = false): cder never moves that job's processes for its
-- user. A table of its own, so that older databases gain it at open.
CREATE TABLE IF NOT EXISTS batch_confined (
    job_id  INTEGER PRIMARY KEY REFERENCES jobs(id)
);
-- Released devices that a process of their last job still held open or
-- that sat in its device cgroups: out of the pool until that is over.
CREATE TABLE IF NOT EXISTS leftovers (
    device  TEXT PRIMARY KEY REFERENCES devices(uuid),
    job     TEXT NOT NULL,
    uid     INTEGER NOT NULL,
    token   TEXT NOT NULL,
    reason  TEXT NOT NULL,
    since   INTEGER NOT NULL
);
-- What each job did with each device it held, rolled up from the usage
-- sampler's samples (one row per job row and device; times in unix ms).
-- Additive, so older databases gain it at open.
CREATE TABLE IF NOT EXISTS usage (
    job_id          INTEGER NOT NULL REFERENCES jobs(id),
    device          TEXT NOT NULL REFERENCES devices(uuid),
    mig_parent      TEXT,
    samples         INTEGER NOT NULL DEFAULT 0,
    sampled_ms      INTEGER NOT NULL DEFAULT 0,
    util_ms         INTEGER NOT NULL DEFAULT 0,
    active_ms       INTEGER NOT NULL DEFAULT 0,
    util_weighted   REAL NOT NULL DEFAULT 0,
    peak_util       INTEGER,
    peak_memory_mib INTEGER NOT NULL DEFAULT 0,
    first_ms        INTEGER,
    last_ms         INTEGER,
    idle_since_ms   INTEGER,
    source          TEXT NOT NULL DEFAULT 'none',
    PRIMARY KEY (job_id, device)
);
-- The same per calendar month (UTC, 'YYYY-MM' of the sample's time), for
-- monthly accounting records (APEL): a sample counts in the month it was
-- taken in.
CREATE TABLE IF NOT EXISTS usage_months (
    job_id        INTEGER NOT NULL REFERENCES jobs(id),
    device        TEXT NOT NULL REFERENCES devices(uuid),
    month         TEXT NOT NULL,
    sampled_ms    INTEGER NOT NULL DEFAULT 0,
    util_ms       INTEGER NOT NULL DEFAULT 0,
    active_ms     INTEGER NOT NULL DEFAULT 0,
    util_weighted REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, device, month)
);
-- The most recent samples, a ring of [node.usage] ring_samples rows: the
-- sample numbered seq goes to slot seq % ring_samples, over the oldest.
CREATE TABLE IF NOT EXISTS usage_samples (
    slot        INTEGER PRIMARY KEY,
    seq         INTEGER NOT NULL,
    at_ms       INTEGER NOT NULL,
    job         TEXT NOT NULL,
    device      TEXT NOT NULL,
    utilisation INTEGER,
    memory_mib  INTEGER,
    processes   TEXT
);
-- Shares of devices offered as shares (SLURM gres/shard): who holds how many
-- of a device's `total`, from `start` to `end`. A device offered as shares is
-- never held whole (`allocations`), and the shares held never exceed the
-- total: both are checked in the transaction that records a job. Additive, so
-- older databases gain it at open.
CREATE TABLE IF NOT EXISTS shares (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL REFERENCES jobs(id),
    device  TEXT NOT NULL REFERENCES devices(uuid),
    shares  INTEGER NOT NULL,
    total   INTEGER NOT NULL,
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE INDEX IF NOT EXISTS shares_by_device ON shares(device, end);
CREATE INDEX IF NOT EXISTS shares_by_job ON shares(job_id);
-- A process outside a released job found holding one of its devices (a
-- descriptor passed out of the job, issue 52): cderd ends it, and its use
-- from the release until it was seen gone (`end`, NULL while it lives)
-- counts for the job the device came from. `started` (clock ticks after
-- boot) tells the process from a later one with its pid. Additive, so
-- older databases gain it at open.
CREATE TABLE IF NOT EXISTS outside_use (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL REFERENCES jobs(id),
    device  TEXT NOT NULL REFERENCES devices(uuid),
    pid     INTEGER NOT NULL,
    uid     INTEGER NOT NULL,
    comm    TEXT NOT NULL,
    started INTEGER NOT NULL,
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE INDEX IF NOT EXISTS outside_use_open ON outside_use(device, end);
";

/// Keeps the drain history in step with a drain (`Some`) or resume (`None`)
/// inside the same transaction: a new reason opens a record (closing the
/// previous one), the same reason again is no new drain, a resume closes it.
fn record_drain(tx: &Transaction<'_>, uuid: &str, reason: Option<&str>) -> Result<()> {
    let now = cder_ledger::now();
    let open: Option<String> = tx
        .query_row("SELECT reason FROM drains WHERE device = ?1 AND end IS NULL", params![uuid], |r| r.get(0))
        .optional()?;
    if reason.is_some() && open.as_deref() == reason {
        return Ok(());
    }
    // A wall clock stepped back never makes an interval negative.
    tx.execute("UPDATE drains SET end = MAX(?2, start) WHERE device = ?1 AND end IS NULL", params![uuid, now])?;
    if let Some(reason) = reason {
        tx.execute("INSERT INTO drains (device, reason, start) VALUES (?1, ?2, ?3)", params![uuid, reason, now])?;
    }
    Ok(())
}

/// Starts a thread that checkpoints the WAL of the database at `path` every
/// `period`, on its own connection, so that the fsyncs of a checkpoint fall
/// outside the request path (they would otherwise land on every ~100th
/// commit and set the p99 latency). PASSIVE: it never blocks the writer.
pub fn checkpoint_in_background(path: &Path, period: std::time::Duration) -> Result<std::thread::JoinHandle<()>> {
    let conn = Connection::open(path).map_err(|e| StoreError::Open { path: path.to_path_buf(), source: e })?;
    conn.busy_timeout(std::time::Duration::from_secs(1))?;
    std::thread::Builder::new()
        .name("cderd-checkpoint".into())
        .spawn(move || loop {
            std::thread::sleep(period);
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::warn!("background WAL checkpoint: {e}");
            }
        })
        .map_err(|e| {
            StoreError::Refused(ErrorReply::new(
                ErrorCode::Internal,
                format!("cannot start the checkpoint thread: {e}"),
            ))
        })
}

/// A store failure: the database, or a refusal of the request.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or set up.
    #[error("database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A statement failed.
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The database was written by a newer cderd (its schema version):
    /// a downgrade must not guess at columns it does not know.
    #[error("database holds schema version {0}, newer than this cderd ({SCHEMA_VERSION}); refusing to touch it")]
    TooNew(i64),
    /// A row holds a job key that does not parse.
    #[error("database holds a malformed job key {0:?}")]
    Corrupt(String),
    /// The request was refused (not enough devices, a conflicting
    /// allocation …): the reply the client gets.
    #[error("{0}")]
    Refused(ErrorReply),
}

impl StoreError {
    fn refused(code: ErrorCode, message: impl Into<String>) -> StoreError {
        StoreError::Refused(ErrorReply::new(code, message))
    }

    /// The protocol error this becomes: refusals as they are, everything
    /// else `internal` (the transaction was rolled back). [`Store::reply`]
    /// says more about a failed statement.
    pub fn into_reply(self) -> ErrorReply {
        match self {
            StoreError::Refused(e) => e,
            other => ErrorReply::new(ErrorCode::Internal, format!("{other}; nothing was changed")),
        }
    }
}

type Result<T> = std::result::Result<T, StoreError>;

/// One device's row of the ledger, with its live owner, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerRow {
    /// The device UUID (the row's key; stable across renumbering).
    pub uuid: String,
    /// The CDER type it belongs to.
    pub cder_type: String,
    /// Its index within its type.
    pub index: u32,
    /// The model name.
    pub model: String,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// The NUMA node it is attached to (the locality policy's input).
    pub numa_node: u32,
    /// The device file a job opens (`/dev/nvidia0`).
    pub path: PathBuf,
    /// Found by discovery at the last start.
    pub present: bool,
    /// Discovery found it in working order at the last start (the
    /// health watch drains a failing device instead).
    pub healthy: bool,
    /// Set offline (`cderctl drain` or the health watch): handed out to
    /// nobody until undrained.
    pub drained: bool,
    /// Why it was drained, when it is.
    pub drain_reason: Option<String>,
    /// The job holding it, if any.
    pub job: Option<JobKey>,
    /// The uid of that job.
    pub uid: Option<u32>,
    /// Released, but a process of its last job may still hold it: why
    /// (see [`Leftover`]). Handed out to nobody meanwhile.
    pub leftover: Option<String>,
    /// Shares of it that live jobs hold (a device offered as shares; see
    /// [`ShareRow`]); 0 otherwise.
    pub shared: u32,
}

impl LedgerRow {
    /// A free, healthy, present device row for the unit tests: type,
    /// index, uuid and file as given, every other field a plain default.
    #[cfg(test)]
    pub(crate) fn for_test(cder_type: &str, index: u32, uuid: &str, path: impl Into<PathBuf>) -> LedgerRow {
        LedgerRow {
            uuid: uuid.into(),
            cder_type: cder_type.into(),
            index,
            model: "x".into(),
            memory_mib: 1,
            numa_node: 0,
            path: path.into(),
            present: true,
            healthy: true,
            drained: false,
            drain_reason: None,
            job: None,
            uid: None,
            leftover: None,
            shared: 0,
        }
    }

    /// The state `status` reports: a held device is allocated even when
    /// drained meanwhile (it goes offline when released).
    pub fn state(&self) -> DeviceState {
        if self.job.is_some() || self.shared > 0 {
            DeviceState::Allocated
        } else if self.drained || self.leftover.is_some() {
            DeviceState::Offline
        } else if !self.present || !self.healthy {
            DeviceState::Unhealthy
        } else {
            DeviceState::Free
        }
    }

    /// Free, healthy, present and not drained.
    pub fn is_free(&self) -> bool {
        self.state() == DeviceState::Free
    }

    /// The status entry of this device.
    pub fn status(&self) -> DeviceStatus {
        let reason = if self.job.is_none() && self.leftover.is_some() {
            self.leftover.clone()
        } else if self.job.is_none() && self.shared > 0 {
            Some(format!("{} share(s) held (status lists the sharers)", self.shared))
        } else if self.drained {
            self.drain_reason.clone()
        } else if !self.present {
            Some("not found by discovery when cderd started".into())
        } else if !self.healthy {
            Some("reported unhealthy by discovery".into())
        } else {
            None
        };
        DeviceStatus {
            cder_type: self.cder_type.clone(),
            index: self.index,
            uuid: self.uuid.clone(),
            model: self.model.clone(),
            memory_mib: self.memory_mib,
            numa_node: self.numa_node,
            state: self.state(),
            job: self.job.clone(),
            uid: self.uid,
            reason,
            path: Some(self.path.display().to_string()),
        }
    }

    /// `<type>:<index>`, as operators name devices.
    pub fn name(&self) -> String {
        format!("{}:{}", self.cder_type, self.index)
    }
}

/// A job's live allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct JobAllocation {
    /// The job holding the devices.
    pub job: JobKey,
    /// The job's owner, to whom the device files belong.
    pub uid: u32,
    /// The CDER type allocated.
    pub cder_type: String,
    /// How many devices the job asked for (and holds).
    pub count: u32,
    /// The UUID token that lives as long as the allocation.
    pub token: String,
    /// When the allocation was made, in unix seconds.
    pub start: i64,
    /// By type order, then index.
    pub devices: Vec<LedgerRow>,
    /// The allocation's sequence number (its `jobs` row id): every new
    /// allocation takes the next one, see [`Store::generation`].
    pub seq: u64,
    /// The batch system confines the job itself (its `alloc` said
    /// `prepare_cgroups = false`): cder sets up no groups ahead, and only
    /// root and operators may `confine` into them.
    pub batch_confined: bool,
    /// Shares the job holds of each of its devices, which it shares with
    /// other jobs; `None`: it holds them whole.
    pub shares: Option<u32>,
}

/// One job's live shares of one device: the ledger an MPS layer reads to
/// know who shares which GPU with how many shares.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareRow {
    /// The device.
    pub device: LedgerRow,
    /// The job holding the shares.
    pub job: JobKey,
    /// That job's uid.
    pub uid: u32,
    /// How many shares it holds.
    pub shares: u32,
    /// How many shares the device is offered as.
    pub total: u32,
}

/// A released device kept out of the pool: a process of its last job still
/// held it open, or could not be ended, at the release.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    /// The device's UUID.
    pub device: String,
    /// The job it was released from.
    pub job: JobKey,
    /// That job's uid.
    pub uid: u32,
    /// That allocation's token (names its device cgroups).
    pub token: String,
    /// Why it is kept out, for `status`.
    pub reason: String,
}

/// A live allocation or share of a device: whose processes may hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    /// The allocation's token.
    pub token: String,
    /// Its job's uid.
    pub uid: u32,
    /// When it began, unix seconds.
    pub start: i64,
    /// A share of the device (other sharers hold it too), not the whole.
    pub shared: bool,
}

/// A process outside a released job found holding one of its devices (see
/// the `outside_use` table).
#[derive(Debug, Clone, PartialEq)]
pub struct OutsideUse {
    /// The row's id.
    pub id: i64,
    /// The device's UUID.
    pub device: String,
    /// The job the device came from.
    pub job: JobKey,
    /// That job's uid.
    pub job_uid: u32,
    /// That allocation's token.
    pub token: String,
    /// The process.
    pub pid: u32,
    /// Its uid.
    pub uid: u32,
    /// Its command, as it named itself.
    pub comm: String,
    /// Its start, clock ticks after boot.
    pub started: u64,
    /// From when its use counts (the release), unix seconds.
    pub start: i64,
}

/// One sample of one device held by a job, as the usage sampler took it.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageObservation {
    /// The job that holds the device (a sample of a device it no longer
    /// holds is dropped).
    pub job: JobKey,
    /// The device's UUID.
    pub uuid: String,
    /// For a MIG instance, its GPU's UUID.
    pub mig_parent: Option<String>,
    /// When, unix milliseconds.
    pub at_ms: i64,
    /// When the same sampler took its previous period's samples, unix ms;
    /// `None` in its first period (after cderd's start), when a sample
    /// covers at most one period: the time cderd was down is not guessed at.
    pub previous_ms: Option<i64>,
    /// Utilisation, percent; `None` where NVML gave none.
    pub utilisation: Option<u32>,
    /// Where the utilisation came from (`device`, `gpm`, `none`).
    pub source: &'static str,
    /// Memory in use, MiB.
    pub memory_mib: Option<u64>,
    /// The compute processes, when NVML could list them.
    pub processes: Option<Vec<ProcessUsage>>,
}

/// How samples are rolled up (`[node.usage]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UsageRules {
    /// The sampling period, ms: what a sample covers when its sampler has
    /// no previous period (see [`UsageObservation::previous_ms`]).
    pub period_ms: i64,
    /// Active at or above this utilisation.
    pub active_threshold: u32,
    /// Idle below this utilisation (or, without utilisation, with no
    /// compute process).
    pub idle_below: u32,
    /// Rows the recent-sample ring keeps.
    pub ring_samples: u32,
}

impl UsageRules {
    /// The rules of a `[node.usage]` table.
    pub fn from_config(usage: &cder_model::UsageSampling) -> UsageRules {
        UsageRules {
            period_ms: (usage.sample_period_s * 1000.0).round().max(1.0) as i64,
            active_threshold: usage.active_threshold_percent,
            idle_below: usage.idle_below_percent,
            ring_samples: usage.ring_samples.max(1),
        }
    }
}

/// A live row of the `jobs` table.
struct JobRow {
    id: i64,
    uid: u32,
    cder_type: String,
    count: u32,
    token: String,
    start: i64,
    batch_confined: bool,
    shares: Option<u32>,
}

/// The SQLite state of one node.
pub struct Store {
    conn: Connection,
    /// The database file, for the messages of failed statements.
    path: PathBuf,
    /// Position of each configured type, for ordering.
    type_order: HashMap<String, usize>,
    /// The devices offered as shares, (type, index) → shares each: never
    /// held whole, and the only ones shares are recorded of.
    share_totals: BTreeMap<(String, u32), u32>,
    /// Told after each commit that may have kept a device out of the pool
    /// or put one back (a release, a leftover settled, a drain or resume):
    /// the batch system's drain of the node follows it (see
    /// [`crate::node_drain`]). It must not block: it runs under the ledger lock.
    keep_out_changed: Option<Box<dyn Fn() + Send>>,
}

const DEVICE_COLUMNS: &str = "d.uuid, d.type, d.idx, d.model, d.memory_mb, d.numa_node, d.path, d.present, d.healthy, d.drained, d.drain_reason, j.job, j.uid, l.reason, \
    (SELECT COALESCE(SUM(s.shares), 0) FROM shares s WHERE s.device = d.uuid AND s.end IS NULL)";
const DEVICE_FROM: &str =
    "devices d LEFT JOIN allocations a ON a.device = d.uuid AND a.end IS NULL LEFT JOIN jobs j ON j.id = a.job_id \
    LEFT JOIN leftovers l ON l.device = d.uuid";

fn device_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(LedgerRow, Option<String>)> {
    let job: Option<String> = r.get(11)?;
    Ok((
        LedgerRow {
            uuid: r.get(0)?,
            cder_type: r.get(1)?,
            index: r.get(2)?,
            model: r.get(3)?,
            memory_mib: r.get::<_, i64>(4)?.max(0) as u64,
            numa_node: r.get(5)?,
            path: PathBuf::from(r.get::<_, String>(6)?),
            present: r.get(7)?,
            healthy: r.get(8)?,
            drained: r.get(9)?,
            drain_reason: r.get(10)?,
            job: None,
            uid: r.get(12)?,
            leftover: r.get(13)?,
            shared: r.get(14)?,
        },
        job,
    ))
}

fn parse_job(text: &str) -> Result<JobKey> {
    text.parse().map_err(|_| StoreError::Corrupt(text.to_string()))
}

/// Reads devices through `conn` (a connection or a transaction).
fn query_devices(conn: &Connection, filter: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<LedgerRow>> {
    let sql = format!("SELECT {DEVICE_COLUMNS} FROM {DEVICE_FROM} {filter}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(args, device_row)?;
    let mut out = Vec::new();
    for row in rows {
        let (mut device, job) = row?;
        device.job = job.as_deref().map(parse_job).transpose()?;
        out.push(device);
    }
    Ok(out)
}

/// Gives a ledger made before `devices.discovered` existed that column.
/// The schema version stays: the column is nullable, and a cderd that
/// does not know it names its columns and so never reads or writes it.
fn add_discovered_column(conn: &Connection) -> rusqlite::Result<()> {
    let has: bool =
        conn.query_row("SELECT COUNT(*) FROM pragma_table_info('devices') WHERE name = 'discovered'", [], |r| {
            r.get(0)
        })?;
    if !has {
        conn.execute_batch("ALTER TABLE devices ADD COLUMN discovered TEXT")?;
    }
    Ok(())
}

impl Store {
    /// Opens (creating if needed) the database at `path`. `types` are the
    /// configured type names in config order.
    pub fn open(path: &Path, types: &[String]) -> Result<Store> {
        let conn = crate::durable::open(path, SCHEMA, SCHEMA_VERSION).map_err(|e| match e {
            crate::durable::DurableError::Open { path, source } => StoreError::Open { path, source },
            crate::durable::DurableError::TooNew { found, .. } => StoreError::TooNew(found),
        })?;
        // The ledger must outlive cderd (a crash, SIGKILL, a restart), not the
        // node: an OS crash or power loss kills every job on the node with it,
        // SLURM/TORQUE mark the node down and reconcile frees what is left. In
        // WAL mode with synchronous=NORMAL a COMMIT has written its frames to
        // the WAL file (the kernel's page cache) before it returns, so a killed
        // cderd loses nothing; only the fsync moves to the checkpoint, off the
        // job's start path (docs/architecture.md, "Trust").
        conn.execute_batch("PRAGMA synchronous=NORMAL;")
            .map_err(|source| StoreError::Open { path: path.to_path_buf(), source })?;
        // Room for every statement of the job start and end paths (the
        // default, 16, made them evict each other).
        conn.set_prepared_statement_cache_capacity(64);
        add_discovered_column(&conn).map_err(|source| StoreError::Open { path: path.to_path_buf(), source })?;
        let type_order = types.iter().enumerate().map(|(i, t)| (t.clone(), i)).collect();
        Ok(Store { conn, path: path.to_path_buf(), type_order, share_totals: BTreeMap::new(), keep_out_changed: None })
    }

    /// The protocol error for `e` from this store: a failed statement names
    /// the database and, when the file system had no room (ENOSPC, or
    /// EDQUOT, which SQLite calls an I/O error), says the disk is full.
    pub fn reply(&self, e: StoreError) -> ErrorReply {
        match e {
            StoreError::Sql(e) => ErrorReply::new(
                ErrorCode::Internal,
                format!("{}; nothing was changed", crate::durable::failure_message(&self.conn, &self.path, &e)),
            ),
            other => other.into_reply(),
        }
    }

    /// Declares the devices offered as shares ((type, index) → shares
    /// each), from the node's configuration.
    pub fn offer_shares(&mut self, totals: BTreeMap<(String, u32), u32>) {
        self.share_totals = totals;
    }

    /// How many shares `device` is offered as, if it is.
    pub fn share_total(&self, device: &LedgerRow) -> Option<u32> {
        self.share_totals.get(&(device.cder_type.clone(), device.index)).copied()
    }

    /// `BEGIN IMMEDIATE`: take the write lock up front, so a transaction
    /// never fails half-way on a lock upgrade.
    fn begin(&self) -> Result<Transaction<'_>> {
        Ok(crate::durable::begin(&self.conn)?)
    }

    fn sort(&self, devices: &mut [LedgerRow]) {
        devices.sort_by_key(|d| {
            (self.type_order.get(&d.cder_type).copied().unwrap_or(usize::MAX), d.cder_type.clone(), d.index, !d.present)
        });
    }

    /// Makes the device table agree with what discovery found: new devices
    /// are added, known ones updated and marked present, vanished ones
    /// marked absent (their allocations are kept until released).
    pub fn sync_inventory(&mut self, devices: &[Device]) -> Result<()> {
        let tx = self.begin()?;
        tx.execute("UPDATE devices SET present = 0", [])?;
        for d in devices {
            tx.execute(
                "INSERT INTO devices (uuid, type, idx, model, memory_mb, numa_node, path, present, healthy, discovered)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, ?9)
                 ON CONFLICT(uuid) DO UPDATE SET type = ?2, idx = ?3, model = ?4, memory_mb = ?5, numa_node = ?6,
                     path = ?7, present = 1, healthy = ?8, discovered = ?9",
                params![
                    d.uuid,
                    d.cder_type,
                    d.index,
                    d.attributes.model,
                    d.attributes.memory_mib.min(i64::MAX as u64) as i64,
                    d.numa_node,
                    d.path.to_string_lossy(),
                    d.health == Health::Healthy,
                    // The whole device as discovered (vendor, PCI bus id,
                    // attributes, device number, health): what a job's
                    // record needs should discovery not find it again.
                    serde_json::to_string(d).ok(),
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Gives each discovered device of `types` (those numbered by discovery,
    /// e.g. NVML, whose numbering shifts when a GPU disappears) the index
    /// the ledger already has for its UUID, so that the other devices are
    /// not renumbered. A device new to the ledger keeps discovery's index
    /// unless a kept device or a held one has it; then it takes the lowest
    /// index no row of its type uses. Returns `(uuid, discovery's index,
    /// the ledger's)` for each device numbered differently from discovery.
    pub fn keep_indices(&self, devices: &mut [Device], types: &BTreeSet<String>) -> Result<Vec<(String, u32, u32)>> {
        let rows = self.devices()?;
        let mut changed = Vec::new();
        for cder_type in types {
            let of_type: Vec<&LedgerRow> = rows.iter().filter(|r| &r.cder_type == cder_type).collect();
            let known: HashMap<&str, &LedgerRow> = of_type.iter().map(|r| (r.uuid.as_str(), *r)).collect();
            let used: BTreeSet<u32> = of_type.iter().map(|r| r.index).collect();
            // A held device keeps its index even while absent: its job's
            // record names it so until release.
            let mut taken: BTreeSet<u32> = of_type.iter().filter(|r| r.job.is_some()).map(|r| r.index).collect();
            let mut fresh = Vec::new();
            for (i, d) in devices.iter_mut().enumerate().filter(|(_, d)| &d.cder_type == cder_type) {
                match known.get(d.uuid.as_str()) {
                    Some(row) if row.job.is_some() || taken.insert(row.index) => {
                        if row.index != d.index {
                            changed.push((d.uuid.clone(), d.index, row.index));
                            d.index = row.index;
                        }
                    }
                    _ => fresh.push(i),
                }
            }
            for i in fresh {
                let found = devices[i].index;
                let index = if taken.contains(&found) {
                    (0..).find(|n| !taken.contains(n) && !used.contains(n)).unwrap_or(found)
                } else {
                    found
                };
                taken.insert(index);
                if index != found {
                    changed.push((devices[i].uuid.clone(), found, index));
                    devices[i].index = index;
                }
            }
        }
        Ok(changed)
    }

    /// The devices discovery did not find at the last start, each as it was
    /// last discovered, by UUID. Rows written before the ledger kept that
    /// (or whose record no longer reads) are left out.
    pub fn last_discovered(&self) -> Result<HashMap<String, Device>> {
        let mut stmt =
            self.conn.prepare("SELECT uuid, discovered FROM devices WHERE present = 0 AND discovered IS NOT NULL")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = HashMap::new();
        for row in rows {
            let (uuid, json) = row?;
            match serde_json::from_str::<Device>(&json) {
                Ok(device) => {
                    out.insert(uuid, device);
                }
                Err(e) => tracing::warn!(device = %uuid, "the ledger's record of this device does not read: {e}"),
            }
        }
        Ok(out)
    }

    /// Every known device with its owner, by type order then index.
    pub fn devices(&self) -> Result<Vec<LedgerRow>> {
        let mut devices = query_devices(&self.conn, "", &[])?;
        self.sort(&mut devices);
        Ok(devices)
    }

    /// Number of present devices: the pool the utilisation is taken over.
    pub fn pool_size(&self) -> Result<u32> {
        Ok(self.conn.query_row("SELECT COUNT(*) FROM devices WHERE present = 1", [], |r| r.get(0))?)
    }

    fn live_job(tx: &Connection, job: &JobKey) -> Result<Option<JobRow>> {
        Ok(tx
            .prepare_cached(
                "SELECT id, uid, type, count, token, start, EXISTS (SELECT 1 FROM batch_confined b WHERE b.job_id = jobs.id), \
                 (SELECT MAX(s.shares) FROM shares s WHERE s.job_id = jobs.id) \
                 FROM jobs WHERE job = ?1 AND end IS NULL",
            )?
            .query_row([job.to_string()], |r| {
                Ok(JobRow {
                    id: r.get(0)?,
                    uid: r.get(1)?,
                    cder_type: r.get(2)?,
                    count: r.get(3)?,
                    token: r.get(4)?,
                    start: r.get(5)?,
                    batch_confined: r.get(6)?,
                    shares: r.get(7)?,
                })
            })
            .optional()?)
    }

    fn allocation_of(&self, conn: &Connection, job: &JobKey) -> Result<Option<JobAllocation>> {
        let Some(JobRow { id, uid, cder_type, count, token, start, batch_confined, shares }) =
            Self::live_job(conn, job)?
        else {
            return Ok(None);
        };
        let mut devices = if shares.is_some() {
            query_devices(conn, "WHERE d.uuid IN (SELECT s.device FROM shares s WHERE s.job_id = ?1)", &[&id])?
        } else {
            query_devices(conn, "WHERE a.job_id = ?1", &[&id])?
        };
        self.sort(&mut devices);
        Ok(Some(JobAllocation {
            job: job.clone(),
            uid,
            cder_type,
            count,
            token,
            start,
            devices,
            seq: id.max(0) as u64,
            batch_confined,
            shares,
        }))
    }

    /// The live allocation of `job`, if it holds one.
    pub fn job(&self, job: &JobKey) -> Result<Option<JobAllocation>> {
        self.allocation_of(&self.conn, job)
    }

    /// Every job that holds a live allocation.
    pub fn live_jobs(&self) -> Result<Vec<JobKey>> {
        Ok(self.live_allocations()?.into_iter().map(|(job, _, _)| job).collect())
    }

    /// Every live allocation: job, sequence number, token.
    pub fn live_allocations(&self) -> Result<Vec<(JobKey, u64, String)>> {
        let mut stmt = self.conn.prepare_cached("SELECT job, id, token FROM jobs WHERE end IS NULL ORDER BY id")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter().map(|(k, id, token)| Ok((parse_job(&k)?, id.max(0) as u64, token))).collect()
    }

    /// The ledger's generation: the sequence number of the newest
    /// allocation ever made (0 before the first). `jobs` rows are never
    /// deleted and their ids are SQLite rowids, which only grow while the
    /// largest row exists, so this is monotonic and as durable as the rows.
    pub fn generation(&self) -> Result<u64> {
        let max: Option<i64> = self.conn.prepare_cached("SELECT MAX(id) FROM jobs")?.query_row([], |r| r.get(0))?;
        Ok(max.unwrap_or(0).max(0) as u64)
    }

    /// Allocates per `req`, or returns the job's existing allocation when it
    /// already holds a matching one (`.1` is false then: nothing changed).
    pub fn alloc(
        &mut self,
        req: &AllocRequest,
        policy: &dyn SelectionPolicy,
        now: i64,
    ) -> Result<(JobAllocation, bool)> {
        self.alloc_avoiding(req, policy, now, &BTreeMap::new())
    }

    /// As [`Store::alloc`], never choosing a device in `busy` (UUID → why:
    /// another process holds it open). An explicit `devices` list is the
    /// batch system's choice and is recorded as it is (the caller warns):
    /// the holder may be the job itself, already started.
    pub fn alloc_avoiding(
        &mut self,
        req: &AllocRequest,
        policy: &dyn SelectionPolicy,
        now: i64,
        busy: &BTreeMap<String, String>,
    ) -> Result<(JobAllocation, bool)> {
        let tx = self.begin()?;
        if let Some(existing) = self.allocation_of(&tx, &req.job)? {
            let same_devices = match &req.devices {
                None => true,
                Some(wanted) => {
                    let mut wanted = wanted.clone();
                    wanted.sort_unstable();
                    existing.devices.iter().map(|d| d.index).collect::<Vec<_>>() == wanted
                }
            };
            if existing.uid != req.uid
                || existing.cder_type != req.cder_type
                || existing.count != req.count
                || existing.shares != req.shares
                || !same_devices
            {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!(
                        "job {} already holds {} {} device(s) for uid {}; release it before asking for something else",
                        req.job, existing.count, existing.cder_type, existing.uid
                    ),
                ));
            }
            return Ok((existing, false));
        }
        let of_type = query_devices(&tx, "WHERE d.type = ?1", &[&req.cder_type])?;
        if let Some(shares) = req.shares {
            let indices = req.devices.as_deref().unwrap_or_default();
            let chosen = self.shareable(&of_type, indices, shares, &req.cder_type)?;
            return self.record_shares(tx, req, &chosen, shares, now);
        }
        // Devices offered as shares are never held whole.
        let of_type: Vec<LedgerRow> = match &req.devices {
            Some(indices) => {
                if let Some(d) = of_type.iter().find(|d| indices.contains(&d.index) && self.share_total(d).is_some()) {
                    let total = self.share_total(d).unwrap_or_default();
                    return Err(StoreError::refused(
                        ErrorCode::Conflict,
                        format!(
                            "device {} is offered as {total} shares ({} held), never whole: the batch system gave {} the whole device (its configuration shares it: a shard and a gpu record on one file)",
                            d.name(),
                            d.shared,
                            req.job
                        ),
                    ));
                }
                of_type
            }
            None => of_type.into_iter().filter(|d| self.share_total(d).is_none()).collect(),
        };
        let chosen: Vec<LedgerRow> = match &req.devices {
            Some(indices) => Self::exactly(&of_type, indices, &req.cder_type)?,
            None => {
                let model = req.model.as_ref().map(|m| m.to_lowercase());
                let held_open = of_type.iter().filter(|d| d.is_free() && busy.contains_key(&d.uuid)).count();
                let eligible: Vec<&LedgerRow> = of_type
                    .iter()
                    .filter(|d| d.is_free())
                    .filter(|d| !busy.contains_key(&d.uuid))
                    .filter(|d| req.min_memory_mib.is_none_or(|m| d.memory_mib >= m))
                    .filter(|d| model.as_ref().is_none_or(|m| d.model.to_lowercase().contains(m.as_str())))
                    .collect();
                let candidates: Vec<Candidate> =
                    eligible.iter().map(|d| Candidate { index: d.index, domain: d.numa_node }).collect();
                let picked = policy.select(&candidates, req.count as usize);
                match picked {
                    Some(indices) if Self::valid_choice(&indices, &candidates, req.count) => indices
                        .iter()
                        .filter_map(|i| eligible.iter().find(|d| d.index == *i).map(|d| (*d).clone()))
                        .collect(),
                    Some(indices) => {
                        return Err(StoreError::refused(
                            ErrorCode::Internal,
                            format!("selection policy {} returned an invalid choice {indices:?}", policy.name()),
                        ))
                    }
                    None => {
                        let constrained = req.min_memory_mib.is_some() || req.model.is_some();
                        let mut e = ErrorReply::new(
                            ErrorCode::Insufficient,
                            format!(
                                "{} {} device{} requested, {} free{}{}",
                                req.count,
                                req.cder_type,
                                if req.count == 1 { "" } else { "s" },
                                eligible.len(),
                                if constrained { " that satisfy the constraints" } else { "" },
                                if held_open > 0 {
                                    format!(" ({held_open} more free in the ledger but held open by another process)")
                                } else {
                                    String::new()
                                }
                            ),
                        );
                        e.free = Some(eligible.len() as u32);
                        return Err(StoreError::Refused(e));
                    }
                }
            }
        };
        let token = new_token()
            .map_err(|e| StoreError::refused(ErrorCode::Internal, format!("cannot read /dev/urandom: {e}")))?;
        let now = Self::after_last_end(&tx, &chosen, now, &req.job)?;
        tx.prepare_cached("INSERT INTO jobs (job, uid, type, count, token, start) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
            .execute(params![req.job.to_string(), req.uid, req.cder_type, req.count, token, now])?;
        let job_id = tx.last_insert_rowid();
        if req.prepare_cgroups == Some(false) {
            tx.prepare_cached("INSERT INTO batch_confined (job_id) VALUES (?1)")?.execute([job_id])?;
        }
        {
            let mut insert =
                tx.prepare_cached("INSERT INTO allocations (job_id, device, start) VALUES (?1, ?2, ?3)")?;
            for d in &chosen {
                insert.execute(params![job_id, d.uuid, now])?;
            }
        }
        let allocation = self
            .allocation_of(&tx, &req.job)?
            .ok_or_else(|| StoreError::refused(ErrorCode::Internal, "allocation vanished inside its transaction"))?;
        tx.commit()?;
        Ok((allocation, true))
    }

    /// `now`, or the last end recorded on any of `chosen` if that is later:
    /// after the wall clock went back, a device's next interval must not
    /// overlap its previous one, or accounting would count those seconds twice.
    fn after_last_end(tx: &Transaction<'_>, chosen: &[LedgerRow], now: i64, job: &JobKey) -> Result<i64> {
        let mut last = now;
        let mut stmt = tx.prepare_cached("SELECT MAX(end) FROM allocations WHERE device = ?1")?;
        for d in chosen {
            let end: Option<i64> = stmt.query_row([&d.uuid], |r| r.get(0))?;
            last = last.max(end.unwrap_or(now));
        }
        if last > now {
            tracing::warn!(
                job = %job,
                now,
                start = last,
                "the wall clock is {} s before the end of a previous allocation of the same device: the new one starts there",
                last - now
            );
        }
        Ok(last)
    }

    /// The devices at `indices`, each offered as shares, present, not
    /// drained, with `shares` of them still free.
    fn shareable(
        &self,
        of_type: &[LedgerRow],
        indices: &[u32],
        shares: u32,
        cder_type: &str,
    ) -> Result<Vec<LedgerRow>> {
        let mut chosen = Vec::new();
        for &index in indices {
            let Some(d) = of_type.iter().filter(|d| d.index == index).max_by_key(|d| d.present) else {
                return Err(StoreError::refused(
                    ErrorCode::UnknownDevice,
                    format!("no device {cder_type}:{index} on this node"),
                ));
            };
            let Some(total) = self.share_total(d) else {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is not offered as shares on this node (cder.toml [node.sharing]); it is handed out whole only", d.name()),
                ));
            };
            if let Some(owner) = &d.job {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is held whole by job {owner}", d.name()),
                ));
            }
            if d.drained || !d.present || !d.healthy {
                let why = d.status().reason.map(|r| format!(" ({r})")).unwrap_or_default();
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is {}, not shareable{why}", d.name(), format!("{:?}", d.state()).to_lowercase()),
                ));
            }
            if let Some(why) = d.leftover.as_deref() {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is not shareable yet: {why}", d.name()),
                ));
            }
            if d.shared.saturating_add(shares) > total {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!(
                        "device {} has {} of its {total} shares free, {shares} asked for",
                        d.name(),
                        total.saturating_sub(d.shared)
                    ),
                ));
            }
            chosen.push(d.clone());
        }
        Ok(chosen)
    }

    /// Records `shares` of each of `chosen` for the request's job, and commits.
    fn record_shares(
        &self,
        tx: Transaction<'_>,
        req: &AllocRequest,
        chosen: &[LedgerRow],
        shares: u32,
        now: i64,
    ) -> Result<(JobAllocation, bool)> {
        let token = new_token()
            .map_err(|e| StoreError::refused(ErrorCode::Internal, format!("cannot read /dev/urandom: {e}")))?;
        tx.prepare_cached("INSERT INTO jobs (job, uid, type, count, token, start) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
            .execute(params![req.job.to_string(), req.uid, req.cder_type, req.count, token, now])?;
        let job_id = tx.last_insert_rowid();
        if req.prepare_cgroups == Some(false) {
            tx.prepare_cached("INSERT INTO batch_confined (job_id) VALUES (?1)")?.execute([job_id])?;
        }
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO shares (job_id, device, shares, total, start) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for d in chosen {
                insert.execute(params![job_id, d.uuid, shares, self.share_total(d).unwrap_or(shares), now])?;
            }
        }
        let allocation = self
            .allocation_of(&tx, &req.job)?
            .ok_or_else(|| StoreError::refused(ErrorCode::Internal, "allocation vanished inside its transaction"))?;
        tx.commit()?;
        Ok((allocation, true))
    }

    /// Every live share: who shares which device with how many shares, by
    /// device then job.
    pub fn shares(&self) -> Result<Vec<ShareRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.device, j.job, j.uid, s.shares, s.total FROM shares s JOIN jobs j ON j.id = s.job_id \
             WHERE s.end IS NULL ORDER BY s.id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, u32>(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let devices = self.devices()?;
        let mut out = Vec::new();
        for (uuid, job, uid, shares, total) in rows {
            let Some(device) = devices.iter().find(|d| d.uuid == uuid).cloned() else { continue };
            out.push(ShareRow { device, job: parse_job(&job)?, uid, shares, total });
        }
        out.sort_by_key(|r| (self.type_order.get(&r.device.cder_type).copied(), r.device.index));
        Ok(out)
    }

    fn valid_choice(indices: &[u32], candidates: &[Candidate], count: u32) -> bool {
        let mut sorted = indices.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        sorted.len() == count as usize && sorted.iter().all(|i| candidates.iter().any(|c| c.index == *i))
    }

    /// `devices` given explicitly: each must exist, be present and free.
    fn exactly(of_type: &[LedgerRow], indices: &[u32], cder_type: &str) -> Result<Vec<LedgerRow>> {
        let mut chosen = Vec::new();
        for &index in indices {
            let Some(d) = of_type.iter().filter(|d| d.index == index).max_by_key(|d| d.present) else {
                return Err(StoreError::refused(
                    ErrorCode::UnknownDevice,
                    format!("no device {cder_type}:{index} on this node"),
                ));
            };
            if let Some(owner) = &d.job {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is held by job {owner}", d.name()),
                ));
            }
            if let Some(why) = d.leftover.as_deref().filter(|_| !d.drained) {
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is not free yet: {why}", d.name()),
                ));
            }
            if !d.is_free() {
                // Why, as status says it (a drain's reason): the refusal
                // reaches the job whose batch system chose the device.
                let why = d.status().reason.map(|r| format!(" ({r})")).unwrap_or_default();
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("{}{why}", format!("device {} is {:?}, not free", d.name(), d.state()).to_lowercase()),
                ));
            }
            chosen.push(d.clone());
        }
        Ok(chosen)
    }

    /// Ends `job`'s allocation; returns the devices it held (empty when it
    /// held none: release is idempotent).
    pub fn release(&mut self, job: &JobKey, now: i64) -> Result<Vec<LedgerRow>> {
        self.release_keeping(job, now, &BTreeMap::new())
    }

    /// As [`Store::release`], keeping the devices in `held` (UUID → why)
    /// out of the pool in the same transaction (see [`Leftover`]).
    pub fn release_keeping(
        &mut self,
        job: &JobKey,
        now: i64,
        held: &BTreeMap<String, String>,
    ) -> Result<Vec<LedgerRow>> {
        let tx = self.begin()?;
        let token: Option<(u32, String)> = Self::live_job(&tx, job)?.map(|r| (r.uid, r.token));
        let mut released = self.release_in(&tx, job, now)?;
        if let Some((uid, token)) = token {
            // Other sharers hold a shared device open by right: it is kept
            // out only once its last sharer has left (issue 44, 12).
            for d in released
                .iter_mut()
                .filter(|d| held.contains_key(&d.uuid) && (self.share_total(d).is_none() || d.shared == 0))
            {
                let reason = &held[&d.uuid];
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO leftovers (device, job, uid, token, reason, since) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![d.uuid, job.to_string(), uid, token, reason, now])?;
                d.leftover = Some(reason.clone());
            }
        }
        tx.commit()?;
        // A device kept out, or a drained one that goes offline now its job is gone.
        if !released.is_empty() {
            self.kept_out_changed();
        }
        Ok(released)
    }

    /// Every device kept out of the pool after its job's release.
    pub fn leftovers(&self) -> Result<Vec<Leftover>> {
        let mut stmt =
            self.conn.prepare_cached("SELECT device, job, uid, token, reason FROM leftovers ORDER BY device")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(device, job, uid, token, reason)| Ok(Leftover { device, job: parse_job(&job)?, uid, token, reason }))
            .collect()
    }

    /// Puts a device kept out after a release back in the pool (or keeps it
    /// out with a new reason, `Some`).
    pub fn set_leftover(&mut self, device: &str, reason: Option<&str>) -> Result<()> {
        match reason {
            None => self.conn.prepare_cached("DELETE FROM leftovers WHERE device = ?1")?.execute([device])?,
            Some(r) => self
                .conn
                .prepare_cached("UPDATE leftovers SET reason = ?2 WHERE device = ?1")?
                .execute(params![device, r])?,
        };
        self.kept_out_changed();
        Ok(())
    }

    /// Sets what is told after each change of what is kept out of the pool
    /// (it must not block: it is called under the ledger lock).
    pub fn on_keep_out_change(&mut self, tell: Box<dyn Fn() + Send>) {
        self.keep_out_changed = Some(tell);
    }

    fn kept_out_changed(&self) {
        if let Some(tell) = &self.keep_out_changed {
            tell();
        }
    }

    /// Keeps a free device out of the pool for the released allocation
    /// `token` of `job` (a process found holding it later, which SIGKILL has
    /// not ended); `false` when the device is not free now (held again, or
    /// kept out already).
    pub fn keep_out(&mut self, device: &str, job: &JobKey, token: &str, reason: &str, now: i64) -> Result<bool> {
        let tx = self.begin()?;
        let row = query_devices(&tx, "WHERE d.uuid = ?1", &[&device])?.into_iter().next();
        let uid: Option<u32> =
            tx.query_row("SELECT uid FROM jobs WHERE token = ?1", [token], |r| r.get(0)).optional()?;
        let (Some(row), Some(uid)) = (row, uid) else { return Ok(false) };
        if row.job.is_some() || row.shared > 0 || row.leftover.is_some() {
            return Ok(false);
        }
        tx.prepare_cached(
            "INSERT OR REPLACE INTO leftovers (device, job, uid, token, reason, since) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![device, job.to_string(), uid, token, reason, now])?;
        tx.commit()?;
        self.kept_out_changed();
        Ok(true)
    }

    /// Who may hold `device` now: its live owner, or each live sharer.
    pub fn rightful(&self, device: &str) -> Result<Vec<Right>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT j.token, j.uid, a.start, 0 FROM allocations a JOIN jobs j ON j.id = a.job_id WHERE a.device = ?1 AND a.end IS NULL
             UNION ALL
             SELECT j.token, j.uid, s.start, 1 FROM shares s JOIN jobs j ON j.id = s.job_id WHERE s.device = ?1 AND s.end IS NULL",
        )?;
        let rows = stmt.query_map([device], |r| {
            Ok(Right { token: r.get(0)?, uid: r.get(1)?, start: r.get(2)?, shared: r.get::<_, i64>(3)? != 0 })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records that `pid` (started at `started`), outside the allocation
    /// `token`, held `device` after its release at `start`; `end` when it
    /// is already gone. A process already recorded for the device is not
    /// recorded again (its open record is closed instead when `end` is given).
    #[allow(clippy::too_many_arguments)]
    pub fn record_outside_use(
        &mut self,
        token: &str,
        device: &str,
        pid: u32,
        uid: u32,
        comm: &str,
        started: u64,
        start: i64,
        end: Option<i64>,
    ) -> Result<()> {
        let tx = self.begin()?;
        let Some(job_id): Option<i64> =
            tx.query_row("SELECT id FROM jobs WHERE token = ?1", [token], |r| r.get(0)).optional()?
        else {
            return Ok(());
        };
        let known: Option<(i64, Option<i64>)> = tx
            .query_row(
                "SELECT id, end FROM outside_use WHERE device = ?1 AND pid = ?2 AND started = ?3",
                params![device, pid, started as i64],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        match known {
            None => {
                tx.execute(
                    "INSERT INTO outside_use (job_id, device, pid, uid, comm, started, start, end) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                    params![job_id, device, pid, uid, comm, started as i64, start, end.map(|e| e.max(start))],
                )?;
            }
            Some((id, None)) if end.is_some() => {
                tx.execute("UPDATE outside_use SET end = MAX(?2, start) WHERE id = ?1", params![id, end])?;
            }
            Some(_) => {}
        }
        tx.commit()?;
        Ok(())
    }

    /// The processes outside their job recorded as holding a released
    /// device and not yet seen gone.
    pub fn open_outside_use(&self) -> Result<Vec<OutsideUse>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT o.id, o.device, j.job, j.uid, j.token, o.pid, o.uid, o.comm, o.started, o.start
             FROM outside_use o JOIN jobs j ON j.id = o.job_id WHERE o.end IS NULL ORDER BY o.id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, u32>(5)?,
                    r.get::<_, u32>(6)?,
                    r.get::<_, String>(7)?,
                    r.get::<_, i64>(8)?,
                    r.get::<_, i64>(9)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(id, device, job, job_uid, token, pid, uid, comm, started, start)| {
                Ok(OutsideUse {
                    id,
                    device,
                    job: parse_job(&job)?,
                    job_uid,
                    token,
                    pid,
                    uid,
                    comm,
                    started: started as u64,
                    start,
                })
            })
            .collect()
    }

    /// The process of record `id` was seen gone at `end`.
    pub fn close_outside_use(&mut self, id: i64, end: i64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE outside_use SET end = MAX(?2, start) WHERE id = ?1 AND end IS NULL")?
            .execute(params![id, end])?;
        Ok(())
    }

    fn release_in(&self, tx: &Transaction<'_>, job: &JobKey, now: i64) -> Result<Vec<LedgerRow>> {
        let Some(allocation) = self.allocation_of(tx, job)? else {
            return Ok(Vec::new());
        };
        // Cached statements: a job's epilog runs this, and parsing the SQL
        // each time was a visible share of cderd's CPU per job.
        let id: i64 = tx
            .prepare_cached("SELECT id FROM jobs WHERE job = ?1 AND end IS NULL")?
            .query_row([job.to_string()], |r| r.get(0))?;
        // The wall clock went back since the start (NTP, an operator): the
        // interval ends where it began, 0 s, never negative.
        if now < allocation.start {
            tracing::warn!(
                job = %job,
                start = allocation.start,
                now,
                "the wall clock is {} s before the allocation's start: recording its end at its start (0 device-seconds)",
                allocation.start - now
            );
        }
        tx.prepare_cached("UPDATE allocations SET end = MAX(?2, start) WHERE job_id = ?1 AND end IS NULL")?
            .execute(params![id, now])?;
        tx.prepare_cached("UPDATE jobs SET end = MAX(?2, start) WHERE id = ?1")?.execute(params![id, now])?;
        if let Some(mine) = allocation.shares {
            tx.prepare_cached("UPDATE shares SET end = MAX(?2, start) WHERE job_id = ?1 AND end IS NULL")?
                .execute(params![id, now])?;
            // What the other sharers still hold.
            return Ok(allocation
                .devices
                .into_iter()
                .map(|d| LedgerRow { job: None, uid: None, shared: d.shared.saturating_sub(mine), ..d })
                .collect());
        }
        Ok(allocation.devices.into_iter().map(|d| LedgerRow { job: None, uid: None, ..d }).collect())
    }

    /// Releases, in one transaction, every live job that `keep` rejects
    /// (it is given the job and its allocation's sequence number).
    pub fn release_where(
        &mut self,
        keep: impl Fn(&JobKey, u64) -> bool,
        now: i64,
    ) -> Result<Vec<(JobKey, Vec<LedgerRow>)>> {
        let doomed: Vec<JobKey> =
            self.live_allocations()?.into_iter().filter(|(j, seq, _)| !keep(j, *seq)).map(|(j, _, _)| j).collect();
        let tx = self.begin()?;
        let mut out = Vec::new();
        for job in doomed {
            let devices = self.release_in(&tx, &job, now)?;
            out.push((job, devices));
        }
        tx.commit()?;
        Ok(out)
    }

    /// Finds a device by `<type>:<index>` (the present one first) or UUID.
    pub fn find_device(&self, name: &str) -> Result<LedgerRow> {
        let all = self.devices()?;
        let by_name =
            name.rsplit_once(':').and_then(|(t, i)| i.parse::<u32>().ok().map(|i| (t, i))).and_then(|(t, i)| {
                all.iter().filter(|d| d.cder_type == t && d.index == i).max_by_key(|d| d.present).cloned()
            });
        by_name.or_else(|| all.iter().find(|d| d.uuid == name).cloned()).ok_or_else(|| {
            StoreError::refused(
                ErrorCode::UnknownDevice,
                format!("no device {name:?} on this node (name it <type>:<index> or by UUID)"),
            )
        })
    }

    /// Drains (`Some(reason)`) or resumes (`None`) a device; idempotent.
    pub fn set_drained(&mut self, name: &str, reason: Option<&str>) -> Result<LedgerRow> {
        let device = self.find_device(name)?;
        let tx = self.begin()?;
        tx.execute(
            "UPDATE devices SET drained = ?2, drain_reason = ?3 WHERE uuid = ?1",
            params![device.uuid, reason.is_some(), reason],
        )?;
        record_drain(&tx, &device.uuid, reason)?;
        tx.commit()?;
        self.kept_out_changed();
        self.find_device(&device.uuid)
    }

    /// When the first drain on record began.
    pub fn first_drain_start(&self) -> Result<Option<i64>> {
        Ok(self.conn.query_row("SELECT MIN(start) FROM drains", [], |r| r.get(0))?)
    }

    /// Drains overlapping `[since, until]`, oldest first.
    pub fn drains(&self, since: i64, until: i64) -> Result<Vec<DrainRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT d.uuid, d.type, d.idx, r.reason, r.start, r.end FROM drains r JOIN devices d ON d.uuid = r.device \
             WHERE r.start <= ?2 AND (r.end IS NULL OR r.end >= ?1) ORDER BY r.start, r.id",
        )?;
        let rows = stmt.query_map(params![since, until], |r| {
            Ok(DrainRecord {
                uuid: r.get(0)?,
                cder_type: r.get(1)?,
                index: r.get(2)?,
                reason: r.get(3)?,
                start: r.get(4)?,
                end: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Records overlapping `[since, until]`, optionally of one uid only:
    /// devices held whole, and shares of devices (with their fraction).
    pub fn accounting(&self, since: i64, until: i64, uid: Option<u32>, now: i64) -> Result<Vec<AccountingRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT j.job, j.uid, d.type, d.idx, d.uuid, a.start, a.end, a.shares, a.total, a.outside
             FROM (SELECT id, job_id, device, start, end, NULL AS shares, NULL AS total, NULL AS outside FROM allocations
                   UNION ALL SELECT id, job_id, device, start, end, shares, total, NULL FROM shares
                   UNION ALL SELECT o.id, o.job_id, o.device, o.start, o.end, s.shares, s.total,
                          'pid ' || o.pid || ' (uid ' || o.uid || ', ' || quote(o.comm) || '), outside the job, ended by cderd'
                          FROM outside_use o LEFT JOIN shares s ON s.job_id = o.job_id AND s.device = o.device) a
             JOIN jobs j ON j.id = a.job_id JOIN devices d ON d.uuid = a.device
             WHERE a.start <= ?2 AND (a.end IS NULL OR a.end >= ?1) AND (?3 IS NULL OR j.uid = ?3)
             ORDER BY a.start, a.job_id, d.type, d.idx",
        )?;
        let rows = stmt.query_map(params![since, until, uid], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, u32>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, u32>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, Option<i64>>(6)?,
                r.get::<_, Option<u32>>(7)?,
                r.get::<_, Option<u32>>(8)?,
                r.get::<_, Option<String>>(9)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (job, uid, cder_type, index, uuid, start, end, shares, total, after_release) = row?;
            // The shares transaction never records more than the total, nor
            // a total of 0; a hand-edited row still never counts above whole.
            let fraction = match (shares, total) {
                (Some(k), Some(n)) if n > 0 => (f64::from(k) / f64::from(n)).min(1.0),
                _ => 1.0,
            };
            out.push(AccountingRecord {
                job: parse_job(&job)?,
                uid,
                cder_type,
                index,
                uuid,
                start,
                end,
                device_seconds: (end.unwrap_or(now) - start).max(0),
                shares,
                shares_total: shares.and(total),
                fraction,
                after_release,
            });
        }
        Ok(out)
    }

    /// Rolls one period's samples up, in one transaction: the per-job
    /// aggregates and the recent-sample ring. A sample of a device its job
    /// no longer holds is dropped. Returns how many were recorded.
    pub fn record_usage(&mut self, observations: &[UsageObservation], rules: &UsageRules) -> Result<usize> {
        let tx = self.begin()?;
        let cap = i64::from(rules.ring_samples.max(1));
        let mut seq: i64 = tx
            .query_row("SELECT value FROM meta WHERE key = 'usage_ring_next'", [], |r| r.get::<_, String>(0))
            .optional()?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut recorded = 0;
        // A job's devices: held whole (allocations) or shared (shares).
        for o in observations {
            let held: Option<(i64, i64)> = tx
                .prepare_cached(
                    "SELECT j.id, a.start FROM jobs j JOIN (SELECT job_id, device, start, end FROM allocations UNION ALL SELECT job_id, device, start, end FROM shares) a ON a.job_id = j.id \
                     WHERE j.job = ?1 AND j.end IS NULL AND a.device = ?2 AND a.end IS NULL",
                )?
                .query_row(params![o.job.to_string(), o.uuid], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let Some((job_id, start)) = held else { continue };
            let last: Option<Option<i64>> = tx
                .prepare_cached("SELECT last_ms FROM usage WHERE job_id = ?1 AND device = ?2")?
                .query_row(params![job_id, o.uuid], |r| r.get(0))
                .optional()?;
            // A sample covers the time since this device's previous sample
            // (or the allocation), but never more than since the sampler's
            // previous period (or one period): a gap (cderd down) is not guessed at.
            let since = last.flatten().unwrap_or(start.saturating_mul(1000));
            let floor = o.previous_ms.unwrap_or(o.at_ms.saturating_sub(rules.period_ms));
            let covered = o.at_ms.saturating_sub(since.max(floor)).max(0);
            let util = o.utilisation.map(|u| u.min(100));
            let active = util.is_some_and(|u| u >= rules.active_threshold);
            let idle = match (util, &o.processes) {
                (Some(u), _) => u < rules.idle_below,
                (None, Some(list)) => list.is_empty(),
                (None, None) => false,
            };
            tx.prepare_cached(
                "INSERT INTO usage (job_id, device, mig_parent, samples, sampled_ms, util_ms, active_ms, util_weighted, \
                     peak_util, peak_memory_mib, first_ms, last_ms, idle_since_ms, source)
                 VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, CASE WHEN ?11 THEN ?10 - ?4 END, ?12)
                 ON CONFLICT(job_id, device) DO UPDATE SET
                     mig_parent = COALESCE(?3, mig_parent),
                     samples = samples + 1,
                     sampled_ms = sampled_ms + ?4,
                     util_ms = util_ms + ?5,
                     active_ms = active_ms + ?6,
                     util_weighted = util_weighted + ?7,
                     peak_util = CASE WHEN ?8 IS NULL THEN peak_util ELSE MAX(COALESCE(peak_util, 0), ?8) END,
                     peak_memory_mib = MAX(peak_memory_mib, ?9),
                     last_ms = ?10,
                     idle_since_ms = CASE WHEN ?11 THEN COALESCE(idle_since_ms, ?10 - ?4) END,
                     source = ?12",
            )?
            .execute(params![
                job_id,
                o.uuid,
                o.mig_parent,
                covered,
                if util.is_some() { covered } else { 0 },
                if active { covered } else { 0 },
                util.map_or(0.0, |u| f64::from(u) * covered as f64),
                util,
                o.memory_mib.unwrap_or(0).min(i64::MAX as u64) as i64,
                o.at_ms,
                idle,
                o.source,
            ])?;
            tx.prepare_cached(
                "INSERT INTO usage_months (job_id, device, month, sampled_ms, util_ms, active_ms, util_weighted)
                 VALUES (?1, ?2, strftime('%Y-%m', ?3 / 1000, 'unixepoch'), ?4, ?5, ?6, ?7)
                 ON CONFLICT(job_id, device, month) DO UPDATE SET
                     sampled_ms = sampled_ms + ?4, util_ms = util_ms + ?5, active_ms = active_ms + ?6,
                     util_weighted = util_weighted + ?7",
            )?
            .execute(params![
                job_id,
                o.uuid,
                o.at_ms,
                covered,
                if util.is_some() { covered } else { 0 },
                if active { covered } else { 0 },
                util.map_or(0.0, |u| f64::from(u) * covered as f64),
            ])?;
            let processes = match &o.processes {
                Some(list) if !list.is_empty() => serde_json::to_string(list).ok(),
                _ => None,
            };
            tx.prepare_cached(
                "INSERT OR REPLACE INTO usage_samples (slot, seq, at_ms, job, device, utilisation, memory_mib, processes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                seq % cap,
                seq,
                o.at_ms,
                o.job.to_string(),
                o.uuid,
                util,
                o.memory_mib.map(|m| m.min(i64::MAX as u64) as i64),
                processes
            ])?;
            seq += 1;
            recorded += 1;
        }
        // A smaller ring than before keeps its newest rows only.
        tx.prepare_cached("DELETE FROM usage_samples WHERE slot >= ?1")?.execute([cap])?;
        tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('usage_ring_next', ?1)")?
            .execute([seq.to_string()])?;
        tx.commit()?;
        Ok(recorded)
    }

    /// Per job and device: what the samples say, for every allocation of
    /// `job` (or all), of `uid` (or all), held at some time since `since`.
    pub fn usage(
        &self,
        job: Option<&JobKey>,
        uid: Option<u32>,
        since: Option<i64>,
        now: i64,
    ) -> Result<Vec<DeviceUsage>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT j.job, j.uid, d.type, d.idx, d.uuid, d.model, u.mig_parent, a.start, a.end, \
                    COALESCE(u.samples, 0), COALESCE(u.sampled_ms, 0), COALESCE(u.util_ms, 0), COALESCE(u.active_ms, 0), \
                    COALESCE(u.util_weighted, 0), u.peak_util, COALESCE(u.peak_memory_mib, 0), u.first_ms, u.last_ms, \
                    COALESCE(u.source, 'none'), a.job_id
             FROM (SELECT job_id, device, start, end FROM allocations UNION ALL SELECT job_id, device, start, end FROM shares) a JOIN jobs j ON j.id = a.job_id \
             JOIN devices d ON d.uuid = a.device LEFT JOIN usage u ON u.job_id = a.job_id AND u.device = a.device
             WHERE (?1 IS NULL OR j.job = ?1) AND (?2 IS NULL OR j.uid = ?2) AND (?3 IS NULL OR a.end IS NULL OR a.end >= ?3)
             ORDER BY a.start, a.job_id, d.type, d.idx",
        )?;
        let rows = stmt.query_map(params![job.map(ToString::to_string), uid, since], |r| {
            let util_ms: i64 = r.get(11)?;
            let weighted: f64 = r.get(13)?;
            let start: i64 = r.get(7)?;
            let end: Option<i64> = r.get(8)?;
            let job: String = r.get(0)?;
            let job = job
                .parse::<JobKey>()
                .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))?;
            let usage = DeviceUsage {
                job,
                uid: r.get(1)?,
                cder_type: r.get(2)?,
                index: r.get(3)?,
                uuid: r.get(4)?,
                model: r.get(5)?,
                mig_parent: r.get(6)?,
                start,
                end,
                device_seconds: (end.unwrap_or(now) - start).max(0),
                sampled_seconds: r.get::<_, i64>(10)? as f64 / 1000.0,
                active_seconds: (util_ms > 0).then(|| r.get::<_, i64>(12).map(|ms| ms as f64 / 1000.0)).transpose()?,
                mean_utilisation_percent: (util_ms > 0).then(|| weighted / util_ms as f64),
                peak_utilisation_percent: r.get(14)?,
                peak_memory_mib: r.get::<_, i64>(15)?.max(0) as u64,
                samples: r.get::<_, i64>(9)?.max(0) as u64,
                first_sample: r.get::<_, Option<i64>>(16)?.map(|ms| ms.div_euclid(1000)),
                last_sample: r.get::<_, Option<i64>>(17)?.map(|ms| ms.div_euclid(1000)),
                utilisation_source: r.get(18)?,
                months: Vec::new(),
            };
            Ok((usage, r.get::<_, i64>(19)?))
        })?;
        let out = rows.collect::<rusqlite::Result<Vec<_>>>()?;
        let mut months = self.conn.prepare_cached(
            "SELECT month, sampled_ms, util_ms, active_ms, util_weighted FROM usage_months \
             WHERE job_id = ?1 AND device = ?2 ORDER BY month",
        )?;
        let mut with_months = Vec::with_capacity(out.len());
        for (mut usage, job_id) in out {
            let rows = months.query_map(params![job_id, usage.uuid], |r| {
                let util_ms: i64 = r.get(2)?;
                Ok(MonthUsage {
                    month: r.get(0)?,
                    sampled_seconds: r.get::<_, i64>(1)? as f64 / 1000.0,
                    active_seconds: (util_ms > 0)
                        .then(|| r.get::<_, i64>(3).map(|ms| ms as f64 / 1000.0))
                        .transpose()?,
                    mean_utilisation_percent: (util_ms > 0)
                        .then(|| r.get::<_, f64>(4).map(|w| w / util_ms as f64))
                        .transpose()?,
                })
            })?;
            usage.months = rows.collect::<rusqlite::Result<Vec<_>>>()?;
            with_months.push(usage);
        }
        Ok(with_months)
    }

    /// Devices of live jobs below the idle threshold since `now_ms −
    /// idle_after_ms` or earlier.
    pub fn idle(&self, idle_after_ms: i64, now_ms: i64) -> Result<Vec<IdleDevice>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT j.job, j.uid, d.type, d.idx, d.uuid, d.model, u.idle_since_ms
             FROM usage u JOIN jobs j ON j.id = u.job_id JOIN devices d ON d.uuid = u.device \
             JOIN (SELECT job_id, device, start, end FROM allocations UNION ALL SELECT job_id, device, start, end FROM shares) a \
             ON a.job_id = u.job_id AND a.device = u.device AND a.end IS NULL
             WHERE j.end IS NULL AND u.idle_since_ms IS NOT NULL AND u.idle_since_ms <= ?1
             ORDER BY u.idle_since_ms, d.type, d.idx",
        )?;
        let rows = stmt
            .query_map([now_ms.saturating_sub(idle_after_ms)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, u32>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, u32>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, i64>(6)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(job, uid, cder_type, index, uuid, model, since)| {
                Ok(IdleDevice {
                    job: parse_job(&job)?,
                    uid,
                    cder_type,
                    index,
                    uuid,
                    model,
                    idle_since: since.div_euclid(1000),
                    idle_seconds: (now_ms - since).max(0) as f64 / 1000.0,
                })
            })
            .collect()
    }

    /// The ring's most recent `limit` samples, oldest first, of `job` (or
    /// all) and of jobs of `uid` (or all).
    pub fn recent_samples(&self, limit: u32, job: Option<&JobKey>, uid: Option<u32>) -> Result<Vec<UsageSample>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.at_ms, s.job, s.device, s.utilisation, s.memory_mib, s.processes FROM usage_samples s
             WHERE (?1 IS NULL OR s.job = ?1)
               AND (?2 IS NULL OR EXISTS (SELECT 1 FROM jobs j WHERE j.job = s.job AND j.uid = ?2))
             ORDER BY s.seq DESC LIMIT ?3",
        )?;
        let rows = stmt
            .query_map(params![job.map(ToString::to_string), uid, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<u32>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, Option<String>>(5)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut out = Vec::with_capacity(rows.len());
        for (at_ms, job, uuid, utilisation_percent, memory, processes) in rows.into_iter().rev() {
            out.push(UsageSample {
                at_ms,
                job: parse_job(&job)?,
                uuid,
                utilisation_percent,
                memory_mib: memory.map(|m| m.max(0) as u64),
                processes: processes.and_then(|p| serde_json::from_str(&p).ok()).unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// Rows in the recent-sample ring.
    pub fn ring_len(&self) -> Result<u64> {
        Ok(self.conn.query_row("SELECT COUNT(*) FROM usage_samples", [], |r| r.get::<_, i64>(0))?.max(0) as u64)
    }

    /// The earliest allocation start on record, whole or in shares, if any.
    pub fn first_start(&self) -> Result<Option<i64>> {
        Ok(self.conn.query_row(
            "SELECT MIN(start) FROM (SELECT start FROM allocations UNION ALL SELECT start FROM shares)",
            [],
            |r| r.get(0),
        )?)
    }

    /// Checks the invariants the daemon promises, straight from SQL: no
    /// device has two live owners, every live job row has as many live
    /// allocations as it counted. Returns a description of each violation.
    pub fn check_invariants(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let mut stmt = self.conn.prepare(
            "SELECT device, COUNT(*) FROM allocations WHERE end IS NULL GROUP BY device HAVING COUNT(*) > 1",
        )?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (device, n) = row?;
            problems.push(format!("device {device} has {n} live owners"));
        }
        let mut stmt = self.conn.prepare(
            "SELECT j.job, j.count, (SELECT COUNT(*) FROM allocations a WHERE a.job_id = j.id AND a.end IS NULL)
                 + (SELECT COUNT(*) FROM shares s WHERE s.job_id = j.id AND s.end IS NULL)
             FROM jobs j WHERE j.end IS NULL",
        )?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))? {
            let (job, count, live) = row?;
            if count != live {
                problems.push(format!("job {job} counts {count} devices but holds {live}"));
            }
        }
        // Shares: never more than a device's total, never beside a whole owner.
        let mut stmt = self.conn.prepare(
            "SELECT s.device, SUM(s.shares), MAX(s.total), \
                 (SELECT COUNT(*) FROM allocations a WHERE a.device = s.device AND a.end IS NULL) \
             FROM shares s WHERE s.end IS NULL GROUP BY s.device",
        )?;
        for row in stmt.query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))
        })? {
            let (device, held, total, whole) = row?;
            if held > total {
                problems.push(format!("device {device} has {held} of its {total} shares held"));
            }
            if whole > 0 {
                problems.push(format!("device {device} is held whole and in shares at once"));
            }
        }
        Ok(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::LocalityPolicy;
    use cder_model::Config;

    fn node(n: u32) -> (tempfile::TempDir, Store) {
        let mut text = String::from("[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n");
        for i in 0..n {
            text += &format!(
                "[[cder.device]]\nindex = {i}\nmodel = \"{}\"\nmemory_mib = {}\npath = \"/dev/nvidia{i}\"\nnuma_node = {}\n",
                if i % 2 == 0 { "Tesla K20m" } else { "Tesla T4" },
                if i % 2 == 0 { 4800 } else { 15360 },
                i / (n / 2).max(1)
            );
        }
        let config = Config::parse(&text, Path::new("t.toml")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("state.db"), &["gpgpu".to_string()]).unwrap();
        store.sync_inventory(&config.cders[0].static_devices()).unwrap();
        (dir, store)
    }

    /// A device as discovered, every field set.
    fn discovered_device() -> Device {
        Device {
            cder_type: "gpgpu".into(),
            vendor: "Nvidia".into(),
            index: 3,
            uuid: "GPU-5a1c0e34-0000-4000-8000-000000000003".into(),
            pci_bus_id: "0000:3b:00.0".into(),
            attributes: cder_model::DeviceAttributes {
                model: "NVIDIA A100-SXM4-40GB".into(),
                memory_mib: 40960,
                compute_capability: Some("8.0".parse().unwrap()),
                architecture: None,
                multiprocessors: Some(108),
                cores_per_mp: Some(64),
                cores: Some(6912),
                clock_mhz: Some(1410),
                ecc: true,
            },
            path: "/dev/nvidia3".into(),
            dev: Some(cder_model::DeviceNumber { major: 195, minor: 3 }),
            numa_node: 1,
            health: Health::Healthy,
        }
    }

    /// What discovery found is what the ledger gives back once discovery no
    /// longer finds it: nothing of it is lost (vendor, bus id, attributes,
    /// device number, health), also across a reopening.
    #[test]
    fn a_device_read_back_is_the_device_stored() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let stored = discovered_device();
        let mut s = Store::open(&db, &["gpgpu".to_string()]).unwrap();
        s.sync_inventory(std::slice::from_ref(&stored)).unwrap();
        // Present devices come from discovery itself.
        assert!(s.last_discovered().unwrap().is_empty());
        s.sync_inventory(&[]).unwrap();
        drop(s);
        let s = Store::open(&db, &["gpgpu".to_string()]).unwrap();
        let read = s.last_discovered().unwrap();
        assert_eq!(read.get(&stored.uuid), Some(&stored));
        assert_eq!(read.len(), 1);
    }

    /// A ledger made before the column existed gets it on open, and its
    /// rows (with no record) are left to the row's own fields.
    #[test]
    fn a_ledger_without_discovered_records_gains_the_column() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state.db");
        let s = Store::open(&db, &["gpgpu".to_string()]).unwrap();
        s.conn.execute_batch("ALTER TABLE devices DROP COLUMN discovered").unwrap();
        s.conn
            .execute(
                "INSERT INTO devices (uuid, type, idx, model, memory_mb, numa_node, path, present, healthy) \
                 VALUES ('GPU-old', 'gpgpu', 0, 'Tesla K20m', 4800, 0, '/dev/nvidia0', 0, 1)",
                [],
            )
            .unwrap();
        drop(s);
        let mut s = Store::open(&db, &["gpgpu".to_string()]).unwrap();
        assert!(s.last_discovered().unwrap().is_empty());
        s.sync_inventory(&[discovered_device()]).unwrap();
        s.sync_inventory(&[]).unwrap();
        assert_eq!(s.last_discovered().unwrap().len(), 1);
        assert_eq!(s.devices().unwrap().len(), 2);
    }

    fn req(job: &str, count: u32) -> AllocRequest {
        AllocRequest::new(job.parse().unwrap(), 1000, count)
    }

    fn indices(a: &JobAllocation) -> Vec<u32> {
        a.devices.iter().map(|d| d.index).collect()
    }

    #[test]
    fn disjoint_then_insufficient_then_after_release() {
        let (_d, mut s) = node(4);
        let (a, new) = s.alloc(&req("slurm:1", 2), &LocalityPolicy, 10).unwrap();
        assert!(new);
        assert_eq!(indices(&a), vec![0, 1]);
        let (b, _) = s.alloc(&req("slurm:2", 2), &LocalityPolicy, 11).unwrap();
        assert_eq!(indices(&b), vec![2, 3]);
        let e = s.alloc(&req("slurm:3", 2), &LocalityPolicy, 12).unwrap_err().into_reply();
        assert_eq!((e.code, e.free), (ErrorCode::Insufficient, Some(0)));
        assert_eq!(s.release(&"slurm:1".parse().unwrap(), 13).unwrap().len(), 2);
        assert_eq!(indices(&s.alloc(&req("slurm:3", 2), &LocalityPolicy, 14).unwrap().0), vec![0, 1]);
        assert!(s.check_invariants().unwrap().is_empty());
    }

    fn share(job: &str, device: u32, shares: u32) -> AllocRequest {
        AllocRequest { devices: Some(vec![device]), shares: Some(shares), ..req(job, 1) }
    }

    #[test]
    fn shares_are_counted_per_device_and_never_beside_a_whole_owner() {
        let (_d, mut s) = node(4);
        s.offer_shares([(("gpgpu".to_string(), 0), 4)].into_iter().collect());
        for (i, n) in [(1, 1), (2, 1), (3, 2)] {
            let (a, new) = s.alloc(&share(&format!("slurm:{i}"), 0, n), &LocalityPolicy, 10).unwrap();
            assert!(new);
            assert_eq!((indices(&a), a.shares), (vec![0], Some(n)));
        }
        // Idempotent for the same record; another count is a conflict.
        assert!(!s.alloc(&share("slurm:1", 0, 1), &LocalityPolicy, 11).unwrap().1);
        assert_eq!(
            s.alloc(&share("slurm:1", 0, 2), &LocalityPolicy, 11).unwrap_err().into_reply().code,
            ErrorCode::Conflict
        );
        // Full: a fifth share waits (conflict), a whole-GPU job never gets it.
        let e = s.alloc(&share("slurm:5", 0, 1), &LocalityPolicy, 12).unwrap_err().into_reply();
        assert!(e.message.contains("0 of its 4 shares free"), "{}", e.message);
        let whole = AllocRequest { devices: Some(vec![0]), ..req("slurm:6", 1) };
        let e = s.alloc(&whole, &LocalityPolicy, 12).unwrap_err().into_reply();
        assert!(e.code == ErrorCode::Conflict && e.message.contains("offered as 4 shares"), "{}", e.message);
        // cderd's own choice skips it; a device not offered is never shared.
        assert_eq!(indices(&s.alloc(&req("slurm:7", 3), &LocalityPolicy, 12).unwrap().0), vec![1, 2, 3]);
        s.release(&"slurm:7".parse().unwrap(), 12).unwrap();
        let e = s.alloc(&share("slurm:8", 1, 1), &LocalityPolicy, 12).unwrap_err().into_reply();
        assert!(e.message.contains("not offered as shares"), "{}", e.message);
        let rows = s.shares().unwrap();
        assert_eq!(
            rows.iter().map(|r| (r.job.to_string(), r.shares, r.total)).collect::<Vec<_>>(),
            [("slurm:1".to_string(), 1, 4), ("slurm:2".to_string(), 1, 4), ("slurm:3".to_string(), 2, 4)]
        );
        assert_eq!(s.find_device("gpgpu:0").unwrap().state(), DeviceState::Allocated);
        // Release: the others still hold theirs; the last one frees it.
        let out = s.release(&"slurm:3".parse().unwrap(), 13).unwrap();
        assert_eq!(out.iter().map(|d| d.shared).collect::<Vec<_>>(), vec![2]);
        assert!(s.alloc(&share("slurm:5", 0, 2), &LocalityPolicy, 14).unwrap().1);
        assert!(s.check_invariants().unwrap().is_empty());
        for j in ["slurm:1", "slurm:2", "slurm:5"] {
            s.release(&j.parse().unwrap(), 15).unwrap();
        }
        assert_eq!(s.find_device("gpgpu:0").unwrap().state(), DeviceState::Free);
        assert!(s.shares().unwrap().is_empty());
    }

    #[test]
    fn idempotent_alloc_and_release() {
        let (_d, mut s) = node(4);
        let (a, _) = s.alloc(&req("slurm:1", 2), &LocalityPolicy, 10).unwrap();
        let (again, new) = s.alloc(&req("slurm:1", 2), &LocalityPolicy, 20).unwrap();
        assert!(!new);
        assert_eq!(again, a);
        let e = s.alloc(&req("slurm:1", 3), &LocalityPolicy, 20).unwrap_err().into_reply();
        assert_eq!(e.code, ErrorCode::Conflict);
        let job = "slurm:1".parse().unwrap();
        assert_eq!(s.release(&job, 30).unwrap().len(), 2);
        assert!(s.release(&job, 31).unwrap().is_empty());
        // A requeued job with the same id gets a new lifetime and token.
        let (b, _) = s.alloc(&req("slurm:1", 1), &LocalityPolicy, 40).unwrap();
        assert_ne!(b.token, a.token);
    }

    #[test]
    fn constraints_drain_and_explicit_devices() {
        let (_d, mut s) = node(4);
        let mut r = req("slurm:1", 2);
        r.min_memory_mib = Some(10000);
        let (a, _) = s.alloc(&r, &LocalityPolicy, 1).unwrap();
        assert_eq!(indices(&a), vec![1, 3]);
        let mut r = req("slurm:2", 1);
        r.model = Some("t4".into());
        let e = s.alloc(&r, &LocalityPolicy, 1).unwrap_err().into_reply();
        assert_eq!(e.free, Some(0));
        assert!(e.message.contains("satisfy the constraints"), "{}", e.message);
        s.set_drained("gpgpu:0", Some("fan")).unwrap();
        let e = s.alloc(&req("slurm:3", 2), &LocalityPolicy, 1).unwrap_err().into_reply();
        assert_eq!(e.free, Some(1));
        let mut r = req("slurm:4", 1);
        r.devices = Some(vec![0]);
        assert_eq!(s.alloc(&r, &LocalityPolicy, 1).unwrap_err().into_reply().code, ErrorCode::Conflict);
        r.devices = Some(vec![9]);
        assert_eq!(s.alloc(&r, &LocalityPolicy, 1).unwrap_err().into_reply().code, ErrorCode::UnknownDevice);
        r.devices = Some(vec![2]);
        assert_eq!(indices(&s.alloc(&r, &LocalityPolicy, 1).unwrap().0), vec![2]);
        let d = s.set_drained("gpgpu:0", None).unwrap();
        assert_eq!(d.state(), DeviceState::Free);
    }

    #[test]
    fn generation_numbers_every_new_allocation() {
        let (_d, mut s) = node(4);
        assert_eq!(s.generation().unwrap(), 0);
        let (a, _) = s.alloc(&req("slurm:1", 1), &LocalityPolicy, 1).unwrap();
        assert_eq!((a.seq, s.generation().unwrap()), (1, 1));
        // An idempotent repeat is not a new allocation.
        let (again, new) = s.alloc(&req("slurm:1", 1), &LocalityPolicy, 2).unwrap();
        assert!(!new);
        assert_eq!((again.seq, s.generation().unwrap()), (1, 1));
        s.release(&"slurm:1".parse().unwrap(), 3).unwrap();
        // Release does not lower it; the requeued job takes the next number.
        assert_eq!(s.generation().unwrap(), 1);
        let (b, _) = s.alloc(&req("slurm:1", 1), &LocalityPolicy, 4).unwrap();
        assert_eq!((b.seq, s.generation().unwrap()), (2, 2));
        // release_where hands the sequence number to the predicate.
        let as_of = s.generation().unwrap();
        s.alloc(&req("slurm:2", 1), &LocalityPolicy, 5).unwrap();
        let released = s.release_where(|_, seq| seq > as_of, 6).unwrap();
        assert_eq!(released.iter().map(|(j, _)| j.to_string()).collect::<Vec<_>>(), vec!["slurm:1"]);
        assert!(s.job(&"slurm:2".parse().unwrap()).unwrap().is_some());
    }

    #[test]
    fn busy_devices_are_never_chosen_but_an_explicit_list_is_recorded() {
        let (_d, mut s) = node(4);
        let busy: BTreeMap<String, String> = [("gpgpu-0".to_string(), "held open by pid 7".to_string())].into();
        let (a, _) = s.alloc_avoiding(&req("slurm:1", 1), &LocalityPolicy, 1, &busy).unwrap();
        assert_ne!(indices(&a), vec![0]);
        let e = s.alloc_avoiding(&req("slurm:3", 3), &LocalityPolicy, 1, &busy).unwrap_err().into_reply();
        assert_eq!((e.code, e.free), (ErrorCode::Insufficient, Some(2)));
        assert!(e.message.contains("held open"), "{}", e.message);
        // The batch system chose device 0: the ledger records its choice.
        let mut r = req("slurm:2", 1);
        r.devices = Some(vec![0]);
        assert_eq!(indices(&s.alloc_avoiding(&r, &LocalityPolicy, 1, &busy).unwrap().0), vec![0]);
    }

    #[test]
    fn batch_confined_and_leftovers_are_kept_and_old_databases_gain_them() {
        let (dir, mut s) = node(2);
        let mut r = req("slurm:1", 1);
        r.prepare_cgroups = Some(false);
        let (a, _) = s.alloc(&r, &LocalityPolicy, 1).unwrap();
        assert!(a.batch_confined);
        assert!(!s.alloc(&req("slurm:2", 1), &LocalityPolicy, 1).unwrap().0.batch_confined);
        // Released with device 0 still held: out of the pool, with the reason.
        let held: BTreeMap<String, String> = [(a.devices[0].uuid.clone(), "held open by pid 7".to_string())].into();
        let released = s.release_keeping(&"slurm:1".parse().unwrap(), 2, &held).unwrap();
        assert_eq!(released[0].leftover.as_deref(), Some("held open by pid 7"));
        let d = s.find_device(&a.devices[0].uuid).unwrap();
        assert_eq!((d.state(), d.status().reason.as_deref()), (DeviceState::Offline, Some("held open by pid 7")));
        let mut again = req("slurm:3", 1);
        again.devices = Some(vec![a.devices[0].index]);
        let e = s.alloc(&again, &LocalityPolicy, 3).unwrap_err().into_reply();
        assert!(e.code == ErrorCode::Conflict && e.message.contains("pid 7"), "{e:?}");
        assert_eq!(s.leftovers().unwrap().len(), 1);
        s.set_leftover(&a.devices[0].uuid, None).unwrap();
        assert_eq!(indices(&s.alloc(&again, &LocalityPolicy, 4).unwrap().0), vec![a.devices[0].index]);
        // A database made before these tables opens, and gains them.
        s.conn.execute_batch("DROP TABLE batch_confined; DROP TABLE leftovers;").unwrap();
        drop(s);
        let s = Store::open(&dir.path().join("state.db"), &["gpgpu".to_string()]).unwrap();
        assert!(!s.job(&"slurm:2".parse().unwrap()).unwrap().unwrap().batch_confined);
        assert!(s.leftovers().unwrap().is_empty());
        assert_eq!(s.devices().unwrap().len(), 2);
    }

    fn sample(job: &str, uuid: &str, at_ms: i64, previous_ms: Option<i64>, util: Option<u32>) -> UsageObservation {
        UsageObservation {
            job: job.parse().unwrap(),
            uuid: uuid.to_string(),
            mig_parent: None,
            at_ms,
            previous_ms,
            utilisation: util,
            source: if util.is_some() { "device" } else { "none" },
            memory_mib: util.map(|u| u64::from(u) * 10),
            processes: Some(Vec::new()),
        }
    }

    #[test]
    fn usage_rolls_up_per_job_and_device_and_the_ring_stays_bounded() {
        let (dir, mut s) = node(2);
        let rules = UsageRules { period_ms: 1000, active_threshold: 5, idle_below: 5, ring_samples: 7 };
        let (a, _) = s.alloc(&req("slurm:1", 1), &LocalityPolicy, 100).unwrap();
        let (b, _) = s.alloc(&req("slurm:2", 1), &LocalityPolicy, 100).unwrap();
        let (gpu_a, gpu_b) = (a.devices[0].uuid.clone(), b.devices[0].uuid.clone());
        // The sampler's first period covers one period, though the job started 5 s before.
        assert_eq!(s.record_usage(&[sample("slurm:1", &gpu_a, 105_000, None, Some(80))], &rules).unwrap(), 1);
        // Then 10 s at 80 %, 10 s at 3 %, one sample a second.
        let mut at = 105_000;
        for n in 0..20 {
            let util = if n < 10 { 80 } else { 3 };
            let batch = [
                sample("slurm:1", &gpu_a, at + 1000, Some(at), Some(util)),
                sample("slurm:2", &gpu_b, at + 1000, Some(at), None),
            ];
            assert_eq!(s.record_usage(&batch, &rules).unwrap(), 2);
            at += 1000;
        }
        // A device its job does not hold is not recorded.
        assert_eq!(s.record_usage(&[sample("slurm:9", &gpu_a, at, Some(at - 1000), Some(50))], &rules).unwrap(), 0);
        let usage = s.usage(Some(&a.job), None, None, 200).unwrap();
        assert_eq!(usage.len(), 1);
        let u = &usage[0];
        assert_eq!((u.samples, u.sampled_seconds, u.active_seconds), (21, 21.0, Some(11.0)));
        assert!((u.mean_utilisation_percent.unwrap() - (80.0 * 11.0 + 3.0 * 10.0) / 21.0).abs() < 1e-9);
        assert_eq!(
            (u.peak_utilisation_percent, u.peak_memory_mib, u.utilisation_source.as_str()),
            (Some(80), 800, "device")
        );
        assert_eq!((u.first_sample, u.last_sample, u.device_seconds, u.end), (Some(105), Some(125), 100, None));
        let month = MonthUsage {
            month: "1970-01".into(),
            sampled_seconds: 21.0,
            active_seconds: Some(11.0),
            mean_utilisation_percent: u.mean_utilisation_percent,
        };
        assert_eq!(u.months, [month]);
        // No utilisation from NVML: no active time or mean, and idle by having no process.
        let v = &s.usage(Some(&b.job), None, None, 200).unwrap()[0];
        assert_eq!(
            (v.samples, v.active_seconds, v.mean_utilisation_percent, v.peak_utilisation_percent),
            (20, None, None, None)
        );
        // Idle since the first sample below 5 % began (at 115 s): 10 s by 125 s.
        let idle = s.idle(10_000, at).unwrap();
        let jobs: Vec<String> = idle.iter().map(|d| d.job.to_string()).collect();
        assert_eq!(jobs, ["slurm:2", "slurm:1"]);
        assert_eq!((idle[1].idle_since, idle[1].idle_seconds), (115, 10.0));
        assert!(s.idle(10_001, at).unwrap().iter().all(|d| d.job.to_string() == "slurm:2"));
        // Busy again: no longer idle.
        s.record_usage(&[sample("slurm:1", &gpu_a, at + 1000, Some(at), Some(60))], &rules).unwrap();
        assert!(s.idle(0, at + 1000).unwrap().iter().all(|d| d.job.to_string() == "slurm:2"));
        // cderd restarted 60 s later: its first period covers one period, not the gap.
        s.record_usage(&[sample("slurm:1", &gpu_a, at + 61_000, None, Some(60))], &rules).unwrap();
        assert_eq!(s.usage(Some(&a.job), None, None, 200).unwrap()[0].sampled_seconds, 23.0);
        // The ring keeps the newest 7, oldest first.
        assert_eq!(s.ring_len().unwrap(), 7);
        let recent = s.recent_samples(100, None, None).unwrap();
        assert_eq!(recent.len(), 7);
        assert!(recent.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert_eq!((recent[6].at_ms, recent[6].utilisation_percent), (at + 61_000, Some(60)));
        assert_eq!(s.recent_samples(100, Some(&b.job), None).unwrap().len(), 3);
        // Released: no longer idle, the roll-up stays, with its end.
        s.release(&b.job, 300).unwrap();
        assert!(s.idle(0, at + 61_000).unwrap().is_empty());
        let v = &s.usage(Some(&b.job), None, None, 400).unwrap()[0];
        assert_eq!((v.end, v.device_seconds, v.samples), (Some(300), 200, 20));
        assert_eq!(s.usage(None, Some(1000), Some(301), 400).unwrap().len(), 1);
        // A job across a month's end (UTC) counts each sample in the month it was taken in.
        let november = 1_793_491_200_000; // 2026-11-01T00:00:00Z
        let (c, _) = s.alloc(&req("slurm:3", 1), &LocalityPolicy, november / 1000 - 60).unwrap();
        let gpu_c = c.devices[0].uuid.clone();
        let mut at = november - 3000;
        s.record_usage(&[sample("slurm:3", &gpu_c, at, None, Some(50))], &rules).unwrap();
        for util in [50, 50, 0, 0, 90] {
            s.record_usage(&[sample("slurm:3", &gpu_c, at + 1000, Some(at), Some(util))], &rules).unwrap();
            at += 1000;
        }
        let months: Vec<(String, f64, Option<f64>)> = s.usage(Some(&c.job), None, None, november / 1000).unwrap()[0]
            .months
            .iter()
            .map(|m| (m.month.clone(), m.sampled_seconds, m.active_seconds))
            .collect();
        assert_eq!(months, [("2026-10".to_string(), 3.0, Some(3.0)), ("2026-11".to_string(), 3.0, Some(1.0))]);
        // A smaller ring keeps the newest rows only.
        let small = UsageRules { ring_samples: 3, ..rules };
        s.record_usage(&[sample("slurm:1", &gpu_a, at + 62_000, Some(at + 61_000), Some(60))], &small).unwrap();
        assert!(s.ring_len().unwrap() <= 3);
        // A database made before these tables opens, and gains them.
        s.conn.execute_batch("DROP TABLE usage; DROP TABLE usage_samples; DROP TABLE usage_months;").unwrap();
        drop(s);
        let s = Store::open(&dir.path().join("state.db"), &["gpgpu".to_string()]).unwrap();
        let u = &s.usage(Some(&a.job), None, None, 400).unwrap()[0];
        assert_eq!((u.samples, u.active_seconds, u.utilisation_source.as_str()), (0, None, "none"));
        assert_eq!(s.ring_len().unwrap(), 0);
    }

    #[test]
    fn database_refuses_a_second_live_owner() {
        let (_d, mut s) = node(2);
        s.alloc(&req("slurm:1", 1), &LocalityPolicy, 1).unwrap();
        // Bypass the daemon's logic: the unique index must still say no.
        s.conn
            .execute(
                "INSERT INTO jobs (job, uid, type, count, token, start) VALUES ('slurm:9', 1, 'gpgpu', 1, 'x', 1)",
                [],
            )
            .unwrap();
        let err = s
            .conn
            .execute("INSERT INTO allocations (job_id, device, start) SELECT MAX(id), 'gpgpu-0', 1 FROM jobs", [])
            .unwrap_err();
        assert!(err.to_string().contains("UNIQUE"), "{err}");
    }

    #[test]
    fn vanished_device_keeps_its_allocation() {
        let (_d, mut s) = node(2);
        s.alloc(&req("slurm:1", 2), &LocalityPolicy, 1).unwrap();
        let all = s.devices().unwrap();
        let remaining: Vec<Device> = Vec::new();
        s.sync_inventory(&remaining).unwrap();
        let after = s.devices().unwrap();
        assert_eq!(after.len(), all.len());
        assert!(after.iter().all(|d| !d.present && d.state() == DeviceState::Allocated));
        s.release(&"slurm:1".parse().unwrap(), 2).unwrap();
        assert!(s.devices().unwrap().iter().all(|d| d.state() == DeviceState::Unhealthy));
    }

    #[test]
    fn a_clock_stepped_back_records_no_negative_and_no_overlapping_interval() {
        let (_d, mut s) = node(1);
        s.alloc(&req("slurm:1", 1), &LocalityPolicy, 1000).unwrap();
        // Released "before" it started: 0 s, never negative.
        s.release(&"slurm:1".parse().unwrap(), 400).unwrap();
        // The next job on the device, still on the stepped-back clock,
        // starts where the previous one ended: no second counting.
        let (b, _) = s.alloc(&req("slurm:2", 1), &LocalityPolicy, 500).unwrap();
        assert_eq!(b.start, 1000);
        s.release(&"slurm:2".parse().unwrap(), 1300).unwrap();
        let recs = s.accounting(0, 2000, None, 2000).unwrap();
        let spans: Vec<(i64, Option<i64>, i64)> = recs.iter().map(|r| (r.start, r.end, r.device_seconds)).collect();
        assert_eq!(spans, vec![(1000, Some(1000), 0), (1000, Some(1300), 300)]);
        // Drains too.
        s.set_drained("gpgpu:0", Some("fan")).unwrap();
        s.conn.execute("UPDATE drains SET start = start + 100000", []).unwrap();
        s.set_drained("gpgpu:0", None).unwrap();
        let d = &s.drains(0, i64::MAX).unwrap()[0];
        assert!(d.end.unwrap() >= d.start, "{d:?}");
    }

    fn nvml_device(uuid: &str, index: u32) -> Device {
        let mut d = Config::parse(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n[[cder.device]]\nindex = 0\nmodel = \"A100\"\nmemory_mib = 1\npath = \"/dev/nvidia0\"\n",
            Path::new("t.toml"),
        )
        .unwrap()
        .cders[0]
            .static_devices()
            .remove(0);
        d.uuid = uuid.into();
        d.index = index;
        d
    }

    #[test]
    fn a_vanished_gpu_renumbers_no_other_device_and_a_new_one_takes_a_free_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("state.db"), &["gpgpu".to_string()]).unwrap();
        let types: BTreeSet<String> = ["gpgpu".to_string()].into();
        let four: Vec<Device> = (0..4).map(|i| nvml_device(&format!("GPU-{i}"), i)).collect();
        let mut first = four.clone();
        assert!(s.keep_indices(&mut first, &types).unwrap().is_empty());
        s.sync_inventory(&first).unwrap();
        let mut r = req("slurm:1", 1);
        r.devices = Some(vec![2]);
        s.alloc(&r, &LocalityPolicy, 1).unwrap();
        // GPU-1 gone: NVML numbers GPU-2 and GPU-3 one lower.
        let mut three = vec![nvml_device("GPU-0", 0), nvml_device("GPU-2", 1), nvml_device("GPU-3", 2)];
        let changed = s.keep_indices(&mut three, &types).unwrap();
        assert_eq!(changed, vec![("GPU-2".to_string(), 1, 2), ("GPU-3".to_string(), 2, 3)]);
        s.sync_inventory(&three).unwrap();
        let by_uuid: Vec<(String, u32, bool)> =
            s.devices().unwrap().iter().map(|d| (d.uuid.clone(), d.index, d.present)).collect();
        assert_eq!(
            by_uuid,
            vec![
                ("GPU-0".into(), 0, true),
                ("GPU-1".into(), 1, false),
                ("GPU-2".into(), 2, true),
                ("GPU-3".into(), 3, true)
            ]
        );
        assert_eq!(indices(&s.job(&"slurm:1".parse().unwrap()).unwrap().unwrap()), vec![2]);
        // A new GPU where NVML puts it at 2 (taken by GPU-2) takes the
        // lowest index no device ever had; one at a vanished GPU's free
        // index takes that index.
        let mut five = vec![nvml_device("GPU-0", 0), nvml_device("GPU-2", 1), nvml_device("GPU-new", 2)];
        five.push(nvml_device("GPU-3", 3));
        s.keep_indices(&mut five, &types).unwrap();
        assert_eq!(five.iter().map(|d| d.index).collect::<Vec<_>>(), vec![0, 2, 4, 3]);
        let mut replaced = vec![nvml_device("GPU-0", 0), nvml_device("GPU-repl", 1)];
        s.keep_indices(&mut replaced, &types).unwrap();
        assert_eq!(replaced[1].index, 1);
        // A held device keeps its index even while absent.
        let mut clash = vec![nvml_device("GPU-other", 2)];
        s.keep_indices(&mut clash, &types).unwrap();
        assert_eq!(clash[0].index, 4);
    }

    #[test]
    fn accounting_survives_release() {
        let (_d, mut s) = node(4);
        s.alloc(&req("slurm:1", 2), &LocalityPolicy, 100).unwrap();
        s.release(&"slurm:1".parse().unwrap(), 160).unwrap();
        s.alloc(&req("slurm:2", 1), &LocalityPolicy, 170).unwrap();
        let recs = s.accounting(0, 1000, None, 200).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs.iter().map(|r| r.device_seconds).sum::<i64>(), 60 * 2 + 30);
        assert_eq!(s.accounting(170, 1000, None, 200).unwrap().len(), 1);
        assert!(s.accounting(0, 1000, Some(7), 200).unwrap().is_empty());
    }

    #[test]
    fn accounting_records_shares_with_their_fraction() {
        let (_d, mut s) = node(4);
        s.offer_shares([(("gpgpu".to_string(), 0), 4), (("gpgpu".to_string(), 1), 4)].into_iter().collect());
        s.alloc(&share("slurm:1", 0, 4), &LocalityPolicy, 100).unwrap();
        s.alloc(&share("slurm:2", 1, 1), &LocalityPolicy, 100).unwrap();
        s.alloc(&req("slurm:3", 1), &LocalityPolicy, 100).unwrap();
        s.release(&"slurm:1".parse().unwrap(), 180).unwrap();
        // Shares only: the first record of the history is theirs too.
        assert_eq!(s.first_start().unwrap(), Some(100));
        let recs = s.accounting(0, 1000, None, 200).unwrap();
        let got: Vec<_> = recs
            .iter()
            .map(|r| (r.job.to_string(), r.index, r.shares, r.shares_total, r.fraction, r.device_seconds, r.end))
            .collect();
        assert_eq!(
            got,
            [
                ("slurm:1".to_string(), 0, Some(4), Some(4), 1.0, 80, Some(180)),
                ("slurm:2".to_string(), 1, Some(1), Some(4), 0.25, 100, None),
                ("slurm:3".to_string(), 2, None, None, 1.0, 100, None),
            ]
        );
        assert_eq!(recs.iter().map(AccountingRecord::counted_seconds).sum::<f64>(), 80.0 + 25.0 + 100.0);
        assert_eq!(s.accounting(0, 1000, Some(1000), 200).unwrap().len(), 3);
        assert!(s.accounting(190, 1000, None, 200).unwrap().iter().all(|r| r.job.to_string() != "slurm:1"));
    }
}
