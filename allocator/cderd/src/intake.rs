//! Records on their way in. SLURM's job prolog sends its `alloc` without
//! waiting for the answer, the largest part of what cder added to a job's
//! start. So the job's first step may ask `env` before that `alloc` is read
//! or committed. This keeps what the step needs to get the prolog's record,
//! or the reason there is none:
//!
//! * the order connections arrived in, and which of them have not yet
//!   sent their first request: an `env` for an unknown job waits for every
//!   connection accepted before its own (the prolog's wrote its line before
//!   the prolog ended, hence before the step could connect);
//! * each job's `alloc` in progress (pending) or refused, and why;
//! * a count of releases, which a pending `alloc` waits on to retry a
//!   conflict (the node's previous job still holding its devices).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cder_model::JobKey;
use cder_protocol::ErrorReply;

/// Refusals kept for `env` to explain; the oldest go first.
pub const KEPT_REFUSALS: usize = 1024;

/// The longest an `env` waits for older connections to send their first
/// request: a client that connects and says nothing only delays the steps
/// of unknown jobs, and only this long.
pub const ARRIVAL_WAIT: Duration = Duration::from_secs(2);

/// What is known of a job's `alloc` that the store does not show.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Read and being answered (or waiting out a conflict) until at most then.
    Pending {
        /// When the `alloc` will have given up at the latest.
        until: Instant,
    },
    /// The last `alloc` for the job was refused.
    Refused {
        /// The uid the job runs as: only it and operators learn why.
        uid: u32,
        /// The answer the `alloc` got.
        reply: ErrorReply,
    },
}

#[derive(Default)]
struct State {
    next_arrival: u64,
    unread: BTreeSet<u64>,
    records: HashMap<JobKey, Record>,
    refused_order: VecDeque<JobKey>,
    releases: u64,
}

/// The daemon's intake; every method is short and takes one lock.
#[derive(Default)]
pub struct Intake {
    state: Mutex<State>,
    changed: Condvar,
}

