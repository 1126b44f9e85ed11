//! The polling pass: the worker's loop (`run`), one pass of it (`step`:
//! new requests, posting, control calls, completions, then every
//! millisecond the deadlines and keepalives), how it waits when idle
//! (`sleep`: spin, nap, or block on the domains' wait fds: waiter.rs), and
//! the immediates that land on a group other than the home one, forwarded
//! there once per pass.
use super::counters::DoneRun;
use super::request::Ctrl;
use super::timers::{Timer, Timers};
use super::waiter::Waiter;
use super::{BLOCK_MAX, Shared, TICK_PASSES, TIMER_TICK, Worker, YIELD_EVERY};
use crate::bell::Bell;
use crate::config::IdlePolicy;
use crate::domain::{Completion, Domain};
use crate::error::{Error, Status};
use crate::wire::MAX_DOMAINS;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The state of the polling pass.
pub(super) struct Pass {
    /// The clock, read in this pass when something first asked for it
    /// (`now`; `fresh`): a pass with nothing to time reads no clock, which
    /// costs 25–35 ns on the lent machines, a third of an empty pass.
    now: Instant,
    fresh: bool,
    /// `now` in nanoseconds since `base`, worked out once a pass when a
    /// request's metrics first ask for it (`now_ns`; 0: not yet). What a
    /// request keeps of its times is this, not an `Instant` (a subtraction
    /// per request instead of a `Duration`'s).
    now_ns: u64,
    base: Instant,
    /// When keepalives and deadlines are looked at next (every TIMER_TICK),
    /// and the passes since the clock was last compared with it (`tick_due`).
    next_tick: Instant,
    unticked: u32,
    /// Request and expectation deadlines (tables/timers.rs).
    pub(super) timers: Timers,
    /// Reused buffers: one poll's completions, a dead peer's abandoned tokens.
    pub(super) comps: Vec<Completion>,
    pub(super) abandoned: Vec<u64>,
    /// Blocks the idle worker on the domains' wait fds (None: it naps).
    pub(super) waiter: Option<Waiter>,
    /// Without a waiter (shm): the group's doorbell, which peers ring
    /// (bell.rs).
    pub(super) bell: Option<Arc<Bell>>,
    /// Peers have doorbells (shm): the entries posted to in this pass are
    /// kept in `posted_to`, and their bells rung at its end.
    pub(super) bell_peers: bool,
    pub(super) posted_to: Vec<u32>,
    /// The home group, where this worker's immediates are counted (`None`:
    /// this is the home group); `forward` holds the arrivals of one pass.
    pub(super) home: Option<Arc<Shared>>,
    pub(super) forward: Vec<(u32, u64)>,
    /// Work requests completed and not yet in the counters (counters.rs).
    pub(super) done: DoneRun,
    /// Bundle members whose work requests just completed, reported after
    /// one flush of `done` for the lot (`Worker::report_members`).
    pub(super) members: Vec<(u32, u32, u8)>,
    /// The last `post_all` left receive buffers unposted: the next posts
    /// them before any work request.
    pub(super) receives_left: bool,
    /// Work requests posted in this pass per domain as requests came in
    /// (`Worker::post_now`): the pass's `POST_BURST` counts them.
    pub(super) posted_now: [usize; MAX_DOMAINS],
}

impl Pass {
    pub(super) fn new(waiter: Option<Waiter>, bell: Option<Arc<Bell>>, home: Option<Arc<Shared>>) -> Pass {
        let now = Instant::now();
        Pass {
            now,
            fresh: false,
            now_ns: 0,
            base: now,
            next_tick: now,
            unticked: 0,
            timers: Timers::default(),
            comps: Vec::with_capacity(64),
            members: Vec::with_capacity(64),
            abandoned: Vec::new(),
            waiter,
            bell,
            bell_peers: false,
            posted_to: Vec::new(),
            home,
            forward: Vec::new(),
            done: DoneRun::default(),
            receives_left: false,
            posted_now: [0; MAX_DOMAINS],
        }
    }

    /// A new pass (or a new part of one): the clock is read again when asked.
    pub(super) fn begin(&mut self) {
        (self.fresh, self.now_ns) = (false, 0);
    }

