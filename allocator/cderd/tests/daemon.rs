//! The real cderd binary over its socket: allocation, concurrency, bad
//! input, authorization, drain, reconcile, accounting, enforcement,
//! durability across SIGKILL.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Barrier};

use cder_model::JobKey;
use cder_protocol::{
    AccountingRequest, AllocRequest, Allocation, ClientError, DeviceState, ErrorCode, ReconcileRequest, Request,
};
use cder_testkit::{is_root, require};
use common::{as_uid, live_owners, Node, Options};

fn job(s: &str) -> JobKey {
    s.parse().unwrap()
}

fn indices(a: &cder_protocol::Allocation) -> Vec<u32> {
    a.devices.iter().map(|d| d.index).collect()
}

fn code(e: ClientError) -> ErrorCode {
    e.code().unwrap_or_else(|| panic!("not a server error: {e}"))
}

#[test]
fn two_jobs_disjoint_third_refused_until_release() {
    let node = Node::new(4);
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    let b = c.alloc(&AllocRequest::new(job("slurm:2"), 1001, 2)).unwrap();
    let (ia, ib): (BTreeSet<u32>, BTreeSet<u32>) =
        (indices(&a).into_iter().collect(), indices(&b).into_iter().collect());
    assert_eq!(ia.len(), 2);
    assert!(ia.is_disjoint(&ib), "{ia:?} {ib:?}");
    // Locality: each pair sits on one NUMA node.
    assert_eq!(indices(&a), vec![0, 1]);
    assert_eq!(a.env.get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
    assert_eq!(a.env.get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
    assert_eq!(b.env.get("CUDA_VISIBLE_DEVICES"), Some("2,3"));

    let err = c.alloc(&AllocRequest::new(job("slurm:3"), 1000, 2)).unwrap_err();
    match &err {
        ClientError::Server(e) => {
            assert_eq!(e.code, ErrorCode::Insufficient);
            assert_eq!(e.free, Some(0));
            assert!(e.message.contains("0 free"), "{}", e.message);
        }
        other => panic!("{other}"),
    }
    assert_eq!(c.release(&job("slurm:1")).unwrap().released, 2);
    let third = c.alloc(&AllocRequest::new(job("slurm:3"), 1000, 2)).unwrap();
    assert_eq!(indices(&third), vec![0, 1]);
    // One free device among three asked: the count is reported.
    c.release(&job("slurm:2")).unwrap();
    c.alloc(&AllocRequest::new(job("slurm:4"), 1000, 1)).unwrap();
    let e = c.alloc(&AllocRequest::new(job("slurm:5"), 1000, 3)).unwrap_err();
    assert_eq!(code(e), ErrorCode::Insufficient);
}

#[test]
fn alloc_and_release_are_idempotent_and_env_is_the_allocation() {
    let node = Node::new(4);
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new(job("torque:17.ce.example.org"), 1000, 2)).unwrap();
    let again = c.alloc(&AllocRequest::new(job("torque:17.ce.example.org"), 1000, 2)).unwrap();
    assert_eq!(a, again);
    assert_eq!(
        code(c.alloc(&AllocRequest::new(job("torque:17.ce.example.org"), 1000, 1)).unwrap_err()),
        ErrorCode::Conflict
    );
    // Root, an operator, is also told where the job's device cgroups are
    // (where this node has them); the rest is the allocation.
    let env = c.env(&job("torque:17.ce.example.org")).unwrap();
    assert_eq!(Allocation { cgroups: None, ..env }, a);
    assert_eq!(c.release(&job("torque:17.ce.example.org")).unwrap().released, 2);
    assert_eq!(c.release(&job("torque:17.ce.example.org")).unwrap().released, 0);
    assert_eq!(code(c.env(&job("torque:17.ce.example.org")).unwrap_err()), ErrorCode::UnknownJob);
    // Zero devices: recorded, with an empty visible list, never "all".
    let none = c.alloc(&AllocRequest::new(job("slurm:9"), 1000, 0)).unwrap();
    assert_eq!(none.env.get("CUDA_VISIBLE_DEVICES"), Some(""));
    // Constraints.
    let mut r = AllocRequest::new(job("slurm:10"), 1000, 2);
    r.min_memory_mib = Some(10_000);
    assert_eq!(indices(&c.alloc(&r).unwrap()), vec![1, 3]);
    let mut r = AllocRequest::new(job("slurm:11"), 1000, 1);
    r.model = Some("k20".into());
    assert_eq!(indices(&c.alloc(&r).unwrap()), vec![0]);
    let mut r = AllocRequest::new(job("slurm:12"), 1000, 1);
    r.cder_type = "fpga".into();
    assert_eq!(code(c.alloc(&r).unwrap_err()), ErrorCode::UnknownDevice);
}

#[test]
fn sixty_four_concurrent_clients_on_eight_devices() {
    let node = Arc::new(Node::new(8));
    let barrier = Arc::new(Barrier::new(64));
    let threads: Vec<_> = (0..64)
        .map(|i| {
            let node = Arc::clone(&node);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut c = node.client();
                barrier.wait();
                c.alloc(&AllocRequest::new(format!("slurm:{}", 1000 + i).parse().unwrap(), 1000, 1))
            })
        })
        .collect();
    let mut granted = Vec::new();
    for t in threads {
        match t.join().unwrap() {
            Ok(a) => granted.extend(a.devices.into_iter().map(|d| d.uuid)),
            Err(e) => assert_eq!(code(e), ErrorCode::Insufficient),
        }
    }
    assert_eq!(granted.len(), 8, "{granted:?}");
    let distinct: BTreeSet<_> = granted.iter().collect();
    assert_eq!(distinct.len(), 8);
    let status = node.status();
    assert_eq!(status.counts["gpgpu"].allocated, 8);
    assert_eq!(live_owners(&node.db()).len(), 8);
}

