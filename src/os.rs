//! The operating system, in one room: every call fabriclib makes into libc
//! (besides libfabric's and CUDA's own) is here, through the `libc` crate —
//! no syscall numbers typed by hand per architecture, no hand-packed kernel
//! structs. Each function says what it needs; the rest of the crate calls
//! these.
use std::ffi::{CStr, c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// Closes `fd` (errors ignored: there is nothing to do about them).
pub fn close(fd: i32) {
    // SAFETY: closing a descriptor the caller owns and uses no more.
    unsafe { libc::close(fd) };
}

/// The calling thread's kernel id.
pub fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// Whether the process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The CPU time of the whole process (every thread, user and system), in seconds.
pub fn process_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A `malloc`ed copy of `s`, for C code that frees it (libfabric's
/// `fi_freeinfo` frees the strings of an `fi_info`).
pub fn strdup(s: &CStr) -> *mut c_char {
    // SAFETY: s is a valid C string.
    unsafe { libc::strdup(s.as_ptr()) }
}

// ---- waking a sleeping worker: eventfd and epoll ----

/// A nonblocking, close-on-exec eventfd; `None` if the kernel refuses.
pub fn eventfd() -> Option<i32> {
    // SAFETY: no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    (fd >= 0).then_some(fd)
}

/// Makes eventfd `fd` readable (any thread; harmless if nobody waits).
pub fn eventfd_signal(fd: i32) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writing 8 bytes from a local buffer to an eventfd.
    unsafe { libc::write(fd, one.as_ptr().cast(), 8) };
}

/// Makes `fd` non-blocking (a verbs completion channel's).
pub fn set_nonblocking(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on an fd the caller owns; no pointers.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Drains eventfd `fd` (nonblocking).
pub fn eventfd_drain(fd: i32) {
    let mut buf = [0u8; 8];
    // SAFETY: reading at most 8 bytes into a local buffer.
    unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 8) };
}

/// An epoll set (closed on drop).
pub struct Epoll(i32);

impl Epoll {
    pub fn new() -> Option<Epoll> {
        // SAFETY: no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        (fd >= 0).then_some(Epoll(fd))
    }

    /// Watches `fd` for readability; `data` comes back from `wait`.
    pub fn add(&self, fd: i32, data: u64) -> bool {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: data };
        // SAFETY: our epoll fd, and an event the kernel copies.
        unsafe { libc::epoll_ctl(self.0, libc::EPOLL_CTL_ADD, fd, &mut ev) == 0 }
    }

    /// Sleeps until a watched fd is readable or `timeout` has passed (to the
    /// microsecond with `epoll_pwait2`, Linux 5.11; rounded up to a
    /// millisecond before); calls `ready` with the data of each ready fd.
    pub fn wait(&self, timeout: Duration, mut ready: impl FnMut(u64)) {
        static NO_PWAIT2: AtomicBool = AtomicBool::new(false);
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let mut n = -1;
        if !NO_PWAIT2.load(Ordering::Relaxed) {
            let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
            // Through syscall(2): glibc's wrapper needs glibc 2.35.
            // SAFETY: our epoll fd, a buffer of 8 events, a timespec the kernel
            // only reads, and no signal mask (as epoll_wait).
            n = unsafe {
                libc::syscall(libc::SYS_epoll_pwait2, self.0, evs.as_mut_ptr(), 8, &ts, std::ptr::null::<u8>(), 0)
            } as i32;
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                NO_PWAIT2.store(true, Ordering::Relaxed);
            }
        }
        if NO_PWAIT2.load(Ordering::Relaxed) {
            let ms = timeout.as_micros().div_ceil(1000).clamp(1, i32::MAX as u128) as i32;
            // SAFETY: our epoll fd and a buffer of 8 events.
            n = unsafe { libc::epoll_wait(self.0, evs.as_mut_ptr(), 8, ms) };
        }
        for e in evs.iter().take(n.max(0) as usize) {
            ready(e.u64);
        }
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        close(self.0);
    }
}

// ---- futexes: flag words a thread sleeps on ----

/// Sleeps while `*word == expected` (or until `timeout`, or a spurious wake-up).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    wait_op(word, expected, timeout, libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG)
}

/// `futex_wait` on a word other processes map too (a `MAP_SHARED` file).
pub fn futex_wait_shared(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    wait_op(word, expected, timeout, libc::FUTEX_WAIT)
}

fn wait_op(word: &AtomicU32, expected: u32, timeout: Option<Duration>, op: i32) {
    let ts = timeout.map(|d| libc::timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ });
    let tp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: futex(2) on a live, aligned u32; the kernel only reads it.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, expected, tp) };
}

