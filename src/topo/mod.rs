//! The machine as hwloc sees it (through `hwlocality`): GPUs, NICs and NUMA
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
use hwlocality::Topology;
use hwlocality::object::TopologyObject;
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::types::{OSDeviceType, ObjectType};
use hwlocality::topology::builder::TypeFilter;

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
    /// hwloc's persistent indices of its ancestors, root first, and its own.
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

fn topo_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(Status::Provider, format!("hwloc: {what}: {e}"))
}

fn bits(b: impl IntoIterator<Item = hwlocality::bitmap::BitmapIndex>) -> Vec<u32> {
    b.into_iter().map(|i| usize::from(i) as u32).collect()
}

impl Topo {
    /// This machine's topology; GPUs in the CUDA driver's order when it is there.
    pub fn system() -> Result<Topo> {
        let t = Topology::builder()
            .with_io_type_filter(TypeFilter::KeepImportant)
            .map_err(|e| topo_err("I/O filter", e))?
            .build()
            .map_err(|e| topo_err("discovery", e))?;
        let mut topo = Topo::from_topology(&t);
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

    /// The topology an hwloc XML export describes (tests, and machines
    /// described ahead of time).
    pub fn from_xml(xml: &str) -> Result<Topo> {
        let t = Topology::builder()
            .from_xml(xml)
            .map_err(|e| topo_err("XML", e))?
            .with_io_type_filter(TypeFilter::KeepImportant)
            .map_err(|e| topo_err("I/O filter", e))?
            .build()
            .map_err(|e| topo_err("XML topology", e))?;
        Ok(Topo::from_topology(&t))
    }

    fn from_topology(t: &Topology) -> Topo {
        let mut topo = Topo { cpus: bits(t.cpuset().iter_set()), ..Default::default() };
        for n in t.objects_with_type(ObjectType::NUMANode) {
            let cpus = n.cpuset().map(|c| bits(c.iter_set())).unwrap_or_default();
            topo.numa_nodes.push((n.os_index().unwrap_or(0) as u32, cpus));
        }
        for d in t.pci_devices() {
            let Some(ObjectAttributes::PCIDevice(a)) = d.attributes() else { continue };
            let pci = format!("{:04x}:{:02x}:{:02x}.{:x}", a.domain(), a.bus_id(), a.bus_device(), a.function());
            let class = a.class_id();
            let is_gpu = class == 0x0300 || class == 0x0302;
            let is_nic = class >> 8 == 0x02;
            if !is_gpu && !is_nic {
                continue;
            }
            let os = |ty: OSDeviceType| {
                d.io_children().find_map(|c| match c.attributes() {
                    Some(ObjectAttributes::OSDevice(o)) if o.device_type() == ty => {
                        c.name().map(|n| n.to_string_lossy().into_owned())
                    }
                    _ => None,
                })
            };
            let name = if is_gpu {
                os(OSDeviceType::CoProcessor).unwrap_or_else(|| format!("gpu{}", topo.gpus.len()))
            } else {
                os(OSDeviceType::OpenFabrics).or_else(|| os(OSDeviceType::Network)).unwrap_or_else(|| pci.clone())
            };
            let place = d.first_non_io_ancestor();
            let nodes = place.and_then(|p| p.nodeset()).map(|n| bits(n.iter_set())).unwrap_or_default();
            let dev = Device {
                name,
                pci,
                numa: (nodes.len() == 1 && topo.numa_nodes.len() > 1).then(|| nodes[0]),
                cpus: place.and_then(|p| p.cpuset()).map(|c| bits(c.iter_set())).unwrap_or_default(),
                path: path_of(d),
            };
            if is_gpu { topo.gpus.push(dev) } else { topo.nics.push(dev) }
        }
        topo
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

/// The persistent indices from the root down to `o`.
fn path_of(o: &TopologyObject) -> Vec<u64> {
    let mut p: Vec<u64> = o.ancestors().map(|a| a.global_persistent_index()).collect();
    p.reverse();
    p.push(o.global_persistent_index());
    p
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
