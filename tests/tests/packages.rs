//! The Debian packages (docs/packaging.md): `deploy/build-debs.sh`
//! builds them, lintian checks them, `dpkg -i` installs them on this
//! machine, the installed `cderd --check`, `man -w` and the SLURM demo run
//! against what was installed, and `dpkg --purge` leaves nothing but what
//! the admin created.
//!
//! Other tests load their plugins from the build dir, but slurmctld looks
//! in SLURM's own plugin folder first: a `job_submit_cder.so` installed
//! there would be theirs too. So everything from `dpkg -i` to the purge
//! runs in a mount namespace of its own in which an overlay (upper layer on
//! a tmpfs) covers that folder: the packaged plugins exist only there and
//! vanish with it. The rest of the install is real and is purged, on
//! failure too, by the guards below.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cder_tests::slurm::{require_slurm, serial, workspace_root, SLURM_PLUGIN_DIR};

const PACKAGES: [&str; 9] = [
    "cder-common",
    "cder-node",
    "cder-slurm",
    "cder-torque",
    "cder-glue-provider",
    "cder-jdl",
    "cder-vgpgpu",
    "cder-arc",
    "cder-blah",
];
const HOOK: &str = "/usr/libexec/cder/cder-torque-hook";
/// The mom_priv of distributions whose `PBS_HOME` is `/var/lib/torque`:
/// linked too, all five names (no admin hook there).
const OTHER_MOM_PRIV: &str = "/var/lib/torque/mom_priv";
const HOOK_NAMES: [&str; 5] = ["prologue", "prologue.parallel", "epilogue", "epilogue.parallel", "epilogue.precancel"];
const MOM_PRIV: &str = "/var/spool/torque/mom_priv";

fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into(), "/sbin".into()])
        .any(|d| d.join(program).is_file())
}

/// The packaging tools and SLURM; under `CI=true` a missing one fails.
fn require_tools() -> bool {
    if !require_slurm() {
        return false;
    }
    let missing: Vec<&str> = ["dpkg-buildpackage", "dh", "lintian", "man", "fakeroot", "unshare", "nsenter"]
        .into_iter()
        .filter(|p| !on_path(p))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let message = format!("missing {} (deploy/install-deps.sh installs them)", missing.join(", "));
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and a packaging tool is {message}");
    }
    cder_testkit::skipped(&message);
    false
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query").args(["-W", "-f=${Status}", package]).output().is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout).contains("ok installed")
            || String::from_utf8_lossy(&o.stdout).contains("config-files")
    })
}

/// A mount namespace held open by a `sleep`, with an overlay over SLURM's
/// plugin folder; commands enter it with nsenter. Dropping it ends the
/// namespace and with it the overlay.
struct Namespace {
    holder: Child,
    upper: tempfile::TempDir,
}

impl Namespace {
    fn new() -> Result<Namespace, String> {
        let upper = tempfile::Builder::new().prefix("cder-pkg-ns-").tempdir().map_err(|e| e.to_string())?;
        let holder = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sleep", "infinity"])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("unshare: {e}"))?;
        let ns = Namespace { holder, upper };
        let ours = std::fs::read_link("/proc/self/ns/mnt").map_err(|e| e.to_string())?;
        let made = cder_testkit::try_wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
            let mnt = std::fs::read_link(format!("/proc/{}/ns/mnt", ns.holder.id())).map_err(|e| e.to_string())?;
            Ok::<_, String>((mnt != ours).then_some(()))
        })?;
        if made.is_none() {
            return Err("unshare -m did not make a mount namespace".into());
        }
        let up = ns.upper.path().display().to_string();
        let script = format!(
            "set -e; mount -t tmpfs cder-pkg {up}; mkdir {up}/upper {up}/work; \
             mount -t overlay overlay -o lowerdir={SLURM_PLUGIN_DIR},upperdir={up}/upper,workdir={up}/work {SLURM_PLUGIN_DIR}"
        );
        ns.run("sh", &["-c", &script])?;
        Ok(ns)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t").arg(self.holder.id().to_string()).args(["-m", "--"]).arg(program).stdin(Stdio::null());
        c
    }

    /// Runs a command in the namespace; its output, or an error with it.
    fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self.command(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
        if out.status.success() {
            Ok(text(&out))
        } else {
            Err(format!("{program} {} failed ({}):\n{}", args.join(" "), out.status, text(&out)))
        }
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Purges the packages (in the namespace, where the plugins are) and
/// removes what the test made in place of an admin, whatever happened.
struct Cleanup<'a> {
    ns: &'a Namespace,
    made: Vec<PathBuf>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let present: Vec<&str> = PACKAGES.into_iter().filter(|p| installed(p)).collect();
        if !present.is_empty() {
            let mut args = vec!["--purge"];
            args.extend(present);
            if let Err(e) = self.ns.run("dpkg", &args) {
                eprintln!("cleanup: {e}");
            }
        }
        for p in self.made.iter().rev() {
            let _ = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
        }
    }
}

