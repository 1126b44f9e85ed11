//! Several hosts on one machine: network namespaces joined by a bridge, each
//! a peer process bound to its own address (tcp;ofi_rxm). The survivor (this
//! process, on the bridge's address) writes to two of them; one's link is
//! taken down in the middle of 10,000-page writes and scatters. TCP reports
//! nothing, so the keepalive must: every request to that host ends with
//! `PeerDown` within 5 s, the other host is served throughout, and once the
//! link is back `add_peer` brings the host up again.
use super::faults::{Ends, still_serves, wait_peer_event, with_peer_events};
use super::*;
use fabriclib::PeerState;
use std::process::Command;

/// The namespaces, veths and bridge of one test, removed on drop.
struct Net {
    bridge: String,
    hosts: Vec<(String, String, String)>, // (netns, root-side veth, address)
    prefix: String,
}

pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Net {
    /// A bridge with address .1 and `n` hosts .2, .3, ... each in its own namespace.
    fn up(n: usize) -> Result<Net, String> {
        let tag = std::process::id() % 100_000;
        let prefix = format!("10.213.{}", tag % 250);
        let mut net = Net { bridge: format!("flbr{tag}"), hosts: Vec::new(), prefix: prefix.clone() };
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{prefix}.1/24"), "dev", &net.bridge])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        for h in 0..n {
            let (ns, rv, nv) = (format!("fl{tag}h{h}"), format!("fv{tag}h{h}"), format!("fw{tag}h{h}"));
            let addr = format!("{prefix}.{}", h + 2);
            net.hosts.push((ns.clone(), rv.clone(), addr.clone()));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &rv, "type", "veth", "peer", "name", &nv])?;
            ip(&["link", "set", &nv, "netns", &ns])?;
            ip(&["link", "set", &rv, "master", &net.bridge])?;
            ip(&["link", "set", &rv, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{addr}/24"), "dev", &nv])?;
            ip(&["-n", &ns, "link", "set", &nv, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Takes host `h`'s link up or down (its cable, at the bridge).
    fn link(&self, h: usize, up: bool) -> Result<(), String> {
        ip(&["link", "set", &self.hosts[h].1, if up { "up" } else { "down" }])
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for (ns, rv, _) in &self.hosts {
            let _ = ip(&["link", "del", rv]);
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

pub fn link_down_mid_transfer(prov: &str, domains: usize) -> TestResult {
    if !prov.starts_with("tcp") {
        eprintln!("    (not an IP provider: nothing to take down)");
        return Ok(());
    }
    if !root_or_skip() {
        return Ok(());
    }
    const PAGES: usize = 10_000;
    const R: usize = PAGES * 4096;
    let net = Net::up(2)?;
    let bind = format!("{}.1", net.prefix);
    let (cfg, ev) = with_peer_events(EngineConfig { nic_count: domains, bind_addr: Some(bind), ..Default::default() });
    let l = local_with(cfg, prov, R, 31)?;
    let mut cut = Peer::spawn_in(Some(&net.hosts[0].0), &net.hosts[0].2, prov, domains, R)?;
    let mut other = Peer::spawn_in(Some(&net.hosts[1].0), &net.hosts[1].2, prov, domains, 1 << 20)?;
    still_serves(&l, &mut cut, 0xa1, 0, 4096)?;
    still_serves(&l, &mut other, 0xa2, 0, 4096)?;
    let (dcut, dother) = (desc(&cut), desc(&other));
    let mut rng = Rng(32);
    let (src, dst) = (rng.perm(PAGES), rng.perm(PAGES));
    let (sp, dp) = (Pages { indices: &src, stride: 4096, offset: 0 }, Pages { indices: &dst, stride: 4096, offset: 0 });
    // 0..4: paged writes to the host that loses its link; 4..12: scatters to
    // both; 12..20: writes to the other host only (must all succeed).
    let ends = Ends::new(20);
    for i in 0..4 {
        l.engine.submit_paged_writes(4096, None, &l.mr, sp, &dcut, dp, ends.on(i)).map_err(e2s)?;
    }
    let both = [
        ScatterDst { len: 1 << 20, src_offset: 0, dst: dcut.clone(), dst_offset: 0 },
        ScatterDst { len: 64 * 1024, src_offset: 0, dst: dother.clone(), dst_offset: 0 },
    ];
    for i in 4..12 {
        l.engine.submit_scatter(None, None, &l.mr, &both, ends.on(i)).map_err(e2s)?;
    }
    net.link(0, false)?;
    let t = Instant::now();
    for i in 12..20 {
        let off = (i - 12) as u64 * 65536;
        l.engine.submit_single_write(65536, None, &l.mr, off, &dother, off, ends.on(i)).map_err(e2s)?;
    }
    let took = ends.wait_all_since(t, Duration::from_secs(15))?;
    let (down_at, why) = wait_peer_event(&ev, &addr(&cut), PeerState::Down, Duration::from_secs(1))?;
    for i in 12..20 {
        if ends.status(i) != Status::Ok {
            let evs: Vec<_> =
                ev.lock().unwrap().iter().map(|e| (e.0 == addr(&cut), e.1, e.2, e.3.duration_since(t))).collect();
            return Err(format!(
                "a write to the healthy host ended {:?} ({:?}; events {evs:?})",
                ends.status(i),
                ends.tally()
            ));
        }
    }
    ends.only(&[Status::Ok, Status::PeerDown])?;
    if !(0..12).any(|i| ends.status(i) == Status::PeerDown) || why != Some(Status::PeerDown) {
        return Err(format!("nothing ended PeerDown: {:?}, callback {why:?}", ends.tally()));
    }
    let cb = down_at.duration_since(t);
    eprintln!("    link down -> last request ended {took:.2?}, peer-down callback {cb:.2?}; {:?}", ends.tally());
    if took > Duration::from_secs(5) {
        return Err(format!("the requests to the cut-off host took {took:?} to end (limit 5 s)"));
    }
    still_serves(&l, &mut other, 0xa3, 512 * 1024, 256 * 1024)?;
    // The link comes back: greeted again, the host is up and served.
    net.link(0, true)?;
    let before = ev.lock().unwrap().len();
    l.engine.add_peer(&addr(&cut)).map_err(e2s)?;
    let t = Instant::now();
    while !ev.lock().unwrap()[before..].iter().any(|e| e.0 == addr(&cut) && e.1 == PeerState::Up) {
        if t.elapsed() > Duration::from_secs(10) {
            return Err("the host did not come back up after its link did".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    still_serves(&l, &mut cut, 0xa4, 0, 4096)
}

/// Whether network namespaces can be made here (root); says so if not.
pub fn root_or_skip() -> bool {
    let root = super::util::is_root();
    if !root {
        eprintln!("    skipped: network namespaces need root");
    }
    root
}
