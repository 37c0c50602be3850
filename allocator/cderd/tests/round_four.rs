//! Trust, round four (docs/security.md): no user and no busy node can cost
//! another job its GPU.
//!
//! - A: a process holding 10,000 POSIX byte-range locks and 2,000 dups of
//!   that descriptor made every release keep its GPU out (the scan read
//!   each descriptor's fdinfo, which lists every lock).
//! - B: a descriptor passed over a Unix socket out of a job outlived it,
//!   unaccounted, on whole and shared GPUs.
//! - A busy node (CPU-bound work on every core, thousands of processes)
//!   kept its released GPUs out.
//! - A device is kept out only for something found: a holder SIGKILL
//!   cannot end keeps it out (across a restart) until it ends, its use
//!   counted for the job the device came from.
//!
//! The devices are pseudo-terminal slaves ([`common::Ptys`]): numbers no
//! other test holds. Needs root.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cder_protocol::{AllocRequest, DeviceState, ErrorCode};
use cder_testkit::require;
use common::{Node, Ptys};

const ENFORCE: &str = "device_files = true\njob_mode = \"0600\"\ncgroup = \"off\"\nheld_open = \"skip\"";

/// Kills and reaps on drop.
struct Reap(Vec<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let done = cder_testkit::wait_for_value(within, Duration::from_millis(10), || done().then_some(()));
    assert!(done.is_some(), "timed out waiting for {what}");
}

fn explicit(job: &str, uid: u32, index: u32) -> AllocRequest {
    let mut r = AllocRequest::new(job.parse().unwrap(), uid, 1);
    r.devices = Some(vec![index]);
    r
}

fn state(node: &Node, index: u32) -> cder_protocol::DeviceStatus {
    node.status().devices.into_iter().find(|d| d.index == index).unwrap()
}

/// Runs python3 `code` as `uid` with `args`; returns once it printed its
/// first line (which must be `ready`).
fn python_as(uid: u32, code: &str, args: &[&std::ffi::OsStr]) -> Child {
    let mut argv: Vec<&std::ffi::OsStr> = vec!["/usr/bin/python3".as_ref(), "-c".as_ref(), code.as_ref()];
    argv.extend_from_slice(args);
    let mut child = common::as_uid(uid, &argv).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "ready", "python as uid {uid} did not start");
    child
}

/// A directory `uid` may write in.
fn dir_for(uid: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).unwrap();
    dir
}

/// Finding A: one process holding 10,000 byte-range locks and 2,000 dups
/// of that descriptor. Before, each release's scan read every one of its
/// descriptors' fdinfo (~0.1 s each), overran its wait and kept the GPU
/// out; the next job placed there was refused. Now the scan never reads
/// fdinfo, and no release waits for it.
#[test]
fn a_lock_heavy_process_never_keeps_a_released_gpu_out() {
    if !require(cder_testkit::is_root(), "root (a process of another uid)")
        || !cder_testkit::require_programs(&["python3"])
    {
        return;
    }
    let ptys = Ptys::open(4);
    let node = common::device_node(tempfile::tempdir().unwrap(), &ptys.paths, ENFORCE);
    let dir = dir_for(65534);
    let code = "import fcntl,os,sys,resource,time\n\
                soft,hard=resource.getrlimit(resource.RLIMIT_NOFILE)\n\
                resource.setrlimit(resource.RLIMIT_NOFILE,(hard,hard))\n\
                fd=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT,0o600)\n\
                for i in range(10000): fcntl.lockf(fd,fcntl.LOCK_EX|fcntl.LOCK_NB,1,2*i)\n\
                for i in range(2000): os.dup(fd)\n\
                print('ready',flush=True)\ntime.sleep(600)";
    let _heavy = Reap(vec![python_as(65534, code, &[dir.path().join("locked").as_os_str()])]);
    for round in 0..4u32 {
        let job = format!("slurm:{}", 800 + round);
        let started = Instant::now();
        // cderd chooses: the held-open scan walks the heavy process.
        let given = node.client().alloc(&AllocRequest::new(job.parse().unwrap(), 1000, 1)).unwrap();
        let alloc_took = started.elapsed();
        let index = given.devices[0].index;
        let started = Instant::now();
        node.client().release(&job.parse().unwrap()).unwrap();
        let release_took = started.elapsed();
        eprintln!("round {round}: alloc {alloc_took:?}, release {release_took:?}");
        assert!(alloc_took < Duration::from_secs(2), "alloc took {alloc_took:?}");
        assert!(release_took < Duration::from_secs(2), "release took {release_took:?}");
        // Back in the pool at once: the next job SLURM places there gets it.
        let d = state(&node, index);
        assert_eq!(d.state, DeviceState::Free, "a released GPU kept out beside a lock-heavy process: {d:?}");
        let next = format!("slurm:{}", 900 + round);
        node.client().alloc(&explicit(&next, 1001, index)).unwrap();
        node.client().release(&next.parse().unwrap()).unwrap();
    }
}

