//! The mapping on hand-written hwloc XML topologies that model real
//! machines (generated here from a short description: packages with their
//! NUMA node and CPUs, PCIe switches holding GPUs and NICs).
use super::*;

const GPU: (u16, u16) = (0x0302, 0x10de); // 3D controller, NVIDIA
const EFA: (u16, u16) = (0x0200, 0x1d0f); // Ethernet controller, Amazon
const CX7: (u16, u16) = (0x0207, 0x15b3); // InfiniBand controller, Mellanox
const OSDEV_NETWORK: u8 = 2;
const OSDEV_OPENFABRICS: u8 = 3;
const OSDEV_COPROC: u8 = 5;

/// A PCI device: (class, vendor), and its OS device (type, name).
type Dev = ((u16, u16), Option<(u8, String)>);

/// A host bridge whose root port leads to a PCIe switch with `devs`, on bus `bus`.
struct Switch {
    bus: u8,
    devs: Vec<Dev>,
}

struct Pkg {
    node: u32,
    cpus: std::ops::Range<u32>,
    switches: Vec<Switch>,
}

fn mask(cpus: impl IntoIterator<Item = u32>) -> String {
    format!("0x{:08x}", cpus.into_iter().fold(0u32, |m, c| m | 1 << c))
}

struct Gen {
    gp: u32,
    out: String,
}

impl Gen {
    fn gp(&mut self) -> u32 {
        self.gp += 1;
        self.gp
    }

    fn sets(cpus: &str, nodes: &str) -> String {
        format!(r#"cpuset="{cpus}" complete_cpuset="{cpus}" nodeset="{nodes}" complete_nodeset="{nodes}""#)
    }

    fn switch(&mut self, s: &Switch) {
        let (b, b1) = (s.bus, s.bus + 1);
        let (g1, g2) = (self.gp(), self.gp());
        self.out += &format!(
            r#"<object type="Bridge" gp_index="{g1}" bridge_type="0-1" depth="0" bridge_pci="0000:[{b:02x}-{b1:02x}]">
<object type="Bridge" gp_index="{g2}" bridge_type="1-1" depth="1" bridge_pci="0000:[{b1:02x}-{b1:02x}]" pci_busid="0000:{b:02x}:00.0" pci_type="0604 [1000:c030] [0000:0000] 00" pci_link_speed="0.000000">
"#
        );
        for (i, ((class, vendor), os)) in s.devs.iter().enumerate() {
            let g = self.gp();
            self.out += &format!(
                r#"<object type="PCIDev" gp_index="{g}" pci_busid="0000:{b1:02x}:{i:02x}.0" pci_type="{class:04x} [{vendor:04x}:1234] [{vendor:04x}:0000] 00" pci_link_speed="0.000000">
"#
            );
            if let Some((t, name)) = os {
                let g = self.gp();
                self.out += &format!(
                    r#"<object type="OSDev" gp_index="{g}" name="{name}" osdev_type="{t}"/>
"#
                );
            }
            self.out += "</object>\n";
        }
        self.out += "</object>\n</object>\n";
    }
}

/// An hwloc 2 XML topology: `pkgs`, and switches attached to the machine
/// itself (no locality below the machine, as in most VMs).
fn xml(pkgs: &[Pkg], machine_io: &[Switch]) -> String {
    let all_cpus: Vec<u32> = pkgs.iter().flat_map(|p| p.cpus.clone()).collect();
    let all_nodes = mask(pkgs.iter().map(|p| p.node));
    let mut g = Gen { gp: 0, out: String::new() };
    let gm = g.gp();
    let cm = mask(all_cpus.iter().copied());
    g.out += &format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
<object type="Machine" os_index="0" {} allowed_cpuset="{cm}" allowed_nodeset="{all_nodes}" gp_index="{gm}">
"#,
        Gen::sets(&cm, &all_nodes)
    );
    for (i, p) in pkgs.iter().enumerate() {
        let (c, n) = (mask(p.cpus.clone()), mask([p.node]));
        let (gpk, gn) = (g.gp(), g.gp());
        g.out += &format!(
            r#"<object type="Package" os_index="{i}" {} gp_index="{gpk}">
<object type="NUMANode" os_index="{}" {} gp_index="{gn}" local_memory="1073741824"/>
"#,
            Gen::sets(&c, &n),
            p.node,
            Gen::sets(&c, &n)
        );
        for cpu in p.cpus.clone() {
            let (gc, gu) = (g.gp(), g.gp());
            let s = Gen::sets(&mask([cpu]), &n);
            g.out += &format!(
                r#"<object type="Core" os_index="{cpu}" {s} gp_index="{gc}"><object type="PU" os_index="{cpu}" {s} gp_index="{gu}"/></object>
"#
            );
        }
        for s in &p.switches {
            g.switch(s);
        }
        g.out += "</object>\n";
    }
    for s in machine_io {
        g.switch(s);
    }
    g.out += "</object>\n</topology>\n";
    g.out
}

