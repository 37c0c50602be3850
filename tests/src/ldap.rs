//! A real OpenLDAP `slapd` with Debian's BDII config and the GLUE schemas,
//! on a private loopback port in a temp dir, plus `ldapadd` / `ldapsearch`
//! helpers that use the real OpenLDAP client tools.
//!
//! ```no_run
//! use cder_tests::ldap::{Slapd, SlapdOptions};
//! let slapd = Slapd::start(&SlapdOptions::default())?;
//! slapd.add_base_entries()?;
//! slapd.add("dn: GLUE2ResourceID=x,GLUE2GroupID=resource,o=glue\n...")?;
//! let found = slapd.search("o=glue", "(objectClass=GLUE2ExecutionEnvironment)", &[])?;
//! # Ok::<(), String>(())
//! ```

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Debian's BDII slapd config (package `bdii`).
pub const BDII_SLAPD_CONF: &str = "/usr/share/bdii/bdii-slapd.conf";
/// The GLUE 2.0 LDAP schema (package `glue-schema`).
pub const GLUE20_SCHEMA: &str = "/etc/ldap/schema/GLUE20.schema";
/// The GLUE 1.3 schemas the BDII config includes.
pub const GLUE13_SCHEMAS: [&str; 5] = [
    "/etc/ldap/schema/Glue-CORE.schema",
    "/etc/ldap/schema/Glue-MDS.schema",
    "/etc/ldap/schema/Glue-CE.schema",
    "/etc/ldap/schema/Glue-CESEBind.schema",
    "/etc/ldap/schema/Glue-SE.schema",
];
/// The root password of every suffix in Debian's BDII config.
pub const ROOT_PASSWORD: &str = "secret";
/// The suffixes (each its own database, bound as itself) of the BDII config.
pub const SUFFIXES: [&str; 3] = ["o=grid", "o=glue", "o=infosys"];

/// Everything a GLUE/BDII test needs from the system.
pub fn require_slapd() -> bool {
    let mut needed = vec!["/usr/sbin/slapd", "ldapadd", "ldapsearch", BDII_SLAPD_CONF, GLUE20_SCHEMA];
    needed.extend(GLUE13_SCHEMAS);
    cder_testkit::require_programs(&needed)
}

/// A free TCP port on 127.0.0.1 (asked of the kernel; free when returned).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("binding 127.0.0.1:0")
}

/// How to start slapd.
#[derive(Debug, Clone, Default)]
pub struct SlapdOptions {
    /// The mdb map size of every database, in bytes. Debian's config leaves
    /// the 10 MiB default, too small for a real grid's 10^5 GLUE entities.
    pub maxsize: Option<u64>,
    /// Port to listen on (default: a free one).
    pub port: Option<u16>,
}

/// A running slapd. Dropping it stops slapd and removes its directory.
pub struct Slapd {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    conf: PathBuf,
}

impl Slapd {
    /// Starts slapd with Debian's BDII config, its paths rewritten into a
    /// fresh temp dir, and waits until it answers.
    pub fn start(options: &SlapdOptions) -> Result<Slapd, String> {
        Self::start_with(options, |_| Ok(()))
    }

    /// Like [`Slapd::start`], but first loads `ldif` offline with `slapadd`
    /// (one run per suffix, parents first): much faster than `ldapadd` for
    /// a grid-sized snapshot of 10^5 entries. The LDIF needs its own top
    /// entries (see [`BASE_LDIF`]).
    pub fn start_preloaded(options: &SlapdOptions, ldif: &str) -> Result<Slapd, String> {
        Self::start_with(options, |conf| slapadd(conf, ldif))
    }

    /// [`Slapd::start_preloaded`] with more `index` lines (`"GLUE2ExtensionKey eq"`) in the
    /// `o=glue` database: slapadd builds them as it loads (a BDII "fixed at the database").
    pub fn start_preloaded_indexed(options: &SlapdOptions, ldif: &str, indexes: &[&str]) -> Result<Slapd, String> {
        Self::start_with(options, |conf| {
            let text = std::fs::read_to_string(conf).map_err(|e| format!("{}: {e}", conf.display()))?;
            let glue = text.find("\"o=glue\"\n").ok_or_else(|| format!("{}: no o=glue", conf.display()))?;
            let at = text[glue..]
                .find("index objectClass")
                .map(|i| glue + i)
                .ok_or_else(|| format!("{}: no index lines for o=glue", conf.display()))?;
            let extra: String = indexes.iter().map(|i| format!("index {i}\n")).collect();
            std::fs::write(conf, format!("{}{extra}{}", &text[..at], &text[at..]))
                .map_err(|e| format!("{}: {e}", conf.display()))?;
            slapadd(conf, ldif)
        })
    }

