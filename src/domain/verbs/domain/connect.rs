//! The verbs domain's connections: a peer's entry and queue pairs, the
//! CONNECT/ACCEPT handshake over UD (sent, retried, answered, timed out),
//! connecting the RC queue pairs, and rebuilding them after an error. The
//! design is in the parent module's doc.
use super::*;

impl VerbsDomain {
    /// The entry of the peer at domain address `addr`, created (connecting) if new.
    pub(super) fn peer_at(&mut self, addr: &[u8]) -> Result<PeerId> {
        if let Some(&p) = self.by_addr.get(addr) {
            return Ok(p);
        }
        if addr.len() != ADDR_LEN {
            crate::bail!(Malformed, "a verbs address is {ADDR_LEN} bytes, got {}", addr.len());
        }
        let qps = self.new_qps()?;
        let now = Instant::now();
        let p = self.peers.len() as PeerId;
        self.peers.push(Peer {
            gid: addr[..16].try_into().unwrap(),
            ud_qpn: u32::from_le_bytes(addr[16..20].try_into().unwrap()),
            nonce: u64::from_le_bytes(addr[20..28].try_into().unwrap()),
            ah: None,
            qps,
            remote: None,
            broke: None,
            old_broke: None,
            era: 0,
            state: State::Connecting { since: now, last: now - RETRY },
            backlog: VecDeque::new(),
        });
        self.ops.add_peer();
        self.by_addr.insert(addr.into(), p);
        self.connecting.push(p);
        Ok(p)
    }

