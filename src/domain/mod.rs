//! One NIC. The trait is the whole contract between the worker and a
//! backend: open, register memory, resolve peers, post work requests, poll
//! completions. The worker is generic over it (static dispatch on the hot
//! path). Implementations: libfabric (`fabric/`), verbs (`verbs/`: RC queue
//! pairs on libibverbs), `null` (`null.rs`: completes every work request at
//! once; for measuring the engine's host cost). "Domain" is the code's word for one open NIC;
//! the API says NIC.
pub mod fabric;
pub mod null;
pub mod verbs;

use crate::error::{Error, Result};
use crate::wire::RemoteKey;
use std::ffi::c_void;

/// The NIC one engine domain is open on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nic {
    /// The backend's name for it (libfabric: the `fi_info` domain name).
    pub name: String,
    /// PCI address (`0000:00:05.0`), from the provider or sysfs; `None` when
    /// it has none (loopback, shm) or the system does not say.
    pub pci: Option<String>,
    /// NUMA node of its PCI device; `None` where sysfs says -1 (VMs) or nothing.
    pub numa: Option<u32>,
    /// Whether and how it takes CUDA device memory.
    pub device_memory: DeviceMemory,
}

/// Whether and how a NIC takes CUDA device memory (`Domain::device_memory`,
/// C `fabriclib_device_path`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceMemory {
    /// It does not: `register` refuses `Memory::Cuda` with `Unsupported`
    /// (a provider without `FI_HMEM`, a libfabric without CUDA).
    #[default]
    None = 0,
    /// The provider copies between the processes of one host through CUDA
    /// IPC (libfabric's shm with `FI_HMEM`): regions are registered by their
    /// device pointer with `FI_HMEM_DEVICE_ONLY`.
    Ipc = 1,
    /// The NIC reads and writes the GPU's memory (GPUDirect RDMA), the
    /// region registered as a dma-buf (libfabric `FI_MR_DMABUF`, verbs
    /// `ibv_reg_dmabuf_mr`); where that is refused, by its device pointer.
    DmaBuf = 2,
    /// The NIC reaches the GPU's memory, registered by its device pointer (a
    /// peer-memory driver such as nvidia-peermem; a libfabric before 1.20,
    /// which has no dma-buf registration).
    Pointer = 3,
}

impl DeviceMemory {
    /// Its name in `fabriclib-info` and the docs.
    pub fn name(self) -> &'static str {
        match self {
            DeviceMemory::None => "none",
            DeviceMemory::Ipc => "cuda-ipc",
            DeviceMemory::DmaBuf => "dma-buf",
            DeviceMemory::Pointer => "pointer",
        }
    }
}

/// Which NIC a domain opens on; each backend matches it against its own
/// list of NICs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Choice {
    /// The backend's first (with a bind address: that address's NIC).
    #[default]
    First,
    /// The NIC of this name; an error if the backend has none.
    Named(String),
    /// Domain `i` of an engine that named no NIC: the backend's NICs in
    /// their order, loopback last, domain `i` on NIC `i mod n`.
    Spread(usize),
}

/// What one domain opens on, resolved once from the engine's configuration
/// (`EngineConfig::plan`).
#[derive(Clone, Debug, Default)]
pub struct DomainSpec {
    /// Its index in its group.
    pub index: usize,
    /// The providers to try, in order (the environment applied).
    pub providers: Vec<String>,
    /// The address IP providers bind it to (its own port, if one was fixed).
    pub bind: Option<crate::config::Bind>,
    /// Its NIC.
    pub nic: Choice,
    /// Work requests one peer may have in flight on it.
    pub peer_window: usize,
    /// Whether it opens a wait object (the idle policy may sleep on it).
    pub wait: bool,
    /// Whether it asks the provider for device memory (libfabric: `FI_HMEM`
    /// in the hints, falling back to hints without it where the provider or
    /// NIC has none): `EngineConfig::device_memory` resolved.
    pub hmem: bool,
}

/// Which `Domain` implementation an engine's groups open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// libfabric (`fabric/`): EFA, and the software providers tcp and shm.
    Fabric,
    /// libibverbs (`verbs/`): ConnectX and other RDMA NICs, RC queue pairs.
    Verbs,
    /// `null.rs`: moves nothing, completes everything at once (the benchmark
    /// times the engine's own cost with it).
    Null,
}