impl Intake {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_until<'a>(&self, state: MutexGuard<'a, State>, until: Instant) -> MutexGuard<'a, State> {
        let left = until.saturating_duration_since(Instant::now());
        self.changed.wait_timeout(state, left).map(|(s, _)| s).unwrap_or_else(|p| p.into_inner().0)
    }

    /// A connection was accepted: its place in the arrival order, unread
    /// until [`Intake::read`].
    pub fn arrived(&self) -> u64 {
        let mut state = self.lock();
        let seq = state.next_arrival;
        state.next_arrival += 1;
        state.unread.insert(seq);
        seq
    }

    /// The connection `seq` sent its first request (and any pending record
    /// it makes is registered), or closed without one.
    pub fn read(&self, seq: u64) {
        if self.lock().unread.remove(&seq) {
            self.changed.notify_all();
        }
    }

    /// Waits (at most [`ARRIVAL_WAIT`]) until every connection accepted
    /// before `seq` has sent its first request.
    pub fn wait_older_arrivals(&self, seq: u64) {
        let until = Instant::now() + ARRIVAL_WAIT;
        let mut state = self.lock();
        while state.unread.first().is_some_and(|&first| first < seq) && Instant::now() < until {
            state = self.wait_until(state, until);
        }
    }

    /// An `alloc` for `job` is being answered, until `until` at the latest.
    pub fn pending(&self, job: &JobKey, until: Instant) {
        self.lock().records.insert(job.clone(), Record::Pending { until });
    }

    /// The `alloc` for `job` (of `uid`) ended: committed (`None`) or refused.
    pub fn settled(&self, job: &JobKey, uid: u32, refusal: Option<&ErrorReply>) {
        let mut state = self.lock();
        match refusal {
            None => {
                state.records.remove(job);
            }
            Some(reply) => {
                let was_refused = matches!(
                    state.records.insert(job.clone(), Record::Refused { uid, reply: reply.clone() }),
                    Some(Record::Refused { .. })
                );
                if !was_refused {
                    state.refused_order.push_back(job.clone());
                }
                while state.refused_order.len() > KEPT_REFUSALS {
                    if let Some(old) = state.refused_order.pop_front() {
                        if matches!(state.records.get(&old), Some(Record::Refused { .. })) {
                            state.records.remove(&old);
                        }
                    }
                }
            }
        }
        drop(state);
        self.changed.notify_all();
    }

    /// A job released its devices (or reconcile released some): a pending
    /// `alloc` waiting out a conflict retries; the job's refusal is done with.
    pub fn released(&self, job: Option<&JobKey>) {
        let mut state = self.lock();
        state.releases += 1;
        if let Some(job) = job {
            if matches!(state.records.get(job), Some(Record::Refused { .. })) {
                state.records.remove(job);
                state.refused_order.retain(|j| j != job);
            }
        }
        drop(state);
        self.changed.notify_all();
    }

    /// How many releases so far; pass it to [`Intake::wait_release`].
    pub fn releases(&self) -> u64 {
        self.lock().releases
    }

    /// Waits until a release after `seen` (from [`Intake::releases`]), or `until`.
    pub fn wait_release(&self, seen: u64, until: Instant) {
        let mut state = self.lock();
        while state.releases == seen && Instant::now() < until {
            state = self.wait_until(state, until);
        }
    }

    /// What is known of `job` now, after waiting (at most until its own
    /// deadline) for a pending `alloc` to end.
    pub fn settle(&self, job: &JobKey) -> Option<Record> {
        let mut state = self.lock();
        loop {
            match state.records.get(job) {
                Some(Record::Pending { until }) if Instant::now() < *until => {
                    let until = *until;
                    state = self.wait_until(state, until);
                }
                other => return other.cloned(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cder_protocol::ErrorCode;
    use std::sync::Arc;

    fn job(id: &str) -> JobKey {
        format!("slurm:{id}").parse().unwrap()
    }

    #[test]
    fn env_waits_for_older_arrivals_only() {
        let intake = Arc::new(Intake::default());
        let prolog = intake.arrived();
        let step = intake.arrived();
        let later = intake.arrived();
        // The step's wait ends when the prolog's connection is read, whatever
        // the connection after it does.
        let reader = {
            let intake = Arc::clone(&intake);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                intake.pending(&job("1"), Instant::now() + Duration::from_secs(30));
                intake.read(prolog);
            })
        };
        intake.wait_older_arrivals(step);
        assert!(
            matches!(intake.lock().records.get(&job("1")), Some(Record::Pending { .. })),
            "the step looked before the prolog's record was registered"
        );
        reader.join().unwrap();
        assert!(intake.lock().unread.contains(&later));
        intake.read(step);
        intake.read(later);
        assert!(intake.lock().unread.is_empty());
    }

    #[test]
    fn a_pending_alloc_is_waited_for_and_a_refusal_explained() {
        let intake = Arc::new(Intake::default());
        intake.pending(&job("2"), Instant::now() + Duration::from_secs(30));
        let settler = {
            let intake = Arc::clone(&intake);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                intake.settled(
                    &job("2"),
                    1000,
                    Some(&ErrorReply::new(ErrorCode::Conflict, "gpgpu 0 is held by slurm:1")),
                );
            })
        };
        match intake.settle(&job("2")) {
            Some(Record::Refused { uid: 1000, reply }) => assert!(reply.message.contains("held by slurm:1")),
            other => panic!("{other:?}"),
        }
        settler.join().unwrap();
        // A later success, or the job's release, forgets the refusal.
        intake.settled(&job("2"), 1000, None);
        assert_eq!(intake.settle(&job("2")), None);
        intake.settled(&job("3"), 1000, Some(&ErrorReply::new(ErrorCode::Conflict, "x")));
        intake.released(Some(&job("3")));
        assert_eq!(intake.settle(&job("3")), None);
        // A pending record past its deadline is not waited for.
        intake.pending(&job("4"), Instant::now());
        assert!(matches!(intake.settle(&job("4")), Some(Record::Pending { .. })));
    }

    #[test]
    fn refusals_kept_are_bounded() {
        let intake = Intake::default();
        for i in 0..(KEPT_REFUSALS + 10) {
            intake.settled(&job(&i.to_string()), 1000, Some(&ErrorReply::new(ErrorCode::Conflict, "x")));
        }
        let state = intake.lock();
        assert_eq!(state.records.len(), KEPT_REFUSALS);
        assert!(!state.records.contains_key(&job("0")));
        assert!(state.records.contains_key(&job(&(KEPT_REFUSALS + 9).to_string())));
    }

    #[test]
    fn a_conflict_waits_for_the_next_release() {
        let intake = Arc::new(Intake::default());
        let seen = intake.releases();
        let releaser = {
            let intake = Arc::clone(&intake);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                intake.released(None);
            })
        };
        intake.wait_release(seen, Instant::now() + Duration::from_secs(30));
        assert_eq!(intake.releases(), seen + 1);
        releaser.join().unwrap();
    }
}
