//! `fabriclib_config`: engine settings, built with setters so fields can be
//! added without breaking the ABI.
use super::{fabriclib_status, ffi, give, handle, release};
use crate::config::EngineConfig;
use crate::error::{Error, Status};
use std::ffi::{CStr, c_char};
use std::sync::atomic::AtomicU64;
#[allow(non_camel_case_types)]
type fabriclib_thread = u32; // C: enum fabriclib_thread (codes.rs)
#[allow(non_camel_case_types)]
type fabriclib_idle = u32; // C: enum fabriclib_idle (codes.rs)
type fabriclib_device_memory_mode = u32; // C: enum fabriclib_device_memory_mode (codes.rs)

/// Engine settings. Create with `fabriclib_config_new`, free with
/// `fabriclib_config_free`. Not thread-safe: one thread at a time.
pub struct fabriclib_config {
    magic: AtomicU64,
    pub(crate) cfg: EngineConfig,
}

super::impl_handle!(fabriclib_config, 0xfab1_c0f1_0000_0001, "config");

fn opt_str(s: *const c_char) -> Result<Option<String>, Error> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, NUL-terminated per the API contract.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str().map(|s| Some(s.to_owned())).map_err(|_| Error::new(Status::InvalidArgument, "string is not UTF-8"))
}

pub(super) fn config_mut<'a>(c: *mut fabriclib_config) -> Result<&'a mut fabriclib_config, Error> {
    handle(c as *const fabriclib_config)?;
    // SAFETY: checked above; the caller serialises use of a config.
    Ok(unsafe { &mut *c })
}

/// Sets a count that must be at least 1 (`what` names it in the error).
pub(super) fn set_count(
    config: *mut fabriclib_config,
    n: usize,
    what: &str,
    set: impl FnOnce(&mut EngineConfig, usize),
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        if n == 0 {
            return Err(Error::new(Status::InvalidArgument, format!("{what} must be at least 1")));
        }
        set(&mut c.cfg, n);
        Ok(())
    })
}

/// === Config ===
/// `fabriclib_config`: what an engine is asked for (provider, NICs, groups,
/// threads, timeouts); used by one thread at a time, copied by `fabriclib_engine_create`.
///
/// Creates a config with the defaults: provider from `FABRICLIB_PROVIDER`,
/// else `efa`, else `tcp;ofi_rxm`; 1 NIC; no bind address. `*out` receives
/// a config the caller frees with `fabriclib_config_free`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`out` NULL).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_new(out: *mut *mut fabriclib_config) -> fabriclib_status {
    ffi(|| give(out, fabriclib_config { magic: AtomicU64::new(0), cfg: EngineConfig::default() }))
}

/// Frees a config (NULL is a no-op). Engines created from it are unaffected.
///
/// Returns: nothing (NULL, or a config already freed, is ignored).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_free(config: *mut fabriclib_config) {
    release(config);
}

/// Sets the libfabric provider (`"efa"`, `"tcp;ofi_rxm"`, `"shm"`, ...); NULL
/// restores the default. The string is copied. `FABRICLIB_PROVIDER` in the
/// environment overrides it.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_provider(
    config: *mut fabriclib_config,
    provider: *const c_char,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.provider = opt_str(provider)?;
        Ok(())
    })
}

/// Sets the local address socket providers bind to (e.g. `"127.0.0.1"`, or
/// with a fixed port `"127.0.0.1:7000"` / `"[::1]:7000"`: NIC i binds
/// port + i);
/// NULL lets the provider choose. Ignored by `shm` and `efa`. The string is
/// copied. `FABRICLIB_BIND_ADDR` overrides it.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_bind_address(
    config: *mut fabriclib_config,
    addr: *const c_char,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.bind_addr = opt_str(addr)?;
        Ok(())
    })
}

