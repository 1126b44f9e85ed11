//! fabriclib-info: what fabriclib sees on this machine, the first thing to
//! run on a new one. The libfabric providers fabriclib can open, with their
//! NICs (name, PCI address, NUMA node), the GPUs the CUDA driver reports
//! (PCI address, NUMA node), the NUMA nodes with their CPUs, where an
//! engine would put its NICs by default, and the verbs devices (ports,
//! GIDs, limits) that the verbs backend will use.
//!
//! ```text
//! fabriclib-info [--json] [--provider LIST] [--domains N] [--nics-per-gpu N] [--verbs-only]
//! ```
use fabriclib::Nic;
use fabriclib::domain::fabric::FabricEndpoint;
use fabriclib::domain::fabric::nic::{numa_of_pci, spread};
use fabriclib::topo::Topo;
use serde_json::{Value, json};

const USAGE: &str = "usage: fabriclib-info [--json] [--provider LIST] [--domains N] [--nics-per-gpu N] [--verbs-only]
  --json           print JSON instead of text
  --verbs-only     only the verbs devices
  --provider LIST  providers to look at, comma-separated
                   (default: efa, verbs;ofi_rxm, tcp;ofi_rxm, shm)
  --domains N      show where an engine of N domains would put them (default 2)
  --nics-per-gpu N the topology plan: each GPU's N nearest NICs (default 1)";

struct Opts {
    json: bool,
    providers: Vec<String>,
    domains: usize,
    nics_per_gpu: usize,
    verbs_only: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        json: false,
        providers: ["efa", "verbs;ofi_rxm", "tcp;ofi_rxm", "shm"].iter().map(|s| s.to_string()).collect(),
        domains: 2,
        nics_per_gpu: 1,
        verbs_only: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--verbs-only" => o.verbs_only = true,
            "--provider" => {
                o.providers = it.next().ok_or("--provider: missing value")?.split(',').map(String::from).collect()
            }
            "--domains" => o.domains = one_to_eight(it.next(), a)?,
            "--nics-per-gpu" => o.nics_per_gpu = one_to_eight(it.next(), a)?,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(o)
}

/// The value of option `what`, a number 1..=8.
fn one_to_eight(v: Option<&String>, what: &str) -> Result<usize, String> {
    v.and_then(|v| v.parse().ok()).filter(|n| (1..=8).contains(n)).ok_or_else(|| format!("{what} takes 1..=8"))
}

/// Whether and how `provider` takes CUDA device memory: its first NIC
/// opened asking for `FI_HMEM`, and, where a CUDA driver and a device are
/// here, a real registration of 2 MiB of device memory (by the path the
/// provider says: a dma-buf refused falls back to the pointer).
fn device_memory(provider: &str) -> Value {
    use fabriclib::domain::fabric::FabricEndpoint;
    let bind = (provider != "shm").then_some("127.0.0.1");
    let mut ep = match FabricEndpoint::open(provider, bind, 64, false, true) {
        Ok(ep) => ep,
        Err(e) => return json!({ "path": "none", "probe": format!("not opened: {}", e.message) }),
    };
    let path = ep.device_path();
    let probe = match fabriclib::gpu::cuda::cuda() {
        _ if path == fabriclib::DeviceMemory::None => "not probed: the provider has no FI_HMEM here".to_string(),
        Err(e) => format!("not probed: {}", e.message),
        Ok(c) if c.device_count().unwrap_or(0) == 0 => "not probed: no CUDA device".into(),
        Ok(c) => match c.mem_alloc(0, 2 << 20) {
            Err(e) => format!("not probed: {}", e.message),
            Ok(d) => {
                let dmabuf = c.export_dmabuf(0, d as *const u8, 2 << 20).ok();
                let mem = fabriclib::domain::Memory::Cuda { device: 0, dmabuf };
                let r = match ep.register(d as *mut u8, 2 << 20, mem) {
                    Ok(mr) => {
                        ep.deregister(&mr);
                        format!("registered 2 MiB of CUDA device 0 ({})", ep.device_path().name())
                    }
                    Err(e) => format!("refused: {}", e.message),
                };
                if let Some((fd, _)) = dmabuf {
                    fabriclib::os::close(fd);
                }
                // SAFETY: allocated above, no longer registered.
                let _ = unsafe { c.mem_free(0, d) };
                r
            }
        },
    };
    json!({ "path": path.name(), "probe": probe })
}

