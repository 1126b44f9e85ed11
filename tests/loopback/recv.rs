//! Messages: sends into receive pools, each delivered once with its sender;
//! truncation, garbage, and pools removed while messages are on their way.
use super::*;
use fabriclib::RecvPoolId;

/// What a receive pool's callback got: the message (or the status of a call
/// without one), and who sent it.
type Got = (Result<Vec<u8>, Status>, Option<NetAddr>);

/// A receive pool on `l` of `count` buffers of `len` bytes whose calls
/// arrive on the returned channel.
fn pool(l: &Local, len: usize, count: usize) -> Result<(RecvPoolId, Receiver<Got>), String> {
    let (tx, rx) = channel::<Got>();
    let tx = std::sync::Mutex::new(tx);
    let id = l
        .engine
        .add_recv_pool(len, count, move |m| {
            let got = (m.data.map(<[u8]>::to_vec).map_err(|e| e.status), m.from.map(|o| o.addr.clone()));
            let _ = tx.lock().unwrap().send(got);
        })
        .map_err(e2s)?;
    Ok((id, rx))
}

/// A peer that echoes every message it receives (into a pool of
/// `echo_pool`, "LEN COUNT") back to its sender, with `0xEC` prepended.
fn echo(prov: &str, domains: usize, echo_pool: &str) -> Result<Peer, String> {
    let mut p = Peer::spawn(prov, domains, 4096)?;
    p.send(&format!("ECHO {echo_pool}"));
    p.wait_for("ECHOING")?;
    Ok(p)
}

/// The next message a pool got, within a wait.
type Next = Box<dyn Fn(Duration) -> Result<Vec<u8>, String>>;

/// A receive pool on `l` whose messages arrive on the returned channel, and
/// an echoing peer; every message must name that peer as its sender.
fn echo_peer(l: &Local, prov: &str, domains: usize, echo_pool: &str) -> Result<(Peer, Next, NetAddr), String> {
    let (_, rx) = pool(l, 8192, 32)?;
    let p = echo(prov, domains, echo_pool)?;
    let to = addr(&p);
    let from = to.clone();
    let next: Next = Box::new(move |wait: Duration| match rx.recv_timeout(wait) {
        Ok((Ok(m), Some(f))) if f == from => Ok(m),
        Ok((data, f)) => Err(format!("a call with {:?} from {f:?}", data.map(|d| d.len()))),
        Err(e) => Err(e.to_string()),
    });
    Ok((p, next, to))
}

pub fn send_recv(prov: &str, domains: usize) -> TestResult {
    let l = local(prov, domains, 4096, 4)?;
    let (_p, next, to) = echo_peer(&l, prov, domains, "8192 32")?;
    let mut rng = Rng(5);
    // 200 round trips, one at a time, random sizes and bytes (up to the
    // engine's message limit: 8000 bytes, 4096 on shm).
    let max = l.engine.max_send_size().min(8000) as u64;
    for i in 0..200 {
        let mut msg = vec![0u8; 1 + rng.below(max) as usize];
        rng.fill(&mut msg);
        l.engine.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
        let echo = next(WAIT).map_err(|e| format!("round trip {i}: {e}"))?;
        if !is_echo_of(&echo, &msg) {
            return Err(format!("round trip {i}: echo differs ({} vs {} bytes)", echo.len(), msg.len() + 1));
        }
    }
    // Around tcp;ofi_rxm's 64-byte inject size, and the largest echo the
    // engine takes (the echo is one byte longer): on shm 4096 bytes, its
    // inject size whole, the sender named in the completion's data (no
    // header on the wire); one byte more is refused at submit.
    let max = l.engine.max_send_size();
    if prov == "shm" && max != 4096 {
        return Err(format!("shm takes messages of {max} bytes, not 4096"));
    }
    for len in [56, 63, 64, 65, 72, max.min(8191) - 1] {
        let msg: Vec<u8> = (0..len).map(|k| (k * 7 + len) as u8).collect();
        l.engine.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
        let echo = next(WAIT).map_err(|e| format!("{len} bytes: {e}"))?;
        if !is_echo_of(&echo, &msg) {
            return Err(format!("{len} bytes: the echo differs ({} bytes back)", echo.len()));
        }
    }
    let over = l.engine.submit_send(&to, &vec![0u8; max + 1], OnDone::Nothing);
    if over.as_ref().map_err(|e| e.status) != Err(Status::InvalidArgument) {
        return Err(format!("a message of max_send_size + 1 bytes: {over:?}"));
    }
    // 20 in flight at once: every one comes back exactly once.
    let mut sent: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100 + i as usize]).collect();
    for m in &sent {
        l.engine.submit_send(&to, m, OnDone::Nothing).map_err(e2s)?;
    }
    let mut got: Vec<Vec<u8>> = (0..20).map(|_| next(WAIT).map(|m| m[1..].to_vec())).collect::<Result<_, _>>()?;
    got.sort();
    sent.sort();
    if got != sent {
        return Err("pipelined echoes differ".into());
    }
    Ok(())
}

