//! Blocking while idle: an epoll set over the domains' completion-queue wait
//! fds (libfabric `FI_WAIT_FD`) plus an eventfd that `Shared::wake` writes,
//! so that a sleeping worker wakes at once for an arrival, a completion or a
//! submit. Built only when every domain has a wait fd.
use std::time::Duration;

unsafe extern "C" {
    fn epoll_create1(flags: i32) -> i32;
    fn epoll_ctl(epfd: i32, op: i32, fd: i32, event: *mut EpollEvent) -> i32;
    fn epoll_wait(epfd: i32, events: *mut EpollEvent, max: i32, timeout_ms: i32) -> i32;
    fn eventfd(initval: u32, flags: i32) -> i32;
    fn read(fd: i32, buf: *mut u8, n: usize) -> isize;
    fn write(fd: i32, buf: *const u8, n: usize) -> isize;
    /// Also used by the engine (a dma-buf fd once registered).
    pub(crate) fn close(fd: i32) -> i32;
}

/// `struct epoll_event`: packed on x86-64 (the kernel ABI), natural elsewhere.
#[cfg_attr(target_arch = "x86_64", repr(C, packed))]
#[cfg_attr(not(target_arch = "x86_64"), repr(C))]
#[derive(Clone, Copy, Default)]
struct EpollEvent {
    events: u32,
    data: u64,
}

const EPOLL_CLOEXEC: i32 = 0o2000000;
const EPOLL_CTL_ADD: i32 = 1;
const EPOLLIN: u32 = 1;
const EFD_NONBLOCK_CLOEXEC: i32 = 0o4000 | 0o2000000;
const WAKE: u64 = u64::MAX;

pub(super) struct Waiter {
    epfd: i32,
    /// Written by `wake` (any thread), drained by the worker.
    pub(super) wake_fd: i32,
}

impl Waiter {
    /// An epoll set over `fds` and a wake eventfd; `None` if the kernel refuses.
    pub(super) fn new(fds: &[i32]) -> Option<Waiter> {
        // SAFETY: plain syscalls; every fd made here is closed on failure or in Drop.
        unsafe {
            let epfd = epoll_create1(EPOLL_CLOEXEC);
            if epfd < 0 {
                return None;
            }
            let wake_fd = eventfd(0, EFD_NONBLOCK_CLOEXEC);
            let w = Waiter { epfd, wake_fd };
            if wake_fd < 0 {
                return None;
            }
            for (i, &fd) in fds.iter().chain(std::iter::once(&wake_fd)).enumerate() {
                let data = if fd == wake_fd { WAKE } else { i as u64 };
                let mut ev = EpollEvent { events: EPOLLIN, data };
                if epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &mut ev) != 0 {
                    return None;
                }
            }
            Some(w)
        }
    }

    /// Sleeps until a domain's fd or the wake fd is readable, or `timeout`
    /// (rounded up to a millisecond) has passed.
    pub(super) fn wait(&self, timeout: Duration) {
        let ms = timeout.as_micros().div_ceil(1000).clamp(1, i32::MAX as u128) as i32;
        let mut evs = [EpollEvent::default(); 8];
        // SAFETY: our epoll fd and a buffer of 8 events.
        let n = unsafe { epoll_wait(self.epfd, evs.as_mut_ptr(), 8, ms) };
        for e in evs.iter().take(n.max(0) as usize) {
            let data = e.data;
            if data == WAKE {
                let mut buf = [0u8; 8];
                // SAFETY: draining our nonblocking eventfd.
                unsafe { read(self.wake_fd, buf.as_mut_ptr(), 8) };
            }
        }
    }
}

/// Wakes a waiter blocked in `Waiter::wait` (any thread; harmless if none is).
pub(super) fn wake(wake_fd: i32) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writing 8 bytes to an eventfd.
    unsafe { write(wake_fd, one.as_ptr(), 8) };
}

impl Drop for Waiter {
    fn drop(&mut self) {
        // SAFETY: fds made in `new`, closed once.
        unsafe {
            close(self.wake_fd);
            close(self.epfd);
        }
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
