//! A stand-in for pbs_mom, and a real cderd with four static gpgpu devices.
//!
//! TORQUE is not packaged for these machines, so these tests play pbs_mom's
//! part exactly as its Administrator Guide (appendix G) and source
//! (src/resmom/start_exec.c, prolog.c) describe it:
//!
//! * the hooks are files in a `mom_priv/` directory, owned by root and not
//!   writable by group or others (pbs_mom refuses anything else with -1);
//! * each runs with an empty environment (`env -i`), stdin on `/dev/null`,
//!   in `mom_priv/`, with the documented argument layout, as root (the
//!   `.user` hooks and the job starter as the job's user, via `setpriv`);
//! * a prologue still running after `$prologalarm` seconds (300 by default)
//!   is killed and counts as -4.
//!
//! The one liberty: a test must not write `/etc/cder/cder.toml` and
//! `/etc/cder/torque.toml`, so the root-run hooks find the node's files by
//! `CDER_CONFIG` and `CDER_TORQUE_CONFIG` in the environment pbs_mom gives
//! them (its own, never the job's). What runs as the job's user (the job
//! starter, `cder-env`) runs in a mount namespace of its own whose `/etc`
//! is the host's with the node's `cder/` laid over it (a read-only overlay):
//! there `/etc/cder/cder.toml` and `/etc/cder/torque.toml` are root-owned
//! links to the node's files, as `install-mom-hooks.sh --config` makes them.
//! Nothing that runs as the job's user gets those variables from here.
//!
//! cderd is the real daemon (`target/debug/cderd`, built by
//! `cder_testkit::workspace_binary`). When it cannot be built the tests skip with a reason, or
//! fail when `CI=true`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cder_protocol::Client;
use cder_testkit::TestNode;

/// pbs_mom's default `$prologalarm`, in seconds.
pub const PROLOGALARM: u64 = 300;

/// The hook files the harness installs, with their modes (docs: prologue
/// `-r-x------`, `.user` variants `-r-x---r-x`).
pub const HOOKS: &[(&str, u32)] = &[
    ("prologue", 0o500),
    ("prologue.parallel", 0o500),
    ("epilogue", 0o500),
    ("epilogue.parallel", 0o500),
    ("epilogue.precancel", 0o500),
    ("prologue.user", 0o505),
    ("epilogue.user", 0o505),
];

/// The job's user in these tests.
pub const JOB_UID: u32 = 65534;
pub const JOB_GID: u32 = 65534;
pub const JOB_USER: &str = "nobody";
/// Another unprivileged uid (no passwd entry needed: cderd only sees uids).
pub const OTHER_UID: u32 = 65533;

/// What a hook did.
#[derive(Debug)]
pub struct Run {
    /// The exit status as pbs_mom reads it; -4 when the alarm killed it,
    /// -1 when the file's permissions made pbs_mom refuse it.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// How the node's four devices are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Devices {
    /// Plain files: enough for allocation and the environment.
    Files,
    /// Character devices with distinct numbers (the mem driver's 1:5, 1:7,
    /// 1:8, 1:9, mode 0666): openable by anyone, and a device cgroup can
    /// tell them apart. `enforcement` is the `[node.enforcement]` table's
    /// `cgroup` value for cderd.
    Char { cgroup: &'static str },
}

/// The mem driver's minors used as fake GPUs (zero, full, random, urandom).
pub const CHAR_MINORS: [u32; 4] = [5, 7, 8, 9];

pub struct Node {
    pub dir: tempfile::TempDir,
    /// The device files, by cderd index.
    pub device_paths: Vec<PathBuf>,
    /// cderd's `cgroup_parent` on this node (removed when the node goes).
    cgroup_parent: String,
    pub config: PathBuf,
    pub torque_toml: PathBuf,
    pub socket: PathBuf,
    pub mom_priv: PathBuf,
    /// What `$job_starter` names: the job starter itself (the same file as
    /// [`job_starter_bin`](Self::job_starter_bin)); pbs_mom passes it no
    /// options, so it reads `/etc/cder` (see the module's notes).
    pub job_starter: PathBuf,
    /// A copy of cder-job-starter, reachable by unprivileged users.
    pub job_starter_bin: PathBuf,
    /// The directory laid over `/etc` for the job's user: `cder/` with the
    /// links to [`config`](Self::config) and [`torque_toml`](Self::torque_toml).
    pub etc: PathBuf,
    pub cder_env: PathBuf,
    pub cderctl: PathBuf,
    cderd: TestNode,
}

/// Where cargo put this crate's binaries, beside the test executable.
fn bin_dir() -> PathBuf {
    cder_testkit::profile_dir()
}

/// [`cder_testkit::missing`], then no node.
fn missing(what: &str) -> Option<Node> {
    cder_testkit::missing(what);
    None
}

impl Node {
    /// A node with 4 gpgpu devices and cderd running; `None` (skip) when
    /// cderd is not built or the tests do not run as root.
    pub fn start(torque_settings: &str) -> Option<Node> {
        Self::start_with(torque_settings, Devices::Files)
    }