fn gpu(i: usize) -> Dev {
    (GPU, Some((OSDEV_COPROC, format!("cuda{i}"))))
}

fn names(d: &[&Device]) -> Vec<String> {
    d.iter().map(|d| d.name.clone()).collect()
}

/// An 8-GPU host on 2 sockets of `cpus` CPUs each: GPU g behind its own
/// PCIe switch with the NICs `nics(g)`.
fn eight_gpus(cpus: u32, nics: impl Fn(usize) -> Vec<Dev>) -> String {
    let mut bus = 0x10u8;
    let pkgs: Vec<Pkg> = (0..2u32)
        .map(|s| Pkg {
            node: s,
            cpus: s * cpus..(s + 1) * cpus,
            switches: (0..4)
                .map(|k| {
                    let g = (s * 4 + k) as usize;
                    bus += 0x10;
                    Switch { bus, devs: [vec![gpu(g)], nics(g)].concat() }
                })
                .collect(),
        })
        .collect();
    xml(&pkgs, &[])
}

/// A p5.48xlarge-like host: 2 sockets of 8 CPUs, 4 GPUs per socket, each
/// behind its own PCIe switch with 4 EFA NICs.
fn p5() -> String {
    eight_gpus(8, |g| (0..4).map(|n| (EFA, Some((OSDEV_OPENFABRICS, format!("rdmap{g}s{n}"))))).collect())
}

#[test]
fn a_p5_host_gives_each_gpu_the_four_efa_nics_behind_its_switch() {
    let t = Topo::from_xml(&p5()).unwrap();
    assert_eq!((t.gpus.len(), t.nics.len(), t.numa_nodes.len(), t.cpus.len()), (8, 32, 2, 16));
    for g in 0..8 {
        let want: Vec<String> = (0..4).map(|n| format!("rdmap{g}s{n}")).collect();
        assert_eq!(names(&t.nearest_nics(g, 4).unwrap()), want, "GPU {g}");
        assert_eq!(t.gpus[g].numa, Some(g as u32 / 4), "GPU {g}'s NUMA node");
        assert_eq!(t.gpus[g].name, format!("cuda{g}"));
    }
    // A fifth NIC comes from the same socket (fewer hops than across it).
    let fifth = t.nearest_nics(1, 5).unwrap()[4];
    assert_eq!(fifth.numa, Some(0), "{fifth:?}");
    assert!(t.nearest_nics(0, 33).is_err(), "only 32 NICs");
    let plan = t.plan(4).unwrap();
    assert_eq!(plan.len(), 8 + 2, "a group per GPU and one per NUMA node for host memory");
    let cpus: Vec<u32> = plan.iter().map(|p| p.worker_cpu.unwrap()).collect();
    for (g, p) in plan.iter().take(8).enumerate() {
        assert_eq!(p.gpu, Some(g));
        assert_eq!(p.numa, Some(g as u32 / 4));
        assert!((g as u32 / 4 * 8..g as u32 / 4 * 8 + 8).contains(&cpus[g]), "worker {g} on CPU {}", cpus[g]);
    }
    let mut distinct = cpus.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), cpus.len(), "every worker on a CPU of its own: {cpus:?}");
    assert_eq!(plan[8].numa, Some(0));
    assert_eq!(plan[8].nics.len(), 16, "host memory on node 0: the node's NICs");
}

#[test]
fn one_connectx_per_gpu_maps_one_to_one() {
    let host = eight_gpus(4, |g| vec![(CX7, Some((OSDEV_OPENFABRICS, format!("mlx5_{g}"))))]);
    let t = Topo::from_xml(&host).unwrap();
    for g in 0..8 {
        assert_eq!(names(&t.nearest_nics(g, 1).unwrap()), [format!("mlx5_{g}")]);
        let two = t.nearest_nics(g, 2).unwrap();
        assert_eq!(two[1].numa, t.gpus[g].numa, "the second-nearest is on the GPU's socket");
    }
    let plan = t.plan(1).unwrap();
    assert_eq!(plan.iter().filter(|p| p.gpu.is_some()).count(), 8);
}

#[test]
fn a_vm_without_numa_information_uses_the_whole_machine() {
    // As lstopo shows this project's VMs: I/O under the machine, one node.
    let io = [Switch { bus: 0x00, devs: vec![gpu(0), ((0x0200, 0x1af4), Some((OSDEV_NETWORK, "eth0".into())))] }];
    let t = Topo::from_xml(&xml(&[Pkg { node: 0, cpus: 0..2, switches: vec![] }], &io)).unwrap();
    assert_eq!((t.gpus.len(), t.nics.len()), (1, 1));
    assert_eq!(t.gpus[0].numa, None, "no NUMA information");
    assert_eq!(t.gpus[0].cpus, [0, 1], "the whole machine");
    assert_eq!(t.nics[0].name, "eth0");
    assert_eq!(t.nics[0].pci, "0000:01:01.0");
    assert_eq!(names(&t.nearest_nics(0, 1).unwrap()), ["eth0"]);
    let e = t.nearest_nics(0, 2).unwrap_err();
    assert!(e.message.contains("2 NICs asked for GPU 0: the machine has 1"), "{e}");
    let plan = t.plan(1).unwrap();
    assert_eq!(plan.len(), 2, "the GPU's group and one for host memory");
    assert!(plan.iter().all(|p| p.numa.is_none() && p.worker_cpu.is_some()));
    assert_ne!(plan[0].worker_cpu, plan[1].worker_cpu);
}

