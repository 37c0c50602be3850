//! Keeping the kernel's cgroup migration lock warm while tasks are about to
//! be confined, so that confining a task does not wait for it.
//!
//! Moving a process into a cgroup takes the kernel's global
//! `cgroup_threadgroup_rwsem` for writing. Unless the hierarchy is mounted
//! with `favordynmods`, a writer that finds the lock idle first waits for an
//! RCU grace period (5–20 ms on the test host), and a writer that comes
//! while the previous write is less than a grace period old does not (0.1 ms).
//! A task's `confine` is such a write, on the job's start path. So for a
//! short window after a job is recorded (`alloc`) or a step asks for its
//! devices (`env`), a thread of cderd rewrites cderd's own membership in its
//! own cgroup (a move to where it already is: no change, but the lock is
//! taken) every 2 ms. The grace period is then waited for off the job's path,
//! by this thread, and the task's move finds the lock warm.
//!
//! It is the trade `favordynmods` makes for good (moves cheap, forks and
//! exits slightly dearer), made only for the window; with `favordynmods`
//! there is nothing to gain and the warm-up stays off.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often the warm-up writes: shorter than any grace period, so the lock
/// never cools down between two writes.
const PERIOD: Duration = Duration::from_millis(2);

/// The warm-up thread's handle; [`MigrationWarmup::warm`] opens a window.
#[derive(Debug, Default)]
pub struct MigrationWarmup {
    shared: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    /// The end of the current window, if one is open.
    until: Mutex<Option<Instant>>,
    wake: Condvar,
    window: Duration,
}

impl MigrationWarmup {
    /// No warm-up (`cgroup_warmup_ms = 0`, no cgroups, `favordynmods`).
    pub fn off() -> MigrationWarmup {
        MigrationWarmup { shared: None }
    }

    /// Starts the thread that rewrites `procs` (the `cgroup.procs` of the
    /// group this process is in) during each window of `window`. The file is
    /// opened here, so a file that cannot be written is found at start.
    pub fn start(procs: &Path, window: Duration) -> std::io::Result<MigrationWarmup> {
        let file = OpenOptions::new().write(true).open(procs)?;
        let shared = Arc::new(Shared { until: Mutex::new(None), wake: Condvar::new(), window });
        let thread_shared = Arc::clone(&shared);
        let path = procs.to_path_buf();
        std::thread::Builder::new().name("cderd-warmup".into()).spawn(move || run(&thread_shared, file, &path))?;
        Ok(MigrationWarmup { shared: Some(shared) })
    }

    /// Whether a thread is warming (for the start log and tests).
    pub fn is_on(&self) -> bool {
        self.shared.is_some()
    }

    /// Opens (or extends) a window: a task is about to be moved.
    pub fn warm(&self) {
        if let Some(s) = &self.shared {
            *s.until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + s.window);
            s.wake.notify_one();
        }
    }
}

fn run(shared: &Shared, mut file: File, path: &Path) {
    let mut writes: u64 = 0;
    loop {
        {
            let mut until = shared.until.lock().unwrap_or_else(|p| p.into_inner());
            while !until.is_some_and(|t| t > Instant::now()) {
                until = shared.wake.wait(until).unwrap_or_else(|p| p.into_inner());
            }
        }
        loop {
            // "0" is this process: it is moved to the group it is in.
            if let Err(e) = file.write_all(b"0") {
                tracing::warn!(path = %path.display(), "cgroup warm-up stopped: writing 0: {e}; confine may wait for RCU grace periods");
                return;
            }
            writes += 1;
            if writes == 1 {
                tracing::debug!(path = %path.display(), "cgroup warm-up: first write");
            }
            std::thread::sleep(PERIOD);
            let until = *shared.until.lock().unwrap_or_else(|p| p.into_inner());
            if until.is_none_or(|t| t <= Instant::now()) {
                break;
            }
        }
    }
}

/// The `cgroup.procs` of the group this process is in, in the hierarchy
/// mounted at `root`: the v1 `devices` hierarchy (`v1`) or cgroup2, from
/// `/proc/self/cgroup`.
pub fn own_procs_file(root: &Path, v1: bool) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own_group(&text, v1)?;
    Some(root.join(path.trim_start_matches('/')).join("cgroup.procs"))
}

/// This process's group in `/proc/self/cgroup` text: `N:devices:/path` for
/// v1, `0::/path` for cgroup2.
fn own_group(text: &str, v1: bool) -> Option<&str> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = if v1 { controllers.split(',').any(|c| c == "devices") } else { controllers.is_empty() };
        wanted.then_some(path)
    })
}

/// Whether a cgroup hierarchy of this node is mounted with `favordynmods`
/// (then moves never wait for a grace period and warming gains nothing).
pub fn favors_dynmods() -> bool {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts_favor_dynmods(&text)
}

fn mounts_favor_dynmods(mountinfo: &str) -> bool {
    mountinfo.lines().any(|line| {
        let Some((before, after)) = line.split_once(" - ") else { return false };
        let tail: Vec<&str> = after.split(' ').collect();
        let cgroup = matches!(tail.first(), Some(&"cgroup" | &"cgroup2"));
        let options = before.split(' ').nth(5).into_iter().chain(tail.get(2).copied());
        cgroup && options.flat_map(|o| o.split(',')).any(|o| o == "favordynmods")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_group_per_hierarchy() {
        let text = "12:pids:/user.slice\n5:devices:/system.slice/cderd.service\n1:name=systemd:/x\n0::/system.slice/cderd.service\n";
        assert_eq!(own_group(text, true), Some("/system.slice/cderd.service"));
        assert_eq!(own_group(text, false), Some("/system.slice/cderd.service"));
        assert_eq!(own_group("3:cpu,devices:/a\n", true), Some("/a"));
        assert_eq!(own_group("3:cpu:/a\n", true), None);
        assert_eq!(own_group("3:cpu:/a\n", false), None);
    }

    #[test]
    fn favordynmods_is_read_from_cgroup_mounts_only() {
        let plain = "35 25 0:30 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let favoured = "35 25 0:30 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,favordynmods\n";
        let other = "40 25 0:31 / /mnt rw - tmpfs tmpfs rw,favordynmods\n";
        assert!(!mounts_favor_dynmods(plain));
        assert!(mounts_favor_dynmods(favoured));
        assert!(!mounts_favor_dynmods(other));
    }

    #[test]
    fn a_window_writes_and_then_stops() {
        // A plain file stands in for cgroup.procs: the writes are counted.
        let dir = std::env::temp_dir().join(format!("cder-warmup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let procs = dir.join("cgroup.procs");
        std::fs::write(&procs, "").unwrap();
        let warmup = MigrationWarmup::start(&procs, Duration::from_millis(30)).unwrap();
        assert!(warmup.is_on());
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(std::fs::read_to_string(&procs).unwrap(), "", "no window, no write");
        warmup.warm();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(&procs).unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let written = std::fs::read_to_string(&procs).unwrap();
        assert!(!written.is_empty() && written.bytes().all(|b| b == b'0'), "{written:?}");
        // After the window the writes stop: the length settles.
        let mut stopped = false;
        while !stopped && Instant::now() < deadline {
            let before = std::fs::read_to_string(&procs).unwrap().len();
            std::thread::sleep(Duration::from_millis(100));
            stopped = std::fs::read_to_string(&procs).unwrap().len() == before;
        }
        assert!(stopped, "still writing long after the window");
        assert!(!MigrationWarmup::off().is_on());
        MigrationWarmup::off().warm();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
