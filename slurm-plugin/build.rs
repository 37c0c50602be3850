//! Gives the linked artifacts (test binaries, the plugin) a runpath to
//! libslurmfull.so, which cder-slurm-sys found at build time, and turns the
//! headers' `SLURM_VERSION_NUMBER` into one `cfg` per API change that
//! `src/sys` reads around. A new release that changes what cder reads is
//! one line in `API_CHANGES` and its `#[cfg]` at the place it is read.

/// (first release with the change as `0xAABBCC`, cfg name, what changed).
const API_CHANGES: &[(u32, &str, &str)] = &[
    (0x170b00, "slurm_rpc_needs_init", "23.11: an RPC needs the auth and hash plugins initialised (slurm_init)"),
    (0x180500, "slurm_rpc_needs_tls", "24.05: ... and the tls plugin"),
    (0x190500, "slurm_rpc_needs_conn", "25.05: ... and the certgen and conn plugins instead of tls"),
    (0x190b00, "slurm_job_desc_step_id", "25.11: job_desc_msg_t.job_id is now step_id.job_id"),
    (0x1a0500, "slurm_load_job_step_id", "26.05: slurm_load_job takes a slurm_step_id_t"),
];

fn main() {
    if let Ok(dir) = std::env::var("DEP_SLURMFULL_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    let version: u32 = std::env::var("DEP_SLURMFULL_VERSION_NUMBER")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("cder-slurm-sys names the SLURM release it was built against");
    for (since, cfg, _) in API_CHANGES {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if version >= *since {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
