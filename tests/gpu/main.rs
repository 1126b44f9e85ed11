//! The GPU suite: real CUDA driver, real kernels (PTX in kernels.ptx, compiled
//! by the driver), real providers. On a machine without a driver every test
//! that needs one says "skipped", never "passed"; the no-driver test runs
//! everywhere. `scripts/gpu-test.sh` runs this on a GPU machine.
use fabriclib::gpu::cuda::{CuFunction, Cuda, cuda};
use fabriclib::gpu::{Mapped, MemoryKind};
use fabriclib::{EngineConfig, FLAG_DONE, MrMemory, OnDone, Pages, Status, TransferEngine};
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PTX: &str = include_str!("kernels.ptx");

enum Outcome {
    Passed(String),
    Skipped(String),
}
use Outcome::*;
type TestResult = Result<Outcome, String>;

fn e2s(e: fabriclib::Error) -> String {
    e.to_string()
}

/// The driver, or why the test is skipped.
fn need_cuda() -> Result<&'static Cuda, Outcome> {
    cuda().map_err(|e| Skipped(e.message))
}

macro_rules! gpu {
    () => {
        match need_cuda() {
            Ok(c) => c,
            Err(skip) => return Ok(skip),
        }
    };
}

fn kernel(c: &Cuda, name: &str) -> Result<CuFunction, String> {
    let image = CString::new(PTX).unwrap();
    let name = CString::new(name).unwrap();
    c.function(0, &image, &name).map_err(e2s)
}

/// Kernel arguments: each a pointer to its value, as cuLaunchKernel wants.
struct Args(Vec<u64>);
impl Args {
    fn new(v: &[u64]) -> Args {
        Args(v.to_vec())
    }
    fn ptrs(&mut self) -> Vec<*mut c_void> {
        self.0.iter_mut().map(|b| b as *mut u64 as *mut c_void).collect()
    }
}

fn engine(provider: &str) -> Result<TransferEngine, String> {
    let cfg = EngineConfig {
        provider: Some(provider.into()),
        bind_addr: Some("127.0.0.1".into()),
        watcher_spin_us: u64::MAX,
        ..Default::default()
    };
    TransferEngine::new(&cfg).map_err(e2s)
}

fn driver_and_devices() -> TestResult {
    let c = gpu!();
    let n = c.device_count().map_err(e2s)?;
    let bus = c.pci_bus_id(0).map_err(e2s)?;
    let dmabuf = c.dmabuf_supported(0).map_err(e2s)?;
    Ok(Passed(format!("driver {}, {n} device(s), device 0 at {bus}, dma-buf export {dmabuf}", c.version)))
}

fn device_pointers_are_detected() -> TestResult {
    let c = gpu!();
    let d = c.mem_alloc(0, 1 << 20).map_err(e2s)?;
    let mapped = Mapped::new(MemoryKind::CudaMapped, 0, 4096).map_err(e2s)?;
    let host = vec![0u8; 4096];
    let got = (
        c.device_of(d as *const u8),
        c.device_of((d + 4096) as *const u8),
        c.device_of(mapped.host()),
        c.device_of(host.as_ptr()),
    );
    // SAFETY: allocated above, not used after.
    unsafe { c.mem_free(0, d) }.map_err(e2s)?;
    if got != (Some(0), Some(0), None, None) {
        return Err(format!("device_of(device, device+4096, mapped host, pageable host) = {got:?}"));
    }
    Ok(Passed("cuMemAlloc memory is device 0's; mapped and pageable host memory are host".into()))
}

fn dmabuf_export() -> TestResult {
    let c = gpu!();
    if !c.dmabuf_supported(0).map_err(e2s)? {
        return Ok(Skipped("device 0 cannot export dma-bufs".into()));
    }
    let d = c.mem_alloc(0, 4 << 20).map_err(e2s)?;
    // An unaligned start: the export widens to pages and says where the region begins.
    let r = c.export_dmabuf(0, (d + 100) as *const u8, 1 << 20);
    // SAFETY: allocated above.
    unsafe { c.mem_free(0, d) }.map_err(e2s)?;
    let (fd, off) = r.map_err(e2s)?;
    let size = std::fs::metadata(format!("/proc/self/fd/{fd}")).map(|m| m.len()).unwrap_or(0);
    fabriclib::os::close(fd);
    if fd < 0 || off != 100 {
        return Err(format!("export gave fd {fd}, offset {off} (want 100)"));
    }
    Ok(Passed(format!("cuMemGetHandleForAddressRange(DMA_BUF_FD): fd {fd}, offset {off}, fstat size {size}")))
}

