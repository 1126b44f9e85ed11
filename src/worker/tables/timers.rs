//! Deadlines: request timeouts, the drain timeout of requests that ended
//! early, expectation timeouts. Entries are not removed when their request
//! ends (that would cost a search per request); a stale one is skipped when
//! it falls due, and `compact` drops them all once they outnumber the live
//! ones, so the set stays proportional to what is in flight.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

/// What a deadline is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::worker) enum Timer {
    /// Request `slot` of `epoch`: times it out, or (if it has already
    /// ended) stops waiting for its work requests.
    Request { slot: u32, epoch: u32 },
    /// The expectation on `imm` that is request `id`.
    Expect { imm: u32, id: u64 },
}

#[derive(Default)]
pub(in crate::worker) struct Timers {
    /// Deadlines that are `now + the engine's default timeout`: they fall due
    /// in the order they were set, so a queue does (O(1) per request).
    fifo: VecDeque<(Instant, Timer)>,
    /// Every other deadline.
    heap: BinaryHeap<Reverse<(Instant, Timer)>>,
}

impl Timers {
    /// Adds a deadline; `in_order` when it is later than every earlier `in_order` one.
    pub(in crate::worker) fn add(&mut self, when: Instant, t: Timer, in_order: bool) {
        if in_order {
            self.fifo.push_back((when, t));
        } else {
            self.heap.push(Reverse((when, t)));
        }
    }

    /// The next deadline that has passed by `now`, if any.
    pub(in crate::worker) fn due(&mut self, now: Instant) -> Option<Timer> {
        let f = self.fifo.front().map(|e| e.0).filter(|w| *w <= now);
        let h = self.heap.peek().map(|e| e.0.0).filter(|w| *w <= now);
        match (f, h) {
            (Some(a), Some(b)) if b < a => self.heap.pop().map(|e| e.0.1),
            (Some(_), _) => self.fifo.pop_front().map(|e| e.1),
            (None, Some(_)) => self.heap.pop().map(|e| e.0.1),
            (None, None) => None,
        }
    }

    /// The earliest deadline, passed or not.
    pub(in crate::worker) fn next(&self) -> Option<Instant> {
        let f = self.fifo.front().map(|e| e.0);
        let h = self.heap.peek().map(|e| e.0.0);
        f.into_iter().chain(h).min()
    }

    pub(in crate::worker) fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// Drops the entries `live` says are stale.
    pub(in crate::worker) fn compact(&mut self, live: impl Fn(&Timer) -> bool) {
        self.fifo.retain(|e| live(&e.1));
        self.heap.retain(|e| live(&e.0.1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn req(slot: u32) -> Timer {
        Timer::Request { slot, epoch: 0 }
    }

    #[test]
    fn deadlines_fall_due_in_time_order_across_queue_and_heap() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = Timers::default();
        t.add(ms(10), req(1), true);
        t.add(ms(30), req(3), true);
        t.add(ms(20), req(2), false);
        t.add(ms(5), Timer::Expect { imm: 7, id: 9 }, false);
        assert_eq!(t.due(ms(4)), None);
        let order: Vec<Timer> = std::iter::from_fn(|| t.due(ms(25))).collect();
        assert_eq!(order, [Timer::Expect { imm: 7, id: 9 }, req(1), req(2)]);
        assert_eq!(t.len(), 1);
        assert_eq!(t.due(ms(30)), Some(req(3)));
    }

    #[test]
    fn compact_keeps_only_live_entries() {
        let now = Instant::now();
        let mut t = Timers::default();
        for s in 0..100 {
            t.add(now, req(s), s % 2 == 0);
        }
        t.compact(|x| matches!(x, Timer::Request { slot, .. } if slot % 10 == 0));
        assert_eq!(t.len(), 10);
        let left: Vec<Timer> = std::iter::from_fn(|| t.due(now)).collect();
        assert!(left.iter().all(|x| matches!(x, Timer::Request { slot, .. } if slot % 10 == 0)));
    }
}
