//! Kernel enforcement through `confine`, with real cgroups: a process
//! confined into job A's device cgroup opens A's device and gets EPERM on
//! B's, even when A and B run as the same uid and B's device file is that
//! uid's. At release every process left in the job's groups is ended and the
//! groups go away; a process of the job that left the groups and still
//! holds its device is ended too (issue 52). The job's own user cannot
//! `confine` a job the batch system confines.
//!
//! The devices are real character devices with distinct numbers (the mem
//! driver's 1:5, 1:7, 1:8, 1:9 made with mknod in a temp dir), so a cgroup
//! can tell them apart; no GPU driver is involved. Needs root and the
//! cgroup v1 `devices` controller / a cgroup2 mount with device BPF
//! programs; under CI=true their absence fails the test.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cder_protocol::{AllocRequest, DeviceState, ErrorCode};
use cder_testkit::require;
use common::{probe_lines, retry_busy, Node};

/// The probe's side: runs in a child process started by [`probe`].
#[test]
fn cgroup_probe_child() {
    common::probe_child_main();
}

/// What the probe saw: (phase, path) → "ok" or the errno.
struct Seen {
    lines: Vec<String>,
}

impl Seen {
    fn open(&self, when: &str, path: &Path) -> String {
        let prefix = format!("PROBE {when} {} ", path.display());
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(&prefix).map(String::from))
            .unwrap_or_else(|| panic!("probe printed nothing for {prefix:?}: {:?}", self.lines))
    }

    fn cgroups(&self) -> Vec<PathBuf> {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix("PROBE confined "))
            .unwrap_or_else(|| panic!("probe was not confined: {:?}", self.lines))
            .split(',')
            .map(PathBuf::from)
            .collect()
    }
}

fn probe_command(node: &Node, uid: u32, job: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(common::probe_binary(node.dir.path()));
    cmd.args(["--exact", "cgroup_enforcement::cgroup_probe_child", "--nocapture", "--test-threads=1"])
        .env("CDER_PROBE_SOCKET", &node.socket)
        .env("CDER_PROBE_JOB", job)
        .env("CDER_PROBE_PATHS", node.devices.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(","))
        .env_remove("CI")
        .uid(uid)
        .gid(uid);
    cmd
}

/// Runs the probe as `uid` for `job` and returns what it printed.
fn probe(node: &Node, uid: u32, job: &str) -> Seen {
    let out = retry_busy(|| probe_command(node, uid, job).output());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "probe failed: {}\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    Seen { lines: probe_lines(text.lines()) }
}

fn v1_available() -> bool {
    Path::new("/sys/fs/cgroup/devices/devices.deny").exists()
}

fn v2_available() -> bool {
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.lines().any(|l| l.contains(" - cgroup2 ")))
}

/// A node whose four devices are mknod'ed copies of 1:5, 1:7, 1:8, 1:9.
/// Other processes on the machine may hold those open (they are /dev/zero,
/// /dev/full, /dev/random, /dev/urandom): the held-open check is relaxed
/// here and tested on its own device number below.
fn node(mode: &str) -> Node {
    node_with(mode, [5, 7, 8, 9], "allow")
}

fn node_with(mode: &str, minors: [u32; 4], held_open: &str) -> Node {
    let enforcement = format!("device_files = true\njob_mode = \"0600\"\ncgroup = {mode:?}\nheld_open = {held_open:?}");
    common::char_device_node(tempfile::tempdir().unwrap(), &minors, &enforcement)
}

fn alloc(node: &Node, job: &str, uid: u32, device: u32) {
    let mut r = AllocRequest::new(job.parse().unwrap(), uid, 1);
    r.devices = Some(vec![device]);
    node.client().alloc(&r).unwrap();
}

const EPERM: &str = "1";
const EACCES: &str = "13";