/// Names the engine's NICs, comma-separated, by the provider's names for
/// them (`"rdmap16s27-rdm,rdmap32s27-rdm"`, `"eth1,eth2"`; `fi_info`'s
/// domain names), and sets the NIC count to their number (at most 8). NULL
/// or `""` goes back to the default (also undoing
/// `fabriclib_config_set_nics_near_gpu`): with a bind address every NIC is
/// that address's, without one they spread over the provider's NICs,
/// loopback last. Named NICs override the bind address. Creating the engine
/// fails with `INVALID_ARGUMENT` if the provider has no NIC of a name, or if
/// the NIC count was set to another number afterwards. The string is copied.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_nics(config: *mut fabriclib_config, nics: *const c_char) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        let names: Vec<String> = opt_str(nics)?
            .map(|s| s.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        if names.len() > crate::wire::MAX_DOMAINS {
            crate::bail!(InvalidArgument, "{} NICs named: at most {}", names.len(), crate::wire::MAX_DOMAINS);
        }
        if !names.is_empty() {
            c.cfg.nic_count = names.len();
        } else {
            c.cfg.nics_near_gpu = None;
        }
        c.cfg.nics = names;
        Ok(())
    })
}

/// Gives the engine the `n` NICs nearest CUDA device `gpu` (1..=8; by
/// PCI distance in hwloc's view of the machine, nearest first) and sets the
/// NIC count to `n`; `fabriclib-info` shows that view. Creating the
/// engine fails with `INVALID_ARGUMENT` if the machine has no such GPU,
/// fewer than `n` NICs, or no provider offers them. NICs named with
/// `fabriclib_config_set_nics` override it.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_nics_near_gpu(
    config: *mut fabriclib_config,
    gpu: u32,
    n: u32,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        let n = crate::config::nic_count(n as usize, &format!("NICs near GPU {gpu}"))?;
        c.cfg.nics_near_gpu = Some((gpu as usize, n));
        c.cfg.nic_count = n;
        Ok(())
    })
}

/// `fabriclib_config_set_thread_cpus`: the worker thread (ignored in
/// manual-progress mode, which has none).
const FABRICLIB_THREAD_WORKER: u32 = super::codes::fabriclib_thread::Worker as u32;
/// `fabriclib_config_set_thread_cpus`: the callback thread.
const FABRICLIB_THREAD_CALLBACK: u32 = super::codes::fabriclib_thread::Callback as u32;
/// `fabriclib_config_set_thread_cpus`: the watcher thread.
const FABRICLIB_THREAD_WATCHER: u32 = super::codes::fabriclib_thread::Watcher as u32;

/// Pins one of the engine's threads (`FABRICLIB_THREAD_*`) to the CPUs of
/// `cpus`, a list such as `"0-3,8"` (NULL or `""`: anywhere, the default;
/// with `fabriclib_config_set_nics_near_gpu` the worker's default is the
/// CPU hwloc's plan gives that GPU's group). The worker pins itself before
/// it opens its NICs, so their memory comes from its NUMA node. Creating
/// the engine fails with `INVALID_ARGUMENT` for a CPU that is not online.
/// The string is copied.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_thread_cpus(
    config: *mut fabriclib_config,
    thread: fabriclib_thread,
    cpus: *const c_char,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        let list = crate::pin::parse_cpu_list(&opt_str(cpus)?.unwrap_or_default())?;
        match thread {
            FABRICLIB_THREAD_WORKER => c.cfg.worker_cpus = list,
            FABRICLIB_THREAD_CALLBACK => c.cfg.callback_cpus = list,
            FABRICLIB_THREAD_WATCHER => c.cfg.watcher_cpus = list,
            t => crate::bail!(InvalidArgument, "thread {t}: not a FABRICLIB_THREAD_*"),
        }
        Ok(())
    })
}

/// The most groups `fabriclib_config_add_group` adds to one engine.
// A literal: cbindgen writes only the constants it can evaluate.
pub const FABRICLIB_MAX_GROUPS: u32 = 16;
const _: () = assert!(FABRICLIB_MAX_GROUPS as usize == crate::config::MAX_GROUPS);

