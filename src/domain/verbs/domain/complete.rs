//! The verbs domain's completion path: one work completion, found by its
//! `wr_id` (the opcode is undefined on error), turned into what the worker
//! sees — a write or send done (with the unsignaled ones before it, by
//! their lane), a failure classified from `wc.status`, an immediate, an
//! engine message, a handshake datagram.
use super::*;

/// Whether a work completion status means the peer is gone (its queue pair
/// stopped answering).
fn peer_gone(status: u32) -> bool {
    matches!(status, IBV_WC_RETRY_EXC_ERR | IBV_WC_RNR_RETRY_EXC_ERR | IBV_WC_RESP_TIMEOUT_ERR)
}

/// A failed work completion as a status: the peer is gone (retries
/// exhausted), it refused the access, or ours was wrong. A flushed one (its
/// queue pair went to error for another work request) takes the class of
/// what broke the queue pair, `broke`: `PeerDown` only if the peer is gone —
/// one write through a bad key must not take a live peer down.
fn failure(status: u32, broke: Option<u32>) -> Error {
    let class = match status {
        s if peer_gone(s) => Status::PeerDown,
        IBV_WC_WR_FLUSH_ERR if broke.is_some_and(peer_gone) => Status::PeerDown,
        IBV_WC_WR_FLUSH_ERR => {
            let why = broke.map_or("the queue pair went to error".to_string(), |b| format!("status {b}"));
            return Error::new(
                Status::Provider,
                format!(
                    "verbs: flushed after another work request to this peer failed ({why}); its queue pairs are rebuilt"
                ),
            );
        }
        IBV_WC_REM_ACCESS_ERR | IBV_WC_REM_INV_REQ_ERR | IBV_WC_REM_OP_ERR => Status::RemoteAccess,
        IBV_WC_LOC_LEN_ERR | IBV_WC_LOC_PROT_ERR | IBV_WC_LOC_QP_OP_ERR | IBV_WC_MW_BIND_ERR => Status::LocalAccess,
        _ => Status::Provider,
    };
    Error::new(class, format!("verbs work completion status {status}"))
}

impl VerbsDomain {
    /// An engine message in `srq_w` buffer `i`: copied into the worker's
    /// next engine buffer (or kept until it posts one).
    fn engine_message(&mut self, i: usize, len: usize) {
        // SAFETY: the message was written there; the buffer is reposted after.
        let m = unsafe { std::slice::from_raw_parts(self.w_bufs.ptr(i), len.min(ENGINE_MSG)) };
        match self.engine_bufs.pop_front() {
            Some((token, buf, cap)) => {
                let n = m.len().min(cap);
                // SAFETY: the worker's buffer has cap bytes and is ours until its completion.
                unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), buf, n) };
                self.ready.push_back(Completion::Recv { token, len: n, data: None });
            }
            None => self.engine_early.push_back(m.to_vec()),
        }
    }

    /// One work completion.
    pub(super) fn complete(&mut self, w: &ibv_wc, out: &mut Vec<Completion>) {
        let (kind, i) = (w.wr_id & KIND, (w.wr_id & !KIND) as usize);
        let ok = w.status == IBV_WC_SUCCESS;
        match kind {
            K_OP => {
                // Those posted before it, unsignaled, completed first.
                self.ops.retire(i as u32, |(token, peer, bytes)| out.push(Completion::Done { token, peer, bytes }));
                let era = self.ops.era(i as u32);
                let Some((token, peer, bytes)) = self.release(i as u32) else { return };
                if ok {
                    out.push(Completion::Done { token, peer, bytes });
                } else {
                    let broke = self.peers.get_mut(peer as usize).map(|p| {
                        if era != p.era {
                            // A queue pair already replaced: what broke it.
                            return p.old_broke;
                        }
                        // The queue pair is in error now: the next work builds new ones.
                        p.state = State::Broken;
                        Some(*p.broke.get_or_insert(w.status))
                    });
                    out.push(Completion::Failed { token, peer, error: failure(w.status, broke.flatten()) });
                }
            }
            K_URECV => {
                let Some((token, ..)) = self.release(i as u32) else { return };
                match ok {
                    true => out.push(Completion::Recv { token, len: w.byte_len as usize, data: None }),
                    false => out.push(Completion::Failed { token, peer: NO_PEER, error: failure(w.status, None) }),
                }
            }
            K_WRECV => {
                if ok && w.opcode == IBV_WC_RECV_RDMA_WITH_IMM {
                    // SAFETY: a receive with an immediate carries it in this member.
                    out.push(Completion::RemoteWrite { imm: u32::from_be(unsafe { w.__bindgen_anon_1.imm_data }) });
                } else if ok {
                    self.engine_message(i, w.byte_len as usize);
                }
                if let Err(e) = self.post_w_recv(i) {
                    crate::log!(Error, "verbs: reposting a receive: {e}");
                }
            }
            K_UDRECV => {
                if ok {
                    self.handshake(i, w.byte_len as usize);
                }
                if let Err(e) = self.post_ud_recv(i) {
                    crate::log!(Error, "verbs: reposting a handshake receive: {e}");
                }
            }
            K_UDSEND => self.ud_free.push(i as u32),
            K_COVER => self
                .ops
                .retire_cover(i as u32, |(token, peer, bytes)| out.push(Completion::Done { token, peer, bytes })),
            _ => {}
        }
    }
}