fn same_uid_jobs_are_separated(mode: &str) {
    let node = node(mode);
    let uid = 1000;
    alloc(&node, "slurm:101", uid, 0);
    alloc(&node, "slurm:102", uid, 1);
    let seen = probe(&node, uid, "slurm:101");
    let [a, b, idle, _] = [0, 1, 2, 3].map(|i| node.devices[i].clone());
    // Before confine only file modes apply: both jobs' files are the uid's,
    // the idle ones are root-only (0600 root:root by default).
    assert_eq!(seen.open("before", &a), "ok");
    assert_eq!(seen.open("before", &b), "ok", "same uid: file modes cannot separate the jobs");
    assert_eq!(seen.open("before", &idle), EACCES);
    // Confined into job 101's group, the kernel refuses job 102's device.
    assert_eq!(seen.open("after", &a), "ok");
    assert_eq!(seen.open("after", &b), EPERM, "job 102's device must be denied by the cgroup");
    let groups = seen.cgroups();
    let expected = if mode == "both" { 2 } else { 1 };
    assert_eq!(groups.len(), expected, "{groups:?}");
    assert!(groups.iter().all(|g| g.is_dir()), "{groups:?}");
    // The job's own uid is not told where its groups are; root (slurmstepd)
    // is, and gets the groups `confine` used, ready to enter.
    assert!(seen.lines.iter().any(|l| l == "PROBE env-cgroups none"), "{:?}", seen.lines);
    let named = node.client().env(&"slurm:101".parse().unwrap()).unwrap().cgroups.expect("root's env names the groups");
    assert_eq!(named.iter().map(PathBuf::from).collect::<Vec<_>>(), groups);
    // And the other way round: job 102 reaches its own device only.
    let seen = probe(&node, uid, "slurm:102");
    assert_eq!(seen.open("after", &a), EPERM);
    assert_eq!(seen.open("after", &b), "ok");
    // Another uid may not confine itself into the job (nor learn about it).
    let other = probe(&node, 1001, "slurm:101");
    assert!(other.lines.iter().any(|l| l == "PROBE refused permission_denied"), "{:?}", other.lines);
    // Release removes the (now empty) groups.
    assert_eq!(node.client().release(&"slurm:101".parse().unwrap()).unwrap().released, 1);
    assert!(groups.iter().all(|g| !g.exists()), "groups left after release: {groups:?}");
    // The next job on the same device denies the same devices: cderd
    // attaches the program it already loaded, which must still deny them.
    alloc(&node, "slurm:103", uid, 0);
    let seen = probe(&node, uid, "slurm:103");
    assert_eq!(seen.open("after", &a), "ok");
    assert_eq!(seen.open("after", &b), EPERM, "a reused program must deny job 102's device");
    assert_eq!(node.client().release(&"slurm:103".parse().unwrap()).unwrap().released, 1);
    // A job with no allocation here is unknown_job.
    let e = node.client().confine(&"slurm:101".parse().unwrap()).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownJob));
}

#[test]
fn v1_devices_controller_separates_two_jobs_of_one_uid() {
    if !require(cder_testkit::is_root() && v1_available(), "root and the cgroup v1 devices controller") {
        return;
    }
    same_uid_jobs_are_separated("v1");
}

#[test]
fn v2_bpf_program_separates_two_jobs_of_one_uid() {
    if !require(cder_testkit::is_root() && v2_available(), "root and a cgroup2 mount with device BPF programs") {
        return;
    }
    same_uid_jobs_are_separated("v2");
}

#[test]
fn auto_confines_through_one_hierarchy() {
    if !require(cder_testkit::is_root() && (v1_available() || v2_available()), "root and a device cgroup") {
        return;
    }
    // One hierarchy denies as well as two, and each is one more move of
    // every task on its way to exec: v1's devices controller where it is
    // mounted, else cgroup2.
    let node = node("auto");
    alloc(&node, "slurm:201", 1000, 0);
    alloc(&node, "slurm:202", 1000, 1);
    let seen = probe(&node, 1000, "slurm:201");
    let groups = seen.cgroups();
    assert_eq!(groups.len(), 1, "{groups:?}");
    let v1_root = Path::new("/sys/fs/cgroup/devices");
    assert_eq!(groups[0].starts_with(v1_root), v1_available(), "{groups:?}");
    assert_eq!(seen.open("after", &node.devices[0]), "ok");
    assert_eq!(seen.open("after", &node.devices[1]), EPERM, "job 202's device must be denied by the one group");
}

