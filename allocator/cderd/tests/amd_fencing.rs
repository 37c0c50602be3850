//! AMD GPUs fenced per job with real cgroups: a job opens its own render
//! node and the shared `/dev/kfd`; another job's render node is refused; a
//! job with no AMD device (an NVIDIA job, a job with no device at all) is
//! refused every render node and kfd. A link or a copy of another job's
//! render node is refused too (the cgroup checks the device number, not
//! the path), and a user cannot make a copy (mknod needs CAP_MKNOD).
//!
//! No AMD driver runs here, so the render nodes are `mknod`ed with DRM's
//! real numbers (226:128, 226:129), which no driver on this machine
//! serves: an open the cgroup lets through fails with ENXIO (the kernel
//! found no driver), one the cgroup refuses with EPERM, before any driver
//! is looked up. kfd is the mem driver's 1:9 (openable: `ok`) or, for a
//! kfd made after cderd started, a number listed in a fake `/proc/devices`.
//! Needs root and a device cgroup; under CI=true their absence fails.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cder_protocol::AllocRequest;
use cder_testkit::require;
use common::Node;

/// The probe's side: runs in a child process started by [`probe`].
#[test]
fn amd_probe_child() {
    common::probe_child_main();
}

const EPERM: &str = "1";
const ENXIO: &str = "6";

struct AmdNode {
    node: Node,
    render: [PathBuf; 2],
    kfd: PathBuf,
    nvidia: PathBuf,
}

fn mknod(path: &Path, major: u32, minor: u32) {
    let ok = Command::new("mknod")
        .arg(path)
        .args(["-m", "0666", "c", &major.to_string(), &minor.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "mknod {}", path.display());
}

/// Two AMD GPUs (type `gpgpu`, render nodes 226:128 and 226:129), kfd,
/// and one NVIDIA device (type `nv`, 1:5). `kfd_now`: make kfd (1:9)
/// before cderd starts; otherwise it is made later, and `proc_devices`
/// lists its driver as major 511.
fn amd_node(mode: &str, kfd_now: bool) -> AmdNode {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("dri")).unwrap();
    let render = [d.join("dri/renderD128"), d.join("dri/renderD129")];
    for (i, path) in render.iter().enumerate() {
        mknod(path, 226, 128 + i as u32);
    }
    let kfd = d.join("kfd");
    if kfd_now {
        mknod(&kfd, 1, 9);
    }
    let proc_devices = d.join("devices");
    std::fs::write(&proc_devices, "Character devices:\n  1 mem\n226 drm\n511 kfd\n\nBlock devices:\n  8 sd\n").unwrap();
    let nvidia = d.join("nvidia0");
    mknod(&nvidia, 1, 5);
    let parent = common::unique_cgroup_parent();
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ncgroup_parent = {parent:?}\ncgroup = {mode:?}\nheld_open = \"allow\"\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = {kfd:?}\nproc_devices = {proc_devices:?}\n\
         [[cder.device]]\nindex = 0\nmodel = \"MI250\"\nmemory_mib = 1\npath = {:?}\n\
         [[cder.device]]\nindex = 1\nmodel = \"MI250\"\nmemory_mib = 1\npath = {:?}\n\
         [[cder]]\nname = \"nv\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n\
         [[cder.device]]\nindex = 0\nmodel = \"Fake\"\nmemory_mib = 1\npath = {nvidia:?}\n",
        d.join("cderd.sock"),
        d.join("state"),
        render[0],
        render[1],
    );
    let devices = vec![render[0].clone(), render[1].clone(), kfd.clone(), nvidia.clone()];
    AmdNode { node: Node::custom(dir, &text, devices, Vec::new()), render, kfd, nvidia }
}

fn alloc(node: &Node, job: &str, uid: u32, cder_type: &str, devices: &[u32]) {
    let mut r = AllocRequest::new(job.parse().unwrap(), uid, devices.len() as u32);
    r.cder_type = cder_type.to_string();
    r.devices = Some(devices.to_vec());
    node.client().alloc(&r).unwrap();
}

/// Opens `paths` as `uid` before and after confining into `job`: path → errno or `ok`.
fn probe(node: &Node, uid: u32, job: &str, paths: &[&Path]) -> impl Fn(&str, &Path) -> String {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    let lines = common::run_probe("amd_fencing::amd_probe_child", node, uid, job, &paths);
    assert!(lines.iter().any(|l| l.starts_with("PROBE confined ")), "{job} was not confined: {lines:?}");
    move |when: &str, path: &Path| {
        let prefix = format!("PROBE {when} {} ", path.display());
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix).map(String::from))
            .unwrap_or_else(|| panic!("probe printed nothing for {prefix:?}: {lines:?}"))
    }
}