#[test]
fn this_machine_has_a_topology() {
    let t = Topo::system().unwrap();
    assert!(!t.cpus.is_empty() && !t.numa_nodes.is_empty());
}

#[test]
fn the_nics_near_a_gpu_are_matched_to_the_providers_by_pci_address() {
    let t = Topo::from_xml(&p5()).unwrap();
    // The provider lists GPU 2's NICs (EFA: `-rdm` domains) in another order, and others.
    let nic = |name: &str, pci: &str| crate::Nic {
        name: name.into(),
        pci: Some(pci.into()),
        numa: None,
        ..Default::default()
    };
    let mut provider: Vec<crate::Nic> = t.nics.iter().map(|d| nic(&format!("{}-rdm", d.name), &d.pci)).collect();
    provider.reverse();
    let got = provider_nics_near(&t, 2, 4, &provider).unwrap();
    assert_eq!(got, (0..4).map(|n| format!("rdmap2s{n}-rdm")).collect::<Vec<_>>());
    let e = provider_nics_near(&t, 2, 4, &provider[..4]).unwrap_err();
    assert!(e.message.contains("is not one of the provider's"), "{e}");
    assert!(provider_nics_near(&t, 9, 1, &provider).is_err(), "no GPU 9");
}

#[test]
fn one_group_per_gpu_after_the_host_groups() {
    let t = Topo::from_xml(&p5()).unwrap();
    let provider: Vec<crate::Nic> = t
        .nics
        .iter()
        .map(|d| crate::Nic {
            name: format!("{}-rdm", d.name),
            pci: Some(d.pci.clone()),
            numa: d.numa,
            ..Default::default()
        })
        .collect();
    let groups = groups_per_gpu(&t, 4, &provider).unwrap();
    assert_eq!(groups.len(), 2 + 8, "a host group per NUMA node, then one per GPU");
    for (k, h) in groups[..2].iter().enumerate() {
        assert_eq!((h.gpu, h.numa, h.nic_count), (None, Some(k as u32), 4), "host group {k}");
        for name in &h.nics {
            let d = t.nics.iter().find(|d| format!("{}-rdm", d.name) == *name).unwrap();
            assert_eq!(d.numa, Some(k as u32), "host group {k} has {name} of node {:?}", d.numa);
        }
    }
    for g in 0..8 {
        let grp = &groups[2 + g];
        assert_eq!((grp.gpu, grp.numa, grp.nic_count), (Some(g as i32), None, 4));
        assert_eq!(grp.nics, (0..4).map(|n| format!("rdmap{g}s{n}-rdm")).collect::<Vec<_>>());
        let cpu = grp.worker_cpus[0];
        assert!((g as u32 / 4 * 8..g as u32 / 4 * 8 + 8).contains(&cpu), "GPU {g}'s worker on CPU {cpu}");
    }
    // A VM: one GPU, eth0 (and the provider's loopback, which has no PCI address).
    let io = [Switch { bus: 0x00, devs: vec![gpu(0), ((0x0200, 0x1af4), Some((OSDEV_NETWORK, "eth0".into())))] }];
    let vm = Topo::from_xml(&xml(&[Pkg { node: 0, cpus: 0..2, switches: vec![] }], &io)).unwrap();
    let nic = |name: &str, pci: Option<&str>| crate::Nic {
        name: name.into(),
        pci: pci.map(String::from),
        numa: None,
        ..Default::default()
    };
    let provider = [nic("lo", None), nic("eth0", Some("0000:01:01.0"))];
    let groups = groups_per_gpu(&vm, 1, &provider).unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!((groups[0].gpu, groups[0].numa, &groups[0].nics[..]), (None, None, &["eth0".to_string()][..]));
    assert_eq!((groups[1].gpu, &groups[1].nics[..]), (Some(0), &["eth0".to_string()][..]));
    assert_ne!(groups[0].worker_cpus, groups[1].worker_cpus);
    // Two NICs per GPU where the machine has one; no GPU at all.
    assert!(groups_per_gpu(&vm, 2, &provider).is_err());
    let none = Topo::from_xml(&xml(&[Pkg { node: 0, cpus: 0..2, switches: vec![] }], &[])).unwrap();
    assert!(groups_per_gpu(&none, 1, &provider).unwrap_err().message.contains("no GPU"));
}
