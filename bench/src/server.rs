//! `fabriclib-bench server`: the passive side. It owns a TransferEngine and a
//! raw endpoint on the provider the client asks for, a target region, and
//! answers the client's commands: count immediates, hash what landed, or
//! answer pings (engine or raw) so the client can time round trips.
use crate::ctl::{Ctl, R, err_msg, field_str, field_u64, hash_pages, hex, permutation, unhex};
use crate::raw::{RawEp, RawMr, RawWrite};
use fabriclib::{EngineConfig, MrDesc, MrHandle, NetAddr, OnDone, TransferEngine};
use serde_json::{Value, json};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// How long any one command may take before the server reports an error.
const DEADLINE: Duration = Duration::from_secs(60);
/// Largest ping message (a receive buffer's size).
pub const MSG: usize = 64 * 1024;

/// A region registered with both the engine and the raw endpoint.
pub struct Region {
    pub mem: crate::mem::Mem,
    pub mr: MrHandle,
    pub raw: RawMr,
}

impl Region {
    /// `len` bytes, huge-page backed if `--hugepages` asked for it.
    pub fn new(engine: &TransferEngine, raw: &mut RawEp, len: usize) -> R<Region> {
        let huge = crate::mem::HUGE.load(std::sync::atomic::Ordering::Relaxed);
        let mut mem = crate::mem::Mem::new(len.max(64), huge)?;
        // SAFETY: mem lives in the Region, which the owner drops only after both
        // registrations are closed (see `close`).
        let mr = unsafe { engine.register(mem.as_mut_ptr(), mem.len()) }.map_err(|e| e.to_string())?;
        let raw = raw.register(mem.as_mut_ptr(), mem.len())?;
        Ok(Region { mem, mr, raw })
    }
    pub fn close(self, raw: &mut RawEp) {
        raw.deregister(self.raw);
        drop(self.mr);
    }
}

struct Peer {
    desc: Arc<MrDesc>,
    raw: u64,
    raw_base: u64,
    raw_key: u64,
}

struct Open {
    engine: Arc<TransferEngine>,
    raw: RawEp,
    buf: Option<Region>,
    msgs: Region,
    peer: Option<Peer>,
    /// Where the engine's receive callback echoes messages (set while a send pong runs).
    echo_to: Arc<Mutex<Option<NetAddr>>>,
    echoed: Arc<AtomicU64>,
}

impl Open {
    /// `bind`: the server's own `--bind`, else what the client asked for (loopback).
    fn new(cmd: &Value, bind: Option<&str>) -> R<Open> {
        let cfg = EngineConfig {
            provider: Some(field_str(cmd, "provider")?.to_string()),
            bind_addr: bind.or_else(|| cmd.get("bind").and_then(Value::as_str)).map(String::from),
            nic_count: field_u64(cmd, "domains")? as usize,
            idle_policy: crate::idle_policy(),
            worker_cpus: crate::engine_cpus(),
            callback_cpus: crate::engine_cpus(),
            manual_progress: crate::manual_progress(),
            ..Default::default()
        };
        let engine = Arc::new(TransferEngine::new(&cfg).map_err(|e| e.to_string())?);
        let mut raw = RawEp::open(engine.provider(), cfg.bind_addr.as_deref())?;
        let mut msgs = Region::new(&engine, &mut raw, 2 * MSG)?;
        // Raw: receive into the first half, answer from the second.
        raw.post_recv(msgs.mem.as_mut_ptr(), MSG, msgs.raw.desc)?;
        let (echo_to, echoed) = (Arc::new(Mutex::new(None::<NetAddr>)), Arc::new(AtomicU64::new(0)));
        let (weak, to, n) = (Arc::downgrade(&engine), echo_to.clone(), echoed.clone());
        crate::recv_pool(&engine, MSG, 16, move |m| {
            let (Ok(msg), Some(e)) = (m.data, weak.upgrade()) else { return };
            if let Some(to) = to.lock().unwrap().as_ref() {
                if e.submit_send(to, msg, OnDone::Nothing).is_ok() {
                    n.fetch_add(1, Ordering::Release);
                }
            }
        })
        .map_err(|e| e.to_string())?;
        Ok(Open { engine, raw, buf: None, msgs, peer: None, echo_to, echoed })
    }

    fn close(mut self) {
        if let Some(b) = self.buf.take() {
            b.close(&mut self.raw);
        }
        self.msgs.close(&mut self.raw);
    }

