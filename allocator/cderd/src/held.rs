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
//! file system that holds one of the devices' own files is `stat`ed. One
//! whose mount is in no namespace the process sees (a chroot's, a detached
//! one) is read from the kernel's cached attributes only.

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
        // MUTATION fdinfo-scan (test builds only): read fdinfo, which lists every lock on the file.
        if cder_model::mutation::on("fdinfo-scan") {
            let _ = std::fs::read_to_string(proc_dir.join("fdinfo").join(fd.file_name()));
        }
        // MUTATION fuse-stat (test builds only): stat through the link, into any file system.
        if cder_model::mutation::on("fuse-stat") {
            let meta = std::fs::metadata(fd.path()).ok().filter(|m| m.file_type().is_char_device());
            found.extend(meta.map(|m| m.rdev()).filter(|r| targets.rdevs.contains(r)));
            continue;
        }
        let info = proc_dir.join("fdinfo").join(fd.file_name());
        let Some(mount) = std::fs::read_to_string(info).ok().as_deref().and_then(mount_id) else { continue };
        let rdev = match mounts.find(proc_dir, mount) {
            Some((dev, fstype)) if IN_MEMORY.contains(&fstype.as_str()) || targets.file_systems.contains(&dev) => {
                // metadata() follows the magic link to the open file itself.
                let Ok(target) = std::fs::metadata(fd.path()) else { continue };
                target.file_type().is_char_device().then(|| target.rdev())
            }
            Some(_) => continue,
            // A mount of another namespace (a job in a container or chroot
            // passed it here) or one detached since: only what the kernel
            // has cached, which no file system is asked for.
            None => cached_rdev(&fd.path()),
        };
        if let Some(rdev) = rdev.filter(|r| targets.rdevs.contains(r)) {
            found.insert(rdev);
        }
    }
    found
}

/// The device number of the character device `link` (a `/proc/<pid>/fd`
/// entry) leads to, from the attributes the kernel has cached
/// (`AT_STATX_DONT_SYNC`: FUSE, NFS, CIFS and Ceph answer without asking
/// their server).
fn cached_rdev(link: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(link.as_os_str().as_bytes()).ok()?;
    // SAFETY: statx is plain data; all zeroes is a valid value.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx fills `buf`, which lives across the call; the path is NUL-terminated.
    let done =
        unsafe { libc::statx(libc::AT_FDCWD, path.as_ptr(), libc::AT_STATX_DONT_SYNC, libc::STATX_TYPE, &mut buf) };
    let char_device = u32::from(buf.stx_mode) & libc::S_IFMT == libc::S_IFCHR;
    (done == 0 && char_device).then(|| libc::makedev(buf.stx_rdev_major, buf.stx_rdev_minor))
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
    fn mounts_and_cached_device_numbers_are_read_without_stat() {
        let info = "pos:\t0\nflags:\t0100002\nmnt_id:\t24\nino:\t7\n";
        assert_eq!(mount_id(info), Some(24));
        let text = "24 1 0:5 / /dev rw,nosuid - devtmpfs udev rw,size=10k\n\
                    99 24 0:52 / /mnt/f rw,nosuid,nodev shared:9 - fuse.sshfs host: rw,user_id=1000\n";
        let mounts: HashMap<u64, (u64, String)> = parse_mountinfo(text).collect();
        assert_eq!(mounts[&24], (libc::makedev(0, 5), "devtmpfs".to_string()));
        assert_eq!(mounts[&99].1, "fuse.sshfs");
        let full = std::fs::metadata("/dev/full").unwrap().rdev();
        let file = std::fs::File::open("/dev/full").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(cached_rdev(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd()))), Some(full));
        assert_eq!(cached_rdev(Path::new("/proc/self/fd/999999")), None);
    }

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
