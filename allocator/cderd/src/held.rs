//! Which processes hold a device open: a descriptor opened while a device
//! was free, or passed over a Unix socket out of the job that had it,
//! survives the chown, chmod and ACL that give the device to the next job.
//!
//! **What the scan reads.** Only what the kernel alone answers, in time
//! bounded by the kernel and never by anything a process puts in it
//! (issues 44 and 52): the entries of `/proc/PID/task` and of each
//! distinct descriptor table's `/proc/PID/task/TID/fd`, and, for each
//! entry, `statx(AT_STATX_DONT_SYNC | AT_NO_AUTOMOUNT, STATX_TYPE)` on the
//! magic link, which gives the file type and `st_rdev` of the open file.
//! Following the magic link jumps straight to the open file's path (no
//! lookup in any file system), and with `AT_STATX_DONT_SYNC` FUSE, NFS,
//! CIFS, Ceph and overlay (which passes the flag on) answer from the
//! attributes the kernel has cached, without asking their server: a user's
//! FUSE server that never answers cannot stall it. `/proc/PID/fdinfo` is
//! never read: it lists every POSIX lock on the file, which a process
//! inflates at will (10,000 byte-range locks made each read ~120 ms), and
//! `/proc/PID/cmdline` never either (it takes the process's mmap lock,
//! which a fault on a stalled FUSE mapping holds for ever).
//!
//! Any path to a device is caught (a copy of the node made with `mknod`, a
//! bind mount): the scan compares device numbers. A thread that gave up
//! its share of the process's descriptor table (`unshare(CLONE_FILES)`),
//! or the threads of a leader that has exited, have tables of their own;
//! `kcmp(KCMP_FILES)` tells them apart, and each distinct table is read.
//!
//! **What it costs.** What the node's descriptors cost, and what a user
//! can add to that is capped: a [`Budget`] per process and per scan. A
//! process with more descriptors than its budget is looked at in parts,
//! over several scans, each resuming where the last stopped; a scan that
//! runs out of time leaves the rest for the next one. The scans that
//! together cover every process once make a *round*; only a finished round
//! says that nothing holds a device, and a look that could not finish is
//! never taken for a finding either way (docs/architecture.md, "The
//! held-open scan").
//!
//! **One scan at a time.** [`Scanner`] runs the scans on one thread of its
//! own; every caller that needs a look asks it and coalesces onto the next
//! scan to start ([`Scanner::ask`]), so a hundred `alloc`s during a scan
//! cost one more scan, not a hundred threads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A process holding one of the devices asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The process holding a device file open.
    pub pid: u32,
    /// Its uid: the first of its real, effective, saved and file-system
    /// uids that is not trusted (root's or an ignored user's), so that a
    /// set-uid program holding a user's descriptor is the user's.
    pub uid: u32,
    /// `/proc/<pid>/comm`, for the log line (untrusted: the process sets it).
    pub comm: String,
    /// When it started, in clock ticks after boot (`/proc/<pid>/stat`,
    /// field 22): with the pid, which process this is, whatever reuses the
    /// pid later.
    pub start_ticks: u64,
    /// Where each device was found: device number → (thread, descriptor),
    /// so that a look again costs one `statx` ([`still_holds`]).
    pub at: BTreeMap<u64, (u32, u32)>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} (uid {}, {:?})", self.pid, self.uid, self.comm)
    }
}

/// The devices looked for: their numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    /// `st_rdev` of each device looked for.
    pub rdevs: BTreeSet<u64>,
}

impl Targets {
    /// The character devices at `paths` (cderd's own device files; those
    /// missing or not character devices are left out).
    pub fn of<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Targets {
        let mut targets = Targets::default();
        for path in paths {
            if let Some(rdev) = char_device(path) {
                targets.rdevs.insert(rdev);
            }
        }
        targets
    }
}

/// The device number of the character device at `path` (root's device
/// files under /dev, never a user's file system).
pub fn char_device(path: &Path) -> Option<u64> {
    let meta = std::fs::metadata(path).ok()?;
    meta.file_type().is_char_device().then(|| meta.rdev())
}

/// What one scan may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Descriptors (and threads) looked at per process per scan; the rest
    /// of a larger process is looked at by the next scans.
    pub per_process: usize,
    /// Wall-clock time per scan; the processes not reached are the next
    /// scan's first.
    pub per_scan: Duration,
}

impl Default for Budget {
    fn default() -> Budget {
        // ~1 µs a descriptor: a process is looked at in at most ~65 ms a
        // scan, and a scan ends within 2 s whatever the node holds.
        Budget { per_process: 65_536, per_scan: Duration::from_secs(2) }
    }
}

