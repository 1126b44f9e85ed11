//! Which NICs: named, near a GPU (`nics_near_gpu`), per request
//! (`Route`), and what each NIC did (`counters`).
use super::TransferEngine;
use crate::bail;
use crate::completion::notify::Route;
use crate::config::EngineConfig;
use crate::domain::fabric::FabricDomain;
use crate::error::{Result, Status};

/// `cfg` with `nics_near_gpu` turned into NIC names (and the first
/// provider that offers them all); `None` when it is not set or `nics` is.
pub(super) fn near_gpu(cfg: &EngineConfig) -> Result<Option<EngineConfig>> {
    let Some((g, n)) = cfg.nics_near_gpu.filter(|_| cfg.nics.is_empty()) else {
        return Ok(None);
    };
    let n = crate::config::nic_count(n, &format!("NICs near GPU {g}"))?;
    let topo = crate::topo::Topo::system()?;
    // No such GPU, or fewer NICs than asked: no provider can help.
    topo.nearest_nics(g, n)?;
    let (p, names) = first_provider(cfg, |nics| crate::topo::provider_nics_near(&topo, g, n, nics)).map_err(|why| {
        crate::error::Error::new(
            Status::InvalidArgument,
            format!("no provider offers the {n} NICs nearest GPU {g}: {why}"),
        )
    })?;
    // The worker on the CPU the plan gives this GPU's group, unless configured.
    let worker_cpus = match cfg.worker_cpus.is_empty() {
        true => topo.plan(n)?.get(g).and_then(|p| p.worker_cpu).into_iter().collect(),
        false => cfg.worker_cpus.clone(),
    };
    Ok(Some(EngineConfig { provider: Some(p), nics: names, nic_count: n, worker_cpus, ..cfg.clone() }))
}

/// `cfg` with `groups_per_gpu` turned into groups (and the first provider
/// that offers every NIC they need); `None` when it is not set or `groups` is.
pub(super) fn per_gpu(cfg: &EngineConfig) -> Result<Option<EngineConfig>> {
    let Some(n) = cfg.groups_per_gpu.filter(|_| cfg.groups.is_empty()) else {
        return Ok(None);
    };
    let n = crate::config::nic_count(n, "NICs per GPU")?;
    let topo = crate::topo::Topo::system()?;
    let (p, groups) = first_provider(cfg, |nics| crate::topo::groups_per_gpu(&topo, n, nics)).map_err(|why| {
        crate::error::Error::new(
            Status::InvalidArgument,
            format!("no provider gives one group per GPU with {n} NICs each: {why}"),
        )
    })?;
    let groups = groups
        .into_iter()
        .map(|g| crate::config::GroupConfig {
            // Worker CPUs given in the config win over the plan's.
            worker_cpus: if cfg.worker_cpus.is_empty() { g.worker_cpus } else { cfg.worker_cpus.clone() },
            ..g
        })
        .collect();
    Ok(Some(EngineConfig { provider: Some(p), groups, nic_count: n, ..cfg.clone() }))
}

/// The first of `cfg`'s providers whose NICs `make` turns into a placement,
/// with that placement; else why not, provider by provider.
fn first_provider<T>(
    cfg: &EngineConfig,
    make: impl Fn(&[crate::domain::Nic]) -> Result<T>,
) -> std::result::Result<(String, T), String> {
    let mut why = Vec::new();
    for p in cfg.providers() {
        match FabricDomain::list_nics(&p).and_then(|nics| make(&nics)) {
            Ok(t) => return Ok((p, t)),
            Err(e) => why.push(format!("{p}: {}", e.message)),
        }
    }
    Err(why.join("; "))
}

impl TransferEngine {
    /// Work requests and bytes posted and completed, and failures by
    /// status, per NIC (domain) and per peer (by its epoch), since the
    /// engine started: the application's requests only (not the engine's
    /// handshakes and keepalives). Counted by the worker, read without
    /// stopping it. With several groups, their NICs one after the other, in
    /// group order.
    pub fn counters(&self) -> Result<crate::worker::counters::Counters> {
        let mut all = crate::worker::counters::Counters { nics: Vec::new() };
        for g in &self.groups {
            all.nics.extend(g.shared.tally.get().map(|t| t.snapshot().nics).unwrap_or_default());
        }
        Ok(all)
    }

    /// Every metric (metrics/mod.rs): per group its requests, immediates,
    /// expectations and histograms with its NICs' counters, and the
    /// watcher's. Read without stopping any thread.
    pub fn metrics(&self) -> crate::metrics::Metrics {
        let w = self.watchers.stats();
        crate::metrics::Metrics {
            groups: self
                .groups
                .iter()
                .map(|g| {
                    let nics = g.shared.tally.get().map(|t| t.snapshot().nics).unwrap_or_default();
                    (g.shared.stats.snapshot(), nics)
                })
                .collect(),
            watcher_events: w.events.get(),
            watcher_store_to_callback_ns: w.store_to_callback.snapshot(),
        }
    }

    /// Whether every NIC of every group registers CUDA device memory.
    pub fn device_memory(&self) -> bool {
        self.groups.iter().all(|g| g.info.device_memory)
    }

    /// Whether requests may ask for confirmed delivery (`RequestOpts::delivered`).
    pub fn delivery_fences(&self) -> bool {
        self.groups.iter().all(|g| g.info.delivery_fences)
    }

    /// The NIC each domain is open on, in domain order (group by group).
    pub fn nics(&self) -> &[crate::domain::Nic] {
        &self.nics
    }

    /// The engine-wide number of group `g`'s first NIC (group 0's NICs
    /// come first, then group 1's, as `nics` lists them).
    fn first_nic(&self, g: usize) -> usize {
        self.groups[..g].iter().map(|grp| grp.nic_count()).sum()
    }

    /// The one domain of group `g` a request with `route` goes through
    /// (`None`: sharded over the group's NICs). `Route::Nic` numbers NICs
    /// across the engine, as `nics` does.
    #[inline]
    pub(super) fn nic_of(&self, g: usize, route: Route, send: bool) -> Result<Option<u8>> {
        match route {
            Route::Shard => Ok(None),
            Route::Nic(k) => self.nic_in(g, k, send).map(Some),
        }
    }

    /// NIC `k` (numbered across the engine) as group `g`'s domain index, checked.
    fn nic_in(&self, g: usize, k: usize, send: bool) -> Result<u8> {
        let (first, n) = (self.first_nic(g), self.groups[g].nic_count());
        if k >= self.nics.len() {
            bail!(InvalidArgument, "NIC {k}: the engine has {} (0..{})", self.nics.len(), self.nics.len())
        }
        if k < first || k >= first + n {
            let last = first + n - 1;
            bail!(InvalidArgument, "NIC {k} is not in the request's group {g} (its NICs are {first}..={last})")
        }
        if send && k != 0 {
            bail!(InvalidArgument, "NIC {k}: sends travel through NIC 0, where receive buffers are posted")
        }
        Ok((k - first) as u8)
    }
}
