//! Through the real BDII: cder-glue-provider is installed with
//! deploy/bdii/install-provider.sh into the provider directory of a real
//! `bdii-update` daemon feeding slapd (Debian's BDII config, GLUE schemas).
//! It reads a real cderd; its entries appear in the BDII, a change in
//! cderd's free count shows within the next update cycles, and when cderd
//! goes away the provider fails (stderr, non-zero, no output) and the BDII
//! keeps the last good data (BDII_DELETE_DELAY).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cder_glue_provider::ldif;
use cder_protocol::{AllocRequest, Client};
use cder_testkit::TestNode;
use cder_tests::bdii::{built_binary, require_bdii, Bdii, BdiiOptions};
use cder_tests::glue::other_info;

const EE_DN: &str = "GLUE2ResourceID=wn01.example.org_gpgpu,GLUE2ServiceID=wn01.example.org_ComputingElement,GLUE2GroupID=resource,o=glue";

pub(crate) fn node_config(dir: &Path) -> (PathBuf, PathBuf) {
    let socket = dir.join("cderd.sock");
    let mut text = format!("[node]\nsocket = \"{}\"\nstate_dir = \"{}\"\n\n[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n", socket.display(), dir.join("state").display());
    for i in 0..4 {
        text.push_str(&format!(
            "\n[[cder.device]]\nindex = {i}\nuuid = \"GPU-test-{i}\"\nmodel = \"Tesla K20m\"\nmemory_mib = 4800\ncompute_capability = \"3.5\"\nmultiprocessors = 13\ncores_per_mp = 192\nclock_mhz = 706\necc = true\npath = \"/dev/nvidia{i}\"\n"
        ));
    }
    let path = dir.join("cder.toml");
    std::fs::write(&path, text).unwrap();
    (path, socket)
}

pub(crate) fn provider_config(dir: &Path, node_config: &Path, socket: &Path) -> PathBuf {
    let text = format!(
        r#"[site]
computing_service_id = "wn01.example.org_ComputingElement"
computing_manager_id = "wn01.example.org_ComputingElement_Manager"
ce_unique_id = "wn01.example.org:8443/cream-slurm-gpgpu"
strategies = ["attribute-extension", "class-extension"]
cder_config = "{}"

[service]
type = "org.glite.ce.CREAM"
admin_domain = "EXAMPLE-SITE"
manager_product = "SLURM"
manager_version = "22.05.8"

[counts]
source = "cderd"
socket = "{}"
timeout_s = 5

[[group]]
id = "wn01.example.org_gpgpu"
nodes = ["wn01"]
platform = "amd64"
main_memory_mib = 65536
inventory = true
"#,
        node_config.display(),
        socket.display()
    );
    let path = dir.join("glue-provider.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The EE's OtherInfo counts as the BDII serves them now.
pub(crate) fn published_counts(bdii: &Bdii) -> Option<[String; 4]> {
    let text = bdii
        .slapd
        .tool("ldapsearch", &["-LLL", "-o", "ldif-wrap=no", "-s", "base", "-b", EE_DN, "(objectClass=*)"], None)
        .ok()?;
    let entries = ldif::parse(&text).ok()?;
    let info = other_info(entries.first()?);
    Some(
        ["GPGPUTotalInstances", "GPGPUFreeInstances", "GPGPUUsedInstances", "GPGPUOfflineInstances"]
            .map(|k| info.get(k).cloned().unwrap_or_default()),
    )
}

fn expect(v: [&str; 4]) -> Option<[String; 4]> {
    Some(v.map(String::from))
}

#[test]
fn cderd_counts_flow_through_bdii_update() {
    if !require_bdii() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (node_cfg, socket) = node_config(work.path());
    let bin = built_binary("cderd", "cderd").unwrap_or_else(|e| panic!("{e}"));
    let mut cderd = Some(TestNode::started(bin, &node_cfg, &socket, work.path().join("cderd.log")));
    let glue_cfg = provider_config(work.path(), &node_cfg, &socket);

    let mut bdii = Bdii::new(&BdiiOptions { breathe_time: 1.0, delete_delay: 3600, ..Default::default() })
        .unwrap_or_else(|e| panic!("{e}"));
    let provider = built_binary("cder-glue-provider", "cder-glue-provider").unwrap();
    let install = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/bdii/install-provider.sh"))
        .arg("--binary")
        .arg(&provider)
        .arg("--prefix")
        .arg(work.path().join("prefix"))
        .arg("--provider-dir")
        .arg(bdii.provider_dir())
        .arg("--config")
        .arg(&glue_cfg)
        .output()
        .unwrap();
    assert!(
        install.status.success(),
        "install-provider.sh: {}{}",
        String::from_utf8_lossy(&install.stdout),
        String::from_utf8_lossy(&install.stderr)
    );
    assert!(bdii.provider_dir().join("cder-glue-provider").is_file());

    bdii.run().unwrap_or_else(|e| panic!("{e}"));
    let done = bdii.wait_cycles(0, 1, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published_counts(&bdii), expect(["4", "4", "0", "0"]), "first cycle; log:\n{}", bdii.log());
    let tags =
        bdii.slapd.search("o=glue", "(GLUE2EntityOtherInfo=GPGPUModel=Tesla K20m)", &["GLUE2ResourceID"]).unwrap();
    assert!(tags.contains("GLUE2ResourceID: wn01.example.org_gpgpu"), "{tags}");

    // A job takes a GPU: the next cycle (at most two, if one was already
    // running its providers) publishes one fewer free.
    let mut client = Client::connect(&socket, Duration::from_secs(5)).unwrap();
    client.alloc(&AllocRequest::new("slurm:4242".parse().unwrap(), 1000, 1)).unwrap();
    let done = bdii.wait_cycles(done, 2, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published_counts(&bdii), expect(["4", "3", "1", "0"]), "after alloc; log:\n{}", bdii.log());
    let ext = bdii
        .slapd
        .search(
            "o=glue",
            "(&(GLUE2ExtensionKey=GPGPUFreeInstances)(GLUE2ExtensionEntityForeignKey=wn01.example.org_gpgpu))",
            &["GLUE2ExtensionValue"],
        )
        .unwrap();
    assert!(ext.contains("GLUE2ExtensionValue: 3"), "{ext}");

    // A drained GPU is neither free nor used: it is published apart.
    client.drain("gpgpu:3", "Xid 79").unwrap();
    let done = bdii.wait_cycles(done, 2, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published_counts(&bdii), expect(["4", "2", "1", "1"]), "after drain; log:\n{}", bdii.log());

    // cderd goes away: the provider fails loudly and prints nothing; the
    // BDII keeps the last good entries (delete delay) rather than a half entry.
    drop(client);
    cderd.take();
    bdii.wait_cycles(done, 2, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published_counts(&bdii), expect(["4", "2", "1", "1"]), "after cderd stopped; log:\n{}", bdii.log());
    let log = bdii.log();
    assert!(log.contains("cder-glue-provider: cderd status: cannot connect to cderd"), "{log}");
}
