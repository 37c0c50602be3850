//! A real NorduGrid ARC CE on loopback in a temp dir: A-REX 6 (Debian's
//! `nordugrid-arc-arex`) with its REST interface and the SLURM backend,
//! started by ARC's own `arc-arex-start` / `arc-arex-ws-start` with a
//! private arc.conf, a test CA, host and user certificates made by
//! `arcctl test-ca` inside the temp dir, RTEs from the workspace's
//! `deploy/arc` enabled with `arcctl rte enable`, and optionally ARC's LDAP
//! infosys (ARC's slapd config and `bdii-update` with ARC's providers and a
//! plugin of the test's choosing).
//!
//! Nothing is written outside the temp dir except
//! `/run/arc/arc-infosys-ldap.conf` and `/run/arc/arcctl.runtime.conf`,
//! where ARC's `create-*-config` scripts and `arcctl` always put the config
//! they parsed. What the harness changes in ARC's
//! generated files, each for a reason that is written next to it:
//! - the web service's XML gets `<tcp:Interface>127.0.0.1</tcp:Interface>`
//!   (ARC binds every interface; there is no arc.conf option), through an
//!   `arched` wrapper found via `ARC_LOCATION`, which also sets A-REX's
//!   `InfoproviderWakeupPeriod` to 5 s (fixed at 60 s by the start scripts;
//!   REST job states and the infosys come from that infoprovider, so a job
//!   that ends would show Finished up to a minute late);
//! - the infosys slapd config loses its `cachesize` lines (ARC 6.17 writes
//!   them for every backend, Debian 12's slapd has only mdb, which refuses
//!   them), and slapd is started on `ldap://127.0.0.1:PORT` only (ARC's
//!   command line names `localhost` and `127.0.0.1`, the same socket twice);
//! - `bdii-update` runs with the `ldapadd -h/-p` shims of [`crate::bdii`]
//!   and `BDII_HOSTNAME=127.0.0.1`.
//!
//! `Drop` stops A-REX, the web service, slapd and bdii-update (process
//! groups and pids of what it started), then any process still naming the
//! temp dir (ARC's provider waits on a fifo in it forever).

use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use cder_testkit::require_programs;

/// ARC's start scripts and tools a test runs.
pub const ARC_PROGRAMS: [&str; 9] = [
    "/usr/share/arc/arc-arex-start",
    "/usr/share/arc/arc-arex-ws-start",
    "/usr/sbin/arched",
    "/usr/sbin/arcctl",
    "/usr/bin/arcproxy",
    "/usr/bin/arcsub",
    "/usr/bin/arcstat",
    "/usr/bin/arcget",
    "/usr/bin/openssl",
];

/// ARC's LDAP infosys pieces.
pub const ARC_INFOSYS: [&str; 4] = [
    "/usr/share/arc/create-slapd-config",
    "/usr/share/arc/create-bdii-config",
    "/usr/sbin/bdii-update",
    "/usr/sbin/slapd",
];

/// Checks that ARC (and, with `infosys`, its LDAP infosys) is installed;
/// under `CI=true` a missing piece fails the test.
pub fn require_arc(infosys: bool) -> bool {
    let mut want: Vec<&str> = ARC_PROGRAMS.to_vec();
    if infosys {
        want.extend(ARC_INFOSYS);
    }
    require_programs(&want)
}

/// The ExecutionEnvironment ARC's infosys publishes for the one node type
/// of a test cluster (ARC names them `execenv0`, `execenv1`, …).
pub const ARC_EE: &str = "urn:ogf:ExecutionEnvironment:localhost:execenv0";

/// A `cder-glue-provider` config for ARC mode on a test CE: ARC's own IDs,
/// the cluster's one node with 4 devices, counts from cderd's `socket`.
pub fn provider_config(socket: &Path) -> String {
    format!(
        "[site]\ncomputing_service_id = \"urn:ogf:ComputingService:localhost:arex\"\n\
         computing_manager_id = \"urn:ogf:ComputingManager:localhost:slurm\"\nce_unique_id = \"localhost\"\n\n\
         [counts]\nsource = \"cderd\"\nsocket = \"{}\"\n\n\
         [[group]]\nid = \"{ARC_EE}\"\nnodes = [\"node1\"]\nplatform = \"amd64\"\nmain_memory_mib = 1000\n\n\
         [[group.device]]\nmodel = \"Tesla K20m\"\ncount = 4\nmemory_mib = 4800\ncompute_capability = \"3.5\"\n",
        socket.display()
    )
}