fn device_memory_refused_without_fi_hmem() -> TestResult {
    let c = gpu!();
    let d = c.mem_alloc(0, 1 << 20).map_err(e2s)?;
    let mut said = Vec::new();
    for prov in ["tcp;ofi_rxm", "shm"] {
        let e = engine(prov)?;
        // Detected by itself, and said explicitly: both refused, never registered as host memory.
        // SAFETY: device memory that outlives the engine's use (the registration fails).
        let auto = unsafe { e.register(d as *mut u8, 1 << 20) };
        // SAFETY: as above.
        let explicit = unsafe { e.register_memory(d as *mut u8, 1 << 20, Some(0)) };
        for r in [auto, explicit] {
            match r {
                Err(err)
                    if err.status == Status::Unsupported
                        && err.message.contains("FI_HMEM")
                        && err.message.contains(e.provider()) =>
                {
                    said.push(format!("{prov}: {}", err.message))
                }
                Err(err) => return Err(format!("{prov}: refused with the wrong error: {err}")),
                Ok(_) => return Err(format!("{prov}: device memory was registered without FI_HMEM")),
            }
        }
        // A host pointer said to be device memory is refused as such.
        let host = [0u8; 64];
        // SAFETY: as above.
        match unsafe { e.register_memory(host.as_ptr() as *mut u8, 64, Some(0)) } {
            Err(err) if err.status == Status::InvalidArgument => {}
            other => return Err(format!("{prov}: a host pointer as device memory: {:?}", other.err())),
        }
    }
    // SAFETY: allocated above.
    unsafe { c.mem_free(0, d) }.map_err(e2s)?;
    Ok(Passed(said.swap_remove(0)))
}

/// Without a GPU too: the libfabric domain itself refuses device memory on
/// tcp and shm (no FI_HMEM), naming the provider; it never registers it as
/// host memory. (The address is host memory here: the domain must not look.)
/// A region's descriptor says what memory it is, and a peer reads that back
/// from the blob (`fabriclib_remote_mr_memory`). The `null` backend takes
/// device memory (the libfabric here has no FI_HMEM); the descriptor is the
/// engine's, whatever the backend.
fn descriptors_carry_the_memory_kind() -> TestResult {
    let c = gpu!();
    let d = c.mem_alloc(0, 1 << 20).map_err(e2s)?;
    let e = engine("null")?;
    let host = vec![0u8; 4096];
    // SAFETY: both regions outlive the engine's use of them (nothing is written).
    let (dev_mr, host_mr) = unsafe {
        (e.register(d as *mut u8, 1 << 20).map_err(e2s)?, e.register(host.as_ptr() as *mut u8, 4096).map_err(e2s)?)
    };
    let kinds = [dev_mr.descriptor(), host_mr.descriptor()]
        .map(|desc| fabriclib::MrDesc::parse(&desc.to_bytes()).map(|p| p.memory));
    match kinds {
        [Ok(MrMemory::Device), Ok(MrMemory::Host)] => {
            Ok(Passed("device region: Device, host region: Host, read back from their blobs".into()))
        }
        other => Err(format!("memory kinds read back as {other:?}")),
    }
}

fn domains_without_fi_hmem_refuse_device_memory() -> TestResult {
    use fabriclib::domain::Memory;
    use fabriclib::domain::fabric::FabricEndpoint;
    let buf = vec![0u8; 4096];
    let mut said = Vec::new();
    for prov in ["tcp;ofi_rxm", "shm"] {
        let mut ep =
            FabricEndpoint::open(prov, Some("127.0.0.1").filter(|_| prov != "shm"), 64, false, true).map_err(e2s)?;
        if ep.hmem() {
            return Ok(Skipped(format!("{prov} has FI_HMEM here: nothing to refuse")));
        }
        let mem = Memory::Cuda { device: 0, dmabuf: None };
        match ep.register(buf.as_ptr() as *mut u8, buf.len(), mem) {
            Err(e) if e.status == Status::Unsupported && e.message.contains("FI_HMEM") && e.message.contains(prov) => {
                said.push(prov)
            }
            Err(e) => return Err(format!("{prov}: refused with the wrong error: {e}")),
            Ok(_) => return Err(format!("{prov}: registered device memory without FI_HMEM")),
        }
        // Host memory still registers.
        let mr = ep.register(buf.as_ptr() as *mut u8, buf.len(), Memory::Host).map_err(e2s)?;
        ep.deregister(&mr);
    }
    Ok(Passed(format!("refused by {}", said.join(" and "))))
}

