//! Gives the linked artifacts (test binaries, the plugin) a runpath to
//! libslurmfull.so, which cder-slurm-sys found at build time, and links the
//! unwinder statically.
//!
//! srun and every slurmstepd load this plugin on a job's path, and none of
//! them has libgcc_s.so.1 loaded: loading it for Rust's unwinder took about
//! 0.1 ms per `dlopen`. libgcc_eh.a, listed before
//! the standard library, gives the plugin its own copy (hidden by the
//! export list), so `--as-needed` drops libgcc_s. Panics never leave the
//! plugin (each callback catches them), so the two unwinders never meet.
fn main() {
    if let Ok(dir) = std::env::var("DEP_SLURMFULL_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let found = std::process::Command::new(&cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .filter(|o| o.status.success());
    let archive = found.map(|o| std::path::PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match archive.as_deref().and_then(|a| a.parent().filter(|_| a.is_absolute() && a.exists())) {
        Some(dir) => {
            println!("cargo:rustc-link-search=native={}", dir.display());
            println!("cargo:rustc-link-lib=static:+whole-archive,-bundle=gcc_eh");
        }
        None => println!(
            "cargo:warning=libgcc_eh.a not found ({cc} -print-file-name): spank_cder.so will load libgcc_s.so.1"
        ),
    }
    println!("cargo:rerun-if-env-changed=CC");
}