    /// Sends handshake message `kind` to peer `p` over UD; false if no send
    /// slot is free (the retry sends it).
    pub(super) fn send_ud(&mut self, p: PeerId, kind: u8) -> bool {
        let Some(slot) = self.ud_free.pop() else { return false };
        let (port, gix) = (self.path.port, self.path.gid_index);
        let peer = &mut self.peers[p as usize];
        if peer.ah.is_none() {
            match self.pd.create_ah(port, gix, peer.gid) {
                Ok(ah) => peer.ah = Some(ah),
                Err(e) => {
                    crate::log!(Warn, "verbs: no address handle to a peer: {e}");
                    self.ud_free.push(slot);
                    return false;
                }
            }
        }
        let mut m = Vec::with_capacity(64);
        m.extend_from_slice(MAGIC);
        m.push(kind);
        m.extend_from_slice(&self.addr);
        m.extend_from_slice(&peer.nonce.to_le_bytes());
        for rc in &peer.qps {
            m.extend_from_slice(&rc.qp.qpn().to_le_bytes());
            m.extend_from_slice(&rc.psn.to_le_bytes());
        }
        let i = UD_RECVS + slot as usize;
        // SAFETY: the slot is ours until its completion.
        unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), self.ud_bufs.ptr(i), m.len()) };
        let mut sge = self.ud_bufs.sge(i, m.len());
        let mut wr = ibv_send_wr {
            wr_id: K_UDSEND | slot as u64,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_SEND,
            send_flags: IBV_SEND_SIGNALED,
            ..Default::default()
        };
        wr.wr.ud = ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: peer.ah.as_ref().unwrap().raw(),
            remote_qpn: peer.ud_qpn,
            remote_qkey: QKEY,
        };
        // SAFETY: the buffer is registered and stays ours until the completion.
        if unsafe { self.ud.post_send(&mut wr) }.is_err() {
            self.ud_free.push(slot);
            return false;
        }
        true
    }

    /// A handshake datagram of `len` bytes in UD buffer `i`.
    pub(super) fn handshake(&mut self, i: usize, len: usize) {
        // SAFETY: the datagram was written there (GRH first); we repost after reading.
        let m = unsafe { std::slice::from_raw_parts(self.ud_bufs.ptr(i).add(40), len.saturating_sub(40)) };
        if m.len() < 4 + 1 + ADDR_LEN + 8 + 24 || &m[..4] != MAGIC {
            return;
        }
        let kind = m[4];
        let from = &m[5..5 + ADDR_LEN];
        let mut at = 5 + ADDR_LEN;
        let to_nonce = u64::from_le_bytes(m[at..at + 8].try_into().unwrap());
        at += 8;
        let word = |k: usize| u32::from_le_bytes(m[at + 4 * k..at + 4 * k + 4].try_into().unwrap());
        // Its queue pairs by `Q`: (QP number, first PSN) each.
        let theirs: [(u32, u32); 3] = std::array::from_fn(|q| (word(2 * q), word(2 * q + 1)));
        let qpns = theirs.map(|(qpn, _)| qpn);
        // Meant for an earlier incarnation at our GID and QP number.
        if to_nonce != self.nonce {
            return;
        }
        let from = from.to_vec();
        let Ok(p) = self.peer_at(&from) else { return };
        let peer = &self.peers[p as usize];
        match peer.remote {
            Some(r) if r == qpns => {}
            Some(_) => {
                // The peer built new queue pairs (ours or its own went to
                // error): so do we, and connect them to its new ones.
                if self.rebuild(p).is_err() {
                    return;
                }
                self.connect(p, theirs);
            }
            None => self.connect(p, theirs),
        }
        if kind == CONNECT {
            self.send_ud(p, ACCEPT);
        }
    }

    /// Connects peer `p`'s queue pairs to its `(qpn, psn)` pairs (by `Q`),
    /// and sends what waited for it.
    pub(super) fn connect(&mut self, p: PeerId, theirs: [(u32, u32); 3]) {
        let path = self.path;
        let peer = &mut self.peers[p as usize];
        let gid = peer.gid;
        if let Err(e) = peer
            .qps
            .iter()
            .zip(theirs)
            .try_for_each(|(rc, (qpn, psn))| rc::connect(&rc.qp, &path, rc.psn, &Endpoint { gid, qpn, psn }))
        {
            crate::log!(Warn, "verbs: connecting to a peer: {e}");
            peer.state = State::Broken;
            return;
        }
        peer.remote = Some(theirs.map(|(qpn, _)| qpn));
        peer.state = State::Up;
        self.connecting.retain(|&q| q != p);
        let backlog = std::mem::take(&mut self.peers[p as usize].backlog);
        for (work, op) in backlog {
            self.post_now(&work, op);
        }
    }

    /// New queue pairs for peer `p` (its old ones to error, kept until the
    /// domain closes so their flushed work requests complete).
    pub(super) fn rebuild(&mut self, p: PeerId) -> Result<()> {
        let fresh = self.new_qps()?;
        let now = Instant::now();
        let peer = &mut self.peers[p as usize];
        let old = std::mem::replace(&mut peer.qps, fresh);
        peer.remote = None;
        (peer.old_broke, peer.broke, peer.era) = (peer.broke.or(peer.old_broke), None, peer.era.wrapping_add(1));
        peer.state = State::Connecting { since: now, last: now - RETRY };
        for rc in old {
            let _ = rc::fail(&rc.qp);
            self.retired.push(rc.qp);
        }
        if !self.connecting.contains(&p) {
            self.connecting.push(p);
        }
        Ok(())
    }

    /// Sends CONNECT again to peers that have not answered; fails the work
    /// of those silent past `CONNECT_TIMEOUT`.
    pub(super) fn drive_handshakes(&mut self) {
        let now = Instant::now();
        for p in self.connecting.clone() {
            let State::Connecting { since, last } = self.peers[p as usize].state else { continue };
            if now.duration_since(since) >= CONNECT_TIMEOUT {
                let err = Error::new(
                    Status::PeerDown,
                    format!("the verbs peer did not answer the connection handshake within {CONNECT_TIMEOUT:?}"),
                );
                for (_, op) in std::mem::take(&mut self.peers[p as usize].backlog) {
                    if let Some((token, peer, _)) = self.release(op) {
                        self.ready.push_back(Completion::Failed { token, peer, error: err.clone() });
                    }
                }
                self.peers[p as usize].state = State::Broken;
                self.connecting.retain(|&q| q != p);
                continue;
            }
            if now.duration_since(last) >= RETRY && self.send_ud(p, CONNECT) {
                self.peers[p as usize].state = State::Connecting { since, last: now };
            }
        }
    }
}
