//! The test harness every crate's tests share: a cderd started on a temp
//! config ([`TestNode`]), the checks for installed components
//! ([`require`], [`require_programs`], [`require_root`]) and the skip
//! reporting that deploy/test.sh counts ([`skipped`]), the workspace's
//! binaries ([`workspace_binary`]) and the one wait loop ([`wait_for`],
//! [`wait_for_value`], [`try_wait_for`]).

#![deny(missing_docs)]

mod bins;
mod disk;
pub mod faults;
pub mod hostile;
mod node;
pub mod requirements;

pub use bins::{built, cargo_build, profile_dir, target_dir, workspace_binary, workspace_root};
pub use disk::{require_quota_dir, require_tmpfs, QuotaDir, Tmpfs};
pub use node::{remove_cgroup_parent, unique_cgroup_parent, TestNode};

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Reports a skipped test: prints why on stderr and, when
/// `CDER_SKIPPED_FILE` names a file (deploy/test.sh sets it), appends one
/// line there, so the run ends with a visible count of what did not run.
/// Callers that need a real component fail instead under `CI=true`
/// ([`missing`]).
pub fn skipped(reason: &str) {
    eprintln!("SKIPPED: {reason}");
    if let Some(path) = std::env::var_os("CDER_SKIPPED_FILE") {
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let _ = record_skip(Path::new(&path), &test, reason);
    }
}

/// Appends `test: reason` (one line) to the skip list at `path`.
pub fn record_skip(path: &Path, test: &str, reason: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{test}: {}", reason.replace(['\n', '\r'], " "))
}

/// Whether this run is CI's (`CI=true`), where nothing may be skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A real component the test needs is missing (`what` says which): under
/// `CI=true` the test fails (panics); otherwise the skip is reported and
/// this returns false, for the caller to return early.
pub fn missing(what: &str) -> bool {
    if under_ci() {
        panic!("CI=true, so a missing component fails the test: {what}");
    }
    skipped(what);
    false
}

/// `condition`, or [`missing`]`("missing {what}")`.
pub fn require(condition: bool, what: &str) -> bool {
    condition || missing(&format!("missing {what}"))
}

/// Checks that the programs (looked up on `PATH`) and files (names with a
/// `/`) a test needs exist; see [`missing`] for what happens when not.
pub fn require_programs(what: &[&str]) -> bool {
    let absent: Vec<&str> = what.iter().copied().filter(|p| !exists(p)).collect();
    absent.is_empty() || missing(&format!("missing {} (install with deploy/install-deps.sh)", absent.join(", ")))
}

fn exists(program_or_path: &str) -> bool {
    if program_or_path.contains('/') {
        return Path::new(program_or_path).exists();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program_or_path).is_file()))
}

/// `name` on `PATH`, or in /usr/sbin or /usr/bin (where Debian puts the
/// daemons, often outside a user's `PATH`).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// True when running as root (the tests that change uids or make cgroups
/// need it).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false)
}

/// [`require`]`(is_root(), …)`: `why` names what needs root.
pub fn require_root(why: &str) -> bool {
    require(is_root(), &format!("root ({why})"))
}

/// Held by the tests that set a process-wide environment variable (such
/// as `CDER_FAKE_NVML`, which the fake NVML reads at every init): the
/// tests of a binary run on threads side by side.
pub fn env_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Polls `ok` every 200 ms until it holds; panics naming `what` after
/// `timeout` (a bound on waiting for the daemons, not a timed assertion).
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    if wait_for_value(timeout, Duration::from_millis(200), || ok().then_some(())).is_none() {
        panic!("timed out waiting for {what}");
    }
}

/// Looks (`look`) every `every` until it finds something, and returns it;
/// `None` when `timeout` ran out first, for the caller to say what that
/// means (a harness returns an error with its logs, a test panics). Every
/// wait of the tests and harnesses is this loop: the bound is on a daemon
/// or job getting somewhere, never a timed assertion.
pub fn wait_for_value<T>(timeout: Duration, every: Duration, mut look: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = look() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// [`wait_for_value`] where a look may also end the wait with an error
/// (the daemon waited for has exited): `Ok(None)` when the time ran out.
pub fn try_wait_for<T, E>(
    timeout: Duration,
    every: Duration,
    mut look: impl FnMut() -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    // An error is "found" too: it ends the wait, and is handed back as is.
    wait_for_value(timeout, every, || look().transpose()).transpose()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn skips_are_listed_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("skipped");
        super::record_skip(&list, "slurm_plugins::a", "missing slurmctld").unwrap();
        super::record_skip(&list, "ldap::b", "missing slapd\nsecond line").unwrap();
        let text = std::fs::read_to_string(&list).unwrap();
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            ["slurm_plugins::a: missing slurmctld", "ldap::b: missing slapd second line"]
        );
    }

    #[test]
    fn a_wait_returns_what_the_look_found_and_an_error_ends_it() {
        let mut looks = 0;
        let found = super::wait_for_value(Duration::from_secs(600), Duration::ZERO, || {
            looks += 1;
            (looks == 3).then_some(looks)
        });
        assert_eq!(found, Some(3));
        assert_eq!(super::wait_for_value(Duration::ZERO, Duration::ZERO, || None::<()>), None);
        let mut looks = 0;
        let ended: Result<Option<()>, &str> = super::try_wait_for(Duration::from_secs(600), Duration::ZERO, || {
            looks += 1;
            if looks == 2 {
                Err("exited")
            } else {
                Ok(None)
            }
        });
        assert_eq!((ended, looks), (Err("exited"), 2));
    }

    #[test]
    fn present_programs_and_files_are_required_without_a_skip() {
        assert!(super::require_programs(&["sh", "/"]));
        assert!(super::require(true, "nothing"));
    }
}