fn nic_json(n: &Nic) -> Value {
    json!({ "name": n.name, "pci": n.pci, "numa": n.numa })
}

/// Each NUMA node with its CPU list (sysfs); empty where sysfs has none.
fn numa_nodes() -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = std::fs::read_dir("/sys/devices/system/node")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix("node")?.parse().ok()?;
            let cpus = std::fs::read_to_string(e.path().join("cpulist")).unwrap_or_default();
            Some((n, cpus.trim().to_string()))
        })
        .collect();
    out.sort();
    out
}

/// The GPUs the CUDA driver reports, or why there are none.
fn gpus() -> Result<Vec<Value>, String> {
    if std::env::var_os("FABRICLIB_NO_CUDA").is_some() {
        return Err("CUDA is disabled (FABRICLIB_NO_CUDA is set)".into());
    }
    let cuda = fabriclib::gpu::cuda::cuda().map_err(|e| e.message)?;
    let n = cuda.device_count().map_err(|e| e.message)?;
    (0..n)
        .map(|i| {
            let pci = cuda.pci_bus_id(i).map_err(|e| e.message)?.to_lowercase();
            Ok(json!({ "device": i, "pci": pci, "numa": numa_of_pci(&pci) }))
        })
        .collect()
}

/// hwloc's view (`fabriclib::topo`): GPUs and NICs with their PCI address,
/// NUMA node and CPUs, and the plan of one group per GPU (its nearest NICs,
/// a worker CPU) plus one per NUMA node for host memory.
fn topology(nics_per_gpu: usize) -> Value {
    let t = match Topo::system() {
        Ok(t) => t,
        Err(e) => return json!({ "error": e.message }),
    };
    let dev = |d: &fabriclib::topo::Device| json!({ "name": d.name, "pci": d.pci, "numa": d.numa, "cpus": d.cpus });
    let per_gpu = nics_per_gpu.min(t.nics.len().max(1));
    let plan = match t.plan(per_gpu) {
        Ok(p) => json!(
            p.iter()
                .map(|g| json!({ "gpu": g.gpu, "nics": g.nics, "numa": g.numa, "worker_cpu": g.worker_cpu }))
                .collect::<Vec<_>>()
        ),
        Err(e) => json!({ "error": e.message }),
    };
    json!({
        "gpus": t.gpus.iter().map(dev).collect::<Vec<_>>(),
        "nics": t.nics.iter().map(dev).collect::<Vec<_>>(),
        "nics_per_gpu": per_gpu,
        "plan": plan,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("fabriclib-info: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(if e.is_empty() { 0 } else { 2 });
        }
    };
    if o.verbs_only {
        let v = json!({ "verbs": verbs() });
        match o.json {
            true => println!("{}", serde_json::to_string_pretty(&v).unwrap()),
            false => print_verbs(&v["verbs"]),
        }
        return;
    }
    // SAFETY: fi_version has no preconditions.
    let v = unsafe { fabriclib::domain::fabric::sys::fi_version() };
    let sys = Topo::system();
    // What `groups_per_gpu` (fabriclib_config_set_groups_per_gpu) would open on this provider.
    let groups = |nics: &[Nic]| -> Value {
        let t = match &sys {
            Ok(t) => t,
            Err(e) => return json!({ "error": e.message }),
        };
        match fabriclib::topo::groups_per_gpu(t, o.nics_per_gpu, nics) {
            Ok(g) => json!(
                g.iter()
                    .map(|g| json!({ "gpu": g.gpu, "numa": g.numa, "nics": g.nics, "worker_cpus": g.worker_cpus }))
                    .collect::<Vec<_>>()
            ),
            Err(e) => json!({ "error": e.message }),
        }
    };
    let providers: Vec<Value> = o
        .providers
        .iter()
        .map(|p| match FabricEndpoint::list_nics(p) {
            Ok(nics) => {
                let names: Vec<String> = nics.iter().map(|n| n.name.clone()).collect();
                let placement: Vec<Option<String>> = (0..o.domains).map(|i| spread(&names, i)).collect();
                json!({
                    "provider": p,
                    "available": true,
                    "nics": nics.iter().map(nic_json).collect::<Vec<_>>(),
                    "default_placement": placement,
                    "groups_per_gpu": groups(&nics),
                    "device_memory": device_memory(p),
                })
            }
            Err(e) => json!({ "provider": p, "available": false, "why": e.message }),
        })
        .collect();
    let gpus = gpus();
    let topo = topology(o.nics_per_gpu);
    let doc = json!({
        // SAFETY: a static NUL-terminated string.
        "fabriclib": unsafe { std::ffi::CStr::from_ptr(fabriclib::capi::fabriclib_version()) }.to_string_lossy(),
        // Loaded at run time: where it is missing, say so and how to install it.
        "libfabric": match fabriclib::domain::fabric::sys::load_error() {
            None => format!("{}.{}", v >> 16, v & 0xffff),
            Some(why) => format!("(none: {why})"),
        },
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "numa_nodes": numa_nodes().iter().map(|(n, c)| json!({ "node": n, "cpus": c })).collect::<Vec<_>>(),
        "providers": providers,
        "gpus": gpus.as_ref().ok(),
        "gpus_why_none": gpus.as_ref().err(),
        "domains_shown": o.domains,
        "topology": topo,
        "verbs": verbs(),
    });
    if o.json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap());
        return;
    }
    print_text(&doc);
}

