//! Engine configuration (the C API's `fabriclib_config`).

pub use crate::domain::DeviceMemoryMode;
use crate::error::Error;
use crate::wire::NetAddr;
use std::sync::Arc;
use std::time::Duration;

/// What a peer-state callback learns: the peer's address, whether it is now
/// up or down, and for `Down` why (`Status::PeerDown` or `Status::Stale`).
pub type PeerStateFn = dyn Fn(&NetAddr, PeerState, Option<&Error>) + Send + Sync;

/// A peer's state as the peer-state callback reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum PeerState {
    /// Greeted, no answer yet: requests to it wait (within their deadline).
    Connecting = 0,
    /// The peer answered the handshake: requests to it are posted.
    Up = 1,
    /// The peer is dead, unreachable, shut down or restarted: its pending
    /// requests ended with `PeerDown` (or `Stale`), new ones end so at once,
    /// until `add_peer` is called for it again.
    Down = 2,
}

/// The peer-state callback (runs on the engine's callback thread).
#[derive(Clone)]
pub struct PeerCallback(pub Arc<PeerStateFn>);

impl std::fmt::Debug for PeerCallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerCallback")
    }
}

/// Providers tried, in order, when neither the config nor `FABRICLIB_PROVIDER` names one.
pub const DEFAULT_PROVIDERS: &[&str] = &["efa", "tcp;ofi_rxm"];

/// One DomainGroup of an engine (`EngineConfig::groups`): its own NICs and
/// worker thread, and the memory whose registrations it takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupConfig {
    /// Registrations of this CUDA device's memory go to this group.
    pub gpu: Option<i32>,
    /// Registrations of host memory on this NUMA node go to this group.
    pub numa: Option<u32>,
    /// How many NICs the group drives; 0: the engine's `nic_count` (or as
    /// many as `nics` names). (Before 0.4: `domains`.)
    pub nic_count: usize,
    /// The group's NICs by name (as `EngineConfig::nics`); empty: the
    /// engine's rule for choosing them.
    pub nics: Vec<String>,
    /// The CPUs of the group's worker (empty: the engine's `worker_cpus`).
    pub worker_cpus: Vec<u32>,
}

