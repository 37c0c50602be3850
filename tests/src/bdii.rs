//! A real `bdii-update` daemon feeding a [`Slapd`] from a temp provider
//! directory, as a site BDII runs.
//!
//! Debian's `bdii-update` calls `ldapadd -h host -p port`, which OpenLDAP
//! 2.5 no longer accepts; a PATH shim directory holds `ldapadd`,
//! `ldapmodify`, `ldapdelete` and `ldapsearch` scripts that rewrite those
//! options to `-H ldap://host:port` and exec the real tool.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cder_testkit::require_programs;

use crate::ldap::{Slapd, SlapdOptions};

/// Debian's BDII updater.
pub const BDII_UPDATE: &str = "/usr/sbin/bdii-update";
/// BDII's top entries.
pub const DEFAULT_LDIF: &str = "/usr/share/bdii/default.ldif";

/// Everything a BDII test needs from the system (see [`cder_testkit::require_programs`]).
pub fn require_bdii() -> bool {
    crate::ldap::require_slapd()
        && require_programs(&[BDII_UPDATE, DEFAULT_LDIF, "python3", "ldapmodify", "ldapdelete"])
}

/// How to run bdii-update.
#[derive(Debug, Clone)]
pub struct BdiiOptions {
    /// Seconds between update cycles (`BDII_BREATHE_TIME`).
    pub breathe_time: f64,
    /// Seconds a provider may run (`BDII_READ_TIMEOUT`).
    pub read_timeout: u64,
    /// Seconds an entry that vanished from the providers' output is kept
    /// (`BDII_DELETE_DELAY`): what keeps the last good data while a provider fails.
    pub delete_delay: u64,
    /// How to run the slapd that bdii-update writes into.
    pub slapd: SlapdOptions,
}

impl Default for BdiiOptions {
    fn default() -> Self {
        BdiiOptions { breathe_time: 1.0, read_timeout: 60, delete_delay: 0, slapd: SlapdOptions::default() }
    }
}

/// slapd plus a running `bdii-update -d`. Dropping it stops both.
pub struct Bdii {
    /// The slapd the updater writes to; query it with [`Slapd::search`].
    pub slapd: Slapd,
    root: PathBuf,
    pid: Option<i32>,
}

impl Bdii {
    /// Starts slapd (BDII config) and prepares the updater's directories;
    /// install providers into [`Bdii::provider_dir`], then call [`Bdii::run`].
    pub fn new(options: &BdiiOptions) -> Result<Bdii, String> {
        let slapd = Slapd::start(&options.slapd)?;
        let root = slapd.dir().join("bdii");
        for sub in ["ldif", "provider", "plugin", "var", "run", "shim"] {
            std::fs::create_dir_all(root.join(sub)).map_err(|e| e.to_string())?;
        }
        std::fs::copy(DEFAULT_LDIF, root.join("ldif/default.ldif")).map_err(|e| format!("{DEFAULT_LDIF}: {e}"))?;
        let conf = format!(
            "BDII_LOG_FILE={root}/bdii-update.log\nBDII_PID_FILE={root}/run/bdii-update.pid\nBDII_RUN_DIR={root}/run\n\
             BDII_LOG_LEVEL=INFO\nBDII_LDIF_DIR={root}/ldif\nBDII_PROVIDER_DIR={root}/provider\nBDII_PLUGIN_DIR={root}/plugin\n\
             BDII_HOSTNAME=127.0.0.1\nBDII_PORT={port}\nBDII_BREATHE_TIME={breathe}\nBDII_READ_TIMEOUT={read}\n\
             BDII_ARCHIVE_SIZE=0\nBDII_DELETE_DELAY={delay}\nBDII_VAR_DIR={root}/var\nSLAPD_CONF={conf}\n",
            root = root.display(),
            port = slapd.port(),
            breathe = options.breathe_time,
            read = options.read_timeout,
            delay = options.delete_delay,
            conf = slapd.conf().display(),
        );
        std::fs::write(root.join("bdii.conf"), conf).map_err(|e| e.to_string())?;
        for tool in ["ldapadd", "ldapmodify", "ldapdelete", "ldapsearch"] {
            write_shim(&root.join("shim"), tool)?;
        }
        Ok(Bdii { slapd, root, pid: None })
    }

    /// The directory bdii-update runs providers from.
    pub fn provider_dir(&self) -> PathBuf {
        self.root.join("provider")
    }

