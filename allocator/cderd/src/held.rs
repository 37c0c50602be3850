//! Which processes hold a device open right now: a descriptor
//! opened while a device was free survives the chown and chmod that give
//! the device to the next job, so such a device is not handed out unless
//! the admin says so (`[node.enforcement] held_open`).
//!
//! The scan reads `/proc/<pid>/fd/*` and compares the device number of
//! what each descriptor points at, so any path to the device (a copy of
//! the node made with mknod, a bind mount) is caught.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// A process holding one of the devices asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The process holding a device file open.
    pub pid: u32,
    /// Its uid (the owner of `/proc/<pid>`).
    pub uid: u32,
    /// `/proc/<pid>/comm`, for the log line (untrusted: the process sets it).
    pub comm: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} (uid {}, {:?})", self.pid, self.uid, self.comm)
    }
}

/// For each `st_rdev` in `rdevs`, the processes that hold it open, leaving
/// out root's processes (root is trusted: the driver's helpers, cderd
/// itself), those of `ignore_uids`, and this process. Processes that exit
/// or deny access mid-scan are skipped.
pub fn holders(proc_root: &Path, rdevs: &BTreeSet<u64>, ignore_uids: &BTreeSet<u32>) -> BTreeMap<u64, Vec<Holder>> {
    holders_where(proc_root, rdevs, |uid| uid != 0 && !ignore_uids.contains(&uid))
}

/// As [`holders`], looking only at the processes whose uid `wanted` accepts
/// (never this process): after a release, those of the job's uid.
pub fn holders_where(
    proc_root: &Path,
    rdevs: &BTreeSet<u64>,
    wanted: impl Fn(u32) -> bool,
) -> BTreeMap<u64, Vec<Holder>> {
    let mut out: BTreeMap<u64, Vec<Holder>> = BTreeMap::new();
    if rdevs.is_empty() {
        return out;
    }
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let uid = meta.uid();
        if !wanted(uid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else { continue };
        let mut found: BTreeSet<u64> = BTreeSet::new();
        for fd in fds.flatten() {
            // metadata() follows the magic link to the open file itself.
            let Ok(target) = std::fs::metadata(fd.path()) else { continue };
            if target.file_type().is_char_device() && rdevs.contains(&target.rdev()) {
                found.insert(target.rdev());
            }
        }
        if found.is_empty() {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm"))
            .map(|c| c.trim_end().chars().take(32).collect())
            .unwrap_or_default();
        for rdev in found {
            out.entry(rdev).or_default().push(Holder { pid, uid, comm: String::clone(&comm) });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_non_root_holder_and_ignores_by_uid() {
        // A child running as nobody holds /dev/full (1:7) open via its stdin.
        if std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) != 0 {
            eprintln!("skipping: needs root to run a child as another uid");
            return;
        }
        use std::os::unix::process::CommandExt;
        let full = std::fs::metadata("/dev/full").unwrap().rdev();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open("/dev/full").unwrap())
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let pid = child.id();
        let wanted: BTreeSet<u64> = [full].into();
        let mut seen = false;
        // The child may still be exec'ing; the fd is there from fork on.
        for _ in 0..200 {
            let found = holders(Path::new("/proc"), &wanted, &BTreeSet::new());
            if found.get(&full).is_some_and(|h| h.iter().any(|h| h.pid == pid && h.uid == 65534)) {
                seen = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let ignored = holders(Path::new("/proc"), &wanted, &[65534].into());
        let _ = child.kill();
        let _ = child.wait();
        assert!(seen, "the child holding /dev/full was not found");
        assert!(ignored.get(&full).is_none_or(|h| h.iter().all(|h| h.pid != pid)), "{ignored:?}");
    }
}
