//! The BDII's own daemons restarting under a running provider: bdii-update
//! stopped and started again, and slapd killed and started again on the
//! same port and databases. After each, the provider's next cycles publish
//! what cderd says now (GLUE2ExecutionEnvironment counts equal cderd's
//! `status`), with no restart of cderd or of the provider's setup.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cder_protocol::{AllocRequest, Client};
use cder_testkit::TestNode;
use cder_tests::bdii::{built_binary, require_bdii, Bdii, BdiiOptions};

use crate::glue_bdii::{node_config, provider_config, published_counts};

/// cderd's counts of the gpgpu type, in the order the EE publishes them
/// (total, free, used, offline).
fn cderd_counts(socket: &Path) -> Option<[String; 4]> {
    let status = Client::connect(socket, Duration::from_secs(5)).unwrap().status().unwrap();
    let c = &status.counts["gpgpu"];
    Some([c.total, c.free, c.allocated, c.offline].map(|n| n.to_string()))
}

#[test]
fn provider_publishes_cderds_counts_after_bdii_update_and_slapd_restart() {
    if !require_bdii() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (node_cfg, socket) = node_config(work.path());
    let bin = built_binary("cderd", "cderd").unwrap_or_else(|e| panic!("{e}"));
    let _cderd = TestNode::started(bin, &node_cfg, &socket, work.path().join("cderd.log"));
    let glue_cfg = provider_config(work.path(), &node_cfg, &socket);
    let mut bdii =
        Bdii::new(&BdiiOptions { breathe_time: 1.0, ..Default::default() }).unwrap_or_else(|e| panic!("{e}"));
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
    assert!(install.status.success(), "install-provider.sh: {}", String::from_utf8_lossy(&install.stderr));
    bdii.run().unwrap_or_else(|e| panic!("{e}"));
    let done = bdii.wait_cycles(0, 1, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published_counts(&bdii), cderd_counts(&socket), "first cycle; log:\n{}", bdii.log());

    // bdii-update stops; a job takes a GPU meanwhile; bdii-update starts
    // again: its next cycles publish the new counts.
    let mut client = Client::connect(&socket, Duration::from_secs(5)).unwrap();
    bdii.stop().unwrap_or_else(|e| panic!("{e}"));
    client.alloc(&AllocRequest::new("slurm:1".parse().unwrap(), 1000, 1)).unwrap();
    assert_ne!(published_counts(&bdii), cderd_counts(&socket), "nothing updates while bdii-update is down");
    bdii.run().unwrap_or_else(|e| panic!("{e}"));
    // Two cycles: the first may have started its providers before the restart's log line.
    let done = bdii.wait_cycles(done, 2, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let want = cderd_counts(&socket);
    assert_eq!(want.as_ref().map(|c| c[2].as_str()), Some("1"));
    assert_eq!(published_counts(&bdii), want, "after bdii-update restarted; log:\n{}", bdii.log());

    // slapd is killed under the running bdii-update and started again on
    // the same port and databases; a second job and a drain happen meanwhile.
    bdii.slapd.kill();
    client.alloc(&AllocRequest::new("slurm:2".parse().unwrap(), 1000, 1)).unwrap();
    client.drain("gpgpu:3", "Xid 79").unwrap();
    bdii.slapd.restart().unwrap_or_else(|e| panic!("{e}"));
    let done = bdii.wait_cycles(done, 2, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let want = cderd_counts(&socket);
    assert_eq!(want, Some(["4", "1", "2", "1"].map(String::from)));
    assert_eq!(published_counts(&bdii), want, "after slapd restarted; log:\n{}", bdii.log());

    // And later changes keep flowing.
    client.release(&"slurm:1".parse().unwrap()).unwrap();
    bdii.wait_cycles(done, 2, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(published_counts(&bdii), cderd_counts(&socket), "after release; log:\n{}", bdii.log());
}
