//! A real one-node SLURM cluster (Debian's slurmctld and slurmd, 22.05) on
//! 127.0.0.1 in a temp dir, with private ports, `auth/none`, fake GPUs as
//! character devices with distinct numbers (the mem driver's zero, full,
//! random, urandom) named in gres.conf, the cder plugins loaded and a real
//! `cderd` configured with the same devices; `TaskPlugin=task/none` or, with
//! [`SlurmConfig::cgroup`], `task/cgroup` with `ConstrainDevices=yes`.
//!
//! ```no_run
//! use cder_tests::slurm::{SlurmCluster, SlurmConfig};
//! if !cder_tests::slurm::require_slurm() { return; }
//! let cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap();
//! let job = cluster.sbatch(&["--gpgpu-per-node=2"], "#!/bin/sh\necho $CUDA_VISIBLE_DEVICES\n").unwrap();
//! let done = cluster.wait_job(job, std::time::Duration::from_secs(60)).unwrap();
//! assert_eq!(done.state, "COMPLETED");
//! println!("{}", cluster.job_output(job));
//! ```
//!
//! The daemons run in the foreground (`-D`) with their logs in the temp dir;
//! [`SlurmCluster::logs`] gathers them for a failing test's message, and
//! `Drop` cancels the jobs and kills the daemons.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use cder_testkit::find_program;
use std::time::Duration;

/// Where Debian puts SLURM's own plugins.
pub const SLURM_PLUGIN_DIR: &str = "/usr/lib/x86_64-linux-gnu/slurm-wlm";

/// The slurm.conf lines every test cluster shares: no authentication
/// (daemons and clients are the test's own), daemons as root, no
/// accounting, and a scheduler that starts jobs within a second or two.
pub const SLURM_CONF_COMMON: &str = "AuthType=auth/none\n\
    CredType=cred/none\n\
    SelectType=select/cons_tres\n\
    SelectTypeParameters=CR_Core\n\
    GresTypes=gpu\n\
    SlurmUser=root\n\
    SlurmdUser=root\n\
    SlurmctldDebug=verbose\n\
    SlurmdDebug=verbose\n\
    MpiDefault=none\n\
    SwitchType=switch/none\n\
    AccountingStorageType=accounting_storage/none\n\
    JobAcctGatherType=jobacct_gather/none\n\
    JobCompType=jobcomp/none\n\
    SchedulerType=sched/backfill\n\
    SchedulerParameters=sched_interval=2,bf_interval=1\n\
    MinJobAge=3600\n\
    ReturnToService=2\n\
    KillWait=2\n\
    SlurmdParameters=config_overrides\n";

/// The programs a SLURM test runs.
pub const SLURM_PROGRAMS: [&str; 7] = ["slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "squeue", "scontrol"];

/// The SLURM release the tests run on: the host's (Debian 12's 22.05) by
/// default, or, with `CDER_SLURM_RELEASE=24.11` (a line of
/// deploy/slurm/releases), that release's daemons and commands in a Debian
/// root that deploy/slurm-root.sh makes (or finds cached), with the plugins
/// built against its headers. deploy/test.sh runs the SLURM suites once per
/// release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `22.05`, `24.11`, `26.05`.
    pub name: String,
    /// The Debian root holding it; `None` for the host's.
    pub root: Option<PathBuf>,
}

impl Release {
    /// Whether `scontrol reconfigure` restarts slurmctld and slurmd in place
    /// (slurmd re-executes itself on SIGHUP from 24.11), rather than having
    /// them read their files again in the running process.
    pub fn reconfigure_restarts_daemons(&self) -> bool {
        let mut parts = self.name.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0)) >= (24, 11)
    }
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.root {
            None => write!(f, "SLURM {} (the host's)", self.name),
            Some(root) => write!(f, "SLURM {} (root {})", self.name, root.display()),
        }
    }
}

/// The release [`SlurmCluster`] runs, from `CDER_SLURM_RELEASE` (made once
/// per process). `Err`: why its root could not be made.
pub fn release() -> Result<&'static Release, String> {
    static RELEASE: OnceLock<Result<Release, String>> = OnceLock::new();
    RELEASE
        .get_or_init(|| {
            let name = std::env::var("CDER_SLURM_RELEASE").ok().filter(|r| !r.is_empty());
            let Some(name) = name.filter(|r| r != HOST_RELEASE) else {
                return Ok(Release { name: HOST_RELEASE.into(), root: None });
            };
            let script = workspace_root().join("deploy/slurm-root.sh");
            let out = Command::new("bash")
                .arg(&script)
                .arg(&name)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("running {}: {e}", script.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "no root for SLURM {name}: {} failed: {}",
                    script.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            Ok(Release { name, root: Some(root) })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The host's own SLURM release (Debian 12).
pub const HOST_RELEASE: &str = "22.05";

/// Where `program` is for the release under test: its path on the host,
/// or inside the release's root.
pub fn slurm_program(program: &str) -> Option<PathBuf> {
    match release().ok()?.root.as_deref() {
        None => find_program(program),
        Some(root) => ["usr/bin", "usr/sbin", "bin", "sbin"]
            .iter()
            .map(|d| Path::new("/").join(d).join(program))
            .find(|p| root.join(p.strip_prefix("/").unwrap_or(p)).exists()),
    }
}

/// A command running `program` (a path valid for the release under test)
/// with `args` in `dir`: directly on the host, or through
/// deploy/slurm/in-root.sh inside the release's root, where the host's
/// /proc, /sys, /dev and /tmp are seen as they are.
pub fn release_command(program: &Path, dir: &Path) -> Command {
    match release().ok().and_then(|r| r.root.clone()) {
        None => {
            let mut c = Command::new(program);
            c.current_dir(dir);
            c
        }
        Some(root) => {
            let mut c = Command::new(workspace_root().join("deploy/slurm/in-root.sh"));
            c.arg(root).arg(dir).arg(program);
            c
        }
    }
}

/// Checks that SLURM is installed (the release under test's root made).
/// When it is not: with `CI=true` this panics (the test fails); otherwise
/// it prints why and returns false, and the caller returns early. Prints
/// the release the test runs on.
pub fn require_slurm() -> bool {
    let release = match release() {
        Ok(r) => r,
        Err(e) => return cder_testkit::missing(&e),
    };
    eprintln!("cder-tests: running on {release}");
    let mut missing: Vec<String> =
        SLURM_PROGRAMS.iter().filter(|p| slurm_program(p).is_none()).map(|p| p.to_string()).collect();
    let plugins = match &release.root {
        None => PathBuf::from(SLURM_PLUGIN_DIR),
        Some(root) => root.join(SLURM_PLUGIN_DIR.trim_start_matches('/')),
    };
    if !plugins.join("select_cons_tres.so").exists() {
        missing.push(format!("{}/select_cons_tres.so", plugins.display()));
    }
    if missing.is_empty() {
        return true;
    }
    cder_testkit::missing(&format!(
        "{release}: missing {} (install slurm-wlm with deploy/install-deps.sh)",
        missing.join(", ")
    ))
}

/// Held while a SLURM cluster runs: see [`serial`].
pub struct Serial {
    _thread: std::sync::MutexGuard<'static, ()>,
    _machine: Option<std::fs::File>,
}

/// Only one SLURM cluster at a time on the machine: two would share
/// slurmd's cgroup paths (`/slurm/uid_U/job_J`, job ids from 1 in both)
/// and the two cores. A mutex orders the threads of one test process, a
/// lock on a file in the temp dir every process (nextest runs each test in
/// a process of its own, and two checkouts' tests may run at once).
pub fn serial() -> Serial {
    static LOCK: Mutex<()> = Mutex::new(());
    let thread = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let path = std::env::temp_dir().join("cder-tests-slurm.lock");
    let machine = std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|f| f.lock().map(|()| f));
    if let Err(e) = &machine {
        eprintln!(
            "cder-tests: cannot lock {} ({e}): SLURM clusters of other processes may run beside this one",
            path.display()
        );
    }
    Serial { _thread: thread, _machine: machine.ok() }
}

/// The workspace's root ([`cder_testkit::workspace_root`]).
pub fn workspace_root() -> PathBuf {
    cder_testkit::workspace_root()
}

/// The cargo profile whose plugins and cderd the harness loads:
/// `CDER_TESTS_PROFILE=release` for the benchmark, `debug` otherwise.
pub fn profile() -> String {
    std::env::var("CDER_TESTS_PROFILE").ok().filter(|p| p == "release").unwrap_or_else(|| "debug".into())
}

/// The folder cargo puts the artifacts of [`profile`] in (under
/// [`cder_testkit::target_dir`]).
pub fn target_debug_dir() -> PathBuf {
    cder_testkit::target_dir().join(profile())
}

/// Builds workspace packages for the test's profile (once per caller's
/// `OnceLock`), unless `CDER_TESTS_NO_BUILD` says they are built already.
fn build_packages(packages: &[&str], what: &str) -> Result<(), String> {
    build_packages_with(packages, what, &[])
}

/// [`build_packages`] with extra environment for cargo (the SLURM
/// release's headers and target folder).
fn build_packages_with(packages: &[&str], what: &str, env: &[(String, String)]) -> Result<(), String> {
    let mut args = Vec::new();
    for p in packages {
        args.extend(["-p", p]);
    }
    if profile() == "release" {
        args.push("--release");
    }
    cder_testkit::cargo_build(&args, env).map_err(|e| format!("building {what}: {e}"))
}

/// Builds (once per process) the fake NVML library (`libcder_fake_nvml.so`),
/// which a cderd with `discovery = "nvml"` loads as `nvml_library`.
pub fn fake_nvml_library() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = target_debug_dir().join("libcder_fake_nvml.so");
            build_packages(&["cder-fake-nvml"], "the fake NVML")?;
            if !path.is_file() {
                return Err(format!("{} is missing; run cargo build -p cder-fake-nvml", path.display()));
            }
            Ok(path)
        })
        .clone()
}