fn each_job_opens_its_own(mode: &str) {
    let n = amd_node(mode, true);
    let [r0, r1] = [&n.render[0], &n.render[1]].map(PathBuf::as_path);
    let (kfd, nv) = (n.kfd.as_path(), n.nvidia.as_path());
    alloc(&n.node, "slurm:401", 1000, "gpgpu", &[0]);
    alloc(&n.node, "slurm:402", 1001, "gpgpu", &[1]);
    alloc(&n.node, "slurm:403", 1000, "nv", &[0]);
    alloc(&n.node, "slurm:404", 1000, "gpgpu", &[]);
    let all = [r0, r1, kfd, nv];

    // The first AMD job: its render node (no driver behind it: ENXIO) and kfd.
    let seen = probe(&n.node, 1000, "slurm:401", &all);
    assert_eq!(seen("before", r1), ENXIO, "unconfined, only the missing driver stops the open");
    assert_eq!(seen("before", kfd), "ok");
    assert_eq!([r0, r1, kfd, nv].map(|p| seen("after", p)), [ENXIO, EPERM, "ok", EPERM].map(String::from));
    // The second, another uid's: the other render node, the same kfd.
    let seen = probe(&n.node, 1001, "slurm:402", &all);
    assert_eq!([r0, r1, kfd, nv].map(|p| seen("after", p)), [EPERM, ENXIO, "ok", EPERM].map(String::from));
    // An NVIDIA job: no render node, no kfd.
    let seen = probe(&n.node, 1000, "slurm:403", &all);
    assert_eq!([r0, r1, kfd, nv].map(|p| seen("after", p)), [EPERM, EPERM, EPERM, "ok"].map(String::from));
    // A job with no device at all: nothing.
    let seen = probe(&n.node, 1000, "slurm:404", &all);
    assert_eq!(seen("before", kfd), "ok");
    assert_eq!([r0, r1, kfd, nv].map(|p| seen("after", p)), [EPERM; 4].map(String::from));

    // After a restart, a group built anew gets the same rules: remove the
    // no-device job's (empty) groups while cderd is down.
    let mut node = n.node;
    node.kill();
    let parent = node.cgroup_parent.clone().unwrap();
    let mut removed = 0;
    for root in ["/sys/fs/cgroup/devices", "/sys/fs/cgroup/unified"] {
        let Ok(entries) = std::fs::read_dir(Path::new(root).join(&parent)) else { continue };
        for e in entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("slurm-404-")) {
            std::fs::remove_dir(e.path()).unwrap();
            removed += 1;
        }
    }
    assert!(removed >= 1, "no group of slurm:404 under {parent}");
    node.start();
    let seen = probe(&node, 1000, "slurm:404", &all);
    assert_eq!([r0, r1, kfd, nv].map(|p| seen("after", p)), [EPERM; 4].map(String::from));
    let seen = probe(&node, 1000, "slurm:401", &all);
    assert_eq!([r0, r1, kfd].map(|p| seen("after", p)), [ENXIO, EPERM, "ok"].map(String::from));
    // Released, the AMD device's next job gets kfd; the old groups are gone.
    node.client().release(&"slurm:401".parse().unwrap()).unwrap();
    alloc(&node, "slurm:405", 1002, "gpgpu", &[0]);
    let seen = probe(&node, 1002, "slurm:405", &all);
    assert_eq!([r0, r1, kfd, nv].map(|p| seen("after", p)), [ENXIO, EPERM, "ok", EPERM].map(String::from));
}

fn cgroup_available(v2: bool) -> bool {
    if v2 {
        std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.lines().any(|l| l.contains(" - cgroup2 ")))
    } else {
        Path::new("/sys/fs/cgroup/devices/devices.deny").exists()
    }
}

#[test]
fn v1_render_nodes_and_kfd_per_job() {
    if !require(cder_testkit::is_root() && cgroup_available(false), "root and the cgroup v1 devices controller") {
        return;
    }
    each_job_opens_its_own("v1");
}

#[test]
fn v2_render_nodes_and_kfd_per_job() {
    if !require(cder_testkit::is_root() && cgroup_available(true), "root and a cgroup2 mount with device BPF programs")
    {
        return;
    }
    each_job_opens_its_own("v2");
}

/// kfd appears only when amdgpu loads, possibly after cderd started: it is
/// denied by the major the driver registered, not by the file.
#[test]
fn kfd_made_after_start_is_denied_by_its_registered_number() {
    if !require(
        cder_testkit::is_root() && (cgroup_available(false) || cgroup_available(true)),
        "root and a device cgroup",
    ) {
        return;
    }
    let n = amd_node("auto", false);
    alloc(&n.node, "slurm:501", 1000, "gpgpu", &[0]);
    alloc(&n.node, "slurm:502", 1000, "gpgpu", &[]);
    mknod(&n.kfd, 511, 0);
    // No driver serves 511 here: ENXIO is an open the fence let through.
    let seen = probe(&n.node, 1000, "slurm:501", &[&n.kfd]);
    assert_eq!(seen("after", &n.kfd), ENXIO);
    let seen = probe(&n.node, 1000, "slurm:502", &[&n.kfd]);
    assert_eq!(seen("before", &n.kfd), ENXIO);
    assert_eq!(seen("after", &n.kfd), EPERM);
}

