//! Real exclusivity where root allows it (`[node.enforcement]`): the device
//! files of an allocation belong to the job's uid with `job_mode`, and return
//! to `idle_owner:idle_group` with `idle_mode` on release; a shared GPU stays
//! the idle owner's with an ACL entry per sharer uid; NVIDIA devices
//! found through NVML may also be put in EXCLUSIVE_PROCESS compute mode.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::ComputeMode;
use nvml_wrapper::Nvml;

use cder_model::config::Enforcement;
use cder_model::{Config, Discovery, VendorKind};

use crate::acl::Acl;
use crate::store::LedgerRow;

/// The NVIDIA driver's library, as the dynamic loader finds it.
const DRIVER_LIBRARY: &str = "libnvidia-ml.so.1";

/// An enforcement step that failed, naming the device and the call.
#[derive(Debug, thiserror::Error)]
pub enum EnforcementError {
    /// Changing a device file's owner or mode failed.
    #[error("{device}: {action} {}: {source}", path.display())]
    File {
        /// The device, as operators name it (`<type>:<index>`).
        device: String,
        /// `chown`, `chmod`, or setting or removing the ACL.
        action: &'static str,
        /// The device file.
        path: std::path::PathBuf,
        /// The error the kernel returned.
        source: std::io::Error,
    },
    /// NVML could not be loaded for a type whose compute mode is managed.
    #[error("type {cder_type:?}: cannot load NVML from {library}: {source}")]
    NvmlLoad {
        /// The CDER type.
        cder_type: String,
        /// The library tried (`nvml_library` or the driver's).
        library: String,
        /// NVML's error.
        source: nvml_wrapper::error::NvmlError,
    },
    /// An NVML call on one device failed.
    #[error("{device}: NVML {call}: {source}")]
    Nvml {
        /// The device, as operators name it (`<type>:<index>`).
        device: String,
        /// The NVML call that failed.
        call: &'static str,
        /// NVML's error.
        source: nvml_wrapper::error::NvmlError,
    },
}

/// Applies and undoes enforcement on devices.
pub struct Enforcer {
    settings: Enforcement,
    /// NVML handles of the types whose compute mode is managed.
    nvml: HashMap<String, Nvml>,
}

