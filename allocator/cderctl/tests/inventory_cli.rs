//! `cderctl inventory` as an admin runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cderctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cderctl"))
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn inventory_json_prints_the_example_devices() {
    let example = repo_root().join("deploy/cder.example.toml");
    let out = cderctl().args(["inventory", "--json", "--config"]).arg(&example).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let devices: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices = devices.as_array().unwrap();
    assert_eq!(devices.len(), 4);
    let numa: Vec<u64> = devices.iter().map(|d| d["numa_node"].as_u64().unwrap()).collect();
    assert_eq!(numa, [0, 0, 1, 1]);
    assert_eq!(devices[3]["ecc"], false);
    assert_eq!(devices[0]["type"], "gpgpu");
    assert_eq!(devices[0]["cores"], 13 * 192);
}

#[test]
fn inventory_table_and_config_from_environment() {
    let example = repo_root().join("deploy/cder.example.toml");
    let out = cderctl().arg("inventory").env("CDER_CONFIG", &example).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 5, "{text}");
    assert!(text.lines().next().unwrap().starts_with("TYPE"));
    assert!(text.contains("Tesla K20m"));
}

#[test]
fn inventory_through_the_fake_nvml() {
    // The fake NVML stands in for the NVIDIA driver, which CI cannot have.
    let library = cder_fake_nvml::library_path().expect("fake NVML built");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cder.toml");
    std::fs::write(
        &config,
        format!(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\n",
            library.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = cderctl()
        .args(["inventory", "--json", "--config"])
        .arg(&config)
        .env("CDER_FAKE_NVML", repo_root().join("deploy/fake-nvml.example.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let devices: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let models: Vec<&str> = devices.as_array().unwrap().iter().map(|d| d["model"].as_str().unwrap()).collect();
    assert_eq!(models, ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Tesla T4", "Tesla T4"]);
    assert_eq!(devices[2]["multiprocessors"], 40);

    // No driver: exit 1 with the reason on one line.
    let out = cderctl().args(["inventory", "--config"]).arg(&config).env_remove("CDER_FAKE_NVML").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("cderctl: ") && err.contains("cannot load NVML"), "{err}");
}

#[test]
fn bad_config_exits_2_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cder.toml");
    std::fs::write(&config, "[node]\nsocket = \"/run/x.sock\"\nsockett_mode = \"0600\"\n").unwrap();
    let out = cderctl().args(["inventory", "--config"]).arg(&config).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:3:1: node.sockett_mode: unknown field", config.display())), "{err}");

    let out = cderctl().args(["inventory", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
