//! The verbs domain's posting path: work to a peer goes out at once or
//! waits in its backlog while the peer connects; what goes out waits in
//! `doorbell` and is rung as chains, one `ibv_post_send` per run of work to
//! one queue pair (chain.rs); a refused chain fails what it did not post and
//! covers what it did.
use super::*;

impl VerbsDomain {
    /// Whether work to peer `p` goes out now (else it waits in its backlog).
    fn ready_to_post(&mut self, p: PeerId) -> Result<bool> {
        match self.peers[p as usize].state {
            State::Up => Ok(true),
            State::Connecting { .. } => Ok(false),
            State::Broken => self.rebuild(p).map(|_| false),
        }
    }

    /// Takes an op for `work` and posts it, or queues it while its peer
    /// connects.
    pub(super) fn post_work(&mut self, work: Work, token: u64) -> Result<Post> {
        let (peer, len) = work.target();
        let op = match self.ops.take(token, peer, len as u64) {
            Ok(op) => op,
            Err(p) => return Ok(p),
        };
        match self.ready_to_post(peer) {
            Ok(true) => {}
            Ok(false) => {
                self.peers[peer as usize].backlog.push_back((work, op));
                return Ok(Post::Posted);
            }
            Err(e) => {
                self.release(op);
                return Err(e);
            }
        }
        self.post_now(&work, op);
        Ok(Post::Posted)
    }

    /// Queues `work` (op `op`, its peer connected) for the next doorbell
    /// (`ring`: at the start and end of every poll, or once `CHAIN` wait).
    pub(super) fn post_now(&mut self, work: &Work, op: u32) {
        self.doorbell.push((*work, op));
        if self.doorbell.len() >= CHAIN {
            self.ring();
        }
    }

    /// Posts the work waiting for a doorbell: each run of consecutive work
    /// to one queue pair (`Work::route`) as one chain, one `ibv_post_send`;
    /// every source is registered memory the worker keeps until
    /// the completion. A chain refused from some work request on fails that
    /// one and those after it. True if anything was posted.
    pub(super) fn ring(&mut self) -> bool {
        if self.doorbell.is_empty() {
            return false;
        }
        let mut batch = std::mem::take(&mut self.doorbell);
        let mut start = 0;
        while start < batch.len() {
            let k = batch[start].0.route();
            let end = start + batch[start..].iter().take_while(|(w, _)| w.route() == k).count();
            self.post_chain(k, &batch[start..end]);
            start = end;
        }
        // Nothing posts while ringing: the vector (and its allocation) goes back.
        batch.clear();
        self.doorbell = batch;
        true
    }

    /// Posts `run`, all to peer `p`'s queue pair `q`, as one chain.
    fn post_chain(&mut self, (p, q): (PeerId, Q), run: &[(Work, u32)]) {
        let peer = &self.peers[p as usize];
        let lane = peer.qps[q as usize].lane;
        for (work, op) in run {
            self.ops.posted(*op, lane, peer.era);
            self.chain.push(&match work {
                Work::Write(w) => Wr {
                    wr_id: K_OP | *op as u64,
                    opcode: if w.imm.is_some() { IBV_WR_RDMA_WRITE_WITH_IMM } else { IBV_WR_RDMA_WRITE },
                    local: (w.local as u64, w.len as u32, w.desc as usize as u32),
                    remote: (w.remote_addr, w.key as u32),
                    imm_be: w.imm.unwrap_or(0).to_be(),
                },
                Work::Send(s) => Wr {
                    wr_id: K_OP | *op as u64,
                    opcode: IBV_WR_SEND,
                    local: (s.buf as u64, s.len as u32, s.desc as usize as u32),
                    remote: (0, 0),
                    imm_be: 0,
                },
            });
        }
        let qp = &peer.qps[q as usize].qp;
        let head = self.chain.finish();
        // SAFETY: the chain lives until the call returns; every source is
        // registered memory the worker keeps until the completion.
        let refused = unsafe { qp.post_send(head) }.err();
        let first = refused.map_or(run.len(), |(_, bad)| self.chain.index_of(bad));
        self.chain.clear();
        if let Some((rc, _)) = refused {
            self.refused(lane, run, first, rc);
        }
    }

    /// A chain refused from `run[first]` on: that and what follows failed,
    /// not posted; what went before it ends unsignaled, so a cover (a
    /// signaled zero-byte write) follows it — or, if even that is refused,
    /// it is reported failed now.
    #[cold]
    fn refused(&mut self, lane: u32, run: &[(Work, u32)], first: usize, rc: i32) {
        for (_, op) in run[first..].iter().rev() {
            self.ops.unposted(*op);
            if let Some((token, peer, _)) = self.release(*op) {
                self.ready.push_back(Completion::Failed { token, peer, error: posting_error("post", rc) });
            }
        }
        if first == 0 {
            return;
        }
        let (p, q) = run[0].0.route();
        let qp = &self.peers[p as usize].qps[q as usize].qp;
        self.chain.push(&Wr {
            wr_id: K_COVER | lane as u64,
            opcode: IBV_WR_RDMA_WRITE,
            local: (0, 0, 0),
            remote: (0, 0),
            imm_be: 0,
        });
        let head = self.chain.finish();
        // SAFETY: a zero-byte write names no memory.
        let covered = unsafe { qp.post_send(head) }.is_ok();
        self.chain.clear();
        if covered {
            self.ops.cover(lane);
            return;
        }
        for (_, op) in &run[..first] {
            if let Some((token, peer, _)) = self.ops.give_up(*op) {
                let error = posting_error("post (what was posted before a refused work request)", rc);
                self.ready.push_back(Completion::Failed { token, peer, error });
            }
        }
    }
}