#[test]
fn the_jobs_own_user_cannot_confine_a_job_the_batch_system_confines() {
    if !require(cder_testkit::is_root() && (v1_available() || v2_available()), "root and a device cgroup") {
        return;
    }
    // SLURM's task/cgroup confines the job: the prolog says so, and cderd
    // sets nothing up for it (nor names groups to slurmstepd).
    let mut node = node("auto");
    let mut r = AllocRequest::new("slurm:301".parse().unwrap(), 1000, 1);
    r.devices = Some(vec![0]);
    r.prepare_cgroups = Some(false);
    node.client().alloc(&r).unwrap();
    alloc(&node, "slurm:302", 1000, 1);
    let env = node.client().env(&r.job).unwrap();
    assert_eq!(env.cgroups, None, "groups named for a job SLURM confines");
    // The job's user may not move a process out of SLURM's cgroups, and
    // is told why; the process stays where it was.
    let refused = |node: &Node| {
        let seen = probe(node, 1000, "slurm:301");
        assert!(seen.lines.iter().any(|l| l == "PROBE refused permission_denied"), "{:?}", seen.lines);
        assert!(
            seen.lines.iter().any(|l| l.starts_with("PROBE refusal")
                && l.contains("confined by the batch system")
                && l.contains("will not move")),
            "{:?}",
            seen.lines
        );
        assert_eq!(seen.open("after", &node.devices[1]), "ok", "a refused confine must not confine");
    };
    refused(&node);
    // The record survives a restart of cderd.
    node.kill();
    node.start();
    refused(&node);
    assert_eq!(
        node.client().env(&r.job).unwrap().cgroups,
        None,
        "after a restart, groups named for a job SLURM confines"
    );
    // Root (an operator) still can, and the groups are set up on demand.
    let seen = probe(&node, 0, "slurm:301");
    assert_eq!(seen.cgroups().len(), 1);
    assert_eq!(seen.open("after", &node.devices[0]), "ok");
    assert_eq!(seen.open("after", &node.devices[1]), EPERM);
    // The other job's groups are set up ahead as before, and its own user
    // confines into them.
    let other = node.client().env(&"slurm:302".parse().unwrap()).unwrap();
    assert!(other.cgroups.is_some_and(|g| g.len() == 1 && Path::new(&g[0]).is_dir()));
    assert_eq!(probe(&node, 1000, "slurm:302").cgroups().len(), 1);
}

#[test]
fn both_hierarchies_together() {
    if !require(cder_testkit::is_root() && v1_available() && v2_available(), "root, cgroup v1 devices and cgroup2") {
        return;
    }
    same_uid_jobs_are_separated("both");
}

/// A lingering probe must not outlive a failed assertion.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process the test left behind (not its child) must not outlive a
/// failed assertion either.
struct KillPid(u32);

impl Drop for KillPid {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-KILL", &self.0.to_string()]).status();
    }
}

/// `/proc/<pid>/stat` after the command name: state, ppid, pgrp, session, …
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(") ")?.1.split(' ').map(String::from).collect())
}

/// Running (a zombie has ended: it holds no descriptors).
fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f[0] != "Z" && f[0] != "X")
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let done =
        cder_testkit::wait_for_value(std::time::Duration::from_secs(60), std::time::Duration::from_millis(10), || {
            done().then_some(())
        });
    assert!(done.is_some(), "timed out waiting for {what}");
}

fn in_group(group: &Path, pid: u32) -> bool {
    std::fs::read_to_string(group.join("cgroup.procs")).is_ok_and(|p| p.lines().any(|l| l.trim() == pid.to_string()))
}

