//! The engine's own message channel (`Chan::Engine`, tagged, apart from the
//! application's sends): its buffers, registered in every domain, and how a
//! message is put together, posted, received and taken apart. What the
//! messages mean — handshake, keepalive, goodbye, delivery fences — is the
//! peers' protocol (peers.rs, fence.rs).
//!
//! A message is `"FLK" kind:u8 [tag:u64] sender-address` (the address as
//! `NetAddr::to_bytes`; a tag, marked by kind bit 0x40, where the protocol
//! gives one: FENCE and FENCE_ACK), or, from a group
//! other than its engine's first, `"FLK" (kind | 0x80) [tag] len:u16
//! sender-address main-address` (the engine's main address, so that peers can
//! tell the application about the engine by the address it knows). Messages
//! go domain d to domain d: 0 for the protocol, every domain for fences.
use super::peers::NO_ENTRY;
use super::recv::OwnedMem;
use super::token::Token;
use crate::domain::{Chan, Domain, LocalMr, Memory, PeerId, Post, SendWr};
use crate::error::Result;
use crate::wire::NetAddr;
use std::sync::Arc;

/// One engine message at most (an 8-domain address with 256-byte names fits).
const MSG: usize = 4096;
/// Engine-channel buffers: receives per domain, and sends in all.
const SLOTS: usize = 32;
/// The kind bit of a message that carries the sender engine's main address.
const WITH_MAIN: u8 = 0x80;
/// The kind bit of a message that carries a tag.
const WITH_TAG: u8 = 0x40;

/// A message taken from a receive buffer.
pub(super) struct Message {
    /// The domain it came through.
    pub(super) domain: usize,
    pub(super) kind: u8,
    /// Its tag, if the protocol gave it one (FENCE, FENCE_ACK); else 0.
    pub(super) tag: u64,
    pub(super) from: NetAddr,
    /// The sender engine's main address, from a group other than its first.
    pub(super) main: Option<NetAddr>,
}

/// The engine channel's buffers.
pub(super) struct Mailbox {
    /// This group's address as messages carry it (with the engine's main
    /// address, for a group other than the first: `with_main`).
    me: Vec<u8>,
    with_main: bool,
    /// `SLOTS` receive buffers per domain: buffer `i` is domain `i / SLOTS`'s.
    recv: Arc<OwnedMem>,
    /// The receive and send buffers' registrations, one per domain.
    recv_mr: Vec<LocalMr>,
    /// Receive buffers to post (again).
    repost: Vec<u32>,
    send: Arc<OwnedMem>,
    send_mr: Vec<LocalMr>,
    /// Send slots not on the wire.
    send_free: Vec<u32>,
    /// The entries messages went to in this pass, for the worker to ring
    /// their doorbells where they have one (bell.rs).
    pub(super) posted_to: Vec<u32>,
}

impl Mailbox {
    /// The buffers of a group whose address is `me` (and whose engine's main
    /// address is `main`, for a group other than the first), registered in
    /// every domain.
    pub(super) fn new<D: Domain>(domains: &mut [D], me: &NetAddr, main: Option<&NetAddr>) -> Result<Mailbox> {
        let mine = me.to_bytes();
        // With the main address when it fits in one message (it always
        // does but for 8-NIC groups with very long provider addresses).
        let (me, with_main) = match main.map(|m| m.to_bytes()) {
            Some(m) if 14 + mine.len() + m.len() <= MSG => {
                let mut b = (mine.len() as u16).to_le_bytes().to_vec();
                b.extend_from_slice(&mine);
                b.extend_from_slice(&m);
                (b, true)
            }
            _ => (mine, false),
        };
        let recv = OwnedMem::new(MSG * SLOTS * domains.len());
        let send = OwnedMem::new(MSG * SLOTS);
        let recv_mr = register_all(domains, &recv)?;
        let send_mr = match register_all(domains, &send) {
            Ok(m) => m,
            Err(e) => {
                super::release(domains, &recv_mr);
                return Err(e);
            }
        };
        let repost = (0..(SLOTS * domains.len()) as u32).collect();
        let send_free = (0..SLOTS as u32).collect();
        Ok(Mailbox { me, with_main, recv, recv_mr, repost, send, send_mr, send_free, posted_to: Vec::new() })
    }

    /// Messages still on the wire.
    pub(super) fn sending(&self) -> bool {
        self.send_free.len() < SLOTS
    }

    /// Send slot `slot` came back (completed, failed or abandoned).
    pub(super) fn sent(&mut self, slot: u16) {
        self.send_free.push(slot as u32);
    }

    pub(super) fn close<D: Domain>(&self, domains: &mut [D]) {
        super::release(domains, &self.recv_mr);
        super::release(domains, &self.send_mr);
    }