    fn handle(&mut self, op: &str, cmd: &Value, ctl: &mut Ctl) -> R<Value> {
        let deadline = Instant::now() + DEADLINE;
        match op {
            "alloc" => {
                if let Some(b) = self.buf.take() {
                    b.close(&mut self.raw);
                }
                let huge = cmd.get("huge").and_then(|v| v.as_bool()).unwrap_or(false);
                crate::mem::HUGE.store(huge, std::sync::atomic::Ordering::Relaxed);
                let b = Region::new(&self.engine, &mut self.raw, field_u64(cmd, "size")? as usize)?;
                let v = json!({ "desc": hex(&b.mr.descriptor().to_bytes()), "raw_base": b.raw.remote.remote_base, "raw_key": b.raw.remote.key });
                self.buf = Some(b);
                Ok(v)
            }
            "clear" => {
                self.buf_mut()?.mem.fill(0);
                Ok(json!({}))
            }
            "hash" => {
                let (page, n, seed) =
                    (field_u64(cmd, "page")? as usize, field_u64(cmd, "n")? as usize, field_u64(cmd, "seed")?);
                let mem = &mut self.buf_mut()?.mem;
                // Self-test of the verification: damage one landed byte.
                if std::env::var_os("FABRICLIB_BENCH_CORRUPT").is_some() {
                    mem[0] ^= 0xff;
                }
                if page * n > mem.len() {
                    return Err(format!("hash: {n} pages of {page} bytes exceed the {}-byte region", mem.len()));
                }
                Ok(json!({ "hash": hash_pages(mem, page, &permutation(seed, n)).to_string() }))
            }
            "peer" => {
                let desc = MrDesc::parse(&unhex(field_str(cmd, "desc")?)?).map_err(|e| e.to_string())?;
                let raw = self.raw.insert(&unhex(field_str(cmd, "raw")?)?)?;
                self.peer = Some(Peer {
                    desc: Arc::new(desc),
                    raw,
                    raw_base: field_u64(cmd, "raw_base")?,
                    raw_key: field_u64(cmd, "raw_key")?,
                });
                Ok(json!({}))
            }
            "expect" => {
                let (imm, count) = (field_u64(cmd, "imm")? as u32, field_u64(cmd, "count")?);
                if field_str(cmd, "mode")? == "engine" {
                    let (tx, rx) = mpsc::channel();
                    let done = OnDone::callback(move |r| drop(tx.send(r)));
                    self.engine.expect_imm_count(imm, count as u32, done).map_err(|e| e.to_string())?;
                    ctl.send(&json!({ "armed": true }))?;
                    // Manual progress: this thread drives the engine while it waits.
                    let got = if self.engine.is_manual() {
                        let mut got = None;
                        let arrived = || {
                            got = got.take().or_else(|| rx.try_recv().ok());
                            got.is_some()
                        };
                        crate::client::spin_until(&self.engine, arrived, Instant::now() + DEADLINE).ok();
                        got
                    } else {
                        rx.recv_timeout(DEADLINE).ok()
                    };
                    match got.ok_or(()) {
                        Ok(Ok(())) => Ok(json!({})),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(()) => Err(format!("engine: {count} immediates {imm} did not arrive in time")),
                    }
                } else {
                    // Through a relay, the relay thread takes (and on shm copies) what
                    // arrives; armed once it is up.
                    let wait = |ep: &mut RawEp| ep.wait_imm(imm, count, deadline);
                    armed_raw(&mut self.raw, cmd, ctl, |x| x.call(&wait)).map(|_| json!({}))
                }
            }
            "pong" => self.pong(cmd, ctl, deadline),
            other => Err(format!("unknown command {other}")),
        }
    }

    fn buf_mut(&mut self) -> R<&mut Region> {
        self.buf.as_mut().ok_or_else(|| "no region: send alloc first".to_string())
    }

