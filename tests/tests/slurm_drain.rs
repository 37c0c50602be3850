//! SLURM never places a job on a GPU cderd keeps out of the pool: cderd
//! drains the node with a reason naming the device and why, returns it when
//! the device is back, and never returns a drain that is not its own. A job that arrives anyway (cderd told not to drain) is
//! refused with a message naming the device and why. On the host's SLURM
//! (22.05) and, with `CDER_SLURM_RELEASE=24.11|26.05`, on those releases.

use std::os::unix::process::CommandExt;
use std::process::Child;
use std::time::Duration;

use cder_tests::slurm::{require_slurm, serial, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);
/// The uid of the process that holds the GPU after its job (no user of the node).
const HOLDER_UID: u32 = 4242;

/// A process of uid 4242, in no job, holding `path` open (its stdin) that
/// SIGKILL cannot end: what a descriptor passed out of a job leaves when its
/// holder sleeps in the kernel (here in its owner's stalled FUSE mount).
/// cderd ends a holder it can end at the release; this one keeps the GPU
/// out until [`Holder::end`] lets it go.
struct Holder {
    fuse: Option<cder_testkit::hostile::StalledFuse>,
    child: Child,
    _dir: tempfile::TempDir,
}

fn hold(path: &std::path::Path) -> Holder {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fuse = cder_testkit::hostile::StalledFuse::mount(&dir.path().join("m"), HOLDER_UID, HOLDER_UID).unwrap();
    let mut stat = fuse.stat_command();
    stat.uid(HOLDER_UID).gid(HOLDER_UID).stdin(std::fs::File::open(path).unwrap());
    let mut child = fuse.stall(&mut stat).unwrap();
    cder_testkit::hostile::make_unkillable(&mut child).unwrap();
    Holder { fuse: Some(fuse), child, _dir: dir }
}

impl Holder {
    /// The mount goes: the holder wakes to its SIGKILL and ends.
    fn end(&mut self) {
        drop(self.fuse.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.end();
    }
}

/// `scontrol -o show node`: the node's state and reason (without SLURM's
/// ` [user@time]`).
fn node_state(cluster: &SlurmCluster) -> (String, String) {
    let text = cluster.scontrol(&["-o", "show", "node", cluster.node_name()]).unwrap_or_default();
    let state = text.split(' ').find_map(|w| w.strip_prefix("State=")).unwrap_or_default().to_string();
    let reason = text.split_once(" Reason=").map(|(_, r)| r.trim_end()).unwrap_or_default();
    let reason = match reason.rfind(" [") {
        Some(cut) if reason.ends_with(']') => &reason[..cut],
        _ => reason,
    };
    (state, reason.to_string())
}

fn drained(state: &str) -> bool {
    state.split('+').any(|s| s.starts_with("DRAIN"))
}

/// Waits until the node is as `ok` says (state, reason); its last look.
fn wait_node(cluster: &SlurmCluster, what: &str, ok: impl Fn(&str, &str) -> bool) -> (String, String) {
    let mut last = (String::new(), String::new());
    let done = cder_testkit::wait_for_value(Duration::from_secs(90), Duration::from_millis(250), || {
        last = node_state(cluster);
        ok(&last.0, &last.1).then(|| last.clone())
    });
    done.unwrap_or_else(|| {
        panic!("the node is not {what}: state {:?}, reason {:?}\n{}", last.0, last.1, cluster.logs())
    })
}

/// Waits until cderd's log holds `needle`.
fn wait_log(cluster: &SlurmCluster, needle: &str) {
    let log = cluster.dir().join("log/cderd.log");
    let seen = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(200), || {
        std::fs::read_to_string(&log).unwrap_or_default().contains(needle).then_some(())
    });
    assert!(seen.is_some(), "cderd never logged {needle:?}\n{}", cluster.logs());
}

fn start(config: SlurmConfig) -> Option<(cder_tests::slurm::Serial, SlurmCluster)> {
    if !require_slurm() {
        return None;
    }
    let guard = serial();
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    Some((guard, cluster))
}

/// One GPU, held after its job by a process of another uid: cderd keeps it
/// out, drains the node with a reason naming it, SLURM places the next GPU
/// job nowhere, and once the holder is gone the GPU and the node come back
/// and the job runs there.
#[test]
fn a_gpu_kept_out_drains_the_node_until_it_is_back() {
    let config =
        SlurmConfig { gpus: 1, cderd_drains_node: true, extra_slurm_conf: PING.into(), ..SlurmConfig::default() };
    let Some((_serial, cluster)) = start(config) else { return };
    let gpu = cluster.gpu_path(0);
    let mut holder = hold(&gpu);
    let a = cluster.sbatch(&["--gres=gpu:1"], "#!/bin/sh\necho RAN=A\n").unwrap();
    let info = cluster.wait_job(a, JOB_TIMEOUT).unwrap();
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{}", cluster.logs());
    let want = format!("cder: gpgpu:0 ({}) kept out: still held after job slurm:{a} ended", gpu.display());
    let (state, reason) = wait_node(&cluster, "drained by cder", |s, r| drained(s) && r.starts_with(MARK));
    assert_eq!(reason, want, "state {state}");
    let status = cluster.cderd_status().unwrap();
    assert!(status.devices[0].job.is_none() && status.devices[0].reason.is_some(), "{status:?}");

    // The next GPU job: SLURM has no node for it. It stays pending, and
    // cderd never records it, until the node is back.
    let b = cluster.sbatch(&["--gres=gpu:1"], "#!/bin/sh\necho RAN=B\n").unwrap();
    let considered = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(250), || {
        let info = cluster.job(b).ok()?;
        (info.state != "PENDING" || !["None", ""].contains(&info.reason.as_str())).then_some(info)
    });
    let info = considered.unwrap_or_else(|| panic!("slurmctld never looked at job {b}\n{}", cluster.logs()));
    assert_eq!(info.state, "PENDING", "job {b} was placed on a drained node: {info:?}\n{}", cluster.logs());
    assert!(cluster.ledger(b).unwrap().is_empty());
    let (state, _) = node_state(&cluster);
    assert!(drained(&state), "{state}");

    // The holder ends: the leftover watcher finds the GPU free, cderd
    // returns its own drain, and job B runs on the GPU.
    holder.end();
    wait_node(&cluster, "returned", |s, _| !drained(s));
    // UNDRAIN (as RESUME) leaves the node NOT_RESPONDING until slurmd
    // registers again (docs/slurm.md): how long that takes here.
    let returned = std::time::Instant::now();
    wait_node(&cluster, "responding", |s, _| !s.contains("NOT_RESPONDING"));
    eprintln!("slurm_drain: the node responded {:?} after cderd returned it", returned.elapsed());
    let info = cluster.wait_job(b, JOB_TIMEOUT).unwrap();
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{}", cluster.logs());
    assert!(cluster.job_output(b).contains("RAN=B"));
    wait_log(&cluster, "returned the node to SLURM");
}

