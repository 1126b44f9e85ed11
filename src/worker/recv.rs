//! Receive pools: the worker's own memory, posted as receive buffers on
//! domain 0, each message handed to the callback thread with its sender and
//! the buffer reposted when the callback returns; a pool can be removed. A
//! pool added `on_worker` has its callback run by the worker itself, as the
//! message is taken, and its buffer queued for reposting at once.
//!
//! Every application message names its sending group's epoch, which names
//! the sender in this worker's peer table (a sender is always greeted, so
//! known, before its first message): in the completion's eight bytes of data
//! where the backend carries them (`Domain::sender_in_data`: tcp;ofi_rxm,
//! shm), else in `SEND_HEADER` bytes before the message (stage.rs writes
//! them); a buffer is posted `SEND_HEADER` bytes in for the former, so the
//! message lies at the same place either way (`message`). The buffers are
//! `SEND_SLOT` bytes whatever the pool's
//! `len`: no engine sends more, so the provider never truncates (on
//! `tcp;ofi_rxm` a truncated receive tears the connection down); a message
//! longer than the pool's `len` is reported as `Truncated` by the worker.
//!
//! A removed pool (`remove_pool`) is *retired*: its callback's last call
//! says `Canceled`, and none of its buffers is posted again. Those still
//! with the provider are withdrawn where the backend can
//! (`Domain::cancel_recvs`: libfabric); a message that lands in one anyway
//! (verbs cannot withdraw a posted receive) goes to the oldest live pool, as
//! it could have landed in that pool's buffer, or waits for the next pool
//! when none is live. Its memory is freed once every buffer is back.
use super::request::{Ctrl, RecvCallback};
use super::stage::{SEND_HEADER, SEND_SLOT, wire_header};
use super::token::Token;
use super::{Shared, Worker};
use crate::completion::notify;
use crate::domain::{Chan, Domain, LocalMr, Memory, Post};
use crate::error::{Error, Result, Status};
use crate::wire::NetAddr;
use std::collections::VecDeque;
use std::sync::Arc;

/// Memory the worker allocates itself (receive pools, send staging, scratch).
pub(super) struct OwnedMem {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}
// SAFETY: plain heap memory; who may touch which byte is arranged by the worker
// (a receive slot belongs to the callback thread between delivery and repost).
unsafe impl Send for OwnedMem {}
unsafe impl Sync for OwnedMem {}
impl OwnedMem {
    pub(super) fn new(len: usize) -> Arc<OwnedMem> {
        let b = vec![0u8; len.max(1)].into_boxed_slice();
        let len = b.len();
        Arc::new(OwnedMem { ptr: Box::into_raw(b) as *mut u8, len })
    }
}
impl Drop for OwnedMem {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from Box::into_raw of a boxed slice of len bytes.
        unsafe { drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len))) }
    }
}

/// Who sent a message: the sender engine's address (as peer-state reports
/// name it) and that address as a blob (`NetAddr::to_bytes`).
#[derive(Debug, PartialEq, Eq)]
pub struct Origin {
    pub addr: NetAddr,
    pub blob: Box<[u8]>,
}

impl Origin {
    pub(super) fn of(addr: &NetAddr) -> Arc<Origin> {
        Arc::new(Origin { addr: addr.clone(), blob: addr.to_bytes().into() })
    }
}

/// What a receive pool's callback gets: the message's bytes (valid during
/// the call) or why there are none, and who sent it where known.
pub struct Received<'a> {
    /// The message; `Truncated` (longer than the pool's buffers), `Malformed`
    /// (no fabriclib header), `Canceled` (the pool's last call after
    /// `remove_recv_pool`), `Shutdown` (its last call as the engine ends).
    pub data: Result<&'a [u8]>,
    /// The sender; `None` on a pool's last call, or when the sender is no
    /// longer among this engine's peers (`remove_peer`).
    pub from: Option<&'a Origin>,
}

/// A receive pool. `posted` of its buffers are with the provider and `out`
/// with the callback thread (or waiting for a pool: `strays`).
pub(super) struct RecvPool {
    mem: Arc<OwnedMem>,
    len: usize,
    pub(super) mr: LocalMr,
    pub(super) cb: RecvCallback,
    /// Its callback runs on the worker thread (`add_recv_pool_on_worker`).
    on_worker: bool,
    posted: u32,
    out: u32,
    /// Removed: nothing is posted again; freed once every buffer is back.
    retired: bool,
}

/// A message that landed in a retired pool's buffer while no pool was live.
struct Stray {
    pool: u32,
    index: u32,
    len: usize,
    from: Option<Arc<Origin>>,
}

