//! `fabriclib_config`: engine settings, built with setters so fields can be
//! added without breaking the ABI.
use super::{fabriclib_status, ffi, give, handle, release};
use std::sync::atomic::AtomicU64;
use crate::config::EngineConfig;
use crate::error::{Error, Status};
use std::ffi::{CStr, c_char};

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

fn config_mut<'a>(c: *mut fabriclib_config) -> Result<&'a mut fabriclib_config, Error> {
    handle(c as *const fabriclib_config)?;
    // SAFETY: checked above; the caller serialises use of a config.
    Ok(unsafe { &mut *c })
}

/// Creates a config with the defaults: provider from `FABRICLIB_PROVIDER`,
/// else `efa`, else `tcp;ofi_rxm`; 1 domain; no bind address. `*out` receives
/// a config the caller frees with `fabriclib_config_free`.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_new(out: *mut *mut fabriclib_config) -> fabriclib_status {
    ffi(|| give(out, fabriclib_config { magic: AtomicU64::new(0), cfg: EngineConfig::default() }))
}

/// Frees a config (NULL is a no-op). Engines created from it are unaffected.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_free(config: *mut fabriclib_config) {
    release(config);
}

/// Sets the libfabric provider (`"efa"`, `"tcp;ofi_rxm"`, `"shm"`, ...); NULL
/// restores the default. The string is copied. `FABRICLIB_PROVIDER` in the
/// environment overrides it.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_provider(config: *mut fabriclib_config, provider: *const c_char) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.provider = opt_str(provider)?;
        Ok(())
    })
}

/// Sets the local address socket providers bind to (e.g. `"127.0.0.1"`);
/// NULL lets the provider choose. Ignored by `shm` and `efa`. The string is
/// copied. `FABRICLIB_BIND_ADDR` overrides it.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_bind_address(config: *mut fabriclib_config, addr: *const c_char) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        c.cfg.bind_addr = opt_str(addr)?;
        Ok(())
    })
}

/// Sets the number of domains (NICs) the engine drives, 1..=8 (default 1).
/// Every peer must use the same number.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_domains(config: *mut fabriclib_config, domains: u32) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        if domains == 0 || domains as usize > crate::wire::MAX_DOMAINS {
            return Err(Error::new(Status::InvalidArgument, format!("domains must be 1..=8, got {domains}")));
        }
        c.cfg.domains = domains as usize;
        Ok(())
    })
}

/// Sets the submission queue's capacity (default 4096 requests); when it is
/// full, submits return `FABRICLIB_STATUS_AGAIN`.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_submit_queue(config: *mut fabriclib_config, requests: usize) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        if requests == 0 {
            return Err(Error::new(Status::InvalidArgument, "submit queue capacity must be at least 1"));
        }
        c.cfg.submit_queue = requests;
        Ok(())
    })
}

/// Sets how the worker waits when it has nothing to do. It busy-polls while
/// requests are in flight or an immediate expectation is armed, and for
/// `spin_us` microseconds after its last activity (default 2000); then it
/// naps up to `nap_us` microseconds at a time (default 500; a submit wakes it
/// at once, but data arriving for a receive pool waits out the nap). Larger
/// `spin_us` lowers the latency of sporadic traffic and costs CPU; `spin_us`
/// should stay above `nap_us` so that two engines exchanging requests keep
/// each other awake. `nap_us` must be at least 1.
#[unsafe(no_mangle)]
pub extern "C" fn fabriclib_config_set_idle(config: *mut fabriclib_config, spin_us: u64, nap_us: u64) -> fabriclib_status {
    ffi(|| {
        let c = config_mut(config)?;
        if nap_us == 0 {
            return Err(Error::new(Status::InvalidArgument, "nap_us must be at least 1 microsecond"));
        }
        c.cfg.idle_spin_us = spin_us;
        c.cfg.idle_nap_us = nap_us;
        Ok(())
    })
}