/// Builds (once per process) and finds `cderctl`, as a node runs it
/// (`cderctl reconcile --from slurm`).
pub fn cderctl() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            build_packages(&["cderctl"], "cderctl")?;
            let path = target_debug_dir().join("cderctl");
            if !path.is_file() {
                return Err(format!("{} is missing; run cargo build -p cderctl", path.display()));
            }
            Ok(path)
        })
        .clone()
}

/// The cder artifacts a SLURM test loads.
#[derive(Debug, Clone)]
pub struct Artifacts {
    /// `libspank_cder.so`, named in the test's plugstack.conf.
    pub spank: PathBuf,
    /// `libjob_submit_cder.so`, loaded by slurmctld from the test's `PluginDir`.
    pub job_submit: PathBuf,
    /// The `cderd` binary the node side talks to.
    pub cderd: PathBuf,
    /// True when these are the packaged files (`CDER_TESTS_INSTALLED=1`):
    /// the plugins are loaded from SLURM's own folder, not copied.
    pub installed: bool,
}

/// Where the cder-slurm and cder-node packages put the plugins and cderd,
/// which [`artifacts`] hands out under `CDER_TESTS_INSTALLED=1`.
pub fn installed_artifacts() -> Artifacts {
    Artifacts {
        spank: Path::new(SLURM_PLUGIN_DIR).join("spank_cder.so"),
        job_submit: Path::new(SLURM_PLUGIN_DIR).join("job_submit_cder.so"),
        cderd: PathBuf::from("/usr/sbin/cderd"),
        installed: true,
    }
}

/// Builds (once per process) and finds `libspank_cder.so`,
/// `libjob_submit_cder.so` and `cderd` in target/debug (target/release
/// with `CDER_TESTS_PROFILE=release`). `CDER_TESTS_NO_BUILD=1` skips the
/// build and only looks for them; `CDER_TESTS_INSTALLED=1` takes the
/// packaged ones instead ([`installed_artifacts`], tests/tests/packages.rs).
pub fn artifacts() -> Result<Artifacts, String> {
    static BUILT: OnceLock<Result<Artifacts, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if std::env::var_os("CDER_TESTS_INSTALLED").is_some_and(|v| v == "1") {
                let found = installed_artifacts();
                for p in [&found.spank, &found.job_submit, &found.cderd] {
                    if !p.exists() {
                        return Err(format!("{} is missing: are cder-slurm and cder-node installed?", p.display()));
                    }
                }
                return Ok(found);
            }
            let dir = target_debug_dir();
            // The plugins of a release in a root are built against its
            // headers and libslurmfull, in a target folder of their own;
            // cderd links nothing of SLURM's.
            let (plugin_dir, env) = plugin_build(&release()?.clone())?;
            let found = Artifacts {
                spank: plugin_dir.join("libspank_cder.so"),
                job_submit: plugin_dir.join("libjob_submit_cder.so"),
                cderd: dir.join("cderd"),
                installed: false,
            };
            // Building while `cargo test` runs is safe: cargo has released
            // the build lock by the time test binaries run.
            build_packages(&["cderd"], "cderd")?;
            build_packages_with(&["spank-cder", "job-submit-cder"], "the plugins", &env)?;
            for p in [&found.spank, &found.job_submit, &found.cderd] {
                if !p.exists() {
                    return Err(format!(
                        "{} is missing; run cargo build -p spank-cder -p job-submit-cder -p cderd",
                        p.display()
                    ));
                }
            }
            Ok(found)
        })
        .clone()
}

/// Where the plugins for `release` are built, and the environment that
/// builds them there: for a release in a root, its headers (a folder
/// holding only the link `slurm` to the root's, as `SLURM_INCLUDE_DIR`
/// wants) and its libslurmfull.
pub fn plugin_build(release: &Release) -> Result<(PathBuf, Vec<(String, String)>), String> {
    let Some(root) = &release.root else { return Ok((target_debug_dir(), Vec::new())) };
    let target = target_debug_dir()
        .parent()
        .map(|t| t.join(format!("slurm-{}", release.name)))
        .ok_or("the target folder has no parent")?;
    let include = target.join("include");
    std::fs::create_dir_all(&include).map_err(|e| format!("{}: {e}", include.display()))?;
    let link = include.join("slurm");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(root.join("usr/include/slurm"), &link)
        .map_err(|e| format!("{}: {e}", link.display()))?;
    let env = vec![
        ("SLURM_INCLUDE_DIR".to_string(), include.display().to_string()),
        ("SLURM_LIB_DIR".to_string(), root.join(SLURM_PLUGIN_DIR.trim_start_matches('/')).display().to_string()),
        ("CARGO_TARGET_DIR".to_string(), target.display().to_string()),
    ];
    Ok((target.join(profile()), env))
}