/// `EngineConfig::watcher_spin_us`: adapt the watcher's spin to the gaps
/// between changes (the default; C: `FABRICLIB_WATCHER_SPIN_AUTO`).
pub const WATCHER_SPIN_AUTO: u64 = u64::MAX - 1;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// libfabric provider name (`efa`, `tcp;ofi_rxm`, `shm`, `net`, ...).
    /// The environment variable `FABRICLIB_PROVIDER` overrides it.
    pub provider: Option<String>,
    /// Local address to bind socket providers to (e.g. `127.0.0.1`, or with
    /// a fixed port `127.0.0.1:7000`: NIC i binds port + i); ignored
    /// by providers that do not use IP addresses (`shm`, `efa`).
    /// `FABRICLIB_BIND_ADDR` overrides it.
    pub bind_addr: Option<String>,
    /// The engine's NICs by the provider's names for them (`fi_info`'s
    /// domain name: `rdmap16s27-rdm`, `eth0`; `fabriclib-info` lists them):
    /// NIC `i` opens on `nics[i]`, one name per NIC (the engine fails with
    /// `InvalidArgument` otherwise, or when the provider has no NIC of a
    /// name). Named NICs override `bind_addr`. Empty (the default): with a
    /// bind address every NIC is that address's; without one, they spread
    /// over the provider's NICs in their order, loopback last, NIC `i` on
    /// the provider's `i mod n`.
    pub nics: Vec<String>,
    /// `Some((g, n))`: the engine's NICs are the `n` nearest GPU `g`
    /// (hwloc's topology, `crate::topo`), nearest first, and there are `n`. Fails with `InvalidArgument` if the machine has no GPU `g`,
    /// fewer than `n` NICs, or the provider does not offer one of them.
    /// `nics` overrides it.
    pub nics_near_gpu: Option<(usize, usize)>,
    /// The CPUs the worker thread may run on (empty: anywhere; with
    /// `nics_near_gpu`, the CPU hwloc's plan gives that GPU's group). The
    /// worker pins itself before it opens its NICs. Ignored with
    /// `manual_progress` (no worker thread).
    pub worker_cpus: Vec<u32>,
    /// The CPUs of the callback thread (empty: anywhere).
    pub callback_cpus: Vec<u32>,
    /// The engine's DomainGroups, each with its own NICs and worker thread
    /// (see `GroupConfig`). Empty (the default): one group, configured by
    /// the fields above. Group 0 is the home group: sends, receives,
    /// immediate expectations and peer greetings go through it, and it takes
    /// every registration no other group claims. At most `MAX_GROUPS`.
    pub groups: Vec<GroupConfig>,
    /// `Some(n)` (and no `groups`): the groups come from the machine's
    /// topology (hwloc, `crate::topo::groups_per_gpu`): one for host memory
    /// per NUMA node (group 0 first), then one per GPU with the `n` NICs
    /// nearest it, each worker on a CPU of its locality. Fails with
    /// `InvalidArgument` on a machine without GPUs or with fewer NICs.
    pub groups_per_gpu: Option<usize>,
    /// The CPUs of the watcher thread (empty: anywhere).
    pub watcher_cpus: Vec<u32>,
    /// How many NICs the engine's worker drives (per group); 1..=8. Peers
    /// must use the same count. (Before 0.4: `domains`.)
    pub nic_count: usize,
    /// Capacity of the lock-free submission queue; a full queue makes submits return `Again`.
    pub submit_queue: usize,
    /// Caps the size of one work request below the provider's `max_msg_size`
    /// (larger writes without an immediate are split). `None`: the provider's.
    pub max_msg_size: Option<usize>,
    /// How long the worker busy-polls after its last activity before it naps,
    /// in microseconds. It never naps while requests are in flight, nor while
    /// an `expect_imm_count` expectation is armed unless `idle_policy` lets
    /// it. Keep it above `idle_nap_us`, so
    /// that two engines in a request/response exchange stay awake.
    pub idle_spin_us: u64,
    /// How long one nap lasts at most, in microseconds (a submit wakes it at
    /// once, and so does an arrival where the worker sleeps on a wait object
    /// or, on shm, its doorbell: see `IdlePolicy`).
    pub idle_nap_us: u64,
    /// No worker thread: the application drives the engine with
    /// `TransferEngine::progress` (or calls that progress while they wait).
    /// See `TransferEngine::progress` for the rules.
    pub manual_progress: bool,
    /// What the worker does once idle past `idle_spin_us` while an
    /// expectation is armed or an immediate mirrored (see `IdlePolicy`).
    pub idle_policy: IdlePolicy,
    /// How long the watcher thread busy-polls its words after the last
    /// change it saw, in microseconds (`u64::MAX`: always, the lowest
    /// latency, one core); then it looks every `watcher_nap_us`. Default
    /// `WATCHER_SPIN_AUTO`: where the process may use 5 CPUs or more, four
    /// times the recent gap between changes (50 µs..10 ms), yielding the CPU
    /// as it spins; on fewer, no spin (`watcher::Spin::auto`: measured).
    pub watcher_spin_us: u64,
    /// The watcher thread's look interval once idle, in microseconds.
    pub watcher_nap_us: u64,
    /// How long a request (or an immediate expectation) may take before it
    /// ends with `TimedOut`, unless it gives its own; `None`: no deadline.
    pub request_timeout: Option<Duration>,
    /// How often the worker sends a keepalive to each known peer (on IP
    /// providers, peers in use are also re-checked every 50 ms: see
    /// `fabriclib_config_set_keepalive_us`).
    pub keepalive_interval: Duration,
    /// A peer not heard from (keepalive answers, handshake) for this long is
    /// declared down: its pending requests end with `PeerDown`.
    pub peer_timeout: Duration,
    /// How long a canceled, timed-out or peer-down request waits for the
    /// provider to give back work requests already on the wire before it is
    /// reported anyway (only providers that lose completions to a dead peer
    /// ever need it).
    pub drain_timeout: Duration,
    /// Work requests one peer may have in flight per domain. A dead or
    /// unreachable peer holds at most this many of the endpoint's (and the
    /// provider's shared) transmit resources, so the other peers go on.
    pub peer_window: usize,
    /// Requests submitted and not yet reported (callbacks not yet returned)
    /// at most; beyond it submits return `Again`.
    pub max_inflight: usize,
    /// Whether the engine asks its providers for device memory (`FI_HMEM`):
    /// see `DeviceMemoryMode`. `FABRICLIB_DEVICE_MEMORY` (`auto`, `on`,
    /// `off`) overrides it.
    pub device_memory: DeviceMemoryMode,
    /// Told when a peer *engine* comes up or goes down, once each time
    /// whatever its groups and ours (completion/peer_state.rs), with its
    /// main address (or, until one of its groups has said it, the address of
    /// the group it was met through).
    pub on_peer_state: Option<PeerCallback>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            provider: None,
            bind_addr: None,
            nics: Vec::new(),
            nics_near_gpu: None,
            worker_cpus: Vec::new(),
            callback_cpus: Vec::new(),
            groups: Vec::new(),
            groups_per_gpu: None,
            watcher_cpus: Vec::new(),
            nic_count: 1,
            submit_queue: 4096,
            max_msg_size: None,
            idle_spin_us: 2000,
            idle_nap_us: 500,
            manual_progress: false,
            idle_policy: IdlePolicy::Auto,
            watcher_spin_us: WATCHER_SPIN_AUTO,
            watcher_nap_us: 50,
            request_timeout: Some(Duration::from_secs(30)),
            keepalive_interval: Duration::from_millis(500),
            peer_timeout: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(1),
            peer_window: 256,
            max_inflight: 65536,
            device_memory: DeviceMemoryMode::Auto,
            on_peer_state: None,
        }
    }
}

