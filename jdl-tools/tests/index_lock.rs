//! The refresh lock of a site's shared index directory against a hostile
//! user (uid 65534, via setpriv), as the audit ran it: a reader who could
//! open `<snapshot>.lock` held it with `flock`, and every refresh gave up
//! after its timeout, leaving every user stale answers. The lock file is
//! now the refresher's alone (0600, never a link), and the lock an `fcntl`
//! OFD write lock, which needs a descriptor open for writing.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use cder_jdl::index::cache;

const HOSTILE_UID: u32 = 65534;

/// `program args…` as the hostile user, stdout and stderr captured.
fn as_hostile(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([&format!("--reuid={HOSTILE_UID}"), &format!("--regid={HOSTILE_UID}"), "--clear-groups", "--", program])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Python that opens `path` (read-only, else write-only) and holds an OFD
/// lock of `kind` (F_RDLCK or F_WRLCK) on it for a minute; prints HELD once
/// it holds it, or why not.
fn ofd_holder(path: &Path, kind: &str) -> String {
    format!(
        "import fcntl, os, struct, sys, time\n\
         p = {path:?}\n\
         try:\n    fd = os.open(p, os.O_RDONLY if {kind:?} == 'F_RDLCK' else os.O_WRONLY)\n\
         except OSError as e:\n    print('OPEN', e, flush=True); sys.exit(1)\n\
         try:\n    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack('hhqqi', fcntl.{kind}, 0, 0, 0, 0))\n\
         except OSError as e:\n    print('LOCK', e, flush=True); sys.exit(1)\n\
         print('HELD', flush=True); time.sleep(60)\n",
        path = path.display().to_string()
    )
}

/// Waits until `child` prints its first line (or ends): what the attempt came to.
fn first_line(child: &mut Child) -> String {
    use std::io::BufRead as _;
    let mut line = String::new();
    let _ = std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line);
    line
}

#[test]
fn a_user_cannot_hold_the_refresh_lock_of_a_shared_index() {
    if !cder_testkit::require_root("to be the refresher and act as another uid")
        || !cder_testkit::require_programs(&["setpriv", "flock", "/usr/bin/python3"])
    {
        return;
    }
    // A site's /var/cache/cder: the refresher's, 0755, readable by all.
    let top = tempfile::Builder::new().prefix("cder-index-lock-").tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = top.path().join("cder");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let snapshot = shared.join("bdii.example.org_2170-0123.cdx");
    cache::write_atomic(&snapshot, b"old").unwrap();
    drop(cache::lock(&snapshot, Duration::ZERO).unwrap());
    let lock_file = cache::lock_path(&snapshot);

    // The hostile user tries every way to hold it.
    let lock = lock_file.to_str().unwrap();
    let mut holders = vec![
        ("flock -x (read-only open)", as_hostile("flock", &["-x", lock, "-c", "echo HELD; sleep 60"]).spawn().unwrap()),
        ("flock -s", as_hostile("flock", &["-s", lock, "-c", "echo HELD; sleep 60"]).spawn().unwrap()),
    ];
    for kind in ["F_RDLCK", "F_WRLCK"] {
        let child = as_hostile("/usr/bin/python3", &["-c", &ofd_holder(&lock_file, kind)]).spawn().unwrap();
        holders.push((kind, child));
    }
    for (how, child) in &mut holders {
        let said = first_line(child);
        assert!(!said.starts_with("HELD"), "{how}: the hostile user holds the refresh lock");
    }
    let meta = std::fs::metadata(&lock_file).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600, "only the refresher may open the lock file");
    // Nor can they put a link (or anything) in its place.
    let link = as_hostile("ln", &["-sf", "/dev/null", lock]).output().unwrap();
    assert!(!link.status.success(), "the user replaced the lock file");

    // The refresh takes the lock at once, and writes; readers see the new snapshot.
    // A zero wait is one try: it fails if any hostile lock were held.
    let held =
        cache::lock(&snapshot, Duration::ZERO).unwrap_or_else(|e| panic!("the refresh found the lock taken: {e}"));
    cache::write_atomic(&snapshot, b"new").unwrap();
    drop(held);
    let read = as_hostile("cat", &[snapshot.to_str().unwrap()]).output().unwrap();
    assert_eq!(read.stdout, b"new", "a reader needs no lock: {}", String::from_utf8_lossy(&read.stderr));
    for (_, mut child) in holders {
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_lock_file_others_could_open_or_a_link_is_not_used() {
    if !cder_testkit::require_root("to be the refresher and act as another uid")
        || !cder_testkit::require_programs(&["setpriv", "/usr/bin/python3"])
    {
        return;
    }
    let top = tempfile::Builder::new().prefix("cder-index-lock-").tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let snapshot = top.path().join("x.cdx");
    let lock_file = cache::lock_path(&snapshot);

    // An earlier release's lock file, 0644: a reader opened it then, and
    // holds a read lock through that descriptor.
    std::fs::write(&lock_file, b"").unwrap();
    std::fs::set_permissions(&lock_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut early = as_hostile("/usr/bin/python3", &["-c", &ofd_holder(&lock_file, "F_RDLCK")]).spawn().unwrap();
    assert!(first_line(&mut early).starts_with("HELD"), "the old file was open to all");
    let held = cache::lock(&snapshot, Duration::from_secs(5)).expect("a new lock file replaces the old one");
    assert_eq!(std::fs::metadata(&lock_file).unwrap().mode() & 0o777, 0o600);
    drop(held);
    let _ = early.kill();
    let _ = early.wait();

    // A link, or a file of another uid, in its place: refused, naming it.
    std::fs::remove_file(&lock_file).unwrap();
    std::os::unix::fs::symlink("/dev/null", &lock_file).unwrap();
    let err = cache::lock(&snapshot, Duration::ZERO).unwrap_err().to_string();
    assert!(err.contains(lock_file.to_str().unwrap()) && err.contains("symbolic link"), "{err}");
    std::fs::remove_file(&lock_file).unwrap();
    std::fs::write(&lock_file, b"").unwrap();
    std::fs::set_permissions(&lock_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&lock_file, Some(HOSTILE_UID), Some(HOSTILE_UID)).unwrap();
    let err = cache::lock(&snapshot, Duration::ZERO).unwrap_err().to_string();
    assert!(err.contains(lock_file.to_str().unwrap()) && err.contains("uid 65534's"), "{err}");
}
