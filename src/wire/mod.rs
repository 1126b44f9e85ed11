//! Serialized forms exchanged out of band: an engine's address and a memory
//! region's remote descriptor.
//!
//! Both are compact little-endian binary, start with a 4-byte header
//! (`b"FL"`, format version, kind), end with a CRC-32C of everything before
//! it, and are length-checked when parsed: a truncated, padded, corrupt or
//! unknown-version blob is a `Malformed` error, never a crash.
//!
//! ```text
//! address    = "FL" 0x04 0x41 address-body crc32c:u32
//! groups     = "FL" 0x04 0x47 ngroups:u8 address-body*ngroups crc32c:u32
//! descriptor = "FL" 0x04 0x44 base:u64 len:u64 memory:u8 address-body
//!              { remote_base:u64 key:u64 }*ndomains crc32c:u32
//! address-body = epoch:u64 ndomains:u8 { len:u16 bytes[len] }*ndomains
//! memory     = 1 (host) | 2 (GPU memory)
//! ```
//! The checksum makes every single-bit flip, every burst of up to 32 flipped
//! bits and every truncation a refusal (a CRC detects all of these); it is
//! no defence against someone who forges a consistent blob on purpose.
//! `epoch` names one incarnation of an engine group: random high bits shared
//! by every group of one engine (`NetAddr::engine_id`), the group's index in
//! the low four bits, never 0. An engine
//! restarted at the same provider address has another epoch, so its peers
//! can tell descriptors from before the restart (which would name the old
//! keys) and refuse them (`Status::Stale`). Blobs of versions 1 (no epoch)
//! and 2 (no checksum) are refused.
use crate::error::{Error, Result, Status};
use std::sync::Arc;

pub const FORMAT_VERSION: u8 = 4;
const KIND_ADDRESS: u8 = 0x41; // 'A'
const KIND_DESCRIPTOR: u8 = 0x44; // 'D'
const KIND_GROUPS: u8 = 0x47; // 'G'
/// Most DomainGroups one engine may have.
pub const MAX_GROUPS: usize = 16;
/// The low bits of an epoch: the group's index in its engine.
pub const GROUP_BITS: u64 = (MAX_GROUPS - 1) as u64;
const _: () = assert!(MAX_GROUPS.is_power_of_two());
/// Most domains (NICs) one engine may have.
pub const MAX_DOMAINS: usize = 8;
/// Longest provider address we accept (EFA's is 32 bytes, sockaddr_in6 28).
pub const MAX_DOMAIN_ADDR: usize = 256;
/// Longest address blob: header, epoch, domain count, each domain's length
/// and bytes, checksum.
pub const MAX_ADDRESS_LEN: usize = 4 + ADDR_BODY_MAX + 4;
const ADDR_BODY_MAX: usize = 8 + 1 + MAX_DOMAINS * (2 + MAX_DOMAIN_ADDR);
/// Longest groups-address blob (`EngineAddress`): header, group count,
/// each group's address body, checksum.
pub const MAX_ENGINE_ADDRESS_LEN: usize = 4 + 1 + MAX_GROUPS * ADDR_BODY_MAX + 4;
/// Longest descriptor blob: header, base, length, memory kind, the owner's
/// address body, a (remote base, key) per domain, checksum.
pub const MAX_DESCRIPTOR_LEN: usize = 4 + 17 + ADDR_BODY_MAX + MAX_DOMAINS * 16 + 4;

/// What memory a registered region is, as its descriptor says
/// (`fabriclib_remote_mr_memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MrMemory {
    /// Host memory (pageable, pinned or CUDA-mapped).
    #[default]
    Host = 1,
    /// GPU memory (registered with `register_device` or detected as such).
    Device = 2,
}

/// An engine's address: the engine's epoch (its incarnation) and one
/// provider address per domain, in domain order.
///
/// The per-domain addresses are shared (`Arc`): a clone, which every send
/// and every held descriptor makes, is a reference count, not an
/// allocation per domain.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NetAddr {
    pub epoch: u64,
    pub domains: Arc<[Box<[u8]>]>,
}

/// Every group's address of an engine (`TransferEngine::engine_address`),
/// group 0's first: its groups × NICs. Serialized as a `groups` blob; an
/// engine of one group may hand out its plain address instead (`parse`
/// takes both).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EngineAddress {
    pub groups: Vec<NetAddr>,
}

/// Where domain `d` of the owner addresses the region: `remote_base + offset`, with `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteKey {
    pub remote_base: u64,
    pub key: u64,
}

