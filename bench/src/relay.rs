//! `FABRICLIB_BENCH_RAW=relay`: the raw baseline driven through a relay
//! thread — the least that any engine with a worker thread pays per request
//! on this machine (in bytes moved and in latency, as handoff.rs is for the
//! host rows).
//!
//! For one repetition a thread pinned where the engine's worker runs owns the
//! raw endpoint; the application's thread hands it work through a bounded
//! lock-free queue (as the engine's submissions go) and waits on a flag the
//! relay stores (as `OnDone::Flag`), with the bench's waiter. What the relay
//! does with the work is raw's own code, unchanged (`post_write`, `wait_imm`,
//! `send`, `wait_recv`, the same poll and its yields), and it keeps the same
//! window. So a row's raw column is then raw plus the engine's two hand-offs
//! (the request to the worker, the completion back), and the engine's excess
//! over it is what the engine adds beyond having a worker thread at all. A
//! message answered on the worker (the send/recv servers) is answered on the
//! relay thread, with no hand-off, as the engine's on-worker pool answers.
//!
//! `FABRICLIB_BENCH_RAW=both` runs it as a third mode of each row, beside
//! raw, so that relay ÷ raw comes from one run too.
//!
//! Worker mode only: in manual progress (`--progress manual`) the engine has
//! no hand-off, and raw runs as it always does. The servers relay when the
//! client's command says `"mode": "relay"`.
use crate::client::{FlagLine, Wait, wait_flag};
use crate::raw::{R, RawEp, RawWrite};
use crossbeam_queue::ArrayQueue;
use fabriclib::{FLAG_DONE, Status};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

/// Whether the raw rows go through a relay (`FABRICLIB_BENCH_RAW=relay`, worker mode).
pub fn enabled() -> bool {
    raw_is("relay")
}

/// Whether the rows run the relay as a third mode beside raw
/// (`FABRICLIB_BENCH_RAW=both`, worker mode): relay ÷ raw in one run.
pub fn both() -> bool {
    raw_is("both")
}

fn raw_is(what: &str) -> bool {
    static RAW: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let raw = RAW.get_or_init(|| std::env::var("FABRICLIB_BENCH_RAW").unwrap_or_default());
    raw == what && !crate::manual_progress()
}

/// A raw operation run to its end on whichever thread drives the endpoint.
pub type Op<'a> = &'a dyn Fn(&mut RawEp) -> R<()>;

/// A flag the relay stores into; its owner keeps it until the relay has
/// (`Exec` waits for every flag it hands over, or leaks them on an error).
type Flag = *const AtomicU32;

pub enum Job<'a> {
    /// Posted at once; its flag, if not null, stored once the endpoint has
    /// read as many local completions as writes were posted up to it.
    Write(RawWrite, Flag),
    /// Run to its end on the relay thread, then its flag stored.
    Run(Op<'a>, Flag),
}

// SAFETY: a job's pointers are registered memory and flags that outlive its
// use on the relay thread, and its op is run there alone, while the thread that
// made it waits (`Exec::call`); see `Flag`. `drive` joins the relay before it returns.
unsafe impl Send for Job<'_> {}

fn store(f: Flag, v: u32) {
    // SAFETY: see `Flag`.
    unsafe { &*f }.store(v, Ordering::Release);
}

/// How a repetition's raw side drives the endpoint: from this thread, or
/// through a relay thread.
pub enum Exec<'e, 'q> {
    Direct(&'e mut RawEp),
    Relay { q: &'e ArrayQueue<Job<'q>>, done: &'e FlagLine },
}

impl<'q> Exec<'_, 'q> {
    /// Runs `op` to its end and waits for it.
    pub fn call(&mut self, op: Op<'q>) -> R<()> {
        match self {
            Exec::Direct(ep) => op(ep),
            Exec::Relay { q, done } => {
                done.0.store(0, Ordering::Relaxed);
                push(q, Job::Run(op, &done.0));
                // `done` lives in `drive`, which joins the relay before it goes.
                wait_flag(&done.0, Wait::Spin, Instant::now() + DEADLINE)
            }
        }
    }

    /// Posts `w` without waiting for it (reaped by a later `drain`).
    pub fn post(&mut self, w: RawWrite) -> R<()> {
        match self {
            Exec::Direct(ep) => ep.post_write(&w, Instant::now() + DEADLINE),
            Exec::Relay { q, .. } => {
                push(q, Job::Write(w, std::ptr::null()));
                Ok(())
            }
        }
    }

    /// Posts every write of `ops`, `per_req` of them per request, with
    /// `window` requests in flight, and returns when all have completed
    /// locally (`RawEp::write_all`; through a relay, one flag per request as
    /// the engine's rows keep).
    pub fn write_all(&mut self, ops: impl Iterator<Item = RawWrite>, per_req: usize, window: usize) -> R<()> {
        let deadline = Instant::now() + DEADLINE;
        let q = match self {
            Exec::Direct(ep) => return ep.write_all(ops, window * per_req, deadline),
            Exec::Relay { q, .. } => *q,
        };
        let flags: Vec<FlagLine> = (0..window).map(|_| FlagLine(AtomicU32::new(0))).collect();
        let res = (|| {
            let mut reqs = 0;
            for (i, w) in ops.enumerate() {
                let (req, k) = (i / per_req, i % per_req);
                let f = &flags[req % window].0;
                if k == 0 {
                    if req >= window {
                        wait_flag(f, Wait::Spin, deadline)?;
                    }
                    f.store(0, Ordering::Relaxed);
                    reqs = req + 1;
                }
                push(q, Job::Write(w, if k + 1 == per_req { f } else { std::ptr::null() }));
            }
            for req in reqs.saturating_sub(window)..reqs {
                wait_flag(&flags[req % window].0, Wait::Spin, deadline)?;
            }
            Ok(())
        })();
        if res.is_err() {
            // The relay may still store into them.
            std::mem::forget(flags);
        }
        res
    }
}

fn push<'q>(q: &ArrayQueue<Job<'q>>, mut job: Job<'q>) {
    while let Err(j) = q.push(job) {
        job = j;
        std::hint::spin_loop();
    }
}

