//! NICs: the provider lists one `fi_info` per NIC and address (EFA: one per
//! device; tcp: one per interface and address family), named by its
//! `domain_attr->name` (`rdmap16s27-rdm`, `eth0`, `shm`). Each engine
//! domain opens on one of them (`Choice`, `choose`); `Nic` records which,
//! with its PCI address and NUMA node where the system says.
use super::sys::*;
use crate::domain::{Choice, Nic};
use std::ffi::CStr;

/// The name of `info`'s NIC.
///
/// # Safety
/// `info` must be a valid `fi_info`.
pub unsafe fn name(info: *const fi_info) -> String {
    // SAFETY: per the caller, domain_attr is valid; its name may be null.
    unsafe {
        let d = (*info).domain_attr;
        if d.is_null() || (*d).name.is_null() {
            return String::new();
        }
        CStr::from_ptr((*d).name).to_string_lossy().into_owned()
    }
}

/// The NICs of a `fi_getinfo` list, in its order, each name once.
///
/// # Safety
/// `list` must be a valid `fi_info` list (or null).
pub unsafe fn names(list: *const fi_info) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut p = list;
    while !p.is_null() {
        // SAFETY: p is an entry of the caller's valid list (non-null, checked
        // above); its `next` is the following entry or null.
        let (n, next) = unsafe { (name(p), (*p).next) };
        if !out.contains(&n) {
            out.push(n);
        }
        p = next;
    }
    out
}

/// The entry of `list` for NIC `wanted`, preferring an IPv4 address (tcp
/// lists IPv6 link-local and ULA addresses of an interface too).
///
/// # Safety
/// `list` must be a valid `fi_info` list (or null).
pub unsafe fn pick(list: *mut fi_info, wanted: &str) -> Option<*mut fi_info> {
    let (mut first, mut p) = (None, list);
    while !p.is_null() {
        // SAFETY: p walks the caller's valid list.
        unsafe {
            if name(p) == wanted {
                if (*p).addr_format == FI_SOCKADDR_IN {
                    return Some(p);
                }
                first.get_or_insert(p);
            }
            p = (*p).next;
        }
    }
    first
}

/// The entry of `list` that `choice` names, or why there is none.
///
/// # Safety
/// `list` must be a valid `fi_info` list (or null).
pub unsafe fn choose(list: *mut fi_info, choice: &Choice) -> Result<*mut fi_info, String> {
    // SAFETY: per the caller.
    let names = unsafe { names(list) };
    let wanted = match choice {
        Choice::First if !list.is_null() => return Ok(list),
        Choice::First => return Err("the provider lists no NIC".into()),
        Choice::Named(n) => n.clone(),
        Choice::Spread(i) => spread(&names, *i).ok_or("the provider lists no NIC")?,
    };
    // SAFETY: per the caller.
    unsafe { pick(list, &wanted) }
        .ok_or_else(|| format!("no NIC named \"{wanted}\"; the provider has: {}", names.join(", ")))
}

/// `Choice::Spread`'s order.
pub fn spread(names: &[String], index: usize) -> Option<String> {
    let mut order: Vec<&String> = names.iter().filter(|n| n.as_str() != "lo").collect();
    order.extend(names.iter().filter(|n| n.as_str() == "lo"));
    (!order.is_empty()).then(|| order[index % order.len()].clone())
}

/// What is known of `info`'s NIC.
///
/// # Safety
/// `info` must be a valid `fi_info`.
pub unsafe fn describe(info: *const fi_info) -> Nic {
    // SAFETY: per the caller; nic and its attributes may be null.
    let name = unsafe { name(info) };
    // SAFETY: per the caller; each pointer below is checked for null before it is read.
    let from_provider = unsafe {
        let nic = (*info).nic;
        if !nic.is_null() && !(*nic).bus_attr.is_null() && (*(*nic).bus_attr).bus_type == fi_bus_type_FI_BUS_PCI {
            let a = (*(*nic).bus_attr).attr.pci;
            Some(format!("{:04x}:{:02x}:{:02x}.{:x}", a.domain_id, a.bus_id, a.device_id, a.function_id))
        } else {
            None
        }
    };
    let pci = from_provider.or_else(|| pci_of_interface(&name));
    let numa = pci.as_deref().and_then(numa_of_pci);
    Nic { name, pci, numa, device_memory: Default::default() }
}

/// The PCI address above network interface `ifname` (sysfs; a virtio NIC's
/// device is a virtio bus node under its PCI function).
fn pci_of_interface(ifname: &str) -> Option<String> {
    if ifname.is_empty() || ifname.contains('/') {
        return None;
    }
    let dev = std::fs::canonicalize(format!("/sys/class/net/{ifname}/device")).ok()?;
    dev.ancestors().filter_map(|p| p.file_name()?.to_str()).find(|c| is_pci_address(c)).map(str::to_string)
}

/// `dddd:bb:dd.f`
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The NUMA node sysfs gives PCI device `pci` (-1, as in most VMs: `None`).
pub fn numa_of_pci(pci: &str) -> Option<u32> {
    std::fs::read_to_string(format!("/sys/bus/pci/devices/{pci}/numa_node"))
        .ok()?
        .trim()
        .parse::<i64>()
        .ok()?
        .try_into()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreading_puts_loopback_last_and_wraps() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let nics = n(&["lo", "eth0", "eth1"]);
        let got: Vec<_> = (0..4).map(|i| spread(&nics, i).unwrap()).collect();
        assert_eq!(got, ["eth0", "eth1", "lo", "eth0"]);
        assert_eq!(spread(&n(&["shm"]), 3).as_deref(), Some("shm"));
        assert_eq!(spread(&[], 0), None);
    }

    #[test]
    fn pci_addresses_are_recognised() {
        assert!(is_pci_address("0000:00:05.0"));
        assert!(is_pci_address("0001:a0:1f.7"));
        assert!(!is_pci_address("virtio1"));
        assert!(!is_pci_address("0000:00:05"));
        assert!(!is_pci_address("0000:0g:05.0"));
    }
}
