//! Runs fabriclib-bench briefly (the smoke suite: every workload, both CI
//! providers, a couple of repetitions) and checks what it reports: the JSON
//! is well-formed and complete, every byte it moved was verified, the plot
//! was drawn. No timing is asserted: speed is the bench's job, not a test's.
use serde_json::Value;
use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabriclib-bench"))
}

#[test]
fn smoke_suite_reports_verified_rows_as_json_and_svg() {
    let dir = std::env::temp_dir().join(format!("fabriclib-bench-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg) = (dir.join("out.json"), dir.join("out.svg"));
    let out = bench()
        .args(["--suite", "smoke", "--provider", "tcp;ofi_rxm,shm", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bench failed: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("bytes verified: all"), "{stdout}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("well-formed JSON");
    assert_eq!(doc["tool"], "fabriclib-bench");
    assert_eq!(doc["verified"], true);
    let rows = doc["rows"].as_array().expect("rows");
    let workloads =
        ["single", "paged", "imm", "sendrecv", "scatter", "barrier", "host-single", "host-paged", "host-scatter"];
    for w in workloads {
        assert!(rows.iter().any(|r| r["workload"] == w), "no {w} row");
    }
    for p in ["tcp;ofi_rxm", "shm"] {
        assert!(rows.iter().any(|r| r["provider"] == p), "no {p} rows");
    }
    for r in rows {
        let w = r["workload"].as_str().unwrap();
        let e = &r["engine"];
        assert!(e["samples"].as_u64().unwrap() >= 1, "{w}: no engine samples");
        let (min, med, p99) = (e["min"].as_f64().unwrap(), e["median"].as_f64().unwrap(), e["p99"].as_f64().unwrap());
        assert!(min > 0.0 && min <= med && med <= p99, "{w}: engine stats out of order: {e}");
        // Host rows too: their baseline is the bare hand-off to a worker thread.
        assert!(r["raw"]["median"].as_f64().unwrap() > 0.0, "{w}: no raw baseline");
        assert!(r["ratio"].as_f64().unwrap() > 0.0, "{w}: no ratio");
        if ["single", "paged", "scatter"].contains(&w) {
            assert_eq!(r["verified"], true, "{w}: bytes not verified");
            assert!(e["gbps"]["median"].as_f64().unwrap() > 0.0);
        }
    }
    assert!(doc["targets"].as_array().unwrap().iter().all(|t| t["met"].is_boolean()));
    // The client engine's counters, per provider and NIC: every work request posted completed.
    let nics = doc["nic_counters"].as_array().unwrap();
    assert!(nics.len() >= 2, "{nics:?}");
    for n in nics {
        assert!(n["wrs_posted"].as_u64().unwrap() > 0 && n["wrs_posted"] == n["wrs_completed"], "{n}");
        assert_eq!(n["errors"], 0, "{n}");
    }
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(
        plot.starts_with("<svg") && plot.contains("shm engine") && plot.contains("tcp;ofi_rxm raw"),
        "plot lacks series"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn client_connects_to_a_server_started_by_hand() {
    // The two-host setup, on loopback: a server with its own --bind, a client with --connect.
    use std::io::{BufRead, BufReader};
    let mut server = bench()
        .args(["server", "--listen", "127.0.0.1:0", "--bind", "127.0.0.1"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().rsplit(' ').next().unwrap().to_string();
    let out = bench()
        .args(["--connect", &addr, "--bind", "127.0.0.1", "--provider", "tcp;ofi_rxm", "--workload", "single,imm"])
        .args(["--sizes", "64K", "--reps", "1", "--iters", "8"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("bytes verified: all"), "{stdout}");
    // The client's quit ends the server.
    assert!(server.wait().unwrap().success());
}

#[test]
fn a_damaged_byte_fails_verification() {
    // The server flips one landed byte before hashing: the bench must notice.
    let out = bench()
        .args(["--workload", "single,paged", "--sizes", "4K", "--pages", "100", "--provider", "shm", "--reps", "1"])
        .env("FABRICLIB_BENCH_CORRUPT", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("bytes verified: FAILED"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.trim_end().ends_with("NO")).count() == 2, "{stdout}");
}

#[test]
fn bad_arguments_are_refused_with_usage() {
    for args in [
        &["--suite", "nope"][..],
        &["--workload", "teleport"],
        &["--peers", "9"],
        &["--sizes", "12Q"],
        &["--frobnicate"],
        &["--peers", "x"],
    ] {
        let out = bench().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?} was accepted");
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
}

#[test]
fn unknown_provider_fails_cleanly() {
    let out =
        bench().args(["--workload", "single", "--sizes", "4K", "--provider", "no-such-provider"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-provider"));
}

/// Runs the benchmark with `args` and `--json FILE`; it must succeed; the JSON it wrote.
fn bench_json(name: &str, args: &[&str]) -> serde_json::Value {
    let json = std::env::temp_dir().join(format!("fabriclib-{name}-{}.json", std::process::id()));
    let out = bench().args(args).args(["--json", json.to_str().unwrap()]).output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{so}{}", String::from_utf8_lossy(&out.stderr));
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    doc
}

#[test]
fn groups_against_one_worker_move_every_stream() {
    let doc = bench_json(
        "groups",
        &[
            "groups",
            "--provider",
            "shm",
            "--groups",
            "1,2",
            "--pages",
            "8",
            "--size",
            "4K",
            "--iters",
            "2",
            "--reps",
            "1",
        ],
    );
    let rows = doc["groups"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["n"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2]);
    assert!(
        rows.iter().all(|r| r["groups_gbps"].as_f64().unwrap() > 0.0 && r["one_worker_gbps"].as_f64().unwrap() > 0.0)
    );
}

#[test]
fn the_layer_loop_lands_every_layer_under_each_spin_setting() {
    let doc = bench_json(
        "layers",
        &["layers", "--provider", "shm", "--layers", "20", "--compute-us", "100", "--rounds", "1"],
    );
    let rows = doc["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["spin"].as_str().unwrap()).collect();
    assert_eq!(names, ["auto", "fixed-10ms", "fixed-200us", "fixed-50us", "nap"]);
    // Every layer landed (else the run fails), after its store.
    assert!(rows.iter().all(|r| r["landed_p50_us"].as_f64().unwrap() > 0.0 && r["stretch"].as_f64().unwrap() >= 1.0));
}

#[test]
fn the_bare_loop_reports_its_bandwidth() {
    let out = bench()
        .args(["bare", "--provider", "shm", "--size", "4K", "--pages", "16", "--iters", "4", "--window", "8"])
        .args(["--reps", "2"])
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{so}{}", String::from_utf8_lossy(&out.stderr));
    assert!(so.contains("bare shm: 4 x 16 x 4096 B, window 8: median"), "{so}");
    // The target counted every immediate of the warm-up and measured repetitions.
    assert!(String::from_utf8_lossy(&out.stderr).contains("bare target: 192 completions"));
}

#[test]
fn pingcost_times_round_trips_with_warm_and_cold_caches() {
    for evict in [None, Some("256")] {
        let mut cmd = bench();
        cmd.args(["pingcost", "--provider", "shm", "--iters", "300", "--reps", "2"]);
        if let Some(kb) = evict {
            cmd.args(["--evict-kb", kb]);
        }
        let out = cmd.output().unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{so}{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(so.contains("caches evicted before every round trip: 256 KiB"), evict.is_some(), "{so}");
        // Two repetitions, each with the engine's and raw's round trip timed.
        let reps: Vec<Vec<f64>> = so
            .lines()
            .filter_map(|l| l.split_whitespace().map(str::parse::<f64>).collect::<Result<Vec<_>, _>>().ok())
            .filter(|v| v.len() == 6)
            .collect();
        assert_eq!(reps.len(), 2, "{so}");
        assert!(reps.iter().all(|v| v[1] > 0.0 && v[2] > 0.0), "{so}");
    }
}

fn info() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_fabriclib-info"))
}

#[test]
fn fabriclib_info_lists_providers_and_their_nics() {
    let out = info().args(["--json", "--provider", "tcp;ofi_rxm,shm,no-such-provider"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = doc["providers"].as_array().unwrap();
    let nics = |i: usize| {
        p[i]["nics"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(p[0]["available"], true);
    assert!(nics(0).contains(&"lo".to_string()), "{:?}", nics(0));
    assert_eq!(nics(1), ["shm"]);
    assert_eq!(p[1]["default_placement"].as_array().unwrap().len(), 2);
    assert_eq!(p[2]["available"], false);
    assert!(p[2]["why"].as_str().unwrap().contains("no-such-provider"));
    assert!(doc["gpus"].is_array() || doc["gpus_why_none"].is_string());
    assert!(!doc["numa_nodes"].as_array().unwrap().is_empty());
    // hwloc's view: at least a host-memory group in the plan.
    let plan = doc["topology"]["plan"].as_array().unwrap_or_else(|| panic!("{}", doc["topology"]));
    assert!(plan.iter().any(|g| g["gpu"].is_null() && g["worker_cpu"].is_u64()), "{plan:?}");
    // The groups `groups_per_gpu` would open: a host group first, then one per GPU; none without GPUs.
    let groups = &p[0]["groups_per_gpu"];
    match (doc["topology"]["gpus"].as_array().map_or(0, |g| g.len()), groups.as_array()) {
        (0, _) => assert!(groups["error"].as_str().unwrap().contains("no GPU"), "{groups}"),
        (n, Some(g)) => assert!(g.len() > n && g[0]["gpu"].is_null() && g[g.len() - 1]["gpu"].is_u64(), "{g:?}"),
        (_, None) => panic!("GPUs but no groups: {groups}"),
    }
    let text = info().args(["--provider", "shm"]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("NIC shm"));
    assert_eq!(info().arg("--bogus").output().unwrap().status.code(), Some(2));
}