/// Two peers echo to whoever sent (they learn it from the message alone:
/// they were never told this engine's address); every echo here names the
/// peer it came from, a truncated one too.
pub fn messages_name_their_sender(prov: &str, domains: usize) -> TestResult {
    let l = local(prov, domains, 4096, 41)?;
    let (_, rx) = pool(&l, 100, 8)?;
    let ps = [echo(prov, domains, "4000 8")?, echo(prov, domains, "4000 8")?];
    let addrs = [addr(&ps[0]), addr(&ps[1])];
    for round in 0..10u8 {
        for (k, a) in addrs.iter().enumerate() {
            l.engine.submit_send(a, &[round, k as u8], OnDone::Nothing).map_err(e2s)?;
        }
        for _ in 0..2 {
            match rx.recv_timeout(WAIT).map_err(|e| format!("round {round}: {e}"))? {
                (Ok(m), Some(f)) if m.len() == 3 && m[1] == round && f == addrs[m[2] as usize] => {}
                (data, f) => return Err(format!("round {round}: {data:?} from {f:?}")),
            }
        }
    }
    // 150 bytes echo as 151: over this pool's 100, reported with the sender.
    l.engine.submit_send(&addrs[1], &[7u8; 150], OnDone::Nothing).map_err(e2s)?;
    match rx.recv_timeout(WAIT).map_err(|e| e.to_string())? {
        (Err(Status::Truncated), Some(f)) if f == addrs[1] => Ok(()),
        (data, f) => Err(format!("the oversized echo: {:?} from {f:?}", data.map(|d| d.len()))),
    }
}

/// The calls pool `rx` gets within `wait`.
fn drain(rx: &Receiver<Got>, wait: Duration) -> Vec<Got> {
    let mut out = Vec::new();
    while let Ok(g) = rx.recv_timeout(wait) {
        out.push(g);
    }
    out
}

