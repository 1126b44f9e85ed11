//! `fabriclib-bench bare`: a bare `fi_writedata` loop, written from the
//! libfabric man pages and nothing else of fabriclib (its own `fi_getinfo`
//! with the fewest capabilities, its own objects, a CQ polled without ever
//! yielding), to check that the raw baseline (raw.rs) is as fast as a loop
//! can be. The same work as the paged row: `pages` writes of `size` bytes
//! with an immediate per repetition, `window` in flight, source written
//! before each repetition, timed until every local completion. A target
//! process (this binary, `bare-target`) registers the destination and polls
//! its CQ (shm copies a write with an immediate at the target, during its
//! progress). Pinned as the bench pins its client and first server
//! (`loopback_cpu`), or as `--cpus` says.
use crate::ctl::fill;
use fabriclib::domain::fabric::sys::*;
use std::ffi::{CStr, CString, c_void};
use std::io::{BufRead, Read, Write};
use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

type R<T> = Result<T, String>;

fn ck(what: &str, ret: isize) -> R<()> {
    if ret >= 0 {
        return Ok(());
    }
    // SAFETY: fi_strerror returns a static string.
    let msg = unsafe { CStr::from_ptr(fi_strerror((-ret) as i32)) }.to_string_lossy();
    Err(format!("bare {what}: {msg} ({ret})"))
}

/// An endpoint with its own CQ and AV, closed on drop (shm leaves its
/// /dev/shm file behind otherwise).
struct Ep {
    fabric: *mut fid_fabric,
    domain: *mut fid_domain,
    mrs: std::cell::RefCell<Vec<*mut fid_mr>>,
    ep: *mut fid_ep,
    cq: *mut fid_cq,
    av: *mut fid_av,
    mr_mode: u64,
    addr: Vec<u8>,
    /// Opened by fabriclib's own code instead (`--endpoint fabriclib`): its
    /// objects are closed by its Drop.
    fe: Option<fabriclib::domain::fabric::FabricEndpoint>,
}

/// What the loop runs beside, to find what slows a loop down (docs/benchmarks.md).
#[derive(Clone, Copy, Default)]
pub struct Variant {
    /// `--endpoint fabriclib`: the endpoints opened by fabriclib's
    /// `FabricEndpoint` (the engine's and raw loop's `fi_info`, CQ and AV)
    /// instead of the loop's own.
    pub fabriclib_ep: bool,
    /// `--idle-engine NAP_US`: an idle TransferEngine in both processes (as
    /// beside the bench's raw loop), napping NAP_US at a time.
    pub idle_engine: Option<u64>,
}

impl Variant {
    /// The options that give the target process the same variant.
    fn args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if self.fabriclib_ep {
            a.extend(["--endpoint".into(), "fabriclib".into()]);
        }
        if let Some(us) = self.idle_engine {
            a.extend(["--idle-engine".into(), us.to_string()]);
        }
        a
    }

    fn idle_engine(&self, provider: &str) -> R<Option<fabriclib::TransferEngine>> {
        let Some(nap) = self.idle_engine else { return Ok(None) };
        let cfg = fabriclib::EngineConfig { provider: Some(provider.into()), idle_nap_us: nap, ..Default::default() };
        fabriclib::TransferEngine::new(&cfg).map(Some).map_err(|e| e.to_string())
    }
}

