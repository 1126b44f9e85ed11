//! Posting: each domain's queue of requests with units still to post
//! (`Requests::pending`) becomes work requests, up to `POST_BURST` per
//! domain per pass; a peer whose window is full lets the requests behind it
//! go first. Receive buffers, engine messages and fences go before them.
use super::request::Shape;
use super::stage::SEND_HEADER;
use super::token::Token;
use super::{POST_BURST, Worker};
use crate::domain::{Chan, Domain, Post, SendWr};
use crate::metrics::SUBMIT_TO_POST;

impl<D: Domain> Worker<D> {
    pub(super) fn post_all(&mut self) -> bool {
        // Receive buffers first, so that a peer's message always finds one.
        let mut busy = self.post_receives();
        busy |= self.post_engine_receives();
        busy |= self.post_fences();
        for d in 0..self.domains.len() {
            busy |= self.post_domain(d);
        }
        busy
    }

    fn post_domain(&mut self, d: usize) -> bool {
        let scratch_mr = self.requests.scratch_mr[d];
        let scratch = (self.requests.scratch.ptr as *const u8, &scratch_mr);
        let (mut posted, mut busy_peers) = (self.post_split_imms(d) as usize, 0);
        while posted < POST_BURST && busy_peers < self.requests.pending[d].len() {
            let Some(&(slot, epoch)) = self.requests.pending[d].front() else {
                break;
            };
            let a = match self.requests.slots.current(slot, epoch) {
                Some(a) if a.error.is_none() && a.next[d] < a.units => a,
                _ => {
                    self.requests.pending[d].pop_front();
                    continue;
                }
            };
            let k = a.next[d];
            let tok = Token::Request { slot, epoch }.encode();
            let entry = a.unit_peers.as_ref().map_or(a.peer, |u| u[k]);
            // Nothing goes to an engine whose liveness record says it is gone
            // (shm: a restarted process could sit at its pid; liveness.rs).
            if self.peers.gone(entry) {
                self.peer_gone(entry);
                continue;
            }
            let peer = self.peers.id(entry, d);
            let (res, bytes) = if let Shape::Send { msg, .. } = &a.req.shape {
                if a.stage.is_none() {
                    let Some(s) = self.requests.stage.stage(msg) else {
                        break;
                    };
                    a.stage = Some(s);
                }
                let buf = self.requests.stage.buf(a.stage.unwrap());
                let wr = SendWr {
                    chan: Chan::User,
                    peer,
                    buf,
                    len: msg.len() + SEND_HEADER,
                    desc: self.requests.stage.desc(),
                    ordered: false,
                };
                (self.domains[d].post_send(&wr, tok), msg.len())
            } else {
                let src = a.req.region.map(|i| &self.requests.regions.locals(i)[d]);
                let wr = a.req.write_wr(k, d, peer, src, scratch, &self.requests.dsts);
                let r = if wr.imm.is_some() && wr.len > self.domains[d].answer_free_limit() {
                    let (bytes, i) = self.requests.splits.start(&wr, Token::Request { slot, epoch });
                    let r = self.domains[d].post_write(&bytes, Token::Split(i).encode());
                    if !matches!(r, Ok(Post::Posted)) {
                        self.requests.splits.take(i);
                    }
                    r
                } else {
                    self.domains[d].post_write(&wr, tok)
                };
                (r, wr.len)
            };
            match res {
                Ok(Post::Posted) => {
                    self.tally.posted(d, peer, self.peers.address(entry).epoch, bytes);
                    if a.first_post.is_none() {
                        let now = self.pass.now;
                        a.first_post = Some(now);
                        if let Some(t) = a.req.submitted {
                            self.shared.stats.hists[SUBMIT_TO_POST].record_time(now.saturating_duration_since(t));
                        }
                    }
                    a.bytes += bytes as u64;
                    a.next[d] += a.step;
                    a.posted += 1;
                    a.outstanding += 1;
                    posted += 1;
                }
                Ok(Post::Again) => break,
                // Its peer's window is full: let the requests behind it go first.
                Ok(Post::Busy) => {
                    self.requests.pending[d].rotate_left(1);
                    busy_peers += 1;
                }
                Err(e) => {
                    self.requests.pending[d].pop_front();
                    self.end(slot, e);
                }
            }
        }
        posted > 0
    }
}