#[test]
fn bad_input_gets_error_replies_and_changes_nothing() {
    let node = Node::with(4, Options { max_request_bytes: Some(4096), ..Options::default() });
    let mut c = node.client();
    c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 1)).unwrap();
    let before = node.status();
    let owners_before = live_owners(&node.db());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("malformed JSON", b"{\"v\":1,\"op\":\"alloc\",\n".to_vec(), "bad_request"),
        ("not an object", b"[1,2,3]\n".to_vec(), "bad_request"),
        ("binary", vec![0xff, 0xfe, 0x00, b'\n'], "bad_request"),
        ("unknown op", b"{\"v\":1,\"op\":\"format_disk\"}\n".to_vec(), "bad_request"),
        ("unknown field", b"{\"v\":1,\"op\":\"release\",\"job\":\"slurm:1\",\"force\":true}\n".to_vec(), "bad_request"),
        (
            "wrong type",
            b"{\"v\":1,\"op\":\"alloc\",\"job\":\"slurm:2\",\"uid\":\"root\",\"count\":1}\n".to_vec(),
            "bad_request",
        ),
        (
            "negative count",
            b"{\"v\":1,\"op\":\"alloc\",\"job\":\"slurm:2\",\"uid\":1,\"count\":-1}\n".to_vec(),
            "bad_request",
        ),
        (
            "huge count",
            b"{\"v\":1,\"op\":\"alloc\",\"job\":\"slurm:2\",\"uid\":1,\"count\":18446744073709551616}\n".to_vec(),
            "bad_request",
        ),
        ("injection job id", b"{\"v\":1,\"op\":\"release\",\"job\":\"slurm:1' OR '1'='1\"}\n".to_vec(), "bad_request"),
        (
            "injection job id 2",
            b"{\"v\":1,\"op\":\"alloc\",\"job\":\"slurm:1;DROP TABLE jobs\",\"uid\":1,\"count\":1}\n".to_vec(),
            "bad_request",
        ),
        ("missing version", b"{\"op\":\"status\"}\n".to_vec(), "bad_request"),
        ("future version", b"{\"v\":2,\"op\":\"status\"}\n".to_vec(), "unsupported_version"),
        (
            "oversized line",
            [b"{\"v\":1,\"op\":\"status\",\"pad\":\"".to_vec(), vec![b'x'; 10_000], b"\"}\n".to_vec()].concat(),
            "too_large",
        ),
        ("oversized, no newline", vec![b'{'; 100_000], "too_large"),
    ];
    for (what, bytes, want) in &cases {
        let reply = node.raw(bytes);
        let parsed = cder_protocol::parse_reply(&reply).unwrap_or_else(|e| panic!("{what}: {e}: {reply:?}"));
        let err = parsed.expect_err(what);
        assert_eq!(err.code.as_str(), *want, "{what}: {reply}");
    }
    // The same connection stays usable after a rejected (but not too long) line.
    let mut c2 = node.client();
    let reply = c2.call_raw(b"{\"v\":1,\"op\":\"nope\"}\n").unwrap();
    assert!(reply.contains("bad_request"), "{reply}");
    assert_eq!(c2.ping().unwrap().protocol, 1);
    assert_eq!(node.status(), before);
    assert_eq!(live_owners(&node.db()), owners_before);
}

