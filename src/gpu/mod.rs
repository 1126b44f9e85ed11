//! GPUs: the CUDA driver loaded at run time (`cuda`), and memory that both
//! the CPU and a kernel can reach (`Mapped`): watcher words, completion flags
//! and mirrored immediate counters live in it.
//!
//! Memory ordering between a kernel and fabriclib, through mapped memory:
//! - kernel → CPU (a watcher): the kernel stores with a volatile store
//!   (`*(volatile uint64_t *)w = v`) and then `__threadfence_system()`;
//!   the watcher thread loads with acquire ordering. Data the kernel wrote
//!   before the fence is visible to the callback.
//! - CPU → kernel (a flag, a mirrored counter): the worker stores with
//!   release ordering after the bytes have landed; the kernel polls with a
//!   volatile load and runs `__threadfence_system()` after seeing the value,
//!   before it reads the data.
pub mod cuda;

use crate::error::{Error, Result, Status};
use std::alloc::Layout;

/// Where `Mapped` memory comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    /// CUDA-mapped if a driver and a device are present, else host.
    Auto,
    /// Plain host memory: no kernel can reach it (a CPU-only watcher, CI).
    Host,
    /// Pinned host memory mapped into the GPU's address space
    /// (`cuMemHostAlloc(PORTABLE | DEVICEMAP)`); `Unsupported` without CUDA.
    CudaMapped,
}

impl MemoryKind {
    pub fn from_code(code: u32) -> Result<MemoryKind> {
        match code {
            0 => Ok(MemoryKind::Auto),
            1 => Ok(MemoryKind::Host),
            2 => Ok(MemoryKind::CudaMapped),
            _ => crate::bail!(InvalidArgument, "unknown memory kind {code} (0 auto, 1 host, 2 CUDA-mapped)"),
        }
    }
}

/// Zeroed memory, aligned to a cache line, that the CPU reaches at `host`
/// and a kernel at `device` (0 for host memory). Freed on drop.
pub struct Mapped {
    host: *mut u8,
    device: u64,
    len: usize,
    cuda: bool,
}

// SAFETY: plain memory; who writes it when is the API's contract.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl Mapped {
    /// `len` bytes of `kind` memory, for device `ordinal` (CUDA-mapped memory
    /// is portable: every context can use it; `ordinal` picks the context
    /// used to allocate it when the calling thread has none).
    pub fn new(kind: MemoryKind, ordinal: i32, len: usize) -> Result<Mapped> {
        if len == 0 {
            crate::bail!(InvalidArgument, "mapped memory: zero length");
        }
        let cuda = match kind {
            MemoryKind::Host => None,
            MemoryKind::CudaMapped => Some(cuda::cuda()?),
            MemoryKind::Auto => cuda::cuda().ok().filter(|c| c.device_count().is_ok_and(|n| n > ordinal)),
        };
        let Some(c) = cuda else {
            let layout = Layout::from_size_align(len, 64)
                .map_err(|e| Error::new(Status::InvalidArgument, format!("mapped memory of {len} bytes: {e}")))?;
            // SAFETY: non-zero size.
            let host = unsafe { std::alloc::alloc_zeroed(layout) };
            if host.is_null() {
                crate::bail!(Provider, "out of memory allocating {len} bytes");
            }
            return Ok(Mapped { host, device: 0, len, cuda: false });
        };
        let (host, device) = c.host_alloc_mapped(ordinal, len)?;
        // SAFETY: len bytes just allocated (page-aligned by the driver).
        unsafe { std::ptr::write_bytes(host, 0, len) };
        Ok(Mapped { host, device, len, cuda: true })
    }

    pub fn host(&self) -> *mut u8 {
        self.host
    }

    /// The address a kernel uses; `None` for host memory.
    pub fn device(&self) -> Option<u64> {
        self.cuda.then_some(self.device)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_cuda(&self) -> bool {
        self.cuda
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.cuda {
            if let Ok(c) = cuda::cuda() {
                // SAFETY: allocated by host_alloc_mapped, dropped once.
                unsafe { c.free_host(self.host) };
            }
        } else {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(self.host, Layout::from_size_align_unchecked(self.len, 64)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_memory_is_zeroed_aligned_and_has_no_device_address() {
        let m = Mapped::new(MemoryKind::Host, 0, 100).unwrap();
        assert_eq!(m.host() as usize % 64, 0);
        // SAFETY: 100 bytes of our memory.
        assert!(unsafe { std::slice::from_raw_parts(m.host(), 100) }.iter().all(|&b| b == 0));
        assert_eq!(m.device(), None);
        assert!(Mapped::new(MemoryKind::Host, 0, 0).is_err());
        assert_eq!(MemoryKind::from_code(7).unwrap_err().status, Status::InvalidArgument);
    }

    #[test]
    fn cuda_mapped_memory_needs_a_driver() {
        match (Mapped::new(MemoryKind::CudaMapped, 0, 64), cuda::cuda()) {
            (Err(e), Err(_)) => assert_eq!(e.status, Status::Unsupported, "{e}"),
            (Ok(m), Ok(_)) => assert!(m.device().is_some()),
            (m, c) => panic!("mapped {:?} but driver {:?}", m.err(), c.err()),
        }
        // Auto falls back to host memory without a driver.
        let m = Mapped::new(MemoryKind::Auto, 0, 64).unwrap();
        assert_eq!(m.is_cuda(), cuda::cuda().is_ok_and(|c| c.device_count().is_ok_and(|n| n > 0)));
    }
}