/// The BDII plugin (name, script) that runs `provider --arc-plugin` with `config`.
pub fn cder_plugin(provider: &Path, config: &Path) -> (String, String) {
    (
        "cder-glue-provider".into(),
        format!("#!/bin/sh\nexec {} --config {} --arc-plugin\n", provider.display(), config.display()),
    )
}

/// How to set the CE up.
#[derive(Debug, Clone, Default)]
pub struct ArcOptions {
    /// The cluster's slurm.conf (A-REX's `SLURM_CONF`).
    pub slurm_conf: PathBuf,
    /// RTEs under deploy/arc to enable (`ENV/GPGPU`).
    pub rtes: Vec<String>,
    /// Run ARC's LDAP infosys too.
    pub infosys: bool,
    /// With `infosys`: BDII plugins (file name, script text) installed into
    /// bdii-update's plugin dir.
    pub bdii_plugins: Vec<(String, String)>,
}

/// A running ARC CE.
pub struct ArcCe {
    dir: tempfile::TempDir,
    /// `https://localhost:PORT/arex`: the REST endpoint, `arcsub -C`'s argument.
    pub rest_url: String,
    /// ARC's LDAP infosys port on 127.0.0.1 (with `infosys`).
    pub ldap_port: Option<u16>,
    /// The grid user's certificate subject.
    pub user_dn: String,
    children: Vec<Child>,
    bdii_pid: Option<i32>,
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<Output, String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: exit {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

fn write_exec(path: &Path, text: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

fn wait_port(
    port: u16,
    timeout: Duration,
    children: &mut [Child],
    what: &str,
    log: &dyn Fn() -> String,
) -> Result<(), String> {
    let open = cder_testkit::try_wait_for(timeout, Duration::from_millis(200), || {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(Some(()));
        }
        for c in children.iter_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(format!("{what}: a process exited ({st}) before port {port} opened\n{}", log()));
            }
        }
        Ok(None)
    })?;
    open.ok_or_else(|| format!("{what}: port {port} not open within {timeout:?}\n{}", log()))
}