/// A registered region as a remote peer sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MrDesc {
    /// The owner's virtual address of the region's first byte (informational).
    pub base: u64,
    /// Length in bytes: every write into the region is checked against it.
    pub len: u64,
    /// What memory the region is.
    pub memory: MrMemory,
    /// The owner's engine address.
    pub owner: NetAddr,
    /// One key per domain of the owner, in domain order.
    pub keys: Vec<RemoteKey>,
    /// Engine-internal (leave it `Default::default()`): which engine's
    /// worker keeps this descriptor in its table, so that its requests name
    /// it by index. Not part of the value: clones start unmarked;
    /// comparisons, hashes and the serialized form ignore it.
    pub held: HeldMark,
}

/// See `MrDesc::held`: an engine tag in the high 32 bits, its worker's
/// table index in the low; 0 when no engine has marked the descriptor.
#[derive(Default)]
pub struct HeldMark(std::sync::atomic::AtomicU64);

impl HeldMark {
    /// The table index, if engine `tag` marked it.
    pub(crate) fn get(&self, tag: u32) -> Option<u32> {
        let v = self.0.load(std::sync::atomic::Ordering::Acquire);
        (tag != 0 && v >> 32 == tag as u64).then_some(v as u32)
    }

    /// Whether an engine has marked it.
    pub(crate) fn is_claimed(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) != 0
    }

    /// Marks it for engine `tag`, index `i`, unless an engine already has.
    pub(crate) fn claim(&self, tag: u32, i: u32) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        tag != 0 && self.0.compare_exchange(0, (tag as u64) << 32 | i as u64, AcqRel, Acquire).is_ok()
    }
}

impl Clone for HeldMark {
    fn clone(&self) -> Self {
        HeldMark::default()
    }
}

impl PartialEq for HeldMark {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for HeldMark {}

impl std::hash::Hash for HeldMark {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl std::fmt::Debug for HeldMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldMark")
    }
}

/// CRC-32C (Castagnoli) lookup table, built at compile time.
const CRC_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// CRC-32C of `bytes` (the checksum that ends every blob).
pub fn crc32c(bytes: &[u8]) -> u32 {
    !bytes.iter().fold(!0u32, |c, &b| CRC_TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8))
}

/// Appends the checksum of everything in `out` so far.
fn seal(mut out: Vec<u8>) -> Vec<u8> {
    let c = crc32c(&out);
    out.extend_from_slice(&c.to_le_bytes());
    out
}

fn malformed(what: &str) -> Error {
    Error::new(Status::Malformed, what.to_string())
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(malformed(&format!("truncated {what}")));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2, what)?.try_into().unwrap()))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    fn header(&mut self, kind: u8, what: &str) -> Result<()> {
        let h = self.take(4, what)?;
        if &h[..2] != b"FL" {
            return Err(malformed(&format!("{what}: not a fabriclib blob (bad magic)")));
        }
        if h[2] != FORMAT_VERSION {
            let from = if h[2] == 3 { " (made by fabriclib 0.3, whose engines cannot talk to this one)" } else { "" };
            return Err(malformed(&format!(
                "{what}: unsupported format version {}{from} (this library reads {FORMAT_VERSION})",
                h[2]
            )));
        }
        if h[3] != kind {
            return Err(malformed(&format!("{what}: wrong blob kind 0x{:02x}", h[3])));
        }
        Ok(())
    }
    /// Checks the blob's trailing checksum (over `whole` less its last 4
    /// bytes) and leaves the body to read; the reader is past the header.
    fn checksum(&mut self, whole: &[u8], what: &str) -> Result<()> {
        if self.buf.len() < 4 {
            return Err(malformed(&format!("truncated {what} (no checksum)")));
        }
        let (data, sum) = whole.split_at(whole.len() - 4);
        if crc32c(data) != u32::from_le_bytes(sum.try_into().unwrap()) {
            return Err(malformed(&format!("{what}: checksum mismatch (corrupted or truncated in transit)")));
        }
        self.buf = &self.buf[..self.buf.len() - 4];
        Ok(())
    }
    fn finish(&self, what: &str) -> Result<()> {
        if self.buf.is_empty() { Ok(()) } else { Err(malformed(&format!("{what}: {} trailing bytes", self.buf.len()))) }
    }
}

