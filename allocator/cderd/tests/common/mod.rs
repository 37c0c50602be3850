//! Starts the real `cderd` binary on a temp config with static devices and
//! talks to it over its socket. No NVIDIA driver is involved: the devices
//! are `discovery = "static"` and their device files are plain temp files.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cder_protocol::{Client, Status};
use cder_testkit::TestNode;

pub const CDERD: &str = env!("CARGO_BIN_EXE_cderd");

/// Extra `[node]` / `[node.enforcement]` settings for a test node.
#[derive(Default, Clone)]
pub struct Options {
    pub operators: Vec<String>,
    pub enforcement: Option<String>,
    pub max_request_bytes: Option<usize>,
    /// `[node] socket_mode`; "0666" unless given.
    pub socket_mode: Option<String>,
    /// `[node] state_dir`; `<temp dir>/state` unless given.
    pub state_dir: Option<PathBuf>,
    /// cderd's `RUST_LOG` instead of `warn` (e.g. `info`, for a test that
    /// reads an info line of the log).
    pub rust_log: Option<String>,
}

/// A test node: a temp dir with the config, state, socket and device files.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub devices: Vec<PathBuf>,
    /// `[node.enforcement] cgroup_parent` of this node, unique per test
    /// node so that parallel tests never sweep each other's groups;
    /// removed with the node.
    pub cgroup_parent: Option<String>,
    daemon: TestNode,
}

pub use cder_testkit::{remove_cgroup_parent, unique_cgroup_parent};

impl Node {
    /// `n` gpgpu devices, the first half on NUMA node 0, the rest on 1.
    pub fn new(n: u32) -> Node {
        Self::with(n, Options::default())
    }

    pub fn with(n: u32, options: Options) -> Node {
        let dir = tempfile::tempdir().unwrap();
        // Unprivileged test clients must reach the socket inside.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("cderd.sock");
        // The test process itself is an operator even when not run as root.
        let mut operators = options.operators.clone();
        let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
        if me != 0 {
            operators.push(me.to_string());
        }
        let mut text = format!(
            "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"{}\"\noperators = {:?}\n",
            socket,
            options.state_dir.clone().unwrap_or_else(|| dir.path().join("state")),
            options.socket_mode.as_deref().unwrap_or("0666"),
            operators
        );
        if let Some(max) = options.max_request_bytes {
            text += &format!("max_request_bytes = {max}\n");
        }
        let cgroup_parent = unique_cgroup_parent();
        text += &format!("[node.enforcement]\ncgroup_parent = {cgroup_parent:?}\n");
        if let Some(enforcement) = &options.enforcement {
            text += &format!("{enforcement}\n");
        }
        text += "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n";
        let mut devices = Vec::new();
        for i in 0..n {
            let path = dir.path().join(format!("nvidia{i}"));
            std::fs::write(&path, b"").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
            text += &format!(
                "[[cder.device]]\nindex = {i}\nuuid = \"GPU-test-{i}\"\nmodel = \"{}\"\nmemory_mib = {}\npath = {:?}\nnuma_node = {}\n",
                if i % 2 == 0 { "Tesla K20m" } else { "Tesla T4" },
                if i % 2 == 0 { 4800 } else { 15360 },
                path,
                i / (n / 2).max(1)
            );
            devices.push(path);
        }
        let config = dir.path().join("cder.toml");
        std::fs::write(&config, text).unwrap();
        let mut daemon = TestNode::new(CDERD, &config, &socket, dir.path().join("cderd.log"));
        if let Some(level) = &options.rust_log {
            daemon = daemon.env("RUST_LOG", level);
        }
        let mut node = Node { dir, config, socket, devices, cgroup_parent: Some(cgroup_parent), daemon };
        node.start();
        node
    }

