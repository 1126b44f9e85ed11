//! Registering memory: `register`, `register_memory` and the handle they
//! return (deregistered once its last clone and last request are gone).
use super::TransferEngine;
use crate::bail;
use crate::domain::Memory;
use crate::error::Result;
use crate::wire::{MrDesc, MrMemory, RemoteKey};
use crate::worker::request::{Ctrl, MrInner};
use std::sync::Arc;

/// A registered local region (source of writes, target of peers' writes).
/// Cloning is cheap; the registration ends when the last clone and the last
/// request using it are gone.
#[derive(Clone)]
pub struct MrHandle(pub(crate) Arc<MrInner>);

impl MrHandle {
    pub fn ptr(&self) -> *mut u8 {
        self.0.ptr as *mut u8
    }
    pub fn len(&self) -> usize {
        self.0.len
    }
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    /// The descriptor a peer needs to write here.
    pub fn descriptor(&self) -> &Arc<MrDesc> {
        &self.0.desc
    }
    /// The engine this region belongs to.
    pub fn engine_id(&self) -> u64 {
        self.0.engine_id
    }
    /// The engine's group (`EngineConfig::groups`) the region is registered
    /// in: writes from it go through that group's NICs and worker.
    pub fn group(&self) -> usize {
        self.0.group as usize
    }
}

impl TransferEngine {
    /// Registers `len` bytes at `ptr` in every domain. The memory must stay
    /// valid until the returned handle (and every request using it) is gone.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable and writable memory that outlives the registration.
    /// With several groups, the region goes to the group of its memory:
    /// device memory to the group of its GPU (`GroupConfig::gpu`), host
    /// memory to the group of the NUMA node its first page is on
    /// (`GroupConfig::numa`), anything else to the home group (group 0);
    /// `register_in_group` chooses explicitly.
    pub unsafe fn register(&self, ptr: *mut u8, len: usize) -> Result<MrHandle> {
        let device = device_of(ptr);
        let g = self.group_of_memory(ptr, device);
        // SAFETY: the caller's contract; `device` is what the driver says of ptr.
        unsafe { self.register_as(g, ptr, len, device, true) }
    }

    /// Registers `len` bytes at `ptr` that the caller says are host memory
    /// (`device` `None`) or CUDA device memory of GPU `device` (the paper's
    /// `reg_mr(ptr, len, device)`). Device memory goes to the provider as
    /// such (a dma-buf where the driver exports one): a provider without
    /// `FI_HMEM` refuses it with `Unsupported`, naming itself.
    ///
    /// # Safety
    /// As `register`.
    pub unsafe fn register_memory(&self, ptr: *mut u8, len: usize, device: Option<i32>) -> Result<MrHandle> {
        let g = self.group_of_memory(ptr, device);
        // SAFETY: the caller's contract.
        unsafe { self.register_in_group(g, ptr, len, device) }
    }

    /// The group a registration of `ptr` (of CUDA device `device`) goes to.
    fn group_of_memory(&self, ptr: *const u8, device: Option<i32>) -> usize {
        if self.groups.len() == 1 {
            return 0;
        }
        let by = |f: &dyn Fn(&super::Group) -> bool| self.groups.iter().position(f).unwrap_or(0);
        match device {
            Some(d) => by(&|g| g.gpu == Some(d)),
            None if self.groups.iter().any(|g| g.numa.is_some()) && !ptr.is_null() => {
                match crate::topo::numa_node_of(ptr as usize) {
                    Some(n) => by(&|g| g.numa == Some(n)),
                    None => 0,
                }
            }
            None => 0,
        }
    }

    /// `register_memory` into group `group` of the engine, whatever memory it is.
    ///
    /// # Safety
    /// As `register`.
    pub unsafe fn register_in_group(
        &self,
        group: usize,
        ptr: *mut u8,
        len: usize,
        device: Option<i32>,
    ) -> Result<MrHandle> {
        // SAFETY: the caller's contract.
        unsafe { self.register_as(group, ptr, len, device, false) }
    }

    /// `register_in_group`; `looked`: `device` is what the driver says of
    /// `ptr` already (`register`), so it is not asked again.
    ///
    /// # Safety
    /// As `register`.
    unsafe fn register_as(
        &self,
        group: usize,
        ptr: *mut u8,
        len: usize,
        device: Option<i32>,
        looked: bool,
    ) -> Result<MrHandle> {
        let Some(grp) = self.groups.get(group) else {
            bail!(InvalidArgument, "register: group {group}: the engine has {}", self.groups.len());
        };
        if ptr.is_null() {
            bail!(InvalidArgument, "register: NULL pointer");
        }
        if len == 0 {
            bail!(InvalidArgument, "register: zero length");
        }
        if (ptr as usize).checked_add(len).is_none() {
            bail!(InvalidArgument, "register: region wraps the address space");
        }
        let mem = match device {
            // Device memory said to be host memory would reach the provider
            // as host memory: refused.
            None => match if looked { None } else { device_of(ptr) } {
                Some(d) => bail!(
                    InvalidArgument,
                    "register: {ptr:p} is device memory of CUDA device {d}, registered as host memory \
                     (register it as device memory, or let fabriclib_mr_register detect it)"
                ),
                None => Memory::Host,
            },
            Some(d) => {
                let cuda = crate::gpu::cuda::cuda()?;
                if !looked && cuda.device_of(ptr) != Some(d) {
                    bail!(InvalidArgument, "register: {ptr:p} is not device memory of CUDA device {d}");
                }
                if !grp.info.device_memory {
                    return Err(crate::domain::no_device_memory(&grp.info.provider, d));
                }
                Memory::Cuda { device: d, dmabuf: cuda.export_dmabuf(d, ptr, len).ok() }
            }
        };
        let registered = self.rpc_to(group, |reply| Ctrl::Register { ptr: ptr as usize, len, mem, reply });
        if let Memory::Cuda { dmabuf: Some((fd, _)), .. } = mem {
            // Our fd from the export; the provider holds its own reference now.
            crate::os::close(fd);
        }
        let (index, locals) = registered?;
        let desc = Arc::new(MrDesc {
            base: ptr as u64,
            len: len as u64,
            memory: if device.is_some() { MrMemory::Device } else { MrMemory::Host },
            owner: grp.info.address.clone(),
            keys: locals.iter().map(|m| m.remote).collect::<Vec<RemoteKey>>(),
            held: Default::default(),
        });
        Ok(MrHandle(Arc::new(MrInner {
            index,
            group: group as u8,
            engine_id: self.id,
            ptr: ptr as usize,
            len,
            desc,
            shared: grp.shared.clone(),
        })))
    }

    /// Checks that `mr` is this engine's; returns its group.
    pub(super) fn own(&self, mr: &MrHandle) -> Result<usize> {
        if mr.0.engine_id != self.id {
            bail!(BadHandle, "memory region belongs to another engine");
        }
        Ok(mr.0.group as usize)
    }
}

/// The CUDA device whose memory `ptr` is, where the process uses CUDA: only
/// such a process can hold device pointers, so the driver is never loaded
/// to ask.
fn device_of(ptr: *const u8) -> Option<i32> {
    if !crate::gpu::cuda::loaded_by_process() {
        return None;
    }
    crate::gpu::cuda::cuda().ok().and_then(|c| c.device_of(ptr))
}