    /// The directory of static LDIF files bdii-update loads every cycle
    /// (`BDII_LDIF_DIR`), where a site puts what no provider prints.
    pub fn ldif_dir(&self) -> PathBuf {
        self.root.join("ldif")
    }

    /// The updater's log (`BDII_LOG_FILE`).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("bdii-update.log")).unwrap_or_default()
    }

    /// Starts `bdii-update -d` (it daemonizes and writes its pid file).
    pub fn run(&mut self) -> Result<(), String> {
        let path = format!(
            "{}:{}",
            self.root.join("shim").display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let status = Command::new(BDII_UPDATE)
            .arg("-c")
            .arg(self.root.join("bdii.conf"))
            .arg("-d")
            .env("PATH", path)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {BDII_UPDATE}: {e}"))?;
        if !status.success() {
            return Err(format!("{BDII_UPDATE} -d exited {status}: {}", self.log()));
        }
        let pid_file = self.root.join("run/bdii-update.pid");
        let pid = cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(100), || {
            std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok())
        });
        match pid {
            Some(pid) => {
                self.pid = Some(pid);
                Ok(())
            }
            None => Err(format!("bdii-update wrote no pid file: {}", self.log())),
        }
    }

    /// Stops bdii-update (SIGTERM to the pid of its pid file, as its init
    /// script does) and waits for it to exit; [`Bdii::run`] starts it again.
    pub fn stop(&mut self) -> Result<(), String> {
        let Some(pid) = self.pid.take() else { return Ok(()) };
        let _ = Command::new("kill").arg(pid.to_string()).status();
        // Gone, or a zombie its new parent has not reaped yet.
        let running = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
        };
        if cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(50), || {
            (!running()).then_some(())
        })
        .is_none()
        {
            return Err(format!("bdii-update (pid {pid}) did not exit on SIGTERM: {}", self.log()));
        }
        // A stale pid file would pass for the next daemon's.
        let _ = std::fs::remove_file(self.root.join("run/bdii-update.pid"));
        Ok(())
    }

    /// How many update cycles have finished (the log says "Sleeping" after each).
    pub fn cycles(&self) -> usize {
        self.log().matches("Sleeping for").count()
    }

    /// Waits until `n` more cycles than `after` have finished.
    pub fn wait_cycles(&self, after: usize, n: usize, timeout: Duration) -> Result<usize, String> {
        cder_testkit::wait_for_value(timeout, Duration::from_millis(100), || {
            let done = self.cycles();
            (done >= after + n).then_some(done)
        })
        .ok_or_else(|| {
            format!(
                "bdii-update finished {} cycles, wanted {} within {timeout:?}; log:\n{}",
                self.cycles(),
                after + n,
                self.log()
            )
        })
    }
}

impl Drop for Bdii {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            // The daemon's own pid, from its pid file: only the process we started.
            let _ = Command::new("kill").arg(pid.to_string()).status();
            // Dropping: a daemon still there after 5 s is left to its fate.
            let _ = cder_testkit::wait_for_value(Duration::from_secs(5), Duration::from_millis(50), || {
                (!Path::new(&format!("/proc/{pid}")).exists()).then_some(())
            });
        }
    }
}

/// Writes a shim for `tool` into `dir`: `-h HOST -p PORT` → `-H ldap://HOST:PORT`.
pub fn write_shim(dir: &Path, tool: &str) -> Result<(), String> {
    let real = ["/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.exists())
        .ok_or_else(|| format!("{tool} is not installed"))?;
    let script = format!(
        r#"#!/bin/sh
# bdii-update passes -h HOST -p PORT (OpenLDAP < 2.5); rewrite to -H ldap://HOST:PORT.
host=; port=389
n=$#
i=0
while [ $i -lt $n ]; do
  a=$1; shift; i=$((i+1))
  case "$a" in
    -h) host=$1; shift; i=$((i+1));;
    -p) port=$1; shift; i=$((i+1));;
    *) set -- "$@" "$a";;
  esac
done
if [ -n "$host" ]; then set -- -H "ldap://$host:$port" "$@"; fi
exec {real} "$@"
"#,
        real = real.display()
    );
    let path = dir.join(tool);
    std::fs::write(&path, script).map_err(|e| e.to_string())?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
}

/// The path of a workspace binary, built first: cder-testkit's
/// [`cder_testkit::workspace_binary`], the one locator.
pub fn built_binary(package: &str, name: &str) -> Result<PathBuf, String> {
    cder_testkit::workspace_binary(package, name)
}
