//! Where index snapshots live and how one replaces another.
//!
//! One snapshot file per BDII and per view of it (bases, strategies, key
//! prefixes), in a per-user cache (`$XDG_CACHE_HOME/cder`, default
//! `~/.cache/cder`) or a site's shared directory (`--index-dir`,
//! `$CDER_INDEX_DIR`, e.g. `/var/cache/cder` kept by the
//! `cder-index-refresh` timer). A snapshot is written whole into a temp file
//! in the same directory, synced, and renamed over the old one: a reader
//! opens either the old file or the new one, never a part, and never needs a
//! lock. Refreshes take a write lock (`fcntl` OFD) on `<snapshot>.lock`
//! first, so two never run at once; the lock goes with its holder's death.
//! The lock file is the refresher's alone (mode 0600, its uid, never a
//! link): in a shared directory no reader can open it, so none can hold the
//! lock and stall the site's refresh.
//!
//! A snapshot's modification time is when a refresh last confirmed it
//! against the BDII: written, or found still current (same BDII cycle).

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::bdii::Strategies;

mod sys;

/// The environment variable naming a shared snapshot directory.
pub const INDEX_DIR_ENV: &str = "CDER_INDEX_DIR";

/// A failure of the cache, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Reading, writing or locking a file failed.
    #[error("{path}: {message}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed and why.
        message: String,
    },
    /// Another refresh held the lock for longer than the wait allowed.
    #[error("{path}: another refresh still holds the lock after {waited:?}")]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// How long this one waited.
        waited: Duration,
    },
    /// No directory to put a per-user cache in.
    #[error("no cache directory: set XDG_CACHE_HOME, HOME or {INDEX_DIR_ENV}, or give --index-dir")]
    NoHome,
}

fn io_error(path: &Path, what: &str, e: std::io::Error) -> CacheError {
    // A used-up quota leaves no room just as a full disk does.
    let message = match e.raw_os_error() {
        Some(libc::ENOSPC) => format!("{what}: {e}: the file system is full (the previous snapshot, if any, is kept)"),
        Some(libc::EDQUOT) => {
            format!("{what}: {e}: no space left under the disk quota (the previous snapshot, if any, is kept)")
        }
        _ => format!("{what}: {e}"),
    };
    CacheError::Io { path: path.to_path_buf(), message }
}

/// What a snapshot holds: the BDII and how it was read. Two keys that
/// differ in anything name two files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotKey {
    /// `ldap://host:port`.
    pub url: String,
    /// GLUE 2.0 base DN.
    pub base: String,
    /// GLUE 1.3 base DN.
    pub base13: String,
    /// The publication strategies read.
    pub strategies: Strategies,
    /// The CDER key prefixes.
    pub prefixes: Vec<String>,
}

impl SnapshotKey {
    /// The snapshot's file name: the BDII's host and port, readable, and a
    /// hash of everything (so `ldap://a:2170` read two ways gives two files).
    pub fn file_name(&self) -> String {
        let s = self.strategies;
        let mut prefixes = self.prefixes.clone();
        prefixes.sort();
        prefixes.dedup();
        let whole = format!(
            "{}\n{}\n{}\n{}{}{}\n{}",
            self.url,
            self.base.to_ascii_lowercase(),
            self.base13.to_ascii_lowercase(),
            u8::from(s.attribute_extension),
            u8::from(s.class_extension),
            u8::from(s.glue13),
            prefixes.join(",")
        );
        let host = self.url.split_once("://").map_or(self.url.as_str(), |(_, rest)| rest);
        let readable: String = host
            .chars()
            .take(64)
            .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
            .collect();
        format!("{readable}-{:016x}.cdx", fnv1a(whole.as_bytes()))
    }
}

/// FNV-1a, 64 bits: stable across Rust releases (std's hasher is not
/// promised to be), and file names need no stronger hash.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// A snapshot directory.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
    /// A site's shared directory (given by flag or environment) rather
    /// than the user's own: created readable by all.
    shared: bool,
}

impl Cache {
    /// `dir` if given, else `$CDER_INDEX_DIR`, else the user's cache.
    pub fn resolve(dir: Option<&Path>) -> Result<Cache, CacheError> {
        if let Some(d) = dir {
            return Ok(Cache { dir: d.to_path_buf(), shared: true });
        }
        if let Some(d) = std::env::var_os(INDEX_DIR_ENV).filter(|d| !d.is_empty()) {
            return Ok(Cache { dir: PathBuf::from(d), shared: true });
        }
        Cache::user()
    }

