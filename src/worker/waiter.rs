//! Blocking while idle: an epoll set over the domains' completion-queue wait
//! fds (libfabric `FI_WAIT_FD`) plus an eventfd that `Shared::wake` writes,
//! so that a sleeping worker wakes at once for an arrival, a completion or a
//! submit. Built only when every domain has a wait fd.
use crate::os::{self, Epoll};
use std::time::Duration;

/// The epoll data of the wake eventfd (the domains' fds carry their index).
const WAKE: u64 = u64::MAX;

pub(super) struct Waiter {
    epoll: Epoll,
    /// Written by `wake` (any thread), drained by the worker.
    pub(super) wake_fd: i32,
}

impl Waiter {
    /// An epoll set over `fds` and a wake eventfd; `None` if the kernel refuses.
    pub(super) fn new(fds: &[i32]) -> Option<Waiter> {
        let epoll = Epoll::new()?;
        let w = Waiter { epoll, wake_fd: os::eventfd()? };
        for (i, &fd) in fds.iter().enumerate() {
            if !w.epoll.add(fd, i as u64) {
                return None;
            }
        }
        w.epoll.add(w.wake_fd, WAKE).then_some(w)
    }

    /// Sleeps until a domain's fd or the wake fd is readable, or `timeout`
    /// (rounded up to a millisecond) has passed.
    pub(super) fn wait(&self, timeout: Duration) {
        self.epoll.wait(timeout, |data| {
            if data == WAKE {
                os::eventfd_drain(self.wake_fd);
            }
        });
    }
}

/// Wakes a waiter blocked in `Waiter::wait` (any thread; harmless if none is).
pub(super) fn wake(wake_fd: i32) {
    os::eventfd_signal(wake_fd);
}

impl Drop for Waiter {
    fn drop(&mut self) {
        os::close(self.wake_fd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_wake_ends_the_wait_and_a_timeout_ends_it_too() {
        let w = Waiter::new(&[]).unwrap();
        let t = Instant::now();
        w.wait(Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(19), "returned early: {:?}", t.elapsed());
        let fd = w.wake_fd;
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            wake(fd);
        });
        let t = Instant::now();
        w.wait(Duration::from_secs(5));
        assert!(t.elapsed() < Duration::from_secs(2), "the wake did not end the wait");
        h.join().unwrap();
        // Drained: the next wait sleeps its timeout again.
        let t = Instant::now();
        w.wait(Duration::from_millis(10));
        assert!(t.elapsed() >= Duration::from_millis(9));
    }
}