/// The receives part of the worker: the application's pools (by id; a
/// freed pool's slot stays empty, ids are never reused) and the buffers
/// waiting to be posted (again).
#[derive(Default)]
pub(super) struct Receives {
    pub(super) pools: Vec<Option<RecvPool>>,
    /// Buffers to post again, (pool, index): their callbacks returned.
    pub(super) repost: VecDeque<(u32, u32)>,
    strays: VecDeque<Stray>,
}

impl Receives {
    fn pool(&mut self, p: u32) -> &mut RecvPool {
        self.pools[p as usize].as_mut().expect("a pool with buffers out stays in the table")
    }

    fn get(&self, p: u32) -> &RecvPool {
        self.pools[p as usize].as_ref().expect("a pool with buffers out stays in the table")
    }

    /// The oldest live pool.
    fn live(&self) -> Option<u32> {
        self.pools.iter().position(|p| p.as_ref().is_some_and(|p| !p.retired)).map(|p| p as u32)
    }

    /// Every live pool's callback and whether it runs on the worker (its
    /// last call, at shutdown).
    pub(super) fn live_callbacks(&self) -> impl Iterator<Item = (RecvCallback, bool)> + '_ {
        self.pools.iter().flatten().filter(|p| !p.retired).map(|p| (p.cb.clone(), p.on_worker))
    }
}

impl<D: Domain> Worker<D> {
    /// Registers a pool of `count` buffers on domain 0 and queues them all
    /// for posting; its id. Messages waiting for a pool go to it first.
    pub(super) fn add_pool(&mut self, len: usize, count: usize, cb: RecvCallback, on_worker: bool) -> Result<u64> {
        let mem = OwnedMem::new(SEND_SLOT * count);
        let mr = self.domains[0].register(mem.ptr, mem.len, Memory::Host)?;
        let p = self.recv.pools.len() as u32;
        self.recv.pools.push(Some(RecvPool { mem, len, mr, cb, on_worker, posted: 0, out: 0, retired: false }));
        self.recv.repost.extend((0..count as u32).map(|i| (p, i)));
        while let Some(s) = self.recv.strays.pop_front() {
            self.hand_over(s.pool, s.index, p, Ok(s.len), s.from);
        }
        Ok(p as u64)
    }

    /// Retires pool `id`: its callback's last call (`Canceled`) is queued
    /// behind the messages already handed to it; its posted buffers are
    /// withdrawn where the backend can.
    pub(super) fn remove_pool(&mut self, id: u64) -> Result<()> {
        let p = match self.recv.pools.get_mut(id as usize) {
            Some(Some(pool)) if !pool.retired => {
                pool.retired = true;
                let (cb, on_worker) = (pool.cb.clone(), pool.on_worker);
                let e = Error::new(Status::Canceled, "the receive pool was removed");
                self.last_call(cb, on_worker, e);
                id as u32
            }
            _ => crate::bail!(NotFound, "receive pool {id} does not exist (or was removed already)"),
        };
        self.recv.repost.retain(|&(q, _)| q != p);
        self.domains[0].cancel_recvs(&mut |t| matches!(Token::decode(t), Token::Recv { pool, .. } if pool == p));
        self.free_if_back(p);
        Ok(())
    }

    /// A pool's last call, with `e` (`Canceled`, `Shutdown`), where its
    /// callbacks run.
    pub(super) fn last_call(&self, cb: RecvCallback, on_worker: bool, e: Error) {
        if on_worker {
            notify::run_on_worker(|| cb(Received { data: Err(e), from: None }));
        } else {
            self.notifier.run(Box::new(move || cb(Received { data: Err(e), from: None })));
        }
    }

    /// Frees retired pool `p` once none of its buffers is out.
    fn free_if_back(&mut self, p: u32) {
        let pool = self.recv.pool(p);
        if pool.retired && pool.posted == 0 && pool.out == 0 {
            let mr = pool.mr;
            self.domains[0].deregister(&mr);
            self.recv.pools[p as usize] = None;
        }
    }

    /// Buffer `index` of pool `pool` is back from the callback thread.
    pub(super) fn returned(&mut self, pool: u32, index: u32) {
        let p = self.recv.pool(pool);
        p.out -= 1;
        if p.retired {
            self.free_if_back(pool);
        } else {
            self.recv.repost.push_back((pool, index));
        }
    }