    /// `$XDG_CACHE_HOME/cder`, or `$HOME/.cache/cder` (the XDG base
    /// directory rules: a relative `XDG_CACHE_HOME` is ignored).
    pub fn user() -> Result<Cache, CacheError> {
        let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|p| p.is_absolute());
        let home = || std::env::var_os("HOME").map(PathBuf::from).filter(|p| p.is_absolute()).map(|h| h.join(".cache"));
        let base = xdg.or_else(home).ok_or(CacheError::NoHome)?;
        Ok(Cache { dir: base.join("cder"), shared: false })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The snapshot file for `key`.
    pub fn snapshot_path(&self, key: &SnapshotKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// Creates the directory (0700 for a user's cache, 0755 for a shared one).
    pub fn create_dir(&self) -> Result<(), CacheError> {
        use std::os::unix::fs::DirBuilderExt as _;
        if self.dir.is_dir() {
            return Ok(());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(if self.shared { 0o755 } else { 0o700 })
            .create(&self.dir)
            .map_err(|e| io_error(&self.dir, "cannot create the index directory", e))
    }
}

/// `path`'s lock file.
pub fn lock_path(snapshot: &Path) -> PathBuf {
    let mut name = snapshot.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    snapshot.with_file_name(name)
}

/// The refresh lock of one snapshot, held until dropped.
#[derive(Debug)]
pub struct RefreshLock {
    _file: std::fs::File,
    /// How long taking it waited for another refresh.
    pub waited: Duration,
}

/// Takes the refresh lock of `snapshot`, waiting up to `wait` for another
/// process's refresh to end. The lock file must be a plain file of this
/// process's uid that no one else may open; one an earlier release left
/// readable to others is replaced first.
pub fn lock(snapshot: &Path, wait: Duration) -> Result<RefreshLock, CacheError> {
    let path = lock_path(snapshot);
    let mut file = open_lock_file(&path)?;
    if file.metadata().map_err(|e| io_error(&path, "cannot read the refresh lock's owner", e))?.mode() & 0o077 != 0 {
        // Whoever opened it while it was readable keeps that descriptor, and
        // could hold a read lock through it: a new file leaves them the old one.
        replace_lock_file(&path)?;
        file = open_lock_file(&path)?;
    }
    let started = Instant::now();
    loop {
        if sys::try_lock_exclusive(&file).map_err(|e| io_error(&path, "cannot lock", e))? {
            return Ok(RefreshLock { _file: file, waited: started.elapsed() });
        }
        if started.elapsed() >= wait {
            return Err(CacheError::Busy { path, waited: started.elapsed() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens (making it, mode 0600) the lock file at `path` for writing, never
/// through a symbolic link, and checks that it is this uid's plain file.
fn open_lock_file(path: &Path) -> Result<std::fs::File, CacheError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => CacheError::Io {
                path: path.to_path_buf(),
                message: "the refresh lock is a symbolic link: remove it (a refresh makes its own)".into(),
            },
            _ => io_error(path, "cannot open the refresh lock", e),
        })?;
    let meta = file.metadata().map_err(|e| io_error(path, "cannot read the refresh lock's owner", e))?;
    let uid = sys::effective_uid();
    if !meta.file_type().is_file() || meta.uid() != uid {
        return Err(CacheError::Io {
            path: path.to_path_buf(),
            message: format!(
                "the refresh lock is not a plain file of uid {uid}, who refreshes (it is uid {}'s, mode {:o}): remove it",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        });
    }
    Ok(file)
}

/// Puts a new, private lock file in place of one others could open.
fn replace_lock_file(path: &Path) -> Result<(), CacheError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = std::ffi::OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{}.tmp", std::process::id()));
    let fresh = path.with_file_name(name);
    let _ = std::fs::remove_file(&fresh);
    std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&fresh)
        .map_err(|e| io_error(&fresh, "cannot make a new refresh lock", e))?;
    std::fs::rename(&fresh, path).map_err(|e| {
        let _ = std::fs::remove_file(&fresh);
        io_error(path, "cannot replace the refresh lock (readable to others) by a private one", e)
    })
}

/// When a refresh last confirmed `snapshot` (its modification time);
/// None when there is no snapshot.
pub fn checked_at(snapshot: &Path) -> Option<SystemTime> {
    std::fs::metadata(snapshot).and_then(|m| m.modified()).ok()
}

/// Seconds since `t` (0 for a time in the future, as after a clock step).
pub fn age(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// Records that a refresh found `snapshot` still current (the BDII has
/// not finished a cycle since): its modification time becomes now. The
/// contents stay as they are.
pub fn mark_checked(snapshot: &Path) -> Result<(), CacheError> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(snapshot)
        .map_err(|e| io_error(snapshot, "cannot open the snapshot to mark it checked", e))?;
    f.set_modified(SystemTime::now()).map_err(|e| io_error(snapshot, "cannot mark the snapshot checked", e))
}

/// Replaces `path` with `bytes` atomically: a temp file beside it, written,
/// synced, renamed over it, and the directory synced. On any failure (a
/// full disk) the temp file is removed and the old file is left as it was.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    // A temp file left by a crashed process of the same pid: ours to replace.
    let _ = std::fs::remove_file(&tmp);
    let what = |w: &str| format!("cannot {w} the new snapshot of {}", path.display());
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
            .map_err(|e| io_error(&tmp, &what("create"), e))?;
        f.write_all(bytes).map_err(|e| io_error(&tmp, &what("write"), e))?;
        f.sync_all().map_err(|e| io_error(&tmp, &what("sync"), e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| io_error(path, "cannot put the new snapshot in place", e))?;
        // The rename itself reaches the disk with the directory.
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(dir, "cannot sync the index directory", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(url: &str) -> SnapshotKey {
        SnapshotKey {
            url: url.into(),
            base: "o=glue".into(),
            base13: "o=grid".into(),
            strategies: Strategies::default(),
            prefixes: vec!["GPGPU".into()],
        }
    }

    #[test]
    fn a_full_disk_and_a_used_up_quota_say_the_old_snapshot_is_kept() {
        let p = Path::new("/cache/.x.cdx.1.tmp");
        let msg = |errno| io_error(p, "cannot write", std::io::Error::from_raw_os_error(errno)).to_string();
        let full = msg(libc::ENOSPC);
        assert!(full.starts_with("/cache/.x.cdx.1.tmp: cannot write: No space left on device"), "{full}");
        assert!(full.contains("the file system is full (the previous snapshot, if any, is kept)"), "{full}");
        let quota = msg(libc::EDQUOT);
        assert!(
            quota.contains("Disk quota exceeded") && quota.contains("no space left under the disk quota"),
            "{quota}"
        );
        assert!(quota.contains("the previous snapshot, if any, is kept"), "{quota}");
        assert!(!msg(libc::EIO).contains("kept"), "other errors say only what failed");
    }

    #[test]
    fn one_file_per_bdii_and_view() {
        let a = key("ldap://bdii.example.org:2170").file_name();
        assert!(a.starts_with("bdii.example.org_2170-") && a.ends_with(".cdx"), "{a}");
        assert_eq!(a, key("ldap://bdii.example.org:2170").file_name(), "stable");
        assert_ne!(a, key("ldap://bdii.example.org:2171").file_name());
        let mut k = key("ldap://bdii.example.org:2170");
        k.strategies.glue13 = false;
        assert_ne!(a, k.file_name());
        let mut k = key("ldap://bdii.example.org:2170");
        k.prefixes = vec!["GPGPU".into(), "GPGPU".into()];
        assert_eq!(a, k.file_name(), "prefix order and repeats do not matter");
        // Whatever the URL holds, the name stays in the directory.
        let odd = key("ldap://../../etc/passwd:1").file_name();
        assert!(!odd.contains('/'), "{odd}");
    }

    #[test]
    fn atomic_replace_keeps_the_old_file_on_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.cdx");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // A directory where the temp file would go: the write fails, the
        // snapshot stays, no temp file is left behind.
        let blocked = dir.path().join(format!(".x.cdx.{}.tmp", std::process::id()));
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("f"), b"").unwrap();
        let err = write_atomic(&path, b"newer").unwrap_err().to_string();
        assert!(err.contains(".x.cdx."), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn a_second_lock_waits_then_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.cdx");
        let held = lock(&path, Duration::ZERO).unwrap();
        let err = lock(&path, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(err, CacheError::Busy { .. }), "{err}");
        assert!(err.to_string().contains("x.cdx.lock"), "{err}");
        drop(held);
        let again = lock(&path, Duration::from_millis(100)).unwrap();
        assert!(again.waited < Duration::from_millis(100));
    }

    #[test]
    fn marking_checked_moves_the_age_not_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.cdx");
        write_atomic(&path, b"data").unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(old).unwrap();
        assert!(age(checked_at(&path).unwrap()) >= Duration::from_secs(3599));
        mark_checked(&path).unwrap();
        assert!(age(checked_at(&path).unwrap()) < Duration::from_secs(60));
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        assert!(checked_at(&dir.path().join("none")).is_none());
    }
}