/// A kernel bumps a CUDA-mapped watcher 1..=1000; the callback sees the values in order, ending at 1000.
fn kernel_bumps_a_watcher() -> TestResult {
    let c = gpu!();
    let e = engine("shm")?;
    let last = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let (l2, b2) = (last.clone(), bad.clone());
    let w = e
        .watch(
            MemoryKind::CudaMapped,
            0,
            Box::new(move |old, new| {
                if old != l2.load(Ordering::Relaxed) || new <= old {
                    b2.fetch_add(1, Ordering::Relaxed);
                }
                l2.store(new, Ordering::Release);
            }),
        )
        .map_err(e2s)?;
    let dev = w.device_ptr().ok_or("a CUDA-mapped watcher without a device pointer")?;
    let f = kernel(c, "bump")?;
    let mut args = Args::new(&[dev, 1000, 2000]);
    let mut p = args.ptrs();
    // bump's third parameter is a u32: the low half of the u64 (little-endian) is what it reads.
    // SAFETY: bump(u64*, u64, u32) with matching argument storage.
    unsafe { c.launch(0, f, 1, &mut p) }.map_err(e2s)?;
    c.synchronize(0).map_err(e2s)?;
    let t = Instant::now();
    while last.load(Ordering::Acquire) != 1000 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (l, b) = (last.load(Ordering::Acquire), bad.load(Ordering::Relaxed));
    if l != 1000 || b != 0 {
        return Err(format!("last value {l} (want 1000), {b} out of order"));
    }
    Ok(Passed("1000 kernel stores seen in order through the watcher".into()))
}

