//! ImmCounter: counts remote writes per 32-bit immediate, independent of
//! arrival order and of how a transfer was sharded over domains.
//!
//! Immediates that arrive before an expectation is set are kept and count
//! towards it. When the count reaches the expectation, `count` is subtracted
//! (the surplus stays for the next expectation) and the expectation fires
//! once and is removed.
use super::notify::{Notifier, OnDone};
use crate::bail;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A cheap hasher for u32 keys (Fibonacci multiply); no per-imm SipHash.
#[derive(Default)]
pub struct ImmHasher(u64);
impl Hasher for ImmHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | *b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// An armed expectation: how many immediates it waits for, whom to tell,
/// and its request id (for cancel and its deadline).
struct Expectation {
    want: u64,
    done: OnDone,
    id: u64,
}

struct Entry {
    arrived: u64,
    expect: Option<Expectation>,
}

#[derive(Default)]
pub struct ImmCounter {
    map: HashMap<u32, Entry, BuildHasherDefault<ImmHasher>>,
    armed: usize,
}

impl ImmCounter {
    /// Arms an expectation of `count` immediates `imm`.
    pub fn expect(&mut self, imm: u32, count: u32, done: OnDone, id: u64, n: &Notifier) -> Result<()> {
        if count == 0 {
            bail!(InvalidArgument, "expect_imm_count: count must be at least 1");
        }
        let e = self.map.entry(imm).or_insert(Entry { arrived: 0, expect: None });
        if e.expect.is_some() {
            bail!(AlreadyExists, "immediate {imm:#x} already has an expectation; wait for it to fire");
        }
        e.expect = Some(Expectation { want: count as u64, done, id });
        self.armed += 1;
        self.check(imm, n);
        Ok(())
    }

    /// Counts one arrived immediate.
    pub fn arrived(&mut self, imm: u32, n: &Notifier) {
        self.map.entry(imm).or_insert(Entry { arrived: 0, expect: None }).arrived += 1;
        self.check(imm, n);
    }

    fn check(&mut self, imm: u32, n: &Notifier) {
        let Some(e) = self.map.get_mut(&imm) else {
            return;
        };
        if e.expect.as_ref().is_some_and(|x| e.arrived >= x.want) {
            let x = e.expect.take().unwrap();
            e.arrived -= x.want;
            self.armed -= 1;
            n.fire(x.done, Ok(()));
        }
        if e.arrived == 0 && e.expect.is_none() {
            self.map.remove(&imm);
        }
    }

    /// Expectations armed and not yet fired (the worker does not nap while any are).
    pub fn armed(&self) -> usize {
        self.armed
    }

    /// Ends the expectation on `imm` with `err` if it is still request `id`
    /// (its deadline passed). Immediates already counted stay counted.
    pub fn expire(&mut self, imm: u32, id: u64, err: Error, n: &Notifier) -> bool {
        let Some(e) = self.map.get_mut(&imm) else {
            return false;
        };
        if e.expect.as_ref().is_none_or(|x| x.id != id) {
            return false;
        }
        let x = e.expect.take().unwrap();
        self.armed -= 1;
        n.fire(x.done, Err(err));
        self.check(imm, n);
        true
    }

    /// Whether the expectation on `imm` is request `id` and still armed.
    pub fn is_armed(&self, imm: u32, id: u64) -> bool {
        self.map.get(&imm).and_then(|e| e.expect.as_ref()).is_some_and(|x| x.id == id)
    }

    /// The immediate whose expectation is request `id`, if one is armed.
    pub fn find(&self, id: u64) -> Option<u32> {
        self.map.iter().find(|(_, e)| e.expect.as_ref().is_some_and(|x| x.id == id)).map(|(imm, _)| *imm)
    }

    /// Ends every armed expectation with `err` (shutdown).
    pub fn fail_all(&mut self, err: &Error, n: &Notifier) {
        self.armed = 0;
        for (_, e) in self.map.drain() {
            if let Some(x) = e.expect {
                n.fire(x.done, Err(err.clone()));
            }
        }
    }
}