impl std::fmt::Debug for Enforcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enforcer")
            .field("settings", &self.settings)
            .field("nvml_types", &self.nvml.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Enforcer {
    /// Loads NVML for every NVIDIA type discovered through NVML when compute
    /// modes are managed: failing here, at start, beats failing every job.
    pub fn new(config: &Config) -> Result<Enforcer, EnforcementError> {
        let settings = config.node.enforcement.clone();
        let mut nvml = HashMap::new();
        if settings.nvml_exclusive_process {
            for cder in config.cders.iter().filter(|c| c.discovery == Discovery::Nvml && c.vendor == VendorKind::Nvidia)
            {
                let library = cder
                    .nvml_library
                    .as_ref()
                    .map(|p| p.as_os_str().to_owned())
                    .unwrap_or_else(|| DRIVER_LIBRARY.into());
                let handle = Nvml::builder().lib_path(OsStr::new(&library)).init().map_err(|source| {
                    EnforcementError::NvmlLoad {
                        cder_type: cder.name().to_string(),
                        library: library.to_string_lossy().into_owned(),
                        source,
                    }
                })?;
                nvml.insert(cder.name().to_string(), handle);
            }
        }
        Ok(Enforcer { settings, nvml })
    }

    /// Whether anything is enforced at all.
    pub fn is_active(&self) -> bool {
        self.settings.device_files || !self.nvml.is_empty()
    }

    /// Gives `devices` to `uid`. Stops at the first failure; the caller
    /// then releases the allocation (which restores what was changed).
    pub fn apply(&self, uid: u32, devices: &[LedgerRow]) -> Result<(), EnforcementError> {
        for d in devices {
            if self.settings.device_files {
                set_owner(d, &d.path, uid, None, self.settings.job_mode)?;
            }
            self.compute_mode(d, ComputeMode::ExclusiveProcess)?;
        }
        Ok(())
    }

    /// Opens shared `devices` to exactly their sharers, the uids in
    /// `sharers`: the idle owner and group keep them, with `job_mode`'s
    /// group and other bits, and each sharer gets an ACL entry with the
    /// owner's bits of `job_mode` (what a whole GPU's job gets). Called
    /// again whenever the sharers change: the ACL is replaced in one write,
    /// never widened on the way. The compute mode is left as it is
    /// (DEFAULT): EXCLUSIVE_PROCESS would lock out all sharers but one.
    pub fn apply_shared(&self, devices: &[LedgerRow], sharers: &BTreeSet<u32>) -> Result<(), EnforcementError> {
        let mode = self.settings.job_mode & 0o777;
        let mut acl = Acl::from_mode(mode);
        acl.users = sharers.iter().map(|&uid| (uid, acl.owner)).collect();
        for d in devices.iter().filter(|_| self.settings.device_files) {
            let err =
                |action, source| EnforcementError::File { device: d.name(), action, path: d.path.clone(), source };
            std::os::unix::fs::chown(&d.path, Some(self.settings.idle_owner), Some(self.settings.idle_group))
                .map_err(|e| err("chown", e))?;
            crate::acl::set(&d.path, &acl).map_err(|e| err("set the ACL of", e))?;
        }
        Ok(())
    }

    /// Whether device files change owner and mode (`device_files`).
    pub fn manages_files(&self) -> bool {
        self.settings.device_files
    }

    /// Opens a file shared by a vendor's GPUs (AMD's kfd, named `name` in
    /// messages) to exactly `holders`, the uids holding a device of its
    /// types, as a shared GPU is opened to its sharers: the idle owner and
    /// group keep it with `job_mode`'s group and other bits, each holder gets
    /// an ACL entry with its owner bits. No holder: nobody but the idle
    /// owner. A file not made yet (its driver not loaded) is left for the
    /// next change.
    pub fn apply_shared_file(&self, path: &Path, name: &str, holders: &BTreeSet<u32>) -> Result<(), EnforcementError> {
        if !self.settings.device_files || !path.exists() {
            return Ok(());
        }
        let err = |action, source| EnforcementError::File {
            device: name.to_string(),
            action,
            path: path.to_path_buf(),
            source,
        };
        let mut acl = Acl::from_mode(self.settings.job_mode & 0o777);
        acl.users = holders.iter().map(|&uid| (uid, acl.owner)).collect();
        std::os::unix::fs::chown(path, Some(self.settings.idle_owner), Some(self.settings.idle_group))
            .map_err(|e| err("chown", e))?;
        crate::acl::set(path, &acl).map_err(|e| err("set the ACL of", e))
    }

    /// Returns `devices` to their idle owner and mode. Tries every device
    /// and step, and reports every failure.
    pub fn restore(&self, devices: &[LedgerRow]) -> Vec<EnforcementError> {
        let mut errors = Vec::new();
        for d in devices {
            if !d.present {
                continue;
            }
            if self.settings.device_files {
                if let Err(e) = set_owner(
                    d,
                    &d.path,
                    self.settings.idle_owner,
                    Some(self.settings.idle_group),
                    self.settings.idle_mode,
                ) {
                    errors.push(e);
                }
            }
            if let Err(e) = self.compute_mode(d, ComputeMode::Default) {
                errors.push(e);
            }
        }
        errors
    }

    fn compute_mode(&self, d: &LedgerRow, mode: ComputeMode) -> Result<(), EnforcementError> {
        let Some(nvml) = self.nvml.get(&d.cder_type) else {
            return Ok(());
        };
        let nvml_err = |call, source| EnforcementError::Nvml { device: d.name(), call, source };
        // By UUID: NVML's indices shift when a GPU falls off the bus, and
        // the ledger's index is cder's own, not NVML's.
        let mut device = nvml.device_by_uuid(d.uuid.as_str()).map_err(|e| nvml_err("nvmlDeviceGetHandleByUUID", e))?;
        device.set_compute_mode(mode).map_err(|e| nvml_err("nvmlDeviceSetComputeMode", e))
    }
}

/// How cder sets a device file, by who holds the device now.
#[derive(Debug, Clone, Copy)]
pub enum FileWant<'a> {
    /// A job of this uid holds it whole: its owner, `job_mode`, no ACL.
    Job(u32),
    /// These uids share it: `idle_owner:idle_group`, an ACL entry each.
    Shared(&'a BTreeSet<u32>),
    /// Nobody holds it: `idle_owner:idle_group`, `idle_mode`, no ACL.
    Idle,
}

/// A file's owner, group, mode and named ACL users, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState {
    uid: u32,
    gid: u32,
    mode: u32,
    acl: Option<Acl>,
}

