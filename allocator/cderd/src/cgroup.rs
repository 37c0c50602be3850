//! Per-job device cgroups: the kernel, not file modes, keeps a job's
//! processes away from the other jobs' devices; file modes alone are advisory.
//!
//! A job's group lives under `<root>/<cgroup_parent>/` of each hierarchy in
//! use and is named after the job and its allocation token, so a requeued
//! job with the same key never inherits the rules of its earlier life. In
//! the group, every device cderd manages except the job's own is denied;
//! everything else stays allowed (`/dev/null`, `/dev/nvidiactl`, …).
//!
//! * cgroup v1: the `devices` controller. A new group inherits the parent's
//!   default-allow behaviour; cderd writes `c MAJ:MIN rwm` to
//!   `devices.deny` for every other job's device.
//! * cgroup v2: a `BPF_PROG_TYPE_CGROUP_DEVICE` program, assembled here
//!   (a compare-and-deny block per denied device, allow at the end),
//!   loaded with `bpf(BPF_PROG_LOAD)` and attached to the group with
//!   `BPF_PROG_ATTACH` / `BPF_CGROUP_DEVICE` and `BPF_F_ALLOW_MULTI`, so
//!   it composes with programs attached above (all must allow).
//!
//! `confine` writes the caller's pid to `cgroup.procs` of each group; the
//! children it forks afterwards inherit the groups. When the job is
//! released, every process still in its groups is ended first (see
//! [`DeviceCgroups::end_processes`]), then the groups are removed; a group
//! whose processes could not be ended stays, and reconcile tries again.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cder_model::config::Enforcement;
use cder_model::{CgroupMode, JobKey};

use crate::sys::{self, BpfInsn};

/// A failed cgroup step, naming the path or call.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// A file operation under the cgroup file system failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`create`, `open`, `remove`, …).
        action: &'static str,
        /// The cgroup file or folder.
        path: PathBuf,
        /// The error the kernel returned.
        source: std::io::Error,
    },
    /// The configured cgroup mode needs a controller or mount this node
    /// lacks; found at start, so cderd refuses to run rather than confine
    /// nothing.
    #[error("[node.enforcement] cgroup = {mode:?} needs {what}, which this node does not offer: {why}")]
    Missing {
        /// The `cgroup` setting as written (`auto`, `v1`, `v2`, `both`).
        mode: &'static str,
        /// The missing piece (the v1 `devices` controller, v2 device BPF).
        what: &'static str,
        /// What was looked at and not found.
        why: String,
    },
    /// The kernel refused the device program (no BPF support, or the
    /// verifier rejected it).
    #[error("loading the device BPF program: {0}")]
    BpfLoad(std::io::Error),
    /// A device's file does not exist and discovery knows no number for
    /// it: a job's group could not deny it once the file appears.
    #[error(
        "device {device}: {} does not exist and its device number is unknown, so a job's device cgroup cannot deny it; \
         not confining any job until it is known (a static device takes dev = \"MAJOR:MINOR\")",
        path.display()
    )]
    UnknownNumber {
        /// The device, as operators name it (`<type>:<index>`).
        device: String,
        /// Its device file.
        path: PathBuf,
    },
    /// The kernel refused to attach the device program to a job's cgroup.
    #[error("attaching the device BPF program to {}: {source}", path.display())]
    BpfAttach {
        /// The job's cgroup folder.
        path: PathBuf,
        /// The error bpf(2) returned.
        source: std::io::Error,
    },
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError::Io { action, path: path.to_path_buf(), source }
}

pub use cder_model::{DeviceNumber, SharedFile};

/// A device a job's group may have to deny.
#[derive(Debug, Clone)]
pub struct Fenced<'a> {
    /// The device, as operators name it (`<type>:<index>`).
    pub name: String,
    /// Its device file.
    pub path: &'a Path,
    /// The number discovery knows for it (NVML, the MIG capability tree,
    /// `/proc/devices`, the static `dev`).
    pub known: Option<DeviceNumber>,
    /// Whether the job holds it.
    pub own: bool,
}