fn open(provider: &str, v: Variant) -> R<Ep> {
    if v.fabriclib_ep {
        let fe = fabriclib::domain::fabric::FabricEndpoint::open(provider, None, 16384, false, false)
            .map_err(|e| e.message)?;
        return Ok(Ep {
            fabric: fe.fabric,
            domain: fe.domain,
            mrs: Default::default(),
            ep: fe.ep,
            cq: fe.cq,
            av: fe.av,
            mr_mode: fe.mr_mode,
            addr: fe.addr.clone(),
            fe: Some(fe),
        });
    }
    let name = CString::new(provider).unwrap();
    // SAFETY: straight libfabric setup; every out-pointer is a local.
    unsafe {
        let hints = fi_allocinfo();
        (*hints).caps = (FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_RECV) as u64;
        (*hints).mode = FI_CONTEXT | FI_CONTEXT2;
        (*(*hints).ep_attr).type_ = fi_ep_type_FI_EP_RDM;
        let d = &mut *(*hints).domain_attr;
        d.mr_mode = (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT) as i32;
        d.threading = fi_threading_FI_THREAD_DOMAIN;
        (*(*hints).fabric_attr).prov_name = fabriclib::os::strdup(&name);
        let mut info = null_mut();
        ck("fi_getinfo", fi_getinfo(FI_API_VERSION, std::ptr::null(), std::ptr::null(), 0, hints, &mut info) as isize)?;
        let (mut fabric, mut domain, mut cq, mut av, mut ep) =
            (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
        ck("fi_fabric", fi_fabric((*info).fabric_attr, &mut fabric, null_mut()) as isize)?;
        ck("fi_domain", fi_domain(fabric, info, &mut domain, null_mut()) as isize)?;
        let mut cq_attr = fi_cq_attr { size: 4096, format: fi_cq_format_FI_CQ_FORMAT_DATA, ..Default::default() };
        ck("fi_cq_open", fi_cq_open(domain, &mut cq_attr, &mut cq, null_mut()) as isize)?;
        let mut av_attr = fi_av_attr { type_: fi_av_type_FI_AV_TABLE, count: 4, ..Default::default() };
        ck("fi_av_open", fi_av_open(domain, &mut av_attr, &mut av, null_mut()) as isize)?;
        ck("fi_endpoint", fi_endpoint(domain, info, &mut ep, null_mut()) as isize)?;
        ck("fi_ep_bind", fi_ep_bind(ep, &mut (*av).fid, 0) as isize)?;
        ck("fi_ep_bind", fi_ep_bind(ep, &mut (*cq).fid, (FI_TRANSMIT | FI_RECV) as u64) as isize)?;
        ck("fi_enable", fi_enable(ep) as isize)?;
        let mut addr = vec![0u8; 256];
        let mut len = addr.len();
        ck("fi_getname", fi_getname(&mut (*ep).fid, addr.as_mut_ptr().cast(), &mut len) as isize)?;
        addr.truncate(len);
        let mr_mode = (*(*info).domain_attr).mr_mode as u64;
        fi_freeinfo(info);
        Ok(Ep { fabric, domain, mrs: Default::default(), ep, cq, av, mr_mode, addr, fe: None })
    }
}

impl Drop for Ep {
    fn drop(&mut self) {
        // SAFETY: objects opened by `open`/`register`, each closed once, endpoint first.
        unsafe {
            if self.fe.is_some() {
                for &mr in self.mrs.borrow().iter() {
                    fi_close(&mut (*mr).fid);
                }
                return;
            }
            fi_close(&mut (*self.ep).fid);
            for &mr in self.mrs.borrow().iter() {
                fi_close(&mut (*mr).fid);
            }
            fi_close(&mut (*self.cq).fid);
            fi_close(&mut (*self.av).fid);
            fi_close(&mut (*self.domain).fid);
            fi_close(&mut (*self.fabric).fid);
        }
    }
}

impl Ep {
    /// Registers `len` bytes at `ptr`: (local descriptor, remote key).
    fn register(&self, ptr: *mut u8, len: usize) -> R<(*mut c_void, u64)> {
        let mut mr: *mut fid_mr = null_mut();
        let access = (FI_WRITE | FI_REMOTE_WRITE) as u64;
        // SAFETY: the caller keeps ptr..ptr+len alive for the process's life.
        unsafe {
            ck("fi_mr_reg", fi_mr_reg(self.domain, ptr.cast(), len, access, 0, 0, 0, &mut mr, null_mut()) as isize)?;
            if self.mr_mode & FI_MR_ENDPOINT as u64 != 0 {
                ck("fi_mr_bind", fi_mr_bind(mr, &mut (*self.ep).fid, 0) as isize)?;
                ck("fi_mr_enable", fi_mr_enable(mr) as isize)?;
            }
            self.mrs.borrow_mut().push(mr);
            Ok((fi_mr_desc(mr), fi_mr_key(mr)))
        }
    }

    /// Reads up to 64 completions; returns how many (0 if none).
    fn poll(&self, buf: &mut [fi_cq_data_entry; 64]) -> R<usize> {
        // SAFETY: buf holds 64 entries.
        let n = unsafe { fi_cq_read(self.cq, buf.as_mut_ptr().cast(), 64) };
        if n == -(FI_EAGAIN as isize) {
            return Ok(0);
        }
        ck("fi_cq_read", n)?;
        Ok(n as usize)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0)).collect()
}