/// A confined job leaves two `setsid` children holding its device; one then
/// leaves the job's groups. Release ends the one inside; the one outside is
/// found holding the released device and ended too (issue 52, item 3),
/// logged with its pid, uid and command, and its use counted for the job.
/// The device goes back to the pool: the next job placed there is not
/// refused. (A holder that SIGKILL cannot end keeps it out:
/// `round_four::a_holder_sigkill_cannot_end_keeps_the_device_out_until_it_ends`.)
fn leftover_processes_are_ended_at_release(mode: &str, uid: u32) {
    // Device 0 is a pty: a number no other test holds (the release ends
    // whatever holds it outside the job).
    let pty = common::Ptys::open(1);
    let mut paths = pty.paths.clone();
    let dir = tempfile::tempdir().unwrap();
    for minor in [7, 8, 9] {
        let path = dir.path().join(format!("mem{minor}"));
        assert!(Command::new("mknod").arg(&path).args(["c", "1", &minor.to_string()]).status().unwrap().success());
        paths.push(path);
    }
    let enforcement = format!("device_files = true\njob_mode = \"0600\"\ncgroup = {mode:?}\nheld_open = \"allow\"");
    let node = common::device_node(dir, &paths, &enforcement);
    let job = "slurm:501";
    alloc(&node, job, uid, 0);
    let out = retry_busy(|| {
        probe_command(&node, uid, job).env("CDER_PROBE_HOLD", format!("{},2", node.devices[0].display())).output()
    });
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "probe failed: {text}");
    let seen = Seen { lines: probe_lines(text.lines()) };
    let groups = seen.cgroups();
    let pids: Vec<u32> =
        seen.lines.iter().filter_map(|l| l.strip_prefix("PROBE spawned ")).map(|p| p.parse().unwrap()).collect();
    assert_eq!(pids.len(), 2, "{:?}", seen.lines);
    let _cleanup: Vec<KillPid> = pids.iter().map(|p| KillPid(*p)).collect();
    for &pid in &pids {
        // Past setsid and exec: a session of its own, in the job's groups.
        wait_for("the setsid child", || {
            stat_fields(pid).is_some_and(|f| f[3] == pid.to_string())
                && std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
        });
        assert!(groups.iter().all(|g| in_group(g, pid)), "{pid} is not in {groups:?}");
    }
    let (inside, escaped) = (pids[0], pids[1]);
    // Root moves one out, to the root of each hierarchy: a process of the
    // job that the groups no longer reach.
    for g in &groups {
        let root = g.parent().and_then(Path::parent).unwrap();
        std::fs::write(root.join("cgroup.procs"), escaped.to_string()).unwrap();
    }
    assert_eq!(node.client().release(&job.parse().unwrap()).unwrap().released, 1);
    assert!(!alive(inside), "the setsid child left in the job's groups outlived the release");
    assert!(groups.iter().all(|g| !g.exists()), "groups left after release: {groups:?}");
    // The one outside: found by the look that follows the release, ended.
    wait_for("the escaped child to be ended by cderd", || !alive(escaped));
    let logged = format!("ended pid {escaped} (uid {uid}, \"sleep\")");
    wait_for("the log line naming it", || node.log().contains(&logged));
    // Its device is in the pool: the batch system's next job there gets it.
    let d = node.status().devices.into_iter().find(|d| d.index == 0).unwrap();
    assert_eq!(d.state, DeviceState::Free, "{d:?}");
    alloc(&node, "slurm:502", 1000, 0);
    // Its use after the release counts for the job it came from.
    let accounting = node.client().accounting(&Default::default()).unwrap();
    let outside: Vec<_> = accounting.records.iter().filter(|r| r.after_release.is_some()).collect();
    assert_eq!(outside.len(), 1, "{:?}", accounting.records);
    assert_eq!(outside[0].job.to_string(), job);
    assert!(outside[0].after_release.as_deref().unwrap().contains(&format!("pid {escaped}")), "{outside:?}");
    assert!(outside[0].end.is_some(), "{outside:?}");
}

#[test]
fn a_setsid_child_is_ended_at_release_under_v1() {
    if !require(cder_testkit::is_root() && v1_available(), "root and the cgroup v1 devices controller") {
        return;
    }
    // A uid no other test here uses: its processes are this test's.
    leftover_processes_are_ended_at_release("v1", 1003);
}

#[test]
fn a_setsid_child_is_ended_at_release_under_cders_v2_groups() {
    if !require(cder_testkit::is_root() && v2_available(), "root and a cgroup2 mount with device BPF programs") {
        return;
    }
    leftover_processes_are_ended_at_release("v2", 1004);
}