/// `n` as a count of NICs of an engine or group: 1..=8, else
/// `InvalidArgument` naming `what`.
pub(crate) fn nic_count(n: usize, what: &str) -> crate::error::Result<usize> {
    if n == 0 || n > crate::wire::MAX_DOMAINS {
        crate::bail!(InvalidArgument, "{what} must be 1..={}, got {n}", crate::wire::MAX_DOMAINS);
    }
    Ok(n)
}

/// A bind address, parsed once: `host`, `host:port`, `[v6]` or `[v6]:port`
/// (a bare IPv6 address has no port). With a port, the engine's NICs bind
/// consecutive ports from it (`nth`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub host: String,
    pub port: Option<u16>,
}

impl Bind {
    pub fn parse(bind: &str) -> Bind {
        let whole = || Bind { host: bind.to_string(), port: None };
        if let Some(rest) = bind.strip_prefix('[') {
            if let Some((host, tail)) = rest.split_once(']') {
                return Bind { host: host.to_string(), port: tail.strip_prefix(':').and_then(|p| p.parse().ok()) };
            }
        }
        match bind.split_once(':') {
            Some((host, port)) if !port.contains(':') => match port.parse() {
                Ok(p) => Bind { host: host.to_string(), port: Some(p) },
                Err(_) => whole(),
            },
            _ => whole(),
        }
    }

    /// The address of the `k`-th NIC from this one: port + k (no port: the same).
    pub fn nth(&self, k: usize) -> Bind {
        Bind { host: self.host.clone(), port: self.port.map(|p| (p as usize + k) as u16) }
    }
}

