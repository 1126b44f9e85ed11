//! What the bench prints: a table, a JSON report, an SVG plot, and the
//! verdict on each of the project's targets.
use crate::client::{Kind, Row};
use crate::ctl::{R, fmt_size};
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub min: f64,
    pub median: f64,
    pub p99: f64,
}

pub fn stats(v: &[f64]) -> Option<Stats> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    Some(Stats { min: s[0], median: at(0.5), p99: at(0.99) })
}

/// GB/s for `bytes` moved in `us` microseconds.
fn gbps(bytes: u64, us: f64) -> f64 {
    bytes as f64 / (us * 1e3)
}

pub fn unit(r: &Row) -> &'static str {
    match r.spec.kind {
        k if k.is_bandwidth() => "GB/s",
        Kind::HostScatter => "ns/dst",
        k if k.is_host() => "ns/WR",
        _ => "us",
    }
}

/// The row's headline figure for engine and raw (GB/s for bandwidth rows, from the median time).
pub fn headline(r: &Row) -> (Option<f64>, Option<f64>) {
    (figure(r, &r.engine), figure(r, &r.raw))
}

/// One mode's headline figure: GB/s from the median time, or the median.
fn figure(r: &Row, v: &[f64]) -> Option<f64> {
    stats(v).map(|s| if r.spec.kind.is_bandwidth() { gbps(r.bytes, s.median) } else { s.median })
}

/// engine/raw: bandwidth ratio (higher is better) or latency ratio (lower is better).
pub fn ratio(r: &Row) -> Option<f64> {
    match headline(r) {
        (Some(e), Some(w)) if w > 0.0 => Some(e / w),
        _ => None,
    }
}

pub fn describe(r: &Row) -> String {
    let s = &r.spec;
    let what = match s.kind {
        Kind::Paged | Kind::HostPaged => format!("{} x {}", s.pages, fmt_size(s.size)),
        Kind::HostBatch => format!("{} x {} /batch", s.pages, fmt_size(s.size)),
        Kind::Scatter | Kind::HostScatter => format!("{} dst x {}", s.peers, fmt_size(s.size)),
        Kind::Barrier => format!("{} peers", s.peers),
        _ => fmt_size(s.size),
    };
    format!("{:<12} {:<12} {:<18}", s.kind.name(), r.provider, what)
}

pub fn print_table(rows: &[Row]) {
    println!(
        "{:<12} {:<12} {:<18} {:>3} {:>6} {:>7}  {:>10} {:>10}  {:>7} {:>7}  {:>6}  verified",
        "workload", "provider", "shape", "dom", "window", "iters", "engine", "raw", "eng/raw", "diff", "unit"
    );
    for r in rows {
        let (e, w) = headline(r);
        let f = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}"));
        let diff = match (e, w, r.spec.kind.is_bandwidth()) {
            (Some(e), Some(w), false) => format!("{:+.2}", e - w),
            _ => "-".into(),
        };
        let verified = match r.verified {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        println!(
            "{} {:>3} {:>6} {:>7}  {:>10} {:>10}  {:>7} {:>7}  {:>6}  {}",
            describe(r),
            r.domains,
            r.spec.window,
            r.spec.iters,
            f(e),
            f(w),
            ratio(r).map_or("-".into(), |v| format!("{v:.3}")),
            diff,
            unit(r),
            verified
        );
    }
    print_relay(rows);
}

/// The rows' third mode (`FABRICLIB_BENCH_RAW=both`): raw through a relay
/// thread, against raw and the engine of the same runs.
fn print_relay(rows: &[Row]) {
    let with: Vec<&Row> = rows.iter().filter(|r| !r.relay.is_empty()).collect();
    if with.is_empty() {
        return;
    }
    println!("relay: raw through a worker thread's two hand-offs (relay.rs), in the same runs");
    for r in with {
        let (e, w, y) = (figure(r, &r.engine), figure(r, &r.raw), figure(r, &r.relay));
        let (Some(e), Some(w), Some(y)) = (e, w, y) else { continue };
        if r.spec.kind.is_bandwidth() {
            println!("{} relay {y:>8.3} {}  relay/raw {:.3}  eng/relay {:.3}", describe(r), unit(r), y / w, e / y);
        } else {
            println!("{} relay {y:>8.3} {}  relay-raw {:+.2}  eng-relay {:+.2}", describe(r), unit(r), y - w, e - y);
        }
    }
}

fn stats_json(r: &Row, v: &[f64]) -> Value {
    let Some(s) = stats(v) else { return Value::Null };
    let mut o = json!({ "samples": v.len(), "min": s.min, "median": s.median, "p99": s.p99 });
    if r.spec.kind.is_bandwidth() {
        // Times are per repetition; bandwidth at the best, median and p99 time.
        o["unit"] = "us/rep".into();
        o["gbps"] =
            json!({ "best": gbps(r.bytes, s.min), "median": gbps(r.bytes, s.median), "p99": gbps(r.bytes, s.p99) });
    } else {
        o["unit"] = unit(r).into();
    }
    o
}

pub fn row_json(r: &Row) -> Value {
    let s = &r.spec;
    json!({
        "workload": s.kind.name(),
        "provider": r.provider,
        "domains": r.domains,
        "size": s.size,
        "pages": s.pages,
        "peers": s.peers,
        "window": s.window,
        "iters": s.iters,
        "bytes_per_rep": r.bytes,
        "unit": unit(r),
        "engine": stats_json(r, &r.engine),
        "raw": stats_json(r, &r.raw),
        "ratio": ratio(r),
        "relay": stats_json(r, &r.relay),
        "verified": r.verified,
    })
}