    /// Like [`Slapd::start`], with more schema files included right after
    /// GLUE20.schema (e.g. deploy/bdii/GLUE21-accelerator.schema).
    pub fn start_with_schemas(options: &SlapdOptions, schemas: &[PathBuf]) -> Result<Slapd, String> {
        Self::start_with(options, |conf| {
            let text = std::fs::read_to_string(conf).map_err(|e| format!("{}: {e}", conf.display()))?;
            let extra: String = schemas.iter().map(|s| format!("include {}\n", s.display())).collect();
            let at = text
                .find(GLUE20_SCHEMA)
                .and_then(|i| text[i..].find('\n').map(|n| i + n + 1))
                .ok_or_else(|| format!("{BDII_SLAPD_CONF} includes no {GLUE20_SCHEMA}"))?;
            std::fs::write(conf, format!("{}{extra}{}", &text[..at], &text[at..]))
                .map_err(|e| format!("{}: {e}", conf.display()))
        })
    }

    fn start_with(options: &SlapdOptions, before: impl FnOnce(&Path) -> Result<(), String>) -> Result<Slapd, String> {
        let dir = tempfile::Builder::new().prefix("cder-slapd-").tempdir().map_err(|e| format!("temp dir: {e}"))?;
        let root = dir.path();
        for db in ["grid", "glue", "stats"] {
            std::fs::create_dir_all(root.join("db").join(db)).map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(root.join("run")).map_err(|e| e.to_string())?;
        let original = std::fs::read_to_string(BDII_SLAPD_CONF).map_err(|e| format!("{BDII_SLAPD_CONF}: {e}"))?;
        let conf_text = rewrite_conf(&original, root, options.maxsize);
        let conf = root.join("bdii-slapd.conf");
        std::fs::write(&conf, conf_text).map_err(|e| e.to_string())?;
        before(&conf)?;
        let port = options.port.unwrap_or_else(free_port);
        let log = root.join("slapd.log");
        let child = spawn_slapd(&conf, port, &log)?;
        let mut slapd = Slapd { child, dir, port, conf };
        let mut attempts = 1;
        loop {
            match slapd.wait_ready(Duration::from_secs(30)) {
                Ok(()) => return Ok(slapd),
                // Another test took the free port before slapd bound it (slapd -d 0
                // exits 1 silently then): take another.
                Err(e)
                    if options.port.is_none()
                        && attempts < 3
                        && e.contains("exited")
                        && TcpListener::bind(("127.0.0.1", slapd.port)).is_err() =>
                {
                    attempts += 1;
                    slapd.port = free_port();
                    slapd.child = spawn_slapd(&slapd.conf, slapd.port, &log)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let ready = cder_testkit::try_wait_for(timeout, Duration::from_millis(100), || {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.path().join("slapd.log")).unwrap_or_default();
                return Err(format!("slapd exited ({status}) at start: {log}"));
            }
            let probe = Command::new("ldapsearch")
                .args(["-x", "-LLL", "-H", &self.url(), "-b", "", "-s", "base", "(objectClass=*)", "namingContexts"])
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run ldapsearch: {e}"))?;
            Ok(probe.status.success().then_some(()))
        })?;
        ready.ok_or_else(|| format!("slapd did not answer on {} within {timeout:?}", self.url()))
    }

    /// slapd's process id (to pause it with SIGSTOP, as a hung server).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills slapd (SIGKILL: a crash, or the kill of a restart) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts slapd again on the same port, config and databases (after
    /// [`Slapd::kill`], or killing it first) and waits until it answers.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        let log = self.dir.path().join("slapd.log");
        self.child = spawn_slapd(&self.conf, self.port, &log)?;
        self.wait_ready(Duration::from_secs(30))
    }

    /// `ldap://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.port)
    }

