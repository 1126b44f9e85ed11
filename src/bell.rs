//! Doorbells: how an idle worker on a provider with no wait object (shm)
//! sleeps without missing an arrival, and how a peer's worker on the same
//! host wakes it.
//!
//! Each engine group with a liveness record (liveness.rs) has a bell: a
//! futex word in the second page of the record's file. An idle worker
//! announces that it sleeps (the word becomes `SLEEPING`), looks once more
//! for work (a pass: any command that a peer queued before it looked is
//! found then), and sleeps on the word. A worker that posted anything to a
//! peer rings the peer's bell at the end of its pass (`ring`): if the word
//! says `SLEEPING`, the first ringer turns it back to `AWAKE` and wakes the
//! sleeper. The word changes before the wake, so a sleeper that had not yet
//! gone to sleep finds it changed and does not (no lost wake-up); the store
//! and the look are each followed by a full fence, so either the sleeper's
//! last pass sees the peer's command or the peer sees `SLEEPING`. The
//! application's submits ring the group's own bell (`Shared::wake`).
//!
//! A bell costs nothing while the worker is busy: a fence and a load per
//! peer posted to in a pass. An engine of an older version has no bell page
//! (`Bell::open` finds none) and never rings; a worker it writes to wakes at
//! its next deadline or after `BLOCK_MAX`.
use crate::os;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::Duration;

const AWAKE: u32 = 0;
const SLEEPING: u32 = 1;
/// The bell's place in the record's file: its second page.
pub const OFFSET: usize = 4096;
const LEN: usize = 4096;

/// A mapping of one engine group's bell page (its own, or a peer's).
pub struct Bell {
    page: *mut u8,
}

// SAFETY: a shared mapping touched only through atomics.
unsafe impl Send for Bell {}
// SAFETY: as above.
unsafe impl Sync for Bell {}

impl Bell {
    /// Maps the bell of the record file at `path`; `None` if the file has
    /// no bell page (an older engine's) or cannot be opened.
    pub fn open(path: &str) -> Option<Bell> {
        os::map_shared_file_at(path, OFFSET, LEN).ok().flatten().map(|page| Bell { page })
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: offset 0 of a live, page-aligned shared mapping.
        unsafe { &*(self.page as *const AtomicU32) }
    }

    /// Sleeps until rung or `timeout` has passed, unless `look` (one more
    /// look for work, after the announcement) finds some.
    pub fn sleep(&self, timeout: Duration, look: impl FnOnce() -> bool) {
        let w = self.word();
        w.store(SLEEPING, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !look() {
            os::futex_wait_shared(w, SLEEPING, Some(timeout));
        }
        w.store(AWAKE, Ordering::SeqCst);
    }

    /// Wakes the bell's worker if it sleeps (after whatever this thread
    /// queued for it).
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        let w = self.word();
        if w.load(Ordering::Relaxed) == SLEEPING
            && w.compare_exchange(SLEEPING, AWAKE, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            os::futex_wake_shared(w);
        }
    }
}

impl Drop for Bell {
    fn drop(&mut self) {
        // SAFETY: our own mapping, used no more.
        unsafe { os::unmap(self.page, LEN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    fn file(len: usize) -> String {
        let path = format!("/dev/shm/fabriclib-bell-test-{}-{len}", std::process::id());
        std::fs::write(&path, vec![0u8; len]).unwrap();
        path
    }

    #[test]
    fn a_ring_wakes_a_sleeper_in_another_mapping() {
        let path = file(2 * 4096);
        let (mine, theirs) = (Arc::new(Bell::open(&path).unwrap()), Bell::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        // Nothing rings: the timeout ends the sleep.
        let t = Instant::now();
        mine.sleep(Duration::from_millis(30), || false);
        assert!(t.elapsed() >= Duration::from_millis(29), "returned early: {:?}", t.elapsed());
        // Work found after the announcement: no sleep at all.
        let t = Instant::now();
        mine.sleep(Duration::from_secs(5), || true);
        assert!(t.elapsed() < Duration::from_secs(1));
        // A ring through another mapping of the file wakes it.
        let m = mine.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            m.sleep(Duration::from_secs(10), || false);
            t.elapsed()
        });
        while mine.word().load(Ordering::SeqCst) != SLEEPING {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        theirs.ring();
        let slept = h.join().unwrap();
        assert!(slept < Duration::from_secs(5), "the ring did not wake it: {slept:?}");
        assert_eq!(mine.word().load(Ordering::SeqCst), AWAKE);
    }

    #[test]
    fn a_ring_before_the_sleep_is_not_lost() {
        let path = file(2 * 4096);
        let b = Bell::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // The ring lands between the announcement and the futex wait.
        let t = Instant::now();
        b.sleep(Duration::from_secs(5), || {
            b.ring();
            false
        });
        assert!(t.elapsed() < Duration::from_secs(1), "a ring before the wait was lost: {:?}", t.elapsed());
    }

    #[test]
    fn a_file_without_a_bell_page_has_no_bell() {
        let path = file(4096);
        assert!(Bell::open(&path).is_none());
        std::fs::remove_file(&path).unwrap();
        assert!(Bell::open(&path).is_none(), "a missing file has no bell");
    }
}