/// A folder to compile C SPANK plugins against the release under test
/// with `-I` (its `slurm/` headers only, never a root's libc).
pub fn release_include_dir() -> Result<PathBuf, String> {
    let release = release()?;
    if release.root.is_none() {
        return Ok(PathBuf::from("/usr/include"));
    }
    let (_, env) = plugin_build(release)?;
    env.into_iter()
        .find(|(k, _)| k == "SLURM_INCLUDE_DIR")
        .map(|(_, v)| PathBuf::from(v))
        .ok_or_else(|| "no include folder for the release".to_string())
}

/// How to set the cluster up.
#[derive(Debug, Clone)]
pub struct SlurmConfig {
    /// Fake GPUs (files in gres.conf, devices in cderd's config).
    pub gpus: u32,
    /// CPUs the node declares (more than the machine's, so that GPUs, not
    /// cores, limit how many jobs run at once).
    pub cpus: u32,
    /// Load spank_cder.so (plugstack.conf `required`).
    pub spank: bool,
    /// Words after the plugin path in plugstack.conf besides `socket=`
    /// (e.g. `fail=open`, `config={dir}/cder/cder.toml`; `{dir}` is the
    /// cluster's temp dir).
    pub spank_args: Vec<String>,
    /// Load job_submit_cder.so (`JobSubmitPlugins=cder`).
    pub job_submit: bool,
    /// Start cderd with the same devices.
    pub cderd: bool,
    /// Extra lines for slurm.conf.
    pub extra_slurm_conf: String,
    /// `TaskPlugin=task/cgroup`, `ProctrackType=proctrack/cgroup` and a
    /// cgroup.conf with `CgroupPlugin=cgroup/v1`, `ConstrainDevices=yes`
    /// (SLURM's own device enforcement); `task/none` otherwise.
    pub cgroup: bool,
    /// The node's `Gres=` instead of `gpu:<gpus>` (e.g. MIG profiles as
    /// typed GRES, `gpu:1g.10gb:3,gpu:2g.20gb:1`).
    pub node_gres: Option<String>,
    /// gres.conf instead of one `File=` per fake GPU; `{dir}` is the
    /// cluster's temp dir.
    pub gres_conf: Option<String>,
    /// Fake character devices to create (paths relative to the temp dir),
    /// numbered after the `gpus` ones from [`FAKE_GPU_NUMBERS`].
    pub device_files: Vec<String>,
    /// Files to write before cderd starts (path relative to the temp dir,
    /// text with `{dir}` replaced): a fake NVML machine, a MIG capability tree.
    pub files: Vec<(String, String)>,
    /// cderd's `[[cder]]` sections instead of the static fake GPUs;
    /// `{dir}` is replaced.
    pub cder_types: Option<String>,
    /// Extra environment for cderd (e.g. `CDER_FAKE_NVML`); `{dir}` is replaced.
    pub cderd_env: Vec<(String, String)>,
    /// Lines for cderd's `[node.enforcement]` (e.g. `cgroup_warmup_ms = 0`).
    pub cderd_enforcement: String,
    /// Lines for cderd's `[node.sharing]` (GPUs offered as shares); `{dir}` is replaced.
    pub cderd_sharing: String,
    /// slurm.conf's `GresTypes` (`gpu,shard` where GPUs are shared).
    pub gres_types: String,
    /// cderd drains the node in this cluster while it keeps a device out
    /// of the pool (`[node.batch] drain_node = "slurm"`, through a wrapper
    /// of the release's `scontrol`: [`SlurmCluster::cderd_scontrol`]);
    /// `drain_node = "off"` otherwise, whatever the machine has in /etc.
    pub cderd_drains_node: bool,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            gpus: 4,
            cpus: 8,
            spank: true,
            spank_args: Vec::new(),
            job_submit: true,
            cderd: true,
            extra_slurm_conf: String::new(),
            cgroup: false,
            node_gres: None,
            gres_conf: None,
            device_files: Vec::new(),
            files: Vec::new(),
            cder_types: None,
            cderd_env: Vec::new(),
            cderd_enforcement: String::new(),
            cderd_sharing: String::new(),
            gres_types: "gpu".into(),
            cderd_drains_node: false,
        }
    }
}

/// One finished (or current) job as `scontrol show job` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job id.
    pub id: u32,
    /// `JobState=` (`COMPLETED`, `FAILED`, `PENDING` …).
    pub state: String,
    /// `Reason=`: why it is pending or failed (`None` when nothing is wrong).
    pub reason: String,
    /// `ExitCode=` as printed (`exit:signal`).
    pub exit_code: String,
    /// Every `Key=Value` of `scontrol show job -o`.
    pub fields: BTreeMap<String, String>,
}

/// A running cluster; dropping it stops everything.
pub struct SlurmCluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    node: String,
    slurmctld: Option<Child>,
    slurmd: Option<Child>,
    cderd: Option<cder_testkit::TestNode>,
    cderd_bin: Option<PathBuf>,
    /// The SPANK plugin plugstack.conf names.
    spank: PathBuf,
    /// How the cluster was set up.
    pub config: SlurmConfig,
    /// The loopback port slurmctld listens on (`SlurmctldPort`).
    pub ctld_port: u16,
    /// The loopback port slurmd listens on (`SlurmdPort`).
    pub slurmd_port: u16,
    /// The wall-clock second slurmd last started (or was told to restart)
    /// in, as SLURM writes `SlurmdStartTime`: a slurmd that registers with
    /// an earlier start time is the one before.
    slurmd_since: String,
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

