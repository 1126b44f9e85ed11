//! The `null` provider: a domain whose work requests complete the moment they
//! are posted and move no bytes. It exists for one job: measuring the
//! engine's own host cost (submit → validate → queue → shard → template →
//! post → aggregate → notify) without wire time or a provider's software
//! stack in the way (`fabriclib-bench`'s host-cost rows). Select it only by
//! naming it (`provider = "null"`); it is never tried by default.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use super::DomainSpec;
use super::{Chan, Completion, Domain, LocalMr, PeerId, Post, SendWr, WriteWr};
use crate::error::Result;
use crate::wire::RemoteKey;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;

/// Work requests "in flight" at most (as a NIC's send queue depth).
const DEPTH: usize = 1024;

pub struct NullDomain {
    addr: Vec<u8>,
    /// Posted work requests: (token, peer, bytes).
    done: VecDeque<(u64, PeerId, u64)>,
    peers: HashMap<Box<[u8]>, PeerId>,
    next_key: u64,
}

impl NullDomain {
    fn post(&mut self, token: u64, peer: PeerId, bytes: usize) -> Result<Post> {
        if self.done.len() >= DEPTH {
            return Ok(Post::Again);
        }
        self.done.push_back((token, peer, bytes as u64));
        Ok(Post::Posted)
    }
}

impl Domain for NullDomain {
    fn orders_sends_after_writes(&self) -> bool {
        true // nothing travels
    }

    fn open(spec: &DomainSpec) -> Result<Self> {
        let addr = format!("null:{}:{}", std::process::id(), spec.index).into_bytes();
        Ok(NullDomain { addr, done: VecDeque::with_capacity(DEPTH), peers: HashMap::new(), next_key: 1 })
    }
    fn provider(&self) -> &str {
        "null"
    }
    fn address(&self) -> &[u8] {
        &self.addr
    }
    fn max_msg_size(&self) -> usize {
        1 << 30
    }
    /// Any memory: nothing is ever read or written.
    fn register(&mut self, ptr: *mut u8, _len: usize, _mem: super::Memory) -> Result<LocalMr> {
        self.next_key += 1;
        Ok(LocalMr {
            raw: std::ptr::null_mut(),
            desc: std::ptr::null_mut(),
            remote: RemoteKey { remote_base: ptr as u64, key: self.next_key },
        })
    }
    fn deregister(&mut self, _mr: &LocalMr) {}
    fn device_memory(&self) -> crate::domain::DeviceMemory {
        // It moves nothing, so it takes any pointer (the benchmark's null rows).
        crate::domain::DeviceMemory::Pointer
    }
    fn resolve(&mut self, addr: &[u8]) -> Result<PeerId> {
        let n = self.peers.len() as PeerId;
        Ok(*self.peers.entry(addr.into()).or_insert(n))
    }
    fn post_write(&mut self, wr: &WriteWr, token: u64) -> Result<Post> {
        self.post(token, wr.peer, wr.len)
    }
    fn post_send(&mut self, wr: &SendWr, token: u64) -> Result<Post> {
        self.post(token, wr.peer, wr.len)
    }
    /// Receives never complete (nothing arrives on the null provider).
    fn post_recv(&mut self, _chan: Chan, _buf: *mut u8, _len: usize, _desc: *mut c_void, _token: u64) -> Result<Post> {
        Ok(Post::Posted)
    }
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        let n = self.done.len().min(64);
        // From the queue's two slices, whose length is known: a copy loop,
        // where draining one element at a time cost a tenth of the worker's
        // time in the host rows (what this provider must keep out of them).
        let (a, b) = self.done.as_slices();
        let (a, b) = (&a[..n.min(a.len())], &b[..n - n.min(a.len())]);
        let done = |&(token, peer, bytes): &(u64, PeerId, u64)| Completion::Done { token, peer, bytes };
        out.extend(a.iter().map(done));
        out.extend(b.iter().map(done));
        self.done.drain(..n);
        Ok(n)
    }
    fn in_flight(&self) -> usize {
        self.done.len()
    }
    /// Nothing is ever abandoned: every work request completes at once.
    fn abandon(&mut self, _peer: PeerId, _out: &mut Vec<u64>) {}
    /// Nobody answers on the null provider: peers count as up at once.
    fn handshakes(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every posted work request comes back once, in posting order, also
    /// across the queue's wrap (its two slices) and the 64-per-poll cap.
    #[test]
    fn completions_come_back_once_in_order_across_the_wrap() {
        let mut d =
            NullDomain { addr: Vec::new(), done: VecDeque::with_capacity(DEPTH), peers: HashMap::new(), next_key: 1 };
        let wr = |len| WriteWr {
            local: std::ptr::null(),
            len,
            desc: std::ptr::null_mut(),
            peer: 3,
            remote_addr: 0,
            key: 0,
            imm: None,
        };
        let (mut posted, mut seen, mut out) = (0u64, 0u64, Vec::new());
        let mut drain = |d: &mut NullDomain, seen: &mut u64| {
            out.clear();
            let n = d.poll(&mut out).unwrap();
            assert!(n == out.len() && n <= 64);
            for c in &out {
                let Completion::Done { token, peer, bytes } = *c else { panic!("not a write's completion") };
                assert_eq!((token, peer, bytes), (*seen, 3, *seen));
                *seen += 1;
            }
            n
        };
        for round in 0..200 {
            for _ in 0..(round * 37 % 150) {
                if matches!(d.post_write(&wr(posted as usize), posted).unwrap(), Post::Posted) {
                    posted += 1;
                }
            }
            drain(&mut d, &mut seen);
        }
        while drain(&mut d, &mut seen) > 0 {}
        assert_eq!((seen, d.in_flight()), (posted, 0));
        assert!(posted > 10_000);
    }
}
