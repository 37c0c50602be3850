//! The ledger lock covers only the ledger (issue 44; docs/security.md,
//! 44.1, 44.2, 44.13): a hostile user's stalls never hold another user's
//! requests. The hostile uid keeps a descriptor on its own FUSE mount that
//! never answers, leaves processes of two ended jobs asleep in that mount
//! past SIGKILL, and holds silent connections to cderd; meanwhile another
//! user's `alloc` (cderd choosing, so the held-open scan runs), `env`,
//! `release` and `status` are timed, each answering within 1 s, and no
//! device is handed out twice.
//!
//! The FUSE server is `cder_testkit::hostile::StalledFuse`, mounted by
//! root with `allow_other` for the hostile uid (what `fusermount3` does
//! for a user where the admin allows `user_allow_other`). The devices are
//! mknod'ed copies of the mem driver's 1:5, 1:7, 1:8, 1:9.

use crate::common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use cder_protocol::{AllocRequest, DeviceState, ErrorCode};
use cder_testkit::hostile::StalledFuse;
use cder_testkit::require;
use common::Node;

/// The hostile user: a uid no other test here uses.
const HOSTILE: u32 = 4242;
/// The honest job's uid.
const HONEST: u32 = 1000;
/// Each honest request answers within this (the SLURM plugin's timeout is 10 s).
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// Kills and reaps on drop (a D-state child dies once the mount is gone).
struct Reap(Vec<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
    }
}

fn timed<T>(what: &str, took: &mut Vec<(String, Duration)>, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    took.push((what.to_string(), started.elapsed()));
    out
}

/// As the hostile user, `n` connections to cderd that never send a byte.
fn silent_connections(socket: &Path, n: usize) -> Child {
    let code = "import socket,sys,time\nkept=[]\nfor _ in range(int(sys.argv[2])):\n    s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); kept.append(s)\nprint('connected', flush=True)\ntime.sleep(600)";
    let mut child = common::as_uid(
        HOSTILE,
        &["/usr/bin/python3".as_ref(), "-c".as_ref(), code.as_ref(), socket.as_os_str(), n.to_string().as_ref()],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "connected");
    child
}

/// The hostile job `job` (device `index`) leaves a process asleep in the
/// mount inside its device cgroups; its release then ends with that
/// process past SIGKILL. Returns the process.
fn leave_a_stuck_process(node: &Node, fuse: &StalledFuse, job: &str, index: u32) -> Child {
    let key = job.parse().unwrap();
    let mut r = AllocRequest::new(key, HOSTILE, 1);
    r.devices = Some(vec![index]);
    node.client().alloc(&r).unwrap();
    // slurmstepd's way in: root's `env` names the groups, root moves the task.
    let groups = node.client().env(&job.parse().unwrap()).unwrap().cgroups.expect("root's env names the groups");
    let mut stat = fuse.stat_command();
    use std::os::unix::process::CommandExt;
    stat.uid(HOSTILE).gid(HOSTILE);
    let child = fuse.stall(&mut stat).unwrap();
    for g in &groups {
        std::fs::write(Path::new(g).join("cgroup.procs"), child.id().to_string()).unwrap();
    }
    child
}

