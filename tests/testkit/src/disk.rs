//! Small real file systems that a test fills up (root only), for the
//! "disk full" behaviour of every program that writes state: a tmpfs of a
//! few MiB (ENOSPC), and a directory under a quota (EDQUOT) — a btrfs
//! subvolume with a qgroup limit, in an image held by a tmpfs, since this
//! kernel's tmpfs and ext4 have no quota support and a user quota does not
//! hold root (CAP_SYS_RESOURCE), which the daemons run as.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a temp dir; unmounted (lazily, so an open file left
/// by a daemon cannot keep it) and removed when dropped. After a `kill -9`
/// of the test process nothing unmounts it: `grep cder-tmpfs /proc/mounts`
/// shows what is left.
pub struct Tmpfs {
    // Removed after the unmount (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
    mount: PathBuf,
}

/// Checks that a tmpfs can be mounted (root, and `mount` installed):
/// under `CI=true` the test fails otherwise, see [`crate::missing`].
pub fn require_tmpfs() -> bool {
    crate::require_root("mount a tmpfs") && crate::require_programs(&["mount", "umount"])
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_bytes` (rounded up to pages by the kernel)
    /// on a new temp dir, mode 0700.
    pub fn mount(size_bytes: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::Builder::new().prefix("cder-tmpfs-").tempdir().map_err(|e| e.to_string())?;
        let mount = dir.path().join("fs");
        std::fs::create_dir(&mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_bytes},mode=0700"), "cder-tmpfs"])
            .arg(&mount)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs on {}: {}", mount.display(), String::from_utf8_lossy(&out.stderr)));
        }
        Ok(Tmpfs { _dir: dir, mount })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// The file [`Tmpfs::fill`] writes.
    pub fn filler(&self) -> PathBuf {
        self.mount.join("filler")
    }

    /// Writes the filler until the file system refuses with ENOSPC; the
    /// bytes written. Any other error is returned.
    pub fn fill(&self) -> Result<u64, String> {
        fill(&self.filler())
    }

    /// Removes the filler: the space is free again.
    pub fn unfill(&self) -> Result<(), String> {
        std::fs::remove_file(self.filler()).map_err(|e| format!("{}: {e}", self.filler().display()))
    }
}

/// Appends to `path` until a write fails with ENOSPC or EDQUOT (the file
/// system, or the quota, is full); the bytes written.
fn fill(path: &Path) -> Result<u64, String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut written = 0u64;
    // Large blocks first, then single bytes, so that not even a page is left.
    for block in [64 * 1024, 4096, 1] {
        let chunk = vec![0x5au8; block];
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded) => {
                    break
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
    }
    f.sync_all().or_else(|e| match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => Ok(()),
        _ => Err(format!("{}: {e}", path.display())),
    })?;
    Ok(written)
}

/// Checks that a quota-limited directory can be made ([`QuotaDir`]): root,
/// btrfs in the kernel and btrfs-progs (deploy/install-deps.sh); under
/// `CI=true` the test fails otherwise.
pub fn require_quota_dir() -> bool {
    let btrfs = std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.lines().any(|l| l.ends_with("btrfs")));
    require_tmpfs()
        && crate::require(btrfs, "btrfs in the kernel (/proc/filesystems)")
        && crate::require_programs(&["mkfs.btrfs", "btrfs"])
}

/// A directory whose writes fail with EDQUOT past a limit: a btrfs
/// subvolume with a qgroup limit, on an image file in a [`Tmpfs`] mounted
/// through a loop device. Unmounted when dropped (the loop device goes
/// with it).
pub struct QuotaDir {
    mount: PathBuf,
    // Unmounted after `mount` (fields drop after `Drop::drop`).
    _image_fs: Tmpfs,
}

impl QuotaDir {
    /// A subvolume limited to `limit_bytes` (btrfs counts in its own
    /// blocks: the limit is approximate, a few KiB either way).
    pub fn mount(limit_bytes: u64) -> Result<QuotaDir, String> {
        // btrfs's smallest mixed-mode file system, plus room; the image is
        // sparse, so the tmpfs holds only what btrfs writes.
        let image_fs = Tmpfs::mount(160 << 20)?;
        let image = image_fs.path().join("btrfs.img");
        let run = |program: &str, args: &[&std::ffi::OsStr]| -> Result<(), String> {
            let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
            }
        };
        let f = std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        f.set_len(128 << 20).map_err(|e| format!("{}: {e}", image.display()))?;
        drop(f);
        run("mkfs.btrfs", &["-q".as_ref(), "--mixed".as_ref(), image.as_os_str()])?;
        let mount = image_fs.path().join("fs");
        std::fs::create_dir(&mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        run("mount", &["-o".as_ref(), "loop".as_ref(), image.as_os_str(), mount.as_os_str()])?;
        let dir = QuotaDir { mount, _image_fs: image_fs };
        let sub = dir.path();
        run("btrfs", &["quota".as_ref(), "enable".as_ref(), dir.mount.as_os_str()])?;
        run("btrfs", &["subvolume".as_ref(), "create".as_ref(), sub.as_os_str()])?;
        let limit = limit_bytes.to_string();
        run("btrfs", &["qgroup".as_ref(), "limit".as_ref(), limit.as_ref(), sub.as_os_str()])?;
        Ok(dir)
    }

    /// The directory under the limit.
    pub fn path(&self) -> PathBuf {
        self.mount.join("limited")
    }

    /// The file [`QuotaDir::fill`] writes.
    pub fn filler(&self) -> PathBuf {
        self.path().join("filler")
    }

    /// Writes the filler until the quota refuses (EDQUOT); the bytes written.
    pub fn fill(&self) -> Result<u64, String> {
        fill(&self.filler())
    }

    /// Removes the filler, and waits for btrfs to count the space as free
    /// again (a qgroup's usage is settled at the transaction's commit).
    pub fn unfill(&self) -> Result<(), String> {
        std::fs::remove_file(self.filler()).map_err(|e| format!("{}: {e}", self.filler().display()))?;
        let out = Command::new("btrfs")
            .args(["filesystem", "sync"])
            .arg(&self.mount)
            .output()
            .map_err(|e| format!("btrfs filesystem sync: {e}"))?;
        if !out.status.success() {
            return Err(format!("btrfs filesystem sync: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(())
    }
}

impl Drop for QuotaDir {
    fn drop(&mut self) {
        let quiet = |args: &[&std::ffi::OsStr]| {
            Command::new("umount").args(args).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success())
        };
        // Lazily only if a daemon still holds a file open there.
        if !quiet(&[self.mount.as_os_str()]) {
            quiet(&["-l".as_ref(), self.mount.as_os_str()]);
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}