/// The numbers a job's group denies: every number of the devices it does
/// not hold, except one shared with a device it holds. A device's numbers
/// are its file's and the one discovery knows, since nvidia-modprobe makes
/// `/dev/nvidiaN` and the MIG capability files on first use, after the
/// group was set up. A missing file with no known number is an error.
pub fn deny_list(devices: &[Fenced<'_>]) -> Result<Vec<DeviceNumber>, CgroupError> {
    let mut own = BTreeSet::new();
    let mut others = BTreeSet::new();
    for d in devices {
        let numbers = if d.own { &mut own } else { &mut others };
        numbers.extend(d.known);
        match std::fs::metadata(d.path) {
            Ok(meta) if meta.file_type().is_char_device() => {
                numbers.insert(DeviceNumber::from_rdev(meta.rdev()));
            }
            // A plain file is nothing a device cgroup can guard.
            Ok(_) => {}
            Err(_) if d.known.is_some() || d.own => {}
            Err(_) => return Err(CgroupError::UnknownNumber { device: d.name.clone(), path: d.path.to_path_buf() }),
        }
    }
    Ok(others.difference(&own).copied().collect())
}

/// The device program: deny (return 0) a character-device access whose
/// major:minor is in `deny`, allow (return 1) everything else.
pub fn device_program(deny: &[DeviceNumber]) -> Vec<BpfInsn> {
    const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
    const AND32_K: u8 = 0x54; // BPF_ALU | BPF_AND | BPF_K
    const JNE_K: u8 = 0x55; // BPF_JMP | BPF_JNE | BPF_K
    const MOV64_K: u8 = 0xb7; // BPF_ALU64 | BPF_MOV | BPF_K
    const EXIT: u8 = 0x95; // BPF_JMP | BPF_EXIT
    const DEV_CHAR: i32 = 2; // BPF_DEVCG_DEV_CHAR
    let mut p = vec![
        // struct bpf_cgroup_dev_ctx { u32 access_type; u32 major; u32 minor; }
        BpfInsn::new(LDX_W, 2, 1, 0, 0),
        // access_type = (BPF_DEVCG_ACC_* << 16) | BPF_DEVCG_DEV_*
        BpfInsn::new(AND32_K, 2, 0, 0, 0xffff),
        BpfInsn::new(LDX_W, 3, 1, 4, 0),
        BpfInsn::new(LDX_W, 4, 1, 8, 0),
        // Not a character device: nothing of ours, allow.
        BpfInsn::new(JNE_K, 2, 0, (4 * deny.len()) as i16, DEV_CHAR),
    ];
    for d in deny {
        // Majors are 12 bits and minors 20: both fit the positive range of
        // the sign-extended immediate.
        p.push(BpfInsn::new(JNE_K, 3, 0, 3, d.major as i32));
        p.push(BpfInsn::new(JNE_K, 4, 0, 2, d.minor as i32));
        p.push(BpfInsn::new(MOV64_K, 0, 0, 0, 0));
        p.push(BpfInsn::new(EXIT, 0, 0, 0, 0));
    }
    p.push(BpfInsn::new(MOV64_K, 0, 0, 0, 1));
    p.push(BpfInsn::new(EXIT, 0, 0, 0, 0));
    p
}

/// The most devices one program denies: keeps it far below the verifier's
/// limits (4 instructions each).
pub const MAX_DENIED: usize = 4096;

/// The device cgroups of this node, as configured and found.
#[derive(Debug, Clone, Default)]
pub struct DeviceCgroups {
    /// `<v1 devices mount>/<cgroup_parent>`, when v1 is in use.
    v1: Option<PathBuf>,
    /// `<cgroup2 mount>/<cgroup_parent>`, when v2 is in use.
    v2: Option<PathBuf>,
    /// Why nothing is in use, for `enforcement_unavailable`.
    unavailable: Option<String>,
    /// The mount points in use (v1 `devices`, cgroup2), for the warm-up.
    roots: (Option<PathBuf>, Option<PathBuf>),
    /// `<v1 freezer mount>/<cgroup_parent>`, when v1 is in use and the
    /// freezer is mounted: stops a released job's forks before the kill.
    freezer: Option<PathBuf>,
    /// Loaded v2 device programs by deny list. A program depends only on
    /// what it denies, so the kernel's verifier runs once per list instead
    /// of once per job (it was most of cderd's CPU per job start).
    programs: Arc<Mutex<HashMap<Vec<DeviceNumber>, OwnedFd>>>,
}

/// Programs kept loaded at most; past this the cache starts again (each
/// attached program keeps its own reference).
const MAX_CACHED_PROGRAMS: usize = 64;

/// The cgroup mounts /proc/self/mountinfo lists: the v1 `devices`
/// controller's and the cgroup2 hierarchy's, each only where the mount
/// shows the hierarchy's root (not a namespaced sub-view).
pub fn find_mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    parse_mountinfo(&text)
}

