//! Engine configuration (the C API's `fabriclib_config`).

/// Providers tried, in order, when neither the config nor `FABRICLIB_PROVIDER` names one.
pub const DEFAULT_PROVIDERS: &[&str] = &["efa", "tcp;ofi_rxm"];

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// libfabric provider name (`efa`, `tcp;ofi_rxm`, `shm`, `net`, ...).
    /// The environment variable `FABRICLIB_PROVIDER` overrides it.
    pub provider: Option<String>,
    /// Local address to bind socket providers to (e.g. `127.0.0.1`); ignored
    /// by providers that do not use IP addresses (`shm`, `efa`).
    /// `FABRICLIB_BIND_ADDR` overrides it.
    pub bind_addr: Option<String>,
    /// Domains (NICs) the engine's worker drives; 1..=8. Peers must use the same count.
    pub domains: usize,
    /// Capacity of the lock-free submission queue; a full queue makes submits return `Again`.
    pub submit_queue: usize,
    /// Caps the size of one work request below the provider's `max_msg_size`
    /// (larger writes without an immediate are split). `None`: the provider's.
    pub max_msg_size: Option<usize>,
    /// How long the worker busy-polls after its last activity before it naps,
    /// in microseconds. It never naps while requests are in flight or an
    /// `expect_imm_count` expectation is armed. Keep it above `idle_nap_us`, so
    /// that two engines in a request/response exchange stay awake.
    pub idle_spin_us: u64,
    /// How long one nap lasts at most, in microseconds (a submit wakes it at once).
    pub idle_nap_us: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            provider: None,
            bind_addr: None,
            domains: 1,
            submit_queue: 4096,
            max_msg_size: None,
            idle_spin_us: 2000,
            idle_nap_us: 500,
        }
    }
}

impl EngineConfig {
    /// Providers to try, in order, after applying `FABRICLIB_PROVIDER`.
    pub fn providers(&self) -> Vec<String> {
        if let Some(p) = std::env::var("FABRICLIB_PROVIDER").ok().filter(|s| !s.is_empty()) {
            return vec![p];
        }
        match &self.provider {
            Some(p) => vec![p.clone()],
            None => DEFAULT_PROVIDERS.iter().map(|s| s.to_string()).collect(),
        }
    }

    pub fn bind_addr(&self) -> Option<String> {
        std::env::var("FABRICLIB_BIND_ADDR").ok().filter(|s| !s.is_empty()).or_else(|| self.bind_addr.clone())
    }
}
