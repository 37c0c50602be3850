//! Ending what a released job leaves behind, off the ledger lock.
//!
//! The ledger lock covers only the ledger (docs/architecture.md, "The
//! ledger lock"): a job's leftover processes are the user's, and one in
//! uninterruptible sleep (a read from the user's own FUSE mount) outlives
//! every `SIGKILL` for as long as the user likes. So they are ended on
//! threads of their own, each request waits for that at most a bounded
//! time, and the devices such a process may still hold stay out of the
//! pool (a leftover in the ledger) until a later look finds it gone.
//!
//! A device is kept out only for something found: a process of the job
//! left in its device cgroups, or a process found holding the device
//! (issue 52). A process outside the job that holds a released device (a
//! descriptor passed over a Unix socket) is ended too ([`end_holders`]).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a `release` waits for its job's leftovers to be ended before
/// it answers, keeping the devices out until they are.
pub const RELEASE_WAITS: Duration = Duration::from_millis(400);
/// How long `status` and `reconcile` wait for a look at the devices kept
/// out after a release before they answer with what the ledger says.
pub const RECHECK_WAITS: Duration = Duration::from_millis(200);
/// How long an `alloc` waits for a scan of the node's open descriptors
/// when the latest is older than [`SCAN_FRESH`].
pub const SCAN_WAITS: Duration = Duration::from_millis(500);
/// The oldest scan an `alloc` where cderd chooses takes as it is (the
/// holders it names are looked at again first): scans run after every
/// release, so on a busy node the latest is always this recent.
pub const SCAN_FRESH: Duration = Duration::from_secs(2);
/// How long a holder outside its job, killed, is waited for before it
/// counts as not ended (asleep in the kernel past SIGKILL).
pub const KILL_WAITS: Duration = Duration::from_millis(300);

/// A process found holding a device it has no right to (a released job's
/// device, outside the job), and what became of it.
#[derive(Debug, Clone)]
pub struct Ended {
    /// The process.
    pub holder: crate::held::Holder,
    /// `/proc/<pid>/exe`, for the log (`?` when unreadable).
    pub exe: String,
    /// Which of the devices looked for it held.
    pub rdevs: BTreeSet<u64>,
    /// Whether it was gone by the deadline.
    pub gone: bool,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} running {}", self.holder, self.exe)
    }
}