const RECEIVER: &str = "import socket,sys,time\n\
    s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)\n\
    print('ready',flush=True)\n\
    c,_=s.accept(); msg,fds,flags,addr=socket.recv_fds(c,1,1)\n\
    time.sleep(600)";

const SENDER: &str = "import os,socket,sys\n\
    fd=os.open(sys.argv[2],os.O_RDWR|os.O_NOCTTY)\n\
    c=socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])\n\
    print('ready',flush=True)\n\
    socket.send_fds(c,[b'x'],[fd])";

/// Job A's process (as `uid`) opens `device` and passes the descriptor to
/// a process of the same uid outside the job (a GPU-less job B), then
/// ends. Returns B's process, holding the device.
fn pass_out_of_the_job(uid: u32, device: &Path) -> Child {
    let dir = dir_for(uid);
    let socket = dir.path().join("s");
    let receiver = python_as(uid, RECEIVER, &[socket.as_os_str()]);
    let mut sender = python_as(uid, SENDER, &[socket.as_os_str(), device.as_os_str()]);
    sender.wait().unwrap();
    // The receiver holds it once its descriptor table names the device.
    let pid = receiver.id();
    wait_for("the passed descriptor in the receiver", Duration::from_secs(30), || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .is_ok_and(|fds| fds.flatten().any(|e| std::fs::read_link(e.path()).is_ok_and(|p| p == device)))
    });
    receiver
}

/// Finding B, whole GPU: the descriptor passed out of job A outlived A,
/// and the GPU was kept out (the next job placed there refused) while B
/// used it with no record. Now the holder is ended at release, logged with
/// pid, uid and command, its use counted for A, and the GPU goes back.
#[test]
fn a_descriptor_passed_out_of_a_job_is_ended_and_counted_for_it_whole_gpu() {
    if !require(cder_testkit::is_root(), "root (processes of other uids)")
        || !cder_testkit::require_programs(&["python3"])
    {
        return;
    }
    let ptys = Ptys::open(2);
    let node = common::device_node(tempfile::tempdir().unwrap(), &ptys.paths, ENFORCE);
    let (a, uid) = ("slurm:1701", 4701);
    node.client().alloc(&explicit(a, uid, 0)).unwrap();
    let mut holder = pass_out_of_the_job(uid, &ptys.paths[0]);
    let pid = holder.id();
    let _reap = scopeguard(pid);
    node.client().release(&a.parse().unwrap()).unwrap();
    let ended = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(10), || {
        holder.try_wait().ok().flatten()
    });
    assert!(ended.is_some(), "the process holding a descriptor passed out of job {a} outlived its release");
    let logged = format!("ended pid {pid} (uid {uid}, \"python3\")");
    wait_for("the log line naming it", Duration::from_secs(30), || node.log().contains(&logged));
    // The next job placed on the GPU (another user's) is not refused.
    node.client().alloc(&explicit("slurm:1702", 4702, 0)).unwrap();
    let accounting = node.client().accounting(&Default::default()).unwrap();
    let outside: Vec<_> = accounting.records.iter().filter(|r| r.after_release.is_some()).collect();
    assert_eq!(outside.len(), 1, "{:?}", accounting.records);
    assert_eq!(outside[0].job.to_string(), a);
    assert_eq!(outside[0].uid, uid);
    assert!(outside[0].after_release.as_deref().unwrap().contains(&format!("pid {pid}")), "{outside:?}");
}

