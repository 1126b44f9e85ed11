//! Liveness records: how a writer on the same host tells, with one memory
//! load before every post, that the process behind a peer's address is still
//! the incarnation it greeted.
//!
//! Why: on a provider that does not check keys at the target (libfabric's
//! shm: the *sender* copies a write into the target process with
//! `process_vm_writev`, by pid and virtual address), a process restarted
//! with the same pid (pid 1 of a fresh container sharing `/dev/shm`, a
//! supervisor reusing pids) would receive writes meant for its predecessor,
//! at whatever it keeps at the same addresses. Descriptors name the old
//! incarnation (its epoch); this record is how the writer learns that the
//! old incarnation is gone before anything is posted through them.
//!
//! How: each engine group that needs it (`Domain::keys_checked_by_target`
//! false) creates `/dev/shm/fabriclib-live-<epoch>` (mode 0600, one page)
//! holding a process-shared *robust* mutex, which a thread of the process
//! (the keeper, one per process) locks and holds for the engine's life. When
//! the process dies — `kill -9` included — the kernel marks the mutex's word
//! `FUTEX_OWNER_DIED` while the process exits, before its pid is released, so
//! before any new process can have it. A destroyed engine marks its record
//! closed. A writer maps its peer's record read-only when it first meets the
//! peer and reads the word before each post: once the word says died or
//! closed, the peer is down and nothing more is posted to it.
//!
//! What remains: a check and the copy it guards are a few hundred
//! nanoseconds apart on the worker thread; for a write to land elsewhere,
//! the peer would have to die, be reaped, and a new process take its pid and
//! map memory at the same address within that gap. Records of killed
//! processes are left in `/dev/shm` (like shm's own files) and swept by the
//! next engine that creates one.
use crate::bell::Bell;
use crate::error::{Error, Result, Status};
use crate::os::{self, SharedMap, SharedMutex};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// The bit the kernel sets in a robust futex word whose owner died (linux/futex.h).
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
/// The owner's thread id in a robust futex word (linux/futex.h).
const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
const MAGIC: u32 = u32::from_le_bytes(*b"FLLV");
const PAGE: usize = 4096;
const PREFIX: &str = "fabriclib-live-";

/// The record's page: the mutex first (glibc keeps its futex word, `__lock`,
/// at offset 0 on every Linux architecture; `Record::create` checks it), then
/// what a reader checks it against.
#[repr(C)]
struct Page {
    mutex: SharedMutex,
    closed: AtomicU32,
    magic: u32,
    epoch: u64,
}

/// The record file of the engine group of `epoch`; its second page is the
/// group's doorbell (bell.rs).
fn path(epoch: u64) -> String {
    format!("/dev/shm/{PREFIX}{epoch:016x}")
}

/// Maps the record page of the file at `path`, read-only (`sweep`).
fn map_read_only(path: &str) -> Result<*mut Page> {
    match crate::os::map_shared_file(path, PAGE, false, false) {
        Ok(p) => Ok(p.cast()),
        Err(e) => Err(Error::new(Status::Provider, format!("liveness record: {path}: {e}"))),
    }
}

/// The futex word of the mutex in `page`.
///
/// # Safety
/// `page` is a live mapping of a record.
unsafe fn word<'a>(page: *const Page) -> &'a AtomicU32 {
    // SAFETY: offset 0 of a mapped page, 4-byte aligned; read atomically
    // because the kernel and the owner change it.
    unsafe { &*(page as *const AtomicU32) }
}

/// Whether the record at `page` says its engine is gone: its owner died, or
/// it was closed (or never locked: not a record of a live engine).
///
/// # Safety
/// `page` is a live mapping of a record.
unsafe fn gone(page: *const Page) -> bool {
    // SAFETY: the caller's.
    let w = unsafe { word(page) }.load(Ordering::Acquire);
    // SAFETY: the caller's.
    w & FUTEX_OWNER_DIED != 0 || w & FUTEX_TID_MASK == 0 || unsafe { &(*page).closed }.load(Ordering::Acquire) != 0
}

enum Keep {
    Lock(usize, mpsc::Sender<std::result::Result<u32, i32>>),
    Unlock(usize, mpsc::Sender<std::result::Result<u32, i32>>),
}

/// The keeper: one thread per process that locks each record's mutex and
/// holds it until the engine is destroyed (so a record never depends on
/// which application thread made the engine, or whether that thread lives).
/// Started again in a forked child (threads do not survive `fork`).
static KEEPER: Mutex<Option<(u32, mpsc::Sender<Keep>)>> = Mutex::new(None);