impl std::fmt::Display for FileState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} {:04o}", self.uid, self.gid, self.mode)?;
        if let Some(acl) = self.acl.as_ref().filter(|a| !a.users.is_empty()) {
            let users: Vec<String> = acl.users.keys().map(ToString::to_string).collect();
            write!(f, " with ACL entries for uid {}", users.join(", "))?;
        }
        Ok(())
    }
}

fn file_state(path: &Path) -> std::io::Result<FileState> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(FileState { uid: meta.uid(), gid: meta.gid(), mode: meta.mode() & 0o7777, acl: crate::acl::get(path)? })
}

impl Enforcer {
    /// The ACL a file shared by `uids` gets (see [`Enforcer::apply_shared`]).
    fn shared_acl(&self, uids: &BTreeSet<u32>) -> Acl {
        let mut acl = Acl::from_mode(self.settings.job_mode & 0o777);
        acl.users = uids.iter().map(|&uid| (uid, acl.owner)).collect();
        acl
    }

    /// Whether `found` is as cder sets a file for `want`.
    fn is_as_set(&self, found: &FileState, want: FileWant<'_>) -> bool {
        let s = &self.settings;
        match want {
            FileWant::Job(uid) => found.uid == uid && found.mode == s.job_mode & 0o7777 && found.acl.is_none(),
            FileWant::Idle => {
                found.uid == s.idle_owner
                    && found.gid == s.idle_group
                    && found.mode == s.idle_mode & 0o7777
                    && found.acl.is_none()
            }
            FileWant::Shared(uids) => {
                let acl = self.shared_acl(uids);
                let acl_ok = if uids.is_empty() { found.acl.is_none() } else { found.acl.as_ref() == Some(&acl) };
                found.uid == s.idle_owner && found.gid == s.idle_group && found.mode == acl.mode() && acl_ok
            }
        }
    }

    /// Under `device_files`: checks device `d`'s file against how cder set
    /// it for `want`, and sets it so again where it differs (the driver's
    /// `nvidia-modprobe` re-creates a device file 0666 root:root when its
    /// mode or owner differ from the driver's settings, udev re-applies its
    /// rules on a `change` event). `Some(what was found)` when it set it
    /// again; a missing file is left alone (the drain of a vanished file is
    /// the ledger's).
    pub fn reassert_file(&self, d: &LedgerRow, want: FileWant<'_>) -> Result<Option<String>, EnforcementError> {
        self.reassert_path(&d.path, &d.name(), want, |e| match want {
            FileWant::Job(uid) => set_owner(d, &d.path, uid, None, e.settings.job_mode),
            FileWant::Idle => {
                set_owner(d, &d.path, e.settings.idle_owner, Some(e.settings.idle_group), e.settings.idle_mode)
            }
            FileWant::Shared(uids) => e.apply_shared(std::slice::from_ref(d), uids),
        })
    }

    /// As [`Enforcer::reassert_file`], for a file shared by a vendor's
    /// GPUs (kfd, named `name`) held by `holders`.
    pub fn reassert_shared_file(
        &self,
        path: &Path,
        name: &str,
        holders: &BTreeSet<u32>,
    ) -> Result<Option<String>, EnforcementError> {
        self.reassert_path(path, name, FileWant::Shared(holders), |e| e.apply_shared_file(path, name, holders))
    }

