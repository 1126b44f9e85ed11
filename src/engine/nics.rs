//! Which NICs: named, near a GPU (`nics_near_gpu`), per request
//! (`Route`), and what each NIC did (`counters`).
use super::TransferEngine;
use crate::bail;
use crate::completion::notify::Route;
use crate::config::EngineConfig;
use crate::domain::fabric::FabricDomain;
use crate::error::Result;
use crate::group::request::Ctrl;

/// `cfg` with `nics_near_gpu` turned into NIC names (and the first
/// provider that offers them all); `None` when it is not set or `nics` is.
pub(super) fn near_gpu(cfg: &EngineConfig) -> Result<Option<EngineConfig>> {
    let Some((g, n)) = cfg.nics_near_gpu.filter(|_| cfg.nics.is_empty()) else {
        return Ok(None);
    };
    if n == 0 || n > crate::wire::MAX_DOMAINS {
        bail!(InvalidArgument, "{n} NICs near GPU {g}: 1..={}", crate::wire::MAX_DOMAINS);
    }
    let topo = crate::topo::Topo::system()?;
    // No such GPU, or fewer NICs than asked: no provider can help.
    topo.nearest_nics(g, n)?;
    let mut why = Vec::new();
    for p in cfg.providers() {
        let nics = match FabricDomain::list_nics(&p) {
            Ok(nics) => nics,
            Err(e) => {
                why.push(format!("{p}: {}", e.message));
                continue;
            }
        };
        match crate::topo::provider_nics_near(&topo, g, n, &nics) {
            Ok(names) => {
                // The worker on the CPU the plan gives this GPU's group, unless configured.
                let worker_cpus = match cfg.worker_cpus.is_empty() {
                    true => topo.plan(n)?.get(g).and_then(|p| p.worker_cpu).into_iter().collect(),
                    false => cfg.worker_cpus.clone(),
                };
                let c = EngineConfig { provider: Some(p), nics: names, domains: n, worker_cpus, ..cfg.clone() };
                return Ok(Some(c));
            }
            Err(e) => why.push(format!("{p}: {}", e.message)),
        }
    }
    bail!(InvalidArgument, "no provider offers the {n} NICs nearest GPU {g}: {}", why.join("; "))
}

/// `cfg` with `groups_per_gpu` turned into groups (and the first provider
/// that offers every NIC they need); `None` when it is not set or `groups` is.
pub(super) fn per_gpu(cfg: &EngineConfig) -> Result<Option<EngineConfig>> {
    let Some(n) = cfg.groups_per_gpu.filter(|_| cfg.groups.is_empty()) else {
        return Ok(None);
    };
    if n == 0 || n > crate::wire::MAX_DOMAINS {
        bail!(InvalidArgument, "{n} NICs per GPU: 1..={}", crate::wire::MAX_DOMAINS);
    }
    let topo = crate::topo::Topo::system()?;
    let mut why = Vec::new();
    for p in cfg.providers() {
        match FabricDomain::list_nics(&p).and_then(|nics| crate::topo::groups_per_gpu(&topo, n, &nics)) {
            Ok(groups) => {
                let groups = groups
                    .into_iter()
                    .map(|g| crate::config::GroupConfig {
                        // Worker CPUs given in the config win over the plan's.
                        worker_cpus: if cfg.worker_cpus.is_empty() { g.worker_cpus } else { cfg.worker_cpus.clone() },
                        ..g
                    })
                    .collect();
                return Ok(Some(EngineConfig { provider: Some(p), groups, domains: n, ..cfg.clone() }));
            }
            Err(e) => why.push(format!("{p}: {}", e.message)),
        }
    }
    bail!(InvalidArgument, "no provider gives one group per GPU with {n} NICs each: {}", why.join("; "))
}

impl TransferEngine {
    /// Work requests and bytes posted and completed, and failures, per NIC
    /// (domain) and per peer, since the engine started: the application's
    /// requests only (not the engine's handshakes and keepalives). Counted
    /// by the worker and read through it (a control call).
    /// With several groups, their NICs one after the other, in group order.
    pub fn counters(&self) -> Result<crate::group::counters::Counters> {
        let mut all = crate::group::counters::Counters { nics: Vec::new() };
        for g in 0..self.groups.len() {
            all.nics.extend(self.rpc_to(g, |reply| Ctrl::Counters { reply })?.nics);
        }
        Ok(all)
    }

    /// The NIC each domain is open on, in domain order (group by group).
    pub fn nics(&self) -> &[crate::domain::nic::Nic] {
        &self.nics
    }

    /// The one domain of group `g` a request with `route` goes through
    /// (`None`: sharded over the group's NICs).
    pub(super) fn nic_of(&self, g: usize, route: Route, send: bool) -> Result<Option<u8>> {
        let n = self.groups[g].domains();
        match route {
            Route::Shard => Ok(None),
            Route::Nic(k) if k >= n => {
                let whose = if self.groups.len() > 1 { format!("the region's group {g}") } else { "the engine".into() };
                bail!(InvalidArgument, "NIC {k}: {whose} has {n} (0..{n})")
            }
            Route::Nic(k) if send && k != 0 => {
                bail!(InvalidArgument, "NIC {k}: sends travel through NIC 0, where receive buffers are posted")
            }
            Route::Nic(k) => Ok(Some(k as u8)),
        }
    }
}
