//! The code families of the C API, as C enums (`fabriclib_status` is in
//! src/status.rs). cbindgen writes these into the header, and the functions
//! and fields that take a code are typed with them there. On the Rust side
//! each file that takes one aliases the same name to the integer it is
//! (`type fabriclib_thread = u32;`): a value from C is only ever an integer
//! to Rust, so an out-of-range one is refused (`INVALID_ARGUMENT`), never
//! undefined behaviour, whatever a C or C++ caller passes.
#![allow(non_camel_case_types, dead_code)]

/// Which of an engine's threads (`fabriclib_config_set_thread_cpus`).
#[repr(u32)]
pub enum fabriclib_thread {
    /// The worker thread (of each group).
    Worker = 0,
    /// The callback thread.
    Callback = 1,
    /// The watcher thread.
    Watcher = 2,
}

/// How much a log message matters (`fabriclib_set_log_callback`).
#[repr(u32)]
pub enum fabriclib_log_level {
    /// Something failed and fabriclib could not report it as a status.
    Error = 0,
    /// Something went wrong and fabriclib carried on.
    Warn = 1,
}

/// What the worker does while idle with an expectation armed
/// (`fabriclib_config_set_idle_policy`).
#[repr(u32)]
pub enum fabriclib_idle {
    /// Keep spinning while an expectation is armed (the lowest first-arrival
    /// latency; one core per engine): for engine threads on CPUs of their own.
    Spin = 0,
    /// Block on the completion queues' wait object where the provider has
    /// one (tcp, verbs); on shm, which has none, sleep in naps of `nap_us`
    /// that a peer engine's write ends at once (a doorbell it rings). The
    /// default (since 0.4).
    Auto = 1,
    /// Sleep even with an expectation armed: as `FABRICLIB_IDLE_AUTO`, and
    /// nap `nap_us` at a time where there is neither a wait object nor a
    /// doorbell.
    Block = 2,
}

/// A peer engine's state: connecting, up or down (`fabriclib_peer_state`,
/// the peer-state callback).
/// cbindgen:rename-all=None
#[repr(i32)]
pub enum fabriclib_peer_liveness {
    /// Greeted, and it has not answered yet (`fabriclib_peer_state` only).
    FABRICLIB_PEER_CONNECTING = 0,
    /// It has answered the handshake: requests to it are posted.
    FABRICLIB_PEER_UP = 1,
    /// Dead, unreachable, shut down or restarted (see the status passed with it).
    FABRICLIB_PEER_DOWN = 2,
}

/// What memory `fabriclib_mapped_alloc` and a watcher's word live in.
#[repr(u32)]
pub enum fabriclib_memory {
    /// CUDA-mapped host memory if a CUDA driver and the device are present,
    /// else plain host memory.
    Auto = 0,
    /// Plain host memory (no kernel can reach it).
    Host = 1,
    /// Pinned host memory mapped into the GPU's address space
    /// (`cuMemHostAlloc` with `PORTABLE | DEVICEMAP`); `UNSUPPORTED` without CUDA.
    CudaMapped = 2,
}

/// What memory a peer's registered region is (`fabriclib_remote_mr_memory`).
#[repr(u32)]
pub enum fabriclib_region_memory {
    /// Host memory (pageable, pinned or CUDA-mapped).
    Host = 1,
    /// GPU memory (`fabriclib_mr_register_device`, or device memory that
    /// `fabriclib_mr_register` detected).
    Device = 2,
}

/// Whether an engine asks its providers for device memory
/// (`fabriclib_config_set_device_memory`).
#[repr(u32)]
pub enum fabriclib_device_memory_mode {
    /// Where device memory can move at all: the machine has an NVIDIA driver
    /// and the libfabric in use was built with CUDA. The default.
    Auto = 0,
    /// Always ask (`FI_HMEM`), falling back per NIC where the provider has none.
    On = 1,
    /// Never ask: the providers' host-memory configuration.
    Off = 2,
}

/// Whether and how a NIC takes CUDA device memory
/// (`fabriclib_engine_nic_device_memory`).
#[repr(u32)]
pub enum fabriclib_device_path {
    /// It does not: `fabriclib_mr_register_device` returns `UNSUPPORTED`.
    None = 0,
    /// The provider copies between processes of one host through CUDA IPC
    /// (libfabric's shm): regions registered by device pointer.
    Ipc = 1,
    /// The NIC reaches GPU memory (GPUDirect RDMA), registered as a dma-buf,
    /// or by device pointer where the dma-buf is refused.
    Dmabuf = 2,
    /// The NIC reaches GPU memory, registered by device pointer (a
    /// peer-memory driver; libfabric before 1.20).
    Pointer = 3,
}

/// Which NICs carry a request (`fabriclib_submit_opts.route`).
#[repr(u32)]
pub enum fabriclib_route {
    /// Over all NICs (the default).
    Shard = 0,
    /// On NIC `nic` only.
    Nic = 1,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IdlePolicy, PeerState};
    use crate::gpu::MemoryKind;
    use crate::wire::MrMemory;

    /// Each C code is the Rust value it stands for, and a code past the
    /// last is refused: the C enums and the Rust ones cannot drift apart.
    #[test]
    fn every_c_code_maps_to_its_rust_value() {
        use fabriclib_peer_liveness::*;
        for (c, r) in [(FABRICLIB_PEER_CONNECTING, PeerState::Connecting), (FABRICLIB_PEER_UP, PeerState::Up)] {
            assert_eq!(c as i32, r as i32);
        }
        assert_eq!(FABRICLIB_PEER_DOWN as i32, PeerState::Down as i32);
        let idle = [(fabriclib_idle::Spin, IdlePolicy::Spin), (fabriclib_idle::Auto, IdlePolicy::Auto)];
        for (c, r) in idle.into_iter().chain([(fabriclib_idle::Block, IdlePolicy::Block)]) {
            assert_eq!(IdlePolicy::from_code(c as u32).unwrap(), r);
        }
        assert!(IdlePolicy::from_code(fabriclib_idle::Block as u32 + 1).is_err());
        for (c, r) in
            [(fabriclib_region_memory::Host, MrMemory::Host), (fabriclib_region_memory::Device, MrMemory::Device)]
        {
            assert_eq!(c as u32, r as u32);
        }
        let mem = [(fabriclib_memory::Auto, MemoryKind::Auto), (fabriclib_memory::Host, MemoryKind::Host)];
        for (c, r) in mem.into_iter().chain([(fabriclib_memory::CudaMapped, MemoryKind::CudaMapped)]) {
            assert_eq!(MemoryKind::from_code(c as u32).unwrap(), r);
        }
        assert!(MemoryKind::from_code(fabriclib_memory::CudaMapped as u32 + 1).is_err());
        use crate::config::DeviceMemoryMode as M;
        use fabriclib_device_memory_mode as C;
        for (c, r) in [(C::Auto, M::Auto), (C::On, M::On), (C::Off, M::Off)] {
            assert_eq!(M::from_code(c as u32).unwrap(), r);
        }
        assert!(M::from_code(C::Off as u32 + 1).is_err());
        use crate::domain::DeviceMemory as D;
        use fabriclib_device_path as P;
        for (c, r) in [(P::None, D::None), (P::Ipc, D::Ipc), (P::Dmabuf, D::DmaBuf), (P::Pointer, D::Pointer)] {
            assert_eq!(c as u32, r as u32);
        }
    }
}