    /// The time in this pass: the clock, read at the first call after `begin`.
    #[inline]
    pub(super) fn now(&mut self) -> Instant {
        if !self.fresh {
            (self.now, self.fresh) = (Instant::now(), true);
        }
        self.now
    }

    /// `now` in nanoseconds since the worker started (at least 1).
    #[inline]
    pub(super) fn now_ns(&mut self) -> u64 {
        if self.now_ns == 0 {
            let now = self.now();
            self.now_ns = (now.saturating_duration_since(self.base).as_nanos() as u64).max(1);
        }
        self.now_ns
    }

    /// Whether keepalives and deadlines are due (every TIMER_TICK). The
    /// clock is compared in every pass that read it and, in a run of passes
    /// that did not, in every TICK_PASSES-th: a spinning engine's empty passes
    /// read it an eighth as often, and a deadline is late by those few passes
    /// at most.
    fn tick_due(&mut self) -> bool {
        self.unticked += 1;
        if !self.fresh && self.unticked < TICK_PASSES {
            return false;
        }
        self.unticked = 0;
        let now = self.now();
        if now < self.next_tick {
            return false;
        }
        self.next_tick = now + TIMER_TICK;
        true
    }
}

impl<D: Domain> Worker<D> {
    pub(super) fn run(mut self) {
        let (spin, nap) = (self.cfg.idle_spin, self.cfg.idle_nap);
        let mut idle_since: Option<Instant> = None;
        let mut empty_passes = 0u32;
        let mut awaited = false;
        while !self.shared.stop.load(Ordering::Acquire) {
            if self.pass.home.is_none() && self.imm.awaited() != awaited {
                awaited = !awaited;
                self.shared.awaited.store(awaited, Ordering::Relaxed);
            }
            if self.step() {
                idle_since = None;
                // A waiter that shares this core (a small host) sees its
                // completion now rather than at the end of our time slice.
                // (With requests queued, the application is not waiting.)
                if self.notifier.take_fired() && self.shared.data.is_empty() {
                    std::thread::yield_now();
                }
                continue;
            }
            // Nothing happened this pass. On an oversubscribed host, let other
            // runnable threads (the application's, other engines') have the core
            // now and then; with none, sched_yield returns at once.
            empty_passes = empty_passes.wrapping_add(1);
            if empty_passes % YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
            // Work in flight: its completions come any moment, keep polling.
            if self.requests.slots.live() > 0 {
                idle_since = None;
                continue;
            }
            let now = self.pass.now();
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(since) < spin {
                continue;
            }
            // An armed expectation (or a mirror): data may come any moment,
            // through any group's NICs.
            if self.imm.awaited() || self.pass.home.as_ref().is_some_and(|h| h.awaited.load(Ordering::Relaxed)) {
                match self.cfg.idle_policy {
                    IdlePolicy::Spin => continue,
                    IdlePolicy::Auto if self.pass.waiter.is_none() && self.pass.bell.is_none() => continue,
                    _ => {}
                }
            }
            self.shared.napping.store(true, Ordering::SeqCst);
            if self.shared.data.is_empty() && self.shared.ctrl.is_empty() {
                self.sleep(nap);
            }
            self.shared.napping.store(false, Ordering::SeqCst);
        }
        self.shutdown();
    }