impl SlurmCluster {
    /// Writes the configs, copies the plugins, starts cderd, slurmctld and
    /// slurmd, and waits until the node is idle.
    pub fn start(config: &SlurmConfig) -> Result<SlurmCluster, String> {
        let arts = artifacts()?;
        let dir = tempfile::Builder::new().prefix("cder-slurm-").tempdir().map_err(|e| e.to_string())?;
        let d = dir.path().to_path_buf();
        for sub in ["state", "spool", "plugins", "dev", "log", "cder", "jobs"] {
            std::fs::create_dir_all(d.join(sub)).map_err(|e| e.to_string())?;
        }
        // Jobs run as root or as nobody and write into jobs/; keep it open,
        // and let them reach the fake devices under dev/.
        let _ = Command::new("chmod").args(["1777", &d.join("jobs").to_string_lossy()]).status();
        let _ = Command::new("chmod").args(["0755", &d.to_string_lossy(), &d.join("dev").to_string_lossy()]).status();
        let (ctld_port, slurmd_port) = (free_port()?, free_port()?);
        let node = "node1".to_string();
        for i in 0..config.gpus {
            make_fake_gpu(&d.join(format!("dev/gpu{i}")), i)?;
        }
        let fill = |text: &str| text.replace("{dir}", &d.display().to_string());
        for (n, rel) in config.device_files.iter().enumerate() {
            let path = d.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            make_fake_gpu(&path, config.gpus + n as u32)?;
        }
        for (rel, text) in &config.files {
            let path = d.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
            }
            std::fs::write(&path, fill(text)).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        // Fresh copies: a .so rewritten in place under a running daemon
        // crashes it. Packaged plugins are used where SLURM finds them:
        // job_submit_cder.so in PluginDir's first folder, SLURM's own.
        let spank = if arts.installed {
            arts.spank.clone()
        } else {
            std::fs::copy(&arts.spank, d.join("plugins/spank_cder.so"))
                .map_err(|e| format!("copying the SPANK plugin: {e}"))?;
            std::fs::copy(&arts.job_submit, d.join("plugins/job_submit_cder.so"))
                .map_err(|e| format!("copying the job_submit plugin: {e}"))?;
            d.join("plugins/spank_cder.so")
        };

        let p = |sub: &str| d.join(sub).display().to_string();
        let gres = match &config.node_gres {
            Some(g) => format!(" Gres={g}"),
            None if config.gpus > 0 => format!(" Gres=gpu:{}", config.gpus),
            None => String::new(),
        };
        let job_submit = if config.job_submit { "JobSubmitPlugins=cder\n" } else { "" };
        let (proctrack, task) =
            if config.cgroup { ("proctrack/cgroup", "task/cgroup") } else { ("proctrack/linuxproc", "task/none") };
        if config.cgroup {
            std::fs::write(
                d.join("cgroup.conf"),
                "# Written by cder-tests: SLURM's device enforcement.\nCgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainDevices=yes\n",
            )
            .map_err(|e| e.to_string())?;
        }
        // Job ids of their own: SLURM's and cderd's cgroups are named after
        // the job, and other clusters may run on this machine at once.
        let first_job_id = u32::from(ctld_port) * 100;
        let slurm_conf = format!(
            "# Written by cder-tests: a one-node cluster on loopback.\n\
             ClusterName=cder{ctld_port}\n\
             SlurmctldHost=localhost(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={slurmd_port}\n\
             {common}\
             ProctrackType={proctrack}\n\
             TaskPlugin={task}\n\
             FirstJobId={first_job_id}\n\
             StateSaveLocation={state}\n\
             SlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctldpid}\n\
             SlurmdPidFile={slurmdpid}\n\
             SlurmctldLogFile={ctldlog}\n\
             SlurmdLogFile={slurmdlog}\n\
             PluginDir={SLURM_PLUGIN_DIR}:{plugins}\n\
             PlugStackConfig={plugstack}\n\
             {job_submit}\
             {extra}\n\
             NodeName={node} NodeAddr=127.0.0.1 NodeHostname=localhost CPUs={cpus} RealMemory=1000{gres} State=UNKNOWN\n\
             PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
            state = p("state"),
            spool = p("spool"),
            ctldpid = p("slurmctld.pid"),
            slurmdpid = p("slurmd.pid"),
            ctldlog = p("log/slurmctld.log"),
            slurmdlog = p("log/slurmd.log"),
            plugins = p("plugins"),
            plugstack = p("plugstack.conf"),
            extra = config.extra_slurm_conf,
            common = SLURM_CONF_COMMON.replace("GresTypes=gpu\n", &format!("GresTypes={}\n", config.gres_types)),
            cpus = config.cpus,
        );
        let conf = d.join("slurm.conf");
        std::fs::write(&conf, slurm_conf).map_err(|e| e.to_string())?;
        if let Some(text) = &config.gres_conf {
            std::fs::write(d.join("gres.conf"), fill(text)).map_err(|e| e.to_string())?;
        } else if config.gpus > 0 {
            let last = config.gpus - 1;
            let range = if last == 0 { "0".to_string() } else { format!("[0-{last}]") };
            std::fs::write(
                d.join("gres.conf"),
                format!("NodeName={node} Name=gpu File={}/dev/gpu{range}\n", d.display()),
            )
            .map_err(|e| e.to_string())?;
        } else {
            std::fs::write(d.join("gres.conf"), "").map_err(|e| e.to_string())?;
        }
        let mut cluster = SlurmCluster {
            dir,
            conf,
            node,
            slurmctld: None,
            slurmd: None,
            cderd: None,
            cderd_bin: Some(arts.cderd.clone()),
            spank,
            config: config.clone(),
            ctld_port,
            slurmd_port,
            slurmd_since: String::new(),
        };
        cluster.set_plugstack(config.spank, &config.spank_args)?;
        cluster.write_cder_toml()?;
        if config.cderd {
            cluster.start_cderd()?;
        }
        cluster.slurmctld = Some(cluster.spawn(
            "slurmctld",
            &["-D", "-f", &cluster.conf.display().to_string()],
            "log/slurmctld.out",
        )?);
        cluster.spawn_slurmd()?;
        cluster.wait_idle(Duration::from_secs(60))?;
        Ok(cluster)
    }

    /// The temp dir everything lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The slurm.conf of this cluster (what `SLURM_CONF` points to).
    pub fn slurm_conf(&self) -> &Path {
        &self.conf
    }

    /// cderd's socket.
    pub fn cderd_socket(&self) -> PathBuf {
        self.dir().join("cder/cderd.sock")
    }

    /// The environment a node's own tools (`cderctl reconcile --from
    /// slurm`) need to reach this cluster: `SLURM_CONF`, and for a release
    /// in a root `CDER_SQUEUE`, a wrapper that runs the root's squeue (a
    /// client speaks only its own release's protocol and two older ones).
    pub fn node_tool_env(&self) -> Result<Vec<(String, PathBuf)>, String> {
        let mut env = vec![("SLURM_CONF".to_string(), self.conf.clone())];
        if let Some(root) = release()?.root.as_ref() {
            let wrapper = self.dir().join("squeue");
            let text = format!(
                "#!/bin/sh\nexec '{}' '{}' / /usr/bin/squeue \"$@\"\n",
                workspace_root().join("deploy/slurm/in-root.sh").display(),
                root.display()
            );
            std::fs::write(&wrapper, text).map_err(|e| format!("{}: {e}", wrapper.display()))?;
            let _ = Command::new("chmod").arg("0755").arg(&wrapper).status();
            env.push(("CDER_SQUEUE".to_string(), wrapper));
        }
        Ok(env)
    }

    /// The `scontrol` cderd runs to drain this cluster's node (written
    /// here): the release's own, with this cluster's `SLURM_CONF`, through
    /// deploy/slurm/in-root.sh for a release in a root.
    pub fn cderd_scontrol(&self) -> Result<PathBuf, String> {
        let wrapper = self.dir().join("cderd-scontrol");
        let scontrol = slurm_program("scontrol").ok_or("scontrol not found")?;
        let exec = match release()?.root.as_ref() {
            None => format!("exec '{}' \"$@\"", scontrol.display()),
            Some(root) => format!(
                "exec '{}' '{}' / '{}' \"$@\"",
                workspace_root().join("deploy/slurm/in-root.sh").display(),
                root.display(),
                scontrol.display()
            ),
        };
        let text = format!("#!/bin/sh\nSLURM_CONF='{}'\nexport SLURM_CONF\n{exec}\n", self.conf.display());
        std::fs::write(&wrapper, text).map_err(|e| format!("{}: {e}", wrapper.display()))?;
        let _ = Command::new("chmod").arg("0755").arg(&wrapper).status();
        Ok(wrapper)
    }

    /// A folder job scripts may write into.
    pub fn jobs_dir(&self) -> PathBuf {
        self.dir().join("jobs")
    }

    /// Rewrites plugstack.conf. srun, sbatch and slurmstepd read it anew
    /// for every command and step, so this takes effect at once.
    pub fn set_plugstack(&self, spank: bool, args: &[String]) -> Result<(), String> {
        let text = if spank {
            let args = args.join(" ").replace("{dir}", &self.dir().display().to_string());
            format!("required {} socket={} {args}\n", self.spank.display(), self.cderd_socket().display())
        } else {
            String::new()
        };
        std::fs::write(self.dir().join("plugstack.conf"), text).map_err(|e| e.to_string())
    }