/// Issue 44, 12, and issue 52, item 3: the last sharer of a shared GPU
/// leaves a process holding it; its uid is no sharer any more, so the
/// process is ended (logged with pid, uid and command) and the GPU goes
/// back to the pool for the next sharer.
#[test]
fn a_shared_device_whose_last_sharer_left_a_holder_is_ended() {
    if !require(cder_testkit::is_root(), "root (to hold a device open as another uid)") {
        return;
    }
    // Device 0 is a pty: a number no other test holds.
    let pty = common::Ptys::open(2);
    let node = common::device_node(
        tempfile::tempdir().unwrap(),
        &pty.paths,
        // devpts keeps no ACLs: the ptys stay 0666 (device_files off).
        "cgroup = \"off\"\nheld_open = \"allow\"\n[node.sharing]\nshares_per_gpu = 2",
    );
    let share = |job: &str, uid: u32| AllocRequest {
        devices: Some(vec![0]),
        shares: Some(1),
        ..AllocRequest::new(job.parse().unwrap(), uid, 1)
    };
    node.client().alloc(&share("slurm:601", 4601)).unwrap();
    use std::os::unix::process::CommandExt;
    let mut holder = Command::new("sleep")
        .arg("60")
        .stdin(std::fs::File::open(&node.devices[0]).unwrap())
        .uid(4601)
        .gid(4601)
        .spawn()
        .unwrap();
    let _kill = KillPid(holder.id());
    wait_for("the holder under its own uid", || {
        std::fs::read_to_string(format!("/proc/{}/status", holder.id()))
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.contains("4601")))
    });
    node.client().release(&"slurm:601".parse().unwrap()).unwrap();
    // Ended by cderd (the test's own child: reaped here).
    let pid = holder.id();
    let ended =
        cder_testkit::wait_for_value(std::time::Duration::from_secs(60), std::time::Duration::from_millis(10), || {
            holder.try_wait().ok().flatten()
        });
    assert!(ended.is_some(), "the holder whose uid is no sharer any more was not ended");
    let logged = format!("ended pid {pid} (uid 4601, \"sleep\")");
    wait_for("the log line naming it", || node.log().contains(&logged));
    node.client().alloc(&share("slurm:602", 4602)).unwrap();
}

#[test]
fn cgroup_off_answers_enforcement_unavailable() {
    let node = node("off");
    alloc(&node, "local:x", 0, 0);
    let e = node.client().confine(&"local:x".parse().unwrap()).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::EnforcementUnavailable), "{e}");
    // Without groups, env names none, even to root.
    assert_eq!(node.client().env(&"local:x".parse().unwrap()).unwrap().cgroups, None);
}

#[test]
fn a_device_held_open_by_another_process_is_not_handed_out() {
    if !require(cder_testkit::is_root(), "root (to hold a device open as another uid)") {
        return;
    }
    // Device 0 is a copy of 1:11 (/dev/kmsg), which no other test uses and
    // unprivileged processes do not hold.
    let node = node_with("off", [11, 7, 8, 9], "skip");
    // uid 65534 holds device 0 open through its stdin.
    use std::os::unix::process::CommandExt;
    let mut holder = Command::new("sleep")
        .arg("60")
        .stdin(std::fs::File::open(&node.devices[0]).unwrap())
        .uid(65534)
        .gid(65534)
        .spawn()
        .unwrap();
    // Wait for the child to be past exec and under its own uid.
    let status = format!("/proc/{}/status", holder.id());
    for _ in 0..500 {
        if std::fs::read_to_string(&status)
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.contains("65534")))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Chosen by cderd: never device 0 while it is held; every other one is given.
    let mut given = Vec::new();
    for j in 0..3 {
        let a = node.client().alloc(&AllocRequest::new(format!("slurm:31{j}").parse().unwrap(), 1000, 1)).unwrap();
        given.push(a.devices[0].index);
    }
    given.sort();
    assert_eq!(given, vec![1, 2, 3]);
    let e = node.client().alloc(&AllocRequest::new("slurm:320".parse().unwrap(), 1000, 1)).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Insufficient));
    assert!(e.to_string().contains("held open"), "{e}");
    let _ = holder.kill();
    let _ = holder.wait();
    // Nobody holds it now: it is given out.
    let a = node.client().alloc(&AllocRequest::new("slurm:320".parse().unwrap(), 1000, 1)).unwrap();
    assert_eq!(a.devices[0].index, 0);
}