/// The pool's last call is `Canceled` and comes once its messages have; no
/// call follows. Messages sent after a removal land in the next pool, every
/// one exactly once, whether the removed buffers were withdrawn (libfabric)
/// or not (verbs); with no pool at all they wait for the next one.
pub fn pools_removed_lose_nothing(prov: &str, domains: usize) -> TestResult {
    let l = local(prov, domains, 4096, 43)?;
    let p = echo(prov, domains, "1024 16")?;
    let to = addr(&p);
    let exchange = |from: u8, n: u8| -> Result<Vec<Vec<u8>>, String> {
        let sent: Vec<Vec<u8>> = (from..from + n).map(|i| vec![i; 1 + i as usize]).collect();
        for m in &sent {
            l.engine.submit_send(&to, m, OnDone::Nothing).map_err(e2s)?;
        }
        Ok(sent.into_iter().map(|m| echoed(&m)).collect())
    };
    let take = |rx: &Receiver<Got>, n: usize, what: &str| -> Result<Vec<Vec<u8>>, String> {
        let mut got = Vec::new();
        for i in 0..n {
            match rx.recv_timeout(WAIT).map_err(|e| format!("{what}: message {i} of {n}: {e}"))? {
                (Ok(m), Some(f)) if f == to => got.push(m),
                other => return Err(format!("{what}: message {i}: {other:?}")),
            }
        }
        got.sort();
        Ok(got)
    };
    let ended = |rx: &Receiver<Got>, what: &str| -> TestResult {
        let rest = drain(rx, Duration::from_millis(200));
        match rest.as_slice() {
            [(Err(Status::Canceled), None)] => Ok(()),
            other => Err(format!("{what} after its removal: {other:?}")),
        }
    };
    let (a, rx_a) = pool(&l, 1024, 4)?;
    let want = exchange(0, 10)?;
    if take(&rx_a, 10, "pool A")? != want {
        return Err("pool A: the echoes differ".into());
    }
    l.engine.remove_recv_pool(a).map_err(e2s)?;
    ended(&rx_a, "pool A")?;
    let (b, rx_b) = pool(&l, 1024, 4)?;
    let want = exchange(10, 20)?;
    if take(&rx_b, 20, "pool B")? != want {
        return Err("pool B: the echoes differ".into());
    }
    // No pool at all: the echoes wait (in the provider, or in a removed
    // pool's buffer) for the next pool.
    l.engine.remove_recv_pool(b).map_err(e2s)?;
    ended(&rx_b, "pool B")?;
    let want = exchange(30, 3)?;
    std::thread::sleep(Duration::from_millis(200));
    let (c, rx_c) = pool(&l, 1024, 4)?;
    if take(&rx_c, 3, "pool C")? != want {
        return Err("pool C: the echoes that waited differ".into());
    }
    if let Some(g) = drain(&rx_a, Duration::ZERO).into_iter().chain(drain(&rx_b, Duration::ZERO)).next() {
        return Err(format!("a removed pool was called again: {g:?}"));
    }
    match l.engine.remove_recv_pool(a) {
        Err(e) if e.status == Status::NotFound => {}
        other => return Err(format!("pool A removed twice: {other:?}")),
    }
    l.engine.remove_recv_pool(c).map_err(e2s)?;
    ended(&rx_c, "pool C")
}
/// Random bytes into a receive pool, including messages larger than its
/// buffers: the receiver reports truncation to its callback and keeps
/// serving; well-formed traffic afterwards round-trips intact.
pub fn garbage_into_receive_pool(prov: &str, domains: usize) -> TestResult {
    let l = local(prov, domains, 4096, 11)?;
    let (_p, next, to) = echo_peer(&l, prov, domains, "1024 4")?;
    let mut rng = Rng(12);
    let mut echoed = 0;
    for _ in 0..100 {
        // A third of them overflow the peer's 1024-byte buffers.
        let mut msg = vec![0u8; 1 + rng.below(3000) as usize];
        rng.fill(&mut msg);
        l.engine.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
        if msg.len() <= 1024 {
            echoed += 1;
        }
    }
    for i in 0..echoed {
        let m = next(WAIT).map_err(|e| format!("echo {i} of {echoed}: {e}"))?;
        if m[0] != 0xEC || m.len() > 1025 {
            return Err(format!("echo {i}: {} bytes, first {:#x}", m.len(), m[0]));
        }
    }
    if next(Duration::from_millis(300)).is_ok() {
        return Err("an oversized message was echoed".into());
    }
    let msg = b"still serving".to_vec();
    l.engine.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
    let m = next(WAIT)?;
    if m[1..] != msg[..] {
        return Err("the echo after the garbage differs".into());
    }
    Ok(())
}