    /// Sleeps while idle, for `nap` at most: blocked on the domains' wait fds
    /// (woken by an arrival, a completion, a submit or the next deadline) when
    /// there is a waiter and every domain agrees nothing is pending
    /// (`try_wait`; else it returns to poll), on the doorbell (shm), or a
    /// plain nap.
    fn sleep(&mut self, nap: Duration) {
        let until_timer = || self.pass.timers.next().map_or(BLOCK_MAX, |t| t.saturating_duration_since(Instant::now()));
        if let Some(bell) = self.pass.bell.clone() {
            // Naps of `nap` that a ring ends: on the 16-core VM, 500 µs naps
            // cost 0.03 CPU s/s and wake for a write in 85 µs (p50), 10 ms
            // ones 0.007 and 125–165 µs (docs/benchmarks.md). After the
            // announcement, one more pass: whatever a peer queued before it
            // looked at the bell is found there.
            return bell.sleep(until_timer().min(nap), || self.step());
        }
        if self.pass.waiter.is_none() {
            std::thread::park_timeout(nap);
            return;
        }
        if !self.domains.iter_mut().all(|d| d.try_wait()) {
            return;
        }
        // Bounded by `nap` too, as the doorbell's naps: on the 16-core VM
        // (tcp) a worker blocked 10 ms at a time woke for the first write
        // after a quiet spell in 240–270 µs (p50), one that looks again
        // every 500 µs in 116–168 µs, for 0.03 more CPU s/s
        // (docs/benchmarks.md): an idle virtual CPU is slow to wake.
        // (And 10 ms at most whatever the nap: verbs retries handshakes by polling.)
        self.pass.waiter.as_ref().unwrap().wait(until_timer().min(nap).min(BLOCK_MAX));
    }

    /// One pass: new requests and posting first (a request's latency), then
    /// control commands (whose callers wait on a channel), then completions,
    /// then (every millisecond) keepalives and deadlines. True if anything happened.
    pub(super) fn step(&mut self) -> bool {
        self.pass.begin();
        self.pass.posted_now = [0; MAX_DOMAINS];
        let mut busy = self.take_and_post();
        if !self.shared.ctrl.is_empty() {
            while let Some(c) = self.shared.ctrl.pop() {
                self.control(c);
                busy = true;
            }
        }
        busy |= self.poll_all();
        // What a receive pool's callback on the worker submitted inside
        // poll_all (an answer to the message it took) leaves in this pass,
        // not the next: a pass less per hop of a request/response exchange.
        // (The clock again: its deadline and post time start now.)
        if !self.shared.data.is_empty() {
            self.pass.begin();
            busy |= self.take_and_post();
            for d in &mut self.domains {
                d.flush();
            }
        }
        if self.pass.tick_due() {
            busy |= self.tick();
        }
        self.ring_posted_to();
        self.notifier.release_inflight();
        busy
    }

    /// Takes up to 64 submissions from the queue and posts what is ready.
    fn take_and_post(&mut self) -> bool {
        let mut busy = false;
        // An empty queue costs a look, not a pop (most passes of an idle
        // worker; the control queue likewise).
        if !self.shared.data.is_empty() {
            for _ in 0..64 {
                let Some(s) = self.shared.data.pop() else {
                    break;
                };
                self.accept_all(s);
                busy = true;
            }
        }
        busy | self.post_all()
    }

    /// Rings the doorbell of every peer posted to in this pass (engine
    /// messages included), once each, after everything was queued (bell.rs).
    fn ring_posted_to(&mut self) {
        if !self.pass.bell_peers {
            // Engine messages note their peers on every provider; none rings here.
            self.peers.mail.posted_to.clear();
            return;
        }
        self.pass.posted_to.append(&mut self.peers.mail.posted_to);
        if self.pass.posted_to.is_empty() {
            return;
        }
        self.pass.posted_to.sort_unstable();
        self.pass.posted_to.dedup();
        for &p in &self.pass.posted_to {
            if let Some(b) = self.peers.bell(p) {
                b.ring();
            }
        }
        self.pass.posted_to.clear();
    }

    pub(super) fn poll_all(&mut self) -> bool {
        let mut busy = false;
        for d in 0..self.domains.len() {
            let mut comps = std::mem::take(&mut self.pass.comps);
            match self.domains[d].poll(&mut comps) {
                Ok(0) => {}
                Ok(_) => busy = true,
                Err(e) => crate::log!(Error, "polling NIC {d}: {e}"),
            }
            if !comps.is_empty() {
                for c in comps.drain(..) {
                    self.complete(d, c);
                }
                self.report_members();
                self.pass.done.flush(&self.tally);
            }
            self.pass.comps = comps;
            // Immediates whose bytes just completed go now, not a pass later.
            busy |= self.post_split_imms(d);
        }
        if !self.pass.forward.is_empty() {
            let home = self.pass.home.as_ref().unwrap();
            home.ctrl.push(Ctrl::ImmArrived { counts: std::mem::take(&mut self.pass.forward) });
            home.wake();
        }
        // Answers last: whatever arrived before a FENCE (or a BYE) is counted,
        // or queued at home ahead of anything its answer leads to.
        self.peers.send_acks(&mut self.domains);
        self.send_fence_acks();
        busy
    }

