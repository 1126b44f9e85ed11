//! Benchmark buffers: plain heap memory, or (`--hugepages`) anonymous memory
//! 2 MiB-aligned with `madvise(MADV_HUGEPAGE)`, so that transparent huge
//! pages back it (a CMA copy from 4 KiB pages ran at about 5.5 GB/s here,
//! from huge pages at 9.5–9.9). Either is written in full at allocation, so
//! no read ever comes from the kernel's shared zero page.
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether new regions use huge pages (`--hugepages`; servers get it per `alloc`).
pub static HUGE: AtomicBool = AtomicBool::new(false);

const HUGE_PAGE: usize = 2 << 20;

pub enum Mem {
    Heap(Vec<u8>),
    /// `len` bytes at `ptr`, inside the mapping of `mapped` bytes at `base`.
    Huge {
        ptr: *mut u8,
        len: usize,
        base: *mut u8,
        mapped: usize,
    },
}

// SAFETY: plain memory owned by the Mem.
unsafe impl Send for Mem {}

impl Mem {
    /// `len` bytes, zero-filled (written, not just mapped).
    pub fn new(len: usize, huge: bool) -> Result<Mem, String> {
        if !huge {
            let mut v = vec![0u8; len];
            // calloc'd pages are the shared zero page until written: write them.
            v.fill(0);
            return Ok(Mem::Heap(v));
        }
        // One huge page more, to align the start.
        let mapped = len.div_ceil(HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE;
        let base = fabriclib::os::map_anonymous(mapped).map_err(|e| format!("mmap of {mapped} bytes: {e}"))?;
        let ptr = ((base as usize).div_ceil(HUGE_PAGE) * HUGE_PAGE) as *mut u8;
        // SAFETY: [ptr, ptr+len) lies inside the mapping; advice only.
        unsafe {
            fabriclib::os::advise_huge_pages(ptr, len.div_ceil(HUGE_PAGE) * HUGE_PAGE);
            std::ptr::write_bytes(ptr, 0, len);
        }
        THP_SEEN.fetch_max(thp_bytes(), Ordering::Relaxed);
        Ok(Mem::Huge { ptr, len, base, mapped })
    }
}

/// The most THP-backed bytes seen after an allocation (reported in the JSON).
pub static THP_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes of this process's anonymous memory backed by transparent huge pages.
pub fn thp_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("AnonHugePages:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

impl Deref for Mem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mem::Heap(v) => v,
            // SAFETY: len bytes of our mapping.
            Mem::Huge { ptr, len, .. } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl DerefMut for Mem {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Mem::Heap(v) => v,
            // SAFETY: as above.
            Mem::Huge { ptr, len, .. } => unsafe { std::slice::from_raw_parts_mut(*ptr, *len) },
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if let Mem::Huge { base, mapped, .. } = *self {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { fabriclib::os::unmap(base, mapped) };
        }
    }
}
