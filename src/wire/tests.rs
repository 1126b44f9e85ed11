//! The blobs' format: round trips, the documented maxima, every bit flip
//! and truncation refused, and bounded-time fuzzing of both parsers.
use super::*;
use proptest::prelude::*;

fn sample() -> MrDesc {
    MrDesc {
        base: 0x7f00_0000_1000,
        len: 1 << 20,
        memory: MrMemory::Device,
        owner: NetAddr { epoch: 0x1234_5678_9abc, domains: vec![vec![1u8; 16].into(), vec![2u8; 18].into()].into() },
        keys: vec![RemoteKey { remote_base: 0, key: 7 }, RemoteKey { remote_base: 0x7f00_0000_1000, key: 9 }],
        held: Default::default(),
    }
}

#[test]
fn groups_addresses_round_trip_and_take_plain_addresses() {
    let g = |e: u64, n: usize| NetAddr { epoch: e, domains: vec![vec![e as u8; 16].into(); n].into() };
    let a = EngineAddress { groups: vec![g(1, 1), g(2, 4), g(3, 4)] };
    let bytes = a.to_bytes();
    assert_eq!(EngineAddress::parse(&bytes).unwrap(), a);
    assert_eq!(a.layout(), [1, 4, 4]);
    for cut in 0..bytes.len() {
        assert_eq!(EngineAddress::parse(&bytes[..cut]).unwrap_err().status, Status::Malformed, "cut at {cut}");
    }
    let mut flipped = bytes.clone();
    flipped[9] ^= 1;
    assert_eq!(EngineAddress::parse(&flipped).unwrap_err().status, Status::Malformed);
    // A plain address is an engine of one group.
    assert_eq!(EngineAddress::parse(&g(5, 2).to_bytes()).unwrap().groups, [g(5, 2)]);
    let biggest = EngineAddress {
        groups: vec![
            NetAddr { epoch: 1, domains: vec![vec![1u8; MAX_DOMAIN_ADDR].into(); MAX_DOMAINS].into() };
            MAX_GROUPS
        ],
    };
    assert_eq!(biggest.to_bytes().len(), MAX_ENGINE_ADDRESS_LEN);
    assert!(NetAddr::parse(&bytes).is_err(), "a groups address is no plain address");
}

#[test]
fn the_largest_blobs_are_the_documented_maxima() {
    let owner = NetAddr { epoch: u64::MAX, domains: vec![vec![0xa5u8; MAX_DOMAIN_ADDR].into(); MAX_DOMAINS].into() };
    let keys = vec![RemoteKey { remote_base: u64::MAX, key: u64::MAX }; MAX_DOMAINS];
    let d = MrDesc { base: 0, len: 1, memory: MrMemory::Host, owner: owner.clone(), keys, held: Default::default() };
    assert_eq!(owner.to_bytes().len(), MAX_ADDRESS_LEN);
    assert_eq!(d.to_bytes().len(), MAX_DESCRIPTOR_LEN);
    assert!(NetAddr::parse(&owner.to_bytes()).is_ok() && MrDesc::parse(&d.to_bytes()).is_ok());
}

#[test]
fn descriptor_round_trips_and_every_truncation_is_malformed() {
    let d = sample();
    let bytes = d.to_bytes();
    assert_eq!(MrDesc::parse(&bytes).unwrap(), d);
    for cut in 0..bytes.len() {
        assert_eq!(MrDesc::parse(&bytes[..cut]).unwrap_err().status, Status::Malformed, "cut at {cut}");
    }
    let mut padded = bytes.clone();
    padded.push(0);
    assert_eq!(MrDesc::parse(&padded).unwrap_err().status, Status::Malformed);
    // The memory kind travels; an unknown one (resealed) is refused.
    let host = MrDesc { memory: MrMemory::Host, ..sample() };
    assert_eq!(MrDesc::parse(&host.to_bytes()).unwrap().memory, MrMemory::Host);
    assert_eq!(MrDesc::parse(&bytes).unwrap().memory, MrMemory::Device);
    let mut odd = bytes.clone();
    odd[20] = 7;
    let n = odd.len() - 4;
    let c = crc32c(&odd[..n]);
    odd[n..].copy_from_slice(&c.to_le_bytes());
    assert!(MrDesc::parse(&odd).unwrap_err().message.contains("memory kind 7"));
    let mut v3 = bytes.clone();
    v3[2] = 3;
    assert!(MrDesc::parse(&v3).unwrap_err().message.contains("fabriclib 0.3"));
}

/// The integrity check: every single-bit flip and every truncation of an
/// address or a descriptor (1, 2 and 8 domains) is refused, never parsed
/// into something else.
#[test]
fn every_bit_flip_and_truncation_is_refused() {
    let eight = NetAddr { epoch: 3, domains: (0..8).map(|i| vec![i as u8; 32].into()).collect() };
    let blobs = [
        sample().to_bytes(),
        sample().owner.to_bytes(),
        MrDesc { owner: eight.clone(), keys: vec![RemoteKey { remote_base: 1, key: 2 }; 8], ..sample() }.to_bytes(),
        eight.to_bytes(),
    ];
    let mut flips = 0;
    for b in &blobs {
        for bit in 0..b.len() * 8 {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(NetAddr::parse(&c).is_err() && MrDesc::parse(&c).is_err(), "bit {bit} flipped was accepted");
            flips += 1;
        }
        for cut in 0..b.len() {
            assert!(NetAddr::parse(&b[..cut]).is_err() && MrDesc::parse(&b[..cut]).is_err(), "cut at {cut}");
        }
    }
    assert!(flips > 5000, "{flips}");
}

