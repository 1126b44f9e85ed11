//! Control commands from the API (register, expectations, receive pools,
//! peer sets, cancel, peers): rare, each answered on its own channel.
use super::ending::canceled;
use super::request::Ctrl;
use super::timers::Timer;
use super::{Worker, release};
use crate::domain::Domain;
use crate::error::{Error, Result, Status};

impl<D: Domain> Worker<D> {
    /// Accepts every request still in the submission queue (so that a
    /// cancel finds the requests submitted before it).
    pub(super) fn accept_queued(&mut self) {
        while let Some(s) = self.shared.data.pop() {
            self.accept_all(s);
        }
    }

    pub(super) fn control(&mut self, c: Ctrl) {
        match c {
            Ctrl::ImmArrived { counts } => {
                for (imm, n) in counts {
                    self.imm.arrived(imm, &self.notifier, n);
                }
            }
            Ctrl::Register { ptr, len, mem, reply } => {
                let mut locals = Vec::new();
                for d in self.domains.iter_mut() {
                    match d.register(ptr as *mut u8, len, mem) {
                        Ok(m) => locals.push(m),
                        Err(e) => {
                            release(&mut self.domains, &locals);
                            let _ = reply.send(Err(e));
                            return;
                        }
                    }
                }
                let index = self.requests.regions.add(locals.clone());
                let _ = reply.send(Ok((index, locals)));
            }
            Ctrl::Deregister { index } => {
                // Requests submitted before the handle went take the region first.
                self.accept_queued();
                if let Some(locals) = self.requests.regions.dropped(index) {
                    release(&mut self.domains, &locals);
                }
            }
            Ctrl::Expect { imm, count, done, id, timeout, reply } => {
                let r = self.imm.expect(imm, count, done, id, &self.notifier);
                if let (Ok(()), Some(t)) = (&r, timeout) {
                    let now = self.pass.now();
                    self.pass.timers.add(now + t, Timer::Expect { imm, id }, false);
                }
                let _ = reply.send(r);
            }
            Ctrl::RecvPool { len, count, cb, on_worker, reply } => {
                let _ = reply.send(self.add_pool(len, count, cb, on_worker));
            }
            Ctrl::RemoveRecvPool { id, reply } => {
                let _ = reply.send(self.remove_pool(id));
            }
            Ctrl::Repost { pool, index } => self.returned(pool, index),
            Ctrl::AddPeerSet { addrs, reply } => {
                let members: Result<Vec<u32>> = addrs.iter().map(|a| self.peer_of(a)).collect();
                let _ = reply.send(members.map(|m| {
                    self.peer_sets.push(Some(m.into()));
                    self.peer_sets.len() as u64
                }));
            }
            Ctrl::RemovePeerSet { id, reply } => {
                // Ids are never reused: the slot stays, empty.
                if let Some(s) = self.peer_sets.get_mut(id as usize - 1) {
                    *s = None;
                }
                let _ = reply.send(Ok(()));
            }
            Ctrl::Cancel { id, reply } => {
                self.accept_queued();
                // (A bundle's id is its first member's: members are canceled alone, below.)
                let found = self.requests.slots.find(|a| a.req.id == id && a.error.is_none() && !a.req.has_member(id));
                let r = if let Some(&s) = found.first() {
                    self.end(s, canceled());
                    Ok(())
                } else if let Some(r) = self.cancel_member(id) {
                    r
                } else if let Some(imm) = self.imm.find(id) {
                    self.imm.expire(imm, id, canceled(), &self.notifier);
                    Ok(())
                } else {
                    Err(Error::new(Status::NotFound, format!("request {id} has already ended (or never existed)")))
                };
                let _ = reply.send(r);
            }
            Ctrl::CancelPeer { engine, reply } => {
                self.accept_queued();
                let mut n = 0;
                for p in self.peers.of_engine(engine) {
                    n += self.end_all(p, || Error::new(Status::Canceled, "canceled with every request to its peer"));
                }
                let _ = reply.send(Ok(n));
            }
            Ctrl::RemovePeer { engine, reply } => {
                let _ = reply.send(Ok(self.remove_peer(engine)));
            }
            Ctrl::AddPeer { addr, reply } => {
                let _ = reply.send(self.add_peer(&addr));
            }
            Ctrl::MirrorImm { imm, word, reply } => {
                self.imm.mirror(imm, word);
                let _ = reply.send(Ok(()));
            }
            Ctrl::ImmCount { imm, reset, reply } => {
                let _ = reply.send(Ok(self.imm.read(imm, reset)));
            }
            Ctrl::PeerState { engine, reply } => {
                let states = self.peers.of_engine(engine).into_iter().map(|p| self.peers.state(p));
                let _ = reply.send(Ok(crate::completion::peer_state::combine(states)));
            }
        }
    }
}
