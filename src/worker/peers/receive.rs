//! What a peer's engine messages do to its entry (`Peers::receive`): a
//! PING or PONG is the peer heard from (up, and its waiting requests may
//! go), a BYE its goodbye (`Peers::bye`); any message from an address an
//! entry of another epoch has is that engine restarted (stale).
use super::{BYE, Event, PING, PONG, Peers, State};
use crate::domain::Domain;
use crate::error::{Error, Status};
use crate::wire::NetAddr;
use std::time::Instant;

impl Peers {
    /// The engine's own messages (PING, PONG, BYE; FENCEs are the worker's:
    /// fence.rs) from `from`, as the protocol answers them.
    pub(in crate::worker) fn receive<D: Domain>(&mut self, domains: &mut [D], kind: u8, from: &NetAddr, now: Instant) {
        match kind {
            PING => {
                // A stranger's entry was added up by the worker (`Worker::new_peer`).
                let Some(p) = self.find(from) else { return };
                // Always answered, so that a peer re-adding us comes up; but a
                // peer we declared down stays down until `add_peer` here.
                if !matches!(self.get(p), State::Down(_)) {
                    self.heard(p, now);
                }
                self.send(domains, p, PONG);
            }
            PONG => {
                if let Some(p) = self.find(from).filter(|&p| !matches!(self.get(p), State::Down(_))) {
                    self.heard(p, now);
                }
            }
            BYE => {
                if let Some(p) = self.find(from) {
                    self.bye(p, now);
                }
                self.owe_ack(domains, from);
            }
            _ => {}
        }
    }

    /// A message came from `from` (with its engine's main address, if it
    /// said it): an entry at its address of another epoch is an engine that
    /// has restarted since.
    pub(in crate::worker) fn message_from(&mut self, from: &NetAddr, main: Option<NetAddr>) {
        self.stale_check(from);
        if let (Some(p), Some(m)) = (self.find(from), main) {
            self.list[p as usize].main = Some(m);
        }
    }

    fn stale_check(&mut self, from: &NetAddr) {
        let old: Vec<u32> = (0..self.list.len() as u32)
            .filter(|&p| {
                let q = &self.list[p as usize];
                q.addr.epoch != from.epoch && q.addr.same_place(from) && !matches!(q.state, State::Down(_))
            })
            .collect();
        for p in old {
            let e = Error::new(
                Status::Stale,
                format!(
                    "the engine at this address restarted (epoch {:#x}, now {:#x}): use its new address and descriptors",
                    self.list[p as usize].addr.epoch, from.epoch
                ),
            );
            self.down(p, e);
        }
    }

    /// Peer `p` answered: it is up, and requests waiting for it may go.
    fn heard(&mut self, p: u32, now: Instant) {
        let peer = &mut self.list[p as usize];
        if let (Some(e), State::Connecting | State::Checking) = (&peer.unfenced, &peer.state) {
            // Its own epoch answered, yet it has no liveness record: nothing
            // may be posted to it.
            let e = e.clone();
            return self.down(p, e);
        }
        peer.heard_at(now, self.recheck);
        if let State::Connecting | State::Checking = peer.state {
            if let State::Connecting = peer.state {
                self.events.push_back(Event::Up(p));
            }
            self.list[p as usize].state = State::Up;
            self.events.push_back(Event::Ready(p));
        }
    }
}