/// A pool whose callback runs on the worker (`add_recv_pool_on_worker`):
/// every message is answered from the callback itself, exactly once and
/// byte for byte, one at a time and many in flight; a call that waits for
/// the worker is refused from it rather than hanging; its last call
/// (`Canceled`) comes from the worker too, and nothing after it.
pub fn pool_on_worker(prov: &str, domains: usize) -> TestResult {
    let a = local(prov, domains, 4096, 31)?;
    let (_, echoes) = pool(&a, 8192, 32)?;
    let cfg = EngineConfig {
        provider: Some(prov.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: domains,
        ..Default::default()
    };
    let b = Arc::new(TransferEngine::new(&cfg).map_err(e2s)?);
    // What b's callback saw: (the thread it ran on, the status of its call
    // that waits for the worker, or of the message).
    let (tx, seen) = channel::<(String, Status)>();
    let (weak, tx) = (Arc::downgrade(&b), std::sync::Mutex::new(tx));
    let id = b
        .add_recv_pool_on_worker(8192, 8, move |m| {
            let thread = std::thread::current().name().unwrap_or("").to_string();
            let Some(e) = weak.upgrade() else { return };
            let status = match (m.data, m.from) {
                (Ok(d), Some(from)) => {
                    let reply = echoed(d);
                    e.submit_send(&from.addr, &reply, OnDone::Nothing).expect("a send from the worker's callback");
                    // Waits for this very worker: refused, not a hang.
                    e.remove_recv_pool(RecvPoolId(u64::MAX)).map_or_else(|x| x.status, |_| Status::Ok)
                }
                (Err(x), _) => x.status,
                (Ok(_), None) => Status::NotFound,
            };
            let _ = tx.lock().unwrap().send((thread, status));
        })
        .map_err(e2s)?;
    let to = b.address().clone();
    let want_seen = |what: &str, status: Status| -> Result<(), String> {
        match seen.recv_timeout(WAIT) {
            Ok((t, s)) if t.starts_with("fabriclib-w") && s == status => Ok(()),
            Ok((t, s)) => {
                Err(format!("{what}: the callback ran on {t:?} and saw {s:?}, not the worker and {status:?}"))
            }
            Err(e) => Err(format!("{what}: {e}")),
        }
    };
    let mut rng = Rng(32);
    for i in 0..50 {
        let mut msg = vec![0u8; 1 + rng.below(4000) as usize];
        rng.fill(&mut msg);
        a.engine.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
        match echoes.recv_timeout(WAIT) {
            Ok((Ok(e), Some(f))) if f == to && is_echo_of(&e, &msg) => {}
            other => return Err(format!("round trip {i}: {:?}", other.map(|(d, f)| (d.map(|d| d.len()), f)))),
        }
        want_seen(&format!("round trip {i}"), Status::InvalidArgument)?;
    }
    let mut sent: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 50 + i as usize]).collect();
    for m in &sent {
        a.engine.submit_send(&to, m, OnDone::Nothing).map_err(e2s)?;
    }
    let mut got = Vec::new();
    for _ in 0..20 {
        match echoes.recv_timeout(WAIT) {
            Ok((Ok(e), _)) => got.push(e[1..].to_vec()),
            other => return Err(format!("pipelined: {:?}", other.map(|(d, _)| d.map(|d| d.len())))),
        }
        want_seen("pipelined", Status::InvalidArgument)?;
    }
    got.sort();
    sent.sort();
    if got != sent {
        return Err("pipelined echoes differ".into());
    }
    b.remove_recv_pool(id).map_err(e2s)?;
    want_seen("last call", Status::Canceled)?;
    if let Ok(extra) = seen.recv_timeout(Duration::from_millis(200)) {
        return Err(format!("a call after the last one: {extra:?}"));
    }
    Ok(())
}

