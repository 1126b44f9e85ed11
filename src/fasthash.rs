//! The hash maps of the request path (peers by address and epoch, provider
//! ids, immediates): a multiply-rotate hash over 8-byte words, seeded once
//! per process at random, instead of std's SipHash. A 64 B send's round
//! trip looked its peer up by address about four times; SipHash over the
//! address was about 1,000 of the round trip's 17,800 instructions
//! (`fabriclib-bench pingcost` under callgrind, docs/benchmarks.md). Keys
//! come from peers (addresses in greetings), so the seed is random: a
//! stranger cannot compute colliding addresses offline.
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

const K: u64 = 0x9E37_79B9_7F4A_7C15;

/// A `HashMap` with [`FastState`].
pub type FastMap<K, V> = HashMap<K, V, FastState>;

/// Builds [`FastHasher`]s from the process's seed.
#[derive(Clone, Copy)]
pub struct FastState(u64);

impl Default for FastState {
    fn default() -> FastState {
        static SEED: OnceLock<u64> = OnceLock::new();
        FastState(*SEED.get_or_init(crate::domain::random_u64))
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

/// One multiply and rotate per 8-byte word (FxHash's shape, seeded).
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits and its tag from the
        // high 7: fold the high half down so both depend on every word.
        self.0 ^ (self.0 >> 32)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }
    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.add(v as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_near_keys_spread() {
        let s = FastState::default();
        let h = |b: &[u8]| s.hash_one(b);
        assert_eq!(h(b"fi_shm://1234"), h(b"fi_shm://1234"));
        // Addresses that differ in one byte, anywhere, land in many buckets
        // of a small table (the low bits) and differ in the tag (the top 7).
        let base = *b"fi_shm://123456789:0";
        let (mut low, mut top) = (std::collections::HashSet::new(), std::collections::HashSet::new());
        for i in 0..base.len() {
            let mut a = base;
            a[i] ^= 1;
            low.insert(h(&a) & 63);
            top.insert(h(&a) >> 57);
        }
        assert!(low.len() >= 12 && top.len() >= 12, "{} buckets, {} tags of 20", low.len(), top.len());
        let mut m: FastMap<u64, u32> = FastMap::default();
        for i in 0..1000u64 {
            m.insert(i << 32, i as u32);
        }
        assert!((0..1000u64).all(|i| m[&(i << 32)] == i as u32));
    }
}
