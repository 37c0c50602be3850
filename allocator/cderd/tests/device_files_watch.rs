//! Device files stay as cder sets them: a device file
//! re-created or changed behind cderd's back (what `nvidia-modprobe` does
//! where the driver has `ModifyDeviceFiles=1`: 0666 root:root) is set
//! again, owner, mode and ACL, and logged; `cderd --check` warns when the
//! driver's parameters say it would do so. Device files are plain files in
//! a temp dir, the driver's parameters a file `nvidia_params` names.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use cder_protocol::AllocRequest;
use cder_testkit::{is_root, require};
use common::{Node, Options};

const ENFORCE: &str =
    "device_files = true\njob_mode = \"0600\"\nidle_owner = 0\nidle_group = 0\nidle_mode = \"0600\"\n\
                       nvml_exclusive_process = false";

fn meta(path: &Path) -> (u32, u32, u32) {
    let m = std::fs::metadata(path).unwrap();
    (m.uid(), m.gid(), m.mode() & 0o7777)
}

/// What `nvidia-modprobe` does to a device file whose owner or mode differ
/// from the driver's settings: removes it and makes it again, 0666 root:root.
fn recreate_as_the_driver_would(path: &Path) {
    std::fs::remove_file(path).unwrap();
    std::fs::write(path, b"").unwrap();
    std::os::unix::fs::chown(path, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).unwrap();
}

fn wait_until(node: &Node, what: &str, ok: impl Fn() -> bool) {
    let done = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(50), || ok().then_some(()));
    assert!(done.is_some(), "{what} never happened; cderd:\n{}", node.log());
}

fn set_again_lines(node: &Node) -> usize {
    node.log().matches("not as cder set it").count()
}

#[test]
fn a_device_file_changed_behind_cders_back_is_set_again_and_logged() {
    if !require(is_root(), "root (to chown device files)") {
        return;
    }
    let node = Node::with(3, Options { enforcement: Some(ENFORCE.into()), ..Options::default() });
    let (gpu0, gpu1) = (node.devices[0].clone(), node.devices[1].clone());
    let mut c = node.client();
    let held = AllocRequest { devices: Some(vec![0]), ..AllocRequest::new("slurm:1".parse().unwrap(), 4321, 1) };
    c.alloc(&held).unwrap();
    assert_eq!(meta(&gpu0), (4321, 0, 0o600));
    // Re-created world-open under a running job: its owner and mode come back.
    recreate_as_the_driver_would(&gpu0);
    wait_until(&node, "gpgpu:0 given back to its job", || meta(&gpu0) == (4321, 0, 0o600));
    assert!(node.log().contains("device file found 0:0 0666, not as cder set it"), "{}", node.log());
    // A free device opened to all: root's alone again.
    std::fs::set_permissions(&gpu1, std::fs::Permissions::from_mode(0o666)).unwrap();
    wait_until(&node, "gpgpu:1 root-only again", || meta(&gpu1) == (0, 0, 0o600));
    assert_eq!(set_again_lines(&node), 2, "{}", node.log());
    // cderd's own changes are not taken for someone else's.
    c.release(&"slurm:1".parse().unwrap()).unwrap();
    let again = AllocRequest { devices: Some(vec![2]), ..AllocRequest::new("slurm:2".parse().unwrap(), 4322, 1) };
    c.alloc(&again).unwrap();
    c.release(&"slurm:2".parse().unwrap()).unwrap();
    // The watcher's look after those changes is a look at the ledger, under its lock.
    c.status().unwrap();
    std::fs::set_permissions(&gpu1, std::fs::Permissions::from_mode(0o644)).unwrap();
    wait_until(&node, "gpgpu:1 root-only again", || meta(&gpu1) == (0, 0, 0o600));
    assert_eq!(set_again_lines(&node), 3, "only the outside changes are logged:\n{}", node.log());
    assert_eq!(meta(&gpu0), (0, 0, 0o600));
}

#[test]
fn a_shared_gpus_acl_wiped_behind_cders_back_is_set_again() {
    if !require(is_root(), "root (to chown device files and set their ACLs)") {
        return;
    }
    let enforcement = format!("{ENFORCE}\n[node.sharing]\nshares_per_gpu = 2");
    let node = Node::with(2, Options { enforcement: Some(enforcement), ..Options::default() });
    let gpu0 = node.devices[0].clone();
    let share = |job: &str, uid: u32| AllocRequest {
        devices: Some(vec![0]),
        shares: Some(1),
        ..AllocRequest::new(job.parse().unwrap(), uid, 1)
    };
    let mut c = node.client();
    c.alloc(&share("slurm:1", 4321)).unwrap();
    c.alloc(&share("slurm:2", 4322)).unwrap();
    let sharers = || -> BTreeSet<u32> {
        cderd::acl::get(&gpu0).ok().flatten().map(|a| a.users.keys().copied().collect()).unwrap_or_default()
    };
    if sharers().is_empty() {
        cder_testkit::missing(&format!("a temp dir that keeps ACLs ({} does not)", gpu0.display()));
        return;
    }
    assert_eq!((meta(&gpu0), sharers()), ((0, 0, 0o660), BTreeSet::from([4321, 4322])));
    recreate_as_the_driver_would(&gpu0);
    assert!(sharers().is_empty());
    wait_until(&node, "the sharers' ACL back", || {
        meta(&gpu0) == (0, 0, 0o660) && sharers() == BTreeSet::from([4321, 4322])
    });
    assert!(node.log().contains("device file found 0:0 0666, not as cder set it"), "{}", node.log());
}

/// Config text for `cderd --check`: one static NVIDIA device, the driver's
/// parameters at `params`.
fn check_config(dir: &Path, device_files: bool, params: &Path) -> std::path::PathBuf {
    let device = dir.join("nvidia0");
    std::fs::write(&device, b"").unwrap();
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ndevice_files = {device_files}\ncgroup = \"off\"\n\
         [node.batch]\ndrain_node = \"off\"\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\nnvidia_params = {params:?}\n\
         [[cder.device]]\nindex = 0\nmodel = \"m\"\nmemory_mib = 1\npath = {device:?}\n",
        dir.join("cderd.sock"),
        dir.join("state"),
    );
    let config = dir.join("cder.toml");
    std::fs::write(&config, text).unwrap();
    config
}

fn check(config: &Path) -> String {
    let out = std::process::Command::new(common::CDERD).arg("--check").arg("--config").arg(config).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "cderd --check failed: {stderr}");
    stderr
}

#[test]
fn check_warns_when_the_nvidia_driver_would_rewrite_device_files() {
    let dir = tempfile::tempdir().unwrap();
    let params = dir.path().join("params");
    std::fs::write(
        &params,
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n",
    )
    .unwrap();
    let said = check(&check_config(dir.path(), true, &params));
    assert!(
        said.contains(&format!("cderd: warning: {} says ModifyDeviceFiles: 1", params.display()))
            && said.contains("as 0:0 0666")
            && said.contains("NVreg_ModifyDeviceFiles=0"),
        "{said}"
    );
    // device_files off: the driver's files are nobody's concern.
    assert!(!check(&check_config(dir.path(), false, &params)).contains("ModifyDeviceFiles"));
    // The driver set as it must be, or not loaded: nothing to say.
    std::fs::write(&params, "ModifyDeviceFiles: 0\nDeviceFileMode: 438\n").unwrap();
    assert!(!check(&check_config(dir.path(), true, &params)).contains("ModifyDeviceFiles"));
    assert!(!check(&check_config(dir.path(), true, &dir.path().join("none"))).contains("ModifyDeviceFiles"));
}
