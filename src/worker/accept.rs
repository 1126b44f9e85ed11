//! How a request enters the worker: what it names is taken (its source
//! region, its destinations, their peers: `take_refs`), it gets a slot and
//! a deadline, and once its peers are up its units are queued on the
//! domains (`admit`). `put_refs` gives the references back when it ends.
use super::held::{self, Dsts, Regions};
use super::request::{Request, Shape, Submission};
use super::timers::Timer;
use super::{Worker, bundle, release};
use crate::domain::Domain;
use crate::error::Result;
use std::sync::Arc;

/// `Worker::put_refs`, on the worker's fields.
pub(super) fn put_refs<D: Domain>(regions: &mut Regions, dsts: &mut Dsts, domains: &mut [D], req: &Request, n: usize) {
    if let Some(i) = req.region {
        if let Some(locals) = regions.put(i) {
            release(domains, &locals);
        }
    }
    match &req.shape {
        // One destination (the common case: no loop, no second match).
        Shape::Single { dst, .. } if n > 0 => dsts.put(dst),
        Shape::Bundle(b) => b.members[..n].iter().filter(|m| m.holds).for_each(|m| dsts.put(&m.dst)),
        _ => (0..n).for_each(|j| dsts.put(req.dst(j))),
    }
}

impl<D: Domain> Worker<D> {
    /// What a request names, taken for as long as it is in the worker: its
    /// source region and destinations (held.rs), and the peers it goes to
    /// (indices into the peer table, added and greeted if new).
    pub(super) fn take_refs(&mut self, req: &mut Request) -> Result<(u32, Option<Arc<[u32]>>)> {
        if let Shape::Send { to, .. } = &req.shape {
            return Ok((self.peer_of(to)?, None));
        }
        if let Shape::Connect { to } = &req.shape {
            self.add_peer(to)?;
            return Ok((self.peer_of(to)?, None));
        }
        if let Some(i) = req.region {
            self.requests.regions.take(i)?;
        }
        if matches!(req.shape, Shape::Bundle(_)) {
            return self.take_members(req);
        }
        if !req.multi_dst() {
            // One destination (a single or paged write).
            return match self.take_dst(req.dst_mut(0)) {
                Ok(p) => Ok((p, None)),
                Err(e) => {
                    self.put_refs(req, 0);
                    Err(e)
                }
            };
        }
        // Peers per unit: for a scatter or barrier without a peer set.
        let per_unit = req.peer_set().is_none();
        let n = req.dst_count();
        let mut peers = Vec::with_capacity(if per_unit { n } else { 0 });
        for j in 0..n {
            match self.take_dst(req.dst_mut(j)) {
                Ok(p) if per_unit => peers.push(p),
                Ok(_) => {}
                Err(e) => {
                    self.put_refs(req, j);
                    return Err(e);
                }
            }
        }
        if let Some(g) = req.peer_set() {
            return match self.peer_sets.get(g as usize - 1).cloned().flatten() {
                Some(members) => Ok((u32::MAX, Some(members))),
                None => {
                    self.put_refs(req, req.dst_count());
                    Err(crate::Error::new(
                        crate::Status::BadHandle,
                        format!("peer set {g} was removed before this request started"),
                    ))
                }
            };
        }
        Ok((u32::MAX, Some(peers.into())))
    }

    /// Destination `dst`, taken for a request (held.rs): the peer entry of
    /// its owner, added and greeted if new.
    pub(super) fn take_dst(&mut self, dst: &mut held::Dst) -> Result<u32> {
        match self.requests.dsts.take(dst) {
            Some(Ok(held::UNLINKED)) => {
                // Its owner was removed (`remove_peer`): looked up afresh.
                let owner = self.requests.dsts.get(dst).owner.clone();
                let p = self.peer_of(&owner);
                match p {
                    Ok(p) => self.requests.dsts.relink(dst, p),
                    Err(_) => self.requests.dsts.put(dst),
                }
                p
            }
            Some(p) => p,
            None => {
                let held::Dst::Owned(d) = &*dst else { unreachable!("the table has every held descriptor") };
                let p = self.peer_of(&d.owner);
                if let Ok(p) = p {
                    self.requests.dsts.add(dst, p);
                }
                p
            }
        }
    }

    /// Gives back what `take_refs` took for `req`: its region and its first
    /// `dsts` destinations.
    pub(super) fn put_refs(&mut self, req: &Request, dsts: usize) {
        put_refs(&mut self.requests.regions, &mut self.requests.dsts, &mut self.domains, req, dsts);
    }