fn print_text(doc: &Value) {
    let s = |v: &Value| v.as_str().map(String::from).unwrap_or_else(|| "-".into());
    println!("fabriclib {} with libfabric {}, {} CPUs", s(&doc["fabriclib"]), s(&doc["libfabric"]), doc["cpus"]);
    for n in doc["numa_nodes"].as_array().into_iter().flatten() {
        println!("NUMA node {}: CPUs {}", n["node"], s(&n["cpus"]));
    }
    println!("\nproviders:");
    for p in doc["providers"].as_array().into_iter().flatten() {
        if p["available"] != true {
            println!("  {:<14} not available: {}", s(&p["provider"]), s(&p["why"]));
            continue;
        }
        println!("  {}", s(&p["provider"]));
        for n in p["nics"].as_array().into_iter().flatten() {
            let numa = n["numa"].as_u64().map_or("-".to_string(), |x| x.to_string());
            println!("    NIC {:<20} PCI {:<14} NUMA {numa}", s(&n["name"]), s(&n["pci"]));
        }
        let dm = &p["device_memory"];
        println!("    device memory: {} ({})", s(&dm["path"]), s(&dm["probe"]));
        let place: Vec<String> = p["default_placement"].as_array().into_iter().flatten().map(&s).collect();
        println!("    {} domains without a bind address: {}", place.len(), place.join(", "));
        match p["groups_per_gpu"].as_array() {
            Some(groups) => {
                println!("    an engine of one group per GPU (groups_per_gpu):");
                for (i, g) in groups.iter().enumerate() {
                    let who = match (g["gpu"].as_u64(), g["numa"].as_u64()) {
                        (Some(x), _) => format!("GPU {x}"),
                        (None, Some(n)) => format!("host, node {n}"),
                        (None, None) => "host memory".to_string(),
                    };
                    println!("      group {i}: {who:<12} NICs {} worker on CPUs {}", g["nics"], g["worker_cpus"]);
                }
            }
            None => println!("    groups_per_gpu: {}", s(&p["groups_per_gpu"]["error"])),
        }
    }
    println!("\nGPUs:");
    match doc["gpus"].as_array() {
        Some(g) if !g.is_empty() => {
            for d in g {
                let numa = d["numa"].as_u64().map_or("-".to_string(), |x| x.to_string());
                println!("  CUDA device {}: PCI {} NUMA {numa}", d["device"], s(&d["pci"]));
            }
        }
        Some(_) => println!("  none (the CUDA driver reports no device)"),
        None => println!("  none: {}", s(&doc["gpus_why_none"])),
    }
    let t = &doc["topology"];
    println!("\ntopology (hwloc):");
    if let Some(e) = t["error"].as_str() {
        println!("  unavailable: {e}");
    } else {
        for (what, list) in [("GPU", &t["gpus"]), ("NIC", &t["nics"])] {
            for d in list.as_array().into_iter().flatten() {
                let numa = d["numa"].as_u64().map_or("-".to_string(), |x| x.to_string());
                println!("  {what} {:<14} PCI {:<14} NUMA {numa:<3} CPUs {}", s(&d["name"]), s(&d["pci"]), d["cpus"]);
            }
        }
        println!("  plan, {} NIC(s) per GPU:", t["nics_per_gpu"]);
        for g in t["plan"].as_array().into_iter().flatten() {
            let who = g["gpu"].as_u64().map_or("host memory".to_string(), |x| format!("GPU {x}"));
            let numa = g["numa"].as_u64().map_or("-".to_string(), |x| x.to_string());
            println!("    {who:<12} NICs {} NUMA {numa} worker on CPU {}", g["nics"], g["worker_cpu"]);
        }
    }
    print_verbs(&doc["verbs"]);
    println!(
        "\nAn engine of one group opens its domains as shown per provider (name NICs with \
         fabriclib_config_set_nics); fabriclib_config_set_groups_per_gpu (EngineConfig::groups_per_gpu) \
         opens the groups listed, as the plan above lays them out."
    );
}