    fn write_cder_toml(&self) -> Result<(), String> {
        let d = self.dir();
        let mut t = format!(
            "[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n\n",
            self.cderd_socket().display(),
            d.join("cder/state").display()
        );
        if !self.config.cderd_enforcement.is_empty() {
            let _ = write!(t, "[node.enforcement]\n{}\n\n", self.config.cderd_enforcement.trim_end());
        }
        if !self.config.cderd_sharing.is_empty() {
            let sharing = self.config.cderd_sharing.replace("{dir}", &d.display().to_string());
            let _ = write!(t, "[node.sharing]\n{}\n\n", sharing.trim_end());
        }
        if self.config.cderd_drains_node {
            let scontrol = self.cderd_scontrol()?;
            let _ = write!(
                t,
                "[node.batch]\ndrain_node = \"slurm\"\nnode_name = \"{}\"\nscontrol = \"{}\"\n\n",
                self.node,
                scontrol.display()
            );
        } else {
            t.push_str("[node.batch]\ndrain_node = \"off\"\n\n");
        }
        match &self.config.cder_types {
            Some(types) => t.push_str(&types.replace("{dir}", &d.display().to_string())),
            None => t.push_str("[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n"),
        }
        for i in (0..self.config.gpus).filter(|_| self.config.cder_types.is_none()) {
            let _ = write!(
                t,
                "\n[[cder.device]]\nindex = {i}\nuuid = \"GPU-00000000-0000-4000-8000-00000000000{i}\"\nmodel = \"Fake Tesla K20m\"\nmemory_mib = 4800\npath = \"{}/dev/gpu{i}\"\n",
                d.display()
            );
        }
        std::fs::create_dir_all(d.join("cder/state")).map_err(|e| e.to_string())?;
        std::fs::write(d.join("cder/cder.toml"), t).map_err(|e| e.to_string())
    }

    /// Starts cderd (again), waiting for its socket.
    pub fn start_cderd(&mut self) -> Result<(), String> {
        let bin = self.cderd_bin.clone().ok_or("no cderd binary")?;
        let _ = std::fs::remove_file(self.cderd_socket());
        let dir = self.dir().display().to_string();
        let mut node = self.config.cderd_env.iter().fold(
            cder_testkit::TestNode::new(
                &bin,
                self.dir().join("cder/cder.toml"),
                self.cderd_socket(),
                self.dir().join("log/cderd.log"),
            )
            .keep_rust_log(),
            |node, (k, v)| node.env(k, v.replace("{dir}", &dir)),
        );
        node.try_start(Duration::from_secs(20)).map_err(|e| format!("{e}\n{}", self.logs()))?;
        self.cderd = Some(node);
        Ok(())
    }

    /// Stops cderd (SIGKILL: the durable state must survive that anyway).
    pub fn stop_cderd(&mut self) {
        if let Some(mut c) = self.cderd.take() {
            c.kill();
        }
        let _ = std::fs::remove_file(self.cderd_socket());
    }

    /// Kills cderd with SIGKILL and leaves its socket file behind, as a
    /// crash does.
    pub fn kill_cderd(&mut self) {
        if let Some(mut c) = self.cderd.take() {
            c.kill();
        }
    }

    /// The name of the cluster's one node.
    pub fn node_name(&self) -> &str {
        &self.node
    }

    /// cderd's pid while the harness runs it.
    pub fn cderd_pid(&self) -> Option<u32> {
        self.cderd.as_ref().and_then(cder_testkit::TestNode::pid)
    }

    /// Kills slurmctld with SIGKILL, as a crash does: its state is what it
    /// last saved in `StateSaveLocation`; jobs on the node keep running.
    pub fn kill_slurmctld(&mut self) {
        if let Some(mut c) = self.slurmctld.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts slurmctld (again) from its saved state, and waits until it
    /// answers (`scontrol ping`).
    pub fn start_slurmctld(&mut self) -> Result<(), String> {
        if self.slurmctld.is_some() {
            return Err("slurmctld is running already".into());
        }
        let conf = self.conf.display().to_string();
        self.slurmctld = Some(self.spawn_appending("slurmctld", &["-D", "-f", &conf], "log/slurmctld.out")?);
        let up = cder_testkit::try_wait_for(Duration::from_secs(60), Duration::from_millis(250), || {
            let up = self
                .command("scontrol")
                .arg("ping")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("is UP"));
            if up {
                return Ok(Some(()));
            }
            if let Some(Ok(Some(status))) = self.slurmctld.as_mut().map(Child::try_wait) {
                return Err(format!("slurmctld exited ({status}) while starting again\n{}", self.logs()));
            }
            Ok(None)
        })?;
        up.ok_or_else(|| format!("slurmctld did not answer within 60 s of its restart\n{}", self.logs()))
    }

    /// Stops slurmctld with SIGTERM, as `systemctl restart` does: it saves
    /// its state first (a SIGKILL loses what it had not saved yet, such as a
    /// job submitted a moment before). Waits for it to exit.
    pub fn stop_slurmctld(&mut self) -> Result<(), String> {
        let Some(mut c) = self.slurmctld.take() else { return Ok(()) };
        cder_testkit::faults::signal(c.id(), "TERM")?;
        let exited = cder_testkit::try_wait_for(Duration::from_secs(60), Duration::from_millis(100), || {
            c.try_wait().map_err(|e| e.to_string())
        })?;
        if exited.is_none() {
            let _ = c.kill();
            let _ = c.wait();
            return Err(format!("slurmctld did not exit within 60 s of SIGTERM\n{}", self.logs()));
        }
        Ok(())
    }

    /// Stops slurmctld (SIGTERM) and starts it again.
    pub fn restart_slurmctld(&mut self) -> Result<(), String> {
        self.stop_slurmctld()?;
        self.start_slurmctld()
    }