/// What a scan found, and how much of the node it covered.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Its number: [`Scanner::ask`]'s tickets count these.
    pub generation: u64,
    /// When it started.
    pub started: Instant,
    /// How long it took.
    pub took: Duration,
    /// The untrusted processes found holding a target device in the
    /// current round so far (this scan and the earlier ones of the round),
    /// by device number.
    pub holders: BTreeMap<u64, Vec<Holder>>,
    /// Set when this scan finished a round: every process now listed in
    /// `/proc` has been looked at whole by scans that started at or after
    /// this instant.
    pub round_since: Option<Instant>,
    /// Processes whose look ran out of its budget (resumed next scan).
    pub unfinished: Vec<u32>,
    /// Processes this scan did not reach (the scan's own budget ran out).
    pub unvisited: usize,
    /// Processes and descriptors looked at by this scan.
    pub processes: usize,
    /// Descriptors whose file this scan placed.
    pub descriptors: u64,
}

impl Scan {
    /// Whether this scan finished a round that started at or after `since`:
    /// nothing it does not name held a target device then.
    pub fn covers(&self, since: Instant) -> bool {
        self.round_since.is_some_and(|r| r >= since)
    }

    /// The holders of device `rdev` it names.
    pub fn holders_of(&self, rdev: u64) -> &[Holder] {
        self.holders.get(&rdev).map_or(&[], Vec::as_slice)
    }
}

/// Which uids are trusted: root's and the ignored users'.
pub type Trusted = Arc<dyn Fn(u32) -> bool + Send + Sync>;

/// What the scanner thread keeps between scans.
#[derive(Default)]
struct Rounds {
    round: u64,
    /// When the current round's first scan started.
    round_started: Option<Instant>,
    /// The round in which each pid was last looked at whole.
    covered: HashMap<u32, u64>,
    /// Where the look at a process stopped (its budget ran out).
    cursors: HashMap<u32, Cursor>,
    /// What the current round found, device → pid → holder.
    found: BTreeMap<u64, BTreeMap<u32, Holder>>,
}

/// Where a look at a process stopped: the table (thread id) and the
/// descriptor to go on from, for the process that started at `start_ticks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    start_ticks: u64,
    tid: u32,
    fd: u32,
}

/// One look at one process.
#[derive(Debug, Default)]
struct Look {
    /// Device number → where it was found (thread, descriptor).
    found: BTreeMap<u64, (u32, u32)>,
    /// Where to go on, when the budget ran out.
    next: Option<(u32, u32)>,
    descriptors: u64,
    /// The process was gone (or could not be read).
    gone: bool,
}

/// Scratch space reused across looks.
struct Scratch {
    dents: Vec<u8>,
    names: Vec<u32>,
    tids: Vec<u32>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { dents: vec![0; 64 * 1024], names: Vec::new(), tids: Vec::new() }
    }
}

/// Opens `name` under `dir` (or the absolute `name`) as a directory.
fn open_dir(dir: Option<RawFd>, name: &CStr) -> Option<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: openat takes a NUL-terminated path that outlives the call.
    let fd = unsafe { libc::openat(dir.unwrap_or(libc::AT_FDCWD), name.as_ptr(), flags) };
    // SAFETY: a non-negative return is a new descriptor nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The numeric names in directory `dir` (getdents64), in the order the
/// kernel lists them; `false` when it could not be read.
fn numbers(dir: &OwnedFd, buf: &mut [u8], out: &mut Vec<u32>) -> bool {
    out.clear();
    loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dir.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return false;
        }
        if n == 0 {
            return true;
        }
        let mut at = 0usize;
        let end = n as usize;
        // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name.
        while at + 19 < end {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 || at + reclen > end {
                break;
            }
            let name = &buf[at + 19..at + reclen];
            let mut value: u64 = 0;
            let mut digits = 0;
            for &b in name {
                if !b.is_ascii_digit() {
                    break;
                }
                value = value * 10 + u64::from(b - b'0');
                digits += 1;
            }
            let whole = name.get(digits).is_none_or(|b| *b == 0);
            if digits > 0 && digits < 11 && whole {
                if let Ok(v) = u32::try_from(value) {
                    out.push(v);
                }
            }
            at += reclen;
        }
    }
}

/// `n` as a NUL-terminated decimal in `buf`.
fn decimal(n: u32, buf: &mut [u8; 16]) -> &CStr {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    let mut v = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let len = digits.len() - i;
    buf[..len].copy_from_slice(&digits[i..]);
    buf[len] = 0;
    CStr::from_bytes_with_nul(&buf[..=len]).expect("one NUL, at the end")
}

