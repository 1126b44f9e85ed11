//! Split writes: on a domain whose provider completes a large write with an
//! immediate only once the target answers (`Domain::write_split_limit`;
//! shm on one endpoint, `FABRICLIB_SHM_SPLIT=always`, where one such write
//! waiting on a dead peer stalls every later one), a unit's bytes go first
//! as a plain write, and its immediate follows as a zero-byte write once
//! the bytes are complete — so
//! the immediate still means "landed", and nothing ever waits on a peer's
//! answer. The unit counts as one work request of its request throughout.
use super::Worker;
use super::token::Token;
use crate::completion::notify::shutdown_error;
use crate::domain::{Domain, Post, WriteWr};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;

#[derive(Default)]
pub(super) struct Splits {
    /// Per split whose bytes are on the wire: the immediate's work request
    /// and the token of the request it belongs to.
    table: Vec<Option<(WriteWr, Token)>>,
    free: Vec<u32>,
    /// Per domain: immediates whose bytes are complete, to be posted.
    ready: Vec<VecDeque<(WriteWr, Token)>>,
}

impl Splits {
    pub(super) fn new(domains: usize) -> Splits {
        Splits { ready: (0..domains).map(|_| VecDeque::new()).collect(), ..Default::default() }
    }

    /// Splits `wr` (of the request with token `token`): returns the bytes'
    /// work request and the split's index (post it with `Token::Split`).
    pub(super) fn start(&mut self, wr: &WriteWr, token: Token) -> (WriteWr, u32) {
        let i = self.free.pop().unwrap_or_else(|| {
            self.table.push(None);
            (self.table.len() - 1) as u32
        });
        self.table[i as usize] = Some((WriteWr { len: 0, ..*wr }, token));
        (WriteWr { imm: None, ..*wr }, i)
    }

    /// Forgets split `i` (its bytes failed, were abandoned or never posted);
    /// returns the request token it belonged to.
    pub(super) fn take(&mut self, i: u32) -> Token {
        let (_, token) = self.table[i as usize].take().expect("a split in flight");
        self.free.push(i);
        token
    }
}

impl<D: Domain> Worker<D> {
    /// Split `t`'s bytes are complete on domain `d`: its immediate goes next.
    pub(super) fn split_done(&mut self, d: usize, i: u32) {
        let (wr, token) = self.requests.splits.table[i as usize].take().expect("a split in flight");
        self.requests.splits.free.push(i);
        if self.shared.stop.load(Ordering::Acquire) {
            // Shutting down: nothing new is posted, and the immediate never went.
            return self.wr_done(token, Some(shutdown_error()));
        }
        self.requests.splits.ready[d].push_back((wr, token));
    }

    /// Posts domain `d`'s immediates whose bytes are complete (those of a
    /// request that has ended meanwhile are dropped). True if any went out.
    #[inline(always)]
    pub(super) fn post_split_imms(&mut self, d: usize) -> bool {
        // Every pass asks, twice per domain; splits are rare (FABRICLIB_SHM_SPLIT=always).
        if self.requests.splits.ready[d].is_empty() {
            return false;
        }
        self.post_ready_splits(d)
    }

    fn post_ready_splits(&mut self, d: usize) -> bool {
        let mut busy = false;
        while let Some(&(wr, token)) = self.requests.splits.ready[d].front() {
            let Some((slot, epoch)) = token.slot_epoch() else { unreachable!("split of {token:?}") };
            let live = self.requests.slots.current(slot, epoch).is_some_and(|a| a.error.is_none());
            let res = if live { self.domains[d].post_write(&wr, token.encode()) } else { Ok(Post::Posted) };
            match res {
                Ok(Post::Posted) if live => {
                    self.tally.posted_run(d, wr.peer, 0, 1, 0);
                    if let Some(p) = self.peers.by_id(d, wr.peer).filter(|_| self.pass.bell_peers) {
                        self.pass.posted_to.push(p);
                    }
                    busy = true
                }
                Ok(Post::Posted) => self.wr_done(token, None),
                Ok(_) => break,
                Err(e) => self.wr_done(token, Some(e)),
            }
            self.requests.splits.ready[d].pop_front();
        }
        busy
    }
}
