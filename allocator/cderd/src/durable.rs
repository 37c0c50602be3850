//! Opening a SQLite database the way cder's durable services need it:
//! WAL, `synchronous=FULL` (a COMMIT is on disk before it returns), a
//! versioned schema, and `BEGIN IMMEDIATE` transactions. Shared by cderd's
//! [`crate::store`] and the cluster vGPGPU registry (`cder-registry`).

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};

/// WAL pages after which a commit checkpoints by itself (the backstop).
const AUTOCHECKPOINT_PAGES: u32 = 10_000;

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("database {}: {source}", path.display())]
    Open { path: PathBuf, source: rusqlite::Error },
    #[error("database {} holds schema version {found}, newer than this program's ({supported}); refusing to touch it", path.display())]
    TooNew { path: PathBuf, found: i64, supported: i64 },
}

/// Opens (creating if needed) the database at `path` in WAL mode with
/// `synchronous=FULL` and foreign keys on, applies `schema` (idempotent
/// `CREATE … IF NOT EXISTS` statements, which must include a
/// `meta(key TEXT PRIMARY KEY, value TEXT)` table) and records or checks
/// `schema_version`.
pub fn open(path: &Path, schema: &str, schema_version: i64) -> Result<Connection, DurableError> {
    let open = |e| DurableError::Open { path: path.to_path_buf(), source: e };
    let conn = Connection::open(path).map_err(open)?;
    conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(open)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0)).map_err(open)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(open(rusqlite::Error::InvalidParameterName(format!("journal_mode is {mode}, WAL was asked for"))));
    }
    // FULL: a commit is on disk (WAL fsynced) before COMMIT returns.
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;").map_err(open)?;
    // Checkpoints normally run from the background (see
    // `store::checkpoint_in_background`); this larger threshold only bounds
    // the WAL should that thread fall behind.
    conn.execute_batch(&format!("PRAGMA wal_autocheckpoint={AUTOCHECKPOINT_PAGES};")).map_err(open)?;
    conn.execute_batch(schema).map_err(open)?;
    let version: Option<String> =
        conn.query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0)).optional().map_err(open)?;
    match version.and_then(|v| v.parse::<i64>().ok()) {
        Some(found) if found > schema_version => {
            return Err(DurableError::TooNew { path: path.to_path_buf(), found, supported: schema_version })
        }
        Some(_) => {}
        None => {
            conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)", [schema_version.to_string()])
                .map_err(open)?;
        }
    }
    Ok(conn)
}

/// `BEGIN IMMEDIATE`: take the write lock up front, so a transaction never
/// fails half-way on a lock upgrade.
pub fn begin(conn: &Connection) -> rusqlite::Result<Transaction<'_>> {
    Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
}

/// A random version-4 UUID from the kernel's generator.
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32]))
}