/// The device number of the character device the magic link `name` under
/// `dir` (a `/proc/…/fd` directory) leads to, from what the kernel has
/// cached: `AT_STATX_DONT_SYNC` (no file system asks its server) and
/// `AT_NO_AUTOMOUNT`; `None` for anything else, or what cannot be read.
fn char_rdev_at(dir: RawFd, name: &CStr) -> Option<u64> {
    // MUTATION fdinfo-scan (test builds only): read fdinfo, which lists every lock on the file.
    if cder_model::mutation::on("fdinfo-scan") {
        let _ = std::fs::read_to_string(format!("/proc/self/fd/{dir}/../fdinfo/{}", name.to_string_lossy()));
    }
    // MUTATION fuse-stat (test builds only): stat through the link, into any file system.
    if cder_model::mutation::on("fuse-stat") {
        // SAFETY: stat is plain data; all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstatat fills `st`, which lives across the call; the name is NUL-terminated.
        let done = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, 0) };
        return (done == 0 && st.st_mode & libc::S_IFMT == libc::S_IFCHR).then_some(st.st_rdev);
    }
    // SAFETY: statx is plain data; all zeroes is a valid value.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx fills `buf`, which lives across the call; the name is NUL-terminated.
    let done = unsafe {
        libc::statx(dir, name.as_ptr(), libc::AT_STATX_DONT_SYNC | libc::AT_NO_AUTOMOUNT, libc::STATX_TYPE, &mut buf)
    };
    let char_device = u32::from(buf.stx_mode) & libc::S_IFMT == libc::S_IFCHR;
    (done == 0 && char_device).then(|| libc::makedev(buf.stx_rdev_major, buf.stx_rdev_minor))
}

/// Whether threads `a` and `b` share one descriptor table (`kcmp`);
/// `None` where the kernel cannot say (no kcmp, a thread gone).
fn same_table(a: u32, b: u32) -> Option<bool> {
    const KCMP_FILES: libc::c_int = 2;
    // SAFETY: kcmp takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_kcmp, a as libc::pid_t, b as libc::pid_t, KCMP_FILES, 0, 0) };
    (rc >= 0).then_some(rc == 0)
}

/// Looks at the process `pid` (its entry under the open `/proc` dir):
/// every distinct descriptor table of its threads, from `from` (a table's
/// thread id and a descriptor) on, placing at most `budget` descriptors.
fn look_at(
    proc_dir: RawFd,
    pid: u32,
    targets: &BTreeSet<u64>,
    from: Option<(u32, u32)>,
    budget: usize,
    s: &mut Scratch,
) -> Look {
    let mut look = Look::default();
    let mut name = [0u8; 16];
    let Some(process) = open_dir(Some(proc_dir), decimal(pid, &mut name)) else {
        look.gone = true;
        return look;
    };
    let Some(task) = open_dir(Some(process.as_raw_fd()), c"task") else {
        look.gone = true;
        return look;
    };
    if !numbers(&task, &mut s.dents, &mut s.tids) {
        look.gone = true;
        return look;
    }
    // The leader first, then the other threads in order: a cursor's key.
    let key = |tid: u32| (tid != pid, tid);
    s.tids.sort_unstable_by_key(|t| key(*t));
    // One thread per distinct table (most processes: the leader's alone).
    // Each thread is compared with the leader's table and the last one
    // found (kcmp): threads sharing some other table are read again,
    // within the budget.
    let mut tables: Vec<u32> = Vec::with_capacity(1);
    for &tid in &s.tids {
        let distinct = match tables.as_slice() {
            [] => true,
            [leader] => same_table(*leader, tid) == Some(false),
            [leader, .., last] => same_table(*leader, tid) == Some(false) && same_table(*last, tid) == Some(false),
        };
        if distinct {
            tables.push(tid);
        }
    }
    let mut spent = 0usize;
    for &tid in &tables {
        let skip_below = match from {
            Some((t, _)) if key(tid) < key(t) => continue,
            Some((t, fd)) if t == tid => fd,
            _ => 0,
        };
        let Some(thread) = open_dir(Some(task.as_raw_fd()), decimal(tid, &mut name)) else { continue };
        let Some(fds) = open_dir(Some(thread.as_raw_fd()), c"fd") else { continue };
        if !numbers(&fds, &mut s.dents, &mut s.names) {
            continue;
        }
        for &fd in s.names.iter().filter(|fd| **fd >= skip_below) {
            if spent >= budget {
                look.next = Some((tid, fd));
                return look;
            }
            spent += 1;
            look.descriptors += 1;
            if let Some(rdev) = char_rdev_at(fds.as_raw_fd(), decimal(fd, &mut name)) {
                if targets.contains(&rdev) {
                    look.found.entry(rdev).or_insert((tid, fd));
                }
            }
        }
    }
    // A cursor whose table is gone: that part is over.
    look
}