/// The target: registers `len` bytes, says `addr key base` on stdout, polls
/// its CQ until stdin closes.
pub fn target(provider: &str, len: usize, v: Variant) -> R<()> {
    let _idle = v.idle_engine(provider)?;
    let ep = open(provider, v)?;
    let mut mem = vec![0u8; len];
    // Written, as the bench's servers write theirs (not the zero page).
    fill(&mut mem, 0x7a59);
    let (_, key) = ep.register(mem.as_mut_ptr(), len)?;
    println!("{} {key} {}", hex(&ep.addr), mem.as_ptr() as u64);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        s2.store(true, Ordering::Release);
    });
    let mut buf = [fi_cq_data_entry::default(); 64];
    let mut n = 0u64;
    // Until stdin closes, then until 20 ms pass with nothing more (small
    // writes complete at the initiator before the target has read them).
    let mut quiet_since = None;
    loop {
        let k = ep.poll(&mut buf)?;
        n += k as u64;
        if !stop.load(Ordering::Relaxed) {
            continue;
        }
        let t = *quiet_since.get_or_insert_with(Instant::now);
        if k > 0 {
            quiet_since = Some(Instant::now());
        } else if t.elapsed().as_millis() >= 20 {
            break;
        }
    }
    eprintln!("bare target: {n} completions");
    Ok(())
}

/// The initiator: `reps` repetitions of `iters × pages` writes of `size`
/// bytes with an immediate (the pages of a `pages × size` region, in
/// order), `window` in flight; prints the median GB/s.
#[allow(clippy::too_many_arguments)]
pub fn run(
    provider: &str,
    size: usize,
    pages: usize,
    iters: usize,
    window: usize,
    reps: usize,
    warmup: usize,
    target_args: &[String],
    v: Variant,
) -> R<f64> {
    let len = size * pages;
    let total = pages * iters;
    let target_args: Vec<String> =
        target_args.iter().cloned().chain(v.args()).chain(["--len".into(), len.to_string()]).collect();
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(me)
        .args(["bare-target", "--provider", provider])
        .args(target_args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).map_err(|e| e.to_string())?;
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() != 3 {
        return Err(format!("bare target said {line:?}"));
    }
    let (peer_addr, key, base) = (unhex(f[0]), f[1].parse::<u64>().unwrap(), f[2].parse::<u64>().unwrap());
    let _idle = v.idle_engine(provider)?;
    let ep = open(provider, v)?;
    let mut src = vec![0u8; len];
    let (desc, _) = ep.register(src.as_mut_ptr(), len)?;
    let mut peer: fi_addr_t = 0;
    // SAFETY: peer_addr is the target's fi_getname output.
    let n = unsafe { fi_av_insert(ep.av, peer_addr.as_ptr().cast(), 1, &mut peer, 0, null_mut()) };
    if n != 1 {
        return Err(format!("bare fi_av_insert: {n}"));
    }
    let remote = if ep.mr_mode & FI_MR_VIRT_ADDR as u64 != 0 { base } else { 0 };
    let mut ctx: Vec<fi_context2> = (0..window).map(|_| fi_context2::default()).collect();
    let mut buf = [fi_cq_data_entry::default(); 64];
    let mut gbps = Vec::new();
    for rep in 0..warmup + reps {
        fill(&mut src, 0xba5e + rep as u64);
        let t0 = Instant::now();
        let (mut posted, mut done) = (0usize, 0usize);
        while done < total {
            while posted < total && posted - done < window {
                let off = (posted % pages) * size;
                let c = &mut ctx[posted % window] as *mut fi_context2 as *mut c_void;
                // SAFETY: registered source and destination ranges; c is free (window).
                let r = unsafe {
                    fi_writedata(ep.ep, src.as_ptr().add(off).cast(), size, desc, 7, peer, remote + off as u64, key, c)
                };
                if r == -(FI_EAGAIN as isize) {
                    break;
                }
                ck("fi_writedata", r)?;
                posted += 1;
            }
            done += ep.poll(&mut buf)?;
        }
        let g = (total * size) as f64 / t0.elapsed().as_secs_f64() / 1e9;
        if rep >= warmup {
            gbps.push(g);
        }
    }
    drop(child.stdin.take());
    let _ = child.wait();
    gbps.sort_by(|a, b| a.total_cmp(b));
    let med = gbps[gbps.len() / 2];
    println!(
        "bare {provider}: {iters} x {pages} x {size} B, window {window}: median {med:.3} GB/s (min {:.3}, max {:.3}, {} reps)",
        gbps[0],
        gbps[gbps.len() - 1],
        gbps.len()
    );
    Ok(med)
}