    /// [`start`](Self::start) with the devices made as `devices` says.
    pub fn start_with(torque_settings: &str, devices: Devices) -> Option<Node> {
        let cderd_bin = match cder_testkit::workspace_binary("cderd", "cderd") {
            Ok(path) => path,
            Err(e) => return missing(&e),
        };
        let cderctl = match cder_testkit::workspace_binary("cderctl", "cderctl") {
            Ok(path) => path,
            Err(e) => return missing(&e),
        };
        if cder_torque::sys::current_uid() != 0 {
            return missing("pbs_mom runs hooks as root; these tests must run as root");
        }
        if Command::new("setpriv").arg("--version").output().is_err() {
            return missing("setpriv (util-linux) is needed to run the job starter as the job's user");
        }
        if Command::new("unshare").arg("--version").output().is_err() {
            return missing("unshare (util-linux) is needed to give the job starter its /etc/cder");
        }
        let dir = tempfile::Builder::new().prefix("cder-torque-").tempdir().unwrap();
        // The job's user must reach the socket and the job starter.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.path().join("run/cderd.sock");
        let devs = dir.path().join("dev");
        fs::create_dir_all(&devs).unwrap();
        let cgroup_parent = format!(
            "cder-torque-test-{}-{}",
            std::process::id(),
            dir.path().file_name().unwrap().to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric(), "")
        );
        let enforcement = match devices {
            // Plain files: nothing a device cgroup could guard; leave cgroups alone.
            Devices::Files => "\n[node.enforcement]\ncgroup = \"off\"\n".to_string(),
            // A group parent of its own, so parallel tests never share one;
            // held_open = "allow": other processes on the machine may hold
            // the mem devices open, which says nothing about these tests.
            Devices::Char { cgroup } => {
                format!("\n[node.enforcement]\ncgroup = \"{cgroup}\"\ncgroup_parent = \"{cgroup_parent}\"\nheld_open = \"allow\"\n")
            }
        };
        let mut config = format!(
            "[node]\nsocket = \"{}\"\nsocket_mode = \"0666\"\nstate_dir = \"{}\"\n{enforcement}\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n",
            socket.display(),
            dir.path().join("state").display()
        );
        let mut device_paths = Vec::new();
        for (i, minor) in CHAR_MINORS.iter().enumerate() {
            let path = devs.join(format!("nvidia{i}"));
            match devices {
                Devices::Files => fs::write(&path, b"").unwrap(),
                Devices::Char { .. } => {
                    let made = Command::new("mknod")
                        .arg("-m")
                        .arg("0666")
                        .arg(&path)
                        .arg("c")
                        .arg("1")
                        .arg(minor.to_string())
                        .status()
                        .unwrap();
                    assert!(made.success(), "mknod {} c 1 {minor}", path.display());
                }
            }
            device_paths.push(path.clone());
            config.push_str(&format!(
                "\n[[cder.device]]\nindex = {i}\nuuid = \"GPU-6f1a0c2e-0000-4000-8000-00000000000{i}\"\npci_bus_id = \"0000:0{}:00.0\"\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\npath = \"{}\"\nnuma_node = {}\n",
                i + 2,
                path.display(),
                i / 2
            ));
        }
        let config_path = dir.path().join("cder.toml");
        fs::write(&config_path, config).unwrap();
        let torque_toml = dir.path().join("torque.toml");
        fs::write(&torque_toml, torque_settings).unwrap();
        for f in [&config_path, &torque_toml] {
            fs::set_permissions(f, fs::Permissions::from_mode(0o644)).unwrap();
        }