impl std::fmt::Display for Bind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) if self.host.contains(':') => write!(f, "[{}]:{p}", self.host),
            Some(p) => write!(f, "{}:{p}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// Most DomainGroups one engine may have (a group's index fits the low bits
/// of its epoch: src/wire/).
pub use crate::wire::MAX_GROUPS;

/// What one group's worker runs with, resolved once from the engine's
/// configuration (`EngineConfig::plan`): its NICs as specs a domain opens
/// from (named, bind address parsed, providers), its CPUs, the memory it
/// takes, and the worker's settings.
#[derive(Clone, Debug)]
pub struct GroupPlan {
    /// The group's index in its engine (0: the home group).
    pub index: usize,
    /// Which `Domain` implementation it opens.
    pub backend: crate::domain::Backend,
    /// One spec per NIC, in order (the group's domain `i` opens from `nics[i]`).
    pub nics: Vec<crate::domain::DomainSpec>,
    /// The CPUs of its worker (empty: anywhere).
    pub worker_cpus: Vec<u32>,
    /// Registrations of this CUDA device's memory (or host memory on this
    /// NUMA node) go to this group.
    pub gpu: Option<i32>,
    pub numa: Option<u32>,
    /// The worker's own settings.
    pub worker: WorkerSettings,
}

/// The settings a group's worker reads (the same in every group), as the
/// `EngineConfig` fields of the same names say.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    pub submit_queue: usize,
    pub max_msg_size: Option<usize>,
    pub idle_spin: Duration,
    /// At least 1 µs.
    pub idle_nap: Duration,
    pub idle_policy: IdlePolicy,
    pub manual_progress: bool,
    pub request_timeout: Option<Duration>,
    pub keepalive_interval: Duration,
    pub peer_timeout: Duration,
    pub drain_timeout: Duration,
}

impl EngineConfig {
    /// The plan of each group (one group without `groups`): its NICs — named,
    /// else the bind address's, else spread over the provider's — with a
    /// bind address each (a fixed port moves on by one per NIC, across the
    /// groups, so that no two bind the same port), its worker's CPUs and
    /// settings. `self` has the environment applied (`with_env`).
    /// `InvalidArgument` for a NIC count outside 1..=8, names that do not
    /// match the count, two groups claiming one GPU or NUMA node, or more
    /// than `MAX_GROUPS` groups.
    pub fn plan(&self) -> crate::error::Result<Vec<GroupPlan>> {
        use crate::domain::{Backend, Choice, DomainSpec};
        if self.groups.len() > MAX_GROUPS {
            crate::bail!(InvalidArgument, "{} groups: at most {MAX_GROUPS}", self.groups.len());
        }
        let one = [GroupConfig::default()];
        let groups = if self.groups.is_empty() { &one[..] } else { &self.groups[..] };
        let (providers, bind) = (self.providers(), self.bind_addr.as_deref().map(Bind::parse));
        let backend = Backend::of(&providers);
        let hmem = self.device_memory_mode()?.asks();
        let worker = WorkerSettings {
            submit_queue: self.submit_queue,
            max_msg_size: self.max_msg_size,
            idle_spin: Duration::from_micros(self.idle_spin_us),
            idle_nap: Duration::from_micros(self.idle_nap_us.max(1)),
            idle_policy: self.idle_policy,
            manual_progress: self.manual_progress,
            request_timeout: self.request_timeout,
            keepalive_interval: self.keepalive_interval,
            peer_timeout: self.peer_timeout,
            drain_timeout: self.drain_timeout,
        };
        let mut out = Vec::with_capacity(groups.len());
        let mut first = 0;
        for (g, gc) in groups.iter().enumerate() {
            let n = match (gc.nic_count, gc.nics.len()) {
                (0, 0) => self.nic_count,
                (0, n) => n,
                (n, _) => n,
            };
            nic_count(n, "NIC count")?;
            if let Some(other) = groups[..g].iter().position(|o| o.gpu.is_some() && o.gpu == gc.gpu) {
                crate::bail!(InvalidArgument, "groups {other} and {g} both claim GPU {}", gc.gpu.unwrap());
            }
            if let Some(other) = groups[..g].iter().position(|o| o.numa.is_some() && o.numa == gc.numa) {
                crate::bail!(InvalidArgument, "groups {other} and {g} both claim NUMA node {}", gc.numa.unwrap());
            }
            let names = if gc.nics.is_empty() { &self.nics } else { &gc.nics };
            if !names.is_empty() && names.len() != n {
                crate::bail!(
                    InvalidArgument,
                    "{} NICs named for {n} domains: name one NIC per domain (the NIC count)",
                    names.len()
                );
            }
            let nics = (0..n)
                .map(|i| DomainSpec {
                    index: i,
                    providers: providers.clone(),
                    bind: bind.as_ref().map(|b| b.nth(first + i)),
                    nic: match (names.get(i), &bind) {
                        (Some(name), _) => Choice::Named(name.clone()),
                        (None, Some(_)) => Choice::First,
                        (None, None) => Choice::Spread(i),
                    },
                    peer_window: self.peer_window,
                    // Manual progress never sleeps on one, and with one the
                    // provider signals it on every completion (tcp;ofi_rxm: a
                    // lock, and a write when it was reset).
                    wait: !self.manual_progress && self.idle_policy != IdlePolicy::Spin,
                    hmem,
                })
                .collect();
            first += n;
            let worker_cpus = if gc.worker_cpus.is_empty() { &self.worker_cpus } else { &gc.worker_cpus };
            out.push(GroupPlan {
                index: g,
                backend,
                nics,
                worker_cpus: worker_cpus.clone(),
                gpu: gc.gpu,
                numa: gc.numa,
                worker: worker.clone(),
            });
        }
        Ok(out)
    }