#[test]
fn crc32c_matches_the_standard_check_value() {
    // The CRC-32C check value (RFC 3720, appendix B.4).
    assert_eq!(crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn wrong_version_kind_and_magic_are_refused() {
    let a = sample().owner.to_bytes();
    assert_eq!(NetAddr::parse(&a).unwrap(), sample().owner);
    for (i, v) in [(0usize, b'X'), (2, 1), (2, 2), (2, 3), (2, 5), (3, KIND_DESCRIPTOR)] {
        let mut b = a.clone();
        b[i] = v;
        let e = NetAddr::parse(&b).unwrap_err();
        assert_eq!(e.status, Status::Malformed);
    }
    // Epoch 0 is never made: refused. So is a version-1 blob (no epoch).
    let mut zero = sample().owner;
    zero.epoch = 0;
    assert_eq!(NetAddr::parse(&zero.to_bytes()).unwrap_err().status, Status::Malformed);
    let mut v1 = a.clone();
    v1[2] = 1;
    assert!(NetAddr::parse(&v1).unwrap_err().message.contains("version 1"));
    // A blob of this version with a valid checksum but the kind of the other is refused too.
    let mut as_desc = a.clone();
    as_desc[3] = KIND_DESCRIPTOR;
    let n = as_desc.len() - 4;
    let c = crc32c(&as_desc[..n]);
    as_desc[n..].copy_from_slice(&c.to_le_bytes());
    assert!(MrDesc::parse(&as_desc).is_err());
    // An address is not a descriptor and vice versa.
    assert!(MrDesc::parse(&a).is_err());
    assert!(NetAddr::parse(&sample().to_bytes()).is_err());
}

/// Bounded-time mutation fuzzing of both parsers (`FABRICLIB_FUZZ_SECS`,
/// default 3): valid blobs get bytes flipped, set, inserted, deleted,
/// truncated, duplicated and spliced with each other; nothing may panic,
/// and whatever parses must re-encode to exactly the bytes it came from.
#[test]
fn fuzz_parsers_for_a_bounded_time() {
    let secs: f64 = std::env::var("FABRICLIB_FUZZ_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let seeds = [
        sample().to_bytes(),
        sample().owner.to_bytes(),
        NetAddr { epoch: 5, domains: vec![vec![9u8; 40].into()].into() }.to_bytes(),
    ];
    let mut x = 0x5eed_u64;
    let mut next = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (start, mut execs, mut parsed) = (std::time::Instant::now(), 0u64, 0u64);
    while start.elapsed().as_secs_f64() < secs {
        for _ in 0..256 {
            let mut b = seeds[(next() % 3) as usize].clone();
            for _ in 0..1 + next() % 4 {
                let at = (next() as usize) % (b.len() + 1);
                match next() % 7 {
                    0 if at < b.len() => b[at] ^= 1 << (next() % 8),
                    1 if at < b.len() => b[at] = next() as u8,
                    2 => b.insert(at, next() as u8),
                    3 if at < b.len() => drop(b.remove(at)),
                    4 => b.truncate(at),
                    5 => {
                        let tail = b[at..].to_vec();
                        b.extend_from_slice(&tail);
                    }
                    _ => {
                        let other = &seeds[(next() % 3) as usize];
                        let from = (next() as usize) % (other.len() + 1);
                        b.truncate(at);
                        b.extend_from_slice(&other[from..]);
                    }
                }
            }
            // Half of them get a valid checksum again, so that the
            // structural checks behind it are fuzzed too.
            if next() % 2 == 0 && b.len() >= 4 {
                let n = b.len() - 4;
                let c = crc32c(&b[..n]);
                b[n..].copy_from_slice(&c.to_le_bytes());
            }
            execs += 1;
            if let Ok(a) = NetAddr::parse(&b) {
                parsed += 1;
                assert_eq!(a.to_bytes(), b, "address re-encodes differently");
            }
            if let Ok(d) = MrDesc::parse(&b) {
                parsed += 1;
                assert_eq!(d.to_bytes(), b, "descriptor re-encodes differently");
            }
        }
    }
    eprintln!("fuzz_parsers: {execs} inputs in {secs} s, {parsed} parsed and round-tripped");
    assert!(execs > 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]
    // Fuzz: arbitrary bytes never panic; whatever parses re-encodes to the same bytes.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(a) = NetAddr::parse(&bytes) { prop_assert_eq!(a.to_bytes(), bytes.clone()); }
        if let Ok(d) = MrDesc::parse(&bytes) { prop_assert_eq!(d.to_bytes(), bytes); }
    }

    // Fuzz: valid blobs with random corruption never panic.
    #[test]
    fn mutated_descriptors_never_panic(pos in 0usize..80, val in any::<u8>(), cut in 0usize..90) {
        let mut b = sample().to_bytes();
        let p = pos % b.len();
        b[p] = val;
        b.truncate(cut.min(b.len()));
        let _ = MrDesc::parse(&b);
        let _ = NetAddr::parse(&b);
    }
}