    /// Kills slurmd with SIGKILL; the jobs' slurmstepd processes, and so
    /// the jobs, keep running, as they do when slurmd crashes or restarts.
    pub fn kill_slurmd(&mut self) {
        if let Some(mut c) = self.slurmd.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts slurmd (again) and waits until this slurmd has registered
    /// with slurmctld and the node is responding (a state without `*`, and
    /// not down): the state alone may still be the one before the restart.
    pub fn start_slurmd(&mut self) -> Result<(), String> {
        self.spawn_slurmd()?;
        self.wait_registered(Duration::from_secs(60))?;
        self.wait_responding(Duration::from_secs(60))
    }

    /// Starts slurmd (again) without waiting for it: for a caller that
    /// measures, or must act meanwhile (resume a node SLURM drained).
    pub fn spawn_slurmd(&mut self) -> Result<(), String> {
        if self.slurmd.is_some() {
            return Err("slurmd is running already".into());
        }
        let conf = self.conf.display().to_string();
        let node = self.node.clone();
        self.slurmd_since = self.second_after(&self.slurmd_since)?;
        self.slurmd = Some(self.spawn_appending("slurmd", &["-D", "-N", &node, "-f", &conf], "log/slurmd.out")?);
        Ok(())
    }

    /// Kills slurmd (SIGKILL) and starts it again.
    pub fn restart_slurmd(&mut self) -> Result<(), String> {
        self.kill_slurmd();
        self.start_slurmd()
    }

    /// `scontrol reconfigure`: slurmctld and slurmd read their configs
    /// again. From 24.11 both restart in place to do it, and slurmctld sets
    /// a step asked for before slurmd registers again aside as pending, for
    /// up to SlurmctldTimeout; so on those releases this returns only once
    /// the restarted slurmd has registered.
    pub fn reconfigure(&mut self) -> Result<(), String> {
        let restarts = release()?.reconfigure_restarts_daemons();
        if restarts {
            self.slurmd_since = self.second_after(&self.slurmd_since)?;
        }
        self.scontrol(&["reconfigure"])?;
        if restarts {
            self.wait_registered(Duration::from_secs(60))?;
        }
        self.wait_responding(Duration::from_secs(60))
    }

    /// Waits until slurmctld has the registration of a slurmd started in or
    /// after the second `slurmd_since` names (its `SlurmdStartTime`).
    fn wait_registered(&self, timeout: Duration) -> Result<(), String> {
        let mut last = String::new();
        let registered = cder_testkit::try_wait_for(timeout, Duration::from_millis(250), || {
            let out = self.scontrol(&["-o", "show", "node", &self.node]).unwrap_or_default();
            last = out.split_whitespace().find_map(|f| f.strip_prefix("SlurmdStartTime=")).unwrap_or_default().into();
            Ok::<_, String>(
                Some(()).filter(|_| last.starts_with(|c: char| c.is_ascii_digit()) && last >= self.slurmd_since),
            )
        })?;
        registered.ok_or_else(|| {
            format!(
                "slurmd started at {} did not register within {timeout:?} (SlurmdStartTime {last:?})\n{}",
                self.slurmd_since,
                self.logs()
            )
        })
    }

    /// The first wall-clock second after `after`, as SLURM writes times
    /// (`2026-11-29T11:58:21`, local time, read in the release's root):
    /// whole seconds, so a restart must fall in a later one to be told apart.
    fn second_after(&self, after: &str) -> Result<String, String> {
        let mut now = String::new();
        let later = cder_testkit::try_wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
            let out = self.command("date").arg("+%Y-%m-%dT%H:%M:%S").output().map_err(|e| format!("date: {e}"))?;
            now = String::from_utf8_lossy(&out.stdout).trim().to_string();
            Ok::<_, String>(Some(()).filter(|_| now.as_str() > after))
        })?;
        later.map(|()| now.clone()).ok_or_else(|| format!("the clock stayed at {now:?}, not after {after:?}"))
    }

    /// Waits until slurmctld sees the node responding: a state without
    /// SLURM's not-responding `*`, and neither down nor unknown.
    pub fn wait_responding(&mut self, timeout: Duration) -> Result<(), String> {
        let mut last = String::new();
        let responding = cder_testkit::try_wait_for(timeout, Duration::from_millis(250), || {
            if let Some(Ok(Some(status))) = self.slurmd.as_mut().map(Child::try_wait) {
                return Err(format!("slurmd exited ({status})\n{}", self.logs()));
            }
            if let Ok(out) = self.command("sinfo").args(["-h", "-n", &self.node, "-o", "%T"]).output() {
                last = String::from_utf8_lossy(&out.stdout).trim().to_string();
                let bad = last.is_empty()
                    || last.contains('*')
                    || ["down", "unknown", "drain"].iter().any(|s| last.contains(s));
                if !bad {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        })?;
        responding.ok_or_else(|| {
            format!("the node did not respond within {timeout:?} (last state {last:?})\n{}", self.logs())
        })
    }

    /// cderd's `status`.
    pub fn cderd_status(&self) -> Result<cder_protocol::Status, String> {
        cder_protocol::Client::connect(self.cderd_socket(), Duration::from_secs(5))
            .and_then(|mut c| c.status())
            .map_err(|e| e.to_string())
    }

    fn spawn(&self, program: &str, args: &[&str], out: &str) -> Result<Child, String> {
        let log = std::fs::File::create(self.dir().join(out)).map_err(|e| e.to_string())?;
        let path = slurm_program(program).ok_or_else(|| format!("{program} not found"))?;
        release_command(&path, self.dir())
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))
    }

    /// As `spawn`, appending to the log a first start began.
    fn spawn_appending(&self, program: &str, args: &[&str], out: &str) -> Result<Child, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join(out))
            .map_err(|e| e.to_string())?;
        let path = slurm_program(program).ok_or_else(|| format!("{program} not found"))?;
        release_command(&path, self.dir())
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))
    }

    fn wait_idle(&mut self, timeout: Duration) -> Result<(), String> {
        let mut last = String::new();
        let idle = cder_testkit::try_wait_for(timeout, Duration::from_millis(250), || {
            let mut exited = None;
            for (name, child) in [("slurmctld", &mut self.slurmctld), ("slurmd", &mut self.slurmd)] {
                if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
                    exited = Some(format!("{name} exited ({status}) while starting"));
                }
            }
            if let Some(why) = exited {
                return Err(format!("{why}\n{}", self.logs()));
            }
            if let Ok(out) = self.command("sinfo").args(["-h", "-n", &self.node, "-o", "%T"]).output() {
                last = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if last == "idle" {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        })?;
        if idle.is_some() {
            return Ok(());
        }
        Err(format!("the node did not become idle within {timeout:?} (last state {last:?})\n{}", self.logs()))
    }

    /// A SLURM client command aimed at this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut c = release_command(&slurm_program(program).unwrap_or_else(|| program.into()), &self.jobs_dir());
        c.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        c
    }

    /// A SLURM client command run as the unprivileged user `nobody`
    /// (`setpriv`), as a user of the cluster runs it: its jobs run as
    /// nobody, and whatever it controls is untrusted.
    pub fn command_as_user(&self, program: &str) -> Command {
        self.command_as("nobody", "nogroup", program)
    }

    /// A SLURM client command run as `user` with only the group `group`
    /// (names or numbers, as `setpriv` takes them).
    pub fn command_as(&self, user: &str, group: &str, program: &str) -> Command {
        let setpriv = slurm_program("setpriv").unwrap_or_else(|| "setpriv".into());
        let mut c = release_command(&setpriv, &self.jobs_dir());
        c.args([&format!("--reuid={user}"), &format!("--regid={group}"), "--clear-groups", "--"])
            .arg(slurm_program(program).unwrap_or_else(|| program.into()))
            .env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null());
        c
    }

    /// Runs [`Self::command_as_user`] and returns its output.
    pub fn run_as_user(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        self.command_as_user(program).args(args).output().map_err(|e| format!("running {program} as nobody: {e}"))
    }

    /// [`Self::sbatch`] as the unprivileged user `nobody`.
    pub fn sbatch_as_user(&self, args: &[&str], script: &str) -> Result<u32, String> {
        self.sbatch_as("nobody", "nogroup", args, script)
    }

    /// [`Self::sbatch`] as `user` with only the group `group`.
    pub fn sbatch_as(&self, user: &str, group: &str, args: &[&str], script: &str) -> Result<u32, String> {
        let path = self.jobs_dir().join(format!("script-{}.sh", unique()));
        std::fs::write(&path, script).map_err(|e| e.to_string())?;
        let out_pattern = self.jobs_dir().join("%j.out").display().to_string();
        let mut cmd = self.command_as(user, group, "sbatch");
        cmd.arg("--parsable").arg("-o").arg(&out_pattern).args(args).arg(&path);
        let out = cmd.output().map_err(|e| format!("running sbatch: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("sbatch exited {}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
        }
        stdout
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| format!("sbatch printed no job id: {stdout:?}"))
    }

    /// A fake GPU's device file.
    pub fn gpu_path(&self, index: u32) -> PathBuf {
        self.dir().join(format!("dev/gpu{index}"))
    }

    /// Shell lines that print `OPEN=<indices>`: the fake GPUs this process
    /// can actually open (the kernel's answer, cgroups included).
    pub fn open_probe(&self) -> String {
        let mut s = String::from("open=''\n");
        for i in 0..self.config.gpus {
            let _ =
                writeln!(s, "if ( : < '{}' ) 2>/dev/null; then open=\"${{open}}{i},\"; fi", self.gpu_path(i).display());
        }
        s.push_str("echo OPEN=${open%,}\n");
        s
    }

    /// The devices cderd's ledger shows held by `slurm:<id>`.
    pub fn ledger(&self, id: u32) -> Result<Vec<u32>, String> {
        let key = format!("slurm:{id}");
        let status = self.cderd_status()?;
        let mut held: Vec<u32> = status
            .devices
            .iter()
            .filter(|d| d.job.as_ref().is_some_and(|j| j.to_string() == key))
            .map(|d| d.index)
            .collect();
        held.sort_unstable();
        Ok(held)
    }

    /// Waits until cderd's ledger holds `count` devices for job `id`, and
    /// returns them. slurmctld calls a job RUNNING when it allocates it;
    /// the node records the devices later, in the job's prolog.
    pub fn wait_ledger(&self, id: u32, count: usize, timeout: Duration) -> Result<Vec<u32>, String> {
        let mut last = Vec::new();
        let held = cder_testkit::wait_for_value(timeout, Duration::from_millis(100), || {
            last = self.ledger(id).ok()?;
            (last.len() == count).then(|| last.clone())
        });
        held.ok_or_else(|| {
            format!(
                "job {id}: cderd's ledger holds {last:?}, not {count} device(s), after {timeout:?}\n{}",
                self.logs()
            )
        })
    }

    /// The last lines of every log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(release) = release() {
            let _ = writeln!(out, "==== on {release} ====");
        }
        for name in ["slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "cderd.log"] {
            let text = std::fs::read_to_string(self.dir().join("log").join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            let _ = writeln!(out, "==== {name} (last {} lines) ====\n{}", tail.len(), tail.join("\n"));
        }
        out
    }
}