/// `/proc/<pid>/stat`'s start time (field 22), in clock ticks after boot.
pub fn start_ticks(proc_root: &Path, pid: u32) -> Option<u64> {
    let stat = std::fs::read(proc_root.join(pid.to_string()).join("stat")).ok()?;
    // The command (field 2) is in parentheses and may hold any byte: the
    // fields after it start after its last ')'.
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that started at `start_ticks` still runs as `pid`:
/// neither gone nor a zombie (which holds no descriptors, and whose parent
/// may never reap it).
pub fn runs(proc_root: &Path, pid: u32, start_ticks: u64) -> bool {
    let Ok(stat) = std::fs::read(proc_root.join(pid.to_string()).join("stat")) else { return false };
    let Some(close) = stat.iter().rposition(|b| *b == b')') else { return false };
    let Ok(rest) = std::str::from_utf8(&stat[close + 1..]) else { return false };
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next().unwrap_or("X");
    let started: Option<u64> = fields.nth(18).and_then(|f| f.parse().ok());
    !matches!(state, "Z" | "X" | "x") && started == Some(start_ticks)
}

/// When a process that started `start_ticks` clock ticks after boot
/// started, in unix seconds (`btime` of /proc/stat; to about a second).
pub fn started_unix(start_ticks: u64) -> Option<f64> {
    static BOOT: std::sync::OnceLock<Option<(f64, f64)>> = std::sync::OnceLock::new();
    let (btime, hz) = (*BOOT.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let btime: f64 = stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()?;
        // SAFETY: sysconf takes a constant and touches no memory of ours.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (hz > 0).then_some((btime, hz as f64))
    }))?;
    Some(btime + start_ticks as f64 / hz)
}

/// The holder `pid` as it is now, if one of its uids is untrusted: its
/// uid, command and start time (`None` when it is gone or trusted).
fn describe(
    proc_root: &Path,
    pid: u32,
    trusted: &(dyn Fn(u32) -> bool + Send + Sync),
    at: BTreeMap<u64, (u32, u32)>,
) -> Option<Holder> {
    let dir = proc_root.join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let uids: Vec<u32> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_ascii_whitespace()
        .filter_map(|u| u.parse().ok())
        .collect();
    let uid = uids.into_iter().find(|u| !trusted(*u))?;
    let comm =
        std::fs::read_to_string(dir.join("comm")).map(|c| c.trim_end().chars().take(32).collect()).unwrap_or_default();
    Some(Holder { pid, uid, comm, start_ticks: start_ticks(proc_root, pid)?, at })
}

/// The devices of `targets` that the process `holder` still holds where
/// it was found holding them: the same process (its start time) and, at
/// each descriptor recorded in [`Holder::at`], the same device (one
/// `statx` each). `None` when it is gone, is another process now, or holds
/// none of them there any more (a descriptor moved elsewhere is found by
/// the next scan).
pub fn still_holds(proc_root: &Path, holder: &Holder, targets: &BTreeSet<u64>) -> Option<BTreeSet<u64>> {
    let proc_dir = open_dir(None, &std::ffi::CString::new(proc_root.as_os_str().as_encoded_bytes()).ok()?)?;
    if start_ticks(proc_root, holder.pid)? != holder.start_ticks {
        return None;
    }
    let mut name = [0u8; 16];
    let process = open_dir(Some(proc_dir.as_raw_fd()), decimal(holder.pid, &mut name))?;
    let task = open_dir(Some(process.as_raw_fd()), c"task")?;
    let mut held = BTreeSet::new();
    for (rdev, (tid, fd)) in holder.at.iter().filter(|(r, _)| targets.contains(r)) {
        let Some(thread) = open_dir(Some(task.as_raw_fd()), decimal(*tid, &mut name)) else { continue };
        let Some(fds) = open_dir(Some(thread.as_raw_fd()), c"fd") else { continue };
        if char_rdev_at(fds.as_raw_fd(), decimal(*fd, &mut name)) == Some(*rdev) {
            held.insert(*rdev);
        }
    }
    // Still the same process after the looks: they were at its descriptors.
    (!held.is_empty() && start_ticks(proc_root, holder.pid) == Some(holder.start_ticks)).then_some(held)
}