    /// `ldapi://` and the percent-encoded path of the Unix socket slapd also listens on.
    pub fn ldapi_url(&self) -> String {
        format!("ldapi://{}", ldapi_socket(&self.conf).display().to_string().replace('/', "%2F"))
    }

    /// The loopback port slapd listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The rewritten slapd config (what `bdii-update` reads as `SLAPD_CONF`).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The temp dir slapd lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Adds the top entries BDII's `default.ldif` creates (`o=grid`,
    /// `mds-vo-name=resource,o=grid`, `o=glue`, `GLUE2GroupID=resource,o=glue`, …).
    pub fn add_base_entries(&self) -> Result<(), String> {
        self.add(BASE_LDIF).map(drop)
    }

    /// `ldapadd`s every entry of `ldif`, each bound as the root of its
    /// suffix. Any error from any entry fails the whole call with
    /// ldapadd's messages.
    pub fn add(&self, ldif: &str) -> Result<String, String> {
        let mut by_suffix: Vec<(&str, String)> = SUFFIXES.iter().map(|s| (*s, String::new())).collect();
        for record in records(ldif) {
            let dn = record_dn(&record).ok_or_else(|| format!("LDIF record without a dn: {record:?}"))?;
            let suffix = SUFFIXES
                .iter()
                .find(|s| dn.to_ascii_lowercase().replace(' ', "").ends_with(&s.to_string()))
                .ok_or_else(|| format!("dn {dn:?} is under none of {SUFFIXES:?}"))?;
            let slot = by_suffix.iter_mut().find(|(s, _)| s == suffix).expect("listed");
            slot.1.push_str(&record);
            slot.1.push_str("\n\n");
        }
        let mut transcript = String::new();
        for (suffix, text) in by_suffix.into_iter().filter(|(_, t)| !t.is_empty()) {
            let out = self.tool("ldapadd", &["-D", suffix, "-w", ROOT_PASSWORD], Some(&text))?;
            transcript.push_str(&out);
        }
        Ok(transcript)
    }

    /// `ldapsearch -LLL` under `base`; returns the LDIF (unwrapped lines).
    pub fn search(&self, base: &str, filter: &str, attributes: &[&str]) -> Result<String, String> {
        let mut args = vec!["-LLL", "-o", "ldif-wrap=no", "-b", base, filter];
        args.extend_from_slice(attributes);
        self.tool("ldapsearch", &args, None)
    }

