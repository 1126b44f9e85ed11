//! The 64-bit context every work request is posted with (libfabric's
//! `op_context` carries it through the domain's context pool) and what it
//! names. Encoded and decoded here only; the rest of the worker sees `Token`.
//!
//! Layout (bit 63 first):
//! - `1 … pool:31 | index:32`: buffer `index` of receive pool `pool`;
//! - `01 0 … | index:32`: engine-channel receive buffer `index`;
//! - `01 1 … | peer:32 | slot:16`: engine-channel send slot `slot`, to peer `peer`;
//! - `0001 … | index:32`: the bytes of split write `index` (split.rs);
//! - `0010 epoch:28 | unit:8 | slot:24`: member `unit` of the bundle in
//!   `slot`, at `epoch` (bundle.rs: a bundle's slot is below 2^24);
//! - `0000 epoch:28 | slot:32`: a unit of the request in `slot`, at `epoch`.

const RECV_BIT: u64 = 1 << 63;
const ENGINE_BIT: u64 = 1 << 62;
const ENGINE_SEND_BIT: u64 = 1 << 61;
const SPLIT_BIT: u64 = 1 << 60;
/// Request slot generations wrap at 28 bits, so they never reach the kind bits.
pub(in crate::worker) const EPOCH_MASK: u32 = (1 << 28) - 1;
/// A bundle's slot fits its members' tokens (`Token::Member`; its members
/// do: `request::MAX_MEMBERS`).
pub(in crate::worker) const MEMBER_SLOTS: u32 = crate::worker::request::MEMBER_SLOTS as u32;

/// What a work request belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::worker) enum Token {
    /// A unit of the request in slot `slot`, at generation `epoch` (a late
    /// completion of an earlier request in that slot has another epoch).
    Request { slot: u32, epoch: u32 },
    /// Member `unit` (its one work request) of the bundle in slot `slot`.
    Member { slot: u32, epoch: u32, unit: u8 },
    /// The bytes of split write `index` (its immediate follows: split.rs).
    Split(u32),
    /// Buffer `index` of receive pool `pool`.
    Recv { pool: u32, index: u32 },
    /// Engine-channel receive buffer `index` (handshake, keepalive, goodbye).
    EngineRecv(u32),
    /// Engine-channel send slot `slot`, to peer-table entry `peer`.
    EngineSend { peer: u32, slot: u16 },
}

impl Token {
    pub(in crate::worker) fn encode(self) -> u64 {
        match self {
            Token::Request { slot, epoch } => {
                debug_assert!(epoch <= EPOCH_MASK);
                ((epoch & EPOCH_MASK) as u64) << 32 | slot as u64
            }
            Token::Member { slot, epoch, unit } => {
                debug_assert!(epoch <= EPOCH_MASK && slot < MEMBER_SLOTS);
                ENGINE_SEND_BIT | ((epoch & EPOCH_MASK) as u64) << 32 | (unit as u64) << 24 | slot as u64
            }
            Token::Split(index) => SPLIT_BIT | index as u64,
            Token::Recv { pool, index } => {
                debug_assert!(pool < 1 << 31);
                RECV_BIT | (pool as u64) << 32 | index as u64
            }
            Token::EngineRecv(index) => ENGINE_BIT | index as u64,
            Token::EngineSend { peer, slot } => ENGINE_BIT | ENGINE_SEND_BIT | (peer as u64) << 16 | slot as u64,
        }
    }

    /// The request slot and epoch a unit's token names (a request's or a
    /// bundle member's).
    pub(in crate::worker) fn slot_epoch(self) -> Option<(u32, u32)> {
        match self {
            Token::Request { slot, epoch } | Token::Member { slot, epoch, .. } => Some((slot, epoch)),
            _ => None,
        }
    }

    #[inline]
    pub(in crate::worker) fn decode(t: u64) -> Token {
        // The common case first: every unit of a request comes back with one.
        if t & (RECV_BIT | ENGINE_BIT | ENGINE_SEND_BIT | SPLIT_BIT) == 0 {
            Token::Request { slot: t as u32, epoch: (t >> 32) as u32 }
        } else if t & RECV_BIT != 0 {
            Token::Recv { pool: ((t & !RECV_BIT) >> 32) as u32, index: t as u32 }
        } else if t & ENGINE_BIT != 0 && t & ENGINE_SEND_BIT != 0 {
            Token::EngineSend { peer: (t >> 16) as u32, slot: t as u16 }
        } else if t & ENGINE_BIT != 0 {
            Token::EngineRecv(t as u32)
        } else if t & ENGINE_SEND_BIT != 0 {
            Token::Member {
                slot: t as u32 & (MEMBER_SLOTS - 1),
                epoch: (t >> 32) as u32 & EPOCH_MASK,
                unit: (t >> 24) as u8,
            }
        } else {
            Token::Split(t as u32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips_at_its_extremes() {
        let cases = [
            Token::Request { slot: 0, epoch: 0 },
            Token::Request { slot: u32::MAX, epoch: EPOCH_MASK },
            Token::Split(0),
            Token::Split(u32::MAX),
            Token::Recv { pool: 0, index: 0 },
            Token::Recv { pool: (1 << 31) - 1, index: u32::MAX },
            Token::EngineRecv(0),
            Token::EngineRecv(u32::MAX),
            Token::EngineSend { peer: 0, slot: 0 },
            Token::EngineSend { peer: u32::MAX, slot: u16::MAX },
            Token::Member { slot: 0, epoch: 0, unit: 0 },
            Token::Member { slot: MEMBER_SLOTS - 1, epoch: EPOCH_MASK, unit: u8::MAX },
        ];
        for t in cases {
            assert_eq!(Token::decode(t.encode()), t, "{t:?} -> {:#x}", t.encode());
        }
    }

    #[test]
    fn kinds_never_collide() {
        // The all-ones value of each kind decodes as that kind, not another.
        let full = [
            Token::Request { slot: u32::MAX, epoch: EPOCH_MASK }.encode(),
            Token::Split(u32::MAX).encode(),
            Token::Recv { pool: (1 << 31) - 1, index: u32::MAX }.encode(),
            Token::EngineRecv(u32::MAX).encode(),
            Token::EngineSend { peer: u32::MAX, slot: u16::MAX }.encode(),
            Token::Member { slot: MEMBER_SLOTS - 1, epoch: EPOCH_MASK, unit: u8::MAX }.encode(),
        ];
        let kinds: Vec<_> = full.iter().map(|&t| std::mem::discriminant(&Token::decode(t))).collect();
        for (i, a) in kinds.iter().enumerate() {
            for b in &kinds[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn request_epochs_wrap_below_the_kind_bits() {
        let t = Token::Request { slot: 7, epoch: (EPOCH_MASK + 1) & EPOCH_MASK }.encode();
        assert_eq!(t, 7);
        assert!(Token::Request { slot: 1, epoch: EPOCH_MASK }.encode() < SPLIT_BIT);
    }
}
