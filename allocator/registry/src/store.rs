//! The registry's durable state: SQLite opened by `cder_ledger::durable` (WAL,
//! `synchronous=FULL`), the same way as cderd's own store.
//!
//! `backends` holds every backend ever registered (an unregistered one
//! keeps its row with `present = 0`, so its endpoint stays reserved should
//! the device come back). `jobs` holds one row per (job, node) allocation
//! lifetime, and `allocations` ties a backend to a job row from `start` to
//! `end`. Two partial unique indexes make the database itself refuse a
//! second live owner of a backend and a second live row for a (job, node).
//! Every change runs in one `BEGIN IMMEDIATE` transaction and returns only
//! after `COMMIT`: what a reply says is on disk.

use std::collections::BTreeMap;
use std::path::Path;

use cder_ledger::durable::{self, DurableError};
use cder_model::{JobKey, VgpgpuMethod};
use rusqlite::{params, Connection, OptionalExtension};

use crate::api::*;
use crate::policy::{BackendCandidate, BackendPolicy};

/// Bumped when the schema changes; a newer database is refused.
pub const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS backends (
    uuid       TEXT PRIMARY KEY,
    vendor     TEXT NOT NULL,
    device     INTEGER NOT NULL,
    host       TEXT NOT NULL,
    port       INTEGER NOT NULL,
    methods    TEXT NOT NULL,          -- ',rCUDA,VCL,'
    present    INTEGER NOT NULL,
    offline    INTEGER NOT NULL DEFAULT 0,
    reason     TEXT,
    registered INTEGER NOT NULL,
    UNIQUE (host, port)
);
CREATE TABLE IF NOT EXISTS jobs (
    id      INTEGER PRIMARY KEY,
    job     TEXT NOT NULL,
    node    TEXT NOT NULL,
    method  TEXT NOT NULL,
    count   INTEGER NOT NULL,
    uid     INTEGER,
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_live_row ON jobs(job, node) WHERE end IS NULL;
CREATE TABLE IF NOT EXISTS allocations (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL REFERENCES jobs(id),
    backend TEXT NOT NULL REFERENCES backends(uuid),
    start   INTEGER NOT NULL,
    end     INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS allocations_one_live_owner ON allocations(backend) WHERE end IS NULL;
CREATE INDEX IF NOT EXISTS allocations_by_job ON allocations(job_id);
";

/// A store failure: the database, or a refusal of the request.
#[derive(Debug, thiserror::Error)]
pub enum BackendLedgerError {
    /// The database could not be opened.
    #[error(transparent)]
    Open(#[from] DurableError),
    /// SQLite failed.
    #[error("database: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The request was refused (the reply to send).
    #[error("{0}")]
    Refused(ApiError),
}

impl BackendLedgerError {
    /// The API error this becomes: refusals as they are, anything else
    /// `internal` (the transaction was rolled back). [`BackendLedger::api_error`]
    /// says more about a failed statement.
    pub fn into_api(self) -> ApiError {
        match self {
            BackendLedgerError::Refused(e) => e,
            other => ApiError::new(ApiErrorCode::Internal, format!("{other}; nothing was changed")),
        }
    }
}

fn refused(code: ApiErrorCode, message: impl Into<String>) -> BackendLedgerError {
    BackendLedgerError::Refused(ApiError::new(code, message))
}

type Result<T> = std::result::Result<T, BackendLedgerError>;

fn methods_column(methods: &[VgpgpuMethod]) -> String {
    let mut m: Vec<VgpgpuMethod> = methods.to_vec();
    m.sort();
    m.dedup();
    format!(",{},", m.iter().map(|m| m.name()).collect::<Vec<_>>().join(","))
}

fn parse_methods(column: &str) -> Vec<VgpgpuMethod> {
    column.split(',').filter_map(|m| m.parse().ok()).collect()
}

/// The registry's SQLite state.
pub struct BackendLedger {
    conn: Connection,
    /// The database file, for the messages of failed statements.
    path: std::path::PathBuf,
    port_base: u16,
}

const BACKEND_SELECT: &str = "SELECT b.uuid, b.vendor, b.device, b.host, b.port, b.methods, b.present, b.offline, b.reason, j.job, j.node
     FROM backends b LEFT JOIN allocations a ON a.backend = b.uuid AND a.end IS NULL LEFT JOIN jobs j ON j.id = a.job_id";

/// A backend row with its live holder.
#[derive(Debug, Clone)]
struct Row {
    status: BackendStatus,
    present: bool,
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(Row, Option<String>)> {
    let offline: bool = r.get(7)?;
    let job: Option<String> = r.get(9)?;
    let state = if job.is_some() {
        BackendState::Allocated
    } else if offline {
        BackendState::Offline
    } else {
        BackendState::Free
    };
    let methods: String = r.get(5)?;
    Ok((
        Row {
            status: BackendStatus {
                uuid: r.get(0)?,
                vendor: r.get(1)?,
                device: r.get(2)?,
                host: r.get(3)?,
                port: r.get(4)?,
                methods: parse_methods(&methods),
                state,
                offline,
                reason: r.get(8)?,
                job: None,
                node: r.get(10)?,
            },
            present: r.get(6)?,
        },
        job,
    ))
}

impl BackendLedger {
    /// Opens (creating if needed) the database at `path`; new hosts' backends
    /// get ports from `port_base` up.
    pub fn open(path: &Path, port_base: u16) -> Result<BackendLedger> {
        let conn = durable::open(path, SCHEMA, SCHEMA_VERSION)?;
        Ok(BackendLedger { conn, path: path.to_path_buf(), port_base })
    }

    /// The API error for `e` from this ledger: a failed statement names the
    /// database and, when the file system had no room (ENOSPC, or EDQUOT,
    /// which SQLite calls an I/O error), says the disk is full.
    pub fn api_error(&self, e: BackendLedgerError) -> ApiError {
        match e {
            BackendLedgerError::Sql(e) => ApiError::new(
                ApiErrorCode::Internal,
                format!("{}; nothing was changed", durable::failure_message(&self.conn, &self.path, &e)),
            ),
            other => other.into_api(),
        }
    }

    fn rows(&self, filter: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<Row>> {
        let sql = format!("{BACKEND_SELECT} {filter} ORDER BY b.host, b.device, b.uuid");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let raw = stmt.query_map(args, row)?.collect::<rusqlite::Result<Vec<_>>>()?;
        raw.into_iter()
            .map(|(mut r, job)| {
                r.status.job = match job {
                    Some(j) => Some(j.parse().map_err(|_| {
                        refused(ApiErrorCode::Internal, format!("database holds a malformed job key {j:?}"))
                    })?),
                    None => None,
                };
                Ok(r)
            })
            .collect()
    }

    /// `register`: adds the backend, or refreshes it (same UUID: same
    /// endpoint, unless it moved host).
    pub fn register(&mut self, r: &RegisterRequest, now: i64) -> Result<Registered> {
        let tx = durable::begin(&self.conn)?;
        let known: Option<(String, u16)> = tx
            .query_row("SELECT host, port FROM backends WHERE uuid = ?1", [&r.uuid], |x| Ok((x.get(0)?, x.get(1)?)))
            .optional()?;
        let port = match known {
            Some((host, port)) if host == r.host => port,
            _ => {
                let used: Vec<u16> = {
                    let mut s =
                        tx.prepare_cached("SELECT port FROM backends WHERE host = ?1 AND uuid != ?2 ORDER BY port")?;
                    let v =
                        s.query_map(params![r.host, r.uuid], |x| x.get(0))?.collect::<rusqlite::Result<Vec<u16>>>()?;
                    v
                };
                (self.port_base..=u16::MAX)
                    .find(|p| !used.contains(p))
                    .ok_or_else(|| refused(ApiErrorCode::Conflict, format!("no free port left on {}", r.host)))?
            }
        };
        tx.execute(
            "INSERT INTO backends (uuid, vendor, device, host, port, methods, present, registered) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 1, ?7)
             ON CONFLICT(uuid) DO UPDATE SET vendor = ?2, device = ?3, host = ?4, port = ?5, methods = ?6, present = 1",
            params![r.uuid, r.vendor, r.device, r.host, port, methods_column(&r.methods), now],
        )?;
        tx.commit()?;
        Ok(Registered { uuid: r.uuid.clone(), host: r.host.clone(), port, endpoint: format!("{}:{port}", r.host) })
    }

    /// `unregister`: the backend leaves the pool (a job holding it keeps
    /// it until release). False when it was not registered.
    pub fn unregister(&mut self, uuid: &str) -> Result<bool> {
        let tx = durable::begin(&self.conn)?;
        let n = tx.execute("UPDATE backends SET present = 0 WHERE uuid = ?1 AND present = 1", [uuid])?;
        tx.commit()?;
        Ok(n > 0)
    }

    /// The live allocation of (job, node), if any.
    fn live(&self, job: &JobKey, node: &str) -> Result<Option<(i64, u32, String)>> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, count, method FROM jobs WHERE job = ?1 AND node = ?2 AND end IS NULL",
                params![job.to_string(), node],
                |x| Ok((x.get(0)?, x.get(1)?, x.get(2)?)),
            )
            .optional()?)
    }

    fn backends_of(&self, job_id: i64) -> Result<Vec<Backend>> {
        let mut s = self.conn.prepare_cached(
            "SELECT b.uuid, b.vendor, b.host, b.port, b.device FROM allocations a JOIN backends b ON b.uuid = a.backend
             WHERE a.job_id = ?1 ORDER BY a.id",
        )?;
        let v = s
            .query_map([job_id], |x| {
                Ok(Backend { uuid: x.get(0)?, vendor: x.get(1)?, host: x.get(2)?, port: x.get(3)?, device: x.get(4)? })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(v)
    }

    /// `request`: idempotent per (job, node); the same request again gets
    /// the same backends, a different one for a live (job, node) is
    /// `conflict`.
    pub fn request(&mut self, r: &BackendRequest, policy: &dyn BackendPolicy, now: i64) -> Result<BackendAllocation> {
        let tx = durable::begin(&self.conn)?;
        let done =
            |backends| BackendAllocation { job: r.job.clone(), node: r.node.clone(), method: r.method, backends };
        if let Some((id, count, method)) = self.live(&r.job, &r.node)? {
            if count == r.count && method == r.method.name() {
                let backends = self.backends_of(id)?;
                tx.commit()?;
                return Ok(done(backends));
            }
            return Err(refused(
                ApiErrorCode::Conflict,
                format!("{} on {} already holds {count} {method} backend(s); release it first", r.job, r.node),
            ));
        }
        if let Some(limit) = r.job_limit {
            // Node names come from the caller: whatever node a request
            // names, the job's total stays within what was granted.
            let held: u32 = tx.query_row(
                "SELECT COALESCE(SUM(count), 0) FROM jobs WHERE job = ?1 AND end IS NULL",
                [r.job.to_string()],
                |x| x.get(0),
            )?;
            if held.saturating_add(r.count) > limit {
                return Err(refused(
                    ApiErrorCode::Conflict,
                    format!("{} holds {held} backend(s) on its other nodes; {} more on {} would pass the {limit} its batch system granted", r.job, r.count, r.node),
                ));
            }
        }
        let like = format!("%,{},%", r.method.name());
        let host_jobs: BTreeMap<String, u32> = {
            let mut s = tx.prepare_cached(
                "SELECT b.host, COUNT(DISTINCT a.job_id) FROM allocations a JOIN backends b ON b.uuid = a.backend WHERE a.end IS NULL GROUP BY b.host",
            )?;
            let v = s.query_map([], |x| Ok((x.get(0)?, x.get(1)?)))?.collect::<rusqlite::Result<_>>()?;
            v
        };
        let candidates: Vec<BackendCandidate> = {
            let mut s = tx.prepare_cached(
                "SELECT b.uuid, b.host, b.device FROM backends b
                 WHERE b.present = 1 AND b.offline = 0 AND b.methods LIKE ?1
                   AND NOT EXISTS (SELECT 1 FROM allocations a WHERE a.backend = b.uuid AND a.end IS NULL)
                 ORDER BY b.host, b.device, b.uuid",
            )?;
            let v = s
                .query_map([&like], |x| {
                    let host: String = x.get(1)?;
                    Ok(BackendCandidate {
                        uuid: x.get(0)?,
                        host_jobs: host_jobs.get(&host).copied().unwrap_or(0),
                        host,
                        device: x.get(2)?,
                    })
                })?
                .collect::<rusqlite::Result<_>>()?;
            v
        };
        let count = usize::try_from(r.count)
            .map_err(|_| refused(ApiErrorCode::BadRequest, format!("count: {} is out of range", r.count)))?;
        let insufficient = || {
            BackendLedgerError::Refused(ApiError {
                code: ApiErrorCode::Insufficient,
                message: format!("{count} {} backend(s) requested, {} free", r.method, candidates.len()),
                free: Some(candidates.len() as u64),
            })
        };
        let chosen = policy.select(&candidates, count, &r.node).ok_or_else(insufficient)?;
        let mut distinct = chosen.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if chosen.len() != count || distinct.len() != count || chosen.iter().any(|&i| i >= candidates.len()) {
            return Err(refused(
                ApiErrorCode::Internal,
                format!("policy {} made an invalid choice {chosen:?}", policy.name()),
            ));
        }
        tx.execute(
            "INSERT INTO jobs (job, node, method, count, uid, start) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![r.job.to_string(), r.node, r.method.name(), r.count, r.uid, now],
        )?;
        let job_id = tx.last_insert_rowid();
        for &i in &chosen {
            tx.execute(
                "INSERT INTO allocations (job_id, backend, start) VALUES (?1, ?2, ?3)",
                params![job_id, candidates[i].uuid, now],
            )?;
        }
        let backends = self.backends_of(job_id)?;
        tx.commit()?;
        Ok(done(backends))
    }

    /// What `job` holds, node by node, with the owner uid recorded by its
    /// requests (`None` when no request named one).
    pub fn allocations(&self, job: &JobKey) -> Result<(Vec<BackendAllocation>, Vec<Option<u32>>)> {
        let rows: Vec<(i64, String, String, Option<u32>)> = {
            let mut s = self
                .conn
                .prepare_cached("SELECT id, node, method, uid FROM jobs WHERE job = ?1 AND end IS NULL ORDER BY id")?;
            let v = s
                .query_map([job.to_string()], |x| Ok((x.get(0)?, x.get(1)?, x.get(2)?, x.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            v
        };
        let mut allocations = Vec::new();
        let mut uids = Vec::new();
        for (id, node, method, uid) in rows {
            let method = method
                .parse()
                .map_err(|e: cder_model::registry::UnknownMethod| refused(ApiErrorCode::Internal, e.to_string()))?;
            allocations.push(BackendAllocation { job: job.clone(), node, method, backends: self.backends_of(id)? });
            uids.push(uid);
        }
        Ok((allocations, uids))
    }

    /// `release`: ends every live allocation of `job` (all nodes); the
    /// number of backends returned, 0 when there were none. A wall clock
    /// stepped back ends an allocation at its start, never before it.
    pub fn release(&mut self, job: &JobKey, now: i64) -> Result<u32> {
        let tx = durable::begin(&self.conn)?;
        let key = job.to_string();
        let n = tx.execute(
            "UPDATE allocations SET end = MAX(?2, start) WHERE end IS NULL AND job_id IN (SELECT id FROM jobs WHERE job = ?1 AND end IS NULL)",
            params![key, now],
        )?;
        tx.execute("UPDATE jobs SET end = MAX(?2, start) WHERE job = ?1 AND end IS NULL", params![key, now])?;
        let n = u32::try_from(n).map_err(|_| {
            refused(ApiErrorCode::Internal, format!("{job} held {n} backends, more than a reply can count"))
        })?;
        tx.commit()?;
        Ok(n)
    }

    /// `offline` / `online` for one backend or a host; the rows changed.
    pub fn set_offline(&mut self, r: &OfflineRequest, offline: bool) -> Result<Vec<BackendStatus>> {
        let tx = durable::begin(&self.conn)?;
        let reason = if offline { r.reason.clone() } else { None };
        let (n, filter, key) = match (&r.uuid, &r.host) {
            (Some(u), _) => (
                tx.execute(
                    "UPDATE backends SET offline = ?2, reason = ?3 WHERE uuid = ?1 AND present = 1",
                    params![u, offline, reason],
                )?,
                "WHERE b.uuid = ?1",
                u,
            ),
            (None, Some(h)) => (
                tx.execute(
                    "UPDATE backends SET offline = ?2, reason = ?3 WHERE host = ?1 AND present = 1",
                    params![h, offline, reason],
                )?,
                "WHERE b.host = ?1 AND b.present = 1",
                h,
            ),
            (None, None) => return Err(refused(ApiErrorCode::BadRequest, "give exactly one of uuid and host")),
        };
        if n == 0 {
            return Err(refused(ApiErrorCode::NotFound, format!("no registered backend matches {key:?}")));
        }
        tx.commit()?;
        Ok(self.rows(filter, &[key])?.into_iter().map(|r| r.status).collect())
    }

    /// Every backend in the pool (and unregistered ones still held), and
    /// the counts per method and over all.
    pub fn status(&self) -> Result<RegistryStatus> {
        let rows = self.rows("WHERE b.present = 1 OR a.id IS NOT NULL", &[])?;
        let mut counts: BTreeMap<String, BackendCounts> = BTreeMap::new();
        counts.insert("all".into(), BackendCounts::default());
        for m in VgpgpuMethod::ALL {
            counts.insert(m.name().into(), BackendCounts::default());
        }
        for r in &rows {
            let keys = std::iter::once("all").chain(r.status.methods.iter().map(|m| m.name()));
            for k in keys {
                let c = counts.entry(k.to_string()).or_default();
                if r.present {
                    c.total += 1;
                }
                match r.status.state {
                    BackendState::Allocated => c.in_use += 1,
                    BackendState::Offline => c.offline += 1,
                    BackendState::Free => c.free += 1,
                }
            }
        }
        Ok(RegistryStatus { backends: rows.into_iter().map(|r| r.status).collect(), counts })
    }

    /// Database-level checks for tests and `--check`: no backend with two
    /// live owners, no live allocation under an ended job.
    pub fn check_invariants(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let twice: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM (SELECT backend FROM allocations WHERE end IS NULL GROUP BY backend HAVING COUNT(*) > 1)",
            [],
            |x| x.get(0),
        )?;
        if twice > 0 {
            problems.push(format!("{twice} backend(s) with more than one live owner"));
        }
        let orphans: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM allocations a JOIN jobs j ON j.id = a.job_id WHERE a.end IS NULL AND j.end IS NOT NULL",
            [],
            |x| x.get(0),
        )?;
        if orphans > 0 {
            problems.push(format!("{orphans} live allocation(s) of released jobs"));
        }
        Ok(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::LocalFirstPolicy;

    fn store() -> (tempfile::TempDir, BackendLedger) {
        let dir = tempfile::tempdir().unwrap();
        let s = BackendLedger::open(&dir.path().join("registry.db"), 8308).unwrap();
        (dir, s)
    }

    fn reg(s: &mut BackendLedger, uuid: &str, host: &str, device: u32, methods: &[VgpgpuMethod]) -> Registered {
        s.register(
            &RegisterRequest {
                uuid: uuid.into(),
                vendor: "Nvidia".into(),
                device,
                host: host.into(),
                methods: methods.to_vec(),
            },
            1,
        )
        .unwrap()
    }

    fn req(job: &str, count: u32, node: &str) -> BackendRequest {
        BackendRequest {
            job: job.parse().unwrap(),
            count,
            node: node.into(),
            method: VgpgpuMethod::Rcuda,
            uid: Some(1000),
            job_limit: None,
        }
    }

    const BOTH: &[VgpgpuMethod] = &[VgpgpuMethod::Rcuda, VgpgpuMethod::Vcl];

    #[test]
    fn register_gives_stable_distinct_ports_per_host() {
        let (_d, mut s) = store();
        assert_eq!(reg(&mut s, "GPU-a", "n1", 0, BOTH).port, 8308);
        assert_eq!(reg(&mut s, "GPU-b", "n1", 1, BOTH).port, 8309);
        assert_eq!(reg(&mut s, "GPU-c", "n2", 0, BOTH).port, 8308);
        assert_eq!(reg(&mut s, "GPU-a", "n1", 0, BOTH).endpoint, "n1:8308");
        assert!(s.unregister("GPU-a").unwrap());
        assert!(!s.unregister("GPU-a").unwrap());
        // Its port stays reserved while it is away, and it gets it back.
        assert_eq!(reg(&mut s, "GPU-d", "n1", 2, BOTH).port, 8310);
        assert_eq!(reg(&mut s, "GPU-a", "n1", 0, BOTH).port, 8308);
    }

    #[test]
    fn request_is_idempotent_exclusive_and_released() {
        let (_d, mut s) = store();
        for (i, h) in ["n1", "n1", "n2"].iter().enumerate() {
            reg(&mut s, &format!("GPU-{i}"), h, i as u32, BOTH);
        }
        let a = s.request(&req("slurm:1", 2, "n2"), &LocalFirstPolicy, 2).unwrap();
        assert_eq!(a.backends.len(), 2);
        assert_eq!(a.backends[0].host, "n2", "local first");
        assert_eq!(s.request(&req("slurm:1", 2, "n2"), &LocalFirstPolicy, 3).unwrap(), a);
        assert_eq!(
            s.request(&req("slurm:1", 1, "n2"), &LocalFirstPolicy, 3).unwrap_err().into_api().code,
            ApiErrorCode::Conflict
        );
        let e = s.request(&req("slurm:2", 2, "n1"), &LocalFirstPolicy, 3).unwrap_err().into_api();
        assert_eq!((e.code, e.free), (ApiErrorCode::Insufficient, Some(1)));
        let b = s.request(&req("slurm:2", 1, "n1"), &LocalFirstPolicy, 3).unwrap();
        assert!(a.backends.iter().all(|x| x.uuid != b.backends[0].uuid));
        assert_eq!(s.status().unwrap().counts_for(None), BackendCounts { total: 3, free: 0, in_use: 3, offline: 0 });
        assert_eq!(s.release(&"slurm:1".parse().unwrap(), 4).unwrap(), 2);
        assert_eq!(s.release(&"slurm:1".parse().unwrap(), 5).unwrap(), 0);
        assert_eq!(s.status().unwrap().counts_for(Some(VgpgpuMethod::Vcl)).free, 2);
        assert!(s.check_invariants().unwrap().is_empty());
        let (held, uids) = s.allocations(&"slurm:2".parse().unwrap()).unwrap();
        assert_eq!((held.len(), held[0].backends.clone(), uids), (1, b.backends, vec![Some(1000)]));
        assert!(s.allocations(&"slurm:1".parse().unwrap()).unwrap().0.is_empty(), "released");
    }

    #[test]
    fn a_release_timed_before_its_start_ends_at_the_start() {
        let (_d, mut s) = store();
        reg(&mut s, "GPU-0", "n1", 0, BOTH);
        s.request(&req("slurm:7", 1, "n1"), &LocalFirstPolicy, 1000).unwrap();
        // The wall clock stepped back an hour between request and release.
        assert_eq!(s.release(&"slurm:7".parse().unwrap(), 1000 - 3600).unwrap(), 1);
        let ends: Vec<(i64, i64)> = s
            .conn
            .prepare("SELECT start, end FROM allocations UNION ALL SELECT start, end FROM jobs")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(ends, [(1000, 1000), (1000, 1000)], "no negative interval");
    }

    #[test]
    fn a_job_never_holds_more_than_its_limit_whatever_nodes_it_names() {
        let (_d, mut s) = store();
        for i in 0..6 {
            reg(&mut s, &format!("GPU-{i}"), "n1", i, BOTH);
        }
        let limited = |count, node: &str| BackendRequest { job_limit: Some(2), ..req("slurm:1", count, node) };
        assert_eq!(s.request(&limited(1, "n1"), &LocalFirstPolicy, 1).unwrap().backends.len(), 1);
        assert_eq!(
            s.request(&limited(1, "n1"), &LocalFirstPolicy, 1).unwrap().backends.len(),
            1,
            "the same node again: the same backend"
        );
        assert_eq!(s.request(&limited(1, "n2"), &LocalFirstPolicy, 1).unwrap().backends.len(), 1);
        for node in ["n3", "x1", "x2"] {
            let e = s.request(&limited(1, node), &LocalFirstPolicy, 1).unwrap_err().into_api();
            assert_eq!(e.code, ApiErrorCode::Conflict, "{node}");
            assert!(
                e.message.contains("holds 2") && e.message.contains("the 2 its batch system granted"),
                "{}",
                e.message
            );
        }
        let e = s
            .request(&BackendRequest { job_limit: Some(3), ..req("slurm:2", 4, "n1") }, &LocalFirstPolicy, 1)
            .unwrap_err()
            .into_api();
        assert_eq!(e.code, ApiErrorCode::Conflict);
        assert_eq!(s.status().unwrap().counts_for(None).in_use, 2);
        // After the release the job starts again from nothing.
        s.release(&"slurm:1".parse().unwrap(), 2).unwrap();
        assert_eq!(s.request(&limited(2, "x1"), &LocalFirstPolicy, 3).unwrap().backends.len(), 2);
    }

    #[test]
    fn offline_backends_and_hosts_are_skipped() {
        let (_d, mut s) = store();
        reg(&mut s, "GPU-0", "n1", 0, BOTH);
        reg(&mut s, "GPU-1", "n1", 1, BOTH);
        reg(&mut s, "GPU-2", "n2", 0, &[VgpgpuMethod::Vcl]);
        let off = OfflineRequest { host: Some("n1".into()), reason: Some("fan".into()), ..Default::default() };
        assert_eq!(s.set_offline(&off, true).unwrap().len(), 2);
        // rCUDA: only n1 serves it, and n1 is offline.
        assert_eq!(s.request(&req("slurm:1", 1, "n1"), &LocalFirstPolicy, 1).unwrap_err().into_api().free, Some(0));
        let vcl = BackendRequest { method: VgpgpuMethod::Vcl, ..req("slurm:1", 1, "n1") };
        assert_eq!(s.request(&vcl, &LocalFirstPolicy, 1).unwrap().backends[0].uuid, "GPU-2");
        let c = s.status().unwrap().counts_for(Some(VgpgpuMethod::Rcuda));
        assert_eq!((c.total, c.offline, c.free), (2, 2, 0));
        let on = OfflineRequest { uuid: Some("GPU-1".into()), ..Default::default() };
        s.set_offline(&on, false).unwrap();
        assert_eq!(s.request(&req("slurm:2", 1, "n1"), &LocalFirstPolicy, 1).unwrap().backends[0].uuid, "GPU-1");
        let missing = OfflineRequest { host: Some("n9".into()), ..Default::default() };
        assert_eq!(s.set_offline(&missing, true).unwrap_err().into_api().code, ApiErrorCode::NotFound);
    }

    #[test]
    fn unregistered_backends_leave_the_pool_but_keep_their_job() {
        let (_d, mut s) = store();
        reg(&mut s, "GPU-0", "n1", 0, BOTH);
        s.request(&req("slurm:1", 1, "n1"), &LocalFirstPolicy, 1).unwrap();
        s.unregister("GPU-0").unwrap();
        let st = s.status().unwrap();
        assert_eq!(st.backends.len(), 1);
        assert_eq!(st.counts_for(None).total, 0);
        s.release(&"slurm:1".parse().unwrap(), 2).unwrap();
        assert!(s.status().unwrap().backends.is_empty());
    }

    #[test]
    fn state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.db");
        {
            let mut s = BackendLedger::open(&path, 9000).unwrap();
            reg(&mut s, "GPU-0", "n1", 0, BOTH);
            s.request(&req("torque:7.ce", 1, "n1"), &LocalFirstPolicy, 1).unwrap();
        }
        let mut s = BackendLedger::open(&path, 9000).unwrap();
        assert_eq!(s.status().unwrap().backends[0].job, Some("torque:7.ce".parse().unwrap()));
        assert_eq!(s.request(&req("torque:7.ce", 1, "n1"), &LocalFirstPolicy, 2).unwrap().backends[0].port, 9000);
    }
}