/// Two engines over shm in this process: pages land in CUDA-mapped memory; the
/// receiver mirrors the immediate into a mapped word; a kernel waits on the
/// word, then checksums the pages through its device pointer. And a request's
/// completion flag in mapped memory, read by a kernel.
fn kernel_waits_for_landed_pages() -> TestResult {
    let c = gpu!();
    const PAGES: usize = 64;
    const PAGE: usize = 4096;
    let (w, r) = (engine("shm")?, engine("shm")?);
    let src = Mapped::new(MemoryKind::Host, 0, PAGES * PAGE).map_err(e2s)?;
    let dst = Mapped::new(MemoryKind::CudaMapped, 0, PAGES * PAGE).map_err(e2s)?;
    let words = Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(e2s)?;
    // SAFETY: our allocations, alive until the end (registrations and mirrors stop first).
    let (smr, dmr) = unsafe { (w.register(src.host(), src.len()), r.register(dst.host(), dst.len())) };
    let (smr, dmr) = (smr.map_err(e2s)?, dmr.map_err(e2s)?);
    let mut want = 0u64;
    for i in 0..PAGES * PAGE / 8 {
        let v = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // SAFETY: inside src.
        unsafe { (src.host() as *mut u64).add(i).write(v) };
        want = want.wrapping_add(v);
    }
    let mirror = words.host() as *const AtomicU64;
    // SAFETY: the word outlives the mirror (stopped below).
    unsafe { r.mirror_imm_count(7, mirror) }.map_err(e2s)?;
    let out = c.mem_alloc(0, 16).map_err(e2s)?;
    let f = kernel(c, "wait_sum")?;
    let wdev = words.device().unwrap();
    let mut args = Args::new(&[wdev, PAGES as u64, dst.device().unwrap(), (PAGES * PAGE / 8) as u64, out]);
    let mut p = args.ptrs();
    // SAFETY: wait_sum(u64*, u64, u64*, u64, u64*) with matching arguments.
    unsafe { c.launch(0, f, 1, &mut p) }.map_err(e2s)?;
    // The kernel is waiting now; the pages go after it started.
    std::thread::sleep(Duration::from_millis(50));
    let flag = Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(e2s)?;
    let idx: Vec<u32> = (0..PAGES as u32).rev().collect();
    let pages = Pages { indices: &idx, stride: PAGE as u64, offset: 0 };
    // SAFETY: a 64-byte mapped word, alive until after the request has ended.
    let raw = unsafe { fabriclib::completion::notify::RawFlag::new(flag.host() as *mut u32) };
    w.submit_paged_writes(PAGE as u64, Some(7), &smr, pages, dmr.descriptor(), pages, OnDone::RawFlag(raw))
        .map_err(e2s)?;
    c.synchronize(0).map_err(e2s)?;
    let mut res = [0u8; 16];
    c.copy_from_device(0, &mut res, out).map_err(e2s)?;
    let (sum, state) =
        (u64::from_le_bytes(res[..8].try_into().unwrap()), u64::from_le_bytes(res[8..].try_into().unwrap()));
    // A kernel waits on the request's flag too: FLAG_DONE | status >= FLAG_DONE once it ended
    // (the u32 flag is the low half of the mapped word's first u64; the rest is zero).
    let out2 = c.mem_alloc(0, 16).map_err(e2s)?;
    let mut args = Args::new(&[flag.device().unwrap(), FLAG_DONE as u64, dst.device().unwrap(), 0, out2]);
    let mut p = args.ptrs();
    // SAFETY: as above.
    unsafe { c.launch(0, f, 1, &mut p) }.map_err(e2s)?;
    c.synchronize(0).map_err(e2s)?;
    let mut res2 = [0u8; 16];
    c.copy_from_device(0, &mut res2, out2).map_err(e2s)?;
    // SAFETY: allocated above.
    unsafe { c.mem_free(0, out2) }.map_err(e2s)?;
    if u64::from_le_bytes(res2[8..].try_into().unwrap()) != 1 {
        return Err("a kernel did not see the request's mapped flag turn done".into());
    }
    // SAFETY: the flag word, stored by the worker.
    let fv = unsafe { &*(flag.host() as *const AtomicU32) }.load(Ordering::Acquire);
    // SAFETY: stop the mirror before its word goes.
    unsafe { r.mirror_imm_count(7, std::ptr::null()) }.map_err(e2s)?;
    // SAFETY: `out` came from mem_alloc and nothing uses it any more.
    unsafe { c.mem_free(0, out) }.map_err(e2s)?;
    if state != 1 {
        return Err(format!("the kernel timed out waiting for the mirrored counter (state {state})"));
    }
    if sum != want {
        return Err(format!("the kernel's checksum {sum:#x} of the landed pages != {want:#x}"));
    }
    if fv & FLAG_DONE == 0 || fv & 0xffff != 0 {
        return Err(format!("the request's mapped flag reads {fv:#x}"));
    }
    drop((smr, dmr));
    Ok(Passed(format!(
        "{PAGES} pages landed; a kernel saw the mirror reach {PAGES} and checksummed them, and one saw the request's mapped flag"
    )))
}

/// A region of the device-to-device tests: `len` bytes of device 0's
/// memory, or of host memory; zeroed, freed on drop.
enum Region {
    Device(u64, usize),
    Host(Vec<u8>),
}

impl Region {
    fn new(c: &Cuda, on_gpu: bool, len: usize) -> Result<Region, String> {
        if !on_gpu {
            return Ok(Region::Host(vec![0u8; len]));
        }
        let d = c.mem_alloc(0, len).map_err(e2s)?;
        c.copy_to_device(0, d, &vec![0u8; len]).map_err(e2s)?;
        Ok(Region::Device(d, len))
    }
    fn ptr(&mut self) -> *mut u8 {
        match self {
            Region::Device(d, _) => *d as *mut u8,
            Region::Host(v) => v.as_mut_ptr(),
        }
    }
    fn device(&self) -> Option<i32> {
        matches!(self, Region::Device(..)).then_some(0)
    }
    fn fill(&mut self, c: &Cuda, bytes: &[u8]) -> Result<(), String> {
        match self {
            Region::Device(d, _) => c.copy_to_device(0, *d, bytes).map_err(e2s),
            Region::Host(v) => {
                v.copy_from_slice(bytes);
                Ok(())
            }
        }
    }
    fn read(&self, c: &Cuda) -> Result<Vec<u8>, String> {
        match self {
            Region::Device(d, len) => {
                let mut v = vec![0u8; *len];
                c.copy_from_device(0, &mut v, *d).map_err(e2s)?;
                Ok(v)
            }
            Region::Host(v) => Ok(v.clone()),
        }
    }
    fn name(&self) -> &'static str {
        if self.device().is_some() { "device" } else { "host" }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let (Region::Device(d, _), Ok(c)) = (&*self, cuda()) {
            // SAFETY: allocated in `new`, freed once; registrations are gone first (declared after).
            let _ = unsafe { c.mem_free(0, *d) };
        }
    }
}