/// shm: a worker with nothing armed naps on its doorbell (src/bell.rs), so
/// the first message after a quiet spell is taken at once, not after the
/// nap: with naps of 100 ms, the median of 7 such messages (send to the
/// receiver's on-worker callback) within 15 ms. (tcp under the default
/// `spin` policy has no wait object and naps blindly: reported only.)
pub fn a_message_after_quiet_wakes_the_receiver(prov: &str, domains: usize) -> TestResult {
    let cfg = EngineConfig { nic_count: domains, idle_nap_us: 100_000, ..Default::default() };
    let (a, b) = (local_with(cfg.clone(), prov, 4096, 33)?, local_with(cfg, prov, 4096, 34)?);
    let got = Arc::new(AtomicU32::new(0));
    let g = got.clone();
    b.engine
        .add_recv_pool_on_worker(256, 8, move |m| {
            if m.data.is_ok() {
                g.fetch_add(1, Ordering::Release);
            }
        })
        .map_err(e2s)?;
    let to = b.engine.address().clone();
    let mut took = Vec::new();
    for round in 0..8u32 {
        std::thread::sleep(Duration::from_millis(15)); // both workers nap
        let t = Instant::now();
        a.engine.submit_send(&to, &round.to_le_bytes(), OnDone::Nothing).map_err(e2s)?;
        while got.load(Ordering::Acquire) <= round && t.elapsed() < WAIT {
            std::thread::sleep(Duration::from_micros(50));
        }
        if got.load(Ordering::Acquire) != round + 1 {
            return Err(format!("round {round}: {} messages taken", got.load(Ordering::Acquire)));
        }
        // The first round also greets the peer: not counted.
        if round > 0 {
            took.push(t.elapsed());
        }
    }
    took.sort();
    let median = took[took.len() / 2];
    println!("    first message after a quiet spell: {median:?} (median of {})", took.len());
    if prov == "shm" && median > Duration::from_millis(15) {
        return Err(format!("the first message after a quiet spell took {median:?} (median of {took:?})"));
    }
    Ok(())
}

/// Two engines in this one process, driven by this one thread (manual
/// progress), exchange messages; then one is destroyed while the other is
/// not driven, so its goodbye goes unanswered. The survivor then handles
/// that goodbye, sends to the destroyed engine (refused: `PeerDown`) and is
/// destroyed in turn. On shm a send to an endpoint closed in the sender's
/// own process crashes it: the survivor must post nothing more there.
pub fn an_engine_outlives_its_peer_in_one_process(prov: &str, domains: usize) -> TestResult {
    let (a, b) = two_manual_engines(prov, domains, Duration::from_millis(300))?;
    let got = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let g = got.clone();
    a.add_recv_pool_on_worker(64, 4, move |m| {
        if m.data.is_ok_and(|d| d == b"pong") {
            g.fetch_add(1, Ordering::SeqCst);
        }
    })
    .map_err(e2s)?;
    let weak = Arc::downgrade(&b);
    b.add_recv_pool_on_worker(64, 4, move |m| {
        if let (Ok(b"ping"), Some(from), Some(b)) = (m.data, m.from, weak.upgrade()) {
            b.submit_send(&from.addr, b"pong", OnDone::Nothing).expect("the answer");
        }
    })
    .map_err(e2s)?;
    let (to_a, to_b) = (a.address().clone(), b.address().clone());
    for i in 1..=20 {
        a.submit_send(&to_b, b"ping", OnDone::Nothing).map_err(e2s)?;
        let t = Instant::now();
        while got.load(Ordering::SeqCst) < i {
            a.progress();
            b.progress();
            if t.elapsed() > WAIT {
                return Err(format!("round trip {i}: no answer"));
            }
        }
    }
    let t = Instant::now();
    drop(a);
    if t.elapsed() > Duration::from_secs(3) {
        return Err(format!("the first destroy took {:?}", t.elapsed()));
    }
    // The survivor handles the goodbye (and must not answer it), then sends.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(100) {
        b.progress();
    }
    let f = flag();
    b.submit_send(&to_a, b"late", OnDone::Flag(f.clone())).map_err(e2s)?;
    let t = Instant::now();
    while f.load(Ordering::Acquire) & FLAG_DONE == 0 {
        b.progress();
        if t.elapsed() > WAIT {
            return Err("a send to the destroyed engine never ended".into());
        }
    }
    let status = Status::from_code((f.load(Ordering::Acquire) & 0xffff) as i32);
    if status != Some(Status::PeerDown) {
        return Err(format!("a send to the destroyed engine ended {status:?}, not PeerDown"));
    }
    let t = Instant::now();
    drop(b);
    if t.elapsed() > Duration::from_secs(3) {
        return Err(format!("the second destroy took {:?}", t.elapsed()));
    }
    Ok(())
}