/// Wakes the threads, of any process, sleeping in `futex_wait_shared` on `word`.
pub fn futex_wake_shared(word: &AtomicU32) {
    // SAFETY: futex(2) wake on a live, aligned u32.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// Wakes every thread sleeping on `word`. The word may already be freed by
/// its owner: the kernel reads nothing there for a wake (it finds no
/// waiter, or returns EFAULT), so that is harmless.
// Not unsafe: nothing is dereferenced, by us or by the kernel (a wake only
// hashes the address).
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn futex_wake_all(word: *const AtomicU32) {
    // SAFETY: futex(2) wake does not access the address.
    unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX) };
}

// ---- CPUs and NUMA ----

/// CPUs a set holds (glibc's `cpu_set_t`).
pub const MAX_CPUS: u32 = libc::CPU_SETSIZE as u32;

/// Pins the calling thread (and the threads it starts later) to `cpus`
/// (each below `MAX_CPUS`).
pub fn set_thread_cpus(cpus: &[u32]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus.iter().filter(|&&c| c < MAX_CPUS) {
        // SAFETY: c < CPU_SETSIZE.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    // SAFETY: a full cpu_set_t; pid 0 is the calling thread.
    match unsafe { libc::sched_setaffinity(0, size_of_val(&set), &set) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The CPUs the calling thread may run on (empty if the kernel does not say).
pub fn thread_cpus() -> Vec<u32> {
    // SAFETY: as above.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above, reading into it.
    if unsafe { libc::sched_getaffinity(0, size_of_val(&set), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: c < CPU_SETSIZE.
    (0..MAX_CPUS).filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) }).collect()
}

/// The NUMA node of the page at address `addr` (faulted in if it was not
/// yet), from the kernel (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`);
/// `None` if it does not say (an unmapped address: `EFAULT`).
pub fn numa_node_of(addr: usize) -> Option<u32> {
    const MPOL_F_NODE: libc::c_ulong = 1;
    const MPOL_F_ADDR: libc::c_ulong = 2;
    let mut node: libc::c_int = -1;
    // `addr` is only looked up in the page tables: an unmapped one is an
    // error return, not a fault.
    // SAFETY: the kernel writes one int to `node`; no node mask is passed (NULL, 0).
    let r = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (r == 0 && node >= 0).then_some(node as u32)
}

// ---- shared-memory files and robust mutexes (liveness.rs) ----

/// A process-shared mutex as it lies in shared memory.
pub type SharedMutex = libc::pthread_mutex_t;

/// Maps `len` bytes of the file at `path`, shared: created exclusively (mode
/// 0600, sized to `len`) with `create`, read-write with `write`, else read-only.
pub fn map_shared_file(path: &str, len: usize, create: bool, write: bool) -> std::io::Result<*mut u8> {
    let c = std::ffi::CString::new(path).map_err(|_| std::io::Error::other("NUL in a path"))?;
    let flags = match (create, write) {
        (true, _) => libc::O_RDWR | libc::O_CREAT | libc::O_EXCL,
        (false, true) => libc::O_RDWR,
        (false, false) => libc::O_RDONLY,
    };
    // SAFETY: c is a valid C string; the fd is closed below in every case.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is ours; the mapping keeps its own reference to the file.
    unsafe {
        if create && libc::ftruncate(fd, len as libc::off_t) != 0 {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        let prot = if create || write { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        let p = libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0);
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if p == libc::MAP_FAILED { Err(e) } else { Ok(p.cast()) }
    }
}

/// A shared mapping of a file (`map_shared_file`, `map_shared_file_split`),
/// unmapped when dropped.
pub struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: shared memory; what lies in it is touched through atomics (or
// under a process-shared mutex) by its users.
unsafe impl Send for SharedMap {}
// SAFETY: as above.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Takes ownership of `len` bytes at `ptr` mapped by `map_shared_file`.
    ///
    /// # Safety
    /// `ptr` is a mapping of `len` bytes that nothing else unmaps.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> SharedMap {
        SharedMap { ptr, len }
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, used no more.
        unsafe { unmap(self.ptr, self.len) };
    }
}

/// Maps the existing file at `path` in one mapping: its first `ro` bytes
/// read-only and the `rw` bytes after them writable, or only the first `ro`
/// bytes (read-only) if the file is shorter than `ro + rw`. One mapping per
/// file, not two: valgrind 3.19's address-space manager asserts when a file
/// it saw mapped under its name before a rename is mapped again.
pub fn map_shared_file_split(path: &str, ro: usize, rw: usize) -> std::io::Result<SharedMap> {
    let c = std::ffi::CString::new(path).map_err(|_| std::io::Error::other("NUL in a path"))?;
    // SAFETY: c is a valid C string; the fd is closed below in every case.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is ours; st is plain data the kernel fills; the mapping
    // keeps its own reference to the file; mprotect covers a part of it.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        let size = if libc::fstat(fd, &mut st) == 0 { st.st_size.max(0) as usize } else { 0 };
        let len = if size >= ro + rw { ro + rw } else { ro };
        let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd, 0);
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if p == libc::MAP_FAILED {
            return Err(e);
        }
        let map = SharedMap { ptr: p.cast(), len };
        if len > ro && libc::mprotect(map.ptr.add(ro).cast(), rw, libc::PROT_READ | libc::PROT_WRITE) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(map)
    }
}