impl ArcCe {
    /// Makes the CA and certificates, writes arc.conf, enables the RTEs,
    /// starts A-REX and its web service (and the infosys), makes the user's
    /// proxy, and waits until the REST port answers.
    pub fn start(options: &ArcOptions) -> Result<ArcCe, String> {
        let dir = tempfile::Builder::new().prefix("cder-arc-").tempdir().map_err(|e| e.to_string())?;
        let d = dir.path().to_path_buf();
        for sub in
            ["certificates", "host", "user", "control", "session", "tmp", "log", "run", "home", "arcloc/sbin", "shim"]
        {
            std::fs::create_dir_all(d.join(sub)).map_err(|e| e.to_string())?;
        }
        // Jobs run as the mapped account (nobody) in session/; A-REX's SLURM
        // scan wants a sticky, world-writable tmpdir.
        let _ = Command::new("chmod")
            .args(["0755", &d.display().to_string(), &d.join("session").display().to_string()])
            .status();
        let _ = Command::new("chmod").args(["1777", &d.join("tmp").display().to_string()]).status();
        let (rest_port, ldap_port) = (free_port()?, free_port()?);
        let rest_url = format!("https://localhost:{rest_port}/arex");
        let p = |s: &str| d.join(s).display().to_string();
        let runtimedir = crate::slurm::workspace_root().join("deploy/arc");

        let infosys = if options.infosys {
            format!(
                "\n[infosys/ldap]\nhostname = localhost\nslapd_hostnamebind = 127.0.0.1\nport = {ldap_port}\nuser = root\n\
                 bdii_database = mdb\ninfosys_ldap_run_dir = {is}\nbdii_run_dir = {b}/run\nbdii_log_dir = {b}/log\n\
                 bdii_tmp_dir = {b}/tmp\nbdii_var_dir = {b}/var\nbdii_update_pid_file = {b}/run/bdii-update.pid\n\
                 bdii_breathe_time = 2\n\n[infosys/glue2/ldap]\n",
                is = p("infosys"),
                b = p("bdii")
            )
        } else {
            String::new()
        };
        let conf = format!(
            "# Written by cder-tests: an ARC CE on loopback (tests/src/arc.rs).\n\
             [common]\nhostname = localhost\nx509_host_cert = {host}/host-localhost-cert.pem\nx509_host_key = {host}/host-localhost-key.pem\n\
             x509_cert_dir = {certs}\n\n\
             [authgroup:griduser]\nfile = {allowed}\n\n\
             [mapping]\nmap_to_user = griduser nobody:nogroup\n\n\
             [lrms]\nlrms = slurm\nslurm_use_sacct = no\nslurm_wakeupperiod = 2\nslurm_bin_path = /usr/bin\n\n\
             [arex]\ncontroldir = {control}\nsessiondir = {session}\nruntimedir = {runtimedir}\ntmpdir = {tmp}\n\
             logfile = {log}/arex.log\npidfile = {run}/arex.pid\nwakeupperiod = 2\nloglevel = 3\n\n\
             [arex/ws]\nwsurl = {rest_url}\nlogfile = {log}/ws.log\npidfile = {run}/ws.pid\n\n\
             [arex/ws/jobs]\nallowaccess = griduser\n\n\
             [infosys]\nlogfile = {log}/infoprovider.log\n\n[infosys/glue2]\n\n[infosys/cluster]\n{infosys}\n[queue:debug]\n",
            host = p("host"),
            certs = p("certificates"),
            allowed = p("allowed-subjects"),
            control = p("control"),
            session = p("session"),
            runtimedir = runtimedir.display(),
            tmp = p("tmp"),
            log = p("log"),
            run = p("run"),
        );
        let arc_conf = d.join("arc.conf");
        std::fs::write(&arc_conf, conf).map_err(|e| e.to_string())?;
        let arcctl = |args: &[&str], cwd: &Path| {
            let mut c = Command::new("/usr/sbin/arcctl");
            c.arg("-c").arg(&arc_conf).args(args).current_dir(cwd);
            c
        };

        // The CA, host and user certificates, all in the temp dir
        // (`--ca-dir`; `hostcert -n` and `usercert` write to the cwd;
        // `--no-auth` keeps /etc/grid-security/testCA.allowed-subjects as is).
        let ca = ["test-ca", "--ca-dir", &p("certificates"), "--ca-id", "cder"];
        run_ok(&mut arcctl(&[&ca[..], &["init"]].concat(), &d), "arcctl test-ca init")?;
        run_ok(
            &mut arcctl(&[&ca[..], &["hostcert", "-n", "localhost"]].concat(), &d.join("host")),
            "arcctl test-ca hostcert",
        )?;
        run_ok(
            &mut arcctl(&[&ca[..], &["usercert", "-n", "cder grid user", "--no-auth"]].concat(), &d.join("user")),
            "arcctl test-ca usercert",
        )?;
        let subject = run_ok(
            Command::new("openssl")
                .args(["x509", "-noout", "-subject", "-nameopt", "compat", "-in"])
                .arg(d.join("user/client-cder-grid-user-cert.pem")),
            "openssl x509 -subject",
        )?;
        let user_dn = String::from_utf8_lossy(&subject.stdout).trim().trim_start_matches("subject=").trim().to_string();
        std::fs::write(d.join("allowed-subjects"), format!("\"{user_dn}\"\n")).map_err(|e| e.to_string())?;
        // Without it arc-arex-ws-start spends minutes in `openssl dhparam 4096`.
        run_ok(
            Command::new("openssl")
                .args(["genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", "group:ffdhe2048", "-out"])
                .arg(d.join("control/dhparam.pem")),
            "openssl genpkey -genparam",
        )?;
        for rte in &options.rtes {
            run_ok(&mut arcctl(&["rte", "enable", rte], &d), &format!("arcctl rte enable {rte}"))?;
            if !d.join("control/rte/enabled").join(rte).exists() {
                return Err(format!("arcctl rte enable {rte} made no link in control/rte/enabled"));
            }
        }

        // ARC_LOCATION for both daemons: ARC's own files, but an arched that
        // edits the XML the start scripts generate (see the module doc).
        let loc = d.join("arcloc");
        for (name, target) in
            [("lib", "/usr/lib"), ("share", "/usr/share"), ("libexec", "/usr/libexec"), ("bin", "/usr/bin")]
        {
            std::os::unix::fs::symlink(target, loc.join(name)).map_err(|e| e.to_string())?;
        }
        write_exec(
            &loc.join("sbin/arched"),
            "#!/bin/sh\n# ARC's start scripts exec arched -c <generated XML>: bind its TCP listener to\n\
             # loopback, and run the GLUE2 infoprovider (job states for REST, the infosys) every 5 s, not 60.\n\
             prev=\nfor a in \"$@\"; do\n  if [ \"$prev\" = -c ]; then\n    \
             sed -i -e 's#<tcp:Listen><tcp:Port>#<tcp:Listen><tcp:Interface>127.0.0.1</tcp:Interface><tcp:Port>#' \\\n      \
             -e 's#<arex:gmconfig>#<arex:InfoproviderWakeupPeriod>5</arex:InfoproviderWakeupPeriod><arex:gmconfig>#' \"$a\" || exit 1\n  fi\n  prev=$a\ndone\n\
             exec /usr/sbin/arched \"$@\"\n",
        )?;

        let mut ce = ArcCe {
            dir,
            rest_url,
            ldap_port: options.infosys.then_some(ldap_port),
            user_dn,
            children: Vec::new(),
            bdii_pid: None,
        };
        let spawn = |script: &str, log: &str, arc_location: &Path| -> Result<Child, String> {
            let mut c = Command::new(script);
            c.arg("-f")
                .env("ARC_CONFIG", &arc_conf)
                .env("SLURM_CONF", &options.slurm_conf)
                .env("TMPDIR", d.join("tmp"))
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .stdin(Stdio::null())
                .env("ARC_LOCATION", arc_location)
                .process_group(0);
            let out = std::fs::File::create(d.join("log").join(log)).map_err(|e| e.to_string())?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            c.stdout(out).stderr(err).spawn().map_err(|e| format!("{script}: {e}"))
        };
        // The infosys first, so that it reads A-REX's first infoprovider run
        // (ARC's LDIF provider waits on a fifo that run notifies).
        if options.infosys {
            ce.start_infosys(&arc_conf, ldap_port, options)?;
        }
        ce.children.push(spawn("/usr/share/arc/arc-arex-start", "arex.out", &loc)?);
        ce.children.push(spawn("/usr/share/arc/arc-arex-ws-start", "ws.out", &loc)?);
        let logs = || ce_logs(&d);
        wait_port(rest_port, Duration::from_secs(60), &mut ce.children, "A-REX web service", &logs)?;
        // A listening port is not a ready A-REX: it serves its REST `info`
        // (and arcsub's brokering) from what its infoprovider wrote into the
        // control dir, so it is ready once that first run has written it.
        let info = d.join("control").join("info.xml");
        let written = cder_testkit::try_wait_for(Duration::from_secs(120), Duration::from_millis(200), || {
            if std::fs::metadata(&info).is_ok_and(|m| m.len() > 0) {
                return Ok(Some(()));
            }
            for c in ce.children.iter_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    return Err(format!(
                        "A-REX: a process exited ({st}) before its first infoprovider run\n{}",
                        logs()
                    ));
                }
            }
            Ok(None)
        })?;
        written.ok_or_else(|| format!("A-REX: no {} within 120 s of start\n{}", info.display(), logs()))?;
        let out = ce.client("arcproxy").output().map_err(|e| format!("arcproxy: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "arcproxy failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(ce)
    }

    fn start_infosys(&mut self, arc_conf: &Path, port: u16, options: &ArcOptions) -> Result<(), String> {
        let d = self.dir.path().to_path_buf();
        for script in ["/usr/share/arc/create-slapd-config", "/usr/share/arc/create-bdii-config"] {
            run_ok(Command::new(script).env("ARC_CONFIG", arc_conf), script)?;
        }
        let slapd_conf = d.join("infosys/bdii-slapd.conf");
        let text = std::fs::read_to_string(&slapd_conf).map_err(|e| format!("{}: {e}", slapd_conf.display()))?;
        let text: String =
            text.lines().filter(|l| !l.trim_start().starts_with("cachesize")).map(|l| format!("{l}\n")).collect();
        std::fs::write(&slapd_conf, text).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(d.join("log/slapd.out")).map_err(|e| e.to_string())?;
        let slapd = Command::new("/usr/sbin/slapd")
            .arg("-f")
            .arg(&slapd_conf)
            .args(["-h", &format!("ldap://127.0.0.1:{port}"), "-u", "root", "-d", "0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("slapd: {e}"))?;
        self.children.push(slapd);
        let logs = || ce_logs(&d);
        let n = self.children.len();
        wait_port(port, Duration::from_secs(30), &mut self.children[n - 1..], "ARC's infosys slapd", &logs)?;

        let bdii_conf = d.join("infosys/bdii.conf");
        let mut text = std::fs::read_to_string(&bdii_conf).map_err(|e| e.to_string())?;
        text.push_str("BDII_HOSTNAME=127.0.0.1\n");
        std::fs::write(&bdii_conf, text).map_err(|e| e.to_string())?;
        for tool in ["ldapadd", "ldapmodify", "ldapdelete", "ldapsearch"] {
            crate::bdii::write_shim(&d.join("shim"), tool)?;
        }
        for (name, script) in &options.bdii_plugins {
            write_exec(&d.join("bdii/tmp/plugin").join(name), script)?;
        }
        let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", d.join("shim").display());
        run_ok(
            Command::new("/usr/sbin/bdii-update").arg("-c").arg(&bdii_conf).arg("-d").env("PATH", path),
            "bdii-update -d",
        )?;
        let pid_file = d.join("bdii/run/bdii-update.pid");
        self.bdii_pid = cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(100), || {
            std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok())
        });
        if self.bdii_pid.is_none() {
            return Err(format!("bdii-update wrote no pid file\n{}", self.logs()));
        }
        Ok(())
    }

    /// The temp dir.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A-REX's control dir (`job.<ID>.local`, `.errors`, `.status`).
    pub fn control_dir(&self) -> PathBuf {
        self.dir.path().join("control")
    }

    /// `ldap://127.0.0.1:PORT` of ARC's infosys.
    pub fn ldap_url(&self) -> Option<String> {
        self.ldap_port.map(|p| format!("ldap://127.0.0.1:{p}"))
    }

    /// An ARC client command (arcsub, arcstat, arcget, or cder-jdl running
    /// arcsub) as the grid user: the test CA, the user's certificate and
    /// proxy, and a HOME of its own for `~/.arc/jobs.dat`.
    pub fn client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let d = self.dir.path();
        let mut c = Command::new(program);
        c.env("X509_USER_CERT", d.join("user/client-cder-grid-user-cert.pem"))
            .env("X509_USER_KEY", d.join("user/client-cder-grid-user-key.pem"))
            .env("X509_USER_PROXY", d.join("user/proxy.pem"))
            .env("X509_CERT_DIR", d.join("certificates"))
            .env("HOME", d.join("home"))
            .current_dir(d.join("home"))
            .stdin(Stdio::null());
        c
    }

    /// A-REX's own ID of a job (the last path element of the REST job ID).
    pub fn local_id(job_id: &str) -> &str {
        job_id.rsplit('/').next().unwrap_or(job_id)
    }

    /// The SLURM job ID A-REX recorded for `arex_id` (`localid=` in
    /// `job.<ID>.local`), once it has submitted it.
    pub fn slurm_id(&self, arex_id: &str) -> Option<u32> {
        let text = std::fs::read_to_string(self.control_dir().join(format!("job.{arex_id}.local"))).ok()?;
        text.lines().find_map(|l| l.strip_prefix("localid=")).and_then(|v| v.trim().parse().ok())
    }

    /// A-REX's log of a job: RTE output, batch script, sbatch's answer,
    /// state changes with times.
    pub fn job_errors(&self, arex_id: &str) -> String {
        std::fs::read_to_string(self.control_dir().join(format!("job.{arex_id}.errors"))).unwrap_or_default()
    }

    /// The logs, for a failing test's message.
    pub fn logs(&self) -> String {
        ce_logs(self.dir.path())
    }
}