/// Lists every `/proc/PID/fd` under `proc_root` and nothing more: the floor
/// the scan is measured against (BENCHMARKS.md). Returns (processes,
/// entries).
pub fn list_only(proc_root: &Path) -> (usize, u64) {
    let Some(proc_dir) =
        std::ffi::CString::new(proc_root.as_os_str().as_encoded_bytes()).ok().and_then(|p| open_dir(None, &p))
    else {
        return (0, 0);
    };
    let mut s = Scratch::new();
    let mut pids = Vec::new();
    if !numbers(&proc_dir, &mut s.dents, &mut pids) {
        return (0, 0);
    }
    let (mut processes, mut entries) = (0, 0u64);
    let mut name = [0u8; 16];
    for pid in pids {
        let Some(process) = open_dir(Some(proc_dir.as_raw_fd()), decimal(pid, &mut name)) else { continue };
        let Some(fds) = open_dir(Some(process.as_raw_fd()), c"fd") else { continue };
        if numbers(&fds, &mut s.dents, &mut s.names) {
            processes += 1;
            entries += s.names.len() as u64;
        }
    }
    (processes, entries)
}

/// How the scanner finds its targets and whom it trusts.
struct Setup {
    proc_root: PathBuf,
    targets: Box<dyn Fn() -> Targets + Send + Sync>,
    trusted: Trusted,
    budget: Budget,
}

/// One scan: what [`Rounds`] carries over, updated, and what it found.
fn scan_once(setup: &Setup, rounds: &mut Rounds, generation: u64, s: &mut Scratch) -> Scan {
    let started = Instant::now();
    let deadline = started + setup.budget.per_scan;
    let me = std::process::id();
    let targets = (setup.targets)().rdevs;
    let mut scan = Scan {
        generation,
        started,
        took: Duration::ZERO,
        holders: BTreeMap::new(),
        round_since: None,
        unfinished: Vec::new(),
        unvisited: 0,
        processes: 0,
        descriptors: 0,
    };
    let proc_dir =
        std::ffi::CString::new(setup.proc_root.as_os_str().as_encoded_bytes()).ok().and_then(|p| open_dir(None, &p));
    let mut pids = Vec::new();
    let listed = proc_dir.as_ref().is_some_and(|d| numbers(d, &mut s.dents, &mut pids));
    if targets.is_empty() || !listed {
        // Nothing to look for (no device file yet), or no /proc to read:
        // a round of nothing, found at once.
        rounds.found.clear();
        rounds.round_started = None;
        scan.round_since = Some(started).filter(|_| targets.is_empty());
        scan.took = started.elapsed();
        return scan;
    }
    let proc_dir = proc_dir.expect("listed");
    if rounds.round_started.is_none() {
        rounds.round += 1;
        rounds.round_started = Some(started);
        rounds.found.clear();
    }
    let round = rounds.round;
    pids.retain(|p| *p != me);
    pids.sort_unstable();
    let listed: BTreeSet<u32> = pids.iter().copied().collect();
    rounds.covered.retain(|p, _| listed.contains(p));
    rounds.cursors.retain(|p, _| listed.contains(p));
    for found in rounds.found.values_mut() {
        found.retain(|p, _| listed.contains(p));
    }
    // Those looked at in part first (their rest is oldest), then the rest
    // not yet looked at this round.
    let mut order: Vec<u32> = rounds.cursors.keys().copied().collect();
    order.sort_unstable();
    order.extend(
        pids.iter().copied().filter(|p| !rounds.cursors.contains_key(p) && rounds.covered.get(p) != Some(&round)),
    );
    let mut left = order.len();
    for pid in order {
        if Instant::now() >= deadline {
            scan.unvisited = left;
            break;
        }
        left -= 1;
        let resume = rounds.cursors.remove(&pid).and_then(|c| {
            // The same process (pid not reused since): go on where it stopped.
            (start_ticks(&setup.proc_root, pid) == Some(c.start_ticks)).then_some((c.tid, c.fd))
        });
        let look = look_at(proc_dir.as_raw_fd(), pid, &targets, resume, setup.budget.per_process, s);
        scan.processes += 1;
        scan.descriptors += look.descriptors;
        if look.gone {
            continue;
        }
        if !look.found.is_empty() {
            let rdevs: Vec<u64> = look.found.keys().copied().collect();
            if let Some(holder) = describe(&setup.proc_root, pid, setup.trusted.as_ref(), look.found) {
                for rdev in rdevs {
                    rounds.found.entry(rdev).or_default().insert(pid, holder.clone());
                }
            }
        }
        match look.next {
            Some((tid, fd)) => {
                let start_ticks = start_ticks(&setup.proc_root, pid).unwrap_or_default();
                rounds.cursors.insert(pid, Cursor { start_ticks, tid, fd });
                scan.unfinished.push(pid);
            }
            None => {
                rounds.covered.insert(pid, round);
            }
        }
    }
    scan.holders = rounds
        .found
        .iter()
        .filter(|(_, h)| !h.is_empty())
        .map(|(rdev, h)| (*rdev, h.values().cloned().collect()))
        .collect();
    let whole = pids.iter().all(|p| rounds.covered.get(p) == Some(&round) || !pid_exists(proc_dir.as_raw_fd(), *p));
    if whole {
        scan.round_since = rounds.round_started.take();
    }
    scan.took = started.elapsed();
    scan
}