#[test]
fn the_batch_systems_choice_is_recorded_even_when_held_open_with_a_warning() {
    if !require(cder_testkit::is_root(), "root (to hold a device open as another uid)") {
        return;
    }
    let node = node_with("off", [11, 7, 8, 9], "skip");
    use std::os::unix::process::CommandExt;
    let mut holder = Command::new("sleep")
        .arg("60")
        .stdin(std::fs::File::open(&node.devices[0]).unwrap())
        .uid(65534)
        .gid(65534)
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", holder.id());
    for _ in 0..500 {
        if std::fs::read_to_string(&status)
            .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.contains("65534")))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SLURM chose device 0 (its GRES index): the ledger records it, and the
    // log names the process that can still use it.
    let mut r = AllocRequest::new("slurm:401".parse().unwrap(), 1000, 1);
    r.devices = Some(vec![0]);
    let a = node.client().alloc(&r).unwrap();
    assert_eq!(a.devices[0].index, 0);
    // The warning is logged by a thread after the reply (the scan is off a
    // job's start path): wait for it while the holder still holds the device.
    let holder_pid = format!("pid {}", holder.id());
    let wanted = |log: &str| log.contains("the batch system chose it") && log.contains(&holder_pid);
    // The assertion below says what is missing if it is not logged by then.
    let _ =
        cder_testkit::wait_for_value(std::time::Duration::from_secs(60), std::time::Duration::from_millis(20), || {
            wanted(&node.log()).then_some(())
        });
    let _ = holder.kill();
    let _ = holder.wait();
    let log = node.log();
    assert!(wanted(&log), "{log}");
}

/// The late-node probe's side: confines itself into `CDER_LATE_JOB`, says
/// so, waits for the file `CDER_LATE_GO`, then opens each path.
#[test]
fn late_node_probe_child() {
    let Ok(socket) = std::env::var("CDER_LATE_SOCKET") else { return };
    let job = std::env::var("CDER_LATE_JOB").unwrap();
    let go = PathBuf::from(std::env::var("CDER_LATE_GO").unwrap());
    let mut c = cder_protocol::Client::connect(Path::new(&socket), std::time::Duration::from_secs(30)).unwrap();
    match c.confine(&job.parse().unwrap()) {
        Ok(confined) => println!("PROBE confined {}", confined.cgroups.join(",")),
        Err(e) => println!("PROBE refused {e}"),
    }
    println!("PROBE waiting");
    // The parent's checks say what went wrong if the go never came.
    let _ =
        cder_testkit::wait_for_value(std::time::Duration::from_secs(120), std::time::Duration::from_millis(20), || {
            go.exists().then_some(())
        });
    for p in std::env::var("CDER_LATE_PATHS").unwrap().split(',') {
        match std::fs::File::open(p) {
            Ok(_) => println!("PROBE later {p} ok"),
            Err(e) => println!("PROBE later {p} {}", e.raw_os_error().unwrap_or(-1)),
        }
    }
}

/// A node whose device 0 is a copy of 1:5 and whose device 1's file does
/// not exist yet; `dev1` is the `dev = …` line of device 1, if any.
fn late_node(mode: &str, dev1: &str) -> (Node, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let parent = common::unique_cgroup_parent();
    let first = dir.path().join("nvidia0");
    let late = dir.path().join("nvidia-cap1");
    assert!(Command::new("mknod").arg(&first).args(["c", "1", "5"]).status().unwrap().success());
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\n[node.enforcement]\ncgroup_parent = {parent:?}\ncgroup = {mode:?}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"static\"\n\
         [[cder.device]]\nindex = 0\nmodel = \"Fake\"\nmemory_mib = 1\npath = {first:?}\n\
         [[cder.device]]\nindex = 1\nmodel = \"Fake\"\nmemory_mib = 1\npath = {late:?}\n{dev1}\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
    );
    let node = Node::custom(dir, &text, vec![first, late.clone()], Vec::new());
    (node, late)
}

