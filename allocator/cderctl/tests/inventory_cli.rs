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

/// A node with NVIDIA GPUs (the fake NVML: no driver can exist on CI) and
/// AMD GPUs found by the /dev scan of a fake sysfs tree (the kernel's
/// amdgpu files written into a temp dir), their render nodes real
/// character devices made with `mknod`. Every path of the node is the
/// config's, so the real /sys and /dev are not read.
struct MixedNode {
    dir: tempfile::TempDir,
}

impl MixedNode {
    fn new() -> MixedNode {
        let node = MixedNode { dir: tempfile::tempdir().unwrap() };
        for (minor, slot, name) in
            [(128, "0000:c1:00.0", "AMD Instinct MI210"), (129, "0000:03:00.0", "AMD Instinct MI210")]
        {
            let dev = node.path(&format!("sys/class/drm/renderD{minor}"));
            std::fs::create_dir_all(dev.join("device")).unwrap();
            for (file, text) in [
                ("dev", format!("226:{minor}")),
                ("device/vendor", "0x1002".into()),
                ("device/device", "0x740f".into()),
                ("device/uevent", format!("DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_SLOT_NAME={slot}")),
                ("device/numa_node", "1".into()),
                ("device/product_name", name.into()),
                ("device/mem_info_vram_total", "68702699520".into()),
                ("device/unique_id", format!("{:016x}", 0x51e2_0000_0000_0000u64 + minor as u64)),
            ] {
                std::fs::write(dev.join(file), text + "\n").unwrap();
            }
            let kfd = node.path(&format!("sys/class/kfd/kfd/topology/nodes/{}", minor - 127));
            std::fs::create_dir_all(&kfd).unwrap();
            let bus = u32::from_str_radix(&slot[5..7], 16).unwrap();
            std::fs::write(
                kfd.join("properties"),
                format!("gfx_target_version 90010\nlocation_id {}\ndomain 0\n", bus << 8),
            )
            .unwrap();
        }
        std::fs::create_dir_all(node.path("dev/dri")).unwrap();
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn mknod(&self, rel: &str, major: u32, minor: u32) {
        let out =
            Command::new("mknod").arg(self.path(rel)).args(["c", &major.to_string(), &minor.to_string()]).output();
        let out = out.expect("mknod (coreutils)");
        assert!(out.status.success(), "mknod {rel}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// cder.toml: `gpgpu` through NVML, `amdgpu` through `auto` with no ROCm installed.
    fn config(&self, sharing: &str) -> PathBuf {
        let sys = self.path("sys");
        let text = format!(
            "[node]\nsocket = {:?}\nstate_dir = {:?}\n{sharing}\n\
             [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\nsysfs_root = {sys:?}\n\n\
             [[cder]]\nname = \"amdgpu\"\nvendor = \"amd\"\ndiscovery = \"auto\"\nrocm_smi_library = {:?}\n\
             sysfs_root = {sys:?}\nkfd_path = {:?}\nrender_node_path = \"{}/renderD{{minor}}\"\n",
            self.path("cderd.sock"),
            self.path("state"),
            cder_fake_nvml::library_path().expect("fake NVML built"),
            self.path("opt/rocm/lib/librocm_smi64.so.1"),
            self.path("dev/kfd"),
            self.path("dev/dri").display(),
        );
        let file = self.path("cder.toml");
        std::fs::write(&file, text).unwrap();
        file
    }
}

/// The columns of a `cderctl inventory` table line (cells are apart by two spaces or more).
fn columns(line: &str) -> Vec<&str> {
    line.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect()
}

#[test]
fn a_mixed_node_shows_each_type_with_its_vendor_source_and_devices() {
    if !cder_testkit::require_root("mknod makes the fake render nodes") || !cder_testkit::require_programs(&["mknod"]) {
        return;
    }
    let node = MixedNode::new();
    node.mknod("dev/kfd", 235, 0);
    node.mknod("dev/dri/renderD128", 226, 128);
    node.mknod("dev/dri/renderD129", 226, 129);
    let config = node.config("");
    let machine = repo_root().join("deploy/fake-nvml.example.json");

    // The admin asks what this node has: two types, each with its vendor and source.
    let out = cderctl().args(["inventory", "--config"]).arg(&config).env("CDER_FAKE_NVML", &machine).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<Vec<&str>> = table.lines().map(columns).collect();
    assert_eq!(
        lines[0],
        [
            "TYPE", "VENDOR", "SOURCE", "IDX", "MODEL", "MEM(MiB)", "CC", "ARCH", "CORES", "MHZ", "ECC", "NUMA",
            "HEALTH", "PATH", "UUID"
        ]
    );
    let summary: Vec<(&str, &str, &str, &str)> = lines[1..].iter().map(|c| (c[0], c[1], c[2], c[4])).collect();
    assert_eq!(
        summary,
        [
            ("gpgpu", "Nvidia", "nvml", "NVIDIA A100-SXM4-40GB"),
            ("gpgpu", "Nvidia", "nvml", "NVIDIA A100-SXM4-40GB"),
            ("gpgpu", "Nvidia", "nvml", "Tesla T4"),
            ("gpgpu", "Nvidia", "nvml", "Tesla T4"),
            ("amdgpu", "AMD", "dev-scan", "AMD Instinct MI210"),
            ("amdgpu", "AMD", "dev-scan", "AMD Instinct MI210"),
        ],
        "{table}"
    );
    let dri = node.path("dev/dri");
    // AMD: numbered in PCI bus order (03:00.0 first), gfx90a from KFD, the render node as device file.
    assert_eq!(
        (lines[5][3], lines[5][5], lines[5][6], lines[5][7], lines[5][11]),
        ("0", "65520", "-", "gfx90a", "1"),
        "{table}"
    );
    assert_eq!(
        lines[5][13..],
        [dri.join("renderD129").display().to_string(), "GPU-51e2000000000081".into()],
        "{table}"
    );
    assert_eq!(lines[6][13], dri.join("renderD128").display().to_string(), "{table}");
    assert_eq!(lines[1][6..8], ["8.0", "-"], "{table}");

    // The same as JSON, with each device's number for its fence.
    let out = cderctl()
        .args(["inventory", "--json", "--config"])
        .arg(&config)
        .env("CDER_FAKE_NVML", &machine)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let devices: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let amd: Vec<&serde_json::Value> = devices.as_array().unwrap().iter().filter(|d| d["type"] == "amdgpu").collect();
    let got: Vec<(u64, &str, &str, u64, &str)> = amd
        .iter()
        .map(|d| {
            (
                d["index"].as_u64().unwrap(),
                d["pci_bus_id"].as_str().unwrap(),
                d["dev"].as_str().unwrap(),
                d["numa_node"].as_u64().unwrap(),
                d["architecture"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [(0, "0000:03:00.0", "226:129", 1, "gfx90a"), (1, "0000:c1:00.0", "226:128", 1, "gfx90a")]);

    // cderd --check, as before a start: the counts, and where each type's devices came from.
    let cderd = cder_testkit::built("cderd", "cderd");
    let out = Command::new(&cderd).arg("--check").arg("--config").arg(&config).env("CDER_FAKE_NVML", &machine).output();
    let out = out.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("gpgpu: 4 total, 4 free, 0 allocated, 0 offline, 0 unhealthy; devices from nvml"),
        "{stdout}"
    );
    assert!(
        stdout.contains("amdgpu: 2 total, 2 free, 0 allocated, 0 offline, 0 unhealthy; devices from dev-scan"),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("discovery = \"auto\": type \"amdgpu\": cannot load ROCm SMI from")
            && stderr.contains("librocm_smi64.so.1"),
        "{stderr}"
    );
    assert!(stderr.contains("type \"amdgpu\": devices from dev-scan"), "{stderr}");
    assert!(stderr.contains("type \"gpgpu\": devices from nvml"), "{stderr}");

    // SLURM's gres.conf promises a third MI210: cderd will not start on it.
    let gres = node.path("gres.conf");
    std::fs::write(
        &gres,
        format!(
            "NodeName=wn1 Name=gpu Type=a100 File=/dev/nvidia[0-3]\nNodeName=wn1 Name=amdgpu Type=mi210 File={}/renderD[128-130]\n",
            dri.display()
        ),
    )
    .unwrap();
    let config = node.config(&format!("[node.sharing]\nslurm_gres_conf = {gres:?}\nslurm_node_name = \"wn1\"\n"));
    let out = Command::new(&cderd).arg("--check").arg("--config").arg(&config).env("CDER_FAKE_NVML", &machine).output();
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:2: Name=amdgpu Type=mi210: SLURM counts 3 on this node, but discovery (dev-scan) found 2 device(s) of type \"amdgpu\"",
            gres.display()
        )),
        "{stderr}"
    );

    // A render node whose number is not the one sysfs names: refused, naming the file.
    std::fs::remove_file(node.path("dev/dri/renderD129")).unwrap();
    node.mknod("dev/dri/renderD129", 226, 200);
    let config = node.config("");
    let out = cderctl().args(["inventory", "--config"]).arg(&config).env("CDER_FAKE_NVML", &machine).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}: is not the character device 226:129 that sysfs names (it is 226:200)",
            dri.join("renderD129").display()
        )),
        "{err}"
    );

    // No /dev/kfd: an AMD GPU the node cannot compute on is an error, not a silent device.
    std::fs::remove_file(node.path("dev/kfd")).unwrap();
    let out = cderctl().args(["inventory", "--config"]).arg(&config).env("CDER_FAKE_NVML", &machine).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("type \"amdgpu\": /dev scan:") && err.contains("kfd_path: AMD's compute interface"), "{err}");
}
