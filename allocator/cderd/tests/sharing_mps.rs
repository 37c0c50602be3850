//! MPS on shared GPUs: the real cderd binary with the fake NVML and the
//! fake `nvidia-cuda-mps-control` (allocator/fake-nvml), whose control log
//! records every command cderd sent.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use cder_fake_nvml::{FakeDevice, FakeNvml};
use cder_protocol::{AllocRequest, ErrorCode};
use cder_testkit::{is_root, require};
use common::{as_uid, Node};

/// The fake control program beside cderd, built first.
fn fake_control() -> PathBuf {
    cder_testkit::built("cder-fake-nvml", "fake-mps-control")
}

fn gpu(i: u32) -> FakeDevice {
    FakeDevice::a100("5a3e0000", i, 40960)
}

/// A node sharing its 2 fake GPUs 4 ways under MPS; returns it and the MPS
/// runtime directory.
fn mps_node() -> (Node, PathBuf) {
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    FakeNvml { devices: vec![gpu(0), gpu(1)], fail: vec![] }.write(&machine).unwrap();
    let files: Vec<PathBuf> = (0..2).map(|i| dir.path().join(format!("nvidia{i}"))).collect();
    for f in &files {
        std::fs::write(f, b"").unwrap();
    }
    let runtime = dir.path().join("mps");
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.health]\nwatch = false\n[node.usage]\nsample = false\n\
         [node.sharing]\nshares_per_gpu = 4\n[node.mps]\nenabled = true\nmps_control = {:?}\nruntime_dir = {:?}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\n\
         device_path = \"{dir}/nvidia{{minor}}\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        fake_control(),
        runtime,
        library,
        dir = dir.path().display()
    );
    let env = vec![("CDER_FAKE_NVML".to_string(), machine)];
    (Node::custom(dir, &text, files, env), runtime)
}

fn share(job: &str, uid: u32, index: u32, shares: u32) -> AllocRequest {
    let mut request = AllocRequest::new(job.parse().unwrap(), uid, 1);
    request.devices = Some(vec![index]);
    request.shares = Some(shares);
    request.wait_ms = Some(0);
    request
}

/// The commands the fake control daemon of `uuid` received, in order.
fn commands(runtime: &Path, uuid: &str) -> Vec<String> {
    let log = std::fs::read_to_string(runtime.join(uuid).join("log/control.log")).unwrap_or_default();
    log.lines().filter_map(|l| l.split_once("] ").map(|(_, rest)| rest.to_string())).collect()
}

