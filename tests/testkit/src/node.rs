//! A real `cderd` process on a config the test wrote, reached over its
//! socket.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use cder_protocol::Client;

/// A cderd the test started: `binary --config <config>`, stderr appended to
/// `log`; killed (SIGKILL, then reaped) when dropped.
pub struct TestNode {
    binary: PathBuf,
    config: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    env: Vec<(OsString, OsString)>,
    child: Option<Child>,
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
            child: None,
        }
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
        assert!(self.child.is_none(), "cderd is already running");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("open cderd's log");
        let child = Command::new(&self.binary)
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + timeout;
        loop {
            if Client::connect(&self.socket, Duration::from_secs(5)).and_then(|mut c| c.ping()).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("cderd exited with {status} at start; log:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "cderd did not answer on {} within {timeout:?}; log:\n{}",
                self.socket.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
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
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "cderd did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
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
    }
}
