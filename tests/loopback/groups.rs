//! One engine, several DomainGroups (`EngineConfig::groups`): each group
//! has its own NICs and worker thread; a region is registered in one group
//! (by its memory, or `register_in_group`), and writes from it go through
//! that group's NICs to the NICs of the destination's group. Immediates
//! count at the receiving engine whatever group's NICs they came through.
//! Two engines of two groups each, in this process, on every provider.
use super::*;
use fabriclib::GroupConfig;

const PAGES: usize = 64;
const PAGE: usize = 4096;
const R: usize = PAGES * PAGE;

/// The configuration of an engine of two groups of `domains` NICs on loopback.
pub fn two_groups_cfg(prov: &str, domains: usize) -> EngineConfig {
    EngineConfig {
        provider: Some(prov.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: domains,
        groups: vec![GroupConfig::default(), GroupConfig::default()],
        ..Default::default()
    }
}

/// An engine of two groups of `domains` NICs; group 1's worker on `cpu`.
fn two_groups(prov: &str, domains: usize, cpu: u32) -> Result<TransferEngine, String> {
    let mut cfg = two_groups_cfg(prov, domains);
    cfg.groups[1].worker_cpus = vec![cpu];
    TransferEngine::new(&cfg).map_err(e2s)
}

/// Registers `mem` in group `g` of `e`.
fn register_in(e: &TransferEngine, g: usize, mem: &mut [u8]) -> Result<MrHandle, String> {
    // SAFETY: every caller keeps `mem` alive until the handle and its requests are gone.
    unsafe { e.register_in_group(g, mem.as_mut_ptr(), mem.len(), None) }.map_err(e2s)
}

/// Pages from group 1 of one engine land in both groups of another; the
/// receiver's one expectation counts them all; the sender's counters show
/// the work on group 1's NICs only; each group has its worker thread.
pub fn groups_write_across_groups(prov: &str, domains: usize) -> TestResult {
    let cpus = fabriclib::pin::current_thread_cpus();
    let cpu = *cpus.last().unwrap();
    let (a, b) = (two_groups(prov, domains, cpu)?, two_groups(prov, domains, cpu)?);
    if a.group_count() != 2 || a.nics().len() != 2 * domains || a.nic_count() != 2 * domains {
        return Err(format!("{} groups, {} NICs; expected 2 groups of {domains}", a.group_count(), a.nics().len()));
    }
    let (g0, g1) = (a.group_address(0).unwrap(), a.group_address(1).unwrap());
    if g0 == g1 || a.address() != g0 || a.group_address(2).is_some() {
        return Err("group addresses: expected two distinct ones, the first the main address".into());
    }
    let mut src = vec![0u8; R];
    Rng(71).fill(&mut src);
    let (mut d0, mut d1) = (vec![0u8; R], vec![0u8; R]);
    let smr = register_in(&a, 1, &mut src)?;
    let (m0, m1) = (register_in(&b, 0, &mut d0)?, register_in(&b, 1, &mut d1)?);
    if (smr.group(), m0.group(), m1.group()) != (1, 0, 1) {
        return Err(format!("regions in groups {}, {}, {}", smr.group(), m0.group(), m1.group()));
    }
    if &m1.descriptor().owner != b.group_address(1).unwrap() || &m0.descriptor().owner != b.address() {
        return Err("a descriptor's owner is not the address of its region's group".into());
    }
    // One expectation at b for the pages of both writes.
    let expect = flag();
    b.expect_imm_count(0x6a, 2 * PAGES as u32, OnDone::Flag(expect.clone())).map_err(e2s)?;
    let mut rng = Rng(72);
    let mut wanted = Vec::new();
    for dst in [&m0, &m1] {
        let (s, t) = (rng.perm(PAGES), rng.perm(PAGES));
        let f = flag();
        let (sp, tp) = (
            Pages { indices: &s, stride: PAGE as u64, offset: 0 },
            Pages { indices: &t, stride: PAGE as u64, offset: 0 },
        );
        a.submit_paged_writes(PAGE as u64, Some(0x6a), &smr, sp, dst.descriptor(), tp, OnDone::Flag(f.clone()))
            .map_err(e2s)?;
        wait_flag(&f)?;
        let mut want = vec![0u8; R];
        for (s, t) in s.iter().zip(&t) {
            let (s, t) = (*s as usize * PAGE, *t as usize * PAGE);
            want[t..t + PAGE].copy_from_slice(&src[s..s + PAGE]);
        }
        wanted.push(want);
    }
    wait_flag(&expect)?;
    for (k, (got, want)) in [&d0, &d1].iter().zip(&wanted).enumerate() {
        if fnv64(got) != fnv64(want) {
            return Err(format!("bytes in b's group-{k} region differ from what was written"));
        }
    }
    // Nothing left over: exactly 2 × PAGES immediates arrived.
    if b.imm_count(0x6a, false).map_err(e2s)? != 0 {
        return Err("more immediates than pages arrived".into());
    }
    // a's work went through group 1's NICs (the second half of the list) only.
    let c = a.counters().map_err(e2s)?;
    let posted: Vec<u64> = c.nics.iter().map(|n| n.total.wrs_completed).collect();
    let per = (2 * PAGES / domains) as u64;
    let want: Vec<u64> = (0..2 * domains).map(|k| if k < domains { 0 } else { per }).collect();
    if posted != want {
        return Err(format!("work requests completed per NIC {posted:?}, expected {want:?}"));
    }
    // A route names a NIC as the engine numbers them: group 1's last is
    // 2 × domains - 1; group 0's are not the group-1 region's.
    let last = 2 * domains - 1;
    let f = flag();
    a.submit_single_write(PAGE as u64, None, &smr, 0, m1.descriptor(), 0, OnDone::Flag(f.clone()).on_nic(last))
        .map_err(e2s)?;
    wait_flag(&f)?;
    let after = a.counters().map_err(e2s)?.nics[last].total.wrs_completed;
    if after != per + 1 {
        return Err(format!("a write routed to NIC {last} left its count at {after}, expected {}", per + 1));
    }
    match a.submit_single_write(PAGE as u64, None, &smr, 0, m1.descriptor(), 0, OnDone::Nothing.on_nic(0)) {
        Err(e) if e.status == Status::InvalidArgument => {}
        other => return Err(format!("a group-1 write routed to group 0's NIC 0: {other:?}, expected InvalidArgument")),
    }
    // Every pair of groups greeted at once (`add_engine_peer`): b's groups are up for each of a's.
    a.add_engine_peer(&b.groups_address()).map_err(e2s)?;
    let t = Instant::now();
    while (0..2).any(|g| a.peer_state(b.group_address(g).unwrap()).ok().flatten() != Some(fabriclib::PeerState::Up)) {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("b's groups did not come up after add_engine_peer".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Each group has its worker; group 1's runs where it was asked to.
    let t = Instant::now();
    loop {
        let th = super::nics::threads();
        let w1 = th.iter().filter(|(n, _)| n == "fabriclib-w1").count();
        let w0 = th.iter().filter(|(n, _)| n == "fabriclib-worke").count();
        let pinned = th.iter().filter(|(n, c)| n == "fabriclib-w1" && *c == cpu.to_string()).count();
        if (w0, w1, pinned) == (2, 2, 2) {
            break;
        }
        if t.elapsed() > Duration::from_secs(5) {
            return Err(format!("threads {th:?}: expected two of each group's worker, group 1's on CPU {cpu}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop((smr, m0, m1));
    drop((a, b));
    Ok(())
}

/// A region's group writes NIC k to NIC k of the destination's group: a
/// destination group with another NIC count is refused at submit, naming
/// the group; with one group and the same counts nothing changes.
pub fn groups_nic_counts_must_match(prov: &str, domains: usize) -> TestResult {
    if domains != 1 {
        return Ok(());
    }
    let cfg = EngineConfig {
        provider: Some(prov.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: 1,
        groups: vec![GroupConfig::default(), GroupConfig { nic_count: 2, ..Default::default() }],
        ..Default::default()
    };
    let a = TransferEngine::new(&cfg).map_err(e2s)?;
    let b = local(prov, 1, R, 73)?;
    let mut src = vec![0u8; R];
    let (s0, s1) = (register_in(&a, 0, &mut src)?, register_in(&a, 1, &mut src)?);
    let d = b.mr.descriptor();
    let f = flag();
    a.submit_single_write(PAGE as u64, None, &s0, 0, d, 0, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    match a.submit_single_write(PAGE as u64, None, &s1, 0, d, 0, OnDone::Nothing) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("group 1") => {}
        other => return Err(format!("a write from a 2-NIC group to a 1-NIC engine: {other:?}")),
    }
    // Engines of other groups × NICs are refused as a whole, naming both.
    match a.add_engine_peer(&b.engine.groups_address()) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("[1]") && e.message.contains("[1, 2]") => {}
        other => return Err(format!("add_engine_peer between [1, 2] and [1] NICs: {other:?}")),
    }
    // Group configuration errors are caught when the engine is made.
    let bad = |groups: Vec<GroupConfig>| {
        TransferEngine::new(&EngineConfig { provider: Some(prov.into()), groups, ..Default::default() })
    };
    let same_gpu =
        vec![GroupConfig { gpu: Some(0), ..Default::default() }, GroupConfig { gpu: Some(0), ..Default::default() }];
    let too_many = vec![GroupConfig::default(); fabriclib::MAX_GROUPS + 1];
    for (what, groups) in [("two groups on GPU 0", same_gpu), ("too many groups", too_many)] {
        match bad(groups) {
            Err(e) if e.status == Status::InvalidArgument => {}
            Err(e) => return Err(format!("{what}: {e}")),
            Ok(_) => return Err(format!("{what}: accepted")),
        }
    }
    // SAFETY: refused before anything is registered (src outlives the call anyway).
    if unsafe { a.register_in_group(2, src.as_mut_ptr(), R, None) }.map(|_| ()).map_err(|e| e.status)
        != Err(Status::InvalidArgument)
    {
        return Err("registering into a group the engine does not have was not refused".into());
    }
    drop((s0, s1));
    Ok(())
}

/// Host memory goes to the group of its NUMA node (`GroupConfig::numa`);
/// memory of no group's node, to the home group.
pub fn groups_take_memory_of_their_numa_node(prov: &str, domains: usize) -> TestResult {
    if domains != 1 {
        return Ok(());
    }
    let mut mem = vec![1u8; R];
    let make = |numa: u32| {
        let groups = vec![GroupConfig::default(), GroupConfig { numa: Some(numa), ..Default::default() }];
        TransferEngine::new(&EngineConfig {
            provider: Some(prov.into()),
            bind_addr: Some("127.0.0.1".into()),
            groups,
            ..Default::default()
        })
        .map_err(e2s)
    };
    // The node this process's pages come from (node 0 on a machine without NUMA).
    let node = fabriclib::topo::numa_node_of(mem.as_ptr() as usize).ok_or("the kernel does not say which NUMA node")?;
    for (numa, want) in [(node, 1), (node + 1, 0)] {
        let e = make(numa)?;
        // SAFETY: mem outlives the handle (dropped at the end of the iteration).
        let mr = unsafe { e.register(mem.as_mut_ptr(), R) }.map_err(e2s)?;
        if mr.group() != want {
            return Err(format!("memory on node {node} went to group {} (group 1 on node {numa})", mr.group()));
        }
    }
    Ok(())
}

/// `groups_per_gpu`: a host group, then one per GPU with its nearest NICs
/// (hwloc's plan); on a machine without GPUs, a clear error.
pub fn groups_per_gpu_from_the_topology(prov: &str, domains: usize) -> TestResult {
    if domains != 1 || !prov.starts_with("tcp") {
        return Ok(());
    }
    let gpus = fabriclib::topo::Topo::system().map_err(e2s)?.gpus.len();
    let cfg = EngineConfig { provider: Some(prov.into()), groups_per_gpu: Some(1), ..Default::default() };
    match (gpus, TransferEngine::new(&cfg)) {
        (0, Err(e)) if e.status == Status::InvalidArgument && e.message.contains("no GPU") => Ok(()),
        (0, other) => Err(format!("one group per GPU on a machine without GPUs: {:?}", other.map(|_| ()))),
        (n, Ok(e)) if e.group_count() > n => {
            let groups: Vec<String> =
                (0..e.group_count()).map(|g| format!("{:?}", e.group_address(g).map(|a| a.domains.len()))).collect();
            eprintln!("    {n} GPUs: {} groups, NICs {:?} ({groups:?})", e.group_count(), e.nics());
            Ok(())
        }
        (n, other) => Err(format!("one group per GPU with {n} GPUs: {:?}", other.map(|e| e.group_count()))),
    }
}

/// Manual progress drives every group: `progress` steps them all, and a
/// write from group 1 to the other engine's group 1 completes and is
/// counted at its group 0 with no worker thread anywhere.
pub fn groups_in_manual_progress(prov: &str, domains: usize) -> TestResult {
    if domains != 1 {
        return Ok(());
    }
    let make = || {
        TransferEngine::new(&EngineConfig {
            provider: Some(prov.into()),
            bind_addr: Some("127.0.0.1".into()),
            manual_progress: true,
            groups: vec![GroupConfig::default(), GroupConfig::default()],
            ..Default::default()
        })
        .map_err(e2s)
    };
    let (a, b) = (make()?, make()?);
    let mut src = vec![0u8; R];
    Rng(74).fill(&mut src);
    let mut dst = vec![0u8; R];
    let (s1, d1) = (register_in(&a, 1, &mut src)?, register_in(&b, 1, &mut dst)?);
    let (sent, landed) = (flag(), flag());
    b.expect_imm_count(0x6b, 1, OnDone::Flag(landed.clone())).map_err(e2s)?;
    a.submit_single_write(R as u64, Some(0x6b), &s1, 0, d1.descriptor(), 0, OnDone::Flag(sent.clone())).map_err(e2s)?;
    let t = Instant::now();
    while (sent.load(Ordering::Acquire) & FLAG_DONE == 0) || (landed.load(Ordering::Acquire) & FLAG_DONE == 0) {
        if !(a.progress() | b.progress()) {
            std::thread::yield_now();
        }
        if t.elapsed() > WAIT {
            return Err("a write between groups did not complete under manual progress".into());
        }
    }
    wait_flag(&sent)?;
    wait_flag(&landed)?;
    if fnv64(&dst) != fnv64(&src) {
        return Err("bytes differ after a write between groups under manual progress".into());
    }
    // Destroying a manual engine says goodbye to its peers: keep the other progressing.
    drop((s1, d1));
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                b.progress();
                std::thread::yield_now();
            }
        });
        drop(a);
        stop.store(true, Ordering::Release);
    });
    Ok(())
}

/// Cancel and peer state go by *engine* with DomainGroups. A peer of two
/// groups, stopped before it could answer, with requests parked towards
/// both of its groups from both of ours: `cancel_peer` with its main address
/// ends all of them, and `peer_state` with any of its groups' addresses says
/// `Connecting`. Once it answers, the peer-state callback says `Up` once,
/// with its main address, though four pairs of groups came up; once it is
/// killed, `Down` once.
pub fn groups_cancel_and_state_per_engine(prov: &str, domains: usize) -> TestResult {
    let (cfg, ev) = super::faults::with_peer_events(two_groups_cfg(prov, domains));
    let a = TransferEngine::new(&cfg).map_err(e2s)?;
    let (mut s0, mut s1) = (vec![7u8; R], vec![9u8; R]);
    let (r0, r1) = (register_in(&a, 0, &mut s0)?, register_in(&a, 1, &mut s1)?);
    let mut p = Peer::spawn_groups(prov, domains, R, 2)?;
    p.stop()?;
    let main = addr(&p);
    let groups = fabriclib::EngineAddress::parse(&p.groups).map_err(e2s)?;
    let (d0, d1) = (desc(&p), Arc::new(MrDesc::parse(&p.desc1).map_err(e2s)?));
    // Six writes parked (the peer never answered): from each of our groups
    // to the peer's group of the same index.
    let ends = super::faults::Ends::new(6);
    for i in 0..3 {
        a.submit_single_write(4096, None, &r0, 0, &d0, 0, ends.on(i)).map_err(e2s)?;
        a.submit_single_write(4096, None, &r1, 0, &d1, 0, ends.on(3 + i)).map_err(e2s)?;
    }
    std::thread::sleep(Duration::from_millis(50));
    for g in &groups.groups {
        if a.peer_state(g).map_err(e2s)? != Some(fabriclib::PeerState::Connecting) {
            return Err(format!("peer_state(group {}) is not Connecting", g.group_index()));
        }
    }
    let n = a.cancel_peer(&main).map_err(e2s)?;
    ends.wait_all(Duration::from_secs(1))?;
    ends.only(&[Status::Canceled]).map_err(|e| format!("{e} (cancel_peer said {n})"))?;
    if n != 6 {
        return Err(format!("cancel_peer canceled {n} requests, 6 were pending"));
    }
    p.signal("CONT");
    // Both pairs come up; the application hears of one engine, once.
    for (r, d) in [(&r0, &d0), (&r1, &d1)] {
        let f = flag();
        a.submit_single_write(4096, None, r, 0, d, 0, OnDone::Flag(f.clone())).map_err(e2s)?;
        wait_flag(&f)?;
    }
    a.add_engine_peer(&groups).map_err(e2s)?;
    let t = Instant::now();
    while groups.groups.iter().any(|g| a.peer_state(g).ok().flatten() != Some(fabriclib::PeerState::Up)) {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("the peer's groups did not all come up".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    p.kill9();
    std::thread::sleep(Duration::from_secs(4)); // past the keepalive timeout of every pair
    let seen: Vec<(bool, fabriclib::PeerState)> =
        ev.lock().unwrap().iter().filter(|e| e.0.engine_id() == main.engine_id()).map(|e| (e.0 == main, e.1)).collect();
    let want = vec![(true, fabriclib::PeerState::Up), (true, fabriclib::PeerState::Down)];
    if seen != want {
        return Err(format!("peer-state reports (main address?, state): {seen:?}, expected {want:?}"));
    }
    if a.peer_state(&groups.groups[1]).map_err(e2s)? != Some(fabriclib::PeerState::Down) {
        return Err("peer_state of the killed peer's group 1 is not Down".into());
    }
    Ok(())
}