/// With manual progress a pool added on the worker has its callback run
/// inside the pass, on the thread in `progress`: the answer it submits goes
/// out, a call that waits for the worker is refused rather than waiting for
/// itself, and a nested `progress` does nothing. The other engine's pool
/// (added plainly) gets every answer, bytes intact.
pub fn receive_pool_on_worker_in_manual_progress(prov: &str, domains: usize) -> TestResult {
    let (a, b) = two_manual_engines(prov, domains, Duration::from_millis(300))?;
    let answers = messages_into_channel(&a, 8)?;
    // What b's callback saw: its thread, a waiting call's status, a nested progress.
    let (stx, seen) = channel::<(std::thread::ThreadId, Status, bool)>();
    let (weak, stx) = (Arc::downgrade(&b), std::sync::Mutex::new(stx));
    b.add_recv_pool_on_worker(4096, 8, move |m| {
        let (Ok(d), Some(from), Some(b)) = (m.data, m.from, weak.upgrade()) else { return };
        let reply = echoed(d);
        b.submit_send(&from.addr, &reply, OnDone::Nothing).expect("an answer from the callback");
        let waited = b.remove_recv_pool(RecvPoolId(u64::MAX)).map_or_else(|x| x.status, |_| Status::Ok);
        let _ = stx.lock().unwrap().send((std::thread::current().id(), waited, b.progress()));
    })
    .map_err(e2s)?;
    let (me, to) = (std::thread::current().id(), b.address().clone());
    let mut rng = Rng(77);
    for i in 0..30 {
        let mut msg = vec![0u8; 1 + rng.below(4000) as usize];
        rng.fill(&mut msg);
        a.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
        let got = progress_until_answer(&[&a, &b], &answers, Instant::now(), || format!("round trip {i}: no answer"))?;
        if !is_echo_of(&got, &msg) {
            return Err(format!("round trip {i}: the answer differs ({} bytes for {})", got.len(), msg.len() + 1));
        }
        match seen.try_recv() {
            Ok((t, Status::InvalidArgument, false)) if t == me => {}
            other => return Err(format!("round trip {i}: the callback saw {other:?}")),
        }
    }
    Ok(())
}

/// An answer that an on-worker pool's callback submits leaves in the pass
/// that took the message, not in the next one: once `b`'s callback has run,
/// `b` is never progressed again in the round, yet `a` gets the answer.
pub fn an_answer_leaves_in_the_pass_that_took_the_message(prov: &str, domains: usize) -> TestResult {
    let (a, b) = two_manual_engines(prov, domains, Duration::from_millis(300))?;
    let answers = messages_into_channel(&a, 8)?;
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (weak, t2) = (Arc::downgrade(&b), taken.clone());
    b.add_recv_pool_on_worker(4096, 8, move |m| {
        let (Ok(d), Some(from), Some(b)) = (m.data, m.from, weak.upgrade()) else { return };
        let reply = echoed(d);
        b.submit_send(&from.addr, &reply, OnDone::Nothing).expect("an answer from the callback");
        t2.fetch_add(1, Ordering::SeqCst);
    })
    .map_err(e2s)?;
    let to = b.address().clone();
    // One exchange with both progressed first: connections (verbs' handshake
    // is driven by the passes of the side that sends) are up both ways.
    a.submit_send(&to, b"warm", OnDone::Nothing).map_err(e2s)?;
    progress_until_answer(&[&a, &b], &answers, Instant::now(), || "the first exchange got no answer".into())?;
    for i in 1..=20u8 {
        let msg = vec![i; 64 + i as usize];
        a.submit_send(&to, &msg, OnDone::Nothing).map_err(e2s)?;
        let t = Instant::now();
        // Both progressed until b's callback has run: not one pass of b after it.
        while taken.load(Ordering::SeqCst) == i as usize {
            a.progress();
            b.progress();
            if t.elapsed() > WAIT {
                return Err(format!("round {i}: b never took the message"));
            }
        }
        let got = progress_until_answer(&[&a], &answers, t, || {
            format!("round {i}: the answer did not leave in the pass that took the message")
        })?;
        if !is_echo_of(&got, &msg) {
            return Err(format!("round {i}: the answer differs ({} bytes for {})", got.len(), msg.len() + 1));
        }
    }
    Ok(())
}