    /// Posts message `kind` (with `tag`: FENCE, FENCE_ACK) through `domain`,
    /// number `d`, to its peer `id`; `p` is the peer entry the completion
    /// names (`NO_ENTRY` for an engine not in the table). False if it could
    /// not be posted now.
    pub(super) fn post<D: Domain>(
        &mut self,
        domain: &mut D,
        d: usize,
        id: PeerId,
        p: u32,
        kind: u8,
        tag: Option<u64>,
    ) -> bool {
        let Some(slot) = self.send_free.pop() else {
            return false;
        };
        let head = 4 + tag.map_or(0, |_| 8);
        let len = head + self.me.len();
        // A FENCE must arrive after the writes before it; nothing else waits for them.
        let ordered = kind == super::peers::FENCE;
        let kind = kind | if self.with_main { WITH_MAIN } else { 0 } | if tag.is_some() { WITH_TAG } else { 0 };
        // SAFETY: slot `slot` of the send buffer is ours until its completion; len <= MSG.
        let buf = unsafe {
            let b = self.send.ptr.add(slot as usize * MSG);
            std::ptr::copy_nonoverlapping([b'F', b'L', b'K', kind].as_ptr(), b, 4);
            if let Some(t) = tag {
                std::ptr::copy_nonoverlapping(t.to_le_bytes().as_ptr(), b.add(4), 8);
            }
            std::ptr::copy_nonoverlapping(self.me.as_ptr(), b.add(head), len - head);
            b
        };
        let token = Token::EngineSend { peer: p, slot: slot as u16 }.encode();
        let wr = SendWr { chan: Chan::Engine, peer: id, buf, len, desc: self.send_mr[d].desc, ordered, data: None };
        match domain.post_send(&wr, token) {
            Ok(Post::Posted) => {
                if p != NO_ENTRY {
                    self.posted_to.push(p);
                }
                true
            }
            _ => {
                self.send_free.push(slot);
                false
            }
        }
    }

    /// Receive buffers not posted again yet (the provider's queue was full).
    pub(super) fn reposts_left(&self) -> bool {
        !self.repost.is_empty()
    }

    /// Posts the receive buffers waiting to be (re)posted. True if any went.
    pub(super) fn post_receives<D: Domain>(&mut self, domains: &mut [D]) -> bool {
        let mut busy = false;
        while let Some(&i) = self.repost.last() {
            let d = i as usize / SLOTS;
            // SAFETY: slot i lies inside the receive buffer.
            let buf = unsafe { self.recv.ptr.add(i as usize * MSG) };
            let token = Token::EngineRecv(i).encode();
            match domains[d].post_recv(Chan::Engine, buf, MSG, self.recv_mr[d].desc, token) {
                Ok(Post::Posted) => {
                    self.repost.pop();
                    busy = true;
                }
                _ => break,
            }
        }
        busy
    }

    /// The message of `len` bytes in receive buffer `i` (`None`: the
    /// receive failed), if it is a well-formed one; the buffer is posted
    /// again either way. Garbage from a stranger is ignored.
    pub(super) fn take(&mut self, i: u32, len: Option<usize>) -> Option<Message> {
        let msg = len.filter(|&len| len > 4 && len <= MSG).map(|len| {
            // SAFETY: the provider wrote len bytes into slot i, ours until reposted below.
            unsafe { std::slice::from_raw_parts(self.recv.ptr.add(i as usize * MSG), len) }.to_vec()
        });
        self.repost.push(i);
        let msg = msg?;
        if &msg[..3] != b"FLK" {
            return None;
        }
        let (kind, tag, from, main) = parse(&msg[3..])?;
        Some(Message { domain: i as usize / SLOTS, kind, tag, from, main })
    }
}

/// A message after `"FLK"`: its kind, its tag (0 if it has none),
/// the sender's address and, from another group than its engine's first,
/// the engine's main address.
fn parse(m: &[u8]) -> Option<(u8, u64, NetAddr, Option<NetAddr>)> {
    let (&kind, rest) = m.split_first()?;
    let (with_main, with_tag, kind) = (kind & WITH_MAIN != 0, kind & WITH_TAG != 0, kind & !(WITH_MAIN | WITH_TAG));
    let (tag, rest) = match with_tag {
        true => (u64::from_le_bytes(rest.get(..8)?.try_into().ok()?), &rest[8..]),
        false => (0, rest),
    };
    if !with_main {
        return Some((kind, tag, NetAddr::parse(rest).ok()?, None));
    }
    let n = u16::from_le_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let from = NetAddr::parse(rest.get(2..2 + n)?).ok()?;
    let main = NetAddr::parse(rest.get(2 + n..)?).ok();
    Some((kind, tag, from, main))
}

/// Registers `mem` in every domain (undone if one refuses).
fn register_all<D: Domain>(domains: &mut [D], mem: &OwnedMem) -> Result<Vec<LocalMr>> {
    let mut out = Vec::with_capacity(domains.len());
    for d in 0..domains.len() {
        match domains[d].register(mem.ptr, mem.len, Memory::Host) {
            Ok(m) => out.push(m),
            Err(e) => {
                super::release(domains, &out);
                return Err(e);
            }
        }
    }
    Ok(out)
}
