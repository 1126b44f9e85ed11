//! A metrics snapshot as JSON and as Prometheus text exposition (format
//! 0.0.4): what `fabriclib_engine_metrics_text` returns and
//! `fabriclib-bench` prints. Labels: `group` (the engine's group index),
//! `nic` (the NIC's name), `peer` (the peer engine group's epoch, 16 hex
//! digits: `fabriclib_engine_id` of the peer, with its group in the low
//! bits), `kind`, `status`/`outcome` (a status in snake case: `ok`,
//! `peer_down`, `timed_out`…). docs/metrics.md lists every series and how
//! vLLM's NIXL series map onto them.
use super::{GROUP_HISTS, HIST_BUCKETS, HistSnap, KINDS, Metrics, STATUSES};
use crate::error::Status;
use std::fmt::Write;

/// A status code's label: its name in snake case (`peer_down`), or
/// `status_N` for a code this version does not know.
pub fn status_label(code: usize) -> String {
    match Status::ALL.get(code) {
        Some(s) => {
            let mut out = String::new();
            for (i, c) in format!("{s:?}").chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    out.push('_');
                }
                out.push(c.to_ascii_lowercase());
            }
            out
        }
        None => format!("status_{code}"),
    }
}

fn peer_label(epoch: u64) -> String {
    format!("{epoch:016x}")
}

/// Prometheus label values escape `\`, `"` and newlines.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn hist_json(h: &HistSnap) -> String {
    let last = h.buckets.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
    format!(
        r#"{{"count":{},"sum":{},"p50":{},"p99":{},"buckets":{:?}}}"#,
        h.count(),
        h.sum,
        h.quantile(0.5),
        h.quantile(0.99),
        &h.buckets[..last]
    )
}