/// The device-to-device layout: 16 pages of 64 KiB. A single write takes
/// page 0 to page 0; a paged write pages 1..=8 to 8..=1 (reversed); a
/// scatter pages 9..16 in one piece. Every write carries immediate `IMM`:
/// 1 + 8 + 1 arrivals.
const D2D_PAGE: usize = 64 << 10;
const D2D_PAGES: usize = 16;
const D2D_IMM: u32 = 7;
const D2D_ARRIVALS: u64 = 10;

fn d2d_source() -> Vec<u8> {
    (0..D2D_PAGE * D2D_PAGES).map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()[7]).collect()
}

fn d2d_expected() -> Vec<u8> {
    let src = d2d_source();
    let mut out = src.clone();
    for i in 0..8 {
        let (s, d) = (1 + i, 8 - i);
        out[d * D2D_PAGE..(d + 1) * D2D_PAGE].copy_from_slice(&src[s * D2D_PAGE..(s + 1) * D2D_PAGE]);
    }
    out
}

/// The three writes of the layout from `src` into `dst`, each waited for.
fn d2d_writes(e: &TransferEngine, src: &fabriclib::MrHandle, dst: &Arc<fabriclib::MrDesc>) -> Result<(), String> {
    let flags = [flag(), flag(), flag()];
    let page = D2D_PAGE as u64;
    e.submit_single_write(page, Some(D2D_IMM), src, 0, dst, 0, OnDone::Flag(flags[0].clone())).map_err(e2s)?;
    let (si, di): (Vec<u32>, Vec<u32>) = (1..=8u32).map(|i| (i, 9 - i)).unzip();
    let (sp, dp) = (Pages { indices: &si, stride: page, offset: 0 }, Pages { indices: &di, stride: page, offset: 0 });
    e.submit_paged_writes(page, Some(D2D_IMM), src, sp, dst, dp, OnDone::Flag(flags[1].clone())).map_err(e2s)?;
    let rest = fabriclib::ScatterDst { len: 7 * page, src_offset: 9 * page, dst: dst.clone(), dst_offset: 9 * page };
    e.submit_scatter(None, Some(D2D_IMM), src, &[rest], OnDone::Flag(flags[2].clone())).map_err(e2s)?;
    for (what, f) in ["single", "paged", "scatter"].iter().zip(&flags) {
        match fabriclib::wait_flag(f, Some(Duration::from_secs(20))) {
            None => return Err(format!("the {what} write never ended")),
            Some(FLAG_DONE) => {}
            Some(v) => return Err(format!("the {what} write ended with {:?}", Status::from_code((v & 0xffff) as i32))),
        }
    }
    Ok(())
}

fn flag() -> Arc<AtomicU32> {
    Arc::new(AtomicU32::new(0))
}