fn keeper() -> Result<mpsc::Sender<Keep>> {
    let mut k = KEEPER.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some((_, tx)) = k.as_ref().filter(|(p, _)| *p == pid) {
        return Ok(tx.clone());
    }
    let (tx, rx) = mpsc::channel::<Keep>();
    std::thread::Builder::new()
        .name("fabriclib-live".into())
        .spawn(move || {
            // Each address is a mapped record page whose mutex was
            // initialised (process-shared, robust) by Record::create, and
            // stays mapped until its Unlock has been answered.
            for cmd in rx {
                match cmd {
                    Keep::Lock(p, reply) => {
                        // SAFETY: a live, initialised record mutex (above).
                        let r = unsafe { os::mutex_lock(p as *mut SharedMutex) };
                        let _ = reply.send(if r == 0 { Ok(os::gettid()) } else { Err(r) });
                    }
                    Keep::Unlock(p, reply) => {
                        // SAFETY: a live record mutex this thread locked (above).
                        let r = unsafe { os::mutex_unlock(p as *mut SharedMutex) };
                        let _ = reply.send(if r == 0 { Ok(0) } else { Err(r) });
                    }
                }
            }
        })
        .map_err(|e| Error::new(Status::Provider, format!("cannot start the liveness keeper thread: {e}")))?;
    *k = Some((pid, tx.clone()));
    Ok(tx)
}

fn ask(cmd: impl FnOnce(mpsc::Sender<std::result::Result<u32, i32>>) -> Keep) -> Result<u32> {
    let (tx, rx) = mpsc::channel();
    keeper()?.send(cmd(tx)).map_err(|_| Error::new(Status::Provider, "the liveness keeper thread is gone"))?;
    match rx.recv() {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::new(Status::Provider, format!("liveness record: pthread mutex error {e}"))),
        Err(_) => Err(Error::new(Status::Provider, "the liveness keeper thread is gone")),
    }
}

/// This engine group's own record, held for its life (see the module doc).
/// Its file is two pages: the record, then the group's doorbell (bell.rs),
/// in one mapping.
pub struct Record {
    page: *mut Page,
    map: Arc<SharedMap>,
    path: String,
}

// SAFETY: the page is shared memory touched only through atomics and the
// keeper's mutex calls; the struct is owned by one worker.
unsafe impl Send for Record {}

impl Record {
    /// Creates, locks and publishes the record of `epoch`.
    pub fn create(epoch: u64) -> Result<Record> {
        sweep();
        let path = path(epoch);
        let tmp = format!("{path}.{}", std::process::id());
        let base = crate::os::map_shared_file(&tmp, 2 * PAGE, true, true)
            .map_err(|e| Error::new(Status::Provider, format!("liveness record: {tmp}: {e}")))?;
        // SAFETY: a fresh mapping of two pages, owned from here.
        let map = Arc::new(unsafe { SharedMap::from_raw(base, 2 * PAGE) });
        let page = base.cast::<Page>();
        let mut rec = Record { page, map, path: tmp };
        // SAFETY: page is a fresh, zeroed, writable mapping of PAGE bytes.
        unsafe {
            let r = os::robust_mutex_init(&mut (*page).mutex);
            if r != 0 {
                return Err(Error::new(Status::Provider, format!("liveness record: pthread_mutex_init: {r}")));
            }
            (*page).magic = MAGIC;
            (*page).epoch = epoch;
        }
        let tid = ask(|tx| Keep::Lock(page as usize, tx))?;
        // SAFETY: page is mapped.
        let w = unsafe { word(page) }.load(Ordering::Acquire);
        if w & FUTEX_TID_MASK != tid {
            return Err(Error::new(
                Status::Unsupported,
                format!(
                    "liveness record: this C library does not keep a robust mutex's futex word first \
                     (word {w:#x}, owner {tid}); fabriclib's shm fencing needs glibc"
                ),
            ));
        }
        // Published only now, locked: a reader (or a sweeper) never sees a
        // record that is not yet held.
        if let Err(e) = std::fs::rename(&rec.path, &path) {
            crate::bail!(Provider, "liveness record: rename to {path}: {e}");
        }
        rec.path = path;
        Ok(rec)
    }
}

impl Record {
    /// The group's doorbell, in the second page (bell.rs).
    pub fn bell(&self) -> Bell {
        Bell::new(self.map.clone(), PAGE)
    }

    /// Says the engine is gone, before its endpoints close (the worker's
    /// last step): a writer that reads the record after this posts nothing
    /// more to it. (On shm, a send to an endpoint that closed in the
    /// sender's own process crashes the sender.)
    pub fn mark_closed(&self) {
        // SAFETY: the page stays mapped while `map` lives.
        unsafe { (*self.page).closed.store(1, Ordering::Release) };
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        // Closed first, so a reader never takes the unlocked word for a live engine.
        self.mark_closed();
        // SAFETY: the page stays mapped while `map` lives.
        if unsafe { word(self.page) }.load(Ordering::Acquire) & FUTEX_TID_MASK != 0 {
            let _ = ask(|tx| Keep::Unlock(self.page as usize, tx));
        }
        let _ = std::fs::remove_file(&self.path);
        // The mapping goes with the last of `map` (a bell may outlive the
        // record by a moment); the keeper has answered, so it no longer
        // holds the mutex in it.
    }
}