    fn reassert_path(
        &self,
        path: &Path,
        name: &str,
        want: FileWant<'_>,
        set: impl FnOnce(&Enforcer) -> Result<(), EnforcementError>,
    ) -> Result<Option<String>, EnforcementError> {
        if !self.settings.device_files {
            return Ok(None);
        }
        let found = match file_state(path) {
            Ok(found) => found,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(EnforcementError::File {
                    device: name.to_string(),
                    action: "read the owner, mode and ACL of",
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        if self.is_as_set(&found, want) {
            return Ok(None);
        }
        set(self)?;
        Ok(Some(found.to_string()))
    }
}

/// What the NVIDIA driver's parameters (`[[cder]] nvidia_params`, default
/// `/proc/driver/nvidia/params`) say against `device_files = true`: one
/// warning per parameters file that says `ModifyDeviceFiles: 1`. The driver
/// then re-creates `/dev/nvidiaN` (through the set-uid `nvidia-modprobe`)
/// with its own owner and mode whenever they differ from its settings,
/// undoing a job's owner or a shared GPU's ACL. A file that cannot be read
/// (no NVIDIA driver loaded) says nothing.
pub fn driver_warnings(config: &Config) -> Vec<String> {
    if !config.node.enforcement.device_files {
        return Vec::new();
    }
    let mut read = BTreeSet::new();
    let mut out = Vec::new();
    for cder in config.cders.iter().filter(|c| c.vendor == VendorKind::Nvidia) {
        if !read.insert(cder.nvidia_params.clone()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&cder.nvidia_params) else { continue };
        let param = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(':')))
                .map(|v| v.trim().to_string())
        };
        if param("ModifyDeviceFiles").as_deref() != Some("1") {
            continue;
        }
        let settings = match (param("DeviceFileUID"), param("DeviceFileGID"), param("DeviceFileMode")) {
            (Some(uid), Some(gid), Some(mode)) => {
                let mode = mode.parse::<u32>().map_or(mode.clone(), |m| format!("{m:04o}"));
                format!(" as {uid}:{gid} {mode}")
            }
            _ => String::new(),
        };
        out.push(format!(
            "{} says ModifyDeviceFiles: 1: the NVIDIA driver (nvidia-modprobe) re-creates /dev/nvidia* device files{settings}              whenever their owner or mode differ from its settings, undoing [node.enforcement] device_files (a job's owner,              a shared GPU's ACL); set `options nvidia NVreg_ModifyDeviceFiles=0` in /etc/modprobe.d/ and reload the driver              (docs/security.md). Until then cderd sets a changed device file again when its watcher finds it",
            cder.nvidia_params.display()
        ));
    }
    out
}

fn set_owner(d: &LedgerRow, path: &Path, uid: u32, gid: Option<u32>, mode: u32) -> Result<(), EnforcementError> {
    let err = |action, source| EnforcementError::File { device: d.name(), action, path: path.to_path_buf(), source };
    // Mode first when tightening, so the file is never owned by the job
    // while still open to others; chown clears setuid bits, mode is set again.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| err("chmod", e))?;
    // A shared device's sharers go with its ACL (the chmod above already
    // narrowed their mask to the new mode's group bits).
    crate::acl::remove(path).map_err(|e| err("remove the ACL of", e))?;
    std::os::unix::fs::chown(path, Some(uid), gid).map_err(|e| err("chown", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| err("chmod", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn row(path: &Path) -> LedgerRow {
        LedgerRow::for_test("gpgpu", 0, "gpgpu-0", path)
    }

    #[test]
    fn file_ownership_round_trip() {
        // chown to another uid needs root; as a normal user, only check the mode path.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nvidia0");
        std::fs::write(&path, b"").unwrap();
        let me = std::fs::metadata(&path).unwrap().uid();
        let mut config = Config::default();
        config.node.enforcement.device_files = true;
        config.node.enforcement.idle_owner = me;
        config.node.enforcement.idle_group = std::fs::metadata(&path).unwrap().gid();
        let job_uid = if me == 0 { 65534 } else { me };
        let e = Enforcer::new(&config).unwrap();
        assert!(e.is_active());
        e.apply(job_uid, &[row(&path)]).unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (job_uid, 0o600));
        assert!(e.restore(&[row(&path)]).is_empty());
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!((m.uid(), m.mode() & 0o7777), (me, 0o600), "idle devices are root-only by default");
    }

    #[test]
    fn missing_file_is_reported_with_device_and_path() {
        let mut config = Config::default();
        config.node.enforcement.device_files = true;
        let e = Enforcer::new(&config).unwrap();
        let err = e.apply(1000, &[row(Path::new("/nonexistent/nvidia0"))]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("gpgpu:0") && text.contains("/nonexistent/nvidia0"), "{text}");
    }
}
