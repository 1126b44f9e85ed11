//! Messages: `submit_send` and the receive pools that take them
//! (worker/recv.rs, worker/stage.rs).
use super::TransferEngine;
use crate::bail;
use crate::completion::notify::{RequestId, RequestOpts};
use crate::error::Result;
use crate::wire::NetAddr;
use crate::worker::MAX_SEND;
use crate::worker::recv::Received;
use crate::worker::request::{Ctrl, RecvCallback, Shape};
use std::sync::Arc;

/// Most receive buffers one pool posts (each is 64 KiB underneath).
pub const MAX_RECV_BUFFERS: usize = 4096;

/// A receive pool of an engine (`add_recv_pool`), to remove it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvPoolId(pub u64);

impl TransferEngine {
    /// Sends a copy of `msg` (at most `max_send_size()` bytes: 64 KiB, 4096
    /// bytes on shm) to domain 0 of the engine at `to`;
    /// `msg` may be reused as soon as this returns. The peer needs a posted
    /// receive buffer at least as large (see `add_recv_pool`).
    pub fn submit_send(&self, to: &NetAddr, msg: &[u8], done: impl Into<RequestOpts>) -> Result<RequestId> {
        self.check_peer(0, to)?;
        let max = self.max_send_size();
        if msg.len() > max {
            let why = if max < MAX_SEND {
                format!(
                    " on {} (a larger message would wait on the receiver's answer, and a receiver that died \
                     would stall every later one)",
                    self.provider()
                )
            } else {
                String::new()
            };
            bail!(InvalidArgument, "submit_send: {} bytes is over the {max}-byte message limit{why}", msg.len());
        }
        let slots = &self.groups[0].shared.send_slots;
        let msg = slots.stage(msg);
        let slot = msg.slot();
        // Refused (nothing queued: `max_inflight`, a full queue, bad options): the slot back.
        self.submit(0, Shape::Send { to: to.clone(), msg }, None, None, done.into()).inspect_err(|_| {
            if let Some(s) = slot {
                slots.release(s)
            }
        })
    }

    /// Send slots not in use that `submit_send` may copy a message into
    /// (64 when no send is in flight; `src/worker/stage.rs`). For tests
    /// that check that every send gives its slot back.
    #[doc(hidden)]
    pub fn send_slots_free(&self) -> usize {
        self.groups[0].shared.send_slots.free_now()
    }

    /// Posts `count` receive buffers for messages of up to `len` bytes on
    /// domain 0 as one pool, and returns its id. Every message that arrives
    /// calls `cb` on the callback thread with its bytes and its sender
    /// (`Received`); one longer than `len` is dropped and reported as
    /// `Truncated` (the sender's connection is unaffected: buffers are always
    /// 64 KiB underneath, so `count` costs `count` × 64 KiB). The buffer is
    /// reposted when `cb` returns. `cb`'s last call says `Canceled` after
    /// `remove_recv_pool`, `Shutdown` when the engine ends.
    pub fn add_recv_pool(
        &self,
        len: usize,
        count: usize,
        cb: impl Fn(Received<'_>) + Send + Sync + 'static,
    ) -> Result<RecvPoolId> {
        self.recv_pool(len, count, Arc::new(cb), false)
    }

    /// As `add_recv_pool`, but `cb` runs on the worker thread itself, as the
    /// message is taken from the NIC: no hand-off to the callback thread and
    /// back, so a request/response exchange (a ping answered from the
    /// callback) saves two thread hops each way. `cb` must be short and must
    /// not block: it may submit (a full queue says `Again`), count and copy;
    /// calls that wait for the worker (adding or removing pools, peers,
    /// expectations; awaiting a flag) fail with `InvalidArgument` from it, and
    /// it must not destroy the engine. With manual progress it runs inside
    /// the pass that takes the message, on the progressing thread, under the
    /// same rules (a nested `progress` does nothing); `add_recv_pool`'s
    /// callbacks run after the pass instead, through a queue.
    pub fn add_recv_pool_on_worker(
        &self,
        len: usize,
        count: usize,
        cb: impl Fn(Received<'_>) + Send + Sync + 'static,
    ) -> Result<RecvPoolId> {
        self.recv_pool(len, count, Arc::new(cb), true)
    }

    fn recv_pool(&self, len: usize, count: usize, cb: RecvCallback, on_worker: bool) -> Result<RecvPoolId> {
        if len == 0 || count == 0 {
            bail!(InvalidArgument, "add_recv_pool: buffer length and count must be at least 1");
        }
        if len > MAX_SEND || count > MAX_RECV_BUFFERS {
            bail!(InvalidArgument, "add_recv_pool: at most {MAX_RECV_BUFFERS} buffers of at most {MAX_SEND} bytes");
        }
        self.rpc(|reply| Ctrl::RecvPool { len, count, cb, on_worker, reply }).map(RecvPoolId)
    }

    /// Removes a receive pool: its callback's last call (`Canceled`) runs
    /// after the messages already handed to it, and none follows. Its
    /// buffers are withdrawn from the provider where it can (libfabric);
    /// a message that still lands in one (verbs cannot withdraw a posted
    /// receive) goes to the oldest pool still there, or to the next pool
    /// added. Its memory is freed once every buffer is back. `NotFound` for
    /// a pool already removed.
    pub fn remove_recv_pool(&self, pool: RecvPoolId) -> Result<()> {
        self.rpc(|reply| Ctrl::RemoveRecvPool { id: pool.0, reply })
    }

    /// `add_recv_pool` for a callback that takes the bytes only (`Ok`) or
    /// why there are none (`Err`).
    pub fn submit_recvs(
        &self,
        len: usize,
        count: usize,
        cb: impl Fn(Result<&[u8]>) + Send + Sync + 'static,
    ) -> Result<()> {
        self.add_recv_pool(len, count, move |m| cb(m.data)).map(drop)
    }
}
