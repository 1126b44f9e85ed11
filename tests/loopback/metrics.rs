//! The metrics equal the work done: requests by kind and outcome, bytes and
//! work requests per NIC and per peer (labelled with the peer's epoch), the
//! histograms' counts and sums, immediates received and expectations met
//! and failed, on both engines of a pair; and the Prometheus text says the same.
use super::*;
use fabriclib::{Deadline, RequestOpts};

pub fn metrics_count_the_work_done(prov: &str, domains: usize) -> TestResult {
    const P: usize = 32;
    const PAGE: usize = 4096;
    // Enough requests that the submit clock samples one (metrics::SUBMIT_SAMPLE).
    const SINGLES: usize = fabriclib::metrics::SUBMIT_SAMPLE as usize + 1;
    let w = local(prov, domains, P * PAGE, 95)?;
    let r = local(prov, domains, P * PAGE, 96)?;
    let d = r.mr.descriptor().clone();
    // The receiver expects the paged write's P immediates, and one that never comes.
    let (met, missed) = (flag(), flag());
    r.engine.expect_imm_count(0xe1, P as u32, OnDone::Flag(met.clone())).map_err(e2s)?;
    let soon =
        RequestOpts { deadline: Deadline::After(Duration::from_millis(20)), ..OnDone::Flag(missed.clone()).into() };
    r.engine.expect_imm_count(0xe2, 1, soon).map_err(e2s)?;
    let mut ids = Vec::new();
    let started = std::time::Instant::now();
    for k in 0..SINGLES {
        let f = flag();
        let at = (k * PAGE) as u64;
        ids.push(
            w.engine.submit_single_write(PAGE as u64, None, &w.mr, at, &d, at, OnDone::Flag(f.clone())).map_err(e2s)?,
        );
        wait_flag(&f)?;
    }
    let idx: Vec<u32> = (0..P as u32).rev().collect();
    let pages = Pages { indices: &idx, stride: PAGE as u64, offset: 0 };
    let f = flag();
    ids.push(
        w.engine
            .submit_paged_writes(PAGE as u64, Some(0xe1), &w.mr, pages, &d, pages, OnDone::Flag(f.clone()))
            .map_err(e2s)?,
    );
    wait_flag(&f)?;
    wait_flag(&met)?;
    if wait_flag(&missed).is_ok() {
        return Err("an expectation of an immediate never sent was met".into());
    }
    if fnv64(&r.mem) != fnv64(&w.mem) {
        return Err("the pages differ".into());
    }
    let requests = (SINGLES + 1) as u64;
    // Each request's post-to-done time lies within the test's own time.
    let elapsed_ns = started.elapsed().as_nanos() as u64;
    let sampled = ids.iter().filter(|id| fabriclib::metrics::submit_sampled(id.0)).count() as u64;
    if sampled == 0 {
        return Err(format!("no request of {ids:?} was sampled"));
    }
    let bytes = ((SINGLES + P) * PAGE) as u64;
    let m = w.engine.metrics();
    let (g, nics) = &m.groups[0];
    let single_wrs = (SINGLES * PAGE.div_ceil(w.engine.max_msg_size())) as u64;
    let want = [
        ("single started", g.started[0], SINGLES as u64),
        ("single ok", g.requests[0][0], SINGLES as u64),
        ("paged started", g.started[1], 1),
        ("paged ok", g.requests[1][0], 1),
        ("failed", g.requests.iter().flat_map(|k| &k[1..]).sum(), 0),
        ("in flight", g.in_flight(), 0),
        ("submit_to_post count (sampled)", g.hists[0].count(), sampled),
        ("post_to_done count", g.hists[1].count(), requests),
        ("request_bytes sum", g.hists[2].sum, bytes),
        ("request_wrs sum", g.hists[3].sum, single_wrs + P as u64),
        ("bytes completed", nics.iter().map(|n| n.total.bytes_completed).sum(), bytes),
        (
            "bytes completed to the peer",
            nics.iter().flat_map(|n| &n.peers).map(|(_, c)| c.bytes_completed).sum(),
            bytes,
        ),
        ("wrs in flight", nics.iter().map(|n| n.total.wrs_in_flight()).sum(), 0),
        ("errors", nics.iter().map(|n| n.total.errors).sum(), 0),
    ];
    let peer = r.engine.address().epoch;
    let named = nics.iter().flat_map(|n| &n.peers).all(|(e, _)| *e == peer);
    let rm = r.engine.metrics();
    let rg = &rm.groups[0].0;
    let want_r = [
        ("immediates received", rg.imm_received, P as u64),
        ("expectations met", rg.expectations_met, 1),
        ("expectations failed", rg.expectations_failed, 1),
        ("imm_to_expectation count", rg.hists[4].count(), 1),
        ("receiver's own requests", rg.started.iter().sum(), 0),
    ];
    let wrong: Vec<String> = want
        .iter()
        .chain(&want_r)
        .filter(|(_, got, want)| got != want)
        .map(|(what, got, want)| format!("{what}: {got}, want {want}"))
        .collect();
    let post_to_done = g.hists[1].sum;
    if post_to_done > elapsed_ns * requests {
        return Err(format!("post_to_done sums {post_to_done} ns over {requests} requests done in {elapsed_ns} ns"));
    }
    if !wrong.is_empty() || !named {
        return Err(format!("metrics: {}; peers named {named}", wrong.join("; ")));
    }
    let text = fabriclib::metrics::export::prometheus(&m);
    let line = r#"fabriclib_requests_total{group="0",kind="paged",outcome="ok"} 1"#;
    let peer_bytes = format!(r#",peer="{peer:016x}"}}"#);
    if !text.contains(line)
        || !text.lines().any(|l| l.starts_with("fabriclib_bytes_completed_total") && l.contains(&peer_bytes))
    {
        return Err(format!("the Prometheus text lacks {line} or the peer's bytes:\n{text}"));
    }
    Ok(())
}
