//! AMD GPUs on a real slurmctld and slurmd (Debian's SLURM 22.05) with a
//! real cderd: gres.conf names them as sites do,
//! `Name=gpu Type=mi250 File=/dev/dri/renderD…`, and cderd has an AMD type
//! (`vendor = "amd"`, static devices at the same files, kfd shared).
//!
//! No AMD driver runs here. The render nodes are made with `mknod` in a
//! temp dir with DRM's real numbers (226:128…130), which no driver on this
//! machine serves (there is no DRM device; `/proc/devices` lists no 226):
//! an open a device cgroup lets through fails with ENXIO (no driver), one
//! it refuses fails with EPERM before any driver is looked up, so every
//! job's report tells the fence's answer apart. kfd is the mem driver's
//! 1:9 (an open gets through: `ok`).
//!
//! Jobs are submitted by `nobody` under `TaskPlugin=task/none` (cderd's
//! `confine` fences) and `task/cgroup` + `ConstrainDevices=yes` (SLURM's).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cder_tests::slurm::{parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);
const GPUS: u32 = 3;

/// The node's fake AMD device files, in a dir of their own.
struct AmdDevices {
    _dir: tempfile::TempDir,
    render: Vec<PathBuf>,
    kfd: PathBuf,
}

fn mknod(path: &Path, major: u32, minor: u32) {
    let ok = Command::new("mknod")
        .arg(path)
        .args(["-m", "0666", "c", &major.to_string(), &minor.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mknod {} c {major} {minor}", path.display());
}

fn amd_devices() -> AmdDevices {
    let dir = tempfile::Builder::new().prefix("cder-amd-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let render: Vec<PathBuf> = (0..GPUS).map(|i| dir.path().join(format!("renderD{}", 128 + i))).collect();
    for (i, path) in render.iter().enumerate() {
        mknod(path, 226, 128 + i as u32);
    }
    let kfd = dir.path().join("kfd");
    mknod(&kfd, 1, 9);
    AmdDevices { _dir: dir, render, kfd }
}

fn config(devices: &AmdDevices, cgroup: bool) -> SlurmConfig {
    let dir = devices.render[0].parent().unwrap().display().to_string();
    let mut types = format!(
        "[[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"static\"\nkfd_path = \"{}\"\n",
        devices.kfd.display()
    );
    for (i, path) in devices.render.iter().enumerate() {
        types += &format!(
            "[[cder.device]]\nindex = {i}\nmodel = \"AMD Instinct MI250X\"\narchitecture = \"gfx90a\"\nmemory_mib = 65536\npath = \"{}\"\n",
            path.display()
        );
    }
    SlurmConfig {
        gpus: 0,
        cgroup,
        node_gres: Some(format!("gpu:mi250:{GPUS}")),
        gres_conf: Some(format!(
            "NodeName=node1 Name=gpu Type=mi250 File={dir}/renderD[128-{}] Flags=amd_gpu_env\n",
            127 + GPUS
        )),
        cder_types: Some(types),
        // Where SLURM confines, the plugin reads the types' kfd from cderd's config.
        spank_args: vec!["config={dir}/cder/cder.toml".into()],
        ..SlurmConfig::default()
    }
}

/// Shell lines that print `R<i>=` for each render node and `KFD=`: `ok`,
/// `ENXIO` (the fence let the open through to a missing driver) or `EPERM`
/// (the device cgroup refused it), then the visible lists.
fn probe_script(devices: &AmdDevices) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         probe() { if err=$( { : < \"$2\"; } 2>&1 ); then echo \"$1=ok\"; else case \"$err\" in \
         *'not permitted'*) echo \"$1=EPERM\";; *'No such device'*) echo \"$1=ENXIO\";; *) echo \"$1=other $err\";; esac; fi; }\n",
    );
    for (i, path) in devices.render.iter().enumerate() {
        s += &format!("probe R{i} '{}'\n", path.display());
    }
    s += &format!("probe KFD '{}'\n", devices.kfd.display());
    s += "echo ROCR=${ROCR_VISIBLE_DEVICES-unset}\necho HIP=${HIP_VISIBLE_DEVICES-unset}\n";
    s
}

/// Runs `args`' job to its end and returns what it printed.
fn run_job(cluster: &SlurmCluster, devices: &AmdDevices, plugin: &str, args: &[&str]) -> (u32, String) {
    let id = cluster.sbatch_as_user(args, &probe_script(devices)).unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let report = cluster.job_output(id);
    assert_eq!(info.state, "COMPLETED", "{plugin} {args:?}: {info:?}\n{report}\n{}", cluster.logs());
    (id, report)
}

/// Every device cderd recorded for `slurm:<id>` (the job has ended).
fn ever_held(cluster: &SlurmCluster, id: u32) -> Vec<u32> {
    let key = format!("slurm:{id}");
    let mut client = cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
    let acc = client.accounting(&cder_protocol::AccountingRequest { since: None, until: None }).unwrap();
    let mut held: Vec<u32> = acc.records.iter().filter(|r| r.job.to_string() == key).map(|r| r.index).collect();
    held.sort_unstable();
    held
}

/// A job of two GPUs opens exactly the render nodes cderd's ledger gives
/// it, and kfd; its visible lists number them from 0 (inside a device
/// cgroup ROCm enumerates only what the job can open).
fn check_gpu_job(cluster: &SlurmCluster, devices: &AmdDevices, plugin: &str, args: &[&str]) {
    let (id, report) = run_job(cluster, devices, plugin, args);
    let env = parse_env_lines(&report);
    let held = ever_held(cluster, id);
    assert_eq!(held.len(), 2, "{plugin} {args:?}: cderd recorded {held:?}\n{report}");
    for i in 0..GPUS {
        let expected = if held.contains(&i) { "ENXIO" } else { "EPERM" };
        assert_eq!(env[&format!("R{i}")], expected, "{plugin} {args:?}: render node {i}, held {held:?}\n{report}");
    }
    assert_eq!(env["KFD"], "ok", "{plugin} {args:?}: a job holding AMD GPUs must reach kfd\n{report}");
    for var in ["ROCR", "HIP"] {
        assert_eq!(visible_set(&env[var]), [0, 1], "{plugin} {args:?}: {var}\n{report}");
    }
}

fn each_task_plugin(test: impl Fn(&SlurmCluster, &AmdDevices, &str)) {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    for cgroup in [false, true] {
        let plugin = if cgroup { "task/cgroup" } else { "task/none" };
        let devices = amd_devices();
        let cluster = SlurmCluster::start(&config(&devices, cgroup))
            .unwrap_or_else(|e| panic!("starting SLURM with {plugin}: {e}"));
        test(&cluster, &devices, plugin);
    }
}

#[test]
fn amd_jobs_open_their_render_nodes_and_kfd() {
    each_task_plugin(|cluster, devices, plugin| {
        check_gpu_job(cluster, devices, plugin, &["--gres=gpu:mi250:2"]);
        check_gpu_job(cluster, devices, plugin, &["--gpgpu-per-node=2"]);
    });
}

#[test]
fn a_job_without_gpus_opens_no_render_node_nor_kfd() {
    each_task_plugin(|cluster, devices, plugin| {
        let (id, report) = run_job(cluster, devices, plugin, &[]);
        let env = parse_env_lines(&report);
        assert_eq!(ever_held(cluster, id), Vec::<u32>::new(), "{plugin}");
        for i in 0..GPUS {
            assert_eq!(env[&format!("R{i}")], "EPERM", "{plugin}: render node {i}\n{report}\n{}", cluster.logs());
        }
        assert_eq!(env["KFD"], "EPERM", "{plugin}: a job without GPUs reached kfd\n{report}\n{}", cluster.logs());
        assert_eq!((env["ROCR"].as_str(), env["HIP"].as_str()), ("", ""), "{plugin}: never \"all\"\n{report}");
    });
}

/// A job without GPUs that links a render node into /tmp reaches nothing
/// through the link (the cgroup checks the device number), and cannot make
/// a device file of its own.
#[test]
fn a_link_or_a_node_of_its_own_opens_nothing() {
    each_task_plugin(|cluster, devices, plugin| {
        let target = devices.render[0].display();
        let script = format!(
            "{}link=$(mktemp -u /tmp/cder-link.XXXXXX)\nln -s '{target}' \"$link\"\nprobe LINK \"$link\"\nrm -f \"$link\"\n\
             node=$(mktemp -u /tmp/cder-node.XXXXXX)\n\
             if mknod \"$node\" c 226 128 2>/dev/null; then echo MKNOD=made; rm -f \"$node\"; else echo MKNOD=refused; fi\n",
            probe_script(devices)
        );
        let id = cluster.sbatch_as_user(&[], &script).unwrap();
        let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
        let report = cluster.job_output(id);
        assert_eq!(info.state, "COMPLETED", "{plugin}: {info:?}\n{report}\n{}", cluster.logs());
        let env = parse_env_lines(&report);
        assert_eq!(env["R0"], "EPERM", "{plugin}\n{report}");
        assert_eq!(env["LINK"], "EPERM", "{plugin}: a symlink reached a render node\n{report}");
        assert_eq!(env["MKNOD"], "refused", "{plugin}: a user made a device file\n{report}");
    });
}
