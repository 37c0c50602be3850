//! Ending what a released job leaves behind, off the ledger lock.
//!
//! The ledger lock covers only the ledger (docs/architecture.md, "The
//! ledger lock"): a job's leftover processes are the user's, and one in
//! uninterruptible sleep (a read from the user's own FUSE mount) outlives
//! every `SIGKILL` for as long as the user likes. So they are ended on
//! threads of their own, each request waits for that at most a bounded
//! time, and the devices such a process may still hold stay out of the
//! pool (a leftover in the ledger) until a later look finds it gone.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a `release` waits for its job's leftovers to be ended before
/// it answers, keeping the devices out until they are.
pub const RELEASE_WAITS: Duration = Duration::from_millis(400);
/// How long `status` and `reconcile` wait for a look at the devices kept
/// out after a release before they answer with what the ledger says.
pub const RECHECK_WAITS: Duration = Duration::from_millis(200);
/// How long an `alloc` waits for the scan of the node's open descriptors.
pub const SCAN_WAITS: Duration = Duration::from_millis(500);

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
