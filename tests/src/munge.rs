//! A real munged (Debian's `munge` package) with its own key and socket in
//! a temp dir, for tests of MUNGE-authenticated services.
//!
//! ```no_run
//! if !cder_tests::munge::require_munge() { return; }
//! let munged = cder_tests::munge::Munged::start().unwrap();
//! let cred = munged.encode(b"payload").unwrap();
//! ```
//!
//! munged runs in the foreground (`--foreground`) as root with `--force`
//! (the temp dir's permissions are not what a system install has); `Drop`
//! kills it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The programs a MUNGE test runs.
pub const MUNGE_PROGRAMS: [&str; 3] = ["/usr/sbin/munged", "/usr/bin/munge", "/usr/bin/unmunge"];

/// Checks that MUNGE is installed: with `CI=true` a missing piece fails the
/// test (panics); otherwise it prints why and returns false.
pub fn require_munge() -> bool {
    cder_testkit::require_programs(&MUNGE_PROGRAMS)
}

/// A running munged.
pub struct Munged {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Munged {
    /// Makes a key (`dd` from /dev/urandom), starts munged on a socket in a
    /// new temp dir and waits until a credential round-trips.
    pub fn start() -> Result<Munged, String> {
        let dir = tempfile::Builder::new().prefix("cder-munge-").tempdir().map_err(|e| e.to_string())?;
        let key = dir.path().join("munge.key");
        let dd = Command::new("dd")
            .args(["if=/dev/urandom", &format!("of={}", key.display()), "bs=1", "count=1024", "status=none"])
            .status()
            .map_err(|e| format!("dd: {e}"))?;
        if !dd.success() {
            return Err(format!("dd made no key ({dd})"));
        }
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .map_err(|e| e.to_string())?;
        let mut m = Munged { dir, child: None };
        m.launch()?;
        Ok(m)
    }

    /// Stops munged (SIGTERM, as an admin's restart does) and waits for it
    /// to exit; its socket then answers nobody.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").arg("-TERM").arg(c.id().to_string()).status();
            // Killed below if it has not exited within 10 s.
            let _ = cder_testkit::wait_for_value(Duration::from_secs(10), Duration::from_millis(20), || {
                (!matches!(c.try_wait(), Ok(None))).then_some(())
            });
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts munged again on the same key and socket (after [`Munged::stop`]).
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.launch()
    }

    fn launch(&mut self) -> Result<(), String> {
        let p = |n: &str| self.dir.path().join(n);
        let key = p("munge.key");
        let child = Command::new(MUNGE_PROGRAMS[0])
            .arg("--foreground")
            .arg("--force")
            .arg(format!("--socket={}", p("munge.socket").display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", p("munged.pid").display()))
            .arg(format!("--log-file={}", p("munged.log").display()))
            .arg(format!("--seed-file={}", p("munged.seed").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(p("munged.stderr")).map_err(|e| e.to_string())?))
            .spawn()
            .map_err(|e| format!("starting munged: {e}"))?;
        self.child = Some(child);
        let up = cder_testkit::try_wait_for(Duration::from_secs(20), Duration::from_millis(50), || {
            if self.socket().exists() {
                if let Ok(c) = self.encode(b"ping") {
                    if self.decode(&c).is_ok() {
                        return Ok(Some(()));
                    }
                }
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(format!("munged exited ({status}): {}", self.log()));
            }
            Ok(None)
        })?;
        up.ok_or_else(|| format!("munged did not come up in 20 s: {}", self.log()))
    }

    /// munged's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("munge.socket")
    }

    /// The temp dir munged lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// munged's log and stderr.
    pub fn log(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        format!("{}{}", read("munged.log"), read("munged.stderr"))
    }

    /// A credential for `payload`, made as the current user.
    pub fn encode(&self, payload: &[u8]) -> Result<String, String> {
        self.encode_as(None, payload)
    }

    /// A credential for `payload`, made as `user` (through `runuser`; needs
    /// root) or as the current user.
    pub fn encode_as(&self, user: Option<&str>, payload: &[u8]) -> Result<String, String> {
        let mut cmd = match user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--", MUNGE_PROGRAMS[1]]);
                c
            }
            None => Command::new(MUNGE_PROGRAMS[1]),
        };
        let text = std::str::from_utf8(payload).map_err(|e| e.to_string())?;
        let out = cmd
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!("--string={text}"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("munge: {e}"))?;
        if !out.status.success() {
            return Err(format!("munge failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Decodes `cred`: its payload.
    pub fn decode(&self, cred: &str) -> Result<Vec<u8>, String> {
        use std::io::Write;
        let mut child = Command::new(MUNGE_PROGRAMS[2])
            .arg(format!("--socket={}", self.socket().display()))
            .arg("--metadata=/dev/null")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("unmunge: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(cred.as_bytes()).map_err(|e| format!("unmunge stdin: {e}"))?;
        }
        let out = child.wait_with_output().map_err(|e| format!("unmunge: {e}"))?;
        if !out.status.success() {
            return Err(format!("unmunge failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(out.stdout)
    }
}

impl Drop for Munged {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
