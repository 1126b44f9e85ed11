//! The machine as hwloc sees it (hwloc loaded at run time, `hwloc.rs`, its
//! XML export read by `xml.rs`): GPUs, NICs and NUMA
//! nodes, where each sits in the PCI tree, and the plan an engine of one
//! group per GPU follows: each GPU's nearest NICs, its NUMA node and a CPU
//! of that node for its worker.
//!
//! - A device's *locality* is its first non-I/O ancestor: a package or NUMA
//!   node on a real server, the whole machine in most VMs (where sysfs says
//!   NUMA node -1). Its NUMA node is that ancestor's only node (`None` when
//!   it spans several: the whole machine), its CPUs that ancestor's.
//! - *Nearness* between a GPU and a NIC is the number of PCI hops between
//!   them (up to their deepest common ancestor and down): a NIC behind the
//!   GPU's PCIe switch beats one behind the same root port, which beats one
//!   on the same package, which beats one across the machine. Ties go to
//!   the NIC on the GPU's NUMA node, then to hwloc's order.
//! - GPUs are PCI devices of class 0x0300/0x0302 (display, 3D controller),
//!   in the CUDA driver's order where it is present (`Topo::system`), else
//!   in PCI order. NICs are PCI devices of class 0x02 (network), named by
//!   their OpenFabrics device (`mlx5_0`, `rdmap16s27`) or else their network
//!   interface (`eth0`); libfabric's NICs are matched to them by PCI address.
use crate::error::{Error, Result, Status};

pub mod hwloc;
mod xml;

/// hwloc 2's `osdev_type` values (`hwloc_obj_osdev_type_e`).
const OSDEV_NETWORK: &str = "2";
const OSDEV_OPENFABRICS: &str = "3";
const OSDEV_COPROC: &str = "5";

/// A GPU or NIC as the topology places it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// `cuda0`… for GPUs (`gpu0`… without an OS device), the OpenFabrics
    /// or network name for NICs.
    pub name: String,
    /// `dddd:bb:dd.f`
    pub pci: String,
    /// NUMA node of its locality; `None` when that spans several (VMs).
    pub numa: Option<u32>,
    /// The CPUs of its locality.
    pub cpus: Vec<u32>,
    /// The indices of its ancestors in the topology, root first, and its own.
    path: Vec<u64>,
}

/// What the topology holds that fabriclib uses.
#[derive(Clone, Debug, Default)]
pub struct Topo {
    pub gpus: Vec<Device>,
    pub nics: Vec<Device>,
    /// Each NUMA node's OS index and CPUs.
    pub numa_nodes: Vec<(u32, Vec<u32>)>,
    /// Every CPU of the machine.
    pub cpus: Vec<u32>,
}

/// The plan of one group: a GPU (or host memory on a NUMA node), its NICs
/// and the CPU its worker is pinned to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPlan {
    /// Index into `Topo::gpus`; `None` for a host-memory group.
    pub gpu: Option<usize>,
    /// Names of its NICs, nearest first.
    pub nics: Vec<String>,
    pub numa: Option<u32>,
    /// The worker's CPU: one of the locality's, not given to another group
    /// while there are enough.
    pub worker_cpu: Option<u32>,
}

impl Topo {
    /// This machine's topology; GPUs in the CUDA driver's order when it is
    /// there. `Unsupported` (saying what to install) without hwloc.
    pub fn system() -> Result<Topo> {
        let mut topo = Topo::from_xml(&hwloc::system_xml()?)?;
        if let Ok(cuda) = crate::gpu::cuda::cuda() {
            if let Ok(n) = cuda.device_count() {
                let order: Vec<String> =
                    (0..n).filter_map(|i| cuda.pci_bus_id(i).ok()).map(|p| p.to_lowercase()).collect();
                topo.gpus.sort_by_key(|g| order.iter().position(|p| *p == g.pci).unwrap_or(usize::MAX));
                // hwloc without CUDA support names no OS device: the driver's index does.
                for (i, g) in topo.gpus.iter_mut().enumerate().filter(|(_, g)| order.contains(&g.pci)) {
                    g.name = format!("cuda{i}");
                }
            }
        }
        Ok(topo)
    }