#[test]
fn protocol_fuzz_against_the_daemon() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let node = Node::with(4, Options { max_request_bytes: Some(2048), ..Options::default() });
    node.client().alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    let before = node.status();
    let seeds = [
        r#"{"v":1,"op":"alloc","job":"slurm:7","uid":1000,"count":1,"type":"gpgpu"}"#,
        r#"{"v":1,"op":"release","job":"slurm:1"}"#,
        r#"{"v":1,"op":"drain","device":"gpgpu:3","reason":"x"}"#,
        r#"{"v":1,"op":"reconcile","live_jobs":[],"lrms":"slurm"}"#,
    ];
    let strategy = (
        0..seeds.len(),
        proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0usize..4), 1..6),
        proptest::collection::vec(any::<u8>(), 0..64),
    );
    let mut runner = TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() });
    let c = std::cell::RefCell::new(node.client());
    runner
        .run(&strategy, |(seed, edits, tail)| {
            let mut bytes = seeds[seed].as_bytes().to_vec();
            for (at, byte, kind) in edits {
                let i = at.index(bytes.len().max(1)).min(bytes.len().saturating_sub(1));
                match kind {
                    0 if !bytes.is_empty() => bytes[i] = byte,
                    1 if !bytes.is_empty() => {
                        bytes.remove(i);
                    }
                    2 => bytes.insert(i, byte),
                    _ => bytes.extend_from_slice(&tail),
                }
            }
            bytes.retain(|b| *b != b'\n');
            // Only lines the protocol refuses: a mutation that still spells a
            // valid request would legitimately change the state.
            if Request::from_line(&bytes).is_ok() {
                return Ok(());
            }
            bytes.push(b'\n');
            let reply = c
                .borrow_mut()
                .call_raw(&bytes)
                .map_err(|e| TestCaseError::fail(format!("{e} after {:?}", String::from_utf8_lossy(&bytes))))?;
            let parsed = cder_protocol::parse_reply(&reply).map_err(TestCaseError::fail)?;
            prop_assert!(parsed.is_err(), "accepted {:?}", String::from_utf8_lossy(&bytes));
            Ok(())
        })
        .unwrap();
    assert_eq!(node.status(), before);
}

