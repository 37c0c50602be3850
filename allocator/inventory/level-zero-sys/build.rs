//! Generates the bindings from the Level Zero headers installed on the build
//! machine (Debian's libze-dev), so that struct layouts and result codes are
//! the loader's own, not copies. Nothing is linked: the loader is opened at
//! run time (`ZeLoader::new`), since most nodes have no Intel GPU.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=LEVEL_ZERO_INCLUDE_DIR");

    let include = env::var("LEVEL_ZERO_INCLUDE_DIR").unwrap_or_else(|_| "/usr/include".into());
    for h in ["ze_api.h", "zes_api.h"] {
        let header = Path::new(&include).join("level_zero").join(h);
        if !header.exists() {
            panic!(
                "level_zero/{h} not found under {include}: install libze-dev (Debian) or set LEVEL_ZERO_INCLUDE_DIR"
            );
        }
        println!("cargo:rerun-if-changed={}", header.display());
    }

    // Only what cder calls: discovery (ze*) and Sysman health and use (zes*).
    let functions = [
        "zeInit",
        "zeDriverGet",
        "zeDeviceGet",
        "zeDeviceGetProperties",
        "zeDeviceGetMemoryProperties",
        "zeDevicePciGetPropertiesExt",
        "zeDeviceGetSubDevices",
        "zesDeviceGetState",
        "zesDeviceEnumMemoryModules",
        "zesMemoryGetProperties",
        "zesMemoryGetState",
        "zesDeviceEnumRasErrorSets",
        "zesRasGetProperties",
        "zesRasGetState",
        "zesDeviceEnumEngineGroups",
        "zesEngineGetProperties",
        "zesEngineGetActivity",
    ];
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_arg(format!("-I{include}"))
        .allowlist_function(functions.join("|"))
        .allowlist_type("ze_result_t|ze_init_flag_t|ze_device_type_t|ze_structure_type_t|zes_structure_type_t")
        .allowlist_type("ze_device_property_flag_t|zes_reset_reason_flag_t|zes_repair_status_t|zes_mem_health_t")
        .allowlist_type("zes_ras_error_type_t|zes_ras_error_cat_t|zes_engine_group_t")
        .allowlist_var("ZE_MAX_DEVICE_NAME|ZE_MAX_DEVICE_UUID_SIZE|ZES_MAX_RAS_ERROR_CATEGORY_COUNT")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        // Loaded at run time: a struct of the loader's symbols, each a
        // Result, so a loader lacking one is an error, not a crash.
        .dynamic_library_name("ZeLoader")
        .dynamic_link_require_all(false)
        .layout_tests(true)
        .derive_default(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the Level Zero headers");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("bindings.rs");
    bindings.write_to_file(&out).expect("cannot write bindings.rs");
}