/// Finding B, shared GPU: job A's uid leaves the GPU's ACL at release, but
/// its passed descriptor went on working beside the other sharers, and the
/// GPU was not even kept out. Now a holder whose uid is no sharer any more
/// is ended; the other sharer keeps its share.
#[test]
fn a_descriptor_passed_out_of_a_job_is_ended_and_counted_for_it_shared_gpu() {
    if !require(cder_testkit::is_root(), "root (processes of other uids)")
        || !cder_testkit::require_programs(&["python3"])
    {
        return;
    }
    let ptys = Ptys::open(2);
    let node = common::device_node(
        tempfile::tempdir().unwrap(),
        &ptys.paths,
        // devpts keeps no ACLs: the ptys stay 0666 (device_files off).
        "cgroup = \"off\"\nheld_open = \"skip\"\n[node.sharing]\nshares_per_gpu = 2",
    );
    let share = |job: &str, uid: u32| AllocRequest { shares: Some(1), ..explicit(job, uid, 0) };
    node.client().alloc(&share("slurm:1711", 4711)).unwrap();
    node.client().alloc(&share("slurm:1712", 4712)).unwrap();
    let mut holder = pass_out_of_the_job(4711, &ptys.paths[0]);
    let pid = holder.id();
    let _reap = scopeguard(pid);
    node.client().release(&"slurm:1711".parse().unwrap()).unwrap();
    let ended = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(10), || {
        holder.try_wait().ok().flatten()
    });
    assert!(ended.is_some(), "a holder whose uid is no sharer any more outlived the release");
    wait_for("the log line naming it", Duration::from_secs(30), || {
        node.log().contains(&format!("ended pid {pid} (uid 4711, \"python3\")"))
    });
    let status = node.status();
    assert!(status.shares.iter().any(|s| s.uid == 4712), "the other sharer lost its share: {status:?}");
    node.client().alloc(&share("slurm:1713", 4713)).ok();
    let accounting = node.client().accounting(&Default::default()).unwrap();
    let outside: Vec<_> = accounting.records.iter().filter(|r| r.after_release.is_some()).collect();
    assert_eq!(outside.len(), 1, "{:?}", accounting.records);
    assert_eq!(outside[0].job.to_string(), "slurm:1711");
    assert_eq!(outside[0].shares, Some(1), "{outside:?}");
}

/// SIGKILLs `pid` on drop (a process a test started, in case it fails).
fn scopeguard(pid: u32) -> impl Drop {
    struct Kill(u32);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = cder_testkit::faults::signal(self.0, "KILL");
        }
    }
    Kill(pid)
}

/// Item 8: a busy node keeps its GPUs. With a CPU-bound process on every
/// core and thousands of processes, each release returns its device to
/// the pool before it answers (before, the release's scan of every
/// process overran its wait and the device stayed out).
#[test]
fn a_busy_node_keeps_its_gpus() {
    if !require(cder_testkit::is_root(), "root (processes of other uids)") {
        return;
    }
    let ptys = Ptys::open(4);
    let node = common::device_node(tempfile::tempdir().unwrap(), &ptys.paths, ENFORCE);
    // Twice as many CPU-bound processes as cores: every core busy.
    let spinners = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
    // Thousands of processes of ten descriptors each, and one spinning per
    // core, in one process group.
    use std::os::unix::process::CommandExt;
    let script = format!(
        "i=0; while [ $i -lt 4000 ]; do sleep 600 3<&0 4<&0 5<&0 6<&0 7<&0 8<&0 9<&0 & i=$((i+1)); done; \
         j=0; while [ $j -lt {spinners} ]; do (while :; do :; done) & j=$((j+1)); done; echo ready; wait"
    );
    let mut crowd = Command::new("sh").args(["-c", &script]).process_group(0).stdout(Stdio::piped()).spawn().unwrap();
    let group = crowd.id();
    struct Group(u32);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.0)]).status();
        }
    }
    let _group = Group(group);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(crowd.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let mut took = Vec::new();
    for round in 0..8u32 {
        let index = round % 4;
        let job = format!("slurm:{}", 1800 + round);
        node.client().alloc(&explicit(&job, 1000, index)).unwrap();
        // The job's process holds its GPU until the batch system ends it.
        let mut task = Command::new("sleep")
            .arg("600")
            .stdin(std::fs::File::open(&ptys.paths[index as usize]).unwrap())
            .uid(1000)
            .gid(1000)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let _ = task.kill();
        let _ = task.wait();
        let started = Instant::now();
        node.client().release(&job.parse().unwrap()).unwrap();
        took.push(started.elapsed());
        let d = state(&node, index);
        assert_eq!(d.state, DeviceState::Free, "round {round}: a busy node kept a released GPU out: {d:?}");
    }
    eprintln!("releases on the busy node: {took:?}");
    let _ = crowd.kill();
    let _ = crowd.wait();
}

