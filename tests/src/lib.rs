//! The integration-test harness: starts real components on loopback in a
//! temp dir and stops them when dropped.

#![deny(missing_docs)]

pub mod arc;
pub mod bdii;
pub mod bench;
pub mod cluster;
pub mod ldap;
pub mod munge;
pub mod vgpgpu;
pub mod slurm;
pub mod glue;
pub mod twophase;
pub mod egi_snapshot;

/// Reports a skipped test: prints why on stderr and, when
/// `CDER_SKIPPED_FILE` names a file (deploy/test.sh sets it), appends one
/// line there, so the run ends with a visible count of what did not run.
/// Callers that need a real component fail instead under `CI=true`.
pub fn skipped(reason: &str) {
    eprintln!("SKIPPED: {reason}");
    if let Some(path) = std::env::var_os("CDER_SKIPPED_FILE") {
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let _ = record_skip(std::path::Path::new(&path), &test, reason);
    }
}

/// Polls `ok` every 200 ms until it holds; panics naming `what` after
/// `timeout` (a bound on waiting for the daemons, not a timed assertion).
pub fn wait_for(what: &str, timeout: std::time::Duration, mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !ok() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Appends `test: reason` (one line) to the skip list at `path`.
pub fn record_skip(path: &std::path::Path, test: &str, reason: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    writeln!(f, "{test}: {}", reason.replace(['\n', '\r'], " "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn skips_are_listed_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("skipped");
        super::record_skip(&list, "slurm_plugins::a", "missing slurmctld").unwrap();
        super::record_skip(&list, "ldap::b", "missing slapd\nsecond line").unwrap();
        let text = std::fs::read_to_string(&list).unwrap();
        assert_eq!(text.lines().collect::<Vec<_>>(), ["slurm_plugins::a: missing slurmctld", "ldap::b: missing slapd second line"]);
    }
}