    /// A node from a whole config text written by the caller into `dir`
    /// (whose socket must be `dir/cderd.sock`), started with `env`.
    pub fn custom(dir: tempfile::TempDir, text: &str, devices: Vec<PathBuf>, env: Vec<(String, PathBuf)>) -> Node {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("cder.toml");
        std::fs::write(&config, text).unwrap();
        let socket = dir.path().join("cderd.sock");
        let cgroup_parent = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("cgroup_parent = ").map(|v| v.trim_matches('"').to_string()));
        // Extra environment for the daemon (e.g. the fake NVML's variables).
        let daemon = env
            .into_iter()
            .fold(TestNode::new(CDERD, &config, &socket, dir.path().join("cderd.log")), |d, (k, v)| d.env(k, v));
        let mut node = Node { dir, config, socket, devices, cgroup_parent, daemon };
        node.start();
        node
    }

    /// Starts cderd and waits until it answers `ping`.
    pub fn start(&mut self) {
        self.daemon.start(Duration::from_secs(30));
    }

    /// SIGKILLs the daemon (no chance to clean up) and reaps it.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    /// Sends SIGTERM and waits for the daemon to exit; returns its status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.daemon.terminate()
    }

    /// Whether the daemon process is still running.
    pub fn alive(&mut self) -> bool {
        self.daemon.alive()
    }

    pub fn log(&self) -> String {
        self.daemon.log()
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket, Duration::from_secs(30)).expect("connect to cderd")
    }

    pub fn status(&self) -> Status {
        self.client().status().expect("status")
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("state").join("cderd.db")
    }

    /// Sends raw bytes on a fresh connection and returns the reply line
    /// (empty when the daemon closed without one).
    pub fn raw(&self, bytes: &[u8]) -> String {
        let stream = UnixStream::connect(&self.socket).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut writer = stream.try_clone().unwrap();
        // A daemon that closes early may reset a large write; the reply is what matters.
        let _ = writer.write_all(bytes);
        let mut line = String::new();
        let _ = BufReader::new(stream).read_line(&mut line);
        line
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        if let Some(parent) = &self.cgroup_parent {
            remove_cgroup_parent(parent);
        }
    }
}

/// Reads the live owner of every device straight from the database file.
pub fn live_owners(db: &Path) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let mut stmt = conn
        .prepare("SELECT a.device, j.job FROM allocations a JOIN jobs j ON j.id = a.job_id WHERE a.end IS NULL ORDER BY a.device")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

/// `setpriv` from util-linux drops to `uid`:`uid` with no groups and runs `argv`.
pub fn as_uid(uid: u32, argv: &[&std::ffi::OsStr]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}")).arg(format!("--regid={uid}")).arg("--clear-groups");
    cmd.args(argv);
    cmd
}

/// The probe child's side (call it from a `#[test]` in the test file; it
/// does nothing unless started by a test with `CDER_PROBE_SOCKET` set):
/// opens every path in `CDER_PROBE_PATHS` before and after asking cderd to
/// confine it into `CDER_PROBE_JOB`, printing `PROBE <when> <path> ok|<errno>`.
pub fn probe_child_main() {
    let Ok(socket) = std::env::var("CDER_PROBE_SOCKET") else { return };
    let job = std::env::var("CDER_PROBE_JOB").unwrap();
    let paths: Vec<String> = std::env::var("CDER_PROBE_PATHS").unwrap().split(',').map(String::from).collect();
    let try_all = |when: &str| {
        for p in &paths {
            match std::fs::File::open(p) {
                Ok(_) => println!("PROBE {when} {p} ok"),
                Err(e) => println!("PROBE {when} {p} {}", e.raw_os_error().unwrap_or(-1)),
            }
        }
    };
    try_all("before");
    let mut c = Client::connect(&socket, Duration::from_secs(30)).unwrap();
    // Only root and operators are told the groups' paths.
    if let Ok(a) = c.env(&job.parse().unwrap()) {
        println!("PROBE env-cgroups {}", a.cgroups.map_or("none".to_string(), |g| g.join(",")));
    }
    match c.confine(&job.parse().unwrap()) {
        Ok(confined) => println!("PROBE confined {}", confined.cgroups.join(",")),
        Err(e) => {
            println!("PROBE refused {}", e.code().map_or("none".to_string(), |c| c.to_string()));
            println!("PROBE refusal {e}");
        }
    }
    try_all("after");
    // `CDER_PROBE_HOLD=<path>,<n>`: leaves n `setsid sleep`s behind, each
    // holding <path> open, in whatever groups the probe is in now.
    if let Ok(hold) = std::env::var("CDER_PROBE_HOLD") {
        let (path, n) = hold.rsplit_once(',').unwrap();
        for _ in 0..n.parse::<u32>().unwrap() {
            // Not a group leader, so setsid(1) calls setsid() and execs
            // sleep in place: the pid is the sleeper's.
            // Left behind on purpose: the probe exits, the test ends it.
            #[allow(clippy::zombie_processes)]
            let child = Command::new("setsid")
                .args(["sleep", "300"])
                .stdin(std::fs::File::open(path).unwrap())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            println!("PROBE spawned {}", child.id());
        }
    }
    if std::env::var("CDER_PROBE_LINGER").is_ok() {
        println!("PROBE lingering");
        std::thread::sleep(Duration::from_secs(120));
    }
}