    /// Answers `n` pings: an immediate with an immediate (a `size`-byte write
    /// into the client's region), or a message with the same message.
    fn pong(&mut self, cmd: &Value, ctl: &mut Ctl, deadline: Instant) -> R<Value> {
        let (engine_mode, kind) = (field_str(cmd, "mode")? == "engine", field_str(cmd, "kind")?);
        let (n, size) = (field_u64(cmd, "n")?, field_u64(cmd, "size")?);
        let (imm_c, imm_s) = (field_u64(cmd, "imm_c")? as u32, field_u64(cmd, "imm_s")? as u32);
        let peer = self.peer.as_ref().ok_or("pong: no peer: send peer first")?;
        match (kind, engine_mode) {
            ("imm", true) => {
                let src = self.buf.as_ref().ok_or("pong: no region")?.mr.clone();
                let flag = Arc::new(AtomicU32::new(0));
                self.engine.expect_imm_count(imm_c, 1, OnDone::Flag(flag.clone())).map_err(|e| e.to_string())?;
                ctl.send(&json!({ "armed": true }))?;
                let sent = Arc::new(AtomicU32::new(0));
                for i in 0..n {
                    crate::client::wait_flag_on(&self.engine, &flag, crate::client::Wait::Spin, deadline)?;
                    flag.store(0, Ordering::Relaxed);
                    let e = &self.engine;
                    let done = if i + 1 == n { OnDone::Flag(sent.clone()) } else { OnDone::Nothing };
                    e.submit_single_write(size, Some(imm_s), &src, 0, &peer.desc, 0, done)
                        .map_err(|e| e.to_string())?;
                    if i + 1 < n {
                        e.expect_imm_count(imm_c, 1, OnDone::Flag(flag.clone())).map_err(|e| e.to_string())?;
                    }
                }
                // The last answer must leave before this thread stops driving a manual engine.
                if n > 0 {
                    crate::client::wait_flag_on(&self.engine, &sent, crate::client::Wait::Spin, deadline)?;
                }
            }
            ("imm", false) => {
                let b = self.buf.as_ref().ok_or("pong: no region")?;
                let w = RawWrite {
                    local: b.mem.as_ptr(),
                    len: size as usize,
                    desc: b.raw.desc,
                    peer: peer.raw,
                    addr: peer.raw_base,
                    key: peer.raw_key,
                    imm: Some(imm_s),
                };
                // Through a relay: the ping's arrival handed to this thread, the answer back (as the engine's).
                let ping = |ep: &mut RawEp| ep.wait_imm(imm_c, 1, deadline);
                armed_raw(&mut self.raw, cmd, ctl, |x| {
                    for _ in 0..n {
                        x.call(&ping)?;
                        x.post(w)?;
                    }
                    Ok(())
                })?;
                // Reap the last local completions before the next command.
                self.raw.drain(Instant::now() + DEADLINE)?;
            }
            ("send", true) => {
                let start = self.echoed.load(Ordering::Acquire);
                *self.echo_to.lock().unwrap() = Some(peer.desc.owner.clone());
                ctl.send(&json!({ "armed": true }))?;
                while self.echoed.load(Ordering::Acquire) - start < n && Instant::now() < deadline {
                    if self.engine.is_manual() {
                        self.engine.progress();
                    } else {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                // Manual progress: the last echo was queued by the callback; drive the
                // engine until it has been quiet for a while, so that it leaves.
                let mut quiet = 0;
                while self.engine.is_manual() && quiet < 10_000 {
                    quiet = if self.engine.progress() { 0 } else { quiet + 1 };
                }
                *self.echo_to.lock().unwrap() = None;
                if self.echoed.load(Ordering::Acquire) - start < n {
                    return Err("engine: pings did not arrive in time".into());
                }
            }
            ("send", false) => {
                let reply = self.msgs.mem[MSG..].as_ptr();
                // Through a relay, answered on the relay thread (as the engine's pool answers on its worker).
                let desc = self.msgs.raw.desc;
                let echo = |ep: &mut RawEp| -> R<()> {
                    for _ in 0..n {
                        let len = ep.wait_recv(deadline)?;
                        ep.send(peer.raw, reply, len, desc, deadline)?;
                    }
                    Ok(())
                };
                armed_raw(&mut self.raw, cmd, ctl, |x| x.call(&echo))?;
            }
            _ => return Err(format!("pong: unknown kind {kind}")),
        }
        Ok(json!({}))
    }
}

/// Runs raw's side of `cmd` in `body`, through a relay thread when the
/// client says `"mode": "relay"` (relay.rs), and tells the client "armed"
/// once it is ready (a relay is up).
fn armed_raw<'q, T>(
    raw: &mut RawEp,
    cmd: &Value,
    ctl: &mut Ctl,
    body: impl FnOnce(&mut crate::relay::Exec<'_, 'q>) -> R<T>,
) -> R<T> {
    crate::relay::drive(raw, field_str(cmd, "mode")? == "relay", |x| {
        ctl.send(&json!({ "armed": true }))?;
        body(x)
    })
}

/// Serves one client connection, then exits. `bind`: the local address its
/// socket-provider endpoints use (two-host runs).
pub fn serve(listen: &str, bind: Option<&str>) -> R<()> {
    let l = TcpListener::bind(listen).map_err(|e| format!("listen on {listen}: {e}"))?;
    println!("fabriclib-bench server listening on {}", l.local_addr().map_err(|e| e.to_string())?);
    let (s, _) = l.accept().map_err(|e| e.to_string())?;
    let mut ctl = Ctl::new(s)?;
    let mut open: Option<Open> = None;
    while let Some(cmd) = ctl.recv_opt()? {
        let op = field_str(&cmd, "op")?.to_string();
        let res = match (op.as_str(), open.as_mut()) {
            ("quit", _) => break,
            ("open", _) => {
                if let Some(o) = open.take() {
                    o.close();
                }
                Open::new(&cmd, bind).map(|o| {
                    let v = json!({ "engine": hex(&o.engine.address().to_bytes()), "raw": hex(o.raw.addr()), "provider": o.engine.provider() });
                    open = Some(o);
                    v
                })
            }
            (_, Some(o)) => o.handle(&op, &cmd, &mut ctl),
            (_, None) => Err("send open first".into()),
        };
        ctl.send(&res.unwrap_or_else(err_msg))?;
    }
    if let Some(o) = open.take() {
        o.close();
    }
    Ok(())
}
