//! A real `cderd` process on a config the test wrote, reached over its
//! socket: the one way every test and harness starts cderd, on the test's
//! machine or (through a [`TestNode::wrapper`]) inside a host of the
//! cluster harness.
//!
//! cderd ends the processes of every group under its `cgroup_parent` that
//! its ledger does not know (reconcile's sweep), so two test daemons on one
//! parent kill each other's jobs: a node whose config names no parent gets
//! one of its own ([`unique_cgroup_parent`]), removed when it is dropped.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use cder_protocol::Client;

/// A cderd the test started: `[wrapper…] binary --config <config>`, its
/// output appended to `log`; killed (SIGKILL, then reaped) when dropped.
pub struct TestNode {
    binary: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    env: Vec<(OsString, OsString)>,
    wrapper: Vec<OsString>,
    rust_log: Option<OsString>,
    child: Option<Child>,
    /// The parent this node wrote into a config that named none.
    own_cgroup_parent: Option<String>,
}

/// A `cgroup_parent` no other test node on the machine uses.
pub fn unique_cgroup_parent() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("cder-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Removes `parent` and its groups from every cgroup mount (best effort: a
/// group with processes in it stays).
pub fn remove_cgroup_parent(parent: &str) {
    for root in ["/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer"] {
        let dir = Path::new(root).join(parent);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

/// `text` with `cgroup_parent = "<parent>"` in its `[node.enforcement]`
/// table (added at the end when there is none, so no line moves), or `None`
/// when the text names a parent already.
fn with_cgroup_parent(text: &str, parent: &str) -> Option<String> {
    if text.lines().any(|l| l.trim_start().starts_with("cgroup_parent")) {
        return None;
    }
    let line = format!("cgroup_parent = \"{parent}\"\n");
    match text.find("\n[node.enforcement]\n").or_else(|| text.starts_with("[node.enforcement]\n").then_some(0)) {
        Some(at) => {
            let after = at + text[at..].find("]\n").unwrap() + 2;
            Some(format!("{}{line}{}", &text[..after], &text[after..]))
        }
        None => Some(format!("{text}\n[node.enforcement]\n{line}")),
    }
}

impl TestNode {
    /// A node not started yet: `socket` must be the one `config` names.
    pub fn new(
        binary: impl Into<PathBuf>,
        config: impl Into<PathBuf>,
        socket: impl Into<PathBuf>,
        log: impl Into<PathBuf>,
    ) -> TestNode {
        TestNode {
            binary: binary.into(),
            config: config.into(),
            socket: socket.into(),
            log: log.into(),
            env: Vec::new(),
            wrapper: Vec::new(),
            rust_log: Some("warn".into()),
            child: None,
            own_cgroup_parent: None,
        }
    }

    /// Runs cderd through `program args…` (which must exec it in place, so
    /// that the pid is cderd's): e.g. `nsenter -t <holder> -n -m -u --`, as
    /// the cluster harness starts each host's cderd inside its namespaces.
    /// `config` is then the path as the wrapped cderd sees it, `socket` and
    /// `log` as the test sees them.
    pub fn wrapper<S: Into<OsString>>(
        mut self,
        program: impl Into<OsString>,
        args: impl IntoIterator<Item = S>,
    ) -> TestNode {
        self.wrapper = std::iter::once(program.into()).chain(args.into_iter().map(Into::into)).collect();
        self
    }

    /// Leaves `RUST_LOG` as the test process has it instead of `warn`:
    /// for the harnesses whose logs show cderd's info lines.
    pub fn keep_rust_log(mut self) -> TestNode {
        self.rust_log = None;
        self
    }

    /// Adds a variable to the daemon's environment (e.g. the fake NVML's).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> TestNode {
        self.env.push((key.into(), value.into()));
        self
    }

    /// [`TestNode::new`] and [`TestNode::start`] with a 30 s bound.
    pub fn started(
        binary: impl Into<PathBuf>,
        config: impl Into<PathBuf>,
        socket: impl Into<PathBuf>,
        log: impl Into<PathBuf>,
    ) -> TestNode {
        let mut node = TestNode::new(binary, config, socket, log);
        node.start(Duration::from_secs(30));
        node
    }

    /// Starts cderd and waits until it answers `ping`; panics with its log
    /// when it exits first or does not answer within `timeout` (a bound on
    /// a daemon coming up, not a timing assertion).
    pub fn start(&mut self, timeout: Duration) {
        if let Err(e) = self.try_start(timeout) {
            panic!("{e}");
        }
    }

    /// [`TestNode::start`], with an error (naming the log) instead of a
    /// panic, for the harnesses that report their own failures.
    pub fn try_start(&mut self, timeout: Duration) -> Result<(), String> {
        assert!(self.child.is_none(), "cderd is already running");
        self.give_own_cgroup_parent()?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open cderd's log {}: {e}", self.log.display()))?;
        let mut cmd = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(&self.binary);
                cmd
            }
            None => Command::new(&self.binary),
        };
        cmd.arg("--config").arg(&self.config);
        if let Some(level) = &self.rust_log {
            cmd.env("RUST_LOG", level);
        }
        let child = cmd
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.binary.display()))?;
        self.child = Some(child);
        let up = crate::try_wait_for(timeout, Duration::from_millis(10), || {
            if Client::connect(&self.socket, Duration::from_secs(5)).and_then(|mut c| c.ping()).is_ok() {
                return Ok(Some(()));
            }
            match self.child.as_mut().unwrap().try_wait().unwrap() {
                Some(status) => Err(status),
                None => Ok(None),
            }
        });
        match up {
            Ok(Some(())) => Ok(()),
            Ok(None) => Err(format!(
                "cderd did not answer on {} within {timeout:?}; log:\n{}",
                self.socket.display(),
                self.log()
            )),
            Err(status) => {
                self.child = None;
                Err(format!("cderd exited with {status} at start; log:\n{}", self.log()))
            }
        }
    }

    /// Writes this node's own `cgroup_parent` into a config that names none
    /// (the same one on every start). A config behind a wrapper is the
    /// wrapper's business: its path is not the test's.
    fn give_own_cgroup_parent(&mut self) -> Result<(), String> {
        if !self.wrapper.is_empty() {
            return Ok(());
        }
        let Ok(text) = std::fs::read_to_string(&self.config) else { return Ok(()) };
        let parent = self.own_cgroup_parent.get_or_insert_with(unique_cgroup_parent);
        match with_cgroup_parent(&text, parent) {
            Some(text) => std::fs::write(&self.config, text)
                .map_err(|e| format!("write a cgroup_parent into {}: {e}", self.config.display())),
            None if !text.contains(parent.as_str()) => {
                self.own_cgroup_parent = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// SIGKILLs the daemon (no chance to clean up, as a crash) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and waits (30 s at most) for the daemon to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("cderd running");
        let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
        assert!(status.success(), "kill -TERM failed");
        crate::wait_for_value(Duration::from_secs(30), Duration::from_millis(10), || child.try_wait().unwrap())
            .expect("cderd did not stop on SIGTERM")
    }

    /// The daemon's pid while it runs (to freeze it, see [`crate::faults::Frozen`]).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the daemon process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Everything the daemon has written to its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The socket the daemon listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A connection to the daemon (waiting up to 30 s).
    pub fn client(&self) -> Client {
        Client::connect(&self.socket, Duration::from_secs(30)).expect("connect to cderd")
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.kill();
        if let Some(parent) = &self.own_cgroup_parent {
            remove_cgroup_parent(parent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_cgroup_parent;

    #[test]
    fn a_config_without_a_parent_gets_one_and_no_line_moves() {
        let text = "[node]\nsocket = \"/s\"\n[[cder]]\nname = \"gpgpu\"\n";
        let out = with_cgroup_parent(text, "cder-test-1-0").unwrap();
        assert!(out.starts_with(text), "{out}");
        let value: toml::Table = out.parse().unwrap();
        assert_eq!(value["node"]["enforcement"]["cgroup_parent"].as_str(), Some("cder-test-1-0"));
    }

    #[test]
    fn an_enforcement_table_gets_the_parent_inside_it() {
        for text in
            ["[node.enforcement]\ncgroup = \"v1\"\n", "[node]\nx = 1\n[node.enforcement]\ncgroup = \"v1\"\n[[cder]]\n"]
        {
            let out = with_cgroup_parent(text, "p").unwrap();
            let value: toml::Table = out.parse().unwrap_or_else(|e| panic!("{e}\n{out}"));
            assert_eq!(value["node"]["enforcement"]["cgroup_parent"].as_str(), Some("p"), "{out}");
            assert_eq!(value["node"]["enforcement"]["cgroup"].as_str(), Some("v1"), "{out}");
        }
    }

    #[test]
    fn a_config_naming_a_parent_is_left_alone() {
        assert_eq!(with_cgroup_parent("[node.enforcement]\ncgroup_parent = \"mine\"\n", "p"), None);
    }
}
