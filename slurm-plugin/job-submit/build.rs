//! Gives the linked artifacts (test binaries, the plugin) a runpath to
//! libslurmfull.so, which cder-slurm-sys found at build time.
fn main() {
    if let Ok(dir) = std::env::var("DEP_SLURMFULL_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