fn ce_logs(d: &Path) -> String {
    let mut s = String::new();
    for f in [
        "log/arex.out",
        "log/ws.out",
        "log/arex.log",
        "log/ws.log",
        "log/infoprovider.log",
        "log/slapd.out",
        "bdii/log/bdii-update.log",
    ] {
        let text = std::fs::read(d.join(f)).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        s.push_str(&format!("--- {f} (last 30 lines)\n{tail}\n"));
    }
    s
}

impl Drop for ArcCe {
    fn drop(&mut self) {
        if let Some(pid) = self.bdii_pid {
            let _ = Command::new("kill").arg(pid.to_string()).stderr(Stdio::null()).status();
        }
        // Each daemon leads its own process group: the scripts exec arched,
        // which runs the infoprovider and the SLURM scan as children.
        for c in &self.children {
            let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", c.id())]).stderr(Stdio::null()).status();
        }
        // Those still there after 10 s get SIGKILL below.
        let _ = cder_testkit::wait_for_value(Duration::from_secs(10), Duration::from_millis(100), || {
            self.children.iter_mut().all(|c| c.try_wait().ok().flatten().is_some()).then_some(())
        });
        for c in &mut self.children {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", c.id())]).stderr(Stdio::null()).status();
            let _ = c.wait();
        }
        // What is left of ours names the temp dir (ARC's LDIF provider
        // blocks on its fifo; bdii-update's children have groups of their own).
        let me = self.dir.path().display().to_string();
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for p in procs.flatten() {
                let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
                if pid != std::process::id() && String::from_utf8_lossy(&cmdline).contains(&me) {
                    let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status();
                }
            }
        }
        if std::env::var_os("CDER_KEEP_TMP").is_some() {
            let kept = std::mem::replace(&mut self.dir, tempfile::tempdir().expect("tempdir"));
            eprintln!("kept {}", kept.keep().display());
        }
    }
}