/// A copy of the running test binary in `dir` that any uid can execute.
pub fn probe_binary(dir: &Path) -> PathBuf {
    let copy = dir.join("probe");
    if !copy.exists() {
        std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    copy
}

/// Runs `f` again while exec says ETXTBSY: another test thread may fork
/// while the probe copy is still open for writing here, and its child holds
/// that descriptor until it execs.
pub fn retry_busy<T>(mut f: impl FnMut() -> std::io::Result<T>) -> T {
    for _ in 0..200 {
        match f() {
            Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(Duration::from_millis(20)),
            other => return other.unwrap(),
        }
    }
    panic!("the probe binary stayed busy (ETXTBSY)")
}

/// The probe's own lines (libtest may print `test … ` before the first).
pub fn probe_lines<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    lines.filter_map(|l| l.find("PROBE ").map(|at| l[at..].to_string())).collect()
}

/// Starts the probe (`test_name` is the `#[test]` calling [`probe_child_main`])
/// as `uid` for `job` over `paths`, and returns its PROBE lines.
pub fn run_probe(test_name: &str, node: &Node, uid: u32, job: &str, paths: &[PathBuf]) -> Vec<String> {
    use std::os::unix::process::CommandExt;
    let binary = probe_binary(node.dir.path());
    let out = retry_busy(|| {
        Command::new(&binary)
            .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
            .env("CDER_PROBE_SOCKET", &node.socket)
            .env("CDER_PROBE_JOB", job)
            .env("CDER_PROBE_PATHS", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(","))
            .env_remove("CI")
            .uid(uid)
            .gid(uid)
            .output()
    });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "probe failed: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    probe_lines(text.lines())
}

/// A node config whose devices are mknod'ed character devices `1:<minor>`
/// (distinct numbers, so cgroups can tell them apart), in `dir`.
pub fn char_device_node(dir: tempfile::TempDir, minors: &[u32], enforcement: &str) -> Node {
    let parent = unique_cgroup_parent();
    let mut text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ncgroup_parent = {parent:?}\n{enforcement}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
    );
    let mut devices = Vec::new();
    for (i, minor) in minors.iter().enumerate() {
        let path = dir.path().join(format!("nvidia{i}"));
        let ok = Command::new("mknod").arg(&path).args(["c", "1", &minor.to_string()]).status().unwrap().success();
        assert!(ok, "mknod {}", path.display());
        text += &format!(
            "[[cder.device]]\nindex = {i}\nmodel = \"Fake\"\nmemory_mib = 1\npath = {path:?}\nnuma_node = {}\n",
            i % 2
        );
        devices.push(path);
    }
    Node::custom(dir, &text, devices, Vec::new())
}

/// xorshift64*: enough randomness for a test, reproducible from the seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Pseudo-terminal slaves as fake devices: each `/dev/pts/N` (136:N) is a
/// character device that any process may open and that no other test
/// holds, so a release here (which ends every process outside the job
/// holding the released device's number) never ends another test's
/// process. The masters stay open as long as this lives.
pub struct Ptys {
    masters: Vec<std::fs::File>,
    pub paths: Vec<PathBuf>,
}

impl Ptys {
    pub fn open(n: usize) -> Ptys {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let mut ptys = Ptys { masters: Vec::new(), paths: Vec::new() };
        for _ in 0..n {
            let master = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NOCTTY)
                .open("/dev/ptmx")
                .expect("/dev/ptmx");
            let mut index: libc::c_uint = 0;
            let unlock: libc::c_int = 0;
            // SAFETY: TIOCGPTN writes one c_uint and TIOCSPTLCK reads one c_int,
            // both valid for the call; the descriptor is the open master.
            unsafe {
                assert_eq!(libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut index), 0);
                assert_eq!(libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock), 0);
            }
            let path = PathBuf::from(format!("/dev/pts/{index}"));
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
            ptys.masters.push(master);
            ptys.paths.push(path);
        }
        ptys
    }
}

/// A node whose devices are the character devices at `paths` (see [`Ptys`]).
pub fn device_node(dir: tempfile::TempDir, paths: &[PathBuf], enforcement: &str) -> Node {
    let parent = unique_cgroup_parent();
    let mut text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ncgroup_parent = {parent:?}\n{enforcement}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
    );
    for (i, path) in paths.iter().enumerate() {
        text += &format!(
            "[[cder.device]]\nindex = {i}\nmodel = \"Fake\"\nmemory_mib = 1\npath = {path:?}\nnuma_node = {}\n",
            i % 2
        );
    }
    Node::custom(dir, &text, paths.to_vec(), Vec::new())
}
