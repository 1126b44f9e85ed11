//! The verbs domain's work requests in flight: the op table (whose each
//! is, to whom, how many bytes), the per-peer window, and the lanes that
//! make unsignaled completions safe.
//!
//! A lane is one queue pair's send queue in posting order. Only the last
//! work request of a chain is signaled (`chain.rs`); an RC send queue
//! completes in order, so a completion on a lane — signaled, or an error,
//! which is always reported, flushes included — means every op posted on
//! that lane before it completed successfully without a completion of its
//! own: `retire` hands those back as done. An op never waits for a
//! completion that cannot come: each chain ends signaled, and a chain
//! refused part way is closed with a signaled zero-byte write, a cover
//! (`cover`), whose completion retires what was posted before it.
use crate::domain::{PeerId, Post};
use std::collections::VecDeque;

/// The peer of a receive.
pub(super) const NO_PEER: PeerId = u64::MAX;
/// A cover's place in its lane.
const COVER: u32 = u32::MAX;
const NO_LANE: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Busy,
    /// Its peer was given up: its late completion is swallowed.
    Abandoned,
}

#[derive(Clone, Copy)]
struct Op {
    token: u64,
    peer: PeerId,
    bytes: u64,
    state: State,
    /// Its peer's queue pair generation when it was posted.
    era: u32,
    lane: u32,
}

/// What an op was: its token, peer and bytes.
pub(super) type Taken = (u64, PeerId, u64);

pub(super) struct Ops {
    ops: Vec<Op>,
    free: Vec<u32>,
    busy: usize,
    depth: usize,
    per_peer: Vec<u32>,
    window: u32,
    lanes: Vec<VecDeque<u32>>,
}

impl Ops {
    /// At most `depth` ops in flight, `window` per peer.
    pub fn new(depth: usize, window: u32) -> Ops {
        Ops {
            ops: Vec::with_capacity(depth),
            free: Vec::new(),
            busy: 0,
            depth,
            per_peer: Vec::new(),
            window,
            lanes: Vec::new(),
        }
    }

    pub fn window(&self) -> u32 {
        self.window
    }

    /// Ops in flight, abandoned ones not counted.
    pub fn busy(&self) -> usize {
        self.busy
    }

    /// Room in the window for a peer just added (its id is the next).
    pub fn add_peer(&mut self) {
        self.per_peer.push(0);
    }

    /// A lane for a new queue pair. Lanes are never reused: a replaced
    /// queue pair's flushed completions still arrive on its own.
    pub fn new_lane(&mut self) -> u32 {
        self.lanes.push(VecDeque::new());
        (self.lanes.len() - 1) as u32
    }

    /// An op for `token` (to `peer`, or `NO_PEER` for a receive), or why not.
    pub fn take(&mut self, token: u64, peer: PeerId, bytes: u64) -> Result<u32, Post> {
        if self.busy >= self.depth {
            return Err(Post::Again);
        }
        if peer != NO_PEER {
            let p = peer as usize;
            if self.per_peer[p] >= self.window {
                return Err(Post::Busy);
            }
            self.per_peer[p] += 1;
        }
        let op = Op { token, peer, bytes, state: State::Busy, era: 0, lane: NO_LANE };
        let i = match self.free.pop() {
            Some(i) => {
                self.ops[i as usize] = op;
                i
            }
            None => {
                self.ops.push(op);
                (self.ops.len() - 1) as u32
            }
        };
        self.busy += 1;
        Ok(i)
    }

    /// Frees op `i`: what it was, unless it was abandoned (or is free).
    pub fn release(&mut self, i: u32) -> Option<Taken> {
        let op = *self.ops.get(i as usize)?;
        if op.state == State::Free {
            return None;
        }
        self.ops[i as usize].state = State::Free;
        self.free.push(i);
        if op.state == State::Abandoned {
            return None;
        }
        self.busy -= 1;
        if op.peer != NO_PEER {
            self.per_peer[op.peer as usize] -= 1;
        }
        Some((op.token, op.peer, op.bytes))
    }

    /// Op `i` goes out on `lane`, on its peer's queue pairs of generation `era`.
    pub fn posted(&mut self, i: u32, lane: u32, era: u32) {
        let op = &mut self.ops[i as usize];
        (op.lane, op.era) = (lane, era);
        self.lanes[lane as usize].push_back(i);
    }

    /// Op `i` was not posted after all (its chain was refused from it on).
    pub fn unposted(&mut self, i: u32) {
        let lane = self.ops[i as usize].lane;
        if let Some(l) = self.lanes.get_mut(lane as usize) {
            if l.back() == Some(&i) {
                l.pop_back();
            }
        }
    }

    /// A cover posted on `lane` (see the module doc).
    pub fn cover(&mut self, lane: u32) {
        self.lanes[lane as usize].push_back(COVER);
    }

    pub fn era(&self, i: u32) -> u32 {
        self.ops[i as usize].era
    }

    /// A completion came for op `i`: the ops before it on its lane completed
    /// unsignaled, successfully; each is released and handed to `done`
    /// (abandoned ones only released). `i` itself leaves the lane; the
    /// caller releases it.
    pub fn retire(&mut self, i: u32, done: impl FnMut(Taken)) {
        let Some(op) = self.ops.get(i as usize) else { return };
        if op.state != State::Free && op.lane != NO_LANE {
            self.retire_to(op.lane, i, done);
        }
    }

    /// A cover's completion on `lane`: as `retire`, up to the cover.
    pub fn retire_cover(&mut self, lane: u32, done: impl FnMut(Taken)) {
        if (lane as usize) < self.lanes.len() {
            self.retire_to(lane, COVER, done);
        }
    }