/// Runs this test binary's `client_helper` as `uid`, sending `line`; returns the reply line.
fn call_as(node: &Node, uid: u32, line: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let out = as_uid(
        uid,
        &[
            exe.as_os_str(),
            "--ignored".as_ref(),
            "--exact".as_ref(),
            "daemon::client_helper".as_ref(),
            "--nocapture".as_ref(),
            "--quiet".as_ref(),
        ],
    )
    .env("CDER_TEST_SOCKET", &node.socket)
    .env("CDER_TEST_LINE", line)
    .output()
    .expect("setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("REPLY:"))
        .unwrap_or_else(|| panic!("helper gave no reply: {stdout} {}", String::from_utf8_lossy(&out.stderr)))
        .to_string()
}

/// Not a test on its own: the client that `call_as` runs under another uid.
#[test]
#[ignore]
fn client_helper() {
    let (Ok(socket), Ok(line)) = (std::env::var("CDER_TEST_SOCKET"), std::env::var("CDER_TEST_LINE")) else {
        return;
    };
    let mut c = cder_protocol::Client::connect(socket, std::time::Duration::from_secs(30)).unwrap();
    let reply = c.call_raw(format!("{line}\n").as_bytes()).unwrap();
    println!("REPLY:{}", reply.trim_end());
}

/// SLURM's job prolog sends its `alloc` without reading the answer; the
/// job's first step asks `env` on a connection of its own right after.
fn prolog_sends(node: &Node, request: &AllocRequest) {
    node.client().alloc_unanswered(request).unwrap();
}

#[test]
fn the_step_after_an_unanswered_alloc_gets_its_record_or_why_there_is_none() {
    let node = Node::new(4);
    // Back to back, as slurmd runs them: the step's `env` arrives while the
    // prolog's `alloc` may still be unread or uncommitted, and must see it.
    for i in 0..40 {
        let request = AllocRequest {
            devices: Some(vec![i % 4]),
            ..AllocRequest::new(job(&format!("slurm:{}", 100 + i)), 1000, 1)
        };
        prolog_sends(&node, &request);
        let env =
            node.client().env(&request.job).unwrap_or_else(|e| panic!("job {}: {e}\n{}", request.job, node.log()));
        assert_eq!(indices(&env), vec![i % 4]);
        node.client().release(&request.job).unwrap();
    }
    // The node's previous job still holds device 0 (its epilog's release
    // not yet applied): cderd waits out the conflict, and the step waits
    // for cderd.
    let mut c = node.client();
    c.alloc(&AllocRequest { devices: Some(vec![0]), ..AllocRequest::new(job("slurm:1"), 1000, 1) }).unwrap();
    let next =
        AllocRequest { devices: Some(vec![0]), wait_ms: Some(20_000), ..AllocRequest::new(job("slurm:2"), 1001, 1) };
    prolog_sends(&node, &next);
    let step = {
        let socket = node.socket.clone();
        std::thread::spawn(move || {
            cder_protocol::Client::connect(socket, std::time::Duration::from_secs(30)).unwrap().env(&job("slurm:2"))
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(node.status().devices[0].job, Some(job("slurm:1")), "device 0 changed hands before its release");
    c.release(&job("slurm:1")).unwrap();
    let env = step.join().unwrap().unwrap_or_else(|e| panic!("{e}\n{}", node.log()));
    assert_eq!((indices(&env), env.uid), (vec![0], 1001));
    // Refused: the step learns why, and cderd's log says so too.
    let refused = AllocRequest { devices: Some(vec![9]), ..AllocRequest::new(job("slurm:3"), 1000, 1) };
    prolog_sends(&node, &refused);
    let e = node.client().env(&refused.job).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownJob));
    assert!(e.to_string().contains("refused to record it: no device gpgpu:9"), "{e}");
    assert!(node.log().contains("alloc refused"), "{}", node.log());
    // Only the job's uid and operators learn why.
    if is_root() {
        let other = call_as(&node, 65534, r#"{"v":1,"op":"env","job":"slurm:3"}"#);
        assert!(other.contains("unknown_job") && !other.contains("gpgpu:9"), "{other}");
        let own = call_as(&node, 1000, r#"{"v":1,"op":"env","job":"slurm:3"}"#);
        assert!(own.contains("no device gpgpu:9"), "{own}");
    }
    // A job that nothing recorded is unknown, as before.
    assert_eq!(code(node.client().env(&job("slurm:4")).unwrap_err()), ErrorCode::UnknownJob);
}

#[test]
fn unprivileged_users_cannot_alloc_release_or_read_others_jobs() {
    if !require(is_root(), "root (to run clients as other uids)") {
        return;
    }
    let nobody = 65534;
    let node = Node::with(4, Options { operators: vec!["4242".into()], ..Options::default() });
    let mut c = node.client();
    c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    c.alloc(&AllocRequest::new(job("slurm:2"), nobody, 1)).unwrap();
    let before = node.status();

    let alloc = call_as(&node, nobody, r#"{"v":1,"op":"alloc","job":"slurm:3","uid":65534,"count":1}"#);
    assert!(alloc.contains("permission_denied"), "{alloc}");
    let release = call_as(&node, nobody, r#"{"v":1,"op":"release","job":"slurm:1"}"#);
    assert!(release.contains("permission_denied"), "{release}");
    let drain = call_as(&node, nobody, r#"{"v":1,"op":"drain","device":"gpgpu:3","reason":"mine"}"#);
    assert!(drain.contains("permission_denied"), "{drain}");
    let reconcile = call_as(&node, nobody, r#"{"v":1,"op":"reconcile","live_jobs":[]}"#);
    assert!(reconcile.contains("permission_denied"), "{reconcile}");
    let other = call_as(&node, nobody, r#"{"v":1,"op":"env","job":"slurm:1"}"#);
    assert!(other.contains("permission_denied"), "{other}");
    assert_eq!(node.status(), before);

    // Its own job and the status are allowed.
    let own = call_as(&node, nobody, r#"{"v":1,"op":"env","job":"slurm:2"}"#);
    assert!(own.contains("\"ok\":true") && own.contains("CUDA_VISIBLE_DEVICES"), "{own}");
    let status = call_as(&node, nobody, r#"{"v":1,"op":"status"}"#);
    assert!(status.contains("\"ok\":true"), "{status}");
    // Accounting: only its own records.
    let acct = call_as(&node, nobody, r#"{"v":1,"op":"accounting"}"#);
    assert!(acct.contains("slurm:2") && !acct.contains("slurm:1"), "{acct}");
    // A configured operator uid may allocate.
    let op = call_as(&node, 4242, r#"{"v":1,"op":"alloc","job":"slurm:3","uid":4242,"count":1}"#);
    assert!(op.contains("\"ok\":true"), "{op}");
}

#[test]
fn drained_devices_are_never_allocated_and_counted_apart() {
    let node = Node::new(4);
    let mut c = node.client();
    let d = c.drain("gpgpu:0", "Xid 79").unwrap();
    assert_eq!((d.state, d.reason.as_deref()), (DeviceState::Offline, Some("Xid 79")));
    c.drain("GPU-test-1", "fan").unwrap();
    let s = c.status().unwrap();
    assert_eq!((s.counts["gpgpu"].offline, s.counts["gpgpu"].free), (2, 2));
    let e = c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 3)).unwrap_err();
    match e {
        ClientError::Server(e) => assert_eq!((e.code, e.free), (ErrorCode::Insufficient, Some(2))),
        other => panic!("{other}"),
    }
    let a = c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    assert_eq!(indices(&a), vec![2, 3]);
    // Draining a held device: the job keeps it; it goes offline on release.
    c.drain("gpgpu:2", "ECC").unwrap();
    assert_eq!(c.status().unwrap().devices[2].state, DeviceState::Allocated);
    c.release(&job("slurm:1")).unwrap();
    assert_eq!(c.status().unwrap().devices[2].state, DeviceState::Offline);
    let r = c.resume("gpgpu:0").unwrap();
    assert_eq!(r.state, DeviceState::Free);
    assert_eq!(code(c.drain("gpgpu:9", "x").unwrap_err()), ErrorCode::UnknownDevice);
    // Drains survive a restart.
    drop(c);
    let mut node = node;
    node.kill();
    node.start();
    let s = node.status();
    assert_eq!(s.counts["gpgpu"].offline, 2);
    assert_eq!(s.devices[1].reason.as_deref(), Some("fan"));
}

#[test]
fn reconcile_frees_jobs_that_no_longer_exist() {
    let node = Node::new(8);
    let mut c = node.client();
    for j in ["slurm:1", "slurm:2", "slurm:3", "torque:4.ce"] {
        c.alloc(&AllocRequest::new(job(j), 1000, 1)).unwrap();
    }
    let r = c
        .reconcile(&ReconcileRequest { live_jobs: vec![job("slurm:2")], lrms: Some("slurm".into()), as_of: None })
        .unwrap();
    assert_eq!(r.released, vec![job("slurm:1"), job("slurm:3")]);
    let held: BTreeSet<String> =
        c.status().unwrap().devices.iter().filter_map(|d| d.job.as_ref().map(ToString::to_string)).collect();
    assert_eq!(held, ["slurm:2", "torque:4.ce"].iter().map(|s| s.to_string()).collect());
    let r = c.reconcile(&ReconcileRequest { live_jobs: vec![], lrms: None, as_of: None }).unwrap();
    assert_eq!(r.released.len(), 2);
    assert_eq!(c.status().unwrap().counts["gpgpu"].free, 8);
}

#[test]
fn reconcile_never_frees_an_allocation_newer_than_its_snapshot() {
    // TORQUE's race: the live-jobs snapshot is taken, then a
    // prologue allocates, then reconcile runs with the (older) snapshot.
    let node = Node::new(4);
    let mut c = node.client();
    c.alloc(&AllocRequest::new(job("torque:1.ce"), 1000, 1)).unwrap();
    let before = c.status().unwrap().generation;
    assert_eq!(before, 1);
    let snapshot = vec![job("torque:1.ce")];
    let new = c.alloc(&AllocRequest::new(job("torque:2.ce"), 1000, 2)).unwrap();
    assert_eq!(c.status().unwrap().generation, 2, "every new allocation takes the next number");
    // Stale too: a job that was in no snapshot and is older than it goes.
    let r = c
        .reconcile(&ReconcileRequest { live_jobs: snapshot.clone(), lrms: Some("torque".into()), as_of: Some(before) })
        .unwrap();
    assert!(r.released.is_empty(), "{:?}", r.released);
    assert_eq!(c.env(&job("torque:2.ce")).unwrap().devices, new.devices);
    // Without as_of the same list frees it: as_of is what protects it.
    let r = c.reconcile(&ReconcileRequest { live_jobs: snapshot, lrms: Some("torque".into()), as_of: None }).unwrap();
    assert_eq!(r.released, vec![job("torque:2.ce")]);
    // The generation is durable: a restarted daemon continues from it.
    let mut node = node;
    drop(c);
    node.kill();
    node.start();
    let mut c = node.client();
    assert_eq!(c.status().unwrap().generation, 2);
    c.alloc(&AllocRequest::new(job("torque:3.ce"), 1000, 1)).unwrap();
    assert_eq!(c.status().unwrap().generation, 3);
}

#[test]
fn accounting_with_user_numbers_out_of_range_is_refused_not_a_panic() {
    // since = i64::MAX once made a debug build panic (multiply with
    // overflow) and a release build answer since after until.
    let node = Node::new(2);
    let reply = node.raw(b"{\"v\":1,\"op\":\"accounting\",\"since\":9223372036854775807}\n");
    assert!(reply.contains("\"bad_request\"") && reply.contains("since"), "{reply}");
    // A valid since in the future, until left to default to now.
    let future = cder_protocol::MAX_UNIX_TIME;
    let reply = node.raw(format!("{{\"v\":1,\"op\":\"accounting\",\"since\":{future}}}\n").as_bytes());
    assert!(reply.contains("\"bad_request\"") && reply.contains("since") && reply.contains("after until"), "{reply}");
    // The widest valid period: no overflow, a ratio in [0, 1].
    let mut c = node.client();
    c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 1)).unwrap();
    let a = c.accounting(&AccountingRequest { since: Some(0), until: Some(future) }).unwrap();
    assert!(a.utilisation.ratio >= 0.0 && a.utilisation.ratio <= 1.0, "{:?}", a.utilisation);
    assert!(a.utilisation.since <= a.utilisation.until);
    assert!(node.client().ping().is_ok(), "the daemon survived");
}

#[test]
fn accounting_records_and_utilisation() {
    let node = Node::new(4);
    let mut c = node.client();
    c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    c.release(&job("slurm:1")).unwrap();
    c.alloc(&AllocRequest::new(job("slurm:2"), 1001, 1)).unwrap();
    let a = c.accounting(&AccountingRequest::default()).unwrap();
    assert_eq!(a.records.len(), 3);
    assert!(a.records[..2].iter().all(|r| r.job == job("slurm:1") && r.end.is_some() && r.uid == 1000));
    assert!(a.records[2].end.is_none());
    assert_eq!(a.utilisation.pool_size, 4);
    let u = &a.utilisation;
    let expected = if u.until > u.since { u.device_seconds as f64 / (4.0 * (u.until - u.since) as f64) } else { 0.0 };
    assert!((u.ratio - expected).abs() < 1e-9);
    assert!((0.0..=1.0).contains(&u.ratio));
    // A window in the past holds nothing.
    let old = c.accounting(&AccountingRequest { since: Some(0), until: Some(1000) }).unwrap();
    assert!(old.records.is_empty());
    assert_eq!(old.utilisation.ratio, 0.0);
}

#[test]
fn state_survives_sigkill_and_restart() {
    let mut node = Node::new(4);
    let a = node.client().alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    node.client().drain("gpgpu:3", "bad").unwrap();
    let before = node.status();
    node.kill();
    node.start();
    assert_eq!(node.status(), before);
    assert_eq!(node.client().alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap(), a);
}

#[test]
fn enforcement_changes_and_restores_device_files() {
    if !require(is_root(), "root (to chown device files)") {
        return;
    }
    let node = Node::with(
        4,
        Options {
            enforcement: Some(
                "device_files = true\njob_mode = \"0600\"\nidle_owner = 0\nidle_group = 0\nidle_mode = \"0666\"".into(),
            ),
            ..Options::default()
        },
    );
    let meta = |i: usize| {
        let m = std::fs::metadata(&node.devices[i]).unwrap();
        (m.uid(), m.mode() & 0o7777)
    };
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new(job("slurm:1"), 4321, 2)).unwrap();
    for d in &a.devices {
        assert_eq!(meta(d.index as usize), (4321, 0o600));
    }
    assert_eq!(meta(2), (0, 0o666));
    c.release(&job("slurm:1")).unwrap();
    for i in 0..4 {
        assert_eq!(meta(i), (0, 0o666), "device {i} after release");
    }
    // Reconcile also restores.
    let b = c.alloc(&AllocRequest::new(job("slurm:2"), 4321, 1)).unwrap();
    let i = b.devices[0].index as usize;
    assert_eq!(meta(i), (4321, 0o600));
    c.reconcile(&ReconcileRequest { live_jobs: vec![], lrms: None, as_of: None }).unwrap();
    assert_eq!(meta(i), (0, 0o666));
    // A file tampered with while free is restored by reconcile, too.
    std::os::unix::fs::chown(&node.devices[3], Some(4321), None).unwrap();
    c.reconcile(&ReconcileRequest { live_jobs: vec![], lrms: None, as_of: None }).unwrap();
    assert_eq!(meta(3), (0, 0o666));
    // A device file that cannot be changed (a dangling link: a removed file
    // is drained before anything is chosen, see faults.rs): enforcement
    // fails, the allocation is undone.
    std::fs::remove_file(&node.devices[0]).unwrap();
    std::os::unix::fs::symlink(node.dir.path().join("gone"), &node.devices[0]).unwrap();
    let e = c.alloc(&AllocRequest::new(job("slurm:3"), 4321, 4)).unwrap_err();
    assert_eq!(code(e), ErrorCode::Internal);
    assert_eq!(c.status().unwrap().counts["gpgpu"].free, 4);
    for i in 1..4 {
        assert_eq!(meta(i), (0, 0o666), "device {i} after undo");
    }
}

#[test]
fn a_device_that_vanishes_keeps_its_job_until_released() {
    let mut node = Node::new(4);
    let a = node.client().alloc(&AllocRequest::new(job("slurm:1"), 1000, 4)).unwrap();
    assert_eq!(a.devices.len(), 4);
    node.kill();
    // Device 3 is no longer found by discovery.
    let text = std::fs::read_to_string(&node.config).unwrap();
    let cut = text.rfind("[[cder.device]]").unwrap();
    std::fs::write(&node.config, &text[..cut]).unwrap();
    node.start();
    let s = node.status();
    let gone = &s.devices[3];
    assert_eq!((gone.state, gone.job.as_ref()), (DeviceState::Allocated, Some(&job("slurm:1"))));
    assert_eq!(node.client().env(&job("slurm:1")).unwrap().env.get("CUDA_VISIBLE_DEVICES"), Some("0,1,2,3"));
    node.client().release(&job("slurm:1")).unwrap();
    let s = node.status();
    assert_eq!(s.devices[3].state, DeviceState::Unhealthy);
    assert!(s.devices[3].reason.as_deref().unwrap().contains("not found"), "{:?}", s.devices[3].reason);
    assert_eq!((s.counts["gpgpu"].free, s.counts["gpgpu"].unhealthy), (3, 1));
    let e = node.client().alloc(&AllocRequest::new(job("slurm:2"), 1000, 4)).unwrap_err();
    assert_eq!(code(e), ErrorCode::Insufficient);
}

#[test]
fn sigterm_stops_cleanly_and_keeps_the_state() {
    let mut node = Node::new(4);
    node.client().alloc(&AllocRequest::new(job("slurm:1"), 1000, 2)).unwrap();
    let before = node.status();
    let status = node.terminate();
    assert!(status.success(), "{status}; log:\n{}", node.log());
    assert!(!node.socket.exists(), "the socket is removed on a clean stop");
    node.start();
    assert_eq!(node.status(), before);
}

#[test]
fn socket_mode_is_applied_and_a_second_daemon_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let node = Node::with(2, Options { socket_mode: Some("0660".into()), ..Options::default() });
    let mode = std::fs::metadata(&node.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    if is_root() {
        // With 0660 and the socket owned by root:root, nobody cannot even connect.
        let out = as_uid(65534, &[common::CDERD.as_ref(), "--version".as_ref()]).output().unwrap();
        assert!(out.status.success(), "setpriv works");
        let reply = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "daemon::client_helper", "--nocapture", "--quiet"])
            .env("CDER_TEST_SOCKET", &node.socket)
            .env("CDER_TEST_LINE", r#"{"v":1,"op":"status"}"#)
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&reply.stdout), String::from_utf8_lossy(&reply.stderr));
        assert!(!reply.status.success() && said.contains("Permission denied"), "{said}");
    }
    // A second daemon on the same socket refuses to start, and the first keeps serving.
    let second = std::process::Command::new(common::CDERD).arg("--config").arg(&node.config).output().unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another cderd is already listening"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(node.client().ping().unwrap().protocol, 1);
}

#[test]
fn a_file_that_is_not_a_socket_is_never_replaced() {
    let mut node = Node::new(2);
    node.kill();
    std::fs::remove_file(&node.socket).unwrap();
    std::fs::write(&node.socket, b"precious").unwrap();
    let out = std::process::Command::new(common::CDERD).arg("--config").arg(&node.config).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a socket"), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&node.socket).unwrap(), b"precious");
}

/// Whether `uid` can open `path` for reading and writing (the kernel's
/// answer: mode, ACL), from a shell of that uid alone.
fn opens_as(uid: u32, path: &std::path::Path) -> bool {
    let argv = ["sh".as_ref(), "-c".as_ref(), ": <> \"$0\"".as_ref(), path.as_os_str()];
    as_uid(uid, &argv).stderr(std::process::Stdio::null()).status().unwrap().success()
}

/// A shared GPU is open to exactly its sharers: uid 65534, which holds no
/// share, cannot open it even outside any device cgroup (an ssh login the
/// batch system did not confine), while the file belongs to nobody's job.
#[test]
fn shared_devices_open_to_exactly_their_sharers_until_the_last_leaves_and_survive_a_restart() {
    if !require(is_root(), "root (to chown device files and open them as other uids)") {
        return;
    }
    let mut node = Node::with(
        2,
        Options {
            enforcement: Some(
                "device_files = true\njob_mode = \"0600\"\nidle_owner = 0\nidle_group = 0\nidle_mode = \"0600\"\n\
                 nvml_exclusive_process = false\n[node.sharing]\nshares_per_gpu = 2"
                    .into(),
            ),
            ..Options::default()
        },
    );
    let gpu0 = node.devices[0].clone();
    let meta = || {
        let m = std::fs::metadata(&gpu0).unwrap();
        (m.uid(), m.mode() & 0o7777)
    };
    let sharers = || -> Vec<u32> {
        cderd::acl::get(&gpu0).unwrap().map(|a| a.users.keys().copied().collect()).unwrap_or_default()
    };
    let share = |j: &str, uid: u32| AllocRequest {
        devices: Some(vec![0]),
        shares: Some(1),
        ..AllocRequest::new(job(j), uid, 1)
    };
    let mut c = node.client();
    let a = c.alloc(&share("slurm:1", 4321)).unwrap();
    assert_eq!((a.shares, a.devices.len()), (Some(1), 1));
    c.alloc(&share("slurm:2", 4322)).unwrap();
    assert!(!opens_as(65534, &gpu0), "uid 65534 holds no share of gpgpu:0 and opened it");
    assert!(opens_as(4321, &gpu0) && opens_as(4322, &gpu0), "every sharer opens it");
    // Two uids open it: root keeps it, with an ACL entry for each sharer.
    assert_eq!(meta(), (0, 0o660), "group bits are the ACL's mask");
    assert_eq!(sharers(), [4321, 4322]);
    let e = c.alloc(&share("slurm:3", 4323)).unwrap_err();
    assert_eq!(code(e), ErrorCode::Conflict);
    assert!(!opens_as(4323, &gpu0), "a refused sharer");
    let whole = AllocRequest { devices: Some(vec![0]), ..AllocRequest::new(job("slurm:4"), 4324, 1) };
    assert_eq!(code(c.alloc(&whole).unwrap_err()), ErrorCode::Conflict);
    let status = c.status().unwrap();
    let listed: Vec<(String, u32, u32)> = status.shares.iter().map(|s| (s.job.to_string(), s.uid, s.shares)).collect();
    assert_eq!(listed, [("slurm:1".to_string(), 4321, 1), ("slurm:2".to_string(), 4322, 1)]);
    assert_eq!(status.counts["gpgpu"].allocated, 1);
    // A reconcile that keeps both leaves them their access.
    c.reconcile(&ReconcileRequest { live_jobs: vec![job("slurm:1"), job("slurm:2")], lrms: None, as_of: None })
        .unwrap();
    assert_eq!((meta(), sharers()), ((0, 0o660), vec![4321, 4322]), "after a reconcile");
    // A restart re-asserts the sharers' ACL, not the idle mode.
    node.kill();
    node.start();
    assert_eq!((meta(), sharers()), ((0, 0o660), vec![4321, 4322]), "after a restart");
    let mut c = node.client();
    assert_eq!(c.status().unwrap().shares.len(), 2);
    c.release(&job("slurm:1")).unwrap();
    assert_eq!((meta(), sharers()), ((0, 0o660), vec![4322]), "one sharer left");
    assert!(!opens_as(4321, &gpu0), "a sharer that left keeps no access");
    assert!(opens_as(4322, &gpu0));
    c.release(&job("slurm:2")).unwrap();
    assert_eq!((meta(), sharers()), ((0, 0o600), vec![]), "idle again once the last sharer left");
    assert!(!opens_as(4322, &gpu0));
    assert!(c.status().unwrap().shares.is_empty());
}
