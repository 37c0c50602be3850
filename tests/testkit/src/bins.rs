//! Where the workspace's binaries are, built first so that a test always
//! drives the current code. Every test and harness finds them here, so the
//! rules (the profile folder, `CDER_TESTS_NO_BUILD`, building inside a
//! running `cargo test`) live in one place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The workspace's root folder (this crate is `tests/testkit`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the workspace root exists")
}

/// The folder cargo builds into: `CARGO_TARGET_DIR`, or `target/` at the
/// workspace root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_root().join("target"))
}

/// The profile folder the running program was built in (`target/debug`):
/// a test executable lives in its `deps/`, a program (a demo, a
/// benchmark) in the folder itself. The workspace's binaries are beside it.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    let dir = exe.parent().expect("an executable is in a folder");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("deps/ is in a profile folder").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Whether the running program is a test executable (in `deps/`).
fn running_a_test() -> bool {
    std::env::current_exe().is_ok_and(|exe| exe.parent().and_then(Path::file_name).is_some_and(|n| n == "deps"))
}

/// Runs `cargo build <args>` at the workspace root with `env` added (the
/// caller says `--release`), unless `CDER_TESTS_NO_BUILD` says that
/// everything is built already. Building while `cargo test` runs is safe:
/// cargo has released its build lock by the time test binaries run.
pub fn cargo_build(args: &[&str], env: &[(String, String)]) -> Result<(), String> {
    if std::env::var_os("CDER_TESTS_NO_BUILD").is_some() {
        return Ok(());
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "-q", "-j", "2"]);
    let out = cmd
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// The binary `name` of the workspace package `package`, built (once per
/// process) with `cargo build -p <package> --bin <name>` for the running
/// program's profile and found in [`profile_dir`].
pub fn workspace_binary(package: &str, name: &str) -> Result<PathBuf, String> {
    // One build per binary and process: a rebuild finds nothing to do but
    // still costs cargo's start and its lock.
    static BUILT: Mutex<BTreeMap<(String, String), Result<PathBuf, String>>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    built
        .entry((package.to_string(), name.to_string()))
        .or_insert_with(|| {
            let mut args = vec!["-p", package, "--bin", name];
            if profile_dir().file_name().is_some_and(|n| n == "release") {
                args.push("--release");
            }
            let path = profile_dir().join(name);
            if let Err(e) = cargo_build(&args, &[]) {
                // A program (a demo run with sudo, where cargo is often
                // not on PATH) takes the binary built beside it; a test
                // must drive the current code, so it fails.
                if running_a_test() || !path.is_file() {
                    return Err(e);
                }
            }
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{} is missing; run cargo build -p {package} --bin {name}", path.display()))
            }
        })
        .clone()
}

/// [`workspace_binary`], panicking when it cannot be built (for tests that
/// have nothing to do without it).
pub fn built(package: &str, name: &str) -> PathBuf {
    workspace_binary(package, name).unwrap_or_else(|e| panic!("building {name}: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_test_executable_sits_in_its_profile_folders_deps() {
        let exe = std::env::current_exe().unwrap();
        assert_eq!(exe.parent().unwrap().parent().unwrap(), super::profile_dir());
        assert!(super::workspace_root().join("Cargo.toml").is_file());
    }
}