/// One of the project's performance targets, judged on this run.
pub struct Target {
    pub name: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

pub fn targets(rows: &[Row]) -> Vec<Target> {
    let mut out = Vec::new();
    for r in rows {
        let s = &r.spec;
        let (e, w) = headline(r);
        let bw_target = (s.kind == Kind::Paged && s.size == 64 << 10 && s.pages == 100)
            || (s.kind == Kind::Single && s.size == 32 << 20);
        if bw_target && let Some(q) = ratio(r) {
            out.push(Target {
                name: format!(
                    "{} {} bandwidth",
                    r.provider,
                    describe(r).split_whitespace().skip(2).collect::<Vec<_>>().join(" ")
                ),
                measured: format!("{q:.3} x raw ({:.3} vs {:.3} GB/s)", e.unwrap(), w.unwrap()),
                goal: ">= 0.95 x raw".into(),
                met: q >= 0.95,
            });
        }
        if s.kind == Kind::Imm
            && let (Some(e), Some(w)) = (e, w)
        {
            out.push(Target {
                name: format!("{} write-with-imm half round trip ({})", r.provider, fmt_size(s.size)),
                measured: format!("raw {:+.2} us ({e:.2} vs {w:.2} us)", e - w),
                goal: "<= raw + 2 us".into(),
                met: e - w <= 2.0,
            });
        }
        if s.kind.is_host()
            && let Some(e) = e
        {
            out.push(Target {
                name: format!("host cost, {}", describe(r).split_whitespace().collect::<Vec<_>>().join(" ")),
                measured: format!("{e:.1} {}", unit(r)),
                goal: format!("<= 100 {}", unit(r)),
                met: e <= 100.0,
            });
        }
    }
    out
}

pub fn print_targets(t: &[Target]) {
    if t.is_empty() {
        return;
    }
    println!("\ntargets:");
    for x in t {
        println!("  {:<6} {:<58} {:<40} goal {}", if x.met { "met" } else { "MISSED" }, x.name, x.measured, x.goal);
    }
}

pub fn targets_json(t: &[Target]) -> Value {
    t.iter().map(|x| json!({ "name": x.name, "measured": x.measured, "goal": x.goal, "met": x.met })).collect()
}

/// Bandwidth vs. single-write size, engine (solid) and raw (dashed), one colour per provider.
pub fn plot(rows: &[Row], path: &str) -> R<()> {
    use plotters::prelude::*;
    let singles: Vec<&Row> = rows.iter().filter(|r| r.spec.kind == Kind::Single && !r.engine.is_empty()).collect();
    let mut providers: Vec<&str> = singles.iter().map(|r| r.provider.as_str()).collect();
    providers.dedup();
    providers.sort();
    providers.dedup();
    let (xmin, xmax) = singles.iter().fold((u64::MAX, 1u64), |(a, b), r| (a.min(r.spec.size), b.max(r.spec.size)));
    let ymax = singles
        .iter()
        .flat_map(|r| {
            let (e, w) = headline(r);
            [e, w]
        })
        .flatten()
        .fold(0.1f64, f64::max)
        * 1.15;
    let e = |x: &dyn std::fmt::Display| format!("plot {path}: {x}");
    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("fabriclib single writes: engine (solid) vs. raw libfabric (dashed)", ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((xmin.min(xmax)..xmax.max(xmin + 1)).log_scale().base(2.0), 0f64..ymax)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("write size")
        .y_desc("GB/s (median)")
        .x_labels(12)
        .x_label_formatter(&|x| fmt_size(*x))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, p) in providers.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut pts: Vec<(u64, Option<f64>, Option<f64>)> = singles
            .iter()
            .filter(|r| r.provider == *p)
            .map(|r| {
                let (en, w) = headline(r);
                (r.spec.size, en, w)
            })
            .collect();
        pts.sort_by_key(|x| x.0);
        let eng: Vec<(u64, f64)> = pts.iter().filter_map(|&(x, y, _)| Some((x, y?))).collect();
        let raw: Vec<(u64, f64)> = pts.iter().filter_map(|&(x, _, y)| Some((x, y?))).collect();
        chart
            .draw_series(LineSeries::new(eng, color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(format!("{p} engine"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        chart
            .draw_series(DashedLineSeries::new(raw, 6, 4, color.stroke_width(1)))
            .map_err(|x| e(&x))?
            .label(format!("{p} raw"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The client engine's metrics after each provider's rows: requests by
/// kind, and the histograms' p50/p99 (fabriclib::metrics).
pub fn print_metrics(all: &[(String, fabriclib::metrics::Metrics)]) {
    use fabriclib::metrics::{GROUP_HISTS, KINDS};
    if all.is_empty() {
        return;
    }
    println!("\nclient engine metrics (fabriclib_engine_metrics; p50/p99 from log2 buckets):");
    for (p, m) in all {
        let t = m.total();
        let failed: u64 = t.requests.iter().map(|row| row[1..].iter().sum::<u64>()).sum();
        let kinds: Vec<String> = KINDS
            .iter()
            .zip(&t.requests)
            .filter(|(_, row)| row[0] > 0)
            .map(|(k, row)| format!("{k} {}", row[0]))
            .collect();
        println!("  {p:<12} requests ok: {}; failed {failed}", kinds.join(", "));
        for (name, h) in GROUP_HISTS.iter().zip(&t.hists).filter(|(_, h)| h.count() > 0) {
            println!(
                "  {p:<12} {name:<24} n {:>9}  p50 {:>10}  p99 {:>10}",
                h.count(),
                h.quantile(0.5),
                h.quantile(0.99)
            );
        }
    }
}