/// Ends each of `candidates` that is still the same process (its start
/// time) and still holds one of `rdevs` where it was found
/// ([`crate::held::still_holds`]): SIGKILL through a pidfd, so never
/// another process that took the pid, then waits until `deadline` for each
/// to be gone. Candidates that are gone or no longer hold a device there
/// are left out.
pub fn end_holders(
    proc_root: &Path,
    candidates: &[crate::held::Holder],
    rdevs: &BTreeSet<u64>,
    deadline: Instant,
) -> Vec<Ended> {
    let mut killed: Vec<(Ended, Option<std::os::fd::OwnedFd>)> = Vec::new();
    let mut seen = BTreeSet::new();
    for h in candidates {
        if !seen.insert(h.pid) {
            continue;
        }
        // Opened first: if the start time below still matches, the pidfd
        // is this process's (a pid is not reused while its process lives).
        let pidfd = i32::try_from(h.pid).ok().and_then(|p| crate::sys::pidfd_open(p).ok());
        let Some(held) = crate::held::still_holds(proc_root, h, rdevs) else { continue };
        let exe = std::fs::read_link(proc_root.join(h.pid.to_string()).join("exe"))
            .map_or_else(|_| "?".to_string(), |p| p.display().to_string());
        let sent = match &pidfd {
            Some(fd) => crate::sys::pidfd_kill(fd),
            None => crate::sys::kill_process(h.pid),
        };
        if let Err(e) = sent {
            tracing::warn!(pid = h.pid, "SIGKILL to a process holding a released device: {e}");
        }
        killed.push((Ended { holder: h.clone(), exe, rdevs: held, gone: false }, pidfd));
    }
    loop {
        for (ended, pidfd) in killed.iter_mut().filter(|(e, _)| !e.gone) {
            ended.gone = match pidfd {
                Some(fd) => crate::sys::pidfd_exited(fd),
                None => !crate::held::runs(proc_root, ended.holder.pid, ended.holder.start_ticks),
            };
        }
        if killed.iter().all(|(e, _)| e.gone) || Instant::now() >= deadline {
            return killed.into_iter().map(|(e, _)| e).collect();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Which device cgroups are being ended now, and the looks asked for at
/// the devices kept out after a release (done by the watcher thread).
#[derive(Debug, Default)]
pub struct Ending {
    busy: Mutex<BTreeSet<String>>,
    looks: Mutex<Looks>,
    changed: Condvar,
    watching: AtomicBool,
}

#[derive(Debug, Default)]
struct Looks {
    asked: u64,
    done: u64,
}

/// A device cgroup claimed by one thread; released on drop.
#[derive(Debug)]
pub struct Claim {
    ending: Arc<Ending>,
    group: String,
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.ending.busy).remove(&self.group);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ending {
    /// Claims `group` for ending its processes; `None` while another
    /// thread is at it (that thread settles the devices).
    pub fn claim(self: &Arc<Self>, group: &str) -> Option<Claim> {
        lock(&self.busy).insert(group.to_string()).then(|| Claim { ending: Arc::clone(self), group: group.to_string() })
    }

    /// Whether a watcher thread takes the looks asked for.
    pub fn is_watched(&self) -> bool {
        self.watching.load(Ordering::SeqCst)
    }

    /// Marks the looks as taken by a watcher thread.
    pub fn watched(&self) {
        self.watching.store(true, Ordering::SeqCst);
    }

    /// Asks the watcher for a look soon; the ticket to wait for.
    pub fn ask(&self) -> u64 {
        let mut looks = lock(&self.looks);
        looks.asked += 1;
        self.changed.notify_all();
        looks.asked
    }

    /// Waits until the look `ticket` is done or `within` has passed.
    pub fn wait(&self, ticket: u64, within: Duration) -> bool {
        let looks = lock(&self.looks);
        let (looks, _) =
            self.changed.wait_timeout_while(looks, within, |l| l.done < ticket).unwrap_or_else(|p| p.into_inner());
        looks.done >= ticket
    }

    /// The watcher's side: waits until a look is asked for or `period`
    /// passes; the ticket to mark [`Ending::done`] after looking.
    pub fn next(&self, period: Duration) -> u64 {
        let looks = lock(&self.looks);
        let (looks, _) =
            self.changed.wait_timeout_while(looks, period, |l| l.asked <= l.done).unwrap_or_else(|p| p.into_inner());
        looks.asked
    }

    /// Every look up to `ticket` is done.
    pub fn done(&self, ticket: u64) {
        let mut looks = lock(&self.looks);
        looks.done = looks.done.max(ticket);
        self.changed.notify_all();
    }
}

/// Runs `work` on a thread of its own and waits for it at most `limit`.
/// `None` when it has not finished: it goes on, and `overran` runs on its
/// thread with the result once it has (the caller went on without it).
pub fn within<T: Send + 'static>(
    what: &'static str,
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
    overran: impl FnOnce(T) + Send + 'static,
) -> Option<T> {
    // (the result, whether the caller stopped waiting)
    let slot = Arc::new((Mutex::new((None::<T>, false)), Condvar::new()));
    let theirs = Arc::clone(&slot);
    let spawned = std::thread::Builder::new().name(format!("cderd-{what}")).spawn(move || {
        let result = work();
        let mut state = lock(&theirs.0);
        if state.1 {
            drop(state);
            overran(result);
        } else {
            state.0 = Some(result);
            theirs.1.notify_all();
        }
    });
    if let Err(e) = spawned {
        tracing::error!("cannot start a thread for {what}: {e}");
        return None;
    }
    let started = Instant::now();
    let state = lock(&slot.0);
    let (mut state, _) = slot.1.wait_timeout_while(state, limit, |s| s.0.is_none()).unwrap_or_else(|p| p.into_inner());
    if state.0.is_none() {
        state.1 = true;
        tracing::warn!("{what}: still running after {:?}; answering without waiting for it", started.elapsed());
    }
    state.0.take()
}
