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
//! (its record file is one page long) and never rings; a worker it writes to
//! wakes at the end of its nap.
use crate::os::SharedMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::Duration;

const AWAKE: u32 = 0;
const SLEEPING: u32 = 1;

/// One engine group's bell (its own, or a peer's): a word in a shared
/// mapping of its record's file, kept mapped while the bell lives.
pub struct Bell {
    map: Arc<SharedMap>,
    offset: usize,
}

impl Bell {
    /// The bell at `offset` of `map` (writable there, 4-byte aligned).
    pub fn new(map: Arc<SharedMap>, offset: usize) -> Bell {
        assert!(offset % 4 == 0 && offset + 4 <= map.len(), "a bell inside its mapping");
        Bell { map, offset }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: inside a live shared mapping (checked in `new`, kept alive
        // by `map`), aligned, written only through atomics.
        unsafe { &*(self.map.ptr().add(self.offset) as *const AtomicU32) }
    }

    /// Sleeps until rung or `timeout` has passed, unless `look` (one more
    /// look for work, after the announcement) finds some.
    pub fn sleep(&self, timeout: Duration, look: impl FnOnce() -> bool) {
        let w = self.word();
        w.store(SLEEPING, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !look() {
            crate::os::futex_wait_shared(w, SLEEPING, Some(timeout));
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
            crate::os::futex_wake_shared(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Two mappings of one two-page file: its bell as the owner and as a
    /// peer map it.
    fn two_mappings() -> (Bell, Bell) {
        let path = format!("/dev/shm/fabriclib-bell-test-{}-{:?}", std::process::id(), std::thread::current().id());
        let _ = std::fs::remove_file(&path);
        let mine = crate::os::map_shared_file(&path, 8192, true, true).unwrap();
        // SAFETY: a fresh mapping of 8192 bytes, owned from here.
        let mine = Arc::new(unsafe { SharedMap::from_raw(mine, 8192) });
        let theirs = Arc::new(crate::os::map_shared_file_split(&path, 4096, 4096).unwrap());
        std::fs::remove_file(&path).unwrap();
        (Bell::new(mine, 4096), Bell::new(theirs, 4096))
    }

    #[test]
    fn a_ring_wakes_a_sleeper_through_another_mapping() {
        let (mine, theirs) = two_mappings();
        let mine = Arc::new(mine);
        // Nothing rings: the timeout ends the sleep.
        let t = Instant::now();
        mine.sleep(Duration::from_millis(30), || false);
        assert!(t.elapsed() >= Duration::from_millis(29), "returned early: {:?}", t.elapsed());
        // Work found after the announcement: no sleep at all.
        let t = Instant::now();
        mine.sleep(Duration::from_secs(5), || true);
        assert!(t.elapsed() < Duration::from_secs(1));
        // A ring through the other mapping wakes it.
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
        let (b, theirs) = two_mappings();
        // The ring lands between the announcement and the futex wait.
        let t = Instant::now();
        b.sleep(Duration::from_secs(5), || {
            theirs.ring();
            false
        });
        assert!(t.elapsed() < Duration::from_secs(1), "a ring before the wait was lost: {:?}", t.elapsed());
    }

    #[test]
    fn a_one_page_file_is_mapped_without_a_bell_page() {
        let path = format!("/dev/shm/fabriclib-bell-test-{}-short", std::process::id());
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        let m = crate::os::map_shared_file_split(&path, 4096, 4096).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(m.len(), 4096, "the record page only: an older engine's file");
    }
}
