//! The raw baseline of the host rows: the least any engine with a worker
//! thread pays per request on this machine. A bare hand-off of the same
//! shape as the engine's: the submitting thread pushes a request of a
//! `Request`'s size, carrying a flag (`Arc`, as `OnDone::Flag`), into a
//! bounded lock-free queue; a worker thread pops it and stores the flag.
//! Same window, same flag wait, same polling and yielding as the engine's
//! worker. No validation, no request table, no work request, no completion.
//! For the host-batch row, batches of the same size in one push each.
use crossbeam_queue::ArrayQueue;
use fabriclib::FLAG_DONE;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

/// As large as the engine's `Request` (128 bytes); the flag as the engine
/// gets a caller's (`OnDone::RawFlag`).
struct Item {
    flag: *const AtomicU32,
    body: [u64; 15],
}

// SAFETY: the flag outlives the worker's use of it (see `floor_ns`).
unsafe impl Send for Item {}

/// What the queue carries: one request, or a batch of them in one slot
/// (as the engine's `Submission`).
enum Sub {
    One(Item),
    Many(Vec<Item>),
}

/// Nanoseconds per request for `n` requests with `w` in flight, handed
/// over `b` at a time (1: one push per request, as single submits; more:
/// one push of a batch of `b`, as `submit_single_writes`, the host-batch
/// row's floor).
pub fn floor_ns(n: usize, w: usize, b: usize, deadline: Instant) -> Result<f64, String> {
    let q = Arc::new(ArrayQueue::<Sub>::new(4096));
    let stop = Arc::new(AtomicBool::new(false));
    let (q2, stop2) = (q.clone(), stop.clone());
    let worker = std::thread::spawn(move || {
        let mut empty = 0u32;
        let mut sum = 0u64;
        let mut done = |it: &Item| {
            sum = sum.wrapping_add(it.body[it.body.len() - 1]);
            // SAFETY: the submitter keeps the flags until the worker has joined.
            unsafe { &*it.flag }.store(FLAG_DONE, Ordering::Release);
        };
        while !stop2.load(Ordering::Acquire) {
            let mut busy = false;
            while let Some(sub) = q2.pop() {
                match sub {
                    Sub::One(it) => done(&it),
                    Sub::Many(its) => its.iter().for_each(&mut done),
                }
                busy = true;
            }
            if !busy {
                // As the engine's worker: yield every 16 empty passes.
                empty = empty.wrapping_add(1);
                if empty % 16 == 0 {
                    std::thread::yield_now();
                }
            }
        }
        sum
    });
    let (b, w) = (b.max(1), w.max(b.max(1)));
    // As the engine rows keep theirs (client.rs `windowed`): one per cache line.
    let flags: Vec<super::client::FlagLine> = (0..w).map(|_| super::client::FlagLine(AtomicU32::new(0))).collect();
    let item = |i: usize| Item { flag: &flags[i % w].0 as *const AtomicU32, body: [i as u64; 15] };
    let t0 = Instant::now();
    let mut res = Ok(());
    'run: for first in (0..n).step_by(b) {
        let end = (first + b).min(n);
        for i in first..end {
            let f = &flags[i % w].0;
            if i >= w {
                if let Err(e) = super::client::wait_flag(f, super::client::Wait::Spin, deadline) {
                    res = Err(e);
                    break 'run;
                }
            }
            f.store(0, Ordering::Relaxed);
        }
        let mut sub = if b == 1 { Sub::One(item(first)) } else { Sub::Many((first..end).map(item).collect()) };
        while let Err(back) = q.push(sub) {
            sub = back;
            std::thread::yield_now();
        }
    }
    for f in flags.iter().take(n.min(w)) {
        if res.is_ok() {
            res = super::client::wait_flag(&f.0, super::client::Wait::Spin, deadline);
        }
    }
    let ns = t0.elapsed().as_secs_f64() * 1e9 / n.max(1) as f64;
    stop.store(true, Ordering::Release);
    let _ = worker.join();
    res.map(|()| ns)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_item_is_as_large_as_a_request() {
        assert_eq!(std::mem::size_of::<super::Item>(), 128);
    }
}
