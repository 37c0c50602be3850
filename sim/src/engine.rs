//! The discrete-event core: one clock, one queue of future events, integer
//! times, single-threaded. Events at the same time come out in the order
//! they were scheduled, so a replay never depends on a heap's tie order.
//!
//! The batch-system models (`batch`, `conservative`, `moldable`,
//! `sharing`) each drive their own loop over an [`Events`] queue: take every
//! event of the next instant, apply them, then ask the scheduler once.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::Time;

struct Entry<E> {
    at: Time,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    // BinaryHeap is a max-heap: the earliest (time, sequence) is the greatest.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The future events of one replay and its clock.
pub struct Events<E> {
    now: Time,
    seq: u64,
    handled: u64,
    heap: BinaryHeap<Entry<E>>,
}

impl<E> Default for Events<E> {
    fn default() -> Self {
        Events { now: 0, seq: 0, handled: 0, heap: BinaryHeap::new() }
    }
}

impl<E> Events<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The current time: that of the last event taken.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Events taken so far.
    pub fn handled(&self) -> u64 {
        self.handled
    }

    /// Schedules `event` at `at` (never before now: an event in the past
    /// happens now).
    pub fn at(&mut self, at: Time, event: E) {
        let at = at.max(self.now);
        self.heap.push(Entry { at, seq: self.seq, event });
        self.seq += 1;
    }

    /// Schedules `event` `after` milliseconds from now.
    pub fn after(&mut self, after: Time, event: E) {
        self.at(self.now.saturating_add(after), event);
    }

    /// Takes the next event and moves the clock to it.
    pub fn pop(&mut self) -> Option<E> {
        let e = self.heap.pop()?;
        self.now = e.at;
        self.handled += 1;
        Some(e.event)
    }

    /// Takes every event of the next instant, in the order scheduled (an
    /// event scheduled now while handling them comes in the next call).
    pub fn pop_instant(&mut self) -> Vec<E> {
        let mut out = Vec::new();
        let Some(first) = self.heap.peek().map(|e| e.at) else {
            return out;
        };
        while self.heap.peek().is_some_and(|e| e.at == first) {
            if let Some(e) = self.pop() {
                out.push(e);
            }
        }
        out
    }

    /// True when no event is left.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The time of the next event.
    pub fn next_time(&self) -> Option<Time> {
        self.heap.peek().map(|e| e.at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_order_then_schedule_order() {
        let mut q = Events::new();
        q.at(5, "b");
        q.at(3, "a");
        q.at(5, "c");
        assert_eq!(q.pop(), Some("a"));
        assert_eq!(q.now(), 3);
        q.at(1, "late");
        assert_eq!(q.pop_instant(), vec!["late"]);
        assert_eq!(q.pop_instant(), vec!["b", "c"]);
        assert_eq!(q.now(), 5);
        assert!(q.is_empty());
        assert_eq!(q.handled(), 4);
    }
}
