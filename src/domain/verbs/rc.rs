//! Reliable-connected queue pairs: the three state changes that connect one
//! to a peer's (RESET → INIT → RTR → RTS), given what the peer said about
//! itself (`Endpoint`: its GID, QP number and first packet sequence
//! number). How the two sides learn each other's endpoint is the caller's
//! (the domain's UD handshake).
use super::lib::Qp;
use super::sys::*;
use crate::error::Result;

/// One side of an RC connection as the other side needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Network byte order.
    pub gid: [u8; 16],
    pub qpn: u32,
    /// The first packet sequence number it sends with (24 bits).
    pub psn: u32,
}

/// How a connection is set up: the local port and GID index, the path MTU,
/// and the retry policy.
#[derive(Clone, Copy, Debug)]
pub struct Path {
    pub port: u8,
    pub gid_index: u8,
    /// `IBV_MTU_*` (the port's active MTU).
    pub mtu: ibv_mtu,
    /// Local ACK timeout, 4.096 µs × 2^timeout (14: ~67 ms).
    pub timeout: u8,
    /// Transport retries before the QP goes to error (at most 7).
    pub retry_cnt: u8,
    /// Receiver-not-ready retries (7: forever).
    pub rnr_retry: u8,
}

impl Path {
    /// Local `port` and `gid_index` at path MTU `mtu`, with fabriclib's retry
    /// policy: ACK timeout 14 (≈ 67 ms), 7 retries, unlimited RNR retries.
    pub fn new(port: u8, gid_index: u8, mtu: ibv_mtu) -> Path {
        Path { port, gid_index, mtu, timeout: 14, retry_cnt: 7, rnr_retry: 7 }
    }
}

/// What a peer may do to memory behind our QPs: write (with immediates).
pub const REMOTE_WRITE: u32 = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

/// Connects `qp` (fresh, in RESET) to `remote`, sending from `psn`.
pub fn connect(qp: &Qp, path: &Path, psn: u32, remote: &Endpoint) -> Result<()> {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: path.port,
        qp_access_flags: REMOTE_WRITE,
        ..Default::default()
    };
    qp.modify(&mut a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)?;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTR,
        path_mtu: path.mtu,
        dest_qp_num: remote.qpn,
        rq_psn: remote.psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: remote.gid },
                sgid_index: path.gid_index,
                hop_limit: 64,
                ..Default::default()
            },
            is_global: 1,
            port_num: path.port,
            ..Default::default()
        },
        ..Default::default()
    };
    let rtr = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;
    qp.modify(&mut a, rtr)?;
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_RTS,
        timeout: path.timeout,
        retry_cnt: path.retry_cnt,
        rnr_retry: path.rnr_retry,
        sq_psn: psn,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let rts =
        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    qp.modify(&mut a, rts)
}

/// Readies a fresh UD queue pair on `port` for datagrams with `qkey`
/// (RESET → INIT → RTR → RTS).
pub fn ud_ready(qp: &Qp, port: u8, qkey: u32) -> Result<()> {
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_INIT, pkey_index: 0, port_num: port, qkey, ..Default::default() };
    qp.modify(&mut a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)?;
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_RTR, ..Default::default() };
    qp.modify(&mut a, IBV_QP_STATE)?;
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_RTS, sq_psn: 0, ..Default::default() };
    qp.modify(&mut a, IBV_QP_STATE | IBV_QP_SQ_PSN)
}

/// Moves `qp` to the error state: its work requests still queued complete
/// flushed (`IBV_WC_WR_FLUSH_ERR`), and nothing more goes out on it.
pub fn fail(qp: &Qp) -> Result<()> {
    let mut a = ibv_qp_attr { qp_state: IBV_QPS_ERR, ..Default::default() };
    qp.modify(&mut a, IBV_QP_STATE)
}