/// Adds a DomainGroup to the engine: its own NICs and worker thread, and
/// the memory whose registrations it takes. The first group added is group
/// 0, the home group (sends, receives, immediate expectations and peer
/// greetings go through it; it takes every registration no other group
/// claims); without any, the engine has one group made of the settings
/// above, as before.
///
/// - `gpu`: registrations of this CUDA device's memory go to the group (-1: none).
/// - `numa`: registrations of host memory on this NUMA node go to the group (-1: none).
/// - `nic_count`: how many NICs the group drives (0: the engine's NIC
///   count, or as many as `nics` names).
/// - `nics`: the group's NICs by name, comma-separated, as
///   `fabriclib_config_set_nics` (NULL or `""`: the engine's rule).
/// - `worker_cpus`: the CPUs of the group's worker, as
///   `fabriclib_config_set_thread_cpus` (NULL or `""`: the engine's worker CPUs).
///
/// `*index` (if not NULL) receives the group's index. A region's writes go
/// from its group's NICs, NIC k to NIC k of the destination's group, so the
/// two groups must have as many NICs (else the submit fails with
/// `INVALID_ARGUMENT`). `INVALID_ARGUMENT` here for a bad list, more than
/// 8 NICs or `FABRICLIB_MAX_GROUPS` groups; creating the engine fails for two groups on one GPU
/// or NUMA node, and for CPUs or NICs that do not exist. Strings are copied.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_add_group(
    config: *mut fabriclib_config,
    gpu: i32,
    numa: i32,
    nic_count: u32,
    nics: *const c_char,
    worker_cpus: *const c_char,
    index: *mut u32,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        let nics: Vec<String> = opt_str(nics)?
            .map(|s| s.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty()).collect())
            .unwrap_or_default();
        let max = crate::wire::MAX_DOMAINS;
        if nics.len() > max || nic_count as usize > max {
            crate::bail!(InvalidArgument, "a group has at most {max} NICs");
        }
        if c.cfg.groups.len() >= crate::config::MAX_GROUPS {
            crate::bail!(InvalidArgument, "at most {} groups", crate::config::MAX_GROUPS);
        }
        if gpu < -1 || numa < -1 {
            crate::bail!(InvalidArgument, "gpu and numa are -1 (none) or an index, got {gpu} and {numa}");
        }
        let worker_cpus = crate::pin::parse_cpu_list(&opt_str(worker_cpus)?.unwrap_or_default())?;
        c.cfg.groups.push(crate::config::GroupConfig {
            gpu: (gpu >= 0).then_some(gpu),
            numa: (numa >= 0).then_some(numa as u32),
            nic_count: nic_count as usize,
            nics,
            worker_cpus,
        });
        if !index.is_null() {
            // SAFETY: non-null; the caller passes a writable uint32_t (API contract).
            unsafe { index.write((c.cfg.groups.len() - 1) as u32) };
        }
        Ok(())
    })
}

/// Gives the engine one DomainGroup per GPU of the machine, each with the
/// `n` NICs nearest its GPU (1..=8) and its worker on a CPU of that GPU's
/// locality, after one group per NUMA node for host memory (group 0, the
/// home group, is the first node's or the whole machine's), as hwloc's view
/// of the machine plans it (`fabriclib-info` prints the plan). Registrations
/// go to the group of their GPU or NUMA node. Groups added with
/// `fabriclib_config_add_group` override it; worker CPUs set with
/// `fabriclib_config_set_thread_cpus` override the plan's. Creating the
/// engine fails with `INVALID_ARGUMENT` on a machine without GPUs, or when
/// no provider offers the NICs.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_groups_per_gpu(config: *mut fabriclib_config, n: u32) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.groups_per_gpu = Some(crate::config::nic_count(n as usize, "NICs per GPU")?);
        Ok(())
    })
}