    /// Sets the peer-state callback.
    pub fn on_peer_state(mut self, f: impl Fn(&NetAddr, PeerState, Option<&Error>) + Send + Sync + 'static) -> Self {
        self.on_peer_state = Some(PeerCallback(Arc::new(f)));
        self
    }

    /// `device_memory`, or `FABRICLIB_DEVICE_MEMORY` where set.
    pub fn device_memory_mode(&self) -> crate::error::Result<DeviceMemoryMode> {
        match std::env::var("FABRICLIB_DEVICE_MEMORY").ok().filter(|s| !s.is_empty()).as_deref() {
            None => Ok(self.device_memory),
            Some("auto") => Ok(DeviceMemoryMode::Auto),
            Some("on") => Ok(DeviceMemoryMode::On),
            Some("off") => Ok(DeviceMemoryMode::Off),
            Some(v) => crate::bail!(InvalidArgument, "FABRICLIB_DEVICE_MEMORY={v}: auto, on or off"),
        }
    }

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

    /// The bind address: `FABRICLIB_BIND_ADDR` if set, else `bind_addr`.
    /// Read once, when an engine is made (`with_env`): each group's port is
    /// derived from it afterwards, and no later read may undo that.
    pub fn bind_addr(&self) -> Option<String> {
        std::env::var("FABRICLIB_BIND_ADDR").ok().filter(|s| !s.is_empty()).or_else(|| self.bind_addr.clone())
    }

    /// This configuration with the environment applied to it
    /// (`FABRICLIB_BIND_ADDR` into `bind_addr`, `FABRICLIB_PROVIDER` into
    /// `provider`), so that what an engine opens depends on the fields alone.
    pub fn with_env(&self) -> EngineConfig {
        let provider = std::env::var("FABRICLIB_PROVIDER").ok().filter(|s| !s.is_empty()).or(self.provider.clone());
        EngineConfig { bind_addr: self.bind_addr(), provider, ..self.clone() }
    }
}