/// nvidia-modprobe makes `/dev/nvidiaN` and the MIG capability files on
/// first use: a file that appears after the job's group was set up is
/// denied by the number discovery knows (here the static `dev`).
fn a_device_file_made_later_is_denied(mode: &str) {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let (node, late) = late_node(mode, "dev = \"1:9\"");
    alloc(&node, "slurm:601", 1000, 0);
    let go = node.dir.path().join("go");
    let paths = format!("{},{}", node.devices[0].display(), late.display());
    let mut child = KillOnDrop(retry_busy(|| {
        Command::new(common::probe_binary(node.dir.path()))
            .args(["--exact", "cgroup_enforcement::late_node_probe_child", "--nocapture", "--test-threads=1"])
            .env("CDER_LATE_SOCKET", &node.socket)
            .env("CDER_LATE_JOB", "slurm:601")
            .env("CDER_LATE_GO", &go)
            .env("CDER_LATE_PATHS", &paths)
            .env_remove("CI")
            .uid(1000)
            .gid(1000)
            .stdout(std::process::Stdio::piped())
            .spawn()
    }));
    let mut lines = Vec::new();
    let mut reader = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    while reader.read_line(&mut line).unwrap() > 0 {
        let waiting = line.contains("PROBE waiting");
        lines.push(std::mem::take(&mut line));
        if waiting {
            break;
        }
    }
    assert!(lines.iter().any(|l| l.contains("PROBE confined ")), "{lines:?}\nlog:\n{}", node.log());
    // Now the driver's helper makes the node, open to all.
    assert!(Command::new("mknod").arg(&late).args(["c", "1", "9"]).status().unwrap().success());
    std::fs::set_permissions(&late, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    std::fs::write(&go, b"").unwrap();
    for l in reader.lines() {
        lines.push(l.unwrap());
    }
    let seen = Seen { lines: probe_lines(lines.iter().map(String::as_str)) };
    assert_eq!(seen.open("later", &node.devices[0]), "ok");
    assert_eq!(seen.open("later", &late), EPERM, "a device file made after the group was set up must be denied");
}

#[test]
fn v1_denies_a_device_file_made_after_the_group() {
    if !require(cder_testkit::is_root() && v1_available(), "root and the cgroup v1 devices controller") {
        return;
    }
    a_device_file_made_later_is_denied("v1");
}

#[test]
fn v2_denies_a_device_file_made_after_the_group() {
    if !require(cder_testkit::is_root() && v2_available(), "root and a cgroup2 mount with device BPF programs") {
        return;
    }
    a_device_file_made_later_is_denied("v2");
}

#[test]
fn a_device_with_no_file_and_no_known_number_fails_confine_closed() {
    if !require(cder_testkit::is_root() && (v1_available() || v2_available()), "root and a device cgroup") {
        return;
    }
    let (node, late) = late_node("auto", "");
    alloc(&node, "slurm:701", 1000, 0);
    let seen = probe(&node, 1000, "slurm:701");
    assert!(seen.lines.iter().any(|l| l == "PROBE refused internal"), "{:?}", seen.lines);
    let log = node.log();
    assert!(log.contains("gpgpu:1") && log.contains(&late.display().to_string()) && log.contains("unknown"), "{log}");
}

/// Gives `pid`, just freed, to a new process of uid 1000 (the kernel hands
/// out ns_last_pid + 1 next). None once the pid is held by someone else.
fn take_pid(pid: u32) -> Option<KillOnDrop> {
    use std::os::unix::process::CommandExt;
    for _ in 0..200 {
        if Path::new(&format!("/proc/{pid}")).exists() {
            return None;
        }
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let sleeper = KillOnDrop(Command::new("sleep").arg("120").uid(1000).gid(1000).spawn().unwrap());
        if sleeper.0.id() == pid {
            return Some(sleeper);
        }
    }
    None
}

/// The connecting side of the pid-reuse test: connects, hands the
/// connection to a child of its own as that child's stdin, and exits.
#[test]
// The holder must outlive the connector: that is the point.
#[allow(clippy::zombie_processes)]
fn confine_connector_child() {
    let Ok(socket) = std::env::var("CDER_CONNECT_SOCKET") else { return };
    let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let holder = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cgroup_enforcement::confine_holder_child", "--nocapture", "--test-threads=1"])
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(stream)))
        .spawn()
        .unwrap();
    println!("PROBE holder {}", holder.id());
}

