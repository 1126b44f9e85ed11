//! Engines on several NICs: this process and a peer in a network namespace
//! joined by 2 or 4 veth pairs, each pair its own subnet, so that the tcp
//! provider lists one NIC per veth. Each side names its veths
//! (`EngineConfig::nics`); a paged write spread over the domains must leave
//! through every interface (the engine's counters and the kernel's byte
//! counters say so), and every byte must land. Also: NIC names checked,
//! per-request routing, one NIC losing its link mid transfer.
use super::faults::Ends;
use super::netns::{ip, root_or_skip};
use super::*;
use fabriclib::{Deadline, PeerState};

/// A namespace joined to this one by `n` veth pairs: pair `k` has the
/// subnet 10.(220+k).X.0/24, `.1` here (`ours[k]`), `.2` there (`theirs[k]`).
struct Pairs {
    ns: String,
    ours: Vec<String>,
    theirs: Vec<String>,
}

impl Pairs {
    fn up(n: usize) -> Result<Pairs, String> {
        let tag = std::process::id() % 100_000;
        let mut p = Pairs { ns: format!("fln{tag}"), ours: Vec::new(), theirs: Vec::new() };
        ip(&["netns", "add", &p.ns])?;
        ip(&["-n", &p.ns, "link", "set", "lo", "up"])?;
        for k in 0..n {
            let (a, b) = (format!("fna{tag}k{k}"), format!("fnb{tag}k{k}"));
            let net = format!("10.{}.{}", 220 + k, tag % 250);
            ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
            p.ours.push(a.clone());
            ip(&["link", "set", &b, "netns", &p.ns])?;
            p.theirs.push(b.clone());
            ip(&["addr", "add", &format!("{net}.1/24"), "dev", &a])?;
            ip(&["link", "set", &a, "up"])?;
            ip(&["-n", &p.ns, "addr", "add", &format!("{net}.2/24"), "dev", &b])?;
            ip(&["-n", &p.ns, "link", "set", &b, "up"])?;
        }
        Ok(p)
    }

    /// Takes pair `k`'s link up or down (at our end).
    fn link(&self, k: usize, up: bool) -> Result<(), String> {
        ip(&["link", "set", &self.ours[k], if up { "up" } else { "down" }])
    }

    /// Bytes interface `ours[k]` has sent.
    fn tx_bytes(&self, k: usize) -> Result<u64, String> {
        let f = format!("/sys/class/net/{}/statistics/tx_bytes", self.ours[k]);
        std::fs::read_to_string(&f).map_err(|e| format!("{f}: {e}"))?.trim().parse().map_err(|e| format!("{f}: {e}"))
    }
}

impl Drop for Pairs {
    fn drop(&mut self) {
        for a in &self.ours {
            let _ = ip(&["link", "del", a]);
        }
        let _ = ip(&["netns", "del", &self.ns]);
    }
}

/// The multi-NIC netns tests run on tcp, in the 2-domain round, as root.
fn netns_round(prov: &str, domains: usize) -> bool {
    if !prov.starts_with("tcp") || domains != 2 {
        eprintln!("    (runs on tcp, in the 2-domain round)");
        return false;
    }
    root_or_skip()
}

pub fn nics_carry_a_paged_write(prov: &str, domains: usize) -> TestResult {
    if !netns_round(prov, domains) {
        return Ok(());
    }
    for n in [2, 4] {
        spread_over(prov, n)?;
    }
    Ok(())
}