/// What the worker does once it has been idle for `idle_spin_us` with
/// nothing in flight while an expectation is armed (or an immediate
/// mirrored), waiting for data that may come any microsecond. With nothing
/// armed it always sleeps (blocked on the completion queues' wait object when
/// the policy opened one, else napping `idle_nap_us` at a time; on shm those
/// naps are on its doorbell, which a peer engine's write ends: src/bell.rs).
///
/// Measured on the 16-core machine (docs/benchmarks.md, `fabriclib-bench
/// idle`): spinning costs a whole core per engine; `Auto` costs about 0.03
/// CPU seconds per second per idle engine with the default naps of 500 µs
/// (the sleep is cut into naps of `idle_nap_us` whatever it is on, because
/// an idle virtual CPU wakes slowly: 10 ms naps cost half as much CPU and
/// about 100 µs more on the first write after a quiet spell). What it costs
/// otherwise depends on what the worker sleeps on:
/// - shm: its doorbell, which needs no wait object: nothing on a transfer,
///   +17–51 µs on the first write after a quiet spell (a futex wake of a
///   sleeping thread alone takes 66–101 µs there);
/// - verbs: the completion channel, armed only as the worker goes to sleep:
///   nothing on a transfer;
/// - tcp;ofi_rxm: the completion queue's `FI_WAIT_FD`, which the provider
///   signals (a write and a read syscall) for every completion: about +1 µs
///   per 8-byte write-with-immediate half round trip and +2.6 µs per 64-byte
///   send/recv round trip (raw + 4.0 µs under `Spin`, + 6.6 under `Auto`,
///   one H200 run), and +11–84 µs on the
///   first write after a quiet spell (+60–84 µs for a thread blocked on a
///   plain loopback TCP socket against one spinning on it).
///
/// `Auto` is the default since 0.4: an engine waiting for data costs no
/// core. `Spin` is for the dedicated-core deployment (the engine threads on
/// CPUs of their own, latency first). With `manual_progress` the policy has
/// no effect: there is no worker to sleep, and no wait object is opened
/// (during 0.4's development one was, and cost tcp its signal on every
/// completion: docs/benchmarks.md, "Stop 43").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IdlePolicy {
    /// Keep spinning: the lowest latency, one core while armed. No wait
    /// objects are opened.
    Spin,
    /// Block on the wait object where the provider has one (tcp;ofi_rxm:
    /// `FI_WAIT_FD`, woken by the arrival; verbs: the completion channel); on
    /// shm, which has none, sleep on the group's doorbell in naps of
    /// `idle_nap_us`, which a peer engine rings after posting to it
    /// (src/bell.rs), so that no arrival waits out a nap; keep spinning where
    /// there is neither. The default.
    #[default]
    Auto,
    /// Sleep as when nothing is armed: block on the wait object or the
    /// doorbell, or nap where there is neither (an arrival may then wait up
    /// to `idle_nap_us`).
    Block,
}