/// Progresses `engines` (in turn, on this thread) until `answers` has one,
/// or `WAIT` after `since` has passed (then `late()` is the error).
fn progress_until_answer(
    engines: &[&TransferEngine],
    answers: &std::sync::mpsc::Receiver<Vec<u8>>,
    since: Instant,
    late: impl Fn() -> String,
) -> Result<Vec<u8>, String> {
    loop {
        for e in engines {
            e.progress();
        }
        if let Ok(g) = answers.try_recv() {
            return Ok(g);
        }
        if since.elapsed() > WAIT {
            return Err(late());
        }
    }
}

/// The echo of `d` (`0xEC` prepended), as every answering pool here sends it.
fn echoed(d: &[u8]) -> Vec<u8> {
    [&[0xEC][..], d].concat()
}

/// Whether `e` is the echo of `msg`.
fn is_echo_of(e: &[u8], msg: &[u8]) -> bool {
    e.first() == Some(&0xEC) && e[1..] == *msg
}

/// A receive pool on `e` of `count` buffers whose callback forwards every
/// message's bytes.
fn messages_into_channel(e: &TransferEngine, count: usize) -> Result<std::sync::mpsc::Receiver<Vec<u8>>, String> {
    let (tx, rx) = channel::<Vec<u8>>();
    let tx = std::sync::Mutex::new(tx);
    e.add_recv_pool(4096, count, move |m| {
        if let Ok(d) = m.data {
            let _ = tx.lock().unwrap().send(d.to_vec());
        }
    })
    .map_err(e2s)?;
    Ok(rx)
}

