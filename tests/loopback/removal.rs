//! Peers that go away. Forgotten by the application (`remove_peer`): what is
//! pending on them ends with `Canceled`, they are never pinged or reported
//! again, and the descriptors they own stay valid (the next request greets
//! them afresh). Found dead just as a request to them is admitted: the
//! request ends `PeerDown`, and the worker goes on.
use super::faults::{Ends, still_serves, wait_peer_event, with_peer_events};
use super::*;
use fabriclib::PeerState;

pub fn peers_removed_end_their_requests(prov: &str, domains: usize) -> TestResult {
    // A peer that never answers is reported down within 500 ms here.
    let cfg = EngineConfig {
        nic_count: domains,
        peer_timeout: Duration::from_millis(500),
        keepalive_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let (cfg, ev) = with_peer_events(cfg);
    let l = local_with(cfg, prov, 4096, 91)?;
    let (mut live, mute) = (Peer::spawn(prov, domains, 4096)?, Peer::spawn(prov, domains, 4096)?);
    let (live_addr, mute_addr) = (addr(&live), addr(&mute));
    // `live` is up, and its descriptor held by the engine (a write went through it).
    let live_desc = desc(&live);
    still_serves(&l, &mut live, 0x71, 0, 4096)?;
    wait_peer_event(&ev, &live_addr, PeerState::Up, WAIT)?;
    // `mute` is stopped: a write to it waits for the handshake.
    mute.stop()?;
    let ends = Ends::new(1);
    l.engine.submit_single_write(64, None, &l.mr, 0, &desc(&mute), 0, ends.on(0)).map_err(e2s)?;
    // A peer that a peer set lists is not removed until the set is.
    let set = l.engine.add_peer_set(std::slice::from_ref(&live_addr)).map_err(e2s)?;
    match l.engine.remove_peer(&live_addr) {
        Err(e) if e.status == Status::InvalidArgument && e.message.contains("peer set") => {}
        other => return Err(format!("removing a peer of a peer set: {other:?}")),
    }
    l.engine.remove_peer_set(set).map_err(e2s)?;
    // Removing `mute` ends its write, once; then it is unknown.
    let t = Instant::now();
    let n = l.engine.remove_peer(&mute_addr).map_err(e2s)?;
    ends.wait_all(WAIT)?;
    if n != 1 || ends.status(0) != Status::Canceled {
        return Err(format!("remove_peer ended {n} requests, the write {:?}", ends.status(0)));
    }
    match (l.engine.remove_peer(&mute_addr), l.engine.peer_state(&mute_addr)) {
        (Err(e), Ok(None)) if e.status == Status::NotFound => {}
        other => return Err(format!("a removed peer: removed again {:?}, state {:?}", other.0, other.1)),
    }
    // `live` removed: nothing was pending; its descriptor greets it afresh,
    // and it is reported up again, as a new peer.
    if l.engine.remove_peer(&live_addr).map_err(e2s)? != 0 {
        return Err("remove_peer ended requests of an idle peer".into());
    }
    let f = flag();
    live.expect(0x72, 1);
    l.engine.submit_single_write(4096, Some(0x72), &l.mr, 0, &live_desc, 0, OnDone::Flag(f.clone())).map_err(e2s)?;
    wait_flag(&f)?;
    live.fired(0x72)?;
    let ups = |who: &NetAddr| ev.lock().unwrap().iter().filter(|e| e.0 == *who && e.1 == PeerState::Up).count();
    let start = Instant::now();
    while ups(&live_addr) < 2 && start.elapsed() < WAIT {
        std::thread::sleep(Duration::from_millis(1));
    }
    // `mute` would have been reported down by now (its handshake timed
    // out); removed, it is not even pinged.
    // What was said of it is read before it runs again: once resumed, its
    // overdue keepalive greets this engine, which then (rightly) reports a
    // stranger that greets it as a new peer, up (seen on verbs in the VM).
    std::thread::sleep(Duration::from_millis(800).saturating_sub(t.elapsed()));
    let said: Vec<_> = ev.lock().unwrap().iter().filter(|e| e.0 == mute_addr).map(|e| (e.1, e.2)).collect();
    mute.signal("CONT");
    match (ups(&live_addr), said.as_slice()) {
        (2, []) => Ok(()),
        (n, said) => Err(format!("the live peer reported up {n} times; the removed one: {said:?}")),
    }
}

/// shm: a peer whose process died is found dead by the check of its
/// liveness record as a request to it is admitted, before any keepalive
/// tick noticed (manual progress: this process decides when the worker
/// runs). The request ends `PeerDown`; the worker goes on (it used to panic
/// there: the request had already ended with its peer).
pub fn a_peer_found_dead_at_admission(prov: &str, domains: usize) -> TestResult {
    if prov != "shm" {
        eprintln!("    (shm only: its liveness records)");
        return Ok(());
    }
    let cfg = EngineConfig { nic_count: domains, manual_progress: true, ..Default::default() };
    let l = local_with(cfg, prov, 4096, 93)?;
    let drive = |f: &AtomicU32| -> TestResult {
        let t = Instant::now();
        while f.load(Ordering::Acquire) & FLAG_DONE == 0 {
            l.engine.progress();
            if t.elapsed() > WAIT {
                return Err("a request did not end".into());
            }
        }
        Ok(())
    };
    let mut p = Peer::spawn(prov, domains, 4096)?;
    let d = desc(&p);
    let up = flag();
    l.engine.submit_single_write(64, None, &l.mr, 0, &d, 0, OnDone::Flag(up.clone())).map_err(e2s)?;
    drive(&up)?;
    if up.load(Ordering::Acquire) & 0xffff != Status::Ok as u32 {
        return Err(format!("the first write ended {:#x}", up.load(Ordering::Acquire)));
    }
    p.kill9();
    let f = flag();
    l.engine.submit_single_write(64, None, &l.mr, 0, &d, 0, OnDone::Flag(f.clone())).map_err(e2s)?;
    drive(&f)?;
    let st = f.load(Ordering::Acquire) & 0xffff;
    if st != Status::PeerDown as u32 {
        return Err(format!("the write to the dead peer ended {st:#x}, not PeerDown"));
    }
    // The worker goes on: a request to another peer still lands.
    let q = Peer::spawn(prov, domains, 4096)?;
    let g = flag();
    l.engine.submit_single_write(64, None, &l.mr, 0, &desc(&q), 0, OnDone::Flag(g.clone())).map_err(e2s)?;
    drive(&g)
}
