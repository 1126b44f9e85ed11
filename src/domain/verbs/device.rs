//! What a machine's verbs devices are: their ports, GID tables and limits,
//! read at run time (`ibv_query_device`, `ibv_query_port`, `ibv_query_gid`)
//! and from sysfs (GID types, the PCI parent a device may or may not have:
//! Soft-RoCE's `rxe` has none). `fabriclib-info` prints them.
use super::lib::{Context, Verbs};
use super::sys::*;
use crate::error::Result;

/// One entry of a port's GID table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gid {
    pub index: i32,
    /// Network byte order.
    pub gid: [u8; 16],
    /// sysfs' name for its type: `RoCE v2`, `IB/RoCE v1`; empty if unknown.
    pub kind: String,
}

impl Gid {
    /// RoCE v2 (routable over UDP/IP), which fabriclib prefers.
    pub fn roce_v2(&self) -> bool {
        self.kind == "RoCE v2"
    }

    /// An IPv4 address mapped into the GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        let g = &self.gid;
        (g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff)
            .then(|| std::net::Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }
}

impl std::fmt::Display for Gid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::net::Ipv6Addr::from(self.gid))
    }
}

/// One port of a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// 1-based, as verbs numbers ports.
    pub num: u8,
    pub active: bool,
    /// The active MTU in bytes (256..4096).
    pub mtu: u32,
    /// `Ethernet` (RoCE) or `InfiniBand`.
    pub link_layer: &'static str,
    /// The non-zero entries of its GID table.
    pub gids: Vec<Gid>,
}

impl Port {
    /// The GID fabriclib uses unless told otherwise: RoCE v2 with an IPv4
    /// address first, then any RoCE v2, then the first.
    pub fn preferred_gid(&self) -> Option<&Gid> {
        let v2 = || self.gids.iter().filter(|g| g.roce_v2());
        v2().find(|g| g.ipv4().is_some()).or_else(|| v2().next()).or_else(|| self.gids.first())
    }
}

/// One verbs device and what it allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    /// Its PCI address, if it has a PCI parent (`rxe` has none).
    pub pci: Option<String>,
    pub numa: Option<u32>,
    pub ports: Vec<Port>,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_mr_size: u64,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    /// Thread and parent domains (`ibv_alloc_td`): the RC queue pairs go
    /// on one where there are (mlx5), plain where not (rxe).
    pub thread_domains: bool,
}

/// Every verbs device of the machine (none: an empty list); `Unsupported`
/// without libibverbs.
pub fn list() -> Result<Vec<Device>> {
    let verbs = Verbs::get()?;
    verbs.device_names()?.iter().map(|n| describe(&*Context::open(n)?)).collect()
}

/// What `ctx`'s device is.
pub fn describe(ctx: &Context) -> Result<Device> {
    let a = ctx.query_device()?;
    let name = ctx.name().to_string();
    let sys = format!("/sys/class/infiniband/{name}");
    // A PCI device's sysfs `device` link ends in its address (0000:17:00.0).
    let pci = std::fs::read_link(format!("{sys}/device"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .filter(|f| f.len() == 12 && f.as_bytes()[4] == b':');
    let numa = std::fs::read_to_string(format!("{sys}/device/numa_node"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|n| u32::try_from(n).ok());
    let mut ports = Vec::new();
    for num in 1..=a.phys_port_cnt {
        let p = ctx.query_port(num)?;
        let mut gids = Vec::new();
        for index in 0..p.gid_tbl_len {
            let Some(gid) = ctx.gid(num, index) else { break };
            if gid.iter().all(|&b| b == 0) {
                continue;
            }
            let kind = std::fs::read_to_string(format!("{sys}/ports/{num}/gid_attrs/types/{index}"))
                .map(|s| s.trim().to_string())
                .unwrap_or_default();
            gids.push(Gid { index, gid, kind });
        }
        ports.push(Port {
            num,
            active: p.state == IBV_PORT_ACTIVE,
            mtu: 128u32 << p.active_mtu.clamp(1, 5),
            link_layer: if p.link_layer as u32 == IBV_LINK_LAYER_INFINIBAND { "InfiniBand" } else { "Ethernet" },
            gids,
        });
    }
    Ok(Device {
        name,
        pci,
        numa,
        ports,
        max_qp: a.max_qp as u32,
        max_qp_wr: a.max_qp_wr as u32,
        max_sge: a.max_sge as u32,
        max_cqe: a.max_cqe as u32,
        max_mr_size: a.max_mr_size,
        max_srq: a.max_srq as u32,
        max_srq_wr: a.max_srq_wr as u32,
        thread_domains: ctx.has_thread_domains(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(index: i32, bytes: [u8; 16], kind: &str) -> Gid {
        Gid { index, gid: bytes, kind: kind.into() }
    }

    #[test]
    fn the_preferred_gid_is_roce_v2_with_an_ipv4_address() {
        let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0xff, 0xfe, 0, 0, 0];
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
        let port = |gids| Port { num: 1, active: true, mtu: 4096, link_layer: "Ethernet", gids };
        // rxe on lo: index 1 is ::ffff:127.0.0.1.
        let p = port(vec![gid(0, link_local, "RoCE v2"), gid(1, v4, "RoCE v2")]);
        assert_eq!(p.preferred_gid().unwrap().index, 1);
        assert_eq!(p.preferred_gid().unwrap().ipv4(), Some(std::net::Ipv4Addr::LOCALHOST));
        assert_eq!(p.preferred_gid().unwrap().to_string(), "::ffff:127.0.0.1");
        // No IPv4: the first RoCE v2; no v2: the first.
        let p = port(vec![gid(0, link_local, "IB/RoCE v1"), gid(3, link_local, "RoCE v2")]);
        assert_eq!(p.preferred_gid().unwrap().index, 3);
        let p = port(vec![gid(2, link_local, "")]);
        assert_eq!(p.preferred_gid().unwrap().index, 2);
        assert!(port(vec![]).preferred_gid().is_none());
    }
}
