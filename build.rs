//! Build script: libfabric bindings (bindgen + a cc-compiled shim for the
//! `static inline` calls; the library itself is loaded at run time), libibverbs' types (bindgen; its functions are
//! loaded at run time), the SONAME, and optionally the C header.
use std::{env, path::PathBuf};

fn main() {
    let lib = pkg_config_libfabric();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let shim = out.join("fi_shim");

    let mut builder = bindgen::Builder::default()
        .header("src/domain/fabric/sys/wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .blocklist_function("fi_(rx|tx)_size_left")
        // Loaded at run time (sys/mod.rs): no extern declarations, and no
        // shim for fi_allocinfo (it would call fi_dupinfo by name).
        .blocklist_function("fi_(getinfo|freeinfo|dupinfo|allocinfo|fabric|strerror|version)")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&shim)
        .rust_edition(bindgen::RustEdition::Edition2024)
        .wrap_unsafe_ops(true)
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for inc in &lib.include {
        builder = builder.clang_arg(format!("-I{inc}"));
    }
    builder
        .generate()
        .expect("bindgen failed on libfabric headers (is libfabric-dev >= 1.14 installed?)")
        .write_to_file(out.join("bindings.rs"))
        .unwrap();

    let mut cc = cc::Build::new();
    cc.file(shim.with_extension("c")).include(env::current_dir().unwrap()).warnings(false);
    for inc in &lib.include {
        cc.include(inc);
    }
    cc.compile("fabriclib_fi_shim");

    // No -lfabric: libfabric is loaded at run time (sys/mod.rs).
    println!("cargo:rerun-if-changed=src/domain/fabric/sys/wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    verbs_types(&out);

    // The SONAME carries the ABI version: 0.y.z -> libfabriclib.so.0.y, x.y.z -> .so.x
    // (cargo-c's rule). CMake installs the real file plus the links.
    let major = env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    let minor = env::var("CARGO_PKG_VERSION_MINOR").unwrap();
    let soname = if major == "0" { format!("libfabriclib.so.0.{minor}") } else { format!("libfabriclib.so.{major}") };
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }

    #[cfg(feature = "gen-header")]
    gen_header();
}

/// libibverbs' types and constants (not its functions: src/domain/verbs/lib.rs
/// resolves those at run time, so nothing here links against rdma-core), from
/// its headers (libibverbs-dev). Generated per build: the structs hold
/// pthread types whose size differs per architecture.
fn verbs_types(out: &std::path::Path) {
    println!("cargo:rerun-if-changed=src/domain/verbs/wrapper.h");
    bindgen::Builder::default()
        .header("src/domain/verbs/wrapper.h")
        .allowlist_type("ibv_.*|verbs_context")
        .allowlist_var("IBV_.*")
        .prepend_enum_name(false)
        .rust_edition(bindgen::RustEdition::Edition2024)
        .derive_default(true)
        .layout_tests(false)
        .generate()
        .expect("bindgen failed on <infiniband/verbs.h> (is libibverbs-dev installed? scripts/deps.sh installs it)")
        .write_to_file(out.join("verbs.rs"))
        .unwrap();
}

/// Where libfabric's headers are (its library is loaded at run time).
struct Lib {
    include: Vec<String>,
}

/// Ask pkg-config for libfabric >= 1.14's headers (Debian 12 and Ubuntu 24.04 ship 1.17).
fn pkg_config_libfabric() -> Lib {
    let run = |args: &[&str]| {
        std::process::Command::new("pkg-config").args(args).output().ok().filter(|o| o.status.success())
    };
    if run(&["--atleast-version=1.14", "libfabric"]).is_none() {
        panic!(
            "libfabric >= 1.14 not found by pkg-config: install libfabric-dev (Debian/Ubuntu) or set PKG_CONFIG_PATH"
        );
    }
    let words = |flag: &str, strip: &str| -> Vec<String> {
        let o = run(&[flag, "libfabric"]).unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .filter_map(|w| w.strip_prefix(strip).map(str::to_owned))
            .collect()
    };
    Lib { include: words("--cflags-only-I", "-I") }
}

#[cfg(feature = "gen-header")]
fn gen_header() {
    let crate_dir = env::var("CARGO_MANIFEST_DIR").unwrap();
    let mut config = cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).unwrap();
    let v = |k: &str| env::var(k).unwrap();
    let (major, minor, patch) =
        (v("CARGO_PKG_VERSION_MAJOR"), v("CARGO_PKG_VERSION_MINOR"), v("CARGO_PKG_VERSION_PATCH"));
    config.after_includes = Some(format!(
        r#"
// The version of this header (Cargo.toml's; the library's own at run time:
// fabriclib_version(), fabriclib_version_number()).
#define FABRICLIB_VERSION_MAJOR {major}
#define FABRICLIB_VERSION_MINOR {minor}
#define FABRICLIB_VERSION_PATCH {patch}
#define FABRICLIB_VERSION_STRING "{major}.{minor}.{patch}"
// One number per version, comparable: major * 1000000 + minor * 1000 + patch.
#define FABRICLIB_VERSION_NUMBER(major, minor, patch) ((major) * 1000000u + (minor) * 1000u + (patch))
#define FABRICLIB_VERSION FABRICLIB_VERSION_NUMBER({major}, {minor}, {patch})
// True when this header is at least version major.minor.patch.
#define FABRICLIB_VERSION_AT_LEAST(major, minor, patch) (FABRICLIB_VERSION >= FABRICLIB_VERSION_NUMBER(major, minor, patch))

// Declare C++ callbacks noexcept: an exception escaping a callback aborts.
#ifdef __cplusplus
#define FABRICLIB_NOEXCEPT noexcept
#else
#define FABRICLIB_NOEXCEPT
#endif

// Arrays of pointers the library only reads: in C, `uint8_t **` and
// `fabriclib_remote_mr **` pass without a cast; in C++, arrays of pointers
// to const pass too.
struct fabriclib_remote_mr;
#ifdef __cplusplus
typedef const uint8_t *const *fabriclib_blob_list;
typedef const struct fabriclib_remote_mr *const *fabriclib_remote_mr_list;
#else
typedef uint8_t *const *fabriclib_blob_list;
typedef struct fabriclib_remote_mr *const *fabriclib_remote_mr_list;
#endif
"#
    ));
    // The C surface only: src/capi/ (its mod.rs and the modules it declares)
    // and the status enum. Nothing else of the crate is parsed, so nothing
    // internal can reach the header (an allow-list of files, not a deny-list
    // of names).
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(format!("{crate_dir}/src/capi/mod.rs"))
        .with_src(format!("{crate_dir}/src/status.rs"))
        .generate()
        .expect("cbindgen failed")
        .write_to_file(format!("{crate_dir}/include/fabriclib.h"));
    println!("cargo:rerun-if-changed=src/capi");
    println!("cargo:rerun-if-changed=src/status.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
}