/// The verbs devices (libibverbs loaded at run time), or why there are none.
fn verbs() -> Value {
    match fabriclib::domain::verbs::device::list() {
        Ok(devices) => json!({
            "available": true,
            "devices": devices.iter().map(|d| json!({
                "name": d.name, "pci": d.pci, "numa": d.numa,
                "max_qp": d.max_qp, "max_qp_wr": d.max_qp_wr, "max_sge": d.max_sge, "max_cqe": d.max_cqe,
                "max_mr_size": d.max_mr_size, "max_srq": d.max_srq, "max_srq_wr": d.max_srq_wr,
                "thread_domains": d.thread_domains,
                "ports": d.ports.iter().map(|p| json!({
                    "port": p.num, "active": p.active, "mtu": p.mtu, "link_layer": p.link_layer,
                    "preferred_gid": p.preferred_gid().map(|g| g.index),
                    "gids": p.gids.iter().map(|g| json!({ "index": g.index, "gid": g.to_string(), "type": g.kind }))
                        .collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        }),
        Err(e) => json!({ "available": false, "why": e.message }),
    }
}

fn print_verbs(v: &Value) {
    let s = |v: &Value| v.as_str().map(String::from).unwrap_or_else(|| "-".into());
    println!("\nverbs devices:");
    if v["available"] != true {
        println!("  none: {}", s(&v["why"]));
        return;
    }
    let devices = v["devices"].as_array().cloned().unwrap_or_default();
    if devices.is_empty() {
        println!("  none (libibverbs found no device)");
    }
    for d in &devices {
        let numa = d["numa"].as_u64().map_or("-".to_string(), |x| x.to_string());
        println!("  {} PCI {} NUMA {numa}", s(&d["name"]), s(&d["pci"]));
        println!(
            "    max QPs {} (x {} WRs, {} SGEs), CQEs {}, MR {} bytes, SRQs {} (x {} WRs), thread domains: {}",
            d["max_qp"],
            d["max_qp_wr"],
            d["max_sge"],
            d["max_cqe"],
            d["max_mr_size"],
            d["max_srq"],
            d["max_srq_wr"],
            if d["thread_domains"] == true { "yes" } else { "no" }
        );
        for p in d["ports"].as_array().into_iter().flatten() {
            let state = if p["active"] == true { "active" } else { "down" };
            println!("    port {}: {state}, {}, MTU {}", p["port"], s(&p["link_layer"]), p["mtu"]);
            for g in p["gids"].as_array().into_iter().flatten() {
                let mark = if p["preferred_gid"] == g["index"] { "  <- used" } else { "" };
                println!("      GID {:<2} {:<40} {}{mark}", g["index"], s(&g["gid"]), s(&g["type"]));
            }
        }
    }
}