    /// The topology an hwloc 2 XML export describes (tests, and machines
    /// described ahead of time); `InvalidArgument` if it is not one.
    pub fn from_xml(xml: &str) -> Result<Topo> {
        let t = xml::Tree::parse(xml)?;
        let mut topo = Topo { cpus: t.objs[0].bitmap("cpuset").unwrap_or_default(), ..Default::default() };
        for (_, n) in t.of_type("NUMANode") {
            let os = n.attr("os_index").and_then(|i| i.parse().ok()).unwrap_or(0);
            topo.numa_nodes.push((os, n.bitmap("cpuset").unwrap_or_default()));
        }
        for (i, d) in t.of_type("PCIDev") {
            let Some(pci) = d.attr("pci_busid") else { continue };
            // `pci_type="cccc [vvvv:dddd] [ssss:ssss] rr"`: the class first.
            let class = d.attr("pci_type").and_then(|ty| u16::from_str_radix(ty.get(..4)?, 16).ok()).unwrap_or(0);
            let is_gpu = class == 0x0300 || class == 0x0302;
            let is_nic = class >> 8 == 0x02;
            if !is_gpu && !is_nic {
                continue;
            }
            let pci = pci.to_lowercase();
            let os = |ty: &str| {
                d.children
                    .iter()
                    .map(|&c| &t.objs[c])
                    .find(|c| c.ty == "OSDev" && c.attr("osdev_type") == Some(ty))
                    .and_then(|c| c.attr("name"))
                    .map(str::to_string)
            };
            let name = if is_gpu {
                os(OSDEV_COPROC).unwrap_or_else(|| format!("gpu{}", topo.gpus.len()))
            } else {
                os(OSDEV_OPENFABRICS).or_else(|| os(OSDEV_NETWORK)).unwrap_or_else(|| pci.clone())
            };
            let place = t.non_io_ancestor(i);
            let nodes = place.and_then(|p| p.bitmap("nodeset")).unwrap_or_default();
            let dev = Device {
                name,
                pci,
                numa: (nodes.len() == 1 && topo.numa_nodes.len() > 1).then(|| nodes[0]),
                cpus: place.and_then(|p| p.bitmap("cpuset")).unwrap_or_default(),
                path: t.path(i),
            };
            if is_gpu { topo.gpus.push(dev) } else { topo.nics.push(dev) }
        }
        Ok(topo)
    }

    /// The `n` NICs nearest GPU `g` (see the module doc), or why there are
    /// not that many.
    pub fn nearest_nics(&self, g: usize, n: usize) -> Result<Vec<&Device>> {
        let gpu = self.gpus.get(g).ok_or_else(|| {
            Error::new(Status::InvalidArgument, format!("GPU {g}: the machine has {}", self.gpus.len()))
        })?;
        if self.nics.len() < n {
            crate::bail!(InvalidArgument, "{n} NICs asked for GPU {g}: the machine has {}", self.nics.len());
        }
        let mut order: Vec<(usize, bool, usize)> = self
            .nics
            .iter()
            .enumerate()
            .map(|(i, nic)| (hops(&gpu.path, &nic.path), !(nic.numa.is_some() && nic.numa == gpu.numa), i))
            .collect();
        order.sort();
        Ok(order.iter().take(n).map(|&(_, _, i)| &self.nics[i]).collect())
    }

    /// One group per GPU with its `nics_per_gpu` nearest NICs, and one per
    /// NUMA node for host memory with the NICs of that node (every NIC if
    /// none is placed there); each worker on its own CPU of the group's
    /// locality while there are enough (else one already given).
    pub fn plan(&self, nics_per_gpu: usize) -> Result<Vec<GroupPlan>> {
        let mut used: Vec<u32> = Vec::new();
        let mut pick = |cpus: &[u32]| {
            let cpus: &[u32] = if cpus.is_empty() { &self.cpus } else { cpus };
            let c = cpus.iter().rev().find(|c| !used.contains(c)).or(cpus.last()).copied();
            used.extend(c);
            c
        };
        let mut out = Vec::new();
        for g in 0..self.gpus.len() {
            let nics = self.nearest_nics(g, nics_per_gpu)?.iter().map(|n| n.name.clone()).collect();
            let gpu = &self.gpus[g];
            out.push(GroupPlan { gpu: Some(g), nics, numa: gpu.numa, worker_cpu: pick(&gpu.cpus) });
        }
        let nodes: Vec<Option<(u32, &[u32])>> = match self.numa_nodes.len() {
            0 | 1 => vec![None],
            _ => self.numa_nodes.iter().map(|(n, c)| Some((*n, c.as_slice()))).collect(),
        };
        for node in nodes {
            let here: Vec<String> = self
                .nics
                .iter()
                .filter(|n| node.is_none() || n.numa == node.map(|x| x.0))
                .map(|n| n.name.clone())
                .collect();
            let nics = if here.is_empty() { self.nics.iter().map(|n| n.name.clone()).collect() } else { here };
            let cpus = node.map_or(&self.cpus[..], |x| x.1);
            out.push(GroupPlan { gpu: None, nics, numa: node.map(|x| x.0), worker_cpu: pick(cpus) });
        }
        Ok(out)
    }
}

