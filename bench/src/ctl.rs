//! The control channel between the bench client and its servers (one JSON
//! object per line over TCP), and the helpers both sides share: hex for
//! address blobs, the byte pattern writes carry, the hash that verifies it,
//! and the random page lists both sides derive from one seed.
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

pub type R<T> = Result<T, String>;

pub struct Ctl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctl {
    pub fn new(s: TcpStream) -> R<Ctl> {
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        // Nothing in the bench waits this long: a silent peer is an error, not a hang.
        s.set_read_timeout(Some(Duration::from_secs(120))).map_err(|e| e.to_string())?;
        Ok(Ctl { r: BufReader::new(s.try_clone().map_err(|e| e.to_string())?), w: s })
    }

    pub fn send(&mut self, v: &Value) -> R<()> {
        let mut line = v.to_string();
        line.push('\n');
        self.w.write_all(line.as_bytes()).map_err(|e| format!("control channel: {e}"))
    }

    /// The next message; `{"error": ...}` becomes an `Err`. `None` at EOF.
    pub fn recv_opt(&mut self) -> R<Option<Value>> {
        let mut line = String::new();
        let n = self.r.read_line(&mut line).map_err(|e| format!("control channel: {e}"))?;
        if n == 0 {
            return Ok(None);
        }
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("control channel: {e}: {line}"))?;
        match v.get("error") {
            Some(e) => Err(format!("peer: {}", e.as_str().unwrap_or("?"))),
            None => Ok(Some(v)),
        }
    }

    pub fn recv(&mut self) -> R<Value> {
        self.recv_opt()?.ok_or_else(|| "control channel: the peer hung up".to_string())
    }

    pub fn call(&mut self, v: Value) -> R<Value> {
        self.send(&v)?;
        self.recv()
    }
}

pub fn err_msg(e: impl std::fmt::Display) -> Value {
    json!({ "error": e.to_string() })
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> R<Vec<u8>> {
    if s.len() % 2 != 0 {
        return Err("odd hex length".into());
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string())).collect()
}

pub fn field_str<'a>(v: &'a Value, k: &str) -> R<&'a str> {
    v.get(k).and_then(Value::as_str).ok_or_else(|| format!("missing string field {k}"))
}

pub fn field_u64(v: &Value, k: &str) -> R<u64> {
    v.get(k).and_then(Value::as_u64).ok_or_else(|| format!("missing integer field {k}"))
}

/// splitmix64: the bench's only random source, so both sides agree.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Fills `buf` with a pattern that depends on `seed` and on each word's position.
pub fn fill(buf: &mut [u8], seed: u64) {
    let mut chunks = buf.chunks_exact_mut(8);
    for (i, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&mix(seed ^ (i as u64).wrapping_mul(0x100_0000_01B3)).to_le_bytes());
    }
    for b in chunks.into_remainder() {
        *b = seed as u8;
    }
}

/// A 64-bit hash of `buf` (words mixed with their position).
pub fn hash(buf: &[u8]) -> u64 {
    let mut h = buf.len() as u64;
    let mut chunks = buf.chunks_exact(8);
    for (i, c) in (&mut chunks).enumerate() {
        let w = u64::from_le_bytes(c.try_into().unwrap());
        h = h.rotate_left(5) ^ mix(w ^ i as u64);
    }
    for &b in chunks.remainder() {
        h = h.rotate_left(5) ^ b as u64;
    }
    h
}

/// A random permutation of `0..n` (seed 0: the identity).
pub fn permutation(seed: u64, n: usize) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    if seed != 0 {
        for i in (1..n).rev() {
            let j = (mix(seed ^ i as u64) % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
    v
}

/// Hash of pages `idx` (in that order) of `page` bytes each.
pub fn hash_pages(buf: &[u8], page: usize, idx: &[u32]) -> u64 {
    idx.iter().fold(0u64, |h, &i| h.rotate_left(7) ^ hash(&buf[i as usize * page..(i as usize + 1) * page]))
}

/// Parses `4K`, `64KiB`, `32M`, `1G`, or a plain byte count.
pub fn parse_size(s: &str) -> R<u64> {
    let t = s.trim().trim_end_matches("iB").trim_end_matches('B');
    let (num, mul) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>().map(|n| n * mul).map_err(|_| format!("not a size: {s}"))
}

pub fn fmt_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}
