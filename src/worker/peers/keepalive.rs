//! Keepalives and peer timeouts (`Peers::keepalive`, every tick): each
//! live peer is pinged every `keepalive_interval` (a peer in use at a
//! reusable address every half re-check window), and one silent for
//! `peer_timeout`, or whose liveness record says it is gone, is down.
use super::{Peers, State};
use crate::domain::Domain;
use crate::error::{Error, Status};
use std::time::Instant;

impl Peers {
    /// Keepalives and peer timeouts. True if a message went out.
    pub(in crate::worker) fn keepalive<D: Domain>(&mut self, domains: &mut [D], now: Instant) -> bool {
        if !self.handshakes {
            return false;
        }
        let mut busy = false;
        for p in 0..self.list.len() as u32 {
            let q = &self.list[p as usize];
            if let State::Down(_) = q.state {
                continue;
            }
            // shm: a dead peer is found here within a tick, not after peer_timeout.
            if self.gone(p) {
                self.down_gone(p);
                continue;
            }
            let silent = now.duration_since(q.last_heard);
            if silent >= self.timeout {
                let what = match q.state {
                    State::Connecting => "did not answer the handshake",
                    State::Checking => "did not answer a liveness check",
                    _ => "stopped answering keepalives",
                };
                self.down(p, Error::new(Status::PeerDown, format!("the peer {what} for {silent:?}")));
                continue;
            }
            // A peer in use at a reusable address is asked every half window,
            // so that its requests never wait for a re-check.
            let every = match self.recheck {
                Some(w) if now.duration_since(q.last_used) < w => w / 2,
                _ => self.keepalive,
            };
            if q.last_ping.is_none_or(|t| now.duration_since(t) >= every) {
                self.ping(domains, p, now);
                busy = true;
            }
        }
        busy
    }
}