impl Backend {
    /// The backend for `providers` (the configuration's, in order): `Null`
    /// or `Verbs` only when the one provider named is "null" or "verbs"
    /// (never a default; libfabric's own verbs provider is
    /// "verbs;ofi_rxm"), else libfabric.
    pub fn of(providers: &[String]) -> Backend {
        match providers {
            [p] if p == "null" => Backend::Null,
            [p] if p == "verbs" => Backend::Verbs,
            _ => Backend::Fabric,
        }
    }
}

/// Whether an engine asks its providers for device memory (`FI_HMEM`, with
/// `FI_MR_HMEM`), which `register_memory` of CUDA memory needs. A provider
/// or NIC without it opens as it would without asking (device memory is
/// then refused at registration). Asking is not free everywhere: shm with
/// `FI_HMEM` turns off its single-copy path for host memory too (CMA:
/// writes of more than 4 KiB of host memory then go through the target, as
/// with `FI_SHM_DISABLE_CMA=1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DeviceMemoryMode {
    /// Ask where device memory can be moved at all: the machine has a CUDA
    /// driver (`/dev/nvidiactl`; not with `FABRICLIB_NO_CUDA`) and the
    /// libfabric in use was built with CUDA. The default.
    #[default]
    Auto,
    /// Always ask.
    On,
    /// Never ask: the providers' host-memory configuration, as before 0.5.
    Off,
}

impl DeviceMemoryMode {
    pub fn from_code(code: u32) -> crate::Result<DeviceMemoryMode> {
        match code {
            0 => Ok(DeviceMemoryMode::Auto),
            1 => Ok(DeviceMemoryMode::On),
            2 => Ok(DeviceMemoryMode::Off),
            _ => crate::bail!(InvalidArgument, "unknown device-memory mode {code} (0 auto, 1 on, 2 off)"),
        }
    }

    /// Whether an engine of this mode asks for `FI_HMEM` on this machine.
    pub fn asks(self) -> bool {
        match self {
            DeviceMemoryMode::On => true,
            DeviceMemoryMode::Off => false,
            DeviceMemoryMode::Auto => {
                crate::gpu::cuda::driver_installed() && crate::domain::fabric::sys::cuda_support()
            }
        }
    }
}

/// A provider-side handle for one registered region in one domain.
#[derive(Clone, Copy, Debug)]
pub struct LocalMr {
    /// Backend object (e.g. `fid_mr*`), released by `Domain::deregister`.
    pub raw: *mut c_void,
    /// The local descriptor passed with every work request that touches it.
    pub desc: *mut c_void,
    /// What a peer needs to write into it through this domain.
    pub remote: RemoteKey,
}

// SAFETY: the pointers are provider handles only dereferenced by the provider,
// and fabriclib uses them only on the worker thread that owns the domain.
unsafe impl Send for LocalMr {}
unsafe impl Sync for LocalMr {}

/// What memory a registration covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Host memory (pageable or pinned; CUDA-mapped host memory too).
    Host,
    /// CUDA device memory of GPU `device`. `dmabuf`: the region exported as
    /// a dma-buf (`fd`, and the offset of the region's first byte in it),
    /// when the driver could; the backend imports it (libfabric
    /// `FI_MR_DMABUF`, verbs `ibv_reg_dmabuf_mr`) or registers the device
    /// pointer itself (`FI_HMEM_CUDA`). The fd stays the caller's.
    Cuda { device: i32, dmabuf: Option<(i32, u64)> },
}

/// A peer resolved in one domain (libfabric: an `fi_addr_t`).
pub type PeerId = u64;

/// One write work request: `len` bytes from `local` to `remote_addr` of `peer`.
#[derive(Clone, Copy, Debug)]
pub struct WriteWr {
    pub local: *const u8,
    pub len: usize,
    pub desc: *mut c_void,
    pub peer: PeerId,
    pub remote_addr: u64,
    pub key: u64,
    pub imm: Option<u32>,
}

/// One send work request: `len` bytes at `buf` (registered: `desc`) to `peer`
/// on channel `chan`.
#[derive(Clone, Copy, Debug)]
pub struct SendWr {
    pub chan: Chan,
    pub peer: PeerId,
    pub buf: *const u8,
    pub len: usize,
    pub desc: *mut c_void,
    /// An engine message that must reach the peer after the writes posted
    /// to it before it through this domain (a delivery FENCE: see
    /// `orders_sends_after_writes`). Other messages may overtake writes —
    /// on verbs they take a queue pair of their own, so that a keepalive
    /// never waits behind a long transfer.
    pub ordered: bool,
    /// Eight bytes the receiver's completion carries (`Completion::Recv`'s
    /// `data`): the sender's epoch, where the backend can
    /// (`Domain::sender_in_data`), instead of a header before the message.
    pub data: Option<u64>,
}

