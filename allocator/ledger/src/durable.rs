//! Opening a SQLite database the way cder's durable services need it:
//! WAL, `synchronous=FULL` (a COMMIT is on disk before it returns), a
//! versioned schema, and `BEGIN IMMEDIATE` transactions. Shared by cderd's
//! store and the cluster vGPGPU registry (`cder-registry`).
//!
//! The state is private whatever the umask: the state directory is made
//! (or tightened to) 0700 and the database with its `-wal`/`-shm`/`-journal`
//! files 0600, because the ledger names every user's jobs, and accounting
//! shows an ordinary user only their own. A state directory that group or
//! others may write to, or that another uid owns, is refused: someone else
//! could have put or swapped files there, so nothing in it can be trusted.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};

/// WAL pages after which a commit checkpoints by itself (the backstop).
const AUTOCHECKPOINT_PAGES: u32 = 10_000;

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    /// SQLite (or the state directory check) refused the database.
    #[error("database {}: {source}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// A newer program wrote the database; this one must not downgrade it.
    #[error("database {} holds schema version {found}, newer than this program's ({supported}); refusing to touch it", path.display())]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// The schema version it holds.
        found: i64,
        /// The newest version this program knows.
        supported: i64,
    },
}

/// Opens (creating if needed) the database at `path` in WAL mode with
/// `synchronous=FULL` and foreign keys on, applies `schema` (idempotent
/// `CREATE … IF NOT EXISTS` statements, which must include a
/// `meta(key TEXT PRIMARY KEY, value TEXT)` table) and records or checks
/// `schema_version`.
///
/// The directory holding `path` must pass [`check_state_dir`] (it is
/// tightened to 0700); the database files are made 0600.
pub fn open(path: &Path, schema: &str, schema_version: i64) -> Result<Connection, DurableError> {
    let open = |e| DurableError::Open { path: path.to_path_buf(), source: e };
    let refuse = |e: StateDirError| open(permission_error(e.to_string()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    check_state_dir(dir).map_err(refuse)?;
    create_private_file(path).map_err(refuse)?;
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
    let version: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'schema_version'", [], |r| r.get(0))
        .optional()
        .map_err(open)?;
    match version.and_then(|v| v.parse::<i64>().ok()) {
        Some(found) if found > schema_version => {
            return Err(DurableError::TooNew { path: path.to_path_buf(), found, supported: schema_version })
        }
        Some(_) => {}
        None => {
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)",
                [schema_version.to_string()],
            )
            .map_err(open)?;
        }
    }
    // SQLite gives new -wal/-shm files the database file's mode, but ones
    // left by an older version (made under the umask) keep theirs.
    for suffix in SIDE_FILES {
        let mut side = path.as_os_str().to_owned();
        side.push(suffix);
        tighten_file(Path::new(&side)).map_err(refuse)?;
    }
    Ok(conn)
}

/// The files SQLite keeps beside a database.
const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Mode of a state directory.
pub const STATE_DIR_MODE: u32 = 0o700;
/// Mode of a database file (and its `-wal`/`-shm`).
pub const STATE_FILE_MODE: u32 = 0o600;