/// Sets how many NICs the engine drives (each group, without
/// `fabriclib_config_add_group`'s own count), 1..=8 (default 1). Every peer
/// must use the same number. (Before 0.4: `fabriclib_config_set_domains`.)
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_nic_count(config: *mut fabriclib_config, n: u32) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.nic_count = crate::config::nic_count(n as usize, "the NIC count")?;
        Ok(())
    })
}

/// Sets the submission queue's capacity (default 4096 requests); when it is
/// full, submits return `FABRICLIB_STATUS_AGAIN`.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_submit_queue(
    config: *mut fabriclib_config,
    requests: usize,
) -> fabriclib_status {
    set_count(config, requests, "submit queue capacity", |c, n| c.submit_queue = n)
}

/// Sets how the worker waits when it has nothing to do. It busy-polls while
/// requests are in flight or an immediate expectation is armed (unless the
/// idle policy lets it sleep then: `fabriclib_config_set_idle_policy`), and
/// for `spin_us` microseconds after its last activity (default 2000); then it
/// sleeps in naps of up to `nap_us` microseconds (default 500). A submit ends
/// a nap at once, and so does an arrival where the worker sleeps on a wait
/// object (tcp, verbs, under `FABRICLIB_IDLE_AUTO` or `_BLOCK`) or a doorbell
/// (shm); elsewhere data arriving for a receive pool waits out the nap. Larger
/// `spin_us` lowers the latency of sporadic traffic and costs CPU; `spin_us`
/// should stay above `nap_us` so that two engines exchanging requests keep
/// each other awake. `nap_us` must be at least 1.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_idle(
    config: *mut fabriclib_config,
    spin_us: u64,
    nap_us: u64,
) -> fabriclib_status {
    set_idle(config, spin_us, nap_us, |c| (&mut c.idle_spin_us, &mut c.idle_nap_us))
}

/// A (spin, nap) pair of settings; `nap_us` at least 1.
fn set_idle(
    config: *mut fabriclib_config,
    spin_us: u64,
    nap_us: u64,
    fields: impl FnOnce(&mut crate::EngineConfig) -> (&mut u64, &mut u64),
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        if nap_us == 0 {
            return Err(Error::new(Status::InvalidArgument, "nap_us must be at least 1 microsecond"));
        }
        let (spin, nap) = fields(&mut c.cfg);
        (*spin, *nap) = (spin_us, nap_us);
        Ok(())
    })
}

/// Manual progress (`manual` true): the engine gets no worker thread and
/// no callback thread; the application drives it with
/// `fabriclib_engine_progress` (or `fabriclib_engine_flag_await`), from any
/// thread, one at a time doing the work. A request then goes from the
/// submitting thread to the NIC with no hand-off between threads (the lowest
/// latency on a small host); nothing happens between progress calls.
/// Default false.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_manual_progress(
    config: *mut fabriclib_config,
    manual: bool,
) -> fabriclib_status {
    ffi(|| {
        config_mut(config)?.cfg.manual_progress = manual;
        Ok(())
    })
}

/// Sets what the worker does once it has been idle for `spin_us`
/// (`fabriclib_config_set_idle`) while an immediate expectation is armed or an
/// immediate is mirrored: `FABRICLIB_IDLE_AUTO` (the default since 0.4),
/// `_SPIN` or `_BLOCK`. With nothing armed it always sleeps. `AUTO` saves the
/// core (about 0.03 CPU s per s per idle engine instead of 1.0). On shm the
/// worker sleeps on a doorbell that peer engines ring, and on verbs on the
/// completion channel, neither of which costs anything on a transfer; the
/// first write after a quiet spell takes 17-51 us more than with `SPIN`. On
/// tcp the completion queue's wait fd costs on every transfer (the provider
/// signals it per completion: about +1 us per 8-byte write-with-immediate
/// half round trip) and 11-84 us on the first write after a quiet spell.
/// Sleeps are cut into naps of `nap_us` (`fabriclib_config_set_idle`), which
/// an arrival ends: longer naps cost less CPU and wake slower.
/// `SPIN` is for engine threads on CPUs of their own, latency first.
/// docs/benchmarks.md has the figures.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_idle_policy(
    config: *mut fabriclib_config,
    policy: fabriclib_idle,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.idle_policy = crate::config::IdlePolicy::from_code(policy)?;
        Ok(())
    })
}