    /// Posts the buffers waiting to be (re)posted. True if any was.
    pub(super) fn post_receives(&mut self) -> bool {
        let mut busy = false;
        // Without the header on the wire a message lands where it would after
        // it (`message` reads it there).
        let skip = SEND_HEADER - wire_header(&self.domains[0]);
        while let Some((p, i)) = self.recv.repost.pop_front() {
            let pool = self.recv.pool(p);
            // SAFETY: slot i lies inside the pool's allocation.
            let buf = unsafe { pool.mem.ptr.add(i as usize * SEND_SLOT + skip) };
            let token = Token::Recv { pool: p, index: i }.encode();
            match self.domains[0].post_recv(Chan::User, buf, SEND_SLOT - skip, pool.mr.desc, token) {
                Ok(Post::Posted) => {
                    self.recv.pool(p).posted += 1;
                    busy = true;
                }
                Ok(Post::Again | Post::Busy) => {
                    self.recv.repost.push_front((p, i));
                    break;
                }
                Err(e) => {
                    crate::log!(Error, "cannot post a receive buffer: {e}");
                    break;
                }
            }
        }
        busy
    }

    /// A receive of buffer `i` of pool `p` completed (with the completion's
    /// `data`, if any): the message goes to the pool's callback, or to the
    /// oldest live pool's if `p` is retired.
    pub(super) fn deliver(&mut self, p: u32, i: u32, res: Result<usize>, data: Option<u64>) {
        let pool = self.recv.pool(p);
        pool.posted -= 1;
        let retired = pool.retired;
        if retired && res.is_err() {
            // Withdrawn (or flushed): nothing arrived.
            return self.free_if_back(p);
        }
        // Its sender's epoch and its own length: from the completion's data
        // (`Domain::sender_in_data`), else from the header before it.
        let header = wire_header(&self.domains[0]);
        let sender = |len: usize| match header {
            0 => data.map(|epoch| (epoch, len)),
            _ => (len >= SEND_HEADER).then(|| {
                // SAFETY: the slot is ours until it is reposted; its first
                // SEND_HEADER bytes (the header) lie inside the pool's allocation.
                let epoch = unsafe {
                    let at = pool.mem.ptr.add(i as usize * SEND_SLOT);
                    u64::from_le_bytes(std::ptr::read_unaligned(at as *const [u8; 8]))
                };
                (epoch, len - SEND_HEADER)
            }),
        };
        let (res, from) = match res {
            Ok(len) => match sender(len) {
                Some((epoch, len)) => (Ok(len), self.peers.origin(epoch)),
                None => (
                    Err(Error::new(Status::Malformed, format!("a {len}-byte message that does not name its sender"))),
                    None,
                ),
            },
            Err(e) => (Err(e), None),
        };
        if let (true, Err(e)) = (retired, &res) {
            crate::log!(Warn, "a message for a removed receive pool was dropped: {e}");
            return self.free_if_back(p);
        }
        self.recv.pool(p).out += 1;
        match if retired { self.recv.live() } else { Some(p) } {
            Some(to) => self.hand_over(p, i, to, res, from),
            None => {
                let len = res.unwrap_or(0);
                self.recv.strays.push_back(Stray { pool: p, index: i, len, from });
            }
        }
    }

    /// Runs pool `to`'s callback with the message in buffer `i` of pool `p`
    /// (after its header): on the worker, the buffer then queued for
    /// reposting, for a pool added `on_worker`; else on the callback thread,
    /// the buffer returning (`Ctrl::Repost`) when the callback does.
    fn hand_over(&mut self, p: u32, i: u32, to: u32, res: Result<usize>, from: Option<Arc<Origin>>) {
        let target = self.recv.get(to);
        let max = target.len;
        let res = res.and_then(|len| match len {
            len if len > max => Err(Error::new(
                Status::Truncated,
                format!("a {len}-byte message does not fit this pool's {max}-byte buffers; dropped"),
            )),
            len => Ok(len),
        });
        if target.on_worker {
            let mem = &self.recv.get(p).mem;
            let data = res.map(|len| message(mem, i, len));
            notify::run_on_worker(|| target.cb.as_ref()(Received { data, from: from.as_deref() }));
            return self.returned(p, i);
        }
        let (mem, cb, shared) = (self.recv.get(p).mem.clone(), target.cb.clone(), self.shared.clone());
        self.notifier.run(Box::new(move || {
            let data = res.map(|len| message(&mem, i, len));
            // Repost even if the callback panics (the callback thread catches it).
            struct Repost(Arc<Shared>, u32, u32);
            impl Drop for Repost {
                fn drop(&mut self) {
                    self.0.ctrl.push(Ctrl::Repost { pool: self.1, index: self.2 });
                    self.0.wake();
                }
            }
            let _guard = Repost(shared, p, i);
            cb(Received { data, from: from.as_deref() });
        }));
    }
}

/// The `len` bytes of the message in buffer `i` of `mem` (after its header).
fn message(mem: &OwnedMem, i: u32, len: usize) -> &[u8] {
    // SAFETY: buffer i is the callback's until it is reposted (after the
    // callback returns); header + len <= SEND_SLOT, inside the allocation.
    unsafe { std::slice::from_raw_parts(mem.ptr.add(i as usize * SEND_SLOT + SEND_HEADER), len) }
}