fn parse_mountinfo(text: &str) -> (Option<PathBuf>, Option<PathBuf>) {
    let mut v1 = None;
    let mut v2 = None;
    for line in text.lines() {
        let Some((before, after)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = before.split(' ').collect();
        let tail: Vec<&str> = after.split(' ').collect();
        if fields.len() < 5 || tail.len() < 3 || fields[3] != "/" {
            continue;
        }
        let mount = PathBuf::from(unescape(fields[4]));
        match tail[0] {
            "cgroup" if tail[2].split(',').any(|o| o == "devices") => v1 = v1.or(Some(mount)),
            "cgroup2" => v2 = v2.or(Some(mount)),
            _ => {}
        }
    }
    (v1, v2)
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let value = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(value);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn mode_name(mode: CgroupMode) -> &'static str {
    match mode {
        CgroupMode::Auto => "auto",
        CgroupMode::V1 => "v1",
        CgroupMode::V2 => "v2",
        CgroupMode::Both => "both",
        CgroupMode::Off => "off",
    }
}

impl DeviceCgroups {
    /// Nothing in use (`cgroup = "off"`, or `cderd --check`).
    pub fn off(why: &str) -> DeviceCgroups {
        DeviceCgroups { unavailable: Some(why.to_string()), ..DeviceCgroups::default() }
    }

    /// Finds the hierarchies `settings.cgroup` asks for and creates the
    /// parent directory in each. A hierarchy the mode requires but the node
    /// lacks is an error (cderd then refuses to start); under `auto` it is
    /// skipped with a log line.
    pub fn new(settings: &Enforcement) -> Result<DeviceCgroups, CgroupError> {
        let mode = settings.cgroup;
        if mode == CgroupMode::Off {
            return Ok(Self::off("[node.enforcement] cgroup = \"off\" on this node"));
        }
        let (found_v1, found_v2) = find_mounts();
        let v1_root = settings.cgroup_v1_root.clone().or(found_v1);
        let v2_root = settings.cgroup_v2_root.clone().or(found_v2);
        let want_v1 = matches!(mode, CgroupMode::Auto | CgroupMode::V1 | CgroupMode::Both);
        let required = |what: &'static str, why: String| -> Result<(), CgroupError> {
            if mode == CgroupMode::Auto {
                tracing::warn!("device cgroups: {what} not used: {why}");
                Ok(())
            } else {
                Err(CgroupError::Missing { mode: mode_name(mode), what, why })
            }
        };
        let mut out = DeviceCgroups::default();
        let mut reasons = Vec::new();
        if want_v1 {
            match v1_root.as_deref().map(|root| Self::prepare_v1(root, &settings.cgroup_parent)) {
                Some(Ok(dir)) => {
                    out.v1 = Some(dir);
                    out.roots.0 = v1_root.clone();
                }
                Some(Err(e)) => {
                    reasons.push(format!("v1: {e}"));
                    required("the cgroup v1 devices controller", e.to_string())?;
                }
                None => {
                    let why = "no cgroup v1 mount with the devices controller in /proc/self/mountinfo".to_string();
                    reasons.push(format!("v1: {why}"));
                    required("the cgroup v1 devices controller", why)?;
                }
            }
        }
        // One hierarchy denies as well as two: `auto` adds cgroup2 only
        // where v1 cannot be used, so that a task is moved once, not twice,
        // on its way to exec.
        let want_v2 =
            matches!(mode, CgroupMode::V2 | CgroupMode::Both) || (mode == CgroupMode::Auto && out.v1.is_none());
        if want_v2 {
            match v2_root.as_deref().map(|root| Self::prepare_v2(root, &settings.cgroup_parent)) {
                Some(Ok(dir)) => {
                    out.v2 = Some(dir);
                    out.roots.1 = v2_root.clone();
                }
                Some(Err(e)) => {
                    reasons.push(format!("v2: {e}"));
                    required("cgroup v2 with device BPF programs", e.to_string())?;
                }
                None => {
                    let why = "no cgroup2 mount in /proc/self/mountinfo".to_string();
                    reasons.push(format!("v2: {why}"));
                    required("cgroup v2 with device BPF programs", why)?;
                }
            }
        }
        if out.v1.is_some() {
            out.freezer = find_freezer().map(|root| root.join(&settings.cgroup_parent));
        }
        if out.v1.is_none() && out.v2.is_none() {
            out.unavailable = Some(format!("no device cgroup can be used on this node ({})", reasons.join("; ")));
        }
        Ok(out)
    }

    fn prepare_v1(root: &Path, parent: &str) -> Result<PathBuf, CgroupError> {
        let marker = root.join("devices.deny");
        if !marker.exists() {
            return Err(CgroupError::Io {
                action: "find the devices controller",
                path: marker,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        let dir = root.join(parent);
        create_dir(&dir)?;
        Ok(dir)
    }

    fn prepare_v2(root: &Path, parent: &str) -> Result<PathBuf, CgroupError> {
        let marker = root.join("cgroup.procs");
        if !marker.exists() {
            return Err(CgroupError::Io {
                action: "find cgroup.procs",
                path: marker,
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        // Proves the kernel takes device programs before any job relies on it.
        sys::bpf_prog_load(
            sys::BPF_PROG_TYPE_CGROUP_DEVICE,
            sys::BPF_CGROUP_DEVICE,
            &device_program(&[]),
            "cder_probe",
        )
        .map_err(CgroupError::BpfLoad)?;
        let dir = root.join(parent);
        create_dir(&dir)?;
        Ok(dir)
    }

    /// Whether any hierarchy is in use.
    pub fn is_available(&self) -> bool {
        self.v1.is_some() || self.v2.is_some()
    }

    /// Why none is, when none is.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// The `cgroup.procs` of cderd's own group in a hierarchy in use (v1
    /// first): what [`crate::warmup`] rewrites.
    pub fn own_procs_file(&self) -> Option<PathBuf> {
        let v1 = self.roots.0.as_deref().and_then(|root| crate::warmup::own_procs_file(root, true));
        v1.or_else(|| self.roots.1.as_deref().and_then(|root| crate::warmup::own_procs_file(root, false)))
    }

    /// The directory name of a job's group: the job key and the start of
    /// its allocation token (a new allocation of the same key is a new group).
    pub fn group_name(job: &JobKey, token: &str) -> String {
        let short: String = token.chars().filter(|c| c.is_ascii_alphanumeric()).take(12).collect();
        format!("{}-{}-{short}", job.lrms().as_str(), job.id())
    }

    /// The paths of `name`'s groups in every hierarchy in use.
    pub fn paths(&self, name: &str) -> Vec<PathBuf> {
        self.v1.iter().chain(self.v2.iter()).map(|p| p.join(name)).collect()
    }

    /// Creates `name`'s groups if needed, with `deny` denied (v1 rules, v2
    /// program), and moves `pid` into each. Returns the group paths.
    pub fn confine(&self, name: &str, deny: &[DeviceNumber], pid: u32) -> Result<Vec<PathBuf>, CgroupError> {
        self.prepare(name, deny)?;
        self.enter(name, pid)
    }

    /// Creates `name`'s groups if needed, with `deny` denied: v1 rules, the
    /// v2 program. Idempotent; cderd does it when a job is recorded, off the
    /// path of the reply, so that a task's `confine` only moves a pid.
    pub fn prepare(&self, name: &str, deny: &[DeviceNumber]) -> Result<(), CgroupError> {
        let deny: Vec<DeviceNumber> =
            deny.iter().copied().collect::<BTreeSet<_>>().into_iter().take(MAX_DENIED).collect();
        let started = std::time::Instant::now();
        if let Some(parent) = &self.v1 {
            let group = parent.join(name);
            create_dir(&group)?;
            let rules = group.join("devices.deny");
            for d in &deny {
                write_file(&rules, &format!("c {d} rwm"), "deny a device in")?;
            }
        }
        if let Some(parent) = &self.v2 {
            let group = parent.join(name);
            create_dir(&group)?;
            let dir = File::open(&group).map_err(io("open", &group))?;
            // One program per group: the device list of an allocation never
            // changes, so an attached program is already the right one.
            let attached = sys::bpf_prog_query_count(&dir, sys::BPF_CGROUP_DEVICE)
                .map_err(|source| CgroupError::BpfAttach { path: group.clone(), source })?;
            if attached == 0 {
                let mut programs = self.programs.lock().unwrap_or_else(|p| p.into_inner());
                if programs.len() >= MAX_CACHED_PROGRAMS && !programs.contains_key(&deny) {
                    programs.clear();
                }
                let prog = match programs.entry(deny.clone()) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(
                        sys::bpf_prog_load(
                            sys::BPF_PROG_TYPE_CGROUP_DEVICE,
                            sys::BPF_CGROUP_DEVICE,
                            &device_program(&deny),
                            "cder_job",
                        )
                        .map_err(CgroupError::BpfLoad)?,
                    ),
                };
                // The attachment holds its own reference: the fd may close.
                sys::bpf_prog_attach(&dir, prog, sys::BPF_CGROUP_DEVICE, sys::BPF_F_ALLOW_MULTI)
                    .map_err(|source| CgroupError::BpfAttach { path: group.clone(), source })?;
            }
        }
        tracing::debug!(group = name, took_us = started.elapsed().as_micros() as u64, "device cgroup prepared");
        Ok(())
    }

    /// Moves `pid` into `name`'s groups, which [`DeviceCgroups::prepare`]
    /// set up. Returns the group paths.
    pub fn enter(&self, name: &str, pid: u32) -> Result<Vec<PathBuf>, CgroupError> {
        // A move takes the kernel's cgroup_threadgroup_rwsem for writing,
        // which without `favordynmods` waits for an RCU grace period
        // (deploy/cderd.md): the one cost of confine that stays per task.
        let started = std::time::Instant::now();
        let mut out = Vec::new();
        for group in self.paths(name) {
            write_file(&group.join("cgroup.procs"), &pid.to_string(), "move the process into")?;
            out.push(group);
        }
        tracing::debug!(group = name, pid, took_us = started.elapsed().as_micros() as u64, "moved into device cgroups");
        Ok(out)
    }

    /// Ends every process in `name`'s groups: on cgroup2 with `cgroup.kill`;
    /// on v1, whose `devices` hierarchy has no freezer, by moving them into a
    /// frozen group of the v1 freezer (where mounted) before the SIGKILL, so
    /// that none forks past it. Then, and where neither applies, SIGKILL
    /// whatever is still listed until nothing is (a fork that raced a round
    /// is caught by the next). Returns the pids still there after
    /// [`END_WITHIN`]: the caller keeps the devices out of the pool.
    pub fn end_processes(&self, name: &str) -> Vec<u32> {
        self.end_processes_within(name, END_WITHIN)
    }

    /// Whether any process is in `name`'s groups now (a read of each
    /// group's `cgroup.procs`: the kernel's, bounded by the processes there).
    pub fn has_processes(&self, name: &str) -> bool {
        self.paths(name).iter().any(|g| !procs(g).is_empty())
    }

    /// As [`DeviceCgroups::end_processes`], giving up after `within`.
    pub fn end_processes_within(&self, name: &str, within: std::time::Duration) -> Vec<u32> {
        let groups: Vec<PathBuf> = self.paths(name).into_iter().filter(|g| g.is_dir()).collect();
        if groups.iter().all(|g| procs(g).is_empty()) {
            return Vec::new();
        }
        if let Some(group) = self.v2.as_ref().map(|p| p.join(name)).filter(|g| g.is_dir()) {
            // Since Linux 5.14; older kernels get the kill rounds below.
            if let Err(e) = write_file(&group.join("cgroup.kill"), "1", "kill the processes of") {
                tracing::debug!(group = name, "cgroup.kill: {e}");
            }
        }
        if let (Some(group), Some(freezer)) =
            (self.v1.as_ref().map(|p| p.join(name)).filter(|g| g.is_dir()), self.freezer.as_ref())
        {
            if let Err(e) = freeze_and_kill(&group, &freezer.join(name)) {
                tracing::warn!(group = name, "freezing the released job's processes: {e}; killing them without");
            }
        }
        let deadline = std::time::Instant::now() + within;
        loop {
            let left: BTreeSet<u32> = groups.iter().flat_map(|g| procs(g)).collect();
            if left.is_empty() {
                return Vec::new();
            }
            if std::time::Instant::now() >= deadline {
                return left.into_iter().collect();
            }
            for pid in &left {
                if let Err(e) = sys::kill_process(*pid) {
                    tracing::warn!(group = name, pid, "ending a released job's process: {e}");
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Removes `name`'s groups. A group that still holds processes stays
    /// (reported; reconcile retries); a missing one is fine.
    pub fn remove(&self, name: &str) -> Vec<CgroupError> {
        let mut errors = Vec::new();
        let freezer = self.freezer.as_ref().map(|p| p.join(name));
        for group in self.paths(name).into_iter().chain(freezer) {
            match std::fs::remove_dir(&group) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => errors.push(CgroupError::Io { action: "remove", path: group, source }),
            }
        }
        errors
    }

    /// The names of every group under the parents (for reconcile's sweep).
    pub fn group_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for parent in self.v1.iter().chain(self.v2.iter()) {
            let Ok(entries) = std::fs::read_dir(parent) else { continue };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    names.insert(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        names
    }
}

/// How long [`DeviceCgroups::end_processes`] keeps killing before it gives
/// up (a process in uninterruptible sleep cannot die until it wakes).
pub const END_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The pids listed in `group`'s `cgroup.procs` (none when it is gone).
fn procs(group: &Path) -> Vec<u32> {
    std::fs::read_to_string(group.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The v1 freezer's mount, from /proc/self/mountinfo (the hierarchy's root only).
fn find_freezer() -> Option<PathBuf> {
    parse_freezer(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default())
}

fn parse_freezer(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let tail: Vec<&str> = after.split(' ').collect();
        let freezer = fields.len() >= 5
            && fields[3] == "/"
            && tail.len() >= 3
            && tail[0] == "cgroup"
            && tail[2].split(',').any(|o| o == "freezer");
        freezer.then(|| PathBuf::from(unescape(fields[4])))
    })
}

/// Moves every process of the v1 devices group `group` into the freezer
/// group `frozen`, freezes it (a process moved in after the freeze is
/// frozen on arrival), and SIGKILLs them all before thawing: a fork racing
/// the move lands in `group` and is moved in the next round.
fn freeze_and_kill(group: &Path, frozen: &Path) -> Result<(), CgroupError> {
    if let Some(parent) = frozen.parent() {
        create_dir(parent)?;
    }
    create_dir(frozen)?;
    let state = frozen.join("freezer.state");
    let deadline = std::time::Instant::now() + END_WITHIN;
    while std::time::Instant::now() < deadline {
        let inside: BTreeSet<u32> = procs(frozen).into_iter().collect();
        let outside: Vec<u32> = procs(group).into_iter().filter(|p| !inside.contains(p)).collect();
        if outside.is_empty() {
            break;
        }
        for pid in outside {
            // One that exited meanwhile is fine.
            let _ = write_file(&frozen.join("cgroup.procs"), &pid.to_string(), "move the process into");
        }
        write_file(&state, "FROZEN", "freeze")?;
        while std::fs::read_to_string(&state).map_err(io("read", &state))?.trim() != "FROZEN"
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }
    for pid in procs(frozen) {
        sys::kill_process(pid).map_err(io("kill a process of", frozen))?;
    }
    write_file(&state, "THAWED", "thaw")
}

fn create_dir(dir: &Path) -> Result<(), CgroupError> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(CgroupError::Io { action: "create", path: dir.to_path_buf(), source }),
    }
}

/// cgroup files take one value per write(2).
fn write_file(path: &Path, value: &str, action: &'static str) -> Result<(), CgroupError> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).map_err(io(action, path))?;
    f.write_all(value.as_bytes()).map_err(io(action, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_list_uses_known_numbers_and_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nvidia-cap120");
        let plain = dir.path().join("nvidia9");
        std::fs::write(&plain, b"").unwrap();
        let n = |major, minor| DeviceNumber { major, minor };
        let dev = |name: &str, path, known, own| Fenced { name: name.into(), path, known, own };
        // /dev/null's file gives 1:3; the missing MIG file is denied by the
        // number discovery knows; the job's own known number stays allowed.
        let list = [
            dev("gpgpu:0", Path::new("/dev/null"), None, false),
            dev("gpgpu:1", &missing, Some(n(237, 120)), false),
            dev("gpgpu:2", &missing, Some(n(237, 111)), true),
            dev("gpgpu:3", &plain, None, false),
        ];
        assert_eq!(deny_list(&list).unwrap(), vec![n(1, 3), n(237, 120)]);
        // A number the job holds is never denied, even if another device shares it.
        let shared =
            [dev("gpgpu:0", Path::new("/dev/null"), None, false), dev("gpgpu:1", &missing, Some(n(1, 3)), true)];
        assert_eq!(deny_list(&shared).unwrap(), vec![]);
        // A missing file with no known number fails closed, naming the device.
        let unknown = [dev("gpgpu:0", Path::new("/dev/null"), None, false), dev("gpgpu:4", &missing, None, false)];
        let e = deny_list(&unknown).unwrap_err().to_string();
        assert!(e.contains("gpgpu:4") && e.contains("nvidia-cap120") && e.contains("unknown"), "{e}");
        // The job's own device may be unknown: not denying it opens nothing.
        assert_eq!(deny_list(&[dev("gpgpu:4", &missing, None, true)]).unwrap(), vec![]);
    }

    #[test]
    fn program_shape_and_jumps() {
        let deny = [DeviceNumber { major: 1, minor: 7 }, DeviceNumber { major: 195, minor: 2 }];
        let p = device_program(&deny);
        assert_eq!(p.len(), 5 + 4 * deny.len() + 2);
        // The type check jumps straight to the final allow.
        let type_check = 4;
        let allow = p.len() - 2;
        assert_eq!(type_check + 1 + p[type_check].off as usize, allow);
        assert_eq!((p[allow].code, p[allow].imm), (0xb7, 1));
        // Each block's misses land on the next block.
        for (i, d) in deny.iter().enumerate() {
            let base = 5 + 4 * i;
            assert_eq!((p[base].imm, p[base + 1].imm), (d.major as i32, d.minor as i32));
            assert_eq!(base + 1 + p[base].off as usize, base + 4);
            assert_eq!(base + 2 + p[base + 1].off as usize, base + 4);
            assert_eq!((p[base + 2].code, p[base + 2].imm, p[base + 3].code), (0xb7, 0, 0x95));
        }
    }

    #[test]
    fn mountinfo_finds_devices_and_cgroup2() {
        let text = "\
30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
31 25 0:27 / /sys/fs/cgroup/devices rw,relatime shared:10 - cgroup cgroup rw,devices
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw
33 25 0:29 /sub /mnt/other\\040dir rw - cgroup2 cgroup2 rw
";
        let (v1, v2) = parse_mountinfo(text);
        assert_eq!(v1.as_deref(), Some(Path::new("/sys/fs/cgroup/devices")));
        assert_eq!(v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(unescape("a\\040b"), "a b");
        assert_eq!(parse_mountinfo("33 25 0:29 /sub /x rw - cgroup2 cgroup2 rw\n"), (None, None));
        assert_eq!(parse_freezer(text), None);
        let freezer = "34 25 0:30 / /sys/fs/cgroup/freezer rw,relatime shared:12 - cgroup cgroup rw,freezer\n";
        assert_eq!(parse_freezer(freezer).as_deref(), Some(Path::new("/sys/fs/cgroup/freezer")));
    }

    #[test]
    fn group_names_carry_the_token() {
        let job: JobKey = "torque:17.ce.example.org".parse().unwrap();
        assert_eq!(DeviceCgroups::group_name(&job, "0a1b2c3d-4e5f-6789-abcd"), "torque-17.ce.example.org-0a1b2c3d4e5f");
    }
}