#[test]
fn a_hostile_users_stalls_never_hold_another_users_requests() {
    let cgroup2 = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| m.contains(" - cgroup2 "));
    if !require(cder_testkit::is_root() && cgroup2, "root and a cgroup2 mount")
        || !cder_testkit::require_programs(&["/dev/fuse", "python3", "stat"])
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let node = common::char_device_node(
        dir,
        &[5, 7, 8, 9],
        "device_files = true\njob_mode = \"0600\"\ncgroup = \"v2\"\nheld_open = \"allow\"",
    );
    let fuse = StalledFuse::mount(&node.dir.path().join("fuse"), HOSTILE, HOSTILE).unwrap();
    let mut hostile = Reap(Vec::new());
    // 44.1: a descriptor on the mount, which the held-open scan must not follow.
    hostile.0.push(fuse.hold_descriptor(HOSTILE, HOSTILE).unwrap());
    // 44.2: two ended jobs whose processes sleep in the mount past SIGKILL.
    for (job, index) in [("slurm:9001", 0), ("slurm:9002", 1)] {
        let stuck = leave_a_stuck_process(&node, &fuse, job, index);
        let started = Instant::now();
        node.client().release(&job.parse().unwrap()).unwrap();
        eprintln!("the hostile job {job}'s release took {:?}", started.elapsed());
        cder_testkit::hostile::wait_for_d_state(stuck.id(), Duration::from_secs(10)).unwrap();
        hostile.0.push(stuck);
    }
    // 44.13: the user's whole share of connections, silent.
    hostile.0.push(silent_connections(&node.socket, cderd::server::MAX_CONNECTIONS_PER_USER));

    let mut took = Vec::new();
    let honest = "slurm:9100".parse().unwrap();
    // cderd chooses: the held-open scan walks the hostile user's descriptors.
    let given = timed("alloc", &mut took, || node.client().alloc(&AllocRequest::new(honest, HONEST, 1))).unwrap();
    let index = given.devices[0].index;
    assert!(
        index >= 2,
        "device {index} went to the honest job while a stuck process of the job released from it lives"
    );
    timed("env", &mut took, || node.client().env(&"slurm:9100".parse().unwrap())).unwrap();
    // An `env` for a job not recorded yet waits for older connections'
    // first requests: never for a user's silent ones.
    let unknown = timed("env of a job not recorded", &mut took, || node.client().env(&"slurm:9101".parse().unwrap()));
    assert_eq!(unknown.unwrap_err().code(), Some(ErrorCode::UnknownJob));
    let status = timed("status", &mut took, || node.client().status()).unwrap();
    for d in status.devices.iter().filter(|d| d.index < 2) {
        assert_eq!(d.state, DeviceState::Offline, "a device a stuck process may hold went back: {d:?}");
    }
    let owners = common::live_owners(&node.db());
    assert_eq!(owners.len(), 1, "one live owner per device, only the honest job's: {owners:?}");
    let mut explicit = AllocRequest::new("slurm:9102".parse().unwrap(), HONEST, 1);
    explicit.devices = Some(vec![if index == 2 { 3 } else { 2 }]);
    timed("alloc of the batch system's choice", &mut took, || node.client().alloc(&explicit)).unwrap();
    let e = timed("alloc of a kept-out device", &mut took, || {
        let mut r = AllocRequest::new("slurm:9103".parse().unwrap(), HONEST, 1);
        r.devices = Some(vec![0]);
        node.client().alloc(&r)
    });
    assert_eq!(e.unwrap_err().code(), Some(ErrorCode::Conflict));
    timed("release", &mut took, || node.client().release(&"slurm:9100".parse().unwrap())).unwrap();
    timed("release", &mut took, || node.client().release(&"slurm:9102".parse().unwrap())).unwrap();
    eprintln!("honest requests beside the stalls: {took:?}");
    for (what, t) in &took {
        assert!(*t < ANSWER_WITHIN, "{what} took {t:?} beside a hostile user's stalls (bound {ANSWER_WITHIN:?})");
    }

    // Once the mount is gone the stuck processes die, and their devices
    // come back without anyone asking.
    drop(fuse);
    drop(hostile);
    cder_testkit::wait_for("the kept-out devices back in the pool", Duration::from_secs(30), || {
        node.status().devices.iter().all(|d| d.state == DeviceState::Free)
    });
}

#[test]
fn a_user_sees_only_their_own_sharers_and_idle_jobs_in_status() {
    // The operator's view keeps everything; the filter is a pure function
    // of the reply, tested through the daemon in-process elsewhere: here
    // the socket path, as a user would call it.
    let node = Node::new(2);
    node.client().alloc(&AllocRequest::new("slurm:1".parse().unwrap(), 4343, 1)).unwrap();
    let code = "import socket,sys\ns=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'{\"v\":1,\"op\":\"status\"}\\n'); print(s.makefile().readline())";
    let out =
        common::as_uid(65534, &["/usr/bin/python3".as_ref(), "-c".as_ref(), code.as_ref(), node.socket.as_os_str()])
            .output()
            .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("\"ok\":true"), "{line} {}", String::from_utf8_lossy(&out.stderr));
    assert!(!line.contains("4343"), "another user's uid in a user's status: {line}");
    assert!(!line.contains("slurm:1"), "another user's job in a user's status: {line}");
    assert!(line.contains("\"allocated\""), "the device's state is everyone's: {line}");
    let root = serde_json::to_string(&node.status()).unwrap();
    assert!(root.contains("4343"), "root's status lost the holder's uid: {root}");
}
