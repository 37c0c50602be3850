//! A small real file system that a test fills up: a tmpfs of a few MiB
//! mounted on a temp dir (root only), for the "disk full" behaviour of
//! every program that writes state.

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
        let path = self.filler();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let mut written = 0u64;
        // Large blocks first, then single bytes, so that not even a page is left.
        for block in [64 * 1024, 4096, 1] {
            let chunk = vec![0x5au8; block];
            loop {
                match f.write(&chunk) {
                    Ok(0) => break,
                    Ok(n) => written += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    Err(e) => return Err(format!("{}: {e}", path.display())),
                }
            }
        }
        Ok(written)
    }

    /// Removes the filler: the space is free again.
    pub fn unfill(&self) -> Result<(), String> {
        std::fs::remove_file(self.filler()).map_err(|e| format!("{}: {e}", self.filler().display()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}