/// Checks the layout's bytes in `dst` on the GPU: a kernel waits until the
/// mirrored count of `D2D_IMM` (in `word`, CUDA-mapped) reaches every
/// arrival, then sums the region's words; the sum and then every byte
/// (copied back) are compared with what was written.
fn d2d_check(c: &Cuda, dst: &Region, word: &Mapped) -> Result<String, String> {
    let want = d2d_expected();
    if let Region::Device(d, len) = dst {
        let out = c.mem_alloc(0, 16).map_err(e2s)?;
        let f = kernel(c, "wait_sum")?;
        let mut args = Args::new(&[word.device().unwrap(), D2D_ARRIVALS, *d, (*len / 8) as u64, out]);
        let mut p = args.ptrs();
        // SAFETY: wait_sum(u64*, u64, u64*, u64, u64*) with matching arguments.
        unsafe { c.launch(0, f, 1, &mut p) }.map_err(e2s)?;
        c.synchronize(0).map_err(e2s)?;
        let mut res = [0u8; 16];
        c.copy_from_device(0, &mut res, out).map_err(e2s)?;
        // SAFETY: allocated above.
        unsafe { c.mem_free(0, out) }.map_err(e2s)?;
        let (sum, state) =
            (u64::from_le_bytes(res[..8].try_into().unwrap()), u64::from_le_bytes(res[8..].try_into().unwrap()));
        let want_sum = want.chunks(8).fold(0u64, |a, w| a.wrapping_add(u64::from_le_bytes(w.try_into().unwrap())));
        if state != 1 {
            return Err("the kernel timed out waiting for the mirrored count".into());
        }
        if sum != want_sum {
            return Err(format!("the kernel's checksum {sum:#x} != {want_sum:#x}"));
        }
    }
    let got = dst.read(c)?;
    if let Some(i) = got.iter().zip(&want).position(|(a, b)| a != b) {
        return Err(format!("byte {i} of {} differs (page {})", got.len(), i / D2D_PAGE));
    }
    Ok(format!("{} bytes checked{}", got.len(), if dst.device().is_some() { " on the GPU" } else { "" }))
}

/// Skipped unless shm takes device memory here (a libfabric built with CUDA).
fn need_device_shm(e: &TransferEngine) -> Result<(), Outcome> {
    if e.device_memory() {
        return Ok(());
    }
    Err(Skipped(format!(
        "shm takes no device memory with this libfabric ({}): build one with scripts/libfabric-cuda.sh",
        std::env::var("FABRICLIB_LIBFABRIC").unwrap_or_else(|_| "libfabric.so.1".into())
    )))
}

/// One process, two engines over shm with FI_HMEM: single, paged and scatter
/// writes with immediates device -> device, host -> device and device -> host.
fn device_writes_in_one_process() -> TestResult {
    let c = gpu!();
    let (w, r) = (engine("shm")?, engine("shm")?);
    if let Err(skip) = need_device_shm(&w) {
        return Ok(skip);
    }
    let len = D2D_PAGE * D2D_PAGES;
    let mut said = Vec::new();
    for (src_gpu, dst_gpu) in [(true, true), (false, true), (true, false)] {
        let (mut src, mut dst) = (Region::new(c, src_gpu, len)?, Region::new(c, dst_gpu, len)?);
        src.fill(c, &d2d_source())?;
        let word = Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(e2s)?;
        // SAFETY: the regions outlive their registrations (dropped at the end of the
        // iteration, after the handles); the word outlives the mirror.
        let (smr, dmr) = unsafe {
            (
                w.register_memory(src.ptr(), len, src.device()).map_err(e2s)?,
                r.register_memory(dst.ptr(), len, dst.device()).map_err(e2s)?,
            )
        };
        let _ = r.imm_count(D2D_IMM, true).map_err(e2s)?;
        // SAFETY: as above.
        unsafe { r.mirror_imm_count(D2D_IMM, word.host() as *const AtomicU64) }.map_err(e2s)?;
        d2d_writes(&w, &smr, dmr.descriptor())?;
        let checked = d2d_check(c, &dst, &word)?;
        // SAFETY: the mirror stops before its word goes.
        unsafe { r.mirror_imm_count(D2D_IMM, std::ptr::null()) }.map_err(e2s)?;
        let n = r.imm_count(D2D_IMM, true).map_err(e2s)?;
        if n != D2D_ARRIVALS {
            return Err(format!("{} -> {}: {n} immediates counted, want {D2D_ARRIVALS}", src.name(), dst.name()));
        }
        said.push(format!("{} -> {}: {checked}", src.name(), dst.name()));
        drop((smr, dmr));
    }
    Ok(Passed(said.join("; ")))
}

