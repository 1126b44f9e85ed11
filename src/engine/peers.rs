//! Peers: greeting them, their state, canceling what goes to them, and
//! peer sets (pre-resolved destination lists for scatters and barriers).
use super::{PeerSet, TransferEngine};
use crate::bail;
use crate::completion::notify::{RequestId, RequestOpts};
use crate::error::Result;
use crate::wire::NetAddr;
use crate::worker::request::{Ctrl, Shape};

impl TransferEngine {
    /// Cancels request (or immediate expectation) `id`. Nothing more of it is
    /// posted; it ends with `Canceled` once the provider has given back its
    /// work requests already on the wire, so after its callback (or flag) the
    /// caller may reuse or free its buffers. Some, all or none of its bytes
    /// (and immediates) may have landed. `NotFound` if it has already ended:
    /// then it reports its own outcome.
    pub fn cancel(&self, id: RequestId) -> Result<()> {
        // The request lives in one group's table, or none.
        for g in 1..self.groups.len() {
            match self.rpc_to(g, |reply| Ctrl::Cancel { id: id.0, reply }) {
                Err(e) if e.status == crate::error::Status::NotFound => {}
                r => return r,
            }
        }
        self.rpc(|reply| Ctrl::Cancel { id: id.0, reply })
    }

    /// Cancels every pending request to (or including) the engine whose
    /// address, or any of whose groups' addresses, is `peer`, from every
    /// group of this engine; returns how many. Each ends as for `cancel`.
    pub fn cancel_peer(&self, peer: &NetAddr) -> Result<usize> {
        let mut n = 0;
        for g in 0..self.groups.len() {
            n += self.rpc_to(g, |reply| Ctrl::CancelPeer { engine: peer.engine_id(), reply })?;
        }
        Ok(n)
    }

    /// Forgets the engine whose address, or any of whose groups' addresses,
    /// is `peer`, in every group of this engine; returns how many requests
    /// ended. Its pending requests end with `Canceled` (as `cancel_peer`);
    /// then it is no longer pinged, never reported up or down again, and
    /// messages from it no longer name it (until it greets this engine
    /// again: it is a new peer then). Descriptors it owns stay valid: a
    /// request that names one later greets the engine afresh. `NotFound` if
    /// no group knows it; `InvalidArgument` if a peer set lists it (remove
    /// the set first). The provider's own state for it (libfabric's address
    /// entry and connection, verbs' queue pairs) stays until the engine is
    /// destroyed.
    pub fn remove_peer(&self, peer: &NetAddr) -> Result<usize> {
        let engine = peer.engine_id();
        let sets = self.peer_sets.lock().unwrap();
        if let Some((id, _)) = sets.iter().find(|(_, m)| m.iter().any(|a| a.engine_id() == engine)) {
            bail!(InvalidArgument, "remove_peer: peer set {id} lists this peer; remove the set first");
        }
        let (mut entries, mut ended) = (0, 0);
        for g in 0..self.groups.len() {
            let (e, n) = self.rpc_to(g, |reply| Ctrl::RemovePeer { engine, reply })?;
            (entries, ended) = (entries + e, ended + n);
        }
        if entries == 0 {
            bail!(NotFound, "remove_peer: no group of this engine knows that peer");
        }
        Ok(ended)
    }

    /// Greets the engine at `peer` now (requests to a new peer do so
    /// themselves). A peer that is down — for example one that was restarted
    /// at the same address and epoch cannot be, so this is for a peer whose
    /// link came back — is greeted afresh and comes up if it answers.
    pub fn add_peer(&self, peer: &NetAddr) -> Result<()> {
        self.check_peer(0, peer)?;
        self.rpc(|reply| Ctrl::AddPeer { addr: peer.clone(), reply })
    }

    /// Greets every group of the engine at `peer` (its `engine_address`)
    /// from every group of this one with as many NICs, as `add_peer` does:
    /// the pairs of groups that may exchange writes are then warm. The two
    /// engines must have the same groups × NICs (as many groups, as many
    /// NICs in each), else `InvalidArgument` naming both.
    pub fn add_engine_peer(&self, peer: &crate::wire::EngineAddress) -> Result<()> {
        let (mine, theirs) = (self.groups_address().layout(), peer.layout());
        if mine != theirs {
            bail!(
                InvalidArgument,
                "the peer's groups have {theirs:?} NICs, this engine's {mine:?}: peers must have as many \
                 groups and as many NICs in each"
            );
        }
        for (g, n) in mine.iter().enumerate() {
            for to in peer.groups.iter().filter(|a| a.domains.len() == *n) {
                self.rpc_to(g, |reply| Ctrl::AddPeer { addr: to.clone(), reply })?;
            }
        }
        Ok(())
    }