    /// An immediate landed on this (non-home) group's NIC: counted at home,
    /// once per pass and value (`Ctrl::ImmArrived`).
    pub(super) fn forward_imm(&mut self, imm: u32) {
        match self.pass.forward.iter_mut().find(|(i, _)| *i == imm) {
            Some((_, n)) => *n += 1,
            None => self.pass.forward.push((imm, 1)),
        }
    }

    /// Every millisecond: deadlines that passed, then keepalives and peer timeouts.
    pub(super) fn tick(&mut self) -> bool {
        let mut busy = false;
        let now = self.pass.now();
        while let Some(t) = self.pass.timers.due(now) {
            busy = true;
            match t {
                Timer::Request { slot, epoch } => {
                    let Some(a) = self.requests.slots.current(slot, epoch) else {
                        continue;
                    };
                    if a.error.is_none() {
                        let t = a.req.timeout().unwrap_or_default();
                        self.end(
                            slot,
                            Error::new(Status::TimedOut, format!("the request did not complete within {t:?}")),
                        );
                    } else {
                        // Ended earlier and the drain timeout passed: the provider
                        // lost these work requests (a dead peer on some providers).
                        a.outstanding = 0;
                        self.maybe_finish(slot);
                    }
                }
                Timer::Expect { imm, id } => {
                    let err = Error::new(
                        Status::TimedOut,
                        format!("fewer immediates {imm:#x} than expected arrived in time"),
                    );
                    self.imm.expire(imm, id, err, &self.notifier);
                }
            }
        }
        if self.pass.timers.len() > 2 * (self.requests.slots.live() + self.imm.armed()) + 1024 {
            let (slots, imm) = (&self.requests.slots, &self.imm);
            self.pass.timers.compact(|t| match *t {
                Timer::Request { slot, epoch } => slots.is_current(slot, epoch),
                Timer::Expect { imm: v, id } => imm.is_armed(v, id),
            });
        }
        self.sweep_dsts();
        self.end_byes(false);
        busy | self.keepalive()
    }

    /// Lets go of the descriptors that only the worker still holds (held.rs).
    fn sweep_dsts(&mut self) {
        let gone = self.requests.dsts.unheld();
        if !gone.is_empty() {
            // A request submitted with one before its caller let go is in the
            // queue: take it first (it keeps its descriptor).
            self.accept_queued();
            self.requests.dsts.evict(&gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock is read once a pass at most, when first asked; the tick is
    /// looked at in every pass that read it and in every TICK_PASSES-th
    /// pass of a run that did not, so a deadline is never more than those
    /// passes late.
    #[test]
    fn the_clock_is_read_when_asked_and_the_tick_looked_at_every_few_passes() {
        let mut p = Pass::new(None, None, None);
        p.begin();
        let t = p.now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(p.now(), t, "one reading per pass");
        p.begin();
        assert!(p.now() >= t + Duration::from_millis(2), "a new pass reads it again");
        // The first tick is due at once; the next one TIMER_TICK later.
        assert!(p.tick_due());
        std::thread::sleep(TIMER_TICK * 2);
        // Passes that read no clock: the tick is looked at on the TICK_PASSES-th.
        let looked = (1..=TICK_PASSES).map(|_| {
            p.begin();
            p.tick_due()
        });
        let mut expect = vec![false; TICK_PASSES as usize - 1];
        expect.push(true);
        assert_eq!(looked.collect::<Vec<_>>(), expect);
        // A pass that read the clock looks at once.
        std::thread::sleep(TIMER_TICK * 2);
        p.begin();
        p.now();
        assert!(p.tick_due());
        let now = p.now();
        assert_eq!(p.next_tick, now + TIMER_TICK, "the next one a TIMER_TICK later");
    }
}