/// Every file and symlink a package ships (`dpkg-deb -c`), folders left out.
fn shipped(deb: &Path) -> Vec<String> {
    let out = Command::new("dpkg-deb").arg("-c").arg(deb).output().expect("dpkg-deb");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| p.trim_start_matches('.').to_string())
        .collect()
}

#[test]
fn packages_build_install_run_and_purge() {
    if !require_tools() {
        return;
    }
    let started = Instant::now();
    for p in PACKAGES {
        assert!(
            !installed(p),
            "{p} is already installed on this machine: the test installs and purges its own build, remove it first"
        );
    }

    // Build: the same target dir as the tests, so what the run built before is reused.
    let out_dir = tempfile::Builder::new().prefix("cder-debs-").tempdir().unwrap();
    let root = workspace_root();
    let target = cder_testkit::target_dir();
    let build = Command::new(root.join("deploy/build-debs.sh"))
        .arg(out_dir.path())
        .env("CARGO_TARGET_DIR", &target)
        // xz takes a minute on the -dbgsym packages and gains nothing there.
        .env("CDER_DEB_COMPRESSION", "-Zgzip -z1")
        .stdin(Stdio::null())
        .output()
        .expect("running deploy/build-debs.sh");
    assert!(build.status.success(), "deploy/build-debs.sh failed:\n{}", text(&build));
    eprintln!("packages: built in {:.0?}", started.elapsed());
    let debs: Vec<PathBuf> = PACKAGES
        .iter()
        .map(|p| {
            out_dir.path().join(format!(
                "{p}_0.1.0_{}.deb",
                if ["cder-common", "cder-arc", "cder-blah"].contains(p) { "all" } else { "amd64" }
            ))
        })
        .collect();
    for d in &debs {
        assert!(d.is_file(), "{} was not built; the build said:\n{}", d.display(), text(&build));
    }
    // The debug info went into -dbgsym packages, not into the binaries.
    let dbgsym: Vec<String> = std::fs::read_dir(out_dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("-dbgsym_"))
        .collect();
    for p in ["cder-node", "cder-slurm", "cder-torque", "cder-glue-provider", "cder-jdl", "cder-vgpgpu"] {
        assert!(
            dbgsym.iter().any(|n| n.starts_with(&format!("{p}-dbgsym_"))),
            "no {p}-dbgsym package among {dbgsym:?}"
        );
    }

    // lintian: clean, or each override explained in deploy/debian.
    let lint = Command::new("lintian").args(["--fail-on", "error,warning"]).args(&debs).output().expect("lintian");
    assert!(lint.status.success(), "lintian found errors or warnings:\n{}", text(&lint));

    // What an admin has before installing: a TORQUE node's mom_priv with a
    // hook of its own, and a file of its own in /etc/cder.
    let list = |dir: &str| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default()
    };
    // From the install to the purge no other SLURM cluster runs; the build
    // and lintian above may run beside one.
    let _one_cluster = serial();
    let mut etc_before = list("/etc/cder");
    let ns = Namespace::new().expect("a mount namespace with an overlay over SLURM's plugin folder");
    let mut cleanup = Cleanup { ns: &ns, made: Vec::new() };
    for dir in ["/var/spool/torque", "/var/lib/torque", OTHER_MOM_PRIV, "/etc/cder"] {
        if !Path::new(dir).exists() {
            std::fs::create_dir_all(dir).unwrap();
            cleanup.made.push(dir.into());
        }
    }
    std::fs::create_dir_all(MOM_PRIV).unwrap();
    let admin_hook = Path::new(MOM_PRIV).join("epilogue.precancel");
    let admin_file = Path::new("/etc/cder/site-local.toml");
    for f in [&admin_hook, &admin_file.to_path_buf()] {
        assert!(!f.exists(), "{} exists already; the test would not know whose it is", f.display());
        std::fs::write(f, "# the admin's own\n").unwrap();
        cleanup.made.push(f.clone());
    }

    let mut args = vec!["-i".to_string()];
    args.extend(debs.iter().map(|d| d.display().to_string()));
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let install = ns.run("dpkg", &args_ref).unwrap();
    eprintln!("packages: installed at {:.0?}", started.elapsed());
    for p in PACKAGES {
        assert!(installed(p), "{p} is not installed after dpkg -i:\n{install}");
    }

    // The node: config as a conffile, private state, a unit with the
    // packaged paths that nothing enabled, stripped binaries, man pages.
    let conffiles = Command::new("dpkg-query")
        .args(["-W", "-f=${Conffiles}", "cder-common", "cder-torque", "cder-blah"])
        .output()
        .unwrap();
    for f in ["/etc/cder/cder.toml", "/etc/cder/torque.toml", "/etc/cder/blah.conf"] {
        assert!(String::from_utf8_lossy(&conffiles.stdout).contains(f), "{f} is not a conffile: {}", text(&conffiles));
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let state = std::fs::metadata("/var/lib/cder").expect("/var/lib/cder after install");
    assert_eq!((state.uid(), state.permissions().mode() & 0o7777), (0, 0o700), "/var/lib/cder must be root's, 0700");
    let unit = std::fs::read_to_string("/lib/systemd/system/cderd.service").unwrap();
    assert!(
        unit.contains("ExecStart=/usr/sbin/cderd ") && !unit.contains("/usr/local"),
        "cderd.service has other paths:\n{unit}"
    );
    for u in ["cderd", "cder-registryd", "cder-vgpgpu-factory", "cder-torque-monitor", "cder-index-refresh"] {
        assert!(Path::new(&format!("/lib/systemd/system/{u}.service")).is_file(), "{u}.service not installed");
        assert!(
            !Path::new(&format!("/etc/systemd/system/multi-user.target.wants/{u}.service")).exists(),
            "{u} was enabled by the package"
        );
    }
    // The site's index refresher: its timer installed but not enabled, the
    // packaged path, and the account that owns the shared snapshots.
    let refresher = std::fs::read_to_string("/lib/systemd/system/cder-index-refresh.service").unwrap();
    assert!(
        refresher.contains("ExecStart=/usr/bin/cder-jdl index refresh ") && refresher.contains("User=cder-index"),
        "{refresher}"
    );
    assert!(Path::new("/lib/systemd/system/cder-index-refresh.timer").is_file(), "the refresh timer is not installed");
    assert!(!Path::new("/etc/systemd/system/timers.target.wants/cder-index-refresh.timer").exists());
    assert!(Command::new("getent").args(["passwd", "cder-index"]).status().unwrap().success(), "no user cder-index");
    for bin in ["/usr/sbin/cderd", "/usr/bin/cderctl", "/usr/bin/cder-jdl", HOOK] {
        let sections = Command::new("readelf").args(["-S", "-W", bin]).output().unwrap();
        assert!(!String::from_utf8_lossy(&sections.stdout).contains(".debug_info"), "{bin} still carries debug info");
    }
    let check = ns
        .run("/usr/sbin/cderd", &["--check"])
        .expect("the installed cderd --check with the packaged /etc/cder/cder.toml");
    eprintln!("cderd --check: {}", check.trim());
    for page in
        [&["cderd"][..], &["cderctl-alloc"], &["5", "cder.toml"], &["cder-torque-hook"], &["cder-jdl-list-match"]]
    {
        let where_ = ns.run("man", &[&["-w"][..], page].concat()).unwrap_or_else(|e| panic!("man -w {page:?}: {e}"));
        assert!(where_.trim().starts_with("/usr/share/man/"), "man -w {page:?}: {where_}");
    }

    // TORQUE: the one hook linked under each free name, the admin's own kept.
    for name in HOOK_NAMES {
        let p = Path::new(MOM_PRIV).join(name);
        if name == "epilogue.precancel" {
            assert_eq!(std::fs::read_to_string(&p).unwrap(), "# the admin's own\n", "the admin's {name} was replaced");
        } else {
            assert_eq!(
                std::fs::read_link(&p).ok(),
                Some(PathBuf::from(HOOK)),
                "{} is not a link to the hook",
                p.display()
            );
            // What pbs_mom's stat() sees through the link: root's, no one else may write.
            let m = std::fs::metadata(&p).unwrap();
            assert!(
                m.uid() == 0 && m.permissions().mode() & 0o022 == 0 && m.permissions().mode() & 0o100 != 0,
                "{name}: {:o}",
                m.permissions().mode()
            );
            // Run by the link's name, the hook knows its role: a prologue
            // without pbs_mom's argv aborts the job (1), an epilogue never
            // fails (0); under a name it does not know it would exit 2.
            let run = Command::new(&p).stdin(Stdio::null()).output().unwrap();
            let expected = if name.starts_with("prologue") { 1 } else { 0 };
            assert_eq!(run.status.code(), Some(expected), "{name} run through its link: {}", text(&run));
        }
    }
    for name in HOOK_NAMES {
        let p = Path::new(OTHER_MOM_PRIV).join(name);
        assert_eq!(std::fs::read_link(&p).ok(), Some(PathBuf::from(HOOK)), "{} is not a link to the hook", p.display());
    }
    // The monitor's unit runs as the system user the package made.
    let monitor = std::fs::read_to_string("/lib/systemd/system/cder-torque-monitor.service").unwrap();
    assert!(
        monitor.contains("User=cder-monitor\n") && monitor.contains("ExecStart=/usr/bin/cder-torque-monitor "),
        "{monitor}"
    );
    let user = Command::new("getent").args(["passwd", "cder-monitor"]).output().unwrap();
    let fields: Vec<String> = text(&user).trim().split(':').map(str::to_string).collect();
    assert!(user.status.success() && fields.len() == 7, "no cder-monitor user after install: {}", text(&user));
    let uid: u32 = fields[2].parse().unwrap();
    assert!(
        uid < 1000 && (fields[6].ends_with("nologin") || fields[6].ends_with("false")),
        "cder-monitor is not a system user: {fields:?}"
    );

    // The GLUE provider publishes nothing until the admin configures it.
    let provider = ns.run("/var/lib/bdii/gip/provider/cder-glue-provider", &[]).expect("the BDII provider wrapper");
    assert!(provider.trim().is_empty(), "an unconfigured provider published:\n{provider}");

    // The SLURM demo, with the installed plugins and cderd.
    let demo_bin = cder_tests::bdii::built_binary("cder-demos", "cder-slurm-demo").unwrap_or_else(|e| panic!("{e}"));
    let mut demo = ns.command(demo_bin.to_str().expect("a UTF-8 target path"));
    demo.env("CDER_TESTS_INSTALLED", "1");
    let demo = demo.output().expect("cder-slurm-demo");
    let shown = text(&demo);
    assert!(demo.status.success(), "the SLURM demo failed with the installed plugins:\n{shown}");
    assert!(
        shown.contains(&format!("plugstack.conf: required {SLURM_PLUGIN_DIR}/spank_cder.so")),
        "the demo did not load the installed SPANK plugin:\n{shown}"
    );
    assert!(shown.contains("GPUs disjoint: yes"), "{shown}");
    eprintln!("packages: demo done at {:.0?}", started.elapsed());

    // Purge: nothing of the packages left, the admin's files kept.
    let files: BTreeSet<String> = debs.iter().flat_map(|d| shipped(d)).collect();
    let mut purge = vec!["--purge"];
    purge.extend(PACKAGES);
    ns.run("dpkg", &purge).unwrap();
    for p in PACKAGES {
        assert!(!installed(p), "{p} is still known to dpkg after --purge");
    }
    let left: Vec<String> = files
        .iter()
        .filter(|f| ns.run("test", &["-e", f]).is_ok() || std::fs::symlink_metadata(f).is_ok())
        .cloned()
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    for gone in ["/var/lib/cder", "/run/cder"] {
        assert!(!Path::new(gone).exists(), "{gone} is left after purge");
    }
    for name in HOOK_NAMES.iter().filter(|n| **n != "epilogue.precancel") {
        assert!(std::fs::symlink_metadata(Path::new(MOM_PRIV).join(name)).is_err(), "{name} link left after purge");
    }
    for name in HOOK_NAMES {
        assert!(
            std::fs::symlink_metadata(Path::new(OTHER_MOM_PRIV).join(name)).is_err(),
            "{OTHER_MOM_PRIV}/{name} link left after purge"
        );
    }
    assert!(admin_hook.is_file() && admin_file.is_file(), "purge removed what the admin created");
    etc_before.insert("site-local.toml".into());
    assert_eq!(list("/etc/cder"), etc_before, "/etc/cder after purge: only what was there and the admin's file");
    drop(cleanup);
    eprintln!("packages: whole test {:.0?}", started.elapsed());
}