/// `len` bytes of private anonymous memory (zero pages until written).
pub fn map_anonymous(len: usize) -> std::io::Result<*mut u8> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: a fresh private anonymous mapping.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if p == libc::MAP_FAILED { Err(std::io::Error::last_os_error()) } else { Ok(p.cast()) }
}

/// Asks for transparent huge pages over `[p, p + len)` (advice only).
///
/// # Safety
/// The range lies inside a mapping of the caller's.
pub unsafe fn advise_huge_pages(p: *mut u8, len: usize) {
    // SAFETY: the caller's.
    unsafe { libc::madvise(p.cast(), len, libc::MADV_HUGEPAGE) };
}

/// Unmaps what `map_shared_file` or `map_anonymous` mapped.
///
/// # Safety
/// `p` and `len` are a mapping's, used no more.
pub unsafe fn unmap(p: *mut u8, len: usize) {
    // SAFETY: the caller's.
    unsafe { libc::munmap(p.cast(), len) };
}

/// Initialises the mutex at `m` as process-shared and robust (its word is
/// marked by the kernel when its owner dies). 0 or an error number.
///
/// # Safety
/// `m` points to writable memory for a `SharedMutex`, not in use.
pub unsafe fn robust_mutex_init(m: *mut SharedMutex) -> i32 {
    // SAFETY: a local attribute object, initialised before use and destroyed after.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        let r = libc::pthread_mutex_init(m, &attr);
        libc::pthread_mutexattr_destroy(&mut attr);
        r
    }
}

/// Locks mutex `m` (0 or an error number).
///
/// # Safety
/// `m` is an initialised mutex in live memory.
pub unsafe fn mutex_lock(m: *mut SharedMutex) -> i32 {
    // SAFETY: the caller's.
    unsafe { libc::pthread_mutex_lock(m) }
}

/// Unlocks mutex `m`, held by the calling thread (0 or an error number).
///
/// # Safety
/// As `mutex_lock`.
pub unsafe fn mutex_unlock(m: *mut SharedMutex) -> i32 {
    // SAFETY: the caller's.
    unsafe { libc::pthread_mutex_unlock(m) }
}

/// The signals libinfinipath takes over when it loads.
const INFINIPATH_SIGNALS: [i32; 6] =
    [libc::SIGINT, libc::SIGILL, libc::SIGABRT, libc::SIGBUS, libc::SIGSEGV, libc::SIGTERM];

/// Gives back the signals libinfinipath took. Debian's libfabric pulls it in
/// (through its psm provider), and when it loads it installs handlers for
/// SIGINT, SIGILL, SIGABRT, SIGBUS, SIGSEGV and SIGTERM that print a
/// backtrace and `exit(1)`: a crash leaves no core, and a killed process
/// reports exit status 1 rather than its signal. Each handler whose code
/// lives in libinfinipath goes back to the default; a handler of anyone
/// else (the application's) is left alone. Returns how many were reset.
/// Runs when libfabriclib.so loads (lib.rs) and at each engine's creation.
pub fn undo_infinipath_handlers() -> usize {
    let mut reset = 0;
    for sig in INFINIPATH_SIGNALS {
        // SAFETY: a plain C struct, for which all zero bytes are a valid value.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a null new action only reads the current one into `old`.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            continue;
        }
        let h = old.sa_sigaction;
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            continue;
        }
        // SAFETY: a plain C struct (pointers may be null), all zero bytes valid.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads the loader's tables; `info` is an out-parameter.
        if unsafe { libc::dladdr(h as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            continue;
        }
        // SAFETY: the loader's NUL-terminated name of the object.
        let lib = unsafe { CStr::from_ptr(info.dli_fname) };
        if !lib.to_bytes().windows(13).any(|w| w == b"libinfinipath") {
            continue;
        }
        // SAFETY: as `old` above.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: restoring the default disposition of a signal; `dfl` is valid.
        if unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) } == 0 {
            reset += 1;
        }
    }
    reset
}