/// cderd returns only a drain of its own: a reason an admin wrote over
/// cder's, or an admin's drain that was there first, is left as it is
/// whatever cderd keeps out or puts back.
#[test]
fn an_admins_drain_is_never_returned_nor_rewritten() {
    let config =
        SlurmConfig { gpus: 2, cderd_drains_node: true, extra_slurm_conf: PING.into(), ..SlurmConfig::default() };
    let Some((_serial, cluster)) = start(config) else { return };
    let node = cluster.node_name().to_string();
    let mut cderd = cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
    // An operator's drain in cderd is a device kept out too.
    cderd.drain("gpgpu:1", "test: fan \"loud\" State=IDLE").unwrap();
    let (_, reason) = wait_node(&cluster, "drained by cder", |s, r| drained(s) && r.starts_with(MARK));
    assert_eq!(
        reason,
        format!("cder: gpgpu:1 ({}) kept out: drained (test: fan _loud_ State_IDLE)", cluster.gpu_path(1).display()),
        "the reason holds no quote and no '='"
    );
    // The admin takes the drain over: cder's device coming back must not return it.
    cluster.scontrol(&["update", &format!("NodeName={node}"), "State=DRAIN", "Reason=admin: fan check"]).unwrap();
    cderd.resume("gpgpu:1").unwrap();
    wait_log(&cluster, "not by cder (reason: admin: fan check): left as it is");
    let (state, reason) = node_state(&cluster);
    assert!(drained(&state) && reason == "admin: fan check", "{state} {reason:?}\n{}", cluster.logs());
    // A device kept out while the admin's drain holds: the reason stays the admin's.
    cderd.drain("gpgpu:0", "test: second").unwrap();
    wait_log(&cluster, "has drained the node already, not cder (reason: admin: fan check)");
    let (state, reason) = node_state(&cluster);
    assert!(drained(&state) && reason == "admin: fan check", "{state} {reason:?}");
    cderd.resume("gpgpu:0").unwrap();
    // The admin returns the node: nothing is kept out, so it stays returned.
    cluster.scontrol(&["update", &format!("NodeName={node}"), "State=RESUME"]).unwrap();
    wait_node(&cluster, "returned by the admin", |s, _| !drained(s));
    let id = cluster.sbatch(&["--gres=gpu:2"], "#!/bin/sh\necho RAN=yes\n").unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{}", cluster.logs());
}

/// With `drain_node = "off"` SLURM places the next job on the GPU cderd
/// keeps out: its prolog's record is refused, and the job fails with a
/// message that names the device and why.
#[test]
fn a_job_placed_on_a_kept_out_gpu_anyway_is_refused_naming_it() {
    let config = SlurmConfig { gpus: 1, ..SlurmConfig::default() };
    let Some((_serial, cluster)) = start(config) else { return };
    let mut holder = hold(&cluster.gpu_path(0));
    let a = cluster.sbatch(&["--gres=gpu:1"], "#!/bin/sh\necho RAN=A\n").unwrap();
    assert_eq!(cluster.wait_job(a, JOB_TIMEOUT).unwrap().state, "COMPLETED", "{}", cluster.logs());
    let b = cluster.sbatch(&["--gres=gpu:1"], "#!/bin/sh\necho RAN=B\n").unwrap();
    let info = cluster.wait_job(b, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(b);
    holder.end();
    assert_eq!(info.state, "FAILED", "{info:?}\n{out}\n{}", cluster.logs());
    assert!(!out.contains("RAN=B"), "the job ran on a GPU kept out:\n{out}");
    let refused =
        format!("it refused the job prolog's record: device gpgpu:0 is not free yet: released by job slurm:{a}");
    assert!(out.contains(&refused), "{out}");
    let (state, _) = node_state(&cluster);
    assert!(!drained(&state), "drain_node = \"off\" drained the node: {state}");
}

/// The mark every drain reason of cderd's begins with.
const MARK: &str = "cder: ";

/// A returned node is NOT_RESPONDING until slurmctld's ping reaches slurmd:
/// the return asks for one at once; if that one is lost (a loaded
/// machine), the next comes after SlurmdTimeout/3 (100 s by default).
const PING: &str = "SlurmdTimeout=60\n";
