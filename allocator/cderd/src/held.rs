//! Which processes hold a device open right now: a descriptor
//! opened while a device was free survives the chown and chmod that give
//! the device to the next job, so such a device is not handed out unless
//! the admin says so (`[node.enforcement] held_open`).
//!
//! The scan reads `/proc/<pid>/fd/*` and compares the device number of
//! what each descriptor points at, so any path to the device (a copy of
//! the node made with mknod, a bind mount) is caught. It never follows a
//! descriptor into a file system its owner may control (issue 44): a
//! `stat` through the link asks the file system, and a user's FUSE server
//! can leave that unanswered for ever. So each descriptor is first placed
//! by what the kernel alone knows: `readlink` (a path, or `socket:[…]`),
//! then `fdinfo`'s mount id, looked up in the process's `mountinfo`. Only a
//! descriptor on an in-memory file system (devtmpfs, tmpfs, ramfs) or on a
//! file system that holds one of the devices' own files is `stat`ed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

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

/// The devices looked for: their numbers, and the file systems a
/// descriptor may be `stat`ed on.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// `st_rdev` of each device looked for.
    pub rdevs: BTreeSet<u64>,
    /// `st_dev` of the file systems holding the devices' own files (the
    /// admin's, never a user's).
    pub file_systems: BTreeSet<u64>,
}

impl Targets {
    /// The character devices at `paths` (cderd's own device files; those
    /// missing or not character devices are left out).
    pub fn of<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Targets {
        let mut targets = Targets::default();
        for path in paths {
            if let Ok(meta) = std::fs::metadata(path) {
                if meta.file_type().is_char_device() {
                    targets.rdevs.insert(meta.rdev());
                    targets.file_systems.insert(meta.dev());
                }
            }
        }
        targets
    }
}

/// File systems whose `stat` never waits on anything a user runs.
const IN_MEMORY: [&str; 3] = ["devtmpfs", "tmpfs", "ramfs"];

/// For each of `targets`' device numbers, the processes that hold it open,
/// leaving out root's processes (root is trusted: the driver's helpers,
/// cderd itself), those of `ignore_uids`, and this process. Processes that
/// exit or deny access mid-scan are skipped.
pub fn holders(proc_root: &Path, targets: &Targets, ignore_uids: &BTreeSet<u32>) -> BTreeMap<u64, Vec<Holder>> {
    holders_where(proc_root, targets, |uid| uid != 0 && !ignore_uids.contains(&uid))
}

/// As [`holders`], looking only at the processes whose uid `wanted` accepts
/// (never this process): after a release, those of the job's uid.
pub fn holders_where(proc_root: &Path, targets: &Targets, wanted: impl Fn(u32) -> bool) -> BTreeMap<u64, Vec<Holder>> {
    let mut out: BTreeMap<u64, Vec<Holder>> = BTreeMap::new();
    if targets.rdevs.is_empty() {
        return out;
    }
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return out;
    };
    let mut mounts = Mounts::default();
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
        let found = devices_held(&entry.path(), targets, &mut mounts);
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

/// The target devices that the process at `proc_dir` holds open.
fn devices_held(proc_dir: &Path, targets: &Targets, mounts: &mut Mounts) -> BTreeSet<u64> {
    let mut found = BTreeSet::new();
    let Ok(fds) = std::fs::read_dir(proc_dir.join("fd")) else { return found };
    for fd in fds.flatten() {
        // readlink of the magic link is the kernel's own record of the
        // path: no file system is asked. Sockets, pipes and anonymous
        // inodes ("socket:[…]") are never devices.
        let Ok(link) = std::fs::read_link(fd.path()) else { continue };
        if !link.as_os_str().as_encoded_bytes().starts_with(b"/") {
            continue;
        }
        let info = proc_dir.join("fdinfo").join(fd.file_name());
        let Some(mount) = std::fs::read_to_string(info).ok().as_deref().and_then(mount_id) else { continue };
        let Some((dev, fstype)) = mounts.find(proc_dir, mount) else { continue };
        if !IN_MEMORY.contains(&fstype.as_str()) && !targets.file_systems.contains(&dev) {
            continue;
        }
        // metadata() follows the magic link to the open file itself.
        let Ok(target) = std::fs::metadata(fd.path()) else { continue };
        if target.file_type().is_char_device() && targets.rdevs.contains(&target.rdev()) {
            found.insert(target.rdev());
        }
    }
    found
}

/// `mnt_id` from a `/proc/<pid>/fdinfo/<fd>` text.
fn mount_id(fdinfo: &str) -> Option<u64> {
    fdinfo.lines().find_map(|l| l.strip_prefix("mnt_id:")).and_then(|v| v.trim().parse().ok())
}

/// Mounts by id (ids are unique across mount namespaces), read from each
/// mount namespace's `mountinfo` once per scan.
#[derive(Default)]
struct Mounts {
    by_id: HashMap<u64, (u64, String)>,
    namespaces_read: BTreeSet<PathBuf>,
}

impl Mounts {
    /// The superblock's device number and the file system type of mount
    /// `id`, as the process at `proc_dir` sees its mounts.
    fn find(&mut self, proc_dir: &Path, id: u64) -> Option<(u64, String)> {
        if let Some(found) = self.by_id.get(&id) {
            return Some(found.clone());
        }
        let namespace = std::fs::read_link(proc_dir.join("ns/mnt")).ok()?;
        if self.namespaces_read.insert(namespace) {
            let text = std::fs::read_to_string(proc_dir.join("mountinfo")).ok()?;
            self.by_id.extend(parse_mountinfo(&text));
        }
        self.by_id.get(&id).cloned()
    }
}

/// `mountinfo` lines: mount id → (superblock device number, fs type).
fn parse_mountinfo(text: &str) -> impl Iterator<Item = (u64, (u64, String))> + '_ {
    text.lines().filter_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let id = fields.first()?.parse().ok()?;
        let (major, minor) = fields.get(2)?.split_once(':')?;
        let dev = libc::makedev(major.parse().ok()?, minor.parse().ok()?);
        let dash = fields.iter().position(|f| *f == "-")?;
        Some((id, (dev, fields.get(dash + 1)?.to_string())))
    })
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
        let wanted = Targets::of([Path::new("/dev/full")]);
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