/// A paged write over `n` NICs, one domain on each.
fn spread_over(prov: &str, n: usize) -> TestResult {
    const PAGES: usize = 4096;
    const R: usize = PAGES * 4096;
    let pairs = Pairs::up(n)?;
    // Named NICs: no bind address, every domain on its own veth.
    let cfg = EngineConfig { nic_count: n, nics: pairs.ours.clone(), ..Default::default() };
    let l = local_with(cfg, prov, R, 41)?;
    let names: Vec<&str> = l.engine.nics().iter().map(|n| n.name.as_str()).collect();
    if names != pairs.ours {
        return Err(format!("domains opened on {names:?}, asked for {:?}", pairs.ours));
    }
    let bind = format!("nics={}", pairs.theirs.join(","));
    let mut p = Peer::spawn_in(Some(&pairs.ns), &bind, prov, n, R)?;
    let d = desc(&p);
    let before: Vec<u64> = (0..n).map(|k| pairs.tx_bytes(k)).collect::<Result<_, _>>()?;
    let mut rng = Rng(42);
    let (src, dst) = (rng.perm(PAGES), rng.perm(PAGES));
    p.expect(0x61, PAGES as u32);
    let f = flag();
    let (sp, dp) = (Pages { indices: &src, stride: 4096, offset: 0 }, Pages { indices: &dst, stride: 4096, offset: 0 });
    l.engine.submit_paged_writes(4096, Some(0x61), &l.mr, sp, &d, dp, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    p.fired(0x61)?;
    let mut want = vec![0u8; R];
    for (s, t) in src.iter().zip(&dst) {
        let (s, t) = (*s as usize * 4096, *t as usize * 4096);
        want[t..t + 4096].copy_from_slice(&l.mem[s..s + 4096]);
    }
    check_hash(&mut p, &want)?;
    // The engine's own counters: 1/n of the pages on each NIC, exactly.
    let c = l.engine.counters().map_err(e2s)?;
    let each = (PAGES / n) as u64;
    for (k, nic) in c.nics.iter().enumerate() {
        let t = nic.total;
        if (t.wrs_completed, t.bytes_completed, t.errors) != (each, each * 4096, 0) || nic.nic != names[k] {
            return Err(format!("NIC {k} ({}) counted {t:?}, expected {each} pages", nic.nic));
        }
    }
    // And the kernel's: each interface sent its share, plus headers.
    let sent: Vec<u64> = (0..n).map(|k| Ok(pairs.tx_bytes(k)? - before[k])).collect::<Result<_, String>>()?;
    eprintln!("    {R} bytes in {PAGES} pages over {n} NICs: bytes out of each {sent:?}");
    for (k, s) in sent.iter().enumerate() {
        if *s < (R / n) as u64 * 95 / 100 {
            return Err(format!("{} sent {s} bytes of a {R}-byte write spread over {n} NICs", names[k]));
        }
    }
    Ok(())
}

/// NIC names the provider does not have, or a count that is not the
/// domain count, are refused when the engine is made.
pub fn nic_names_are_checked(prov: &str, domains: usize) -> TestResult {
    if domains != 1 {
        return Ok(());
    }
    let refused = |nics: Vec<String>, domains: usize, what: &str| -> TestResult {
        let cfg = EngineConfig { provider: Some(prov.into()), nic_count: domains, nics, ..Default::default() };
        match TransferEngine::new(&cfg) {
            Err(e) if e.status == Status::InvalidArgument && e.message.contains(what) => Ok(()),
            Err(e) => Err(format!("expected InvalidArgument mentioning {what:?}, got {e}")),
            Ok(_) => Err(format!("an engine was made ({what})")),
        }
    };
    refused(vec!["no-such-nic0".into()], 1, "no NIC named \"no-such-nic0\"; the provider has:")?;
    refused(vec!["a".into(), "b".into()], 1, "2 NICs named for 1 domains")?;
    // NICs near a GPU: hwloc's nearest, by the provider's names.
    let near =
        |g: usize| EngineConfig { provider: Some(prov.into()), nics_near_gpu: Some((g, 1)), ..Default::default() };
    match TransferEngine::new(&near(1000)) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("GPU 1000") => {}
        other => return Err(format!("NICs near GPU 1000: {:?}", other.map(|_| ()))),
    }
    let gpus = fabriclib::topo::Topo::system().map_err(e2s)?.gpus.len();
    match (gpus, TransferEngine::new(&near(0))) {
        (0, Err(e)) if e.status == Status::InvalidArgument => {}
        (n, Ok(e)) if n > 0 && e.nic_count() == 1 => eprintln!("    NIC near GPU 0: {:?}", e.nics()[0]),
        // shm's one NIC is no PCI device: it is near no GPU.
        (n, Err(e)) if n > 0 && e.message.contains("no provider offers") => {}
        (n, other) => return Err(format!("{n} GPUs; NICs near GPU 0: {:?}", other.map(|_| ()))),
    }
    // The provider's own name for its one NIC works (shm: "shm"; tcp: the
    // NIC of the first address it lists, here asked for by name).
    let any = TransferEngine::new(&EngineConfig { provider: Some(prov.into()), ..Default::default() }).map_err(e2s)?;
    let name = any.nics()[0].name.clone();
    drop(any);
    let e = TransferEngine::new(&EngineConfig {
        provider: Some(prov.into()),
        nics: vec![name.clone()],
        ..Default::default()
    })
    .map_err(e2s)?;
    if e.nics()[0].name != name {
        return Err(format!("asked for {name}, opened on {:?}", e.nics()[0]));
    }
    Ok(())
}