/// Item 2: a device is kept out only for something found, and for as long
/// as it is there: a process outside the job holding the released device
/// that SIGKILL cannot end (asleep in the user's stalled FUSE mount). It
/// stays out across a restart, its use counted for the job until it ends;
/// then the device comes back by itself.
#[test]
fn a_holder_sigkill_cannot_end_keeps_the_device_out_until_it_ends() {
    if !require(cder_testkit::is_root(), "root") || !cder_testkit::require_programs(&["/dev/fuse", "stat"]) {
        return;
    }
    // Dropped last: the mount goes first, and the holder can then end.
    let mut reap = Reap(Vec::new());
    let ptys = Ptys::open(2);
    let mut node = common::device_node(tempfile::tempdir().unwrap(), &ptys.paths, ENFORCE);
    let uid = 4721;
    let fuse_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(fuse_dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let fuse = cder_testkit::hostile::StalledFuse::mount(&fuse_dir.path().join("m"), uid, uid).unwrap();
    let a = "slurm:1721";
    node.client().alloc(&explicit(a, uid, 0)).unwrap();
    // A process of the user, outside the job, holding the GPU and asleep in the mount.
    let mut stat = fuse.stat_command();
    use std::os::unix::process::CommandExt;
    stat.uid(uid).gid(uid).stdin(std::fs::File::open(&ptys.paths[0]).unwrap());
    let mut stuck = fuse.stall(&mut stat).unwrap();
    let pid = stuck.id();
    // Past SIGKILL already: asleep in the kernel until the mount goes.
    cder_testkit::hostile::make_unkillable(&mut stuck).unwrap();
    reap.0.push(stuck);
    node.client().release(&a.parse().unwrap()).unwrap();
    wait_for("the device kept out for the holder found", Duration::from_secs(30), || {
        let d = state(&node, 0);
        d.state == DeviceState::Offline
            && d.reason
                .as_deref()
                .is_some_and(|r| r.contains(&format!("pid {pid}")) && r.contains("SIGKILL has not ended"))
    });
    let e = node.client().alloc(&explicit("slurm:1722", 4722, 0)).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Conflict), "{e}");
    let open = |node: &Node| {
        let accounting = node.client().accounting(&Default::default()).unwrap();
        accounting.records.into_iter().filter(|r| r.after_release.is_some()).collect::<Vec<_>>()
    };
    let records = open(&node);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].end, None, "counted for the job while it lives: {records:?}");
    node.kill();
    node.start();
    assert_eq!(state(&node, 0).state, DeviceState::Offline, "a restart put back a device a live holder holds");
    // The mount goes: the holder wakes and dies, and the device comes back.
    drop(fuse);
    wait_for("the device back in the pool", Duration::from_secs(60), || state(&node, 0).state == DeviceState::Free);
    let records = open(&node);
    assert!(records.len() == 1 && records[0].end.is_some(), "{records:?}");
    node.client().alloc(&explicit("slurm:1722", 4722, 0)).unwrap();
}

/// Item 1: the scan places a descriptor on a stalled FUSE mount without
/// waiting for its server, and finds a device held through an overlay
/// mount (the number is compared, whatever the path).
#[test]
fn the_scan_reads_no_file_system_and_sees_through_overlay() {
    if !require(cder_testkit::is_root(), "root (mounts)")
        || !cder_testkit::require_programs(&["/dev/fuse", "mount", "mknod"])
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let fuse = cder_testkit::hostile::StalledFuse::mount(&dir.path().join("fuse"), 4731, 4731).unwrap();
    let mut held = Reap(vec![fuse.hold_descriptor(4731, 4731).unwrap()]);
    // An overlay whose lower layer holds a copy of 1:5 made with mknod.
    for d in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir(dir.path().join(d)).unwrap();
    }
    let ok = Command::new("mknod").arg(dir.path().join("lower/gpu")).args(["c", "1", "5"]).status().unwrap().success();
    assert!(ok);
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        dir.path().join("lower").display(),
        dir.path().join("upper").display(),
        dir.path().join("work").display()
    );
    let merged = dir.path().join("merged");
    let mounted =
        Command::new("mount").args(["-t", "overlay", "overlay", "-o", &options]).arg(&merged).status().unwrap();
    if !mounted.success() {
        eprintln!("skipping the overlay part: no overlay mount here");
    }
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _umount = Umount(merged.clone());
    let target = if mounted.success() { merged.join("gpu") } else { dir.path().join("lower/gpu") };
    use std::os::unix::process::CommandExt;
    let holder = Command::new("sleep")
        .arg("60")
        .stdin(std::fs::File::open(&target).unwrap())
        .uid(4731)
        .gid(4731)
        .spawn()
        .unwrap();
    let pid = holder.id();
    held.0.push(holder);
    let targets = cderd::held::Targets { rdevs: [libc::makedev(1, 5)].into() };
    let trusted: cderd::held::Trusted = std::sync::Arc::new(|uid| uid == 0);
    let started = Instant::now();
    let mut found = false;
    // The child may still be exec'ing: its descriptor is there from fork on.
    while started.elapsed() < Duration::from_secs(20) && !found {
        let scan =
            cderd::held::scan_whole(Path::new("/proc"), &targets, std::sync::Arc::clone(&trusted), Default::default());
        found = scan.holders_of(libc::makedev(1, 5)).iter().any(|h| h.pid == pid && h.uid == 4731);
    }
    assert!(found, "the holder through the overlay was not found (or the scan stalled on the FUSE mount)");
    drop(held);
    drop(fuse);
}