/// Why a state directory or file is not fit to hold durable state.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// The directory could not be created.
    #[error("cannot create state directory {}: {source}", path.display())]
    Create {
        /// The state directory.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// The directory could not be examined.
    #[error("state directory {}: {source}", path.display())]
    Inspect {
        /// The state directory.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// Something other than a directory is in its place.
    #[error("state directory {} is not a directory", path.display())]
    NotDirectory {
        /// The state directory.
        path: PathBuf,
    },
    /// Group or others may write to it: its contents cannot be trusted.
    #[error("state directory {} is writable by group or others (mode {mode:04o}); refusing to use it: check its contents, then chmod 0700 it", path.display())]
    Writable {
        /// The state directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Another uid owns it: its contents cannot be trusted.
    #[error("state directory {} belongs to uid {owner}, not to this daemon's uid {uid}; refusing to use it", path.display())]
    Owner {
        /// The state directory.
        path: PathBuf,
        /// The uid that owns it.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// A directory or file could not be made private.
    #[error("cannot make {} private (mode {mode:04o}): {source}", path.display())]
    Chmod {
        /// The directory or file.
        path: PathBuf,
        /// The mode it was to get.
        mode: u32,
        /// Why not.
        source: std::io::Error,
    },
    /// A database file could not be created or examined.
    #[error("state file {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
}

/// Creates `dir` (and missing parents) for durable state and makes it 0700
/// whatever the umask; then [`check_state_dir`].
pub fn create_state_dir(dir: &Path) -> Result<(), StateDirError> {
    match std::fs::DirBuilder::new().recursive(true).mode(STATE_DIR_MODE).create(dir) {
        Ok(()) => {}
        Err(source) => return Err(StateDirError::Create { path: dir.to_path_buf(), source }),
    }
    check_state_dir(dir)
}

/// Checks an existing state directory: a directory, owned by this process's
/// effective uid, not writable by group or others (refused, naming it);
/// readable or searchable by them is tightened to 0700.
pub fn check_state_dir(dir: &Path) -> Result<(), StateDirError> {
    let inspect = |source| StateDirError::Inspect { path: dir.to_path_buf(), source };
    let meta = std::fs::metadata(dir).map_err(inspect)?;
    if !meta.is_dir() {
        return Err(StateDirError::NotDirectory { path: dir.to_path_buf() });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StateDirError::Writable { path: dir.to_path_buf(), mode });
    }
    let uid = effective_uid().map_err(inspect)?;
    if meta.uid() != uid {
        return Err(StateDirError::Owner { path: dir.to_path_buf(), owner: meta.uid(), uid });
    }
    if mode != STATE_DIR_MODE {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(STATE_DIR_MODE))
            .map_err(|source| StateDirError::Chmod { path: dir.to_path_buf(), mode: STATE_DIR_MODE, source })?;
        if mode & 0o077 != 0 {
            tracing::warn!("state directory {} was mode {mode:04o}; now {STATE_DIR_MODE:04o}", dir.display());
        }
    }
    Ok(())
}

/// Creates `path` 0600 if missing (never following a symlink), else
/// tightens it to 0600.
fn create_private_file(path: &Path) -> Result<(), StateDirError> {
    let file = |source| StateDirError::File { path: path.to_path_buf(), source };
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(STATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(file)?;
    tighten_file(path)
}

/// Makes an existing file 0600 (a missing one is fine).
fn tighten_file(path: &Path) -> Result<(), StateDirError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(StateDirError::File { path: path.to_path_buf(), source }),
    };
    if !meta.is_file() {
        let kind = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
        return Err(StateDirError::File { path: path.to_path_buf(), source: kind });
    }
    if meta.mode() & 0o7777 != STATE_FILE_MODE {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(STATE_FILE_MODE))
            .map_err(|source| StateDirError::Chmod { path: path.to_path_buf(), mode: STATE_FILE_MODE, source })?;
    }
    Ok(())
}

/// A refusal carried in [`DurableError::Open`] (whose shape callers match on).
fn permission_error(message: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_PERM), Some(message))
}

/// This process's effective uid, from `/proc/self/status` (the second
/// field of `Uid:`), without unsafe code.
pub fn effective_uid() -> std::io::Result<u32> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "/proc/self/status has no effective uid"))
}

/// Why a statement failed when the file system under the database had no
/// room: `SQLITE_FULL` (SQLite's own name for ENOSPC), or an I/O error
/// whose OS error (`os_errno`, see [`crate::sys::sqlite_system_errno`]) is
/// ENOSPC or EDQUOT — a quota is as full as a full disk, though SQLite
/// calls it only "disk I/O error". None for any other failure.
pub fn storage_full(e: &rusqlite::Error, os_errno: i32) -> Option<&'static str> {
    let rusqlite::Error::SqliteFailure(failure, _) = e else { return None };
    match failure.code {
        rusqlite::ErrorCode::DiskFull => Some("database or disk is full"),
        rusqlite::ErrorCode::SystemIoFailure if os_errno == libc::ENOSPC => {
            Some("database or disk is full (no space left on device)")
        }
        rusqlite::ErrorCode::SystemIoFailure if os_errno == libc::EDQUOT => {
            Some("database or disk is full (disk quota exceeded)")
        }
        _ => None,
    }
}