impl IdlePolicy {
    pub fn from_code(code: u32) -> crate::Result<IdlePolicy> {
        match code {
            0 => Ok(IdlePolicy::Spin),
            1 => Ok(IdlePolicy::Auto),
            2 => Ok(IdlePolicy::Block),
            _ => crate::bail!(InvalidArgument, "unknown idle policy {code} (0 spin, 1 auto, 2 block)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses_with_and_without_a_port() {
        let b = |s: &str| Bind::parse(s);
        assert_eq!(b("127.0.0.1"), Bind { host: "127.0.0.1".into(), port: None });
        assert_eq!(b("127.0.0.1:7000"), Bind { host: "127.0.0.1".into(), port: Some(7000) });
        assert_eq!(b("::1"), Bind { host: "::1".into(), port: None });
        assert_eq!(b("[::1]:7000"), Bind { host: "::1".into(), port: Some(7000) });
        assert_eq!(b("[::1]"), Bind { host: "::1".into(), port: None });
        assert_eq!(b("10.0.0.2:7000").nth(1).to_string(), "10.0.0.2:7001");
        assert_eq!(b("[::1]:7000").nth(2).to_string(), "[::1]:7002");
        assert_eq!(b("10.0.0.2").nth(3).to_string(), "10.0.0.2");
    }

    #[test]
    fn each_domain_gets_its_nic_and_port() {
        let cfg = EngineConfig { nic_count: 2, bind_addr: Some("127.0.0.1:9000".into()), ..Default::default() };
        let s = &cfg.plan().unwrap()[0].nics;
        assert_eq!(
            s.iter().map(|d| d.bind.as_ref().unwrap().to_string()).collect::<Vec<_>>(),
            ["127.0.0.1:9000", "127.0.0.1:9001"]
        );
        assert!(s.iter().all(|d| d.nic == crate::domain::Choice::First));
        let named = EngineConfig { nic_count: 2, nics: vec!["a".into(), "b".into()], ..Default::default() };
        assert_eq!(named.plan().unwrap()[0].nics[1].nic, crate::domain::Choice::Named("b".into()));
        let spread = EngineConfig { nic_count: 2, ..Default::default() };
        assert_eq!(spread.plan().unwrap()[0].nics[1].nic, crate::domain::Choice::Spread(1));
        let wrong = EngineConfig { nic_count: 2, nics: vec!["a".into()], ..Default::default() };
        assert_eq!(wrong.plan().unwrap_err().status, crate::Status::InvalidArgument);
    }

    /// A wait object only where a worker may sleep on it: not under `spin`,
    /// and not in manual progress, which never sleeps (tcp;ofi_rxm signals
    /// one on every completion: + 2.6 µs per send/recv round trip measured).
    #[test]
    fn a_wait_object_only_for_a_worker_that_may_sleep() {
        let wait = |manual_progress, idle_policy| {
            let cfg = EngineConfig { manual_progress, idle_policy, nic_count: 2, ..Default::default() };
            cfg.plan().unwrap()[0].nics.iter().map(|d| d.wait).collect::<Vec<_>>()
        };
        assert_eq!(wait(false, IdlePolicy::Auto), [true, true]);
        assert_eq!(wait(false, IdlePolicy::Block), [true, true]);
        assert_eq!(wait(false, IdlePolicy::Spin), [false, false]);
        assert_eq!(wait(true, IdlePolicy::Auto), [false, false]);
        assert_eq!(wait(true, IdlePolicy::Block), [false, false]);
    }

    #[test]
    fn groups_bind_consecutive_ports_and_take_their_own_nics() {
        let groups = vec![
            GroupConfig { nic_count: 2, ..Default::default() },
            GroupConfig { gpu: Some(0), nics: vec!["x".into()], worker_cpus: vec![3], ..Default::default() },
        ];
        let cfg = EngineConfig {
            bind_addr: Some("10.0.0.1:7000".into()),
            worker_cpus: vec![1],
            groups,
            ..Default::default()
        };
        let plan = cfg.plan().unwrap();
        let binds = |g: &GroupPlan| g.nics.iter().map(|n| n.bind.as_ref().unwrap().to_string()).collect::<Vec<_>>();
        assert_eq!(binds(&plan[0]), ["10.0.0.1:7000", "10.0.0.1:7001"]);
        assert_eq!(binds(&plan[1]), ["10.0.0.1:7002"]);
        assert_eq!(plan[1].nics[0].nic, crate::domain::Choice::Named("x".into()));
        assert_eq!((plan[0].worker_cpus.clone(), plan[1].worker_cpus.clone()), (vec![1], vec![3]));
        assert_eq!((plan[1].gpu, plan[1].index), (Some(0), 1));
        let twice = vec![GroupConfig { gpu: Some(1), ..Default::default() }; 2];
        let cfg = EngineConfig { groups: twice, ..Default::default() };
        assert_eq!(cfg.plan().unwrap_err().status, crate::Status::InvalidArgument);
    }
}
