//! Generates the bindings from the SLURM headers installed on the build
//! machine: a plugin must be rebuilt for every SLURM major release, and
//! binding the headers at build time makes a mismatch a build error, not a
//! crash in slurmctld.

use std::env;
use std::path::{Path, PathBuf};

/// Where Debian (and most distributions) put libslurmfull.so.
const DEFAULT_LIB_DIRS: &[&str] = &["/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm"];

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=SLURM_LIB_DIR");

    let include = env::var("SLURM_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    if !Path::new(&include).join("slurm/spank.h").exists() {
        panic!("slurm/spank.h not found under {include}: install libslurm-dev (Debian) or set SLURM_INCLUDE_DIR");
    }
    for h in ["slurm.h", "spank.h", "slurm_version.h", "slurm_errno.h"] {
        println!("cargo:rerun-if-changed={include}/slurm/{h}");
    }
    // The release the headers are from, for the version-keyed shims of
    // cder-slurm (its build.rs reads it as DEP_SLURMFULL_VERSION_NUMBER).
    let version = version_number(&Path::new(&include).join("slurm/slurm_version.h"));
    println!("cargo:version_number={version}");

    let lib_dir = env::var("SLURM_LIB_DIR").ok().or_else(|| {
        DEFAULT_LIB_DIRS.iter().find(|d| Path::new(d).join("libslurmfull.so").exists()).map(|d| d.to_string())
    });
    let Some(lib_dir) = lib_dir else {
        panic!("libslurmfull.so not found in {DEFAULT_LIB_DIRS:?}: install slurm-wlm or set SLURM_LIB_DIR");
    };
    // The plugins are loaded into processes that already map libslurmfull.so
    // (slurmctld, slurmstepd, srun, sbatch); the runpath serves test binaries.
    println!("cargo:rustc-link-search=native={lib_dir}");
    println!("cargo:rustc-link-lib=dylib=slurmfull");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib_dir}");
    println!("cargo:lib_dir={lib_dir}");

    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{include}"))
        .allowlist_function("spank_.*")
        .allowlist_function(
            "slurm_(info|error|verbose|debug|spank_log|xstrdup|xfree|load_job|free_job_info_msg|free_job_desc_msg|xcalloc)",
        )
        .allowlist_type("job_desc_msg_t|job_info_msg_t|slurm_job_info_t|spank_.*|slurm_conf_t|cder_show_flags")
        .allowlist_var(
            "slurm_conf|SLURM_VERSION_NUMBER|SLURM_BATCH_SCRIPT|SLURM_EXTERN_CONT|SLURM_SUCCESS|SLURM_ERROR|ESLURM_.*|ESPANK_.*|S_CTX_.*",
        )
        .rustified_enum("spank_err|spank_context|spank_item")
        .layout_tests(true)
        .derive_default(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the SLURM headers");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("cannot write bindings.rs");
}

/// `SLURM_VERSION_NUMBER` (`0xAABBCC`) of a `slurm_version.h`.
fn version_number(header: &Path) -> u32 {
    let text = std::fs::read_to_string(header)
        .unwrap_or_else(|e| panic!("{}: {e}: SLURM's headers lack slurm_version.h", header.display()));
    text.lines()
        .find_map(|l| l.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .and_then(|v| u32::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| panic!("{}: no readable SLURM_VERSION_NUMBER", header.display()))
}