/// Two processes on one GPU over shm with FI_HMEM (CUDA IPC): this process
/// writes the layout from device memory into a child's device memory; the
/// child checks it on its GPU (a kernel waiting on the mirrored count).
fn device_writes_between_processes() -> TestResult {
    let c = gpu!();
    let w = engine("shm")?;
    if let Err(skip) = need_device_shm(&w) {
        return Ok(skip);
    }
    use std::io::{BufRead, BufReader, Write};
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(exe)
        .arg("--d2d-child")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || lines.next().and_then(|l| l.ok()).ok_or("the child said nothing".to_string());
    let info = next()?;
    let desc = info.strip_prefix("DESC ").ok_or(format!("the child said {info:?}"))?;
    let desc = Arc::new(fabriclib::MrDesc::parse(&from_hex(desc)).map_err(e2s)?);
    let len = D2D_PAGE * D2D_PAGES;
    let mut src = Region::new(c, true, len)?;
    src.fill(c, &d2d_source())?;
    // SAFETY: src outlives the registration (dropped after it).
    let smr = unsafe { w.register_memory(src.ptr(), len, Some(0)) }.map_err(e2s)?;
    let sent = d2d_writes(&w, &smr, &desc);
    let _ = writeln!(child.stdin.take().unwrap(), "DONE");
    let verdict = next();
    let _ = child.wait();
    sent?;
    let verdict = verdict?;
    match verdict.strip_prefix("OK ") {
        Some(what) => Ok(Passed(format!("device -> device across processes: {what}"))),
        None => Err(format!("the child: {verdict}")),
    }
}

fn from_hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0)).collect()
}

/// The receiving child of `device_writes_between_processes`.
fn d2d_child() -> Result<String, String> {
    let c = cuda().map_err(e2s)?;
    let r = engine("shm")?;
    let len = D2D_PAGE * D2D_PAGES;
    let mut dst = Region::new(c, true, len)?;
    let word = Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(e2s)?;
    // SAFETY: dst and word outlive the registration and the mirror (stopped below).
    let dmr = unsafe { r.register_memory(dst.ptr(), len, Some(0)) }.map_err(e2s)?;
    // SAFETY: as above.
    unsafe { r.mirror_imm_count(D2D_IMM, word.host() as *const AtomicU64) }.map_err(e2s)?;
    let hex: String = dmr.descriptor().to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    println!("DESC {hex}");
    let checked = d2d_check(c, &dst, &word);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    // SAFETY: the mirror stops before its word goes.
    unsafe { r.mirror_imm_count(D2D_IMM, std::ptr::null()) }.map_err(e2s)?;
    let n = r.imm_count(D2D_IMM, false).map_err(e2s)?;
    let checked = checked?;
    if n != D2D_ARRIVALS {
        return Err(format!("{n} immediates counted, want {D2D_ARRIVALS}"));
    }
    drop(dmr);
    Ok(format!("{checked}, {n} immediates"))
}

/// Wrong uses of device memory get clear errors: a device pointer
/// registered as host memory, a freed allocation, a device that does not
/// exist or does not own the pointer; and the NIC says how it takes device memory.
fn device_memory_misuse_is_refused() -> TestResult {
    let c = gpu!();
    let e = engine("shm")?;
    let path = e.nics()[0].device_memory;
    let d = c.mem_alloc(0, 1 << 20).map_err(e2s)?;
    let mut said = vec![format!("shm takes device memory by {}", path.name())];
    let n = c.device_count().map_err(e2s)?;
    // SAFETY: device memory that outlives the calls (each is refused).
    let cases = unsafe {
        [
            ("a device pointer as host memory", e.register_memory(d as *mut u8, 1 << 20, None)),
            ("a device that does not exist", e.register_memory(d as *mut u8, 1 << 20, Some(n))),
        ]
    };
    for (what, r) in cases {
        match r {
            Err(err) if err.status == Status::InvalidArgument => said.push(format!("{what}: {}", err.message)),
            Err(err) => return Err(format!("{what}: the wrong error: {err}")),
            Ok(_) => return Err(format!("{what}: registered")),
        }
    }
    // SAFETY: allocated above; the pointer is only looked at below.
    unsafe { c.mem_free(0, d) }.map_err(e2s)?;
    // SAFETY: a freed allocation: the engine must look before it registers anything.
    match unsafe { e.register_memory(d as *mut u8, 1 << 20, Some(0)) } {
        Err(err) if err.status == Status::InvalidArgument => said.push(format!("freed: {}", err.message)),
        Err(err) if e.device_memory() => return Err(format!("a freed allocation: the wrong error: {err}")),
        Err(_) => {}
        Ok(_) => return Err("a freed allocation was registered".into()),
    }
    Ok(Passed(said.join("; ")))
}