/// The counters prove where the bytes went: a paged write of 1000 pages
/// puts exactly 1000 / domains of them on each NIC, all for the one peer,
/// and both ends of each work request are counted.
pub fn counters_count_every_page(prov: &str, domains: usize) -> TestResult {
    const PAGES: usize = 1000;
    const R: usize = PAGES * 4096;
    let l = local(prov, domains, R, 51)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    p.expect(0x62, 1);
    let first = flag();
    l.engine.submit_single_write(0, Some(0x62), &l.mr, 0, &d, 0, OnDone::Flag(first.clone())).map_err(e2s)?;
    p.fired(0x62)?; // the peer is up; that write counts as one zero-byte work request
    wait_flag(&first)?; // and is counted once it has completed here
    let before = l.engine.counters().map_err(e2s)?;
    let mut rng = Rng(52);
    let (src, dst) = (rng.perm(PAGES), rng.perm(PAGES));
    let f = flag();
    let (sp, dp) = (Pages { indices: &src, stride: 4096, offset: 0 }, Pages { indices: &dst, stride: 4096, offset: 0 });
    l.engine.submit_paged_writes(4096, None, &l.mr, sp, &d, dp, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    let after = l.engine.counters().map_err(e2s)?;
    let each = (PAGES / domains) as u64;
    for (k, (a, b)) in after.nics.iter().zip(&before.nics).enumerate() {
        let (t, u) = (a.total, b.total);
        let delta =
            (t.wrs_posted - u.wrs_posted, t.wrs_completed - u.wrs_completed, t.bytes_completed - u.bytes_completed);
        if delta != (each, each, each * 4096) || t.errors != 0 {
            return Err(format!(
                "NIC {k} ({}): {delta:?} (posted, completed, bytes), want {each} pages each; {t:?}",
                a.nic
            ));
        }
        let to_peer: Vec<_> = a.peers.iter().filter(|(who, _)| *who == addr(&p).epoch).collect();
        if to_peer.len() != 1 || to_peer[0].1 != t || a.peers.len() != 1 {
            return Err(format!("NIC {k}: per-peer counts {:?} do not match the total {t:?}", a.peers));
        }
    }
    if after.nics.len() != domains {
        return Err(format!("{} NICs counted for {domains} domains", after.nics.len()));
    }
    let mut want = vec![0u8; R];
    for (s, t) in src.iter().zip(&dst) {
        let (s, t) = (*s as usize * 4096, *t as usize * 4096);
        want[t..t + 4096].copy_from_slice(&l.mem[s..s + 4096]);
    }
    wait_hash(&mut p, &want)
}

/// Per-request routing: a request pinned to one NIC puts all its bytes
/// there, a sharded one spreads them evenly; the receiver counts the same
/// immediates either way. A NIC the engine lacks, a send off NIC 0, and a
/// destination whose engine has another NIC count are refused at submit.
pub fn requests_pinned_to_a_nic_or_sharded(prov: &str, domains: usize) -> TestResult {
    const PAGES: usize = 1000;
    const R: usize = PAGES * 4096;
    let l = local(prov, domains, R, 61)?;
    let mut p = Peer::spawn(prov, domains, R)?;
    let d = desc(&p);
    let last = domains - 1;
    let bytes = |c: &fabriclib::Counters| c.nics.iter().map(|n| n.total.bytes_completed).collect::<Vec<_>>();
    let delta = |a: &[u64], b: &[u64]| a.iter().zip(b).map(|(x, y)| x - y).collect::<Vec<_>>();
    let idx: Vec<u32> = (0..PAGES as u32).collect();
    let pages = Pages { indices: &idx, stride: 4096, offset: 0 };
    let mut want = vec![0u8; R];
    want.copy_from_slice(&l.mem);
    // Pinned to the last NIC, with an immediate per page.
    p.expect(0x71, PAGES as u32);
    let c0 = bytes(&l.engine.counters().map_err(e2s)?);
    let f = flag();
    let pinned = OnDone::Flag(f.clone()).on_nic(last);
    l.engine.submit_paged_writes(4096, Some(0x71), &l.mr, pages, &d, pages, pinned).map_err(e2s)?;
    wait_flag(&f)?;
    p.fired(0x71)?;
    let c1 = bytes(&l.engine.counters().map_err(e2s)?);
    let mut on_last = vec![0; domains];
    on_last[last] = R as u64;
    if delta(&c1, &c0) != on_last {
        return Err(format!("pinned to NIC {last}: bytes per NIC {:?}, want {on_last:?}", delta(&c1, &c0)));
    }
    // Sharded (the default), same immediate count.
    p.expect(0x72, PAGES as u32);
    let f = flag();
    l.engine.submit_paged_writes(4096, Some(0x72), &l.mr, pages, &d, pages, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    p.fired(0x72)?;
    let c2 = bytes(&l.engine.counters().map_err(e2s)?);
    if delta(&c2, &c1) != vec![(R / domains) as u64; domains] {
        return Err(format!("sharded: bytes per NIC {:?}, want {} each", delta(&c2, &c1), R / domains));
    }
    // A 1 MiB single write pinned to NIC 0 is not cut for sharding.
    let f = flag();
    l.engine.submit_single_write(1 << 20, None, &l.mr, 0, &d, 0, OnDone::Flag(f.clone()).on_nic(0)).map_err(e2s)?;
    wait_flag(&f)?;
    let c3 = bytes(&l.engine.counters().map_err(e2s)?);
    let mut on_first = vec![0; domains];
    on_first[0] = 1 << 20;
    if delta(&c3, &c2) != on_first {
        return Err(format!("single write on NIC 0: bytes per NIC {:?}", delta(&c3, &c2)));
    }
    check_hash(&mut p, &want)?;
    // NICs the engine does not have; sends only on NIC 0.
    let refused = |r: fabriclib::Result<fabriclib::RequestId>, what: &str| match r {
        Err(e) if e.status == Status::InvalidArgument => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    refused(
        l.engine.submit_single_write(8, None, &l.mr, 0, &d, 0, OnDone::Nothing.on_nic(domains)),
        "NIC out of range",
    )?;
    if domains > 1 {
        refused(l.engine.submit_send(&addr(&p), b"hi", OnDone::Nothing.on_nic(1)), "a send on NIC 1")?;
    }
    // A destination whose owner has another NIC count, alone and in a batch.
    let mut other = (*d).clone();
    other.owner.domains = other.owner.domains.iter().chain(&other.owner.domains[..1]).cloned().collect();
    other.keys.push(other.keys[0]);
    let other = std::sync::Arc::new(other);
    refused(l.engine.submit_single_write(8, None, &l.mr, 0, &other, 0, OnDone::Nothing), "another NIC count")?;
    let w = |dst| fabriclib::SingleWrite {
        len: 8,
        imm: None,
        src_offset: 0,
        dst,
        dst_offset: 0,
        done: OnDone::Nothing.into(),
    };
    match l.engine.submit_single_writes(&l.mr, [w(&d), w(&other)]) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("write 1 of the batch") => {}
        other => return Err(format!("a batch with another NIC count: {other:?}")),
    }
    Ok(())
}

/// One of two NICs loses its link in the middle of a stream of writes
/// (documented in README, "NICs"): nothing tells the engine (TCP retries in
/// silence), so requests with work on that NIC end `TimedOut` at their
/// deadline, while requests on the other NIC go on and the peer stays up
/// (the engine's keepalives travel on NIC 0). Once the link is back,
/// sharded requests complete again.
pub fn one_nic_down_mid_transfer(prov: &str, domains: usize) -> TestResult {
    if !netns_round(prov, domains) {
        return Ok(());
    }
    const R: usize = 8 << 20;
    let pairs = Pairs::up(2)?;
    let cfg = EngineConfig { nic_count: 2, nics: pairs.ours.clone(), ..Default::default() };
    let l = local_with(cfg, prov, R, 71)?;
    let bind = format!("nics={}", pairs.theirs.join(","));
    let mut p = Peer::spawn_in(Some(&pairs.ns), &bind, prov, 2, R)?;
    let d = desc(&p);
    still_up(&l, &d)?;
    let idx: Vec<u32> = (0..256).collect();
    let pages = |i: usize| Pages { indices: &idx, stride: 4096, offset: (i * 256 * 4096) as u64 % R as u64 };
    // 0..8: sharded over both NICs, 2 s deadline; 8..16: on NIC 0 only.
    let ends = Ends::new(16);
    let soon = |i: usize| ends.on(i).deadline(Deadline::After(Duration::from_secs(2)));
    for i in 0..8 {
        if i == 2 {
            pairs.link(1, false)?;
        }
        l.engine.submit_paged_writes(4096, None, &l.mr, pages(i), &d, pages(i), soon(i)).map_err(e2s)?;
    }
    for i in 8..16 {
        let on0 = soon(i).on_nic(0);
        l.engine.submit_paged_writes(4096, None, &l.mr, pages(i), &d, pages(i), on0).map_err(e2s)?;
    }
    ends.wait_all(Duration::from_secs(10))?;
    ends.only(&[Status::Ok, Status::TimedOut])?;
    if (8..16).any(|i| ends.status(i) != Status::Ok) {
        return Err(format!("a write on the live NIC did not complete: {:?}", ends.tally()));
    }
    if !(2..8).any(|i| ends.status(i) == Status::TimedOut) {
        return Err(format!("writes sharded over the dead NIC all completed: {:?}", ends.tally()));
    }
    if l.engine.peer_state(&addr(&p)).map_err(e2s)? != Some(PeerState::Up) {
        return Err("the peer went down with one of its two NICs".into());
    }
    eprintln!("    NIC 1 down: {:?} (0..8 sharded, 8..16 on NIC 0)", ends.tally());
    // The link comes back: sharded writes complete again (TCP resends).
    pairs.link(1, true)?;
    let t = Instant::now();
    loop {
        let f = flag();
        let done = OnDone::Flag(f.clone()).deadline(Deadline::After(Duration::from_secs(5)));
        l.engine.submit_paged_writes(4096, None, &l.mr, pages(0), &d, pages(0), done).map_err(e2s)?;
        if wait_flag(&f).is_ok() {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err("sharded writes did not complete again after the link came back".into());
        }
    }
    eprintln!("    link back: sharded writes complete again after {:.1?}", t.elapsed());
    let _ = p.hash()?;
    Ok(())
}

/// A write to `d` on each NIC completes.
fn still_up(l: &Local, d: &Arc<MrDesc>) -> TestResult {
    for k in 0..2 {
        let f = flag();
        l.engine.submit_single_write(4096, None, &l.mr, 0, d, 0, OnDone::Flag(f.clone()).on_nic(k)).map_err(e2s)?;
        wait_flag(&f)?;
    }
    Ok(())
}

/// The threads of `TransferEngine` by their (15-byte) names, with the CPUs
/// each may run on, from /proc.
pub(super) fn threads() -> Vec<(String, String)> {
    std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?.trim().to_string();
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?.trim().to_string();
            comm.starts_with("fabriclib-").then_some((comm, cpus))
        })
        .collect()
}