/// The client side of a SLURM cluster, shared by the one-node harness and
/// the multi-host one ([`crate::cluster`]): everything here runs SLURM's
/// own commands, built by [`SlurmClient::command`] wherever the controller
/// is reachable.
pub trait SlurmClient {
    /// A SLURM client command (`sbatch`, `scontrol` …) aimed at this cluster.
    fn command(&self, program: &str) -> Command;

    /// A folder job scripts may write into (and where `%j.out` goes).
    fn jobs_dir(&self) -> PathBuf;

    /// The last lines of every log, for a failing test's message.
    fn logs(&self) -> String;

    /// Runs a client command and returns its output, whatever its status.
    fn run(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        self.command(program).args(args).output().map_err(|e| format!("running {program}: {e}"))
    }

    /// Submits `script` with `args`; output goes to `jobs/<id>.out`.
    /// `Err` carries sbatch's stderr when it refuses the job.
    fn sbatch(&self, args: &[&str], script: &str) -> Result<u32, String> {
        self.sbatch_env(args, script, &[])
    }

    /// [`Self::sbatch`] with extra variables in the submit environment (as
    /// a CE sets `GPGPUPerNode`).
    fn sbatch_env(&self, args: &[&str], script: &str, env: &[(&str, &str)]) -> Result<u32, String> {
        let path = self.jobs_dir().join(format!("script-{}.sh", unique()));
        std::fs::write(&path, script).map_err(|e| e.to_string())?;
        let out_pattern = self.jobs_dir().join("%j.out").display().to_string();
        let mut cmd = self.command("sbatch");
        cmd.arg("--parsable").arg("-o").arg(&out_pattern).args(args).arg(&path);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().map_err(|e| format!("running sbatch: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("sbatch exited {}: {}", out.status, String::from_utf8_lossy(&out.stderr)));
        }
        stdout
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .ok_or_else(|| format!("sbatch printed no job id: {stdout:?}"))
    }

    /// `scontrol show job -o <id>`, parsed.
    fn job(&self, id: u32) -> Result<JobInfo, String> {
        let out = self.run("scontrol", &["show", "job", "-o", &id.to_string()])?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() || text.trim().is_empty() {
            return Err(format!("scontrol show job {id}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(parse_job(id, &text))
    }

    /// Waits until the job has left PENDING/RUNNING/CONFIGURING/COMPLETING.
    fn wait_job(&self, id: u32, timeout: Duration) -> Result<JobInfo, String> {
        let mut state = String::new();
        let ended = cder_testkit::try_wait_for::<_, String>(timeout, Duration::from_millis(250), || {
            let info = self.job(id)?;
            if !["PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"].contains(&info.state.as_str()) {
                return Ok(Some(info));
            }
            state = info.state;
            Ok(None)
        })?;
        ended.ok_or_else(|| format!("job {id} still {state} after {timeout:?}\n{}\n{}", self.squeue(), self.logs()))
    }

    /// Waits until the job is RUNNING.
    fn wait_running(&self, id: u32, timeout: Duration) -> Result<JobInfo, String> {
        let mut last = None;
        let running = cder_testkit::try_wait_for(timeout, Duration::from_millis(200), || {
            let info = self.job(id)?;
            if info.state == "RUNNING" {
                return Ok(Some(info));
            }
            if !["PENDING", "CONFIGURING"].contains(&info.state.as_str()) {
                return Err(format!("job {id} is {} ({}), not RUNNING\n{}", info.state, info.reason, self.logs()));
            }
            last = Some(info);
            Ok(None)
        })?;
        running.ok_or_else(|| {
            let (state, reason) = last.map(|i| (i.state, i.reason)).unwrap_or_default();
            format!("job {id} is {state} ({reason}), not RUNNING\n{}", self.logs())
        })
    }

    /// `squeue` as text.
    fn squeue(&self) -> String {
        self.run("squeue", &[]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_else(|e| e)
    }

    /// `scontrol <args>` stdout.
    fn scontrol(&self, args: &[&str]) -> Result<String, String> {
        let out = self.run("scontrol", args)?;
        if !out.status.success() {
            return Err(format!("scontrol {args:?}: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The output file of a batch job (empty if none).
    fn job_output(&self, id: u32) -> String {
        std::fs::read_to_string(self.jobs_dir().join(format!("{id}.out"))).unwrap_or_default()
    }

    /// Cancels every job and waits (briefly) until none is left running,
    /// so no slurmstepd outlives the cluster.
    fn cancel_all(&self) {
        let _ = self.run("scancel", &["--user=root"]);
        let _ = self.run("scancel", &["--user=nobody"]);
        // Briefly: what is still there after 15 s, the caller's teardown kills.
        let _ = cder_testkit::wait_for_value(Duration::from_secs(15), Duration::from_millis(200), || {
            let out = self.run("squeue", &["-h", "-t", "PD,R,CG,CF"]).map(|o| o.stdout).unwrap_or_default();
            out.is_empty().then_some(())
        });
    }
}

/// Parses `scontrol show job -o` output of job `id`.
pub fn parse_job(id: u32, text: &str) -> JobInfo {
    let fields: BTreeMap<String, String> = text
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    JobInfo {
        id,
        state: fields.get("JobState").cloned().unwrap_or_default(),
        reason: fields.get("Reason").cloned().unwrap_or_default(),
        exit_code: fields.get("ExitCode").cloned().unwrap_or_default(),
        fields,
    }
}

impl SlurmClient for SlurmCluster {
    fn command(&self, program: &str) -> Command {
        SlurmCluster::command(self, program)
    }
    fn jobs_dir(&self) -> PathBuf {
        SlurmCluster::jobs_dir(self)
    }
    fn logs(&self) -> String {
        SlurmCluster::logs(self)
    }
}

/// The [`SlurmClient`] methods as inherent ones, so that the tests of the
/// one-node cluster need not import the trait.
impl SlurmCluster {
    /// See [`SlurmClient::run`].
    pub fn run(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        SlurmClient::run(self, program, args)
    }
    /// See [`SlurmClient::sbatch`].
    pub fn sbatch(&self, args: &[&str], script: &str) -> Result<u32, String> {
        SlurmClient::sbatch(self, args, script)
    }
    /// See [`SlurmClient::sbatch_env`].
    pub fn sbatch_env(&self, args: &[&str], script: &str, env: &[(&str, &str)]) -> Result<u32, String> {
        SlurmClient::sbatch_env(self, args, script, env)
    }
    /// See [`SlurmClient::job`].
    pub fn job(&self, id: u32) -> Result<JobInfo, String> {
        SlurmClient::job(self, id)
    }
    /// See [`SlurmClient::wait_job`].
    pub fn wait_job(&self, id: u32, timeout: Duration) -> Result<JobInfo, String> {
        SlurmClient::wait_job(self, id, timeout)
    }
    /// See [`SlurmClient::wait_running`].
    pub fn wait_running(&self, id: u32, timeout: Duration) -> Result<JobInfo, String> {
        SlurmClient::wait_running(self, id, timeout)
    }
    /// See [`SlurmClient::squeue`].
    pub fn squeue(&self) -> String {
        SlurmClient::squeue(self)
    }
    /// See [`SlurmClient::scontrol`].
    pub fn scontrol(&self, args: &[&str]) -> Result<String, String> {
        SlurmClient::scontrol(self, args)
    }
    /// See [`SlurmClient::job_output`].
    pub fn job_output(&self, id: u32) -> String {
        SlurmClient::job_output(self, id)
    }
    /// Waits until job `id`'s output holds `needle`; an error (with the
    /// output and the daemons' logs) if the job leaves PENDING, CONFIGURING
    /// and RUNNING or the timeout passes first.
    pub fn wait_output(&self, id: u32, needle: &str, timeout: Duration) -> Result<String, String> {
        let mut state = String::new();
        let found = cder_testkit::try_wait_for(timeout, Duration::from_millis(200), || {
            let out = self.job_output(id);
            if out.contains(needle) {
                return Ok(Some(out));
            }
            state = self.job(id)?.state;
            if !["PENDING", "RUNNING", "CONFIGURING"].contains(&state.as_str()) {
                // The output was read before the state: a job that printed
                // and ended between the two reads has its line there now.
                let out = self.job_output(id);
                if out.contains(needle) {
                    return Ok(Some(out));
                }
                return Err(format!("job {id} is {state} and printed no {needle:?}:\n{out}\n{}", self.logs()));
            }
            Ok(None)
        })?;
        found.ok_or_else(|| {
            format!("job {id} is {state} and printed no {needle:?}:\n{}\n{}", self.job_output(id), self.logs())
        })
    }
    /// A SLURM command's stdout as text, whatever its status (`sdiag`).
    pub fn command_stdout(&self, program: &str) -> String {
        self.run(program, &[]).map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
    }
    /// See [`SlurmClient::cancel_all`].
    pub fn cancel_all(&self) {
        SlurmClient::cancel_all(self)
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        if self.slurmctld.is_some() {
            self.cancel_all();
        }
        for child in [&mut self.slurmd, &mut self.slurmctld].into_iter().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut cderd) = self.cderd.take() {
            cderd.kill();
        }
        // A job whose slurmstepd outlived its slurmd (a test killed the
        // daemon, or cancel_all ran out of time) would spin forever on a
        // flag in a folder about to vanish: end whatever still runs from it,
        // and whatever a test left holding one of its fake GPUs, which the
        // next cluster's cderd would find holding that GPU's numbers.
        kill_processes_naming(self.dir.path());
        if std::env::var_os("CDER_KEEP_TMP").is_some() {
            let kept = self.dir.path().to_path_buf();
            eprintln!("kept {}", kept.display());
            std::mem::forget(std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir")));
        }
    }
}

/// SIGKILLs every process whose command line names `dir` (a cluster's job
/// scripts, `spool/job…/slurm_script`) or that holds a file under it open.
fn kill_processes_naming(dir: &Path) {
    let needle = dir.as_os_str().as_encoded_bytes();
    let Ok(entries) = std::fs::read_dir("/proc") else { return };
    for pid in entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let holds = || {
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten();
            fds.filter_map(|fd| std::fs::read_link(fd.path()).ok()).any(|target| target.starts_with(dir))
        };
        if cmdline.windows(needle.len()).any(|w| w == needle) || holds() {
            let _ = cder_testkit::faults::signal(pid, "KILL");
        }
    }
}

/// The numbers of the fake GPUs: the mem driver's zero, full, random and
/// urandom (openable, harmless, and DISTINCT, so a device cgroup rule can
/// allow one and deny another).
pub const FAKE_GPU_NUMBERS: [(u32, u32); 4] = [(1, 5), (1, 7), (1, 8), (1, 9)];

/// Compiles the SPANK plugin `source` (C) into `plugin` against the headers
/// of the release under test: SLURM loads only a plugin built for its own.
pub fn build_spank_plugin(source: &Path, plugin: &Path) -> Result<(), String> {
    let include = release_include_dir()?;
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(plugin)
        .arg("-I")
        .arg(&include)
        .arg(source)
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        return Err(format!("cc {}: {}", source.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// A fake GPU device file. SLURM's GRES only sets `CUDA_VISIBLE_DEVICES`
/// and `SLURM_JOB_GPUS` for character devices, and a device cgroup tells
/// devices apart by major:minor, so as root this makes a character device
/// with the `index`th of [`FAKE_GPU_NUMBERS`]. Fallback (no `mknod`, e.g.
/// not root, or more than four GPUs): a plain file, which SLURM counts but
/// logs as "not a valid character device", and which no cgroup can confine.
pub fn make_fake_gpu(path: &Path, index: u32) -> Result<(), String> {
    let made = FAKE_GPU_NUMBERS.get(index as usize).is_some_and(|(major, minor)| {
        Command::new("mknod")
            .arg(path)
            .args(["-m", "0666", "c", &major.to_string(), &minor.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !made {
        std::fs::write(path, b"").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn unique() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Parses the `KEY=VALUE` lines a job printed.
pub fn parse_env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// The device indices of a `CUDA_VISIBLE_DEVICES` value.
pub fn visible_set(value: &str) -> Vec<u32> {
    let mut v: Vec<u32> = value.split(',').filter_map(|s| s.trim().parse().ok()).collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_and_visible_sets() {
        let env = parse_env_lines("CUDA_VISIBLE_DEVICES=3,1\nSTART=1.5\nnoise\n");
        assert_eq!(visible_set(&env["CUDA_VISIBLE_DEVICES"]), vec![1, 3]);
        assert!(visible_set("").is_empty());
        assert_eq!(env["START"], "1.5");
    }

    #[test]
    fn free_ports_are_distinct_while_held() {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = free_port().unwrap();
        assert_ne!(p, a.local_addr().unwrap().port());
    }
}