/// A peer's record, mapped read-only: `gone()` is one load; and its
/// doorbell, mapped writable in the same mapping, if it has one (bell.rs).
pub struct Watch {
    page: *const Page,
    _map: Arc<SharedMap>,
    bell: Option<Bell>,
}

// SAFETY: a read-only shared mapping, read through atomics only.
unsafe impl Send for Watch {}

impl Watch {
    /// Maps the record of the engine of `epoch`. `PeerDown` if there is none
    /// (its engine has shut down, or its process died and the record was swept)
    /// or it says the engine is gone.
    pub fn open(epoch: u64) -> Result<Watch> {
        let path = path(epoch);
        let map = crate::os::map_shared_file_split(&path, PAGE, PAGE).map_err(|e| {
            Error::new(
                Status::PeerDown,
                format!("the peer engine has no liveness record ({path}: {e}): it has shut down or its process died"),
            )
        })?;
        let map = Arc::new(map);
        let page = map.ptr().cast::<Page>().cast_const();
        let bell = (map.len() >= 2 * PAGE).then(|| Bell::new(map.clone(), PAGE));
        let w = Watch { page, _map: map, bell };
        // SAFETY: page is a live read-only mapping of PAGE bytes.
        let (magic, ep) = unsafe { ((*page).magic, (*page).epoch) };
        if magic != MAGIC || ep != epoch {
            crate::bail!(PeerDown, "{path} is not the liveness record of engine epoch {epoch:#x}");
        }
        if w.gone() {
            crate::bail!(PeerDown, "the peer engine's process has exited (its liveness record says so)");
        }
        Ok(w)
    }

    /// Whether the engine has gone (its process died, or it was destroyed).
    #[inline]
    pub fn gone(&self) -> bool {
        // SAFETY: mapped for as long as self lives.
        unsafe { gone(self.page) }
    }

    /// The peer's doorbell (`None`: an engine of a version without one).
    pub fn bell(&self) -> Option<&Bell> {
        self.bell.as_ref()
    }
}

/// Removes the records of engines that are gone (processes killed without
/// closing them), so they do not pile up in `/dev/shm`.
fn sweep() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return };
    for e in dir.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        // Final names only: a record being created (`….<pid>`) is not yet held.
        let Some(hex) = name.strip_prefix(PREFIX).filter(|h| h.len() == 16) else { continue };
        if u64::from_str_radix(hex, 16).is_err() {
            continue;
        }
        let p = format!("/dev/shm/{name}");
        if let Ok(page) = map_read_only(&p) {
            // SAFETY: a live read-only mapping of PAGE bytes, unmapped right after.
            unsafe {
                if (*page).magic == MAGIC && gone(page) {
                    let _ = std::fs::remove_file(&p);
                }
                os::unmap(page.cast(), PAGE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn epoch() -> u64 {
        crate::domain::random_u64() | 1
    }

    #[test]
    fn a_live_record_is_not_gone_and_a_dropped_one_is() {
        let e = epoch();
        let rec = Record::create(e).unwrap();
        let w = Watch::open(e).unwrap();
        assert!(!w.gone());
        drop(rec);
        assert!(w.gone(), "a destroyed engine's record reads gone through an existing mapping");
        assert_eq!(Watch::open(e).err().map(|e| e.status), Some(Status::PeerDown), "and it is unlinked");
    }

    #[test]
    fn a_record_of_a_dead_process_is_gone() {
        // A child process creates a record and dies without closing it: the
        // kernel marks the word, and the next record creation sweeps the file.
        let e = epoch();
        let exe = std::env::current_exe().unwrap();
        let st = std::process::Command::new(exe)
            .args(["--exact", "liveness::tests::child_creates_a_record_and_exits", "--nocapture"])
            .env("FABRICLIB_LIVE_EPOCH", format!("{e:x}"))
            .status()
            .unwrap();
        assert!(st.success());
        let w = Watch::open(e);
        assert_eq!(w.err().map(|e| e.status), Some(Status::PeerDown), "a dead owner's record reads gone");
        assert!(std::path::Path::new(&path(e)).exists(), "left behind by the dead process");
        drop(Record::create(epoch()).unwrap());
        assert!(!std::path::Path::new(&path(e)).exists(), "swept by the next record created");
    }

    /// Helper for the test above (does nothing unless run as its child).
    #[test]
    fn child_creates_a_record_and_exits() {
        let Ok(hex) = std::env::var("FABRICLIB_LIVE_EPOCH") else { return };
        let rec = Record::create(u64::from_str_radix(&hex, 16).unwrap()).unwrap();
        std::mem::forget(rec);
        // Exit without dropping: as if killed.
        std::process::exit(0);
    }

    #[test]
    fn a_missing_record_is_a_peer_down() {
        assert_eq!(Watch::open(epoch()).err().map(|e| e.status), Some(Status::PeerDown));
    }
}