/// Worker, callback and watcher threads run on the CPUs asked for.
pub fn threads_are_pinned_where_asked(prov: &str, domains: usize) -> TestResult {
    if domains != 1 {
        return Ok(());
    }
    let all = fabriclib::pin::current_thread_cpus();
    let (last, first) = (*all.last().unwrap(), all[0]);
    let cfg = EngineConfig {
        nic_count: domains,
        worker_cpus: vec![last],
        callback_cpus: vec![first],
        watcher_cpus: vec![first],
        ..Default::default()
    };
    let l = local_with(cfg, prov, 1 << 16, 81)?;
    let w = l.engine.watch(fabriclib::gpu::MemoryKind::Host, 0, Box::new(|_, _| {})).map_err(e2s)?;
    // A thread names and pins itself once it runs: look until it has.
    let want = [("fabriclib-worke", last), ("fabriclib-cb", first), ("fabriclib-watch", first)];
    let t = Instant::now();
    for (name, cpu) in want {
        while !threads().iter().any(|(n, c)| n == name && *c == cpu.to_string()) {
            if t.elapsed() > Duration::from_secs(5) {
                return Err(format!("no {name} thread on CPU {cpu}: {:?}", threads()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    drop(w);
    // A CPU that is not online is refused when the engine is made.
    let bad = EngineConfig { provider: Some(prov.into()), worker_cpus: vec![1000], ..Default::default() };
    match TransferEngine::new(&bad) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("not online") => Ok(()),
        other => Err(format!("worker on CPU 1000: {:?}", other.map(|_| ()))),
    }
}