fn pid_exists(proc_dir: RawFd, pid: u32) -> bool {
    let mut name = [0u8; 16];
    open_dir(Some(proc_dir), decimal(pid, &mut name)).is_some()
}

/// One complete look at the node, budgets aside: scans until a round is
/// finished (for `cderd --check`, tests and the benchmark).
pub fn scan_whole(proc_root: &Path, targets: &Targets, trusted: Trusted, budget: Budget) -> Scan {
    let wanted = targets.clone();
    let setup =
        Setup { proc_root: proc_root.to_path_buf(), targets: Box::new(move || wanted.clone()), trusted, budget };
    let mut rounds = Rounds::default();
    let mut s = Scratch::new();
    let mut generation = 0;
    loop {
        generation += 1;
        let scan = scan_once(&setup, &mut rounds, generation, &mut s);
        if scan.round_since.is_some() || generation > 10_000 {
            return scan;
        }
    }
}

/// For each of `targets`' device numbers, the processes that hold it open,
/// leaving out root's processes (root is trusted: the driver's helpers,
/// cderd itself), those of `ignore_uids`, and this process. One complete
/// look (see [`scan_whole`]).
pub fn holders(proc_root: &Path, targets: &Targets, ignore_uids: &BTreeSet<u32>) -> BTreeMap<u64, Vec<Holder>> {
    let ignore = ignore_uids.clone();
    let trusted: Trusted = Arc::new(move |uid| uid == 0 || ignore.contains(&uid));
    scan_whole(proc_root, targets, trusted, Budget::default()).holders
}

/// Work to run with a finished scan.
type AfterScan = Box<dyn FnOnce(&Scan) + Send>;

/// What a caller waits for.
#[derive(Default)]
struct State {
    /// The number the next scan to start gets.
    next: u64,
    /// The highest ticket asked for.
    wanted: u64,
    /// The latest scan finished.
    latest: Option<Arc<Scan>>,
    /// Whether the thread runs.
    running: bool,
    /// Whether a scan is under way now.
    scanning: bool,
    /// Work to run with the first scan numbered at least this.
    after: Vec<(u64, AfterScan)>,
}

struct Shared {
    setup: Setup,
    state: Mutex<State>,
    changed: Condvar,
    /// Run after every scan (the daemon's watcher is told).
    hook: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The one thread that scans, shared by every caller (see the module docs).
#[derive(Clone)]
pub struct Scanner {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner").field("proc_root", &self.shared.setup.proc_root).finish_non_exhaustive()
    }
}

/// The nice value of the scanning thread: a scan never takes a core from
/// the requests it serves, and on a node whose every core is busy it takes
/// what is left (nothing waits for it on a job's start or end).
pub const SCAN_NICE: i32 = 10;

impl Scanner {
    /// A scanner of `proc_root` for the devices `targets` names at each
    /// scan's start, reporting processes with a uid `trusted` rejects. The
    /// thread starts with the first [`Scanner::ask`].
    pub fn new(
        proc_root: &Path,
        targets: impl Fn() -> Targets + Send + Sync + 'static,
        trusted: Trusted,
        budget: Budget,
    ) -> Scanner {
        let setup = Setup { proc_root: proc_root.to_path_buf(), targets: Box::new(targets), trusted, budget };
        Scanner {
            shared: Arc::new(Shared {
                setup,
                state: Mutex::new(State { next: 1, ..State::default() }),
                changed: Condvar::new(),
                hook: Mutex::new(None),
            }),
        }
    }

    /// Runs `hook` on the scanning thread after every scan.
    pub fn on_scan(&self, hook: impl Fn() + Send + Sync + 'static) {
        *lock(&self.shared.hook) = Some(Box::new(hook));
    }

    /// Asks for a scan that starts from now on; its ticket, for
    /// [`Scanner::wait`]. Every ask while a scan runs gets the same next
    /// one.
    pub fn ask(&self) -> u64 {
        let mut state = lock(&self.shared.state);
        let ticket = state.next;
        state.wanted = state.wanted.max(ticket);
        if !state.running {
            state.running = true;
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new().name("cderd-scan".into()).spawn(move || run(&shared));
            if let Err(e) = spawned {
                state.running = false;
                tracing::error!("cannot start the held-open scan's thread: {e}");
            }
        }
        self.shared.changed.notify_all();
        ticket
    }