/// The holding side: once `CDER_HOLD_GO` exists, asks to `confine` over the
/// connection it inherited and prints the reply.
#[test]
fn confine_holder_child() {
    use std::io::{BufRead, Write};
    use std::os::fd::AsFd;
    let Ok(go) = std::env::var("CDER_HOLD_GO") else { return };
    let job = std::env::var("CDER_HOLD_JOB").unwrap();
    // The parent's checks say what went wrong if the go never came.
    let _ =
        cder_testkit::wait_for_value(std::time::Duration::from_secs(120), std::time::Duration::from_millis(20), || {
            Path::new(&go).exists().then_some(())
        });
    let fd = std::io::stdin().as_fd().try_clone_to_owned().unwrap();
    let mut stream = std::os::unix::net::UnixStream::from(fd);
    let line = cder_protocol::Request::Confine(cder_protocol::JobRequest { job: job.parse().unwrap() }).to_line();
    stream.write_all(line.as_bytes()).unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(stream).read_line(&mut reply).unwrap();
    println!("PROBE reply {}", reply.trim());
}

/// A client keeps its connection after the process that connected has
/// exited and its pid went to another process of the same uid: `confine`
/// must refuse, not move that process into the job's groups.
#[test]
fn confine_refuses_a_pid_that_is_no_longer_the_callers() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    if !require(cder_testkit::is_root() && (v1_available() || v2_available()), "root and a device cgroup") {
        return;
    }
    let node = node("auto");
    alloc(&node, "slurm:801", 1000, 0);
    // A thread or process elsewhere may take the freed pid between our
    // write to ns_last_pid and our fork, and keep it: then this connection
    // cannot be tested, so the holder is released and a new one is made.
    let mut reused = None;
    for attempt in 0..10 {
        let go = node.dir.path().join(format!("go{attempt}"));
        let mut connector = retry_busy(|| {
            Command::new(common::probe_binary(node.dir.path()))
                .args(["--exact", "cgroup_enforcement::confine_connector_child", "--nocapture", "--test-threads=1"])
                .env("CDER_CONNECT_SOCKET", &node.socket)
                .env("CDER_HOLD_GO", &go)
                .env("CDER_HOLD_JOB", "slurm:801")
                .env_remove("CI")
                .uid(1000)
                .gid(1000)
                .stdout(std::process::Stdio::piped())
                .spawn()
        });
        let connected = connector.id();
        let out = std::io::BufReader::new(connector.stdout.take().unwrap());
        let status = connector.wait().unwrap();
        assert!(status.success(), "connector: {status}");
        let victim = take_pid(connected);
        // The holder of a lost attempt asks too and exits; its reply is not read.
        std::fs::write(&go, b"").unwrap();
        let mut lines = Vec::new();
        for line in out.lines() {
            lines.push(line.unwrap());
        }
        if let Some(victim) = victim {
            reused = Some((connected, victim, lines));
            break;
        }
    }
    let (connected, victim, lines) = reused.expect("the connector's pid was never reused in 10 attempts");
    let lines = probe_lines(lines.iter().map(String::as_str));
    let reply = lines
        .iter()
        .find_map(|l| l.strip_prefix("PROBE reply "))
        .unwrap_or_else(|| panic!("{lines:?}\nlog:\n{}", node.log()));
    assert!(reply.contains("permission_denied") && reply.contains("process that connected"), "{reply}");
    // The process that now has the pid was not moved.
    let parent = node.cgroup_parent.clone().unwrap();
    let cgroups = std::fs::read_to_string(format!("/proc/{}/cgroup", victim.0.id())).unwrap();
    assert!(!cgroups.contains(&parent), "pid {connected} was moved into the job's groups: {cgroups}");
}
