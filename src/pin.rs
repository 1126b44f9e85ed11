//! Where the engine's threads run: CPU lists (`"0-3,8"`) and pinning the
//! calling thread (`sched_setaffinity`). A pinned worker opens its domains
//! after pinning, so their memory is allocated from its NUMA node (first touch).
use crate::error::{Error, Result, Status};

use crate::os::MAX_CPUS;

/// Parses a CPU list: comma-separated CPUs and ranges (`"0-3,8,10-11"`);
/// empty means none (not pinned).
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>> {
    let bad = |why: &str| Error::new(Status::InvalidArgument, format!("CPU list \"{s}\": {why}"));
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad(part))?, b.trim().parse().map_err(|_| bad(part))?);
        if a > b || b >= MAX_CPUS {
            return Err(bad(&format!("{part}: a range of CPUs below {MAX_CPUS}")));
        }
        out.extend(a..=b);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The CPUs online on this machine (sysfs), or `None` if it does not say.
fn online() -> Option<Vec<u32>> {
    parse_cpu_list(std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?.trim()).ok()
}

/// Refuses a list of `what` (a thread's CPUs) that names a CPU this machine
/// does not have online.
pub fn check(what: &str, cpus: &[u32]) -> Result<()> {
    if let Some(bad) = cpus.iter().find(|&&c| c >= MAX_CPUS) {
        crate::bail!(InvalidArgument, "{what}: CPU {bad} is beyond the {MAX_CPUS} a CPU set holds");
    }
    if let Some(on) = online() {
        if let Some(bad) = cpus.iter().find(|c| !on.contains(c)) {
            crate::bail!(InvalidArgument, "{what}: CPU {bad} is not online here (online: {on:?})");
        }
    }
    Ok(())
}

/// Pins the calling thread (and the threads it starts later) to `cpus`;
/// nothing with none.
pub fn pin_current_thread(cpus: &[u32]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    if let Err(e) = crate::os::set_thread_cpus(cpus) {
        crate::bail!(InvalidArgument, "cannot pin a thread to CPUs {cpus:?}: {e}");
    }
    Ok(())
}

/// The CPUs the calling thread may run on.
pub fn current_thread_cpus() -> Vec<u32> {
    crate::os::thread_cpus()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_refuse_what_is_not_one() {
        assert_eq!(parse_cpu_list("0-3, 8,10-11,2").unwrap(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        for bad in ["x", "3-1", "0-1024", "1-", "-"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lists_naming_cpus_that_are_not_online_are_refused() {
        let all = current_thread_cpus();
        assert!(check("worker", &all[..1]).is_ok());
        let e = check("worker", &[MAX_CPUS - 2]).unwrap_err();
        assert!(e.message.contains("not online"), "{e}");
        assert!(check("worker", &[MAX_CPUS]).is_err());
    }

    #[test]
    fn a_thread_is_pinned_where_asked() {
        std::thread::spawn(|| {
            let all = current_thread_cpus();
            pin_current_thread(&all[..1]).unwrap();
            assert_eq!(current_thread_cpus(), &all[..1]);
            assert!(pin_current_thread(&[MAX_CPUS - 1]).is_err() || all.len() >= MAX_CPUS as usize);
        })
        .join()
        .unwrap();
    }
}
