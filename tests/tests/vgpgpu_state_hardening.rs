//! The durable state of cder-registryd and cderd is private whatever the
//! umask: state directories 0700, databases and their -wal/-shm
//! 0600, and a state directory writable by group or others is refused by
//! name. Real daemons (cder-registryd with a real munged; cderd with a
//! static device list, as `cderd --check`) started through `/bin/sh -c
//! 'umask …'`; "another user" is `nobody` through runuser. Without munged:
//! fails under CI=true, skips (with a reason) otherwise.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cder_tests::munge::{require_munge, Munged};
use cder_tests::vgpgpu::binary;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).mode() & 0o7777
}

/// A temp dir others may traverse, so that only the state's own modes
/// keep them out.
fn open_tempdir() -> tempfile::TempDir {
    let t = tempfile::Builder::new().prefix("cder-state-").tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    t
}

/// `program args…` under `umask`.
fn with_umask(umask: &str, program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c").arg("umask \"$1\" && shift && exec \"$@\"").arg("sh").arg(umask).arg(program).args(args);
    c.stdin(Stdio::null());
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// True when `nobody` can read `path`.
fn nobody_reads(path: &Path) -> bool {
    Command::new("runuser")
        .args(["-u", "nobody", "--", "/bin/cat"])
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

fn registry_config(dir: &Path, state: &Path, munged: &Munged, port: u16) -> PathBuf {
    let cfg = dir.join("cder.toml");
    let text = format!(
        "[registry]\nurl = \"http://127.0.0.1:{port}\"\nlisten = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\nmunge_socket = \"{}\"\n",
        state.display(),
        munged.socket().display()
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn registry_state_is_private_whatever_the_umask() {
    if !require_munge() {
        return;
    }
    let bin = binary("cder-registry", "cder-registryd").unwrap();
    let munged = Munged::start().unwrap();
    for umask in ["022", "000"] {
        let tmp = open_tempdir();
        let state = tmp.path().join("var/lib/cder-registry");
        let port = cder_tests::ldap::free_port();
        let cfg = registry_config(tmp.path(), &state, &munged, port);
        let mut child = with_umask(umask, &bin, &["--config", cfg.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let munge = cder_registry::Munge {
            munge_program: "/usr/bin/munge".into(),
            unmunge_program: "/usr/bin/unmunge".into(),
            socket: Some(munged.socket()),
        };
        let client =
            cder_registry::RegistryClient::new(&format!("http://127.0.0.1:{port}"), munge, Duration::from_secs(30))
                .unwrap();
        let serving = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(50), || {
            if client.status().is_ok() {
                return Some(());
            }
            assert!(child.try_wait().unwrap().is_none(), "cder-registryd exited under umask {umask}");
            None
        });
        assert!(serving.is_some(), "cder-registryd not serving under umask {umask}");
        // While it runs, with -wal and -shm present.
        let db = state.join("registry.db");
        assert_eq!(mode(&state), 0o700, "umask {umask}: state dir");
        for f in [db.clone(), state.join("registry.db-wal"), state.join("registry.db-shm")] {
            assert_eq!(mode(&f), 0o600, "umask {umask}: {}", f.display());
            assert!(!nobody_reads(&f), "umask {umask}: nobody can read {}", f.display());
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn registry_refuses_a_writable_state_dir_and_tightens_an_old_one() {
    if !require_munge() {
        return;
    }
    let bin = binary("cder-registry", "cder-registryd").unwrap();
    let munged = Munged::start().unwrap();
    let tmp = open_tempdir();
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg = registry_config(tmp.path(), &state, &munged, cder_tests::ldap::free_port());
    let out = Command::new(&bin).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains(&state.display().to_string()) && msg.contains("writable by group or others"), "{msg}");
    assert!(!state.join("registry.db").exists(), "nothing created in a refused directory");
    assert_eq!(mode(&state), 0o777, "a refused directory is left as it was, for the admin to inspect");
    // State made by an older version under umask 022: tightened at start.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(&bin).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::set_permissions(state.join("registry.db"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(&bin).args(["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!((mode(&state), mode(&state.join("registry.db"))), (0o700, 0o600));
    assert!(!nobody_reads(&state.join("registry.db")));
}

fn cderd_config(dir: &Path, state: &Path) -> PathBuf {
    let dev = dir.join("gpu0");
    std::fs::write(&dev, "").unwrap();
    let cfg = dir.join("cder.toml");
    let text = format!(
        "[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n\n\
[[cder.device]]\nindex = 0\nuuid = \"GPU-00000000-0000-4000-8000-000000000000\"\nmodel = \"Fake Tesla K20m\"\nmemory_mib = 4800\npath = \"{}\"\n",
        dir.join("cderd.sock").display(),
        state.display(),
        dev.display()
    );
    std::fs::write(&cfg, text).unwrap();
    cfg
}

#[test]
fn cderd_state_is_private_and_a_writable_dir_is_refused() {
    let bin = binary("cderd", "cderd").unwrap();
    // cderd makes its state dir itself, 0700 whatever the umask, and the
    // database 0600.
    for umask in ["022", "000"] {
        let tmp = open_tempdir();
        let state = tmp.path().join("var/lib/cder");
        let cfg = cderd_config(tmp.path(), &state);
        let out = with_umask(umask, &bin, &["--config", cfg.to_str().unwrap(), "--check"]).output().unwrap();
        assert!(out.status.success(), "umask {umask}: {}", text(&out));
        assert_eq!((mode(&state), mode(&state.join("cderd.db"))), (0o700, 0o600), "umask {umask}: {}", text(&out));
        assert!(!nobody_reads(&state.join("cderd.db")), "umask {umask}: nobody can read cderd.db");
    }
    // A state directory anyone may write to: refused by name.
    let tmp = open_tempdir();
    let state = tmp.path().join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    let cfg = cderd_config(tmp.path(), &state);
    let out =
        Command::new(&bin).args(["--config", cfg.to_str().unwrap(), "--check"]).stdin(Stdio::null()).output().unwrap();
    let msg = text(&out);
    assert_eq!(out.status.code(), Some(1), "{msg}");
    assert!(msg.contains(&state.display().to_string()) && msg.contains("writable by group or others"), "{msg}");
    assert!(!state.join("cderd.db").exists());
}