/// A raw endpoint pointer the relay thread may take.
struct EpPtr(*mut RawEp);
// SAFETY: only the relay thread uses the endpoint while `drive` runs.
unsafe impl Send for EpPtr {}
impl EpPtr {
    fn get(self) -> *mut RawEp {
        self.0
    }
}

/// Runs `body` on this thread with `ep` driven from it (`relay` false) or
/// by a relay thread pinned to the engine's CPU for as long as `body` runs.
pub fn drive<'q, T>(ep: &mut RawEp, relay: bool, body: impl FnOnce(&mut Exec<'_, 'q>) -> R<T>) -> R<T> {
    if !relay {
        return body(&mut Exec::Direct(ep));
    }
    let q = ArrayQueue::new(4096);
    let (stop, up, done) = (AtomicBool::new(false), AtomicBool::new(false), FlagLine(AtomicU32::new(0)));
    let ptr = EpPtr(ep);
    std::thread::scope(|s| {
        let relay = s.spawn(|| {
            let cpus = crate::engine_cpus();
            if !cpus.is_empty() {
                let _ = fabriclib::os::set_thread_cpus(&cpus);
            }
            up.store(true, Ordering::Release);
            // SAFETY: this thread alone uses the endpoint until it is joined.
            serve(unsafe { &mut *ptr.get() }, &q, &stop)
        });
        // Yielding: the relay starts on this thread's CPU (it inherits the
        // pinning) and moves to the engine's only once it runs.
        while !up.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let res = body(&mut Exec::Relay { q: &q, done: &done });
        stop.store(true, Ordering::Release);
        let served = relay.join().map_err(|_| "relay: the thread panicked".to_string())?;
        // The relay's own error says more than the waiter's "request failed".
        served.map_err(|e| format!("relay: {e}"))?;
        res
    })
}

/// The relay thread: takes jobs, posts and polls (raw's poll, with its
/// yields) until told to stop with nothing left in flight.
fn serve(ep: &mut RawEp, q: &ArrayQueue<Job<'_>>, stop: &AtomicBool) -> R<()> {
    let deadline = Instant::now() + DEADLINE;
    let failed = FLAG_DONE | Status::Provider as u32;
    // Flags of posted writes, by how many writes had been posted with them.
    let mut pending: VecDeque<(u64, Flag)> = VecDeque::new();
    let mut posted = 0u64;
    let res = (|| loop {
        let mut took = false;
        while let Some(job) = q.pop() {
            took = true;
            match job {
                Job::Write(w, flag) => {
                    ep.post_write(&w, deadline)?;
                    posted += 1;
                    if !flag.is_null() {
                        pending.push_back((posted, flag));
                    }
                }
                Job::Run(op, flag) => {
                    let r = op(ep);
                    store(flag, if r.is_ok() { FLAG_DONE } else { failed });
                    r?;
                }
            }
        }
        if !took && pending.is_empty() && stop.load(Ordering::Acquire) {
            return Ok(());
        }
        ep.poll()?;
        // Completions read anywhere (a post that met EAGAIN polls too) count.
        // (Flagged writes come alone: a repetition's `write_all`.)
        let completed = posted.saturating_sub(ep.outstanding() as u64);
        while pending.front().is_some_and(|&(n, _)| n <= completed) {
            store(pending.pop_front().unwrap().1, FLAG_DONE);
        }
        if Instant::now() > deadline {
            return Err("timed out".to_string());
        }
    })();
    if res.is_err() {
        // Every waiter hears of it now, not at its deadline.
        for (_, f) in pending {
            store(f, failed);
        }
        while let Some(Job::Write(_, f) | Job::Run(_, f)) = q.pop() {
            if !f.is_null() {
                store(f, failed);
            }
        }
    }
    res
}