    /// Waits at most `within` for the scan `ticket` (or a later one) to
    /// finish; that scan, or `None`.
    pub fn wait(&self, ticket: u64, within: Duration) -> Option<Arc<Scan>> {
        let state = lock(&self.shared.state);
        let (state, _) = self
            .shared
            .changed
            .wait_timeout_while(state, within, |s| s.latest.as_ref().is_none_or(|l| l.generation < ticket))
            .unwrap_or_else(|p| p.into_inner());
        state.latest.clone().filter(|l| l.generation >= ticket)
    }

    /// Whether a scan is under way now.
    pub fn scanning(&self) -> bool {
        lock(&self.shared.state).scanning
    }

    /// The latest scan finished, if any.
    pub fn latest(&self) -> Option<Arc<Scan>> {
        lock(&self.shared.state).latest.clone()
    }

    /// Runs `work` on the scanning thread with the scan `ticket` (or a
    /// later one) once it has finished. Keep it short: the next scan waits.
    pub fn then(&self, ticket: u64, work: impl FnOnce(&Scan) + Send + 'static) {
        let mut state = lock(&self.shared.state);
        match state.latest.clone().filter(|l| l.generation >= ticket) {
            Some(done) => {
                drop(state);
                work(&done);
            }
            None => state.after.push((ticket, Box::new(work))),
        }
    }

    /// The directory it scans.
    pub fn proc_root(&self) -> &Path {
        &self.shared.setup.proc_root
    }

    /// Whom it trusts.
    pub fn trusted(&self) -> &Trusted {
        &self.shared.setup.trusted
    }

    /// Its budget.
    pub fn budget(&self) -> Budget {
        self.shared.setup.budget
    }
}