#[test]
fn two_share_jobs_get_one_control_daemon_with_their_fractions_stopped_after_the_last() {
    let (node, runtime) = mps_node();
    let uuid = gpu(0).uuid;
    let a = node.client().alloc(&share("slurm:71", 1000, 0, 2)).unwrap();
    let b = node.client().alloc(&share("slurm:72", 1000, 0, 2)).unwrap();
    assert_eq!((a.devices[0].uuid.as_str(), b.devices[0].uuid.as_str()), (uuid.as_str(), uuid.as_str()));
    let log = commands(&runtime, &uuid);
    let started: Vec<&String> = log.iter().filter(|l| l.starts_with("Starting control daemon")).collect();
    assert_eq!(started, [&format!("Starting control daemon CUDA_VISIBLE_DEVICES={uuid}")], "{log:#?}");
    // 2 of 4 shares: half the threads, half of 40960 MiB.
    assert!(log.contains(&"Cmd:set_default_active_thread_percentage 50.0".to_string()), "{log:#?}");
    assert!(log.contains(&"Cmd:set_default_device_pinned_mem_limit 0 20480M".to_string()), "{log:#?}");
    assert!(!log.iter().any(|l| l.contains("quit")), "{log:#?}");
    // Each job's environment points at this GPU's daemon, with its own share.
    let pipe = runtime.join(&uuid).join("pipe").display().to_string();
    for env in [&a.env.0, &b.env.0] {
        assert_eq!(env.get("CUDA_MPS_PIPE_DIRECTORY"), Some(&pipe));
        assert_eq!(env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").map(String::as_str), Some("50.0"));
        assert_eq!(env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT").map(String::as_str), Some("0=20480M"));
    }
    // The other GPU has no sharer, so no daemon.
    assert!(commands(&runtime, &gpu(1).uuid).is_empty());

    node.client().release(&"slurm:71".parse().unwrap()).unwrap();
    assert!(!commands(&runtime, &uuid).iter().any(|l| l == "Cmd:quit"), "stopped while a sharer remains");
    node.client().release(&"slurm:72".parse().unwrap()).unwrap();
    let log = commands(&runtime, &uuid);
    assert_eq!(log.iter().filter(|l| *l == "Cmd:quit").count(), 1, "{log:#?}");
    assert_eq!(log.last().map(String::as_str), Some("Exit with status 0"));
}

#[test]
fn unequal_shares_set_the_server_to_the_largest_and_each_job_to_its_own() {
    let (node, runtime) = mps_node();
    let uuid = gpu(1).uuid;
    let a = node.client().alloc(&share("slurm:81", 1000, 1, 1)).unwrap();
    assert!(commands(&runtime, &uuid).contains(&"Cmd:set_default_active_thread_percentage 25.0".to_string()));
    let b = node.client().alloc(&share("slurm:82", 1000, 1, 3)).unwrap();
    let log = commands(&runtime, &uuid);
    assert!(log.contains(&"Cmd:set_default_active_thread_percentage 75.0".to_string()), "{log:#?}");
    assert!(log.contains(&"Cmd:set_default_device_pinned_mem_limit 0 30720M".to_string()), "{log:#?}");
    assert_eq!(a.env.0.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").map(String::as_str), Some("25.0"));
    assert_eq!(b.env.0.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").map(String::as_str), Some("75.0"));
    // The 3-share job leaves: the server goes back to the 1-share job's 25 %.
    node.client().release(&"slurm:82".parse().unwrap()).unwrap();
    let log = commands(&runtime, &uuid);
    assert_eq!(
        log.iter().rev().find(|l| l.contains("set_default_active_thread")).unwrap(),
        "Cmd:set_default_active_thread_percentage 25.0"
    );
    node.client().release(&"slurm:81".parse().unwrap()).unwrap();
}

#[test]
fn a_second_users_share_job_is_refused_while_the_first_users_server_runs() {
    let (node, runtime) = mps_node();
    let uuid = gpu(0).uuid;
    node.client().alloc(&share("slurm:91", 1000, 0, 1)).unwrap();
    let refused = node.client().alloc(&share("slurm:92", 1001, 0, 1)).unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("one user's server per GPU") && message.contains("uid 1000"), "{message}");
    assert!(matches!(&refused, cder_protocol::ClientError::Server(e) if e.code == ErrorCode::Conflict), "{refused:?}");
    // Nothing recorded for it: the GPU's sharers are still the first job alone.
    let sharers: Vec<String> = node.status().shares.iter().map(|s| s.job.to_string()).collect();
    assert_eq!(sharers, ["slurm:91"]);
    // The same user's second job is welcome, and once the first user has
    // left, the other user gets the GPU (a fresh control daemon).
    node.client().alloc(&share("slurm:93", 1000, 0, 1)).unwrap();
    node.client().release(&"slurm:91".parse().unwrap()).unwrap();
    node.client().release(&"slurm:93".parse().unwrap()).unwrap();
    node.client().alloc(&share("slurm:92", 1001, 0, 1)).unwrap();
    let log = commands(&runtime, &uuid);
    assert_eq!(log.iter().filter(|l| l.starts_with("Starting control daemon")).count(), 2, "{log:#?}");
    node.client().release(&"slurm:92".parse().unwrap()).unwrap();
}

#[test]
fn a_restarted_cderd_keeps_the_running_control_daemon_and_stops_it_after_the_last_sharer() {
    let (mut node, runtime) = mps_node();
    let uuid = gpu(0).uuid;
    node.client().alloc(&share("slurm:101", 1000, 0, 1)).unwrap();
    node.kill();
    node.start();
    let log = commands(&runtime, &uuid);
    // Asked whether it runs, not started twice; its limits set again.
    assert_eq!(log.iter().filter(|l| l.starts_with("Starting control daemon")).count(), 1, "{log:#?}");
    let sets = log.iter().filter(|l| *l == "Cmd:set_default_active_thread_percentage 25.0").count();
    assert_eq!(sets, 2, "{log:#?}");
    node.client().release(&"slurm:101".parse().unwrap()).unwrap();
    assert_eq!(commands(&runtime, &uuid).last().map(String::as_str), Some("Exit with status 0"));
}

/// What the fake control program, run as `uid` against `uuid`'s daemon
/// with `line` on its stdin, says: whether it reached the daemon, its output.
fn client_as(runtime: &Path, uuid: &str, uid: u32, line: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = as_uid(uid, &[fake_control().as_os_str()])
        .env("CUDA_MPS_PIPE_DIRECTORY", runtime.join(uuid).join("pipe"))
        .env("CUDA_MPS_LOG_DIRECTORY", runtime.join(uuid).join("log"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{line}").unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The pipe directory is the only fence of a GPU's control daemon: a local
/// user who holds no share of the GPU (uid 65534) can neither reach it
/// (nor ask it for a server of their own) nor read its log; a sharer can.
/// The fake control daemon stands in for NVIDIA's (no GPU machine was lent
/// to this check); its socket, as the real one's, takes any local user's
/// connection, so only the directory's ACL keeps others out.
#[test]
fn only_the_sharers_reach_a_gpus_control_daemon() {
    if !require(is_root(), "root (to run the MPS client as other uids)") {
        return;
    }
    let (node, runtime) = mps_node();
    // The temp dir above is 0700: open it, so that cderd's fence is the only one.
    std::fs::set_permissions(runtime.parent().unwrap(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let uuid = gpu(0).uuid;
    node.client().alloc(&share("slurm:111", 1000, 0, 1)).unwrap();
    let logged = |needle: &str| commands(&runtime, &uuid).iter().any(|l| l == needle);

    let (reached, said) = client_as(&runtime, &uuid, 65534, "start_server -uid 65534");
    assert!(!reached && said.contains("Cannot find MPS control daemon"), "uid 65534 reached the daemon: {said}");
    assert!(!logged("Cmd:start_server -uid 65534"), "{:#?}", commands(&runtime, &uuid));
    let log = runtime.join(&uuid).join("log/control.log");
    let read = as_uid(65534, &["cat".as_ref(), log.as_os_str()]).output().unwrap();
    assert!(!read.status.success(), "uid 65534 read {}", log.display());

    let (reached, said) = client_as(&runtime, &uuid, 1000, "get_default_active_thread_percentage");
    assert!(reached && said.contains("25.0"), "the sharer did not reach its daemon: {said}");
    assert!(logged("Cmd:get_default_active_thread_percentage"));
    for dir in ["pipe", "log"] {
        let acl = cderd::acl::get(&runtime.join(&uuid).join(dir)).unwrap().expect("an ACL");
        assert_eq!(acl.users.into_iter().collect::<Vec<_>>(), [(1000, 5)], "{dir}: r-x for the sharer alone");
    }

    // The sharer gone, its access goes too (the daemon with it).
    node.client().release(&"slurm:111".parse().unwrap()).unwrap();
    assert_eq!(cderd::acl::get(&runtime.join(&uuid).join("pipe")).unwrap(), None);
    let (reached, _) = client_as(&runtime, &uuid, 1000, "get_server_list");
    assert!(!reached, "a sharer that left still reached the pipe directory");
}
