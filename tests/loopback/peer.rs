//! The peer process: an engine with one registered region, driven by line
//! commands on stdin, answering on stdout. The test process spawns one per
//! remote peer (`<test binary> --peer PROVIDER DOMAINS REGION_BYTES [BIND_ADDR | nics=A,B] [groups=N]`;
//! with `groups=N` the engine has N groups, and a second region in group 1 whose descriptor,
//! and the engine's groups blob, follow on the `INFO` line).
//!
//! Commands: `EXPECT imm count` (answers `FIRED imm status` when the count is
//! reached), `HASH [off len]` (answers `HASH <fnv64 of the region or range>`), `ECHO len count`
//! (posts receive buffers; every message is sent back to its sender
//! with a `0xEC` byte prepended, then answers `ECHOING`), `EXPECT_QUIT imm
//! count` (as `EXPECT`, then quits at once), `QUIT`.
use super::util::{fnv64, to_hex};
use fabriclib::{EngineConfig, OnDone, TransferEngine};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

pub fn main(args: &[String]) -> ! {
    let provider = args[0].clone();
    let domains: usize = args[1].parse().unwrap();
    let region: usize = args[2].parse().unwrap();
    // BIND_ADDR `nics=a,b`: the NICs of the domains, by name, instead.
    let bind = args.get(3).cloned().unwrap_or_else(|| "127.0.0.1".into());
    let nics: Vec<String> =
        bind.strip_prefix("nics=").map(|n| n.split(',').map(String::from).collect()).unwrap_or_default();
    let groups: usize = args.get(4).and_then(|g| g.strip_prefix("groups=")).map_or(0, |n| n.parse().unwrap());
    let cfg = EngineConfig {
        provider: Some(provider),
        bind_addr: nics.is_empty().then_some(bind),
        nic_count: domains,
        nics,
        groups: vec![Default::default(); groups],
        ..Default::default()
    };
    let engine = Arc::new(TransferEngine::new(&cfg).unwrap_or_else(|e| {
        println!("ERROR {e}");
        std::process::exit(2)
    }));
    let mut mem = vec![0u8; region];
    // SAFETY: mem outlives the registration (dropped after the engine below).
    let mr = unsafe { engine.register(mem.as_mut_ptr(), region) }.unwrap();
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = {
        let out = out.clone();
        move |line: String| {
            let mut o = out.lock().unwrap();
            // The test process may be gone already (it quit us); nothing to report then.
            let _ = writeln!(o, "{line}").and_then(|_| o.flush());
        }
    };
    let mut mem1 = vec![0u8; if groups > 1 { region } else { 0 }];
    // SAFETY: mem1 outlives the registration (dropped after the engine below).
    let mr1 = (groups > 1).then(|| unsafe { engine.register_in_group(1, mem1.as_mut_ptr(), region, None) }.unwrap());
    let more = match &mr1 {
        Some(m) => format!(" {} {}", to_hex(&m.descriptor().to_bytes()), to_hex(&engine.groups_address().to_bytes())),
        None => String::new(),
    };
    say(format!("INFO {} {}{more}", to_hex(&engine.address().to_bytes()), to_hex(&mr.descriptor().to_bytes())));
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["EXPECT", imm, count] => {
                let (imm, count): (u32, u32) = (imm.parse().unwrap(), count.parse().unwrap());
                let say2 = say.clone();
                let r = engine.expect_imm_count(
                    imm,
                    count,
                    OnDone::callback(move |res| say2(format!("FIRED {imm} {:?}", res.map_err(|e| e.status)))),
                );
                if let Err(e) = r {
                    say(format!("ERROR {e}"));
                }
            }
            ["HASH", range @ ..] => {
                let (off, len) = match range {
                    [o, l] => (o.parse().unwrap(), l.parse().unwrap()),
                    _ => (0, region),
                };
                // SAFETY: the region is only written by the NIC; the test process
                // asks for the hash after every write it waits for has landed.
                let bytes = unsafe { std::slice::from_raw_parts(mr.ptr().add(off), len) };
                say(format!("HASH {:016x}", fnv64(bytes)))
            }
            ["ECHO", len, count] => {
                // Back to whoever sent it: the message names its sender.
                let e2 = Arc::downgrade(&engine);
                let r = engine.add_recv_pool(len.parse().unwrap(), count.parse().unwrap(), move |m| {
                    let (Ok(msg), Some(from), Some(e)) = (m.data, m.from, e2.upgrade()) else {
                        return;
                    };
                    let mut reply = vec![0xEC];
                    reply.extend_from_slice(msg);
                    // Retry while the submission queue is full.
                    while let Err(err) = e.submit_send(&from.addr, &reply, OnDone::Nothing) {
                        assert_eq!(err.status, fabriclib::Status::Again, "{err}");
                        std::thread::yield_now();
                    }
                });
                say(match r {
                    Ok(_) => "ECHOING".into(),
                    Err(e) => format!("ERROR {e}"),
                });
            }
            ["EXPECT_QUIT", imm, count] => {
                // Quits (its engine says goodbye) the moment the count is reached.
                let (imm, count): (u32, u32) = (imm.parse().unwrap(), count.parse().unwrap());
                let (tx, rx) = std::sync::mpsc::channel();
                let r = engine.expect_imm_count(imm, count, OnDone::callback(move |res| drop(tx.send(res))));
                match r.map_err(|e| e.to_string()).and_then(|_| rx.recv().map_err(|e| e.to_string())) {
                    Ok(res) => {
                        say(format!("FIRED {imm} {:?}", res.map_err(|e| e.status)));
                        break;
                    }
                    Err(e) => say(format!("ERROR {e}")),
                }
            }
            ["QUIT"] => break,
            _ => say(format!("ERROR unknown command {line}")),
        }
    }
    drop(mr);
    drop(mr1);
    match Arc::try_unwrap(engine) {
        Ok(e) => drop(e),
        Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
    }
    drop(mem);
    drop(mem1);
    std::process::exit(0)
}