fn count_json(c: &crate::Count) -> String {
    let errors: Vec<String> = (0..STATUSES)
        .filter(|&s| c.errors_by_status[s] > 0)
        .map(|s| format!(r#""{}":{}"#, status_label(s), c.errors_by_status[s]))
        .collect();
    format!(
        r#"{{"wrs_posted":{},"bytes_posted":{},"wrs_completed":{},"bytes_completed":{},"wrs_in_flight":{},"errors":{},"errors_by_status":{{{}}}}}"#,
        c.wrs_posted,
        c.bytes_posted,
        c.wrs_completed,
        c.bytes_completed,
        c.wrs_in_flight(),
        c.errors,
        errors.join(",")
    )
}

/// The snapshot as one JSON object (histogram buckets as in
/// `HIST_BUCKETS`: bucket `i` counts values in `[2^i, 2^(i+1))`, trailing
/// empty buckets left out; times in nanoseconds).
pub fn json(m: &Metrics) -> String {
    let mut groups = Vec::new();
    for (g, (s, nics)) in m.groups.iter().enumerate() {
        let mut requests = Vec::new();
        for (k, kind) in KINDS.iter().enumerate() {
            let by: Vec<String> = (0..STATUSES)
                .filter(|&st| s.requests[k][st] > 0)
                .map(|st| format!(r#""{}":{}"#, status_label(st), s.requests[k][st]))
                .collect();
            requests.push(format!(r#""{kind}":{{"started":{},"ended":{{{}}}}}"#, s.started[k], by.join(",")));
        }
        let hists: Vec<String> =
            GROUP_HISTS.iter().zip(&s.hists).map(|(n, h)| format!(r#""{n}":{}"#, hist_json(h))).collect();
        let nics: Vec<String> = nics
            .iter()
            .map(|n| {
                let peers: Vec<String> =
                    n.peers.iter().map(|(e, c)| format!(r#""{}":{}"#, peer_label(*e), count_json(c))).collect();
                format!(
                    r#"{{"nic":"{}","total":{},"peers":{{{}}}}}"#,
                    esc(&n.nic),
                    count_json(&n.total),
                    peers.join(",")
                )
            })
            .collect();
        groups.push(format!(
            r#"{{"group":{g},"requests":{{{}}},"requests_in_flight":{},"immediates_received":{},"expectations_met":{},"expectations_failed":{},"histograms":{{{}}},"nics":[{}]}}"#,
            requests.join(","),
            s.in_flight(),
            s.imm_received,
            s.expectations_met,
            s.expectations_failed,
            hists.join(","),
            nics.join(",")
        ));
    }
    format!(
        r#"{{"version":1,"groups":[{}],"watcher":{{"events":{},"store_to_callback_ns":{}}}}}"#,
        groups.join(","),
        m.watcher_events,
        hist_json(&m.watcher_store_to_callback_ns)
    )
}

struct Prom(String);

impl Prom {
    fn head(&mut self, name: &str, ty: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {ty}");
    }

    /// A sample: `name{labels} v`, or `name v` without labels.
    fn line(&mut self, name: &str, labels: &str, v: impl std::fmt::Display) {
        let _ = match labels {
            "" => writeln!(self.0, "{name} {v}"),
            _ => writeln!(self.0, "{name}{{{labels}}} {v}"),
        };
    }

    /// A histogram: bucket `i`'s upper bound `2^(i+1)` in `unit`s per value.
    fn hist(&mut self, name: &str, labels: &str, h: &HistSnap, scale: f64) {
        let (mut cum, sep) = (0, if labels.is_empty() { "" } else { "," });
        for i in 0..HIST_BUCKETS - 1 {
            cum += h.buckets[i];
            let le = (1u64 << (i + 1)) as f64 * scale;
            self.line(&format!("{name}_bucket"), &format!(r#"{labels}{sep}le="{le:e}""#), cum);
        }
        self.line(&format!("{name}_bucket"), &format!(r#"{labels}{sep}le="+Inf""#), h.count());
        self.line(&format!("{name}_sum"), labels, h.sum as f64 * scale);
        self.line(&format!("{name}_count"), labels, h.count());
    }
}

/// The snapshot as Prometheus text exposition (every series documented in
/// docs/metrics.md; counters end in `_total`, times are in seconds).
pub fn prometheus(m: &Metrics) -> String {
    let mut p = Prom(String::new());
    type Field = fn(&crate::Count) -> u64;
    let per_peer: [(&str, &str, Field); 5] = [
        ("fabriclib_wrs_posted_total", "Work requests posted", |c| c.wrs_posted),
        ("fabriclib_bytes_posted_total", "Bytes posted", |c| c.bytes_posted),
        ("fabriclib_wrs_completed_total", "Work requests completed", |c| c.wrs_completed),
        ("fabriclib_bytes_completed_total", "Bytes completed", |c| c.bytes_completed),
        ("fabriclib_wrs_in_flight", "Work requests posted and not yet back", |c| c.wrs_in_flight()),
    ];
    // Each NIC's peers, and what no peer is named for (`peer="other"`).
    let rows = |f: &mut dyn FnMut(&str, &crate::Count)| {
        for (g, (_, nics)) in m.groups.iter().enumerate() {
            for n in nics {
                let base = format!(r#"group="{g}",nic="{}""#, esc(&n.nic));
                let mut rest = n.total;
                for (e, c) in &n.peers {
                    f(&format!(r#"{base},peer="{}""#, peer_label(*e)), c);
                    rest = rest.saturating_sub(c);
                }
                if rest != crate::Count::default() {
                    f(&format!(r#"{base},peer="other""#), &rest);
                }
            }
        }
    };
    for (name, help, field) in per_peer {
        let ty = if name.ends_with("_total") { "counter" } else { "gauge" };
        p.head(name, ty, &format!("{help}, per NIC and peer (the application's requests)"));
        rows(&mut |l, c| p.line(name, l, field(c)));
    }
    p.head("fabriclib_wr_errors_total", "counter", "Work requests failed or given up, per NIC, peer and status");
    rows(&mut |l, c| {
        for s in (0..STATUSES).filter(|&s| c.errors_by_status[s] > 0) {
            p.line("fabriclib_wr_errors_total", &format!(r#"{l},status="{}""#, status_label(s)), c.errors_by_status[s]);
        }
    });
    p.head("fabriclib_requests_total", "counter", "Requests ended, per group, kind and outcome (a status)");
    for (g, (s, _)) in m.groups.iter().enumerate() {
        for (k, kind) in KINDS.iter().enumerate() {
            for st in (0..STATUSES).filter(|&st| s.requests[k][st] > 0 || (st == 0 && s.started[k] > 0)) {
                let l = format!(r#"group="{g}",kind="{kind}",outcome="{}""#, status_label(st));
                p.line("fabriclib_requests_total", &l, s.requests[k][st]);
            }
        }
    }
    type Get = fn(&super::GroupSnap) -> (u64, &'static str);
    let per_group: [(&str, &str, &str, Get); 4] = [
        ("fabriclib_requests_in_flight", "gauge", "Requests taken and not yet ended", |s| (s.in_flight(), "")),
        ("fabriclib_immediates_received_total", "counter", "Immediates received", |s| (s.imm_received, "")),
        ("fabriclib_expectations_total", "counter", "Expectations ended, by outcome", |s| {
            (s.expectations_met, r#",outcome="met""#)
        }),
        ("fabriclib_expectations_total", "counter", "", |s| (s.expectations_failed, r#",outcome="failed""#)),
    ];
    for (name, ty, help, get) in per_group {
        if !help.is_empty() {
            p.head(name, ty, help);
        }
        for (g, (s, _)) in m.groups.iter().enumerate() {
            let (v, extra) = get(s);
            p.line(name, &format!(r#"group="{g}"{extra}"#), v);
        }
    }
    let hists: [(&str, usize, f64, &str); 5] = [
        (
            "fabriclib_submit_to_post_seconds",
            0,
            1e-9,
            "From submit to the request's first work request posted (one request in 16)",
        ),
        (
            "fabriclib_request_seconds",
            1,
            1e-9,
            "From a request's first post to its last completion (requests that succeeded)",
        ),
        ("fabriclib_request_bytes", 2, 1.0, "Bytes per request (requests that succeeded)"),
        ("fabriclib_request_work_requests", 3, 1.0, "Work requests per request (requests that succeeded)"),
        ("fabriclib_imm_to_expectation_seconds", 4, 1e-9, "From the first immediate counted to its expectation met"),
    ];
    for (name, i, scale, help) in hists {
        p.head(name, "histogram", help);
        for (g, (s, _)) in m.groups.iter().enumerate() {
            p.hist(name, &format!(r#"group="{g}""#), &s.hists[i], scale);
        }
    }
    p.head("fabriclib_watcher_events_total", "counter", "Watcher callbacks (word changes seen)");
    p.line("fabriclib_watcher_events_total", "", m.watcher_events);
    p.head(
        "fabriclib_watcher_store_to_callback_seconds",
        "histogram",
        "From a watched store to its callback (bounded above: from the last look that saw the old value)",
    );
    p.hist("fabriclib_watcher_store_to_callback_seconds", "", &m.watcher_store_to_callback_ns, 1e-9);
    p.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{GroupStats, POST_TO_DONE};

    fn sample() -> Metrics {
        let g = GroupStats::default();
        g.started[0].add(3);
        g.ended(0, 0);
        g.ended(0, 0);
        g.ended(0, Status::PeerDown as usize);
        g.hists[POST_TO_DONE].record(1500);
        let mut c = crate::Count {
            wrs_posted: 4,
            bytes_posted: 4096,
            wrs_completed: 3,
            bytes_completed: 3072,
            ..Default::default()
        };
        c.errors_by_status[Status::PeerDown as usize] = 1;
        c.errors = 1;
        let nic = crate::NicCount { nic: "lo".into(), total: c, peers: vec![(0xabc, c)] };
        Metrics {
            groups: vec![(g.snapshot(), vec![nic])],
            watcher_events: 2,
            watcher_store_to_callback_ns: HistSnap::default(),
        }
    }

    #[test]
    fn status_labels_are_snake_case() {
        assert_eq!(status_label(0), "ok");
        assert_eq!(status_label(Status::PeerDown as usize), "peer_down");
        assert_eq!(status_label(Status::TimedOut as usize), "timed_out");
        assert_eq!(status_label(31), "status_31");
    }

    #[test]
    fn prometheus_text_has_labels_per_peer_and_valid_histograms() {
        let t = prometheus(&sample());
        assert!(
            t.contains(r#"fabriclib_bytes_completed_total{group="0",nic="lo",peer="0000000000000abc"} 3072"#),
            "{t}"
        );
        assert!(
            t.contains(r#"fabriclib_wr_errors_total{group="0",nic="lo",peer="0000000000000abc",status="peer_down"} 1"#)
        );
        assert!(t.contains(r#"fabriclib_requests_total{group="0",kind="single",outcome="ok"} 2"#));
        assert!(t.contains(r#"fabriclib_requests_total{group="0",kind="single",outcome="peer_down"} 1"#));
        assert!(t.contains(r#"fabriclib_request_seconds_bucket{group="0",le="+Inf"} 1"#));
        assert!(t.contains(r#"fabriclib_request_seconds_bucket{group="0",le="2.048e-6"} 1"#));
        assert!(t.contains(r#"fabriclib_request_seconds_bucket{group="0",le="1.024e-6"} 0"#));
        assert!(t.contains("fabriclib_watcher_events_total 2"));
        assert!(t.contains(r#"fabriclib_watcher_store_to_callback_seconds_bucket{le="+Inf"} 0"#), "{t}");
        assert!(!t.contains("peer=\"other\""), "every count is a named peer's");
        assert!(t.contains(r#"fabriclib_expectations_total{group="0",outcome="met"} 0"#), "{t}");
        // Every label set is `name="value"` pairs, comma-separated.
        for l in t.lines().filter(|l| l.contains('{')) {
            let labels = &l[l.find('{').unwrap() + 1..l.rfind('}').unwrap()];
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (k, _) = pair.split_once("=\"").unwrap_or_else(|| panic!("{l}"));
                assert!(!k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{l}");
            }
        }
        // Every sample line is `name{labels} value` or `name value`.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let (_, v) = l.rsplit_once(' ').unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }

    #[test]
    fn json_is_one_object_with_every_part() {
        let j = json(&sample());
        for k in [
            r#""version":1"#,
            r#""single":{"started":3,"ended":{"ok":2,"peer_down":1}}"#,
            r#""0000000000000abc":"#,
            r#""wrs_in_flight":0"#,
        ] {
            assert!(j.contains(k), "{k} in {j}");
        }
        assert_eq!(j.matches('{').count(), j.matches('}').count());
    }
}
