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
use cder_protocol::{AccountingRecord, AllocRequest, DeviceState, DeviceStatus, DrainRecord, ErrorCode, ErrorReply};

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
    memory_mb    INTEGER NOT NULL,
    numa_node    INTEGER NOT NULL,
    path         TEXT NOT NULL,
    present      INTEGER NOT NULL,
    healthy      INTEGER NOT NULL,
    drained      INTEGER NOT NULL DEFAULT 0,
    drain_reason TEXT
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
    /// else `internal` (the transaction was rolled back).
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
    pub memory_mb: u64,
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
}

impl LedgerRow {
    /// The state `status` reports: a held device is allocated even when
    /// drained meanwhile (it goes offline when released).
    pub fn state(&self) -> DeviceState {
        if self.job.is_some() {
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
            memory_mb: self.memory_mb,
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
}

/// A released device kept out of the pool: a process of its last job still
/// held it open, or could not be ended, at the release.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    /// The device's UUID.
    pub device: String,
    /// The job it was released from.
    pub job: JobKey,
    /// That job's uid: whose processes are looked for.
    pub uid: u32,
    /// That allocation's token (names its device cgroups).
    pub token: String,
    /// Why it is kept out, for `status`.
    pub reason: String,
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
}

/// The SQLite state of one node.
pub struct Store {
    conn: Connection,
    /// Position of each configured type, for ordering.
    type_order: HashMap<String, usize>,
}

const DEVICE_COLUMNS: &str = "d.uuid, d.type, d.idx, d.model, d.memory_mb, d.numa_node, d.path, d.present, d.healthy, d.drained, d.drain_reason, j.job, j.uid, l.reason";
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
            memory_mb: r.get::<_, i64>(4)?.max(0) as u64,
            numa_node: r.get(5)?,
            path: PathBuf::from(r.get::<_, String>(6)?),
            present: r.get(7)?,
            healthy: r.get(8)?,
            drained: r.get(9)?,
            drain_reason: r.get(10)?,
            job: None,
            uid: r.get(12)?,
            leftover: r.get(13)?,
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
        let type_order = types.iter().enumerate().map(|(i, t)| (t.clone(), i)).collect();
        Ok(Store { conn, type_order })
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
                "INSERT INTO devices (uuid, type, idx, model, memory_mb, numa_node, path, present, healthy)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8)
                 ON CONFLICT(uuid) DO UPDATE SET type = ?2, idx = ?3, model = ?4, memory_mb = ?5, numa_node = ?6,
                     path = ?7, present = 1, healthy = ?8",
                params![
                    d.uuid,
                    d.cder_type,
                    d.index,
                    d.attributes.model,
                    d.attributes.memory_mb.min(i64::MAX as u64) as i64,
                    d.numa_node,
                    d.path.to_string_lossy(),
                    d.health == Health::Healthy
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
                "SELECT id, uid, type, count, token, start, EXISTS (SELECT 1 FROM batch_confined b WHERE b.job_id = jobs.id) \
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
                })
            })
            .optional()?)
    }

    fn allocation_of(&self, conn: &Connection, job: &JobKey) -> Result<Option<JobAllocation>> {
        let Some(JobRow { id, uid, cder_type, count, token, start, batch_confined }) = Self::live_job(conn, job)?
        else {
            return Ok(None);
        };
        let mut devices = query_devices(conn, "WHERE a.job_id = ?1", &[&id])?;
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
        let chosen: Vec<LedgerRow> = match &req.devices {
            Some(indices) => Self::exactly(&of_type, indices, &req.cder_type)?,
            None => {
                let model = req.model.as_ref().map(|m| m.to_lowercase());
                let held_open = of_type.iter().filter(|d| d.is_free() && busy.contains_key(&d.uuid)).count();
                let eligible: Vec<&LedgerRow> = of_type
                    .iter()
                    .filter(|d| d.is_free())
                    .filter(|d| !busy.contains_key(&d.uuid))
                    .filter(|d| req.min_memory_mb.is_none_or(|m| d.memory_mb >= m))
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
                        let constrained = req.min_memory_mb.is_some() || req.model.is_some();
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
                return Err(StoreError::refused(
                    ErrorCode::Conflict,
                    format!("device {} is {:?}, not free", d.name(), d.state()).to_lowercase(),
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
            for d in released.iter_mut().filter(|d| held.contains_key(&d.uuid)) {
                let reason = &held[&d.uuid];
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO leftovers (device, job, uid, token, reason, since) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![d.uuid, job.to_string(), uid, token, reason, now])?;
                d.leftover = Some(reason.clone());
            }
        }
        tx.commit()?;
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

    /// Records overlapping `[since, until]`, optionally of one uid only.
    pub fn accounting(&self, since: i64, until: i64, uid: Option<u32>, now: i64) -> Result<Vec<AccountingRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT j.job, j.uid, d.type, d.idx, d.uuid, a.start, a.end
             FROM allocations a JOIN jobs j ON j.id = a.job_id JOIN devices d ON d.uuid = a.device
             WHERE a.start <= ?2 AND (a.end IS NULL OR a.end >= ?1) AND (?3 IS NULL OR j.uid = ?3)
             ORDER BY a.start, a.id",
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
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (job, uid, cder_type, index, uuid, start, end) = row?;
            out.push(AccountingRecord {
                job: parse_job(&job)?,
                uid,
                cder_type,
                index,
                uuid,
                start,
                end,
                device_seconds: (end.unwrap_or(now) - start).max(0),
            });
        }
        Ok(out)
    }

    /// The earliest allocation start on record, if any.
    pub fn first_start(&self) -> Result<Option<i64>> {
        Ok(self.conn.query_row("SELECT MIN(start) FROM allocations", [], |r| r.get(0))?)
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
             FROM jobs j WHERE j.end IS NULL",
        )?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)))? {
            let (job, count, live) = row?;
            if count != live {
                problems.push(format!("job {job} counts {count} devices but holds {live}"));
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
                "[[cder.device]]\nindex = {i}\nmodel = \"{}\"\nmemory_mb = {}\npath = \"/dev/nvidia{i}\"\nnuma_node = {}\n",
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
        r.min_memory_mb = Some(10000);
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
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n[[cder.device]]\nindex = 0\nmodel = \"A100\"\nmemory_mb = 1\npath = \"/dev/nvidia0\"\n",
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
}
