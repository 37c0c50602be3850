//! Discovery of shared GPUs: a real cderd whose four GPUs are offered as 4
//! shares each, with 3 shares held, and the real `cder-glue-provider`
//! reading its `status`: the ExecutionEnvironment carries
//! `GPGPUTotalShares`/`GPGPUFreeShares`/`GPGPUUsedShares`, and the GLUE 2.1
//! rendering counts shares as accelerator slots. Phase 1 then matches a JDL
//! asking for shares against those offers.

use std::collections::BTreeMap;

use cder_glue_provider::ldif;
use cder_protocol::{AllocRequest, Client};
use cder_testkit::TestNode;
use cder_tests::bdii::built_binary;
use cder_tests::glue::{other_info, run_provider};

fn values(entries: &[ldif::Entry], class: &str) -> BTreeMap<String, String> {
    let e =
        entries.iter().find(|e| e.values("objectClass").any(|c| c == class)).unwrap_or_else(|| panic!("no {class}"));
    e.attributes.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[test]
fn the_provider_publishes_shares_and_glue21_counts_them_as_slots() {
    let work = tempfile::tempdir().unwrap();
    let (node_cfg, socket) = crate::glue_bdii::node_config(work.path());
    let mut text = std::fs::read_to_string(&node_cfg).unwrap();
    text = text.replacen("[[cder]]", "[node.sharing]\nshares_per_gpu = 4\n\n[[cder]]", 1);
    std::fs::write(&node_cfg, text).unwrap();
    let bin = built_binary("cderd", "cderd").unwrap_or_else(|e| panic!("{e}"));
    let _cderd = TestNode::started(bin, &node_cfg, &socket, work.path().join("cderd.log"));
    let mut client = Client::connect(&socket, std::time::Duration::from_secs(5)).unwrap();
    for (job, index, shares) in [("slurm:11", 0, 2), ("slurm:12", 1, 1)] {
        let mut request = AllocRequest::new(job.parse().unwrap(), 1000, 1);
        request.devices = Some(vec![index]);
        request.shares = Some(shares);
        client.alloc(&request).unwrap();
    }
    let glue_cfg = crate::glue_bdii::provider_config(work.path(), &node_cfg, &socket);
    let out = run_provider(&glue_cfg, &["attribute-extension", "glue21-accelerator"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let entries = ldif::parse(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let ee = entries.iter().find(|e| e.values("objectClass").any(|c| c == "GLUE2ExecutionEnvironment")).unwrap();
    let info = other_info(ee);
    let got: Vec<Option<&str>> = ["GPGPUTotalShares", "GPGPUFreeShares", "GPGPUUsedShares", "GPGPUUsedInstances"]
        .iter()
        .map(|k| info.get(*k).map(String::as_str))
        .collect();
    // 4 GPUs × 4 shares; 3 held; the two shared GPUs count as used devices.
    assert_eq!(got, [Some("16"), Some("13"), Some("3"), Some("2")], "{info:#?}");

    let manager = values(&entries, "GLUE2ComputingManagerAcceleratorInfo");
    assert_eq!(manager["GLUE2ComputingManagerAcceleratorInfoTotalAcceleratorSlots"], "16");
    assert_eq!(manager["GLUE2ComputingManagerAcceleratorInfoUsedAcceleratorSlots"], "3");
    assert_eq!(manager["GLUE2ComputingManagerAcceleratorInfoTotalPhysicalAccelerators"], "4");
}