/// Which of the two message channels a send or receive uses: the
/// application's (`submit_send`, receive pools) or the engine's own
/// (handshake, keepalive, goodbye). They never see each other's messages
/// (libfabric: untagged vs. tagged messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chan {
    User,
    Engine,
}

/// What posting a work request did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Post {
    Posted,
    /// The send queue (or the context pool) is full: progress, then retry.
    Again,
    /// This peer has `peer_window` work requests in flight: post to other
    /// peers meanwhile.
    Busy,
}

/// A completion, already classified by the domain: the worker never sees a
/// backend's error numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A write or send of `bytes` to `peer` posted with `token` finished (its
    /// source buffer is free again).
    Done { token: u64, peer: PeerId, bytes: u64 },
    /// A write, send or receive posted with `token` (to `peer`; `u64::MAX`
    /// for a receive) failed. The domain classifies its backend's error into
    /// `error.status` (`PeerDown`, `RemoteAccess`, `LocalAccess`, `Truncated`,
    /// else `Provider`) and says what the backend reported in `error.message`.
    Failed { token: u64, peer: PeerId, error: Error },
    /// A receive posted with `token` got `len` bytes (and the eight bytes
    /// of completion data the sender gave it, `SendWr::data`, if any).
    Recv { token: u64, len: usize, data: Option<u64> },
    /// A remote write carrying `imm` landed in our memory.
    RemoteWrite { imm: u32 },
}