    fn retire_to(&mut self, lane: u32, until: u32, mut done: impl FnMut(Taken)) {
        // An RC send queue completes in order: what is ahead of `until`
        // completed before it (see the module doc).
        debug_assert!(self.lanes[lane as usize].contains(&until), "a completion for work not on its lane");
        while let Some(j) = self.lanes[lane as usize].pop_front() {
            if j == until {
                break;
            }
            if j != COVER {
                if let Some(t) = self.release(j) {
                    done(t);
                }
            }
        }
    }

    /// Gives up the ops on the wire to `peer`: each token goes to `out`, its
    /// completion (when it comes) is swallowed.
    pub fn abandon(&mut self, peer: PeerId, out: &mut Vec<u64>) {
        for op in self.ops.iter_mut().filter(|o| o.state == State::Busy && o.peer == peer) {
            op.state = State::Abandoned;
            self.busy -= 1;
            self.per_peer[peer as usize] -= 1;
            out.push(op.token);
        }
    }

    /// Reports op `i` as failed now, though it is on the wire: it stays
    /// abandoned until a completion for it, if any, comes.
    pub fn give_up(&mut self, i: u32) -> Option<Taken> {
        let op = self.ops[i as usize];
        if op.state != State::Busy {
            return None;
        }
        self.ops[i as usize].state = State::Abandoned;
        self.busy -= 1;
        if op.peer != NO_PEER {
            self.per_peer[op.peer as usize] -= 1;
        }
        Some((op.token, op.peer, op.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(ops: &mut Ops, f: impl FnOnce(&mut Ops, &mut dyn FnMut(Taken))) -> Vec<u64> {
        let mut v = Vec::new();
        f(ops, &mut |(token, ..)| v.push(token));
        v
    }

    /// Ops 0..n to peer 0 posted on one lane, as one chain would be.
    fn chain(n: u64) -> (Ops, u32, Vec<u32>) {
        let mut ops = Ops::new(64, 16);
        ops.add_peer();
        let lane = ops.new_lane();
        let ids: Vec<u32> = (0..n).map(|t| ops.take(t, 0, 1).ok().unwrap()).collect();
        for &i in &ids {
            ops.posted(i, lane, 0);
        }
        (ops, lane, ids)
    }

    #[test]
    fn the_signaled_last_completes_the_unsignaled_before_it() {
        let (mut ops, _, ids) = chain(4);
        let before = done(&mut ops, |o, f| o.retire(ids[3], f));
        assert_eq!(before, [0, 1, 2]);
        assert_eq!(ops.release(ids[3]).map(|t| t.0), Some(3));
        assert_eq!(ops.busy(), 0);
        // Every op is free again, the window too.
        assert!((0..16).all(|t| ops.take(t, 0, 1).is_ok()));
        assert_eq!(ops.take(99, 0, 1), Err(Post::Busy));
    }

    #[test]
    fn an_error_completes_those_before_it_and_the_flushes_name_themselves() {
        let (mut ops, _, ids) = chain(4);
        // Op 1 fails: op 0 succeeded without a completion of its own.
        assert_eq!(done(&mut ops, |o, f| o.retire(ids[1], f)), [0]);
        ops.release(ids[1]);
        // Ops 2 and 3 are flushed, each reported: nothing more ahead of them.
        assert!(done(&mut ops, |o, f| o.retire(ids[2], f)).is_empty());
        ops.release(ids[2]);
        assert!(done(&mut ops, |o, f| o.retire(ids[3], f)).is_empty());
        ops.release(ids[3]);
        assert_eq!(ops.busy(), 0);
    }

    #[test]
    fn lanes_are_apart() {
        let (mut ops, _, ids) = chain(2);
        let other = ops.new_lane();
        let x = ops.take(7, 0, 1).ok().unwrap();
        ops.posted(x, other, 0);
        assert!(done(&mut ops, |o, f| o.retire(x, f)).is_empty());
        ops.release(x);
        assert_eq!(done(&mut ops, |o, f| o.retire(ids[1], f)), [0]);
    }

    #[test]
    fn a_cover_completes_a_refused_chains_prefix() {
        let (mut ops, lane, ids) = chain(4);
        // Ops 2 and 3 were refused: unposted (newest first), released.
        for &i in ids[2..].iter().rev() {
            ops.unposted(i);
            ops.release(i);
        }
        ops.cover(lane);
        assert_eq!(done(&mut ops, |o, f| o.retire_cover(lane, f)), [0, 1]);
        assert_eq!(ops.busy(), 0);
    }

    #[test]
    fn abandoned_and_given_up_ops_are_freed_silently_by_later_completions() {
        let (mut ops, lane, ids) = chain(3);
        let mut tokens = Vec::new();
        ops.abandon(0, &mut tokens);
        assert_eq!(tokens, [0, 1, 2]);
        assert_eq!(ops.busy(), 0);
        assert!(done(&mut ops, |o, f| o.retire(ids[2], f)).is_empty());
        assert_eq!(ops.release(ids[2]), None);
        // A given-up op is reported once, then freed by whatever completes after it.
        let y = ops.take(5, 0, 1).ok().unwrap();
        ops.posted(y, lane, 0);
        assert_eq!(ops.give_up(y).map(|t| t.0), Some(5));
        assert_eq!(ops.give_up(y), None);
        let z = ops.take(6, 0, 1).ok().unwrap();
        ops.posted(z, lane, 0);
        assert!(done(&mut ops, |o, f| o.retire(z, f)).is_empty());
        assert_eq!(ops.release(z).map(|t| t.0), Some(6));
        assert_eq!(ops.busy(), 0);
        assert_eq!(ops.ops.len() - ops.free.len(), 0, "every slot free again");
    }
}
