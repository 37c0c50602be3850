//! The device-file watcher (`device_files = true`): the
//! owner, mode and ACL cder gives a device file stay as cder set them.
//!
//! The NVIDIA driver's set-uid `nvidia-modprobe` re-creates `/dev/nvidiaN`
//! with the driver's owner and mode (0666 root:root by default) whenever
//! they differ from its settings, unless the driver is loaded with
//! `NVreg_ModifyDeviceFiles=0` (`cderd --check` warns when
//! `/proc/driver/nvidia/params` says `ModifyDeviceFiles: 1`); udev
//! re-applies its rules on a `change` event. Either undoes what cder set: a
//! job's owner, a shared GPU's ACL, a free device's root-only mode.
//!
//! One thread watches the folders of cder's device files with inotify
//! (a file created, renamed into place, or its attributes changed) and
//! looks at them every [`PERIOD`] besides; whenever one of cder's files
//! moved, [`Daemon::reassert_device_files`] checks each against the ledger
//! and sets it again where it differs, logging what it found. Where
//! inotify cannot be had, the period alone.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::daemon::Daemon;

/// How often the files are looked at without an event.
pub const PERIOD: Duration = Duration::from_secs(10);
/// After a first event, how long more events are gathered before looking
/// (a re-creation is a delete, a create and a chmod in a row).
const SETTLE: Duration = Duration::from_millis(20);

/// Starts the watcher where `device_files = true` (none otherwise).
pub fn spawn(daemon: &Arc<Daemon>) {
    let files = daemon.managed_files();
    if files.is_empty() {
        return;
    }
    let daemon = Arc::clone(daemon);
    let spawned = std::thread::Builder::new().name("cderd-file-watch".into()).spawn(move || {
        let mut watch = Inotify::new(&files);
        if let Err(e) = &watch {
            tracing::warn!("device-file watcher: no inotify ({e}); the files are looked at every {PERIOD:?} only");
        }
        loop {
            let moved = match watch.as_mut() {
                Ok(w) => w.wait(PERIOD),
                Err(_) => {
                    std::thread::sleep(PERIOD);
                    true
                }
            };
            if moved {
                daemon.reassert_device_files();
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!("cannot start the device-file watcher: {e}");
    }
}

/// An inotify instance watching the folders of some files, for events on
/// those files only.
struct Inotify {
    file: std::fs::File,
    /// Watch descriptor → the names in its folder that matter.
    names: HashMap<i32, BTreeSet<OsString>>,
}

impl Inotify {
    fn new(files: &[PathBuf]) -> std::io::Result<Inotify> {
        let file = crate::sys::inotify_new()?;
        let mut by_dir: HashMap<PathBuf, BTreeSet<OsString>> = HashMap::new();
        for f in files {
            if let (Some(dir), Some(name)) = (f.parent(), f.file_name()) {
                by_dir.entry(dir.to_path_buf()).or_default().insert(name.to_os_string());
            }
        }
        let mut names = HashMap::new();
        for (dir, wanted) in by_dir {
            let mask = libc::IN_ATTRIB | libc::IN_CREATE | libc::IN_MOVED_TO;
            match crate::sys::inotify_watch(&file, &dir, mask) {
                Ok(wd) => {
                    names.insert(wd, wanted);
                }
                // A folder made later (/dev/nvidia-caps before any MIG
                // instance): the periodic look covers its files.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    tracing::debug!(dir = %dir.display(), "device-file watcher: no such folder yet; looked at every {PERIOD:?}");
                }
                Err(e) => tracing::warn!(dir = %dir.display(), "device-file watcher: cannot watch the folder: {e}"),
            }
        }
        Ok(Inotify { file, names })
    }

    /// Waits up to `timeout` for an event on a watched file; true when one
    /// came (or the wait ran out: the periodic look).
    fn wait(&mut self, timeout: Duration) -> bool {
        if !crate::sys::readable_within(&self.file, timeout) {
            return true;
        }
        if !self.read_matching() {
            return false;
        }
        // Gather the rest of a re-creation before looking.
        std::thread::sleep(SETTLE);
        while crate::sys::readable_within(&self.file, Duration::ZERO) {
            self.read_matching();
        }
        true
    }

    /// Reads the pending events; whether one names a watched file.
    fn read_matching(&mut self) -> bool {
        use std::io::Read;
        let mut matched = false;
        let mut buf = [0u8; 8192];
        // Non-blocking: an empty queue ends the loop (WouldBlock).
        while let Ok(n) = self.file.read(&mut buf) {
            if n == 0 {
                break;
            }
            matched |= events_name(&buf[..n], |wd, name| self.names.get(&wd).is_some_and(|names| names.contains(name)));
        }
        matched
    }
}

/// Whether one of the inotify events in `bytes` is accepted by `wanted`
/// (its watch descriptor and file name); an overflowed queue counts.
fn events_name(bytes: &[u8], wanted: impl Fn(i32, &OsStr) -> bool) -> bool {
    const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
    let mut at = 0;
    let mut any = false;
    while at + HEADER <= bytes.len() {
        let field = |off: usize| u32::from_ne_bytes(bytes[at + off..at + off + 4].try_into().unwrap_or_default());
        let (wd, mask, len) = (field(0) as i32, field(4), field(12) as usize);
        let name_bytes = bytes.get(at + HEADER..at + HEADER + len).unwrap_or_default();
        let name = OsString::from_vec(name_bytes.iter().copied().take_while(|b| *b != 0).collect());
        if mask & libc::IN_Q_OVERFLOW != 0 || wanted(wd, &name) {
            any = true;
        }
        at += HEADER + len;
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_on_the_watched_files_wake_it_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("nvidia0");
        std::fs::write(&ours, b"").unwrap();
        std::fs::write(dir.path().join("tty7"), b"").unwrap();
        let mut watch = Inotify::new(std::slice::from_ref(&ours)).unwrap();
        assert!(!crate::sys::readable_within(&watch.file, Duration::ZERO), "nothing happened yet");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path().join("tty7"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(!watch.wait(Duration::from_millis(200)), "another file's chmod is not ours");
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(watch.wait(Duration::from_secs(5)), "our file's chmod wakes it");
        std::fs::remove_file(&ours).unwrap();
        std::fs::write(&ours, b"").unwrap();
        assert!(
            crate::sys::readable_within(&watch.file, Duration::from_secs(5)) && watch.read_matching(),
            "a re-created file wakes it"
        );
    }
}