    /// Greets `peer` as `add_peer` does, as a request: it ends `Ok` once the
    /// peer has answered (at once if it is up), or with why not
    /// (`PeerDown`, `Stale`, `TimedOut` at its deadline, `Canceled`,
    /// `Shutdown`). For warming peers up before the first transfer.
    pub fn connect(&self, peer: &NetAddr, done: impl Into<RequestOpts>) -> Result<RequestId> {
        self.check_peer(0, peer)?;
        self.submit(0, Shape::Connect { to: peer.clone() }, None, None, done.into())
    }

    /// The state of the engine whose address (or any of whose groups'
    /// addresses) is `peer`, as this engine sees it; `None` if no group has
    /// been in contact with it. Every pair of groups in contact counts:
    /// `Down` if any is down, else `Connecting` if any has not answered yet,
    /// else `Up` (as the peer-state callback reports it, completion/peer_state.rs).
    pub fn peer_state(&self, peer: &NetAddr) -> Result<Option<crate::config::PeerState>> {
        let mut states = Vec::new();
        for g in 0..self.groups.len() {
            states.extend(self.rpc_to(g, |reply| Ctrl::PeerState { engine: peer.engine_id(), reply })?);
        }
        Ok(crate::completion::peer_state::combine(states))
    }

    /// Pre-resolves a list of peer engine addresses, so scatters and barriers
    /// to them skip per-destination lookups. Destination `i` of a scatter or
    /// barrier submitted with the set must belong to peer `i`. (Before 0.4:
    /// `add_peer_group`.)
    pub fn add_peer_set(&self, addrs: &[NetAddr]) -> Result<PeerSet> {
        if addrs.is_empty() {
            bail!(InvalidArgument, "add_peer_set: no peers");
        }
        for a in addrs {
            self.check_peer(0, a)?;
        }
        // Every group's worker resolves it (a scatter goes through its
        // source region's group); under the lock, so each gives the same id.
        let mut known = self.peer_sets.lock().unwrap();
        let id = self.rpc(|reply| Ctrl::AddPeerSet { addrs: addrs.to_vec(), reply })?;
        for g in 1..self.groups.len() {
            let other = self.rpc_to(g, |reply| Ctrl::AddPeerSet { addrs: addrs.to_vec(), reply })?;
            if other != id {
                bail!(Panic, "a bug: peer set ids diverged between groups 0 and {g} ({id} vs {other})");
            }
        }
        known.insert(id, addrs.into());
        Ok(PeerSet(id))
    }

    /// Forgets peer set `set`: new requests through it are refused
    /// (`BadHandle`); one submitted through it that its worker has not
    /// started yet ends with `BadHandle`, one already started goes on.
    /// `BadHandle` if there is no such set (or it was removed).
    pub fn remove_peer_set(&self, set: PeerSet) -> Result<()> {
        let mut known = self.peer_sets.lock().unwrap();
        if known.remove(&set.0).is_none() {
            bail!(BadHandle, "unknown peer set {}", set.0);
        }
        for g in 0..self.groups.len() {
            self.rpc_to(g, |reply| Ctrl::RemovePeerSet { id: set.0, reply })?;
        }
        Ok(())
    }

    pub(super) fn check_peer_set<'a>(
        &self,
        set: Option<PeerSet>,
        owners: impl ExactSizeIterator<Item = &'a NetAddr>,
    ) -> Result<Option<u64>> {
        let Some(PeerSet(g)) = set else {
            return Ok(None);
        };
        let members = self.peer_sets.lock().unwrap().get(&g).cloned();
        let Some(members) = members else { bail!(BadHandle, "unknown peer set {g}") };
        if members.len() != owners.len() {
            bail!(
                InvalidArgument,
                "peer set {g} has {} peers but {} destinations were given",
                members.len(),
                owners.len()
            );
        }
        for (i, o) in owners.enumerate() {
            if members[i] != *o {
                bail!(InvalidArgument, "destination {i} does not belong to peer {i} of group {g}");
            }
        }
        Ok(Some(g))
    }
}