        // mom_priv with the hooks, as deploy/torque/install-mom-hooks.sh lays it out.
        let mom_priv = dir.path().join("mom_priv");
        fs::create_dir(&mom_priv).unwrap();
        fs::set_permissions(&mom_priv, fs::Permissions::from_mode(0o751)).unwrap();
        // Where pbs_mom keeps job files and the gpu/node files ($PBS_HOME is dir).
        fs::create_dir(mom_priv.join("jobs")).unwrap();
        fs::create_dir(dir.path().join("aux")).unwrap();
        let hook = bin_dir().join("cder-torque-hook");
        for (name, mode) in HOOKS {
            let path = mom_priv.join(name);
            fs::copy(&hook, &path).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(*mode)).unwrap();
        }
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
        let job_starter_bin = bin.join("cder-job-starter");
        let cder_env = bin.join("cder-env");
        fs::copy(bin_dir().join("cder-job-starter"), &job_starter_bin).unwrap();
        fs::copy(bin_dir().join("cder-env"), &cder_env).unwrap();
        // $job_starter names the starter itself, which reads /etc/cder: the
        // node's files, linked there as install-mom-hooks.sh --config does.
        let job_starter = job_starter_bin.clone();
        let etc = dir.path().join("etc");
        fs::create_dir_all(etc.join("cder")).unwrap();
        std::os::unix::fs::symlink(&config_path, etc.join("cder/cder.toml")).unwrap();
        std::os::unix::fs::symlink(&torque_toml, etc.join("cder/torque.toml")).unwrap();