    /// Takes what one slot of the submission queue holds, in submit order.
    #[inline(always)]
    pub(super) fn accept_all(&mut self, s: Submission) {
        match s {
            Submission::One(r) => self.accept(r),
            Submission::Batch(rs) => rs.into_iter().for_each(|r| self.accept(r)),
        }
    }

    /// Takes a new request: finds its peers and queues its units on the
    /// domains (or parks it until its peers have answered the handshake).
    pub(super) fn accept(&mut self, mut req: Request) {
        self.shared.stats.started[req.kind()].add(req.reports() as u64);
        if let Shape::Bundle(b) = &mut req.shape {
            bundle::own(&mut self.requests.member_lists, &self.shared.spare_members, b);
        }
        let (peer, unit_peers) = match self.take_refs(&mut req) {
            Ok(p) => p,
            Err(e) => return self.fail_unaccepted(req, e),
        };
        let timeout = req.timeout();
        // The common case, a request with work to one peer that is up: queued
        // at once, without parking it and looking it up again (`admit`).
        let units = req.units();
        let ready = unit_peers.is_none() && units > 0 && self.peer_ready_now(peer);
        let (slot, epoch) = self.requests.slots.insert(req, units, peer, unit_peers, !ready);
        if let Some(t) = timeout {
            let in_order = timeout == self.cfg.request_timeout;
            let now = self.pass.now();
            self.pass.timers.add(now + t, Timer::Request { slot, epoch }, in_order);
        }
        if ready {
            self.queue(slot);
        } else {
            self.admit(slot);
        }
    }

    /// Whether requests to peer `p` may be posted now, when that is all there
    /// is to it: false also when asking changed anything (a ping, the peer
    /// found down), which `admit` then sees afresh.
    #[inline]
    fn peer_ready_now(&mut self, p: u32) -> bool {
        matches!(self.peers.ready(&mut self.domains, p, self.pass.now()), Ok(true)) && !self.peers.has_events()
    }

    /// Queues a parked request's units once all its peers are up; fails it
    /// if one is down. Leaves it parked otherwise.
    pub(super) fn admit(&mut self, slot: u32) {
        let Some(a) = self.requests.slots.get(slot).filter(|a| a.parked) else {
            return;
        };
        let (one, many, epoch) = (a.peer, a.unit_peers.clone(), a.epoch);
        let (mut ready, mut down) = (true, None);
        for &p in many.as_deref().unwrap_or(std::slice::from_ref(&one)) {
            match self.peer_ready(p) {
                Ok(r) => ready &= r,
                Err(e) => {
                    down = Some(e);
                    break;
                }
            }
        }
        if !ready && down.is_none() {
            return;
        }
        // A peer found down just now (shm: its liveness record says its
        // process died) has already ended its requests, this one included.
        let Some(a) = self.requests.slots.current(slot, epoch) else {
            return;
        };
        a.parked = false;
        if let Some(e) = down {
            return self.end(slot, e);
        }
        if a.units == 0 {
            return self.maybe_finish(slot); // a connect: its peer is up
        }
        self.queue(slot);
    }

    /// Queues the units of the live, unparked request in `slot` on the
    /// domains they go through.
    fn queue(&mut self, slot: u32) {
        let n = self.domains.len();
        let a = self.requests.slots.get(slot).expect("a live request");
        // A request on one NIC posts every unit there, in order; sends go
        // through domain 0; everything else rotates the first domain (with
        // one domain, no division on this path: it is per request).
        let one = a.req.nic.map(usize::from).or((matches!(a.req.shape, Shape::Send { .. }) || n == 1).then_some(0));
        if let Some(k) = one {
            (a.next[k], a.step) = (0, 1);
            let (epoch, entry) = (a.epoch, a.peer);
            if a.unit_peers.is_some() || !self.post_now(k, slot, entry) {
                self.requests.pending[k].push_back((slot, epoch));
            }
            return;
        }
        a.step = n;
        let rr = self.requests.rr; // always < n
        self.requests.rr = (rr + a.units) % n;
        for d in 0..n {
            a.next[d] = if d >= rr { d - rr } else { d + n - rr };
            if a.next[d] < a.units {
                self.requests.pending[d].push_back((slot, a.epoch));
            }
        }
    }
}