/// The ways a user might reach another job's render node: a symlink or a
/// hard link it makes in a directory it may write (the cgroup checks the
/// number the file names, wherever it is), a device file it makes itself
/// (refused: mknod needs CAP_MKNOD), and root's own copy elsewhere.
#[test]
fn links_and_copies_of_another_jobs_render_node_are_refused() {
    if !require(
        cder_testkit::is_root() && (cgroup_available(false) || cgroup_available(true)),
        "root and a device cgroup",
    ) {
        return;
    }
    let n = amd_node("auto", true);
    let d = n.node.dir.path();
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let as_user = |argv: &[&Path]| {
        let argv: Vec<&std::ffi::OsStr> = argv.iter().map(|p| p.as_os_str()).collect();
        common::as_uid(1000, &argv).output().unwrap()
    };
    let other = n.render[1].as_path();
    let (symlink, hard, mine, copy) = (tmp.join("symlink"), tmp.join("hard"), tmp.join("mine"), tmp.join("copy"));
    let out = as_user(&[Path::new("ln"), Path::new("-s"), other, &symlink]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // With protected_hardlinks a user may hard-link only a device file it
    // owns (a job's own render node under `device_files`); root's link
    // stands for one kept from such a job.
    let out = as_user(&[Path::new("ln"), other, &hard]);
    let protected = std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.trim() == "1");
    assert_eq!(out.status.success(), !protected, "{}", String::from_utf8_lossy(&out.stderr));
    if !hard.exists() {
        std::fs::hard_link(other, &hard).unwrap();
    }
    let out = as_user(&[Path::new("mknod"), &mine, Path::new("c"), Path::new("226"), Path::new("129")]);
    assert!(!out.status.success() && !mine.exists(), "a user made a device file");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"), "{out:?}");
    mknod(&copy, 226, 129);
    alloc(&n.node, "slurm:601", 1000, "gpgpu", &[0]);
    alloc(&n.node, "slurm:602", 1001, "gpgpu", &[1]);
    let paths = [other, &symlink, &hard, &copy];
    let seen = probe(&n.node, 1000, "slurm:601", &paths);
    for p in paths {
        assert_eq!(seen("before", p), ENXIO, "{}: unconfined, the file reaches 226:129", p.display());
        assert_eq!(seen("after", p), EPERM, "{}: job 602's render node under another name", p.display());
    }
}

/// Opens `paths` as `uid` without any device cgroup: path → errno or `ok`.
fn open_as(node: &Node, uid: u32, paths: &[&Path]) -> Vec<String> {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    let lines = common::run_probe("amd_fencing::amd_probe_child", node, uid, "slurm:1", &paths);
    paths
        .iter()
        .map(|p| {
            let prefix = format!("PROBE before {} ", p.display());
            lines.iter().find_map(|l| l.strip_prefix(&prefix).map(String::from)).unwrap_or_else(|| panic!("{lines:?}"))
        })
        .collect()
}

/// With `device_files = true` and no device cgroup, kfd is open to exactly
/// the uids holding an AMD device (an ACL entry each), as a shared GPU is
/// to its sharers; a restart puts the entries back.
#[test]
fn device_files_open_kfd_to_exactly_the_uids_holding_an_amd_device() {
    if !require(cder_testkit::is_root(), "root (chown and ACLs of device files)") {
        return;
    }
    let mut n = amd_node("off", true);
    let text = std::fs::read_to_string(&n.node.config)
        .unwrap()
        .replace("cgroup = \"off\"\n", "cgroup = \"off\"\ndevice_files = true\njob_mode = \"0600\"\n");
    std::fs::write(&n.node.config, text).unwrap();
    n.node.kill();
    n.node.start();
    const EACCES: &str = "13";
    let kfd = n.kfd.as_path();
    // No holder: the idle owner's alone (it was 0666 as mknod made it).
    assert_eq!(open_as(&n.node, 1000, &[kfd]), [EACCES]);
    alloc(&n.node, "slurm:701", 1000, "gpgpu", &[0]);
    alloc(&n.node, "slurm:702", 1002, "gpgpu", &[1]);
    alloc(&n.node, "slurm:703", 1001, "nv", &[0]);
    assert_eq!(open_as(&n.node, 1000, &[kfd, &n.render[1]]), ["ok", EACCES]);
    assert_eq!(open_as(&n.node, 1002, &[kfd]), ["ok"]);
    assert_eq!(open_as(&n.node, 1001, &[kfd, &n.nvidia]), [EACCES, "ok"], "an NVIDIA job's uid reached kfd");
    // Opened wide behind cderd's back, then a restart: the holders only again.
    std::fs::set_permissions(kfd, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    n.node.kill();
    n.node.start();
    assert_eq!(open_as(&n.node, 1001, &[kfd]), [EACCES]);
    assert_eq!(open_as(&n.node, 1000, &[kfd]), ["ok"]);
    // A released job's uid leaves; the other holder stays.
    n.node.client().release(&"slurm:701".parse().unwrap()).unwrap();
    assert_eq!(open_as(&n.node, 1000, &[kfd]), [EACCES]);
    assert_eq!(open_as(&n.node, 1002, &[kfd]), ["ok"]);
}
