//! Generates the bindings from the ROCm SMI header installed on the build
//! machine, so that a layout or signature that changed between releases is
//! a build error, not a wrong answer from a GPU node. The functions come as
//! a struct loaded at run time (bindgen's dynamic loading): no link-time
//! dependency on librocm_smi64.

use std::env;
use std::path::{Path, PathBuf};

/// The `rsmi_*` functions cder calls; all of them exist in ROCm SMI 5.2.3.
const FUNCTIONS: &[&str] = &[
    "rsmi_init",
    "rsmi_shut_down",
    "rsmi_status_string",
    "rsmi_num_monitor_devices",
    "rsmi_dev_unique_id_get",
    "rsmi_dev_name_get",
    "rsmi_dev_memory_total_get",
    "rsmi_dev_memory_usage_get",
    "rsmi_dev_pci_id_get",
    "rsmi_topo_numa_affinity_get",
    "rsmi_dev_drm_render_minor_get",
    "rsmi_dev_busy_percent_get",
    "rsmi_dev_ecc_enabled_get",
    "rsmi_dev_ecc_count_get",
];

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=ROCM_SMI_INCLUDE_DIR");
    let include = env::var("ROCM_SMI_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    let header = Path::new(&include).join("rocm_smi/rocm_smi.h");
    if !header.exists() {
        panic!(
            "rocm_smi/rocm_smi.h not found under {include}: install librocm-smi-dev (Debian) or set ROCM_SMI_INCLUDE_DIR"
        );
    }
    println!("cargo:rerun-if-changed={}", header.display());
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{include}"))
        .allowlist_function(FUNCTIONS.join("|"))
        .allowlist_type("rsmi_status_t|rsmi_memory_type_t|rsmi_gpu_block_t|rsmi_error_count_t")
        .allowlist_var("RSMI_INIT_FLAG_.*")
        // `RSMI_STATUS_SUCCESS`, not `rsmi_status_t_RSMI_STATUS_SUCCESS`:
        // the header's own names.
        .prepend_enum_name(false)
        .dynamic_library_name("RocmSmiLibrary")
        // Every function above is in 5.2.3: a library without one is not
        // ROCm SMI (or too old), refused at load with the symbol's name.
        .dynamic_link_require_all(true)
        .layout_tests(true)
        .derive_default(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on rocm_smi/rocm_smi.h");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("cannot write bindings.rs");
}
