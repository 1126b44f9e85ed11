//! fabriclib: an RDMA point-to-point transfer engine for LLM systems.
//!
//! Layers, top to bottom (one direction of dependency):
//! `capi` (C ABI) → `engine` (TransferEngine, validation) → `worker` (the
//! worker of one DomainGroup: sharding, posting, completion aggregation) →
//! `domain` (one NIC: the `Domain` trait, a folder per backend) → `sys`
//! (libfabric bindings). `completion` (callbacks, flag words, the ImmCounter,
//! peer state) is used by `engine` and `worker` and uses neither; `os` is the
//! one room for the operating system.
pub mod bell;
pub mod capi;
pub mod completion;
pub mod config;
pub mod domain;
pub mod engine;
pub mod error;
pub mod fasthash;
pub mod gpu;
pub mod liveness;
pub mod log;
pub mod metrics;
pub mod os;
pub mod pin;
pub mod status;
pub mod topo;
pub mod watcher;
pub mod wire;
pub mod worker;

pub use completion::flag::wait as wait_flag;
pub use completion::notify::{Deadline, FLAG_DONE, OnDone, RequestId, RequestOpts, Route};
pub use config::{DeviceMemoryMode, EngineConfig, GroupConfig, IdlePolicy, MAX_GROUPS, PeerState};
pub use domain::{DeviceMemory, Nic};
pub use engine::{MrHandle, Pages, PeerSet, RecvPoolId, ScatterDst, SingleWrite, TransferEngine};
pub use error::{Error, Result, Status};
pub use wire::{EngineAddress, MrDesc, MrMemory, NetAddr};
pub use worker::counters::{Count, Counters, NicCount};
pub use worker::recv::{Origin, Received};

/// Run when the library loads (after the libraries it depends on, libfabric's
/// among them, have run their own): gives back the crash and termination
/// signals that libinfinipath takes over (`os::undo_infinipath_handlers`).
extern "C" fn on_load() {
    os::undo_infinipath_handlers();
}

#[used]
#[unsafe(link_section = ".init_array")]
static ON_LOAD: extern "C" fn() = on_load;