/// What a failed statement on `conn` (the database at `path`) tells an
/// operator: the path, and for a file system with no room the words "disk
/// is full" whatever SQLite called it (see [`storage_full`]).
pub fn failure_message(conn: &Connection, path: &Path, e: &rusqlite::Error) -> String {
    match storage_full(e, crate::sys::sqlite_system_errno(conn)) {
        Some(full) => format!("database {}: {full}", path.display()),
        None => format!("database {}: {e}", path.display()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const SCHEMA: &str =
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT); CREATE TABLE IF NOT EXISTS t (x INTEGER);";

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().mode() & 0o7777
    }

    /// The child half of `state_is_private_whatever_the_umask`: runs only
    /// when re-executed with `CDER_DURABLE_CHILD` set, under the umask the
    /// parent set, and checks the modes while the database is open (SQLite
    /// removes -wal/-shm when the last connection closes).
    #[test]
    fn child_opens_state_under_a_umask() {
        let Ok(dir) = std::env::var("CDER_DURABLE_CHILD") else { return };
        let want = std::env::var("CDER_DURABLE_UMASK").unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap().trim().to_string();
        assert_eq!(umask, format!("{want:0>4}"), "the parent's umask reached the child");
        let dir = PathBuf::from(dir).join("state/inner");
        create_state_dir(&dir).unwrap();
        let db = dir.join("x.db");
        let conn = open(&db, SCHEMA, 1).unwrap();
        conn.execute("INSERT INTO t VALUES (1)", []).unwrap();
        assert_eq!(mode(&dir), 0o700, "state dir");
        for f in ["x.db", "x.db-wal", "x.db-shm"] {
            assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
        }
        println!("CHILD-CHECKED {umask}");
    }

    #[test]
    fn state_is_private_whatever_the_umask() {
        for umask in ["022", "000"] {
            let tmp = tempfile::tempdir().unwrap();
            let out = Command::new("/bin/sh")
                .arg("-c")
                .arg("umask \"$1\" && shift && exec \"$@\"")
                .arg("sh")
                .arg(umask)
                .arg(std::env::current_exe().unwrap())
                .args(["--exact", "durable::tests::child_opens_state_under_a_umask", "--nocapture", "--test-threads=1"])
                .env("CDER_DURABLE_CHILD", tmp.path())
                .env("CDER_DURABLE_UMASK", umask)
                .output()
                .unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "umask {umask}: {text}");
            assert!(
                text.contains(&format!("CHILD-CHECKED 0{umask}")),
                "umask {umask}: the child did not run its checks: {text}"
            );
        }
    }

    #[test]
    fn writable_state_dirs_are_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        for m in [0o777, 0o770, 0o1777, 0o702] {
            let dir = tmp.path().join(format!("d{m:o}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m)).unwrap();
            let e = open(&dir.join("x.db"), SCHEMA, 1).unwrap_err().to_string();
            assert!(e.contains(&dir.display().to_string()) && e.contains("writable by group or others"), "{m:o}: {e}");
            assert!(!dir.join("x.db").exists(), "nothing is created in a refused directory");
            assert!(matches!(create_state_dir(&dir), Err(StateDirError::Writable { .. })));
        }
    }

    #[test]
    fn old_readable_state_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("old");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for f in ["x.db", "x.db-wal"] {
            std::fs::write(dir.join(f), "").unwrap();
            std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let conn = open(&dir.join("x.db"), SCHEMA, 1).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("x.db")), 0o600);
        drop(conn);
        // A symlink in place of the database is not followed.
        let dir2 = tmp.path().join("link");
        create_state_dir(&dir2).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir2.join("x.db")).unwrap();
        assert!(open(&dir2.join("x.db"), SCHEMA, 1).is_err());
        // Not a directory.
        std::fs::write(tmp.path().join("file"), "").unwrap();
        assert!(matches!(check_state_dir(&tmp.path().join("file")), Err(StateDirError::NotDirectory { .. })));
    }

    #[test]
    fn a_quota_is_a_full_disk_whatever_sqlite_calls_it() {
        let failure = |code: i32, text: &str| {
            rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some(text.to_string()))
        };
        let full = failure(rusqlite::ffi::SQLITE_FULL, "database or disk is full");
        let ioerr = failure(rusqlite::ffi::SQLITE_IOERR_WRITE, "disk I/O error");
        assert_eq!(storage_full(&full, 0), Some("database or disk is full"));
        assert_eq!(storage_full(&ioerr, libc::EDQUOT), Some("database or disk is full (disk quota exceeded)"));
        assert_eq!(storage_full(&ioerr, libc::ENOSPC), Some("database or disk is full (no space left on device)"));
        assert_eq!(storage_full(&ioerr, libc::EIO), None, "a failing disk is not a full one");
        assert_eq!(storage_full(&failure(rusqlite::ffi::SQLITE_BUSY, "busy"), libc::EDQUOT), None);
        assert_eq!(storage_full(&rusqlite::Error::QueryReturnedNoRows, libc::ENOSPC), None);
        // On a fresh connection no I/O error happened: errno 0, and the
        // message names the database.
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("x.db");
        let conn = open(&db, SCHEMA, 1).unwrap();
        assert_eq!(crate::sys::sqlite_system_errno(&conn), 0);
        assert_eq!(failure_message(&conn, &db, &full), format!("database {}: database or disk is full", db.display()));
    }

    #[test]
    fn a_state_dir_of_another_uid_is_refused() {
        let uid = effective_uid().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("theirs");
        std::fs::create_dir(&dir).unwrap();
        if uid != 0 {
            // Only root can give a directory away; as another user the
            // check is the same comparison, exercised below by root.
            assert!(check_state_dir(&dir).is_ok());
            return;
        }
        std::os::unix::fs::chown(&dir, Some(65534), None).unwrap();
        let e = check_state_dir(&dir).unwrap_err();
        assert!(matches!(e, StateDirError::Owner { owner: 65534, uid: 0, .. }), "{e}");
    }
}
