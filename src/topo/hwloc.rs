//! hwloc, loaded at run time (`libhwloc.so.15`, hwloc 2.x, through
//! `libloading`): `libfabriclib.so` has no `DT_NEEDED` on it. fabriclib asks
//! it for one thing, the machine's topology as hwloc's XML export (I/O
//! devices kept where they matter), and reads that with `xml.rs`; so no
//! structure of hwloc's is read through a pointer, and the tests' topologies
//! go through the same reader without hwloc at all. Without hwloc, only the
//! calls that need the machine's topology fail (`Unsupported`, saying what
//! to install); everything else works.
use crate::error::{Error, Result, Status};
use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::OnceLock;

/// The library to load: `FABRICLIB_HWLOC` (a path or a file name) if set,
/// else `libhwloc.so.15` (hwloc 2.x) from the loader's search path.
pub const HWLOC_ENV: &str = "FABRICLIB_HWLOC";

type Topology = *mut c_void;

/// `HWLOC_TYPE_FILTER_KEEP_IMPORTANT`: PCI devices that matter (GPUs, NICs,
/// storage) and the bridges above them.
const KEEP_IMPORTANT: c_int = 3;

struct Hwloc {
    _lib: libloading::Library,
    api_version: unsafe extern "C" fn() -> c_uint,
    init: unsafe extern "C" fn(*mut Topology) -> c_int,
    set_io_types_filter: unsafe extern "C" fn(Topology, c_int) -> c_int,
    load: unsafe extern "C" fn(Topology) -> c_int,
    export_xmlbuffer: unsafe extern "C" fn(Topology, *mut *mut c_char, *mut c_int, c_ulong) -> c_int,
    free_xmlbuffer: unsafe extern "C" fn(Topology, *mut c_char),
    destroy: unsafe extern "C" fn(Topology),
}

static HWLOC: OnceLock<std::result::Result<Hwloc, String>> = OnceLock::new();

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        // SAFETY: the symbol is hwloc 2's exported entry point of that name,
        // with the signature of the field it is assigned to (hwloc.h).
        *unsafe { $lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| format!("hwloc lacks {}: {e}", $name))?
    };
}

impl Hwloc {
    fn get() -> Result<&'static Hwloc> {
        HWLOC.get_or_init(Hwloc::load).as_ref().map_err(|why| Error::new(Status::Unsupported, why.clone()))
    }

    fn load() -> std::result::Result<Hwloc, String> {
        let name = std::env::var(HWLOC_ENV).ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "libhwloc.so.15".into());
        // SAFETY: loading hwloc runs its constructors, which only set up
        // its component table.
        let lib = unsafe { libloading::Library::new(&name) }.map_err(|e| {
            format!(
                "hwloc is not installed: {name} could not be loaded ({e}); the machine's topology (NICs near a GPU, \
                 one group per GPU) needs hwloc 2 (Debian/Ubuntu: apt install libhwloc15; RHEL: dnf install hwloc-libs), \
                 or name it with {HWLOC_ENV}"
            )
        })?;
        let h = Hwloc {
            api_version: sym!(lib, "hwloc_get_api_version"),
            init: sym!(lib, "hwloc_topology_init"),
            set_io_types_filter: sym!(lib, "hwloc_topology_set_io_types_filter"),
            load: sym!(lib, "hwloc_topology_load"),
            export_xmlbuffer: sym!(lib, "hwloc_topology_export_xmlbuffer"),
            free_xmlbuffer: sym!(lib, "hwloc_free_xmlbuffer"),
            destroy: sym!(lib, "hwloc_topology_destroy"),
            _lib: lib,
        };
        // SAFETY: no arguments; returns HWLOC_API_VERSION of the library.
        let v = unsafe { (h.api_version)() };
        if v >> 16 != 2 {
            return Err(format!("{name} is hwloc API {:#x}; fabriclib reads hwloc 2's topology", v));
        }
        Ok(h)
    }
}

/// This machine's topology as hwloc 2's XML export, important I/O devices kept.
pub fn system_xml() -> Result<String> {
    let h = Hwloc::get()?;
    let fail = |what: &str, rc: c_int| {
        Error::new(Status::Provider, format!("hwloc: {what} failed ({rc}: {})", std::io::Error::last_os_error()))
    };
    let mut t: Topology = std::ptr::null_mut();
    // SAFETY: init writes a new topology to `t`.
    let rc = unsafe { (h.init)(&mut t) };
    if rc != 0 {
        return Err(fail("hwloc_topology_init", rc));
    }
    struct Owned<'a>(&'a Hwloc, Topology);
    impl Drop for Owned<'_> {
        fn drop(&mut self) {
            // SAFETY: the topology init made, destroyed once.
            unsafe { (self.0.destroy)(self.1) }
        }
    }
    let t = Owned(h, t);
    // SAFETY: a topology from init, not yet loaded (filters are set before load).
    let rc = unsafe { (h.set_io_types_filter)(t.1, KEEP_IMPORTANT) };
    if rc != 0 {
        return Err(fail("hwloc_topology_set_io_types_filter", rc));
    }
    // SAFETY: as above.
    let rc = unsafe { (h.load)(t.1) };
    if rc != 0 {
        return Err(fail("hwloc_topology_load", rc));
    }
    let (mut buf, mut len): (*mut c_char, c_int) = (std::ptr::null_mut(), 0);
    // SAFETY: a loaded topology; flags 0 is hwloc 2's own format. hwloc
    // allocates the buffer (NUL-terminated, `len` counting the NUL).
    let rc = unsafe { (h.export_xmlbuffer)(t.1, &mut buf, &mut len, 0) };
    if rc != 0 || buf.is_null() {
        return Err(fail("hwloc_topology_export_xmlbuffer", rc));
    }
    // SAFETY: hwloc's NUL-terminated buffer, read before it is freed.
    let xml = unsafe { std::ffi::CStr::from_ptr(buf) }.to_string_lossy().into_owned();
    // SAFETY: the buffer export gave, freed once with its topology alive.
    unsafe { (h.free_xmlbuffer)(t.1, buf) };
    Ok(xml)
}
