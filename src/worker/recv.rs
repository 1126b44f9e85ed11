//! Receive pools: the worker's own memory, posted as receive buffers on
//! domain 0, each message handed to the callback thread and the buffer
//! reposted when the callback returns.
use super::request::{Ctrl, RecvCallback};
use super::token::Token;
use super::{MAX_SEND, Shared, Worker};
use crate::domain::{Chan, Domain, LocalMr, Memory, Post};
use crate::error::{Error, Result, Status};
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

/// A receive pool. Its buffers are always `MAX_SEND` bytes, whatever the
/// user asked for: no engine sends more, so the provider never truncates (on
/// `tcp;ofi_rxm` a truncated receive tears the connection down); a message
/// longer than the pool's `len` is reported as `Truncated` by the worker.
pub(super) struct RecvPool {
    mem: Arc<OwnedMem>,
    len: usize,
    pub(super) mr: LocalMr,
    pub(super) cb: RecvCallback,
}

/// The receives part of the worker: the application's pools and the
/// buffers waiting to be posted (again).
#[derive(Default)]
pub(super) struct Receives {
    /// The pools (`submit_recvs`), by index.
    pub(super) pools: Vec<RecvPool>,
    /// Buffers to post again, (pool, index): their callbacks returned.
    pub(super) repost: VecDeque<(u32, u32)>,
}

impl<D: Domain> Worker<D> {
    /// Registers a pool of `count` buffers on domain 0 and queues them all for posting.
    pub(super) fn add_pool(&mut self, len: usize, count: usize, cb: RecvCallback) -> Result<()> {
        let mem = OwnedMem::new(MAX_SEND * count);
        let mr = self.domains[0].register(mem.ptr, mem.len, Memory::Host)?;
        let p = self.recv.pools.len() as u32;
        self.recv.pools.push(RecvPool { mem, len, mr, cb });
        self.recv.repost.extend((0..count as u32).map(|i| (p, i)));
        Ok(())
    }

    /// Posts the buffers waiting to be (re)posted. True if any was.
    pub(super) fn post_receives(&mut self) -> bool {
        let mut busy = false;
        while let Some((p, i)) = self.recv.repost.pop_front() {
            let pool = &self.recv.pools[p as usize];
            // SAFETY: slot i lies inside the pool's allocation.
            let buf = unsafe { pool.mem.ptr.add(i as usize * MAX_SEND) };
            match self.domains[0].post_recv(
                Chan::User,
                buf,
                MAX_SEND,
                pool.mr.desc,
                Token::Recv { pool: p, index: i }.encode(),
            ) {
                Ok(Post::Posted) => busy = true,
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

    /// Hands a received message to the callback thread; the buffer is
    /// reposted after the callback returns.
    pub(super) fn deliver(&mut self, p: u32, i: u32, res: Result<usize>) {
        let pool = &self.recv.pools[p as usize];
        let (mem, cb, max, shared) = (pool.mem.clone(), pool.cb.clone(), pool.len, self.shared.clone());
        let res = res.and_then(|len| match len {
            len if len > max => Err(Error::new(
                Status::Truncated,
                format!("a {len}-byte message does not fit this pool's {max}-byte buffers; dropped"),
            )),
            len => Ok(len),
        });
        self.notifier.run(Box::new(move || {
            let res = res.map(|len| {
                // SAFETY: the slot is ours until we repost it below; len <= max <= MAX_SEND.
                unsafe { std::slice::from_raw_parts(mem.ptr.add(i as usize * MAX_SEND), len) }
            });
            // Repost even if the callback panics (the callback thread catches it).
            struct Repost(Arc<Shared>, u32, u32);
            impl Drop for Repost {
                fn drop(&mut self) {
                    self.0.ctrl.push(Ctrl::Repost { pool: self.1, index: self.2 });
                    self.0.wake();
                }
            }
            let _guard = Repost(shared, p, i);
            cb(res);
        }));
    }
}