/// With `FABRICLIB_NO_CUDA=1` (here: a child process), GPU calls say
/// Unsupported and everything else works on host memory.
fn no_driver_means_unsupported() -> TestResult {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg("--no-cuda-child")
        .env("FABRICLIB_NO_CUDA", "1")
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("the no-driver child failed: {text}"));
    }
    Ok(Passed(text.trim().to_string()))
}

fn no_cuda_child() -> Result<String, String> {
    let e = cuda().err().ok_or("FABRICLIB_NO_CUDA is set, yet the driver loaded")?;
    if e.status != Status::Unsupported {
        return Err(format!("no driver: {e}"));
    }
    if Mapped::new(MemoryKind::CudaMapped, 0, 64).map_err(|e| e.status).err() != Some(Status::Unsupported) {
        return Err("CUDA-mapped memory without a driver was not refused".into());
    }
    let eng = engine("shm")?;
    let w = eng.watch(MemoryKind::Auto, 0, Box::new(|_, _| {})).map_err(e2s)?;
    if w.device_ptr().is_some() {
        return Err("an auto watcher without a driver has a device pointer".into());
    }
    let host = [0u8; 64];
    // SAFETY: host memory, alive across the call.
    match unsafe { eng.register_memory(host.as_ptr() as *mut u8, 64, Some(0)) } {
        Err(err) if err.status == Status::Unsupported => {}
        other => return Err(format!("register_memory(device 0) without a driver: {:?}", other.err())),
    }
    // Host registration does not need (or load) CUDA.
    // SAFETY: as above.
    unsafe { eng.register(host.as_ptr() as *mut u8, 64) }.map_err(e2s)?;
    Ok(format!("without a driver: {e}; watchers use host memory; host registration works"))
}

type Test = fn() -> TestResult;
const TESTS: &[(&str, Test)] = &[
    ("no_driver_means_unsupported", no_driver_means_unsupported),
    ("domains_without_fi_hmem_refuse_device_memory", domains_without_fi_hmem_refuse_device_memory),
    ("driver_and_devices", driver_and_devices),
    ("device_pointers_are_detected", device_pointers_are_detected),
    ("dmabuf_export", dmabuf_export),
    ("descriptors_carry_the_memory_kind", descriptors_carry_the_memory_kind),
    ("device_memory_refused_without_fi_hmem", device_memory_refused_without_fi_hmem),
    ("kernel_bumps_a_watcher", kernel_bumps_a_watcher),
    ("kernel_waits_for_landed_pages", kernel_waits_for_landed_pages),
    ("device_memory_misuse_is_refused", device_memory_misuse_is_refused),
    ("device_writes_in_one_process", device_writes_in_one_process),
    ("device_writes_between_processes", device_writes_between_processes),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let child = match args.get(1).map(String::as_str) {
        Some("--no-cuda-child") => Some(no_cuda_child as fn() -> Result<String, String>),
        Some("--d2d-child") => Some(d2d_child as fn() -> Result<String, String>),
        _ => None,
    };
    if let Some(child) = child {
        match child() {
            Ok(s) => {
                println!("OK {s}");
                std::process::exit(0)
            }
            Err(e) => {
                println!("FAILED {e}");
                eprintln!("{e}");
                std::process::exit(1)
            }
        }
    }
    let filter: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let (mut passed, mut skipped, mut failed) = (0, 0, 0);
    for (name, t) in TESTS {
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let start = Instant::now();
        match std::panic::catch_unwind(t) {
            Ok(Ok(Passed(what))) => {
                passed += 1;
                println!("test {name} ... ok ({:.2}s): {what}", start.elapsed().as_secs_f64());
            }
            Ok(Ok(Skipped(why))) => {
                skipped += 1;
                println!("test {name} ... skipped: {why}");
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("test {name} ... FAILED: {e}");
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED: panicked");
            }
        }
    }
    println!("\ngpu: {passed} passed, {skipped} skipped, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