        let cderd = TestNode::new(&cderd_bin, &config_path, &socket, dir.path().join("cderd.log"));
        let mut node = Node {
            dir,
            device_paths,
            cgroup_parent,
            config: config_path,
            torque_toml,
            socket,
            mom_priv,
            job_starter,
            job_starter_bin,
            etc,
            cder_env,
            cderctl,
            cderd,
        };
        node.start_cderd();
        Some(node)
    }

    /// Starts cderd and waits until it answers `ping`.
    pub fn start_cderd(&mut self) {
        // Waiting for a daemon to come up, not a timing assertion: generous.
        self.cderd.start(Duration::from_secs(60));
    }

    /// Kills cderd (as a crash would) and waits for it.
    pub fn stop_cderd(&mut self) {
        self.cderd.kill();
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.socket, Duration::from_secs(10)).unwrap()
    }

    /// Each job holding devices, with their indices.
    pub fn holders(&self) -> BTreeMap<String, Vec<u32>> {
        let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for d in self.client().status().unwrap().devices {
            if let Some(job) = d.job {
                out.entry(job.to_string()).or_default().push(d.index);
            }
        }
        out
    }

    /// Runs `mom_priv/<name>` as pbs_mom does, as root.
    pub fn hook(&self, name: &str, args: &[&str]) -> Run {
        self.hook_with_alarm(name, args, None, PROLOGALARM)
    }

    /// Runs `mom_priv/<name>` as pbs_mom does, as `uid:gid` (the `.user` hooks).
    pub fn hook_as(&self, name: &str, args: &[&str], uid: u32, gid: u32) -> Run {
        self.hook_with_alarm(name, args, Some((uid, gid)), PROLOGALARM)
    }

    pub fn hook_with_alarm(&self, name: &str, args: &[&str], user: Option<(u32, u32)>, alarm_s: u64) -> Run {
        let path = self.mom_priv.join(name);
        // pbs_mom's own check before it runs a hook.
        let meta = fs::metadata(&path).unwrap();
        let user_hook = name.ends_with(".user");
        let perms_ok = meta.uid() == 0 && meta.mode() & 0o022 == 0 && (!user_hook || meta.mode() & 0o005 == 0o005);
        if !perms_ok {
            return Run { code: -1, stdout: String::new(), stderr: "permission error".into() };
        }
        let mut cmd = match user {
            None => Command::new(&path),
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(&path);
                c
            }
        };
        cmd.args(args)
            .env_clear()
            .env("CDER_CONFIG", &self.config)
            .env("CDER_TORQUE_CONFIG", &self.torque_toml)
            .current_dir(&self.mom_priv);
        self.run_with_alarm(cmd, b"", alarm_s, true)
    }

    /// The job starter as pbs_mom execs it: as the job's user, with the
    /// job's environment, argv = starter, shell, shell's argv[0], and the
    /// job script on stdin.
    pub fn job_starter(&self, uid: u32, gid: u32, env: &[(&str, &str)], argv: &[&str], stdin: &[u8]) -> Run {
        self.job_starter_in(Path::new("/"), uid, gid, env, argv, stdin)
    }

    /// [`job_starter`](Self::job_starter) in `dir` (pbs_mom starts a job in
    /// its user's home).
    pub fn job_starter_in(
        &self,
        dir: &Path,
        uid: u32,
        gid: u32,
        env: &[(&str, &str)],
        argv: &[&str],
        stdin: &[u8],
    ) -> Run {
        let mut cmd = self.as_user(uid, gid, &self.job_starter);
        cmd.args(argv).env_clear().envs(env.iter().copied()).current_dir(dir);
        self.run_with_alarm(cmd, stdin, PROLOGALARM, false)
    }

    /// `program` as `uid:gid` with no other groups, in a mount namespace
    /// whose `/etc` has the node's `cder/` laid over the host's (read-only):
    /// the site's `/etc/cder`, for this command alone. The mount runs as
    /// root before setpriv; programs by absolute path, whatever the PATH the
    /// job's environment sets.
    fn as_user(&self, uid: u32, gid: u32, program: &Path) -> Command {
        let path_of = |name: &'static str| {
            ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
                .iter()
                .map(|dir| Path::new(dir).join(name))
                .find(|p| p.exists())
                .unwrap_or_else(|| name.into())
        };
        let (setpriv, mount) = (path_of("setpriv"), path_of("mount"));
        let mut cmd = Command::new(path_of("unshare"));
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(format!(
                "'{}' -t overlay cder-etc -o ro,lowerdir='{}':/etc /etc && exec \"$@\"",
                mount.display(),
                self.etc.display()
            ))
            .arg("sh")
            .arg(&setpriv)
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(program);
        cmd
    }

    /// Any command as `uid:gid`, empty environment plus `env`.
    pub fn run_as(&self, uid: u32, gid: u32, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        let command = || {
            let mut cmd = self.as_user(uid, gid, program);
            cmd.args(args).env_clear().envs(env.iter().copied()).current_dir("/");
            cmd
        };
        // ETXTBSY again, one exec further: setpriv (or env) execs a program
        // this test just copied, which a child forked by another test thread
        // may still hold open for writing until it execs. Nothing ran yet.
        for _ in 0..100 {
            let run = self.run_with_alarm(command(), b"", PROLOGALARM, false);
            if !(run.code == 126 && run.stderr.contains("Text file busy")) {
                return run;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.run_with_alarm(command(), b"", PROLOGALARM, false)
    }

    fn run_with_alarm(&self, mut cmd: Command, stdin: &[u8], alarm_s: u64, null_stdin: bool) -> Run {
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out_path = self.dir.path().join(format!("run-{seq}.out"));
        let err_path = out_path.with_extension("err");
        cmd.stdout(fs::File::create(&out_path).unwrap()).stderr(fs::File::create(&err_path).unwrap());
        cmd.stdin(if null_stdin { Stdio::null() } else { Stdio::piped() });
        // ETXTBSY: a hook copied by this test (`fs::copy`) may still be open
        // for writing in a child another test thread forked; it closes at exec.
        let mut child = (0..200)
            .find_map(|_| match cmd.spawn() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    None
                }
                other => Some(other.unwrap()),
            })
            .expect("the hook stayed busy (ETXTBSY)");
        if !null_stdin {
            let mut pipe = child.stdin.take().unwrap();
            let _ = pipe.write_all(stdin);
        }
        // pbs_mom's alarm: a waiter thread reports the exit; if the alarm
        // comes first, the script is killed and counts as -4.
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let code = match rx.recv_timeout(Duration::from_secs(alarm_s)) {
            Ok(status) => status.unwrap().code().unwrap_or(-3),
            Err(_) => {
                // The child is not reaped yet (the waiter is still in wait),
                // so the pid is still ours to kill.
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
                let _ = rx.recv();
                -4
            }
        };
        waiter.join().unwrap();
        let stdout = fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = fs::read_to_string(&err_path).unwrap_or_default();
        let _ = fs::remove_file(&out_path);
        let _ = fs::remove_file(&err_path);
        Run { code, stdout, stderr }
    }

    /// `cderctl --config … <args>`, as root.
    pub fn cderctl(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(&self.cderctl);
        cmd.arg("--config").arg(&self.config).args(args).env_clear();
        self.run_with_alarm(cmd, b"", 120, true)
    }
}