impl NetAddr {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![b'F', b'L', FORMAT_VERSION, KIND_ADDRESS];
        self.write_body(&mut out);
        seal(out)
    }

    fn write_body(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.push(self.domains.len() as u8);
        for d in self.domains.iter() {
            out.extend_from_slice(&(d.len() as u16).to_le_bytes());
            out.extend_from_slice(d);
        }
    }

    pub fn parse(buf: &[u8]) -> Result<NetAddr> {
        let mut r = Reader { buf };
        r.header(KIND_ADDRESS, "address")?;
        r.checksum(buf, "address")?;
        let a = Self::read_body(&mut r)?;
        r.finish("address")?;
        Ok(a)
    }

    /// Whether `other` is the same provider address (another epoch or not).
    pub fn same_place(&self, other: &NetAddr) -> bool {
        self.domains == other.domains
    }

    /// The engine this address belongs to: every group of one engine has an
    /// epoch with the same high bits (`epoch = engine | group`), so any of its
    /// groups' addresses names the engine (cancel and peer state go by it).
    pub fn engine_id(&self) -> u64 {
        self.epoch & !GROUP_BITS
    }

    /// Which group of its engine this address is (0: the main address).
    pub fn group_index(&self) -> usize {
        (self.epoch & GROUP_BITS) as usize
    }

    fn read_body(r: &mut Reader<'_>) -> Result<NetAddr> {
        let epoch = r.u64("address epoch")?;
        if epoch == 0 {
            return Err(malformed("address: epoch 0"));
        }
        let n = r.u8("address domain count")? as usize;
        if n == 0 || n > MAX_DOMAINS {
            return Err(malformed(&format!("address: {n} domains (expected 1..={MAX_DOMAINS})")));
        }
        let mut domains = Vec::with_capacity(n);
        for _ in 0..n {
            let len = r.u16("address length")? as usize;
            if len == 0 || len > MAX_DOMAIN_ADDR {
                return Err(malformed(&format!("address: domain address of {len} bytes")));
            }
            domains.push(r.take(len, "domain address")?.into());
        }
        Ok(NetAddr { epoch, domains: domains.into() })
    }
}

impl EngineAddress {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![b'F', b'L', FORMAT_VERSION, KIND_GROUPS, self.groups.len() as u8];
        for g in &self.groups {
            g.write_body(&mut out);
        }
        seal(out)
    }

    /// Parses a `groups` blob, or an address blob (one group).
    pub fn parse(buf: &[u8]) -> Result<EngineAddress> {
        if buf.len() > 3 && buf[3] == KIND_ADDRESS {
            return Ok(EngineAddress { groups: vec![NetAddr::parse(buf)?] });
        }
        let mut r = Reader { buf };
        r.header(KIND_GROUPS, "groups address")?;
        r.checksum(buf, "groups address")?;
        let n = r.u8("group count")? as usize;
        if n == 0 || n > MAX_GROUPS {
            return Err(malformed(&format!("groups address: {n} groups (expected 1..={})", MAX_GROUPS)));
        }
        let groups = (0..n).map(|_| NetAddr::read_body(&mut r)).collect::<Result<Vec<_>>>()?;
        r.finish("groups address")?;
        Ok(EngineAddress { groups })
    }

    /// NICs per group, in group order.
    pub fn layout(&self) -> Vec<usize> {
        self.groups.iter().map(|g| g.domains.len()).collect()
    }
}

impl MrDesc {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![b'F', b'L', FORMAT_VERSION, KIND_DESCRIPTOR];
        out.extend_from_slice(&self.base.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.push(self.memory as u8);
        self.owner.write_body(&mut out);
        for k in &self.keys {
            out.extend_from_slice(&k.remote_base.to_le_bytes());
            out.extend_from_slice(&k.key.to_le_bytes());
        }
        seal(out)
    }

    pub fn parse(buf: &[u8]) -> Result<MrDesc> {
        let mut r = Reader { buf };
        r.header(KIND_DESCRIPTOR, "descriptor")?;
        r.checksum(buf, "descriptor")?;
        let base = r.u64("descriptor base")?;
        let len = r.u64("descriptor length")?;
        if len == 0 {
            return Err(malformed("descriptor: zero-length region"));
        }
        if base.checked_add(len).is_none() {
            return Err(malformed("descriptor: base + length overflows"));
        }
        let memory = match r.u8("descriptor memory kind")? {
            1 => MrMemory::Host,
            2 => MrMemory::Device,
            m => return Err(malformed(&format!("descriptor: unknown memory kind {m}"))),
        };
        let owner = NetAddr::read_body(&mut r)?;
        let mut keys = Vec::with_capacity(owner.domains.len());
        for _ in 0..owner.domains.len() {
            keys.push(RemoteKey { remote_base: r.u64("remote base")?, key: r.u64("remote key")? });
        }
        r.finish("descriptor")?;
        Ok(MrDesc { base, len, memory, owner, keys, held: Default::default() })
    }
}

#[cfg(test)]
mod tests;