/// Two engines in manual progress in this process (the second shared, for
/// its own callbacks to answer through). Whichever is dropped first says
/// goodbye to the other, which this thread is not progressing then: it
/// waits `drain_timeout` for the answer.
fn two_manual_engines(
    prov: &str,
    domains: usize,
    drain_timeout: Duration,
) -> Result<(TransferEngine, Arc<TransferEngine>), String> {
    let cfg = EngineConfig {
        provider: Some(prov.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: domains,
        manual_progress: true,
        drain_timeout,
        ..Default::default()
    };
    Ok((TransferEngine::new(&cfg).map_err(e2s)?, Arc::new(TransferEngine::new(&cfg).map_err(e2s)?)))
}

/// More sends at once than there are send slots: those that found none wait
/// for the worker's own slots, and every message arrives once, bytes
/// intact. Each gives its slot back: those posted, those that ended before
/// they were posted (to a peer that never answers, past their deadline), and
/// those the submission queue refused.
pub fn sends_beyond_the_slots(prov: &str, domains: usize) -> TestResult {
    const N: usize = 150;
    let cfg = |submit_queue, max_inflight| EngineConfig {
        provider: Some(prov.into()),
        bind_addr: Some("127.0.0.1".into()),
        nic_count: domains,
        manual_progress: true,
        submit_queue,
        max_inflight,
        drain_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let (a, b) =
        (TransferEngine::new(&cfg(2 * N, 2 * N)).map_err(e2s)?, TransferEngine::new(&cfg(2 * N, 2 * N)).map_err(e2s)?);
    let slots = a.send_slots_free();
    let got = messages_into_channel(&b, 64)?;
    let to = b.address().clone();
    let warm = faults::Ends::new(1);
    a.submit_send(&to, b"warm", warm.on(0)).map_err(e2s)?;
    progress_until(&[&a, &b], "the first send", || warm.done() == 1)?;
    got.recv_timeout(WAIT).map_err(|e| format!("the first message: {e}"))?;
    if a.send_slots_free() != slots || slots == 0 {
        return Err(format!("{} of {slots} send slots free after one send ended", a.send_slots_free()));
    }
    let (ends, mut rng) = (faults::Ends::new(N), Rng(5));
    let mut sent: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let mut m = vec![0u8; 2 + rng.below(a.max_send_size().min(4096) as u64 - 2) as usize];
            rng.fill(&mut m);
            m[..2].copy_from_slice(&(i as u16).to_le_bytes());
            m
        })
        .collect();
    for (i, m) in sent.iter().enumerate() {
        a.submit_send(&to, m, ends.on(i)).map_err(e2s)?;
    }
    if a.send_slots_free() != 0 {
        return Err(format!("{N} sends queued, yet {} send slots free", a.send_slots_free()));
    }
    let mut arrived = Vec::new();
    progress_until(&[&a, &b], "every message", || {
        arrived.extend(got.try_iter());
        arrived.len() >= N
    })?;
    progress_until(&[&a, &b], "every send's report", || ends.done() == N)?;
    ends.once()?;
    ends.only(&[Status::Ok])?;
    arrived.extend(got.try_iter());
    arrived.sort();
    sent.sort();
    if arrived != sent {
        return Err(format!("{} messages arrived for {N} sent, or their bytes differ", arrived.len()));
    }
    if a.send_slots_free() != slots {
        return Err(format!("{} of {slots} send slots free after every send ended", a.send_slots_free()));
    }
    // Parked on a peer that never answers the handshake, then past their deadline.
    let mut mute = Peer::spawn(prov, domains, 4096)?;
    mute.stop()?;
    let late = faults::Ends::new(10);
    for i in 0..10 {
        let opts = late.on(i).deadline(fabriclib::Deadline::After(Duration::from_millis(200)));
        a.submit_send(&addr(&mute), &[i as u8; 100], opts).map_err(e2s)?;
    }
    progress_until(&[&a], "the sends to a mute peer", || late.done() == 10)?;
    mute.kill9();
    late.once()?;
    late.only(&[Status::TimedOut])?;
    if a.send_slots_free() != slots {
        return Err(format!("{} of {slots} send slots free after sends ended unposted", a.send_slots_free()));
    }
    // Refused at submit, by a full submission queue or by `max_inflight`,
    // again and again (as a caller that retries on `Again` does): each
    // message's slot is given back.
    for (queue, inflight) in [(4, 100), (100, 4)] {
        let c = TransferEngine::new(&cfg(queue, inflight)).map_err(e2s)?;
        let mut queued = 0;
        for _ in 0..2 * slots {
            match c.submit_send(&to, b"queued", OnDone::Nothing) {
                Ok(_) => queued += 1,
                Err(e) if e.status == Status::Again => {}
                Err(e) => return Err(format!("a send refused with {e}")),
            }
        }
        if queued != 4 || c.send_slots_free() != slots - queued {
            return Err(format!(
                "submit queue {queue}, max_inflight {inflight}: {queued} sends queued, {} of {slots} send slots free",
                c.send_slots_free()
            ));
        }
    }
    Ok(())
}

/// Progresses `engines` (in turn, on this thread) until `done()`, for up to `WAIT`.
fn progress_until(engines: &[&TransferEngine], what: &str, mut done: impl FnMut() -> bool) -> TestResult {
    let t = Instant::now();
    while !done() {
        engines.iter().for_each(|e| _ = e.progress());
        if t.elapsed() > WAIT {
            return Err(format!("{what}: not within {WAIT:?}"));
        }
    }
    Ok(())
}