/// Sets whether the engine asks its providers for device memory (`FI_HMEM`,
/// with `FI_MR_HMEM`), which `fabriclib_mr_register_device` needs:
/// `FABRICLIB_DEVICE_MEMORY_MODE_AUTO` (the default: where the machine has an
/// NVIDIA driver and the libfabric in use was built with CUDA), `_ON`
/// (always) or `_OFF` (never: the providers' host-memory configuration). A
/// provider or NIC without `FI_HMEM` opens as it would without asking. On
/// shm, `FI_HMEM` turns the single-copy path (CMA) off for host memory too:
/// host writes over 4 KiB then go through the target, as with
/// `FI_SHM_DISABLE_CMA=1`; an engine that moves only host memory on a GPU
/// machine can set `_OFF`. The environment variable
/// `FABRICLIB_DEVICE_MEMORY` (`auto`, `on`, `off`) overrides it.
/// `fabriclib_engine_nic_device_memory` says what each NIC got.
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_device_memory(
    config: *mut fabriclib_config,
    mode: fabriclib_device_memory_mode,
) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.device_memory = crate::config::DeviceMemoryMode::from_code(mode)?;
        Ok(())
    })
}

/// `fabriclib_config_set_watcher_idle`'s `spin_us`: adapt to the gaps
/// between changes (the default).
pub const FABRICLIB_WATCHER_SPIN_AUTO: u64 = u64::MAX - 1;
const _: () = assert!(FABRICLIB_WATCHER_SPIN_AUTO == crate::config::WATCHER_SPIN_AUTO);

/// Sets how the watcher thread polls (`fabriclib_watcher_create`): it spins
/// while watched words change and for `spin_us` microseconds after the last
/// change, then looks every `nap_us` microseconds (default 50, at least 1)
/// until one changes again; a change seen during a nap is reported up to
/// `nap_us` late. `spin_us`:
/// - `FABRICLIB_WATCHER_SPIN_AUTO` (the default): where the process may
///   use 5 CPUs or more, four times the recent gap between changes, from
///   50 µs to 10 ms, yielding the CPU on every look: through a layer loop
///   of changes 0.2 ms apart it stays awake (0.8 ms after each) and naps
///   soon after the loop. On fewer CPUs it never spins: measured with
///   `fabriclib-bench layers` (a layer loop whose watcher submits each
///   layer's write), on 16 CPUs spinning lands a layer 3-6× sooner than
///   napping (shm p50 12–32 µs against 69–89 µs), while on 2 CPUs the
///   spinning watcher takes the CPU the engine's workers need and napping
///   lands it sooner (p50 0.16–1.4 ms against 1.3–2.3 ms adaptive, 2.8–4.9
///   ms with the fixed 10 ms spin that was the default before 0.4).
/// - a number of microseconds: a fixed spin, never yielding (the lowest
///   latency where the watcher has a core of its own);
/// - `UINT64_MAX`: always spin (a whole core).
///
/// Returns: `OK`; `INVALID_ARGUMENT` (`config` NULL, or a value outside what
/// this comment allows); `BAD_HANDLE` (a freed or foreign config).
/// Blocks: no.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_watcher_idle(
    config: *mut fabriclib_config,
    spin_us: u64,
    nap_us: u64,
) -> fabriclib_status {
    set_idle(config, spin_us, nap_us, |c| (&mut c.watcher_spin_us, &mut c.watcher_nap_us))
}