    /// Runs an OpenLDAP client tool against this slapd (`-x -H <url>` added).
    pub fn tool(&self, tool: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let url = self.url();
        let mut child = Command::new(tool)
            .args(["-x", "-H", &url])
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {tool}: {e}"))?;
        // Feed stdin from a thread: the tool writes a line per entry, and a
        // full stdout pipe would otherwise block it while we block on stdin.
        let writer = stdin.map(|input| {
            let mut pipe = child.stdin.take().expect("piped");
            let input = input.to_string();
            std::thread::spawn(move || pipe.write_all(input.as_bytes()))
        });
        let out = child.wait_with_output().map_err(|e| format!("{tool}: {e}"))?;
        if let Some(w) = writer {
            // A tool that stops at an error closes its stdin early: that is reported below.
            let _ = w.join();
        }
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            return Err(format!(
                "{tool} {} failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr),
                stdout
            ));
        }
        Ok(stdout)
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Unix socket slapd also listens on, beside its config.
fn ldapi_socket(conf: &Path) -> PathBuf {
    conf.with_file_name("ldapi")
}

/// Starts slapd in the foreground on 127.0.0.1:`port` and on a Unix socket
/// beside `conf`, logging to `log`.
fn spawn_slapd(conf: &Path, port: u16, log: &Path) -> Result<Child, String> {
    let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
    // -d 0 keeps slapd in the foreground (a child we can kill) without debug output.
    Command::new("/usr/sbin/slapd")
        .arg("-f")
        .arg(conf)
        .arg("-h")
        .arg(format!(
            "ldap://127.0.0.1:{port}/ ldapi://{}/",
            ldapi_socket(conf).display().to_string().replace('/', "%2F")
        ))
        .args(["-d", "0"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start /usr/sbin/slapd: {e}"))
}

/// The entries of `/usr/share/bdii/default.ldif` except `o=shadow`, which
/// the site BDII config has no database for.
pub const BASE_LDIF: &str = "dn: o=grid\nobjectClass: organization\no: grid\n\n\
dn: mds-vo-name=local,o=grid\nobjectClass: MDS\nmds-vo-name: local\n\n\
dn: mds-vo-name=resource,o=grid\nobjectClass: MDS\nmds-vo-name: resource\n\n\
dn: o=glue\nobjectClass: organization\no: glue\n\n\
dn: GLUE2GroupID=resource,o=glue\nobjectClass: GLUE2Group\nGLUE2GroupID: resource\n\n\
dn: GLUE2GroupID=grid,o=glue\nobjectClass: GLUE2Group\nGLUE2GroupID: grid\n\n";

/// Rewrites Debian's BDII slapd config into `root`: run and database paths,
/// and the mdb map size when asked.
pub fn rewrite_conf(original: &str, root: &Path, maxsize: Option<u64>) -> String {
    let mut out = String::new();
    for line in original.lines() {
        let line = line
            .replace("/run/bdii/db", &root.join("run").display().to_string())
            .replace("/var/lib/bdii/db", &root.join("db").display().to_string());
        out.push_str(&line);
        out.push('\n');
        // maxsize belongs to the mdb database whose directory this is.
        if let Some(size) = maxsize {
            if line.trim_start().starts_with("directory") {
                out.push_str(&format!("maxsize         {size}\n"));
            }
        }
    }
    out
}

/// `slapadd -q` of every record of `ldif` into the database of its suffix.
fn slapadd(conf: &Path, ldif: &str) -> Result<(), String> {
    let mut by_suffix: Vec<(&str, String)> = SUFFIXES.iter().map(|s| (*s, String::new())).collect();
    for record in records(ldif) {
        let dn = record_dn(&record).ok_or_else(|| format!("LDIF record without a dn: {record:?}"))?;
        let lower = dn.to_ascii_lowercase().replace(' ', "");
        let slot = by_suffix
            .iter_mut()
            .find(|(s, _)| lower.ends_with(s))
            .ok_or_else(|| format!("dn {dn:?} is under none of {SUFFIXES:?}"))?;
        slot.1.push_str(&record);
        slot.1.push_str("\n\n");
    }
    for (suffix, text) in by_suffix.into_iter().filter(|(_, t)| !t.is_empty()) {
        let mut child = Command::new("/usr/sbin/slapadd")
            .arg("-f")
            .arg(conf)
            .args(["-q", "-b", suffix])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run /usr/sbin/slapadd: {e}"))?;
        let mut pipe = child.stdin.take().expect("piped");
        let writer = std::thread::spawn(move || pipe.write_all(text.as_bytes()));
        let out = child.wait_with_output().map_err(|e| format!("slapadd: {e}"))?;
        writer
            .join()
            .map_err(|_| "slapadd writer panicked".to_string())?
            .map_err(|e| format!("writing to slapadd: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "slapadd -b {suffix} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// Splits LDIF text into records (folded lines kept as they are).
pub fn records(ldif: &str) -> Vec<String> {
    ldif.split("\n\n")
        .map(|r| r.trim_matches('\n').to_string())
        .filter(|r| r.lines().any(|l| !l.starts_with('#') && !l.trim().is_empty()))
        .collect()
}

fn record_dn(record: &str) -> Option<String> {
    let unfolded = record.replace("\n ", "");
    unfolded
        .lines()
        .find_map(|l| l.strip_prefix("dn: ").or_else(|| l.strip_prefix("dn:")).map(|d| d.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_rewrite_moves_paths_and_sets_maxsize() {
        let original = "pidfile /run/bdii/db/slapd.pid\ndatabase mdb\ndirectory /var/lib/bdii/db/glue\n";
        let text = rewrite_conf(original, Path::new("/tmp/x"), Some(4 << 30));
        assert_eq!(
            text,
            "pidfile /tmp/x/run/slapd.pid\ndatabase mdb\ndirectory /tmp/x/db/glue\nmaxsize         4294967296\n"
        );
    }

    #[test]
    fn records_split_and_find_dns() {
        let r = records("dn: a=1,o=glue\nx: 1\n\n\n# comment\n\ndn: b=2,o=gr\n id\ny: 2\n\n");
        assert_eq!(r.len(), 2);
        assert_eq!(record_dn(&r[1]).as_deref(), Some("b=2,o=grid"));
    }
}