/// The provider NICs (`nics`, as `FabricEndpoint::list_nics` gives them)
/// that are the `n` NICs nearest GPU `g` of `topo`, nearest first, matched
/// by PCI address; an error if the machine has fewer, or the provider does
/// not offer one of them.
pub fn provider_nics_near(topo: &Topo, g: usize, n: usize, nics: &[crate::Nic]) -> Result<Vec<String>> {
    topo.nearest_nics(g, n)?
        .iter()
        .map(|d| {
            nics.iter().find(|p| p.pci.as_deref() == Some(d.pci.as_str())).map(|p| p.name.clone()).ok_or_else(|| {
                let have: Vec<&str> = nics.iter().map(|p| p.name.as_str()).collect();
                Error::new(
                    Status::InvalidArgument,
                    format!(
                        "NIC {} ({}) near GPU {g} is not one of the provider's ({})",
                        d.name,
                        d.pci,
                        have.join(", ")
                    ),
                )
            })
        })
        .collect()
}

/// The groups of an engine with one group per GPU
/// (`EngineConfig::groups_per_gpu`), from `topo`'s plan with `n` NICs per
/// GPU, NICs named as the provider names them (`nics`, matched by PCI
/// address): first one host-memory group per NUMA node (group 0, the home
/// group, is the first node's, or the whole machine's), each with `n` of its
/// node's NICs (repeated when the node has fewer; the provider's first NICs
/// when none of them is the provider's) and claiming that node's memory
/// (when there are several); then one group per GPU with its `n` nearest
/// NICs, claiming the GPU's memory. Every worker on the plan's CPU.
pub fn groups_per_gpu(topo: &Topo, n: usize, nics: &[crate::Nic]) -> Result<Vec<crate::config::GroupConfig>> {
    use crate::config::GroupConfig;
    if topo.gpus.is_empty() {
        crate::bail!(InvalidArgument, "one group per GPU: the machine has no GPU (fabriclib-info shows what it sees)");
    }
    if nics.is_empty() {
        crate::bail!(InvalidArgument, "one group per GPU: the provider has no NIC");
    }
    let plan = topo.plan(n)?;
    let (gpus, hosts): (Vec<&GroupPlan>, Vec<&GroupPlan>) = plan.iter().partition(|p| p.gpu.is_some());
    let several_nodes = hosts.len() > 1;
    let mut out = Vec::new();
    for h in hosts {
        let here: Vec<String> = h
            .nics
            .iter()
            .filter_map(|name| topo.nics.iter().find(|d| &d.name == name))
            .filter_map(|d| nics.iter().find(|p| p.pci.as_deref() == Some(d.pci.as_str())))
            .map(|p| p.name.clone())
            .collect();
        let pool = if here.is_empty() { nics.iter().map(|p| p.name.clone()).collect() } else { here };
        out.push(GroupConfig {
            gpu: None,
            numa: h.numa.filter(|_| several_nodes),
            nic_count: n,
            nics: pool.iter().cycle().take(n).cloned().collect(),
            worker_cpus: h.worker_cpu.into_iter().collect(),
        });
    }
    for p in gpus {
        let g = p.gpu.unwrap();
        out.push(GroupConfig {
            gpu: Some(g as i32),
            numa: None,
            nic_count: n,
            nics: provider_nics_near(topo, g, n, nics)?,
            worker_cpus: p.worker_cpu.into_iter().collect(),
        });
    }
    Ok(out)
}

/// Hops between two objects of the tree through their deepest common ancestor.
fn hops(a: &[u64], b: &[u64]) -> usize {
    let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    a.len() + b.len() - 2 * common
}

/// The NUMA node of a page (os.rs asks the kernel).
pub use crate::os::numa_node_of;

#[cfg(test)]
mod tests;