impl Node {
    /// `$PBS_HOME` of this node.
    pub fn pbs_home(&self) -> &Path {
        self.dir.path()
    }

    /// Writes pbs_mom's job file for `job_id` (TORQUE 6's XML form), with
    /// `exec_gpus` when given.
    pub fn write_job_file(&self, job_id: &str, exec_gpus: Option<&str>) {
        let gpus = exec_gpus.map(|g| format!("<exec_gpus flags=\"1025\">{g}</exec_gpus>")).unwrap_or_default();
        let xml = format!(
            "<?xml version=\"1.0\"?>\n<job><version>2</version><state>4</state><substate>42</substate><jobid>{job_id}</jobid>\
<fileprefix>{job_id}</fileprefix><attributes><Job_Name flags=\"1\">gpu-job</Job_Name>{gpus}</attributes></job>\n"
        );
        fs::write(self.dir.path().join(format!("mom_priv/jobs/{job_id}.JB")), xml).unwrap();
    }

    /// Writes pbs_mom's job file for `job_id` in TORQUE 4.2's binary form
    /// (src/server/job_recov.c `job_save`, attr_recov.c `save_attr`): the
    /// fixed `ji_qs` struct, then each attribute as a 64-bit `struct
    /// svrattrl` header (pointers as the heap left them, `al_tsize`,
    /// `al_nameln`, `al_rescln`, `al_valln`, `al_flags`; 88 bytes) followed by
    /// name, resource and value, then the `ENDATTRIBUTES` (-711) record.
    pub fn write_binary_job_file(&self, job_id: &str, attributes: &[(&str, Option<&str>, &[u8])]) {
        let mut out = vec![0u8; 0x2c8];
        out[..4].copy_from_slice(&0x00020300i32.to_ne_bytes());
        out[8..8 + job_id.len()].copy_from_slice(job_id.as_bytes());
        for (name, resource, value) in attributes {
            let name = [name.as_bytes(), b"\0"].concat();
            let resource = resource.map(|r| [r.as_bytes(), b"\0"].concat()).unwrap_or_default();
            let mut header: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) | 0x40).collect();
            for n in [88 + name.len() + resource.len() + value.len(), name.len(), resource.len(), value.len(), 1025] {
                header.extend_from_slice(&(n as i32).to_ne_bytes());
            }
            header.resize(88, 0);
            out.extend_from_slice(&[header, name, resource, value.to_vec()].concat());
        }
        let mut end = vec![0u8; 88];
        end[64..68].copy_from_slice(&(-711i32).to_ne_bytes());
        out.extend_from_slice(&end);
        fs::write(self.dir.path().join(format!("mom_priv/jobs/{job_id}.JB")), out).unwrap();
    }

    pub fn remove_job_file(&self, job_id: &str) {
        fs::remove_file(self.dir.path().join(format!("mom_priv/jobs/{job_id}.JB"))).unwrap();
    }
}

/// This host's name as pbs_mom would put it in `exec_gpus`.
pub fn hostname() -> String {
    cder_torque::sys::hostname().unwrap()
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_cderd();
        // cderd removes each job's group on release; the parent it created
        // for this node's groups is the test's to remove (empty by now).
        for root in ["/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified"] {
            let _ = fs::remove_dir(Path::new(root).join(&self.cgroup_parent));
        }
    }
}

/// The prologue's arguments for job `id` of `nobody` asking for `limits`.
pub fn prologue_args<'a>(id: &'a str, limits: &'a str) -> Vec<&'a str> {
    vec![id, JOB_USER, "nogroup", "gpu-job", limits, "batch", ""]
}

/// The epilogue's arguments for job `id`.
pub fn epilogue_args(id: &str) -> Vec<&str> {
    vec![
        id,
        JOB_USER,
        "nogroup",
        "gpu-job",
        "4242",
        "nodes=1:ppn=1:gpus=2",
        "cput=00:00:01,mem=0kb,vmem=0kb,walltime=00:00:02",
        "batch",
        "",
        "0",
    ]
}