/// The scanning thread: a scan whenever one is wanted, one at a time.
fn run(shared: &Shared) {
    if let Err(e) = crate::sys::set_thread_nice(SCAN_NICE) {
        tracing::debug!("the held-open scan runs at the daemon's nice value: {e}");
    }
    let mut rounds = Rounds::default();
    let mut scratch = Scratch::new();
    let mut pause = Duration::ZERO;
    loop {
        let generation = {
            let state = lock(&shared.state);
            let mut state = shared.changed.wait_while(state, |s| s.wanted < s.next).unwrap_or_else(|p| p.into_inner());
            let generation = state.next;
            state.next += 1;
            state.scanning = true;
            generation
        };
        // A scan cut short by its budget is followed by a pause as long as
        // it took: a node that always overruns costs at most half a core.
        if !pause.is_zero() {
            std::thread::sleep(pause.min(Duration::from_secs(2)));
        }
        let scan = Arc::new(scan_once(&shared.setup, &mut rounds, generation, &mut scratch));
        pause = if scan.unvisited > 0 || !scan.unfinished.is_empty() { scan.took } else { Duration::ZERO };
        if scan.unvisited > 0 || !scan.unfinished.is_empty() {
            tracing::debug!(
                unvisited = scan.unvisited,
                unfinished = scan.unfinished.len(),
                took_ms = scan.took.as_millis() as u64,
                "held-open scan cut short by its budget; the next one goes on"
            );
        }
        let due = {
            let mut state = lock(&shared.state);
            state.latest = Some(Arc::clone(&scan));
            state.scanning = false;
            let (due, later): (Vec<_>, Vec<_>) =
                std::mem::take(&mut state.after).into_iter().partition(|(t, _)| *t <= generation);
            state.after = later;
            shared.changed.notify_all();
            due
        };
        for (_, work) in due {
            work(&scan);
        }
        if let Some(hook) = lock(&shared.hook).as_ref() {
            hook();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_are_read_from_the_magic_link_without_a_file_system() {
        let full = std::fs::metadata("/dev/full").unwrap().rdev();
        let file = std::fs::File::open("/dev/full").unwrap();
        let fds = open_dir(None, c"/proc/self/fd").unwrap();
        let mut name = [0u8; 16];
        assert_eq!(char_rdev_at(fds.as_raw_fd(), decimal(file.as_raw_fd() as u32, &mut name)), Some(full));
        assert_eq!(char_rdev_at(fds.as_raw_fd(), decimal(999_999, &mut name)), None);
        let mut s = Scratch::new();
        let mut listed = Vec::new();
        assert!(numbers(&fds, &mut s.dents, &mut listed));
        assert!(listed.contains(&(file.as_raw_fd() as u32)), "{listed:?}");
        assert_eq!(decimal(0, &mut name).to_bytes(), b"0");
        assert_eq!(decimal(4_294_967_295, &mut name).to_bytes(), b"4294967295");
    }

    #[test]
    fn a_process_over_its_budget_is_looked_at_over_several_scans() {
        // This process holds /dev/full behind 300 other descriptors; with a
        // budget of 100 a process, the look resumes where it stopped.
        let full = std::fs::metadata("/dev/full").unwrap().rdev();
        let null = std::fs::File::open("/dev/null").unwrap();
        let many: Vec<OwnedFd> = (0..300).map(|_| null.try_clone().unwrap().into()).collect();
        let held = std::fs::File::open("/dev/full").unwrap();
        let me = std::process::id();
        let proc_dir = open_dir(None, c"/proc").unwrap();
        let targets: BTreeSet<u64> = [full].into();
        let mut s = Scratch::new();
        let mut from = None;
        let mut found = BTreeSet::new();
        let mut looks = 0;
        loop {
            looks += 1;
            let look = look_at(proc_dir.as_raw_fd(), me, &targets, from, 100, &mut s);
            assert!(!look.gone);
            found.extend(look.found.into_keys());
            match look.next {
                Some(next) => from = Some(next),
                None => break,
            }
            assert!(looks < 20);
        }
        assert!(looks >= 3, "{looks} looks");
        assert_eq!(found, targets);
        drop((many, held));
    }

    #[test]
    fn a_thread_with_a_table_of_its_own_is_looked_at() {
        // A thread unshares its descriptor table and opens /dev/full there:
        // /proc/PID/fd (the leader's table) does not show it.
        let full = std::fs::metadata("/dev/full").unwrap().rdev();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            // SAFETY: unshare takes a flag; this thread's table becomes its own copy.
            assert_eq!(unsafe { libc::unshare(libc::CLONE_FILES) }, 0);
            let held = std::fs::File::open("/dev/full").unwrap();
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = stop_rx.recv();
            drop(held);
        });
        let tid = rx.recv().unwrap();
        let me = std::process::id();
        let leader = std::fs::read_dir(format!("/proc/{me}/fd"))
            .unwrap()
            .flatten()
            .any(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.file_type().is_char_device() && m.rdev() == full));
        let proc_dir = open_dir(None, c"/proc").unwrap();
        let look = look_at(proc_dir.as_raw_fd(), me, &[full].into(), None, 100_000, &mut Scratch::new());
        stop_tx.send(()).unwrap();
        thread.join().unwrap();
        if same_table(me, tid).is_none() {
            eprintln!("skipping: no kcmp on this kernel");
            return;
        }
        assert!(!leader, "the leader's table should not hold /dev/full");
        assert_eq!(look.found.get(&full).map(|at| at.0), Some(tid), "the thread's own table was not read");
    }

    #[test]
    fn the_scanner_coalesces_callers_onto_one_scan() {
        let full = std::fs::metadata("/dev/full").unwrap().rdev();
        let trusted: Trusted = Arc::new(|_| false);
        let scanner =
            Scanner::new(Path::new("/proc"), move || Targets { rdevs: [full].into() }, trusted, Budget::default());
        let held = std::fs::File::open("/dev/full").unwrap();
        let tickets: Vec<u64> = (0..5).map(|_| scanner.ask()).collect();
        let scan = scanner.wait(*tickets.last().unwrap(), Duration::from_secs(30)).expect("a scan");
        // Asked before any started: all five are the first scan.
        assert!(tickets.iter().all(|t| *t == tickets[0]), "{tickets:?}");
        assert!(scan.round_since.is_some());
        // This process is left out (cderd never finds itself).
        assert!(scan.holders_of(full).iter().all(|h| h.pid != std::process::id()));
        let (tx, rx) = std::sync::mpsc::channel();
        scanner.then(scan.generation, move |s| tx.send(s.generation).unwrap());
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), scan.generation);
        drop(held);
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
        let mut seen = None;
        // The child may still be exec'ing; the fd is there from fork on.
        for _ in 0..200 {
            let found = holders(Path::new("/proc"), &wanted, &BTreeSet::new());
            if let Some(h) = found.get(&full).and_then(|h| h.iter().find(|h| h.pid == pid && h.uid == 65534)) {
                seen = Some(h.clone());
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let ignored = holders(Path::new("/proc"), &wanted, &[65534].into());
        let still = seen.as_ref().and_then(|h| still_holds(Path::new("/proc"), h, &wanted.rdevs));
        let _ = child.kill();
        let _ = child.wait();
        let seen = seen.expect("the child holding /dev/full was not found");
        assert_eq!(still, Some([full].into()));
        assert!(ignored.get(&full).is_none_or(|h| h.iter().all(|h| h.pid != pid)), "{ignored:?}");
        // Gone: no longer a holder.
        assert_eq!(still_holds(Path::new("/proc"), &seen, &wanted.rdevs), None);
    }
}