/// One NIC as the worker sees it.
pub trait Domain: Sized + Send + 'static {
    /// Opens the domain `spec` describes.
    fn open(spec: &DomainSpec) -> Result<Self>;
    /// The provider actually in use (e.g. `tcp;ofi_rxm`).
    fn provider(&self) -> &str;
    /// The NIC it is open on (nic.rs), with `device_memory`.
    fn nic(&self) -> Nic {
        Nic { name: self.provider().to_string(), device_memory: self.device_memory(), ..Default::default() }
    }
    /// This domain's address, as peers pass it to `resolve`.
    fn address(&self) -> &[u8];
    /// Largest single work request; bigger writes are split.
    fn max_msg_size(&self) -> usize;
    /// Registers `len` bytes at `ptr` of `mem` memory. A backend that cannot
    /// reach device memory (`device_memory()` false) refuses `Memory::Cuda`
    /// with `Unsupported`; it never registers it as host memory.
    fn register(&mut self, ptr: *mut u8, len: usize, mem: Memory) -> Result<LocalMr>;
    /// A file descriptor that becomes readable when this domain has
    /// completions or progress to make (libfabric: the CQ's `FI_WAIT_FD`);
    /// `None`: the worker cannot block on it and naps instead.
    fn wait_fd(&self) -> Option<i32> {
        None
    }
    /// Whether the worker may block on `wait_fd` now: nothing is pending
    /// that only polling would bring out (libfabric: `fi_trywait`).
    fn try_wait(&mut self) -> bool {
        false
    }
    /// Whether and how `register` takes `Memory::Cuda` (libfabric: the
    /// provider has `FI_HMEM`).
    fn device_memory(&self) -> DeviceMemory {
        DeviceMemory::None
    }
    fn deregister(&mut self, mr: &LocalMr);
    /// Turns a peer's domain address into a `PeerId` (idempotent).
    fn resolve(&mut self, addr: &[u8]) -> Result<PeerId>;
    /// Forgets `peer`, whose engine is down, so that the next `resolve` of
    /// its address asks the provider afresh: a new process has taken the
    /// address (shm: a restart with the same pid, whose region the provider
    /// would otherwise never map). Default: nothing to forget.
    fn forget(&mut self, _peer: PeerId) {}
    fn post_write(&mut self, wr: &WriteWr, token: u64) -> Result<Post>;
    fn post_send(&mut self, wr: &SendWr, token: u64) -> Result<Post>;
    fn post_recv(&mut self, chan: Chan, buf: *mut u8, len: usize, desc: *mut c_void, token: u64) -> Result<Post>;
    /// Withdraws the posted receives whose token `which` picks (a receive
    /// pool was removed): each completes as `Failed` soon after. A backend
    /// that cannot withdraw a posted receive (verbs) does nothing: those
    /// complete when messages land in them. Default: nothing.
    fn cancel_recvs(&mut self, _which: &mut dyn FnMut(u64) -> bool) {}
    /// Reads up to a batch of completions into `out`; returns how many.
    /// Work posted and held back for batching goes out first.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize>;
    /// Sends the work posted and held back for batching (verbs rings its
    /// doorbells, which it otherwise does in the next `poll`): the end of a
    /// pass that posted after its poll. Default: nothing (posts go at once).
    fn flush(&mut self) {}
    /// Operations posted and not yet completed.
    fn in_flight(&self) -> usize;
    /// Gives up on every write and send to `peer` still on the wire (it was
    /// declared down): pushes their tokens to `out`, and never reports them
    /// afterwards (a late completion is swallowed). Their slots no longer
    /// count against the queue depth.
    fn abandon(&mut self, peer: PeerId, out: &mut Vec<u64>);
    /// The largest send the provider completes without waiting for the
    /// target's answer. Larger ones complete only once the target has
    /// answered, and a target that died never answers (libfabric's shm: an
    /// endpoint's completions of such operations come back in posting
    /// order, so one left waiting on a dead peer stalls every later one, to
    /// any peer). A larger send is refused at submit. `usize::MAX` (the
    /// default): no such limit.
    fn answer_free_limit(&self) -> usize {
        usize::MAX
    }
    /// A write with an immediate larger than this is split by the worker:
    /// its bytes without the immediate, then, once they are complete, a
    /// zero-byte write carrying it (worker/split.rs), for a domain that
    /// would otherwise post it where a dead peer's missing answer stalls
    /// the others (shm with `FABRICLIB_SHM_SPLIT=always`; by default shm
    /// posts such writes on an endpoint per peer instead). `usize::MAX`
    /// (the default): never split.
    fn write_split_limit(&self) -> usize {
        usize::MAX
    }
    /// Whether peers must answer the engine's handshake before requests to
    /// them are posted (false only for `null`, where nothing ever answers).
    fn handshakes(&self) -> bool {
        true
    }
    /// Whether a restarted process can take an old address again (IP
    /// providers): peers are then re-checked before requests are posted to
    /// them after a silence (see worker/peers.rs).
    fn addresses_come_back(&self) -> bool {
        false
    }
    /// Whether the target refuses a write through a key it did not issue
    /// (libfabric's tcp and EFA, verbs: the provider or the NIC checks keys
    /// at the target, and every endpoint starts its keys at a random point).
    /// Where it does not (shm: the *sender* copies into the target process by
    /// pid and virtual address), a process restarted with the same pid could
    /// be written through its predecessor's descriptors; engines then keep
    /// liveness records (liveness.rs) and a writer reads its peer's before
    /// every post.
    fn keys_checked_by_target(&self) -> bool {
        true
    }
    /// Whether a message to a peer is delivered after every write posted to
    /// it before the message on this domain, and the target takes them from
    /// its completion queue in that order — every message, or at least one
    /// posted `SendWr::ordered`: then an answered engine message proves the
    /// writes before it delivered (delivery fences, worker/fence.rs).
    /// Without it, `RequestOpts::delivered` is refused.
    fn orders_sends_after_writes(&self) -> bool {
        false
    }
    /// Whether a send may carry eight bytes of completion data that the
    /// receiver's completion reports (`SendWr::data`): the application's
    /// messages then name their sender there instead of in a header before
    /// the message, so that a message is as long on the wire as the
    /// application's (tcp;ofi_rxm sends one of at most 64 bytes in one copy,
    /// a longer one in three pieces). Both ends of a connection use one
    /// backend and provider, so they agree. Default: false.
    fn sender_in_data(&self) -> bool {
        false
    }
}

/// How a provider without device-memory support refuses GPU memory.
pub fn no_device_memory(provider: &str, device: i32) -> Error {
    Error::new(
        crate::Status::Unsupported,
        format!(
            "the {provider} provider cannot register GPU memory (CUDA device {device}): it lacks FI_HMEM \
             (this libfabric was built without CUDA support, or the provider has none; EFA has it)"
        ),
    )
}

/// A random 64-bit number (std's per-process hash keys, the clock and the
/// pid): engine epochs and the first MR key of an endpoint. Not for secrets.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}
