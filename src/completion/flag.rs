//! Completion flag words: the worker stores `FLAG_DONE | status` into them,
//! and `wait` lets a thread sleep until it does (a futex), instead of
//! spinning. A waiter sets `FLAG_WAITING` before it sleeps; the worker's
//! store replaces the word and wakes only if that bit was set, so a flag
//! nobody sleeps on costs no system call.
use crate::error::Result;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Bit set in a completion flag once the request has ended; the low 16 bits
/// then hold its status (0 = success).
pub const FLAG_DONE: u32 = 0x1_0000;
/// Set by a thread sleeping in `wait` (never seen together with `FLAG_DONE`).
pub(crate) const FLAG_WAITING: u32 = 1 << 31;
/// How long `wait` spins before it sleeps: a completion that comes within
/// it needs no wake-up.
const SPIN: Duration = Duration::from_micros(20);

/// Looks at the flag (each a PAUSE) between two yields while spinning: 32
/// on a host of more than 4 CPUs, else 1.
fn yield_every() -> u32 {
    static N: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *N.get_or_init(|| if std::thread::available_parallelism().map_or(1, |n| n.get()) > 4 { 32 } else { 1 })
}

/// Encodes a result the way it is stored into a completion flag.
pub fn flag_value(res: &Result<()>) -> u32 {
    FLAG_DONE | res.as_ref().map(|_| 0).unwrap_or_else(|e| e.status as u32)
}

/// Stores a request's end into `f` and wakes a thread waiting on it.
pub fn store(f: &AtomicU32, res: &Result<()>) {
    if f.swap(flag_value(res), Ordering::Release) & FLAG_WAITING != 0 {
        // The word may be freed by its owner right after it saw FLAG_DONE:
        // a wake reads nothing there (os.rs), so that is harmless.
        crate::os::futex_wake_all(f);
    }
}

/// Waits until `f` holds `FLAG_DONE` (returning the word) or `timeout`
/// passes (`None`); `timeout` `None` waits for ever, zero only looks. It
/// spins for the first 20 µs (`SPIN`), then sleeps on the word (a futex).
/// While it spins it yields the CPU on every look on a host of 4 CPUs or
/// fewer, where it likely shares one with the worker, and on every 32nd on
/// a larger host, where a system call per look slowed shm's copies out of
/// this process (docs/benchmarks.md, "The waiter's yields").
pub fn wait(f: &AtomicU32, timeout: Option<Duration>) -> Option<u32> {
    wait_yielding_every(f, timeout, yield_every())
}

fn wait_yielding_every(f: &AtomicU32, timeout: Option<Duration>, every: u32) -> Option<u32> {
    if timeout.is_some_and(|d| d.is_zero()) {
        // Only look.
        let v = f.load(Ordering::Acquire);
        return (v & FLAG_DONE != 0).then_some(v);
    }
    let t = Instant::now();
    let mut round = 0u32;
    loop {
        let v = f.load(Ordering::Acquire);
        if v & FLAG_DONE != 0 {
            return Some(v);
        }
        // Mostly a PAUSE on a large host, a yield on every look on a small one (`wait`).
        round = round.wrapping_add(1);
        if round % every != 0 {
            std::hint::spin_loop();
            continue;
        }
        let left = match timeout {
            Some(d) if t.elapsed() >= d => return None,
            Some(d) => Some(d - t.elapsed()),
            None => None,
        };
        if t.elapsed() < SPIN {
            std::thread::yield_now();
            continue;
        }
        if v & FLAG_WAITING == 0
            && f.compare_exchange(v, v | FLAG_WAITING, Ordering::Acquire, Ordering::Acquire).is_err()
        {
            continue;
        }
        crate::os::futex_wait(f, v | FLAG_WAITING, left);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, Status};
    use std::sync::Arc;

    // Both spins: a yield on every look (small hosts) and every 32nd.
    const EVERY: [u32; 2] = [1, 32];

    #[test]
    fn wait_returns_what_was_stored() {
        for every in EVERY {
            let f = AtomicU32::new(0);
            let t = Instant::now();
            assert_eq!(
                wait_yielding_every(&f, Some(Duration::from_millis(5)), every),
                None,
                "nothing stored: times out"
            );
            assert!(t.elapsed() >= Duration::from_millis(5), "not before the timeout ({every})");
            store(&f, &Err(Error::new(Status::PeerDown, "x")));
            assert_eq!(wait_yielding_every(&f, Some(Duration::ZERO), every), Some(FLAG_DONE | Status::PeerDown as u32));
        }
    }

    #[test]
    fn a_sleeping_waiter_is_woken() {
        for every in EVERY {
            for delay in [0u64, 1, 50] {
                let f = Arc::new(AtomicU32::new(0));
                let f2 = f.clone();
                let t = std::thread::spawn(move || wait_yielding_every(&f2, None, every));
                std::thread::sleep(Duration::from_millis(delay));
                store(&f, &Ok(()));
                assert_eq!(t.join().unwrap(), Some(FLAG_DONE), "woken after {delay} ms ({every})");
                assert_eq!(f.load(Ordering::Relaxed) & FLAG_WAITING, 0, "the store clears the waiting bit");
            }
        }
    }
}
