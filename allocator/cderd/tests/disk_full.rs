//! The state directory on a real file system that fills up (a 2 MiB
//! tmpfs: ENOSPC) or under a quota that is used up (a btrfs qgroup:
//! EDQUOT): an `alloc` is refused with "database <path>: database or disk
//! is full; nothing was changed", the ledger is what it was, cderd keeps
//! answering, and once space is freed the next `alloc` succeeds with no
//! restart.

use crate::common;

use cder_model::JobKey;
use cder_protocol::{AllocRequest, ClientError, DeviceState, ErrorCode};
use cder_testkit::{require_quota_dir, require_tmpfs, QuotaDir, Tmpfs};
use common::{live_owners, Node, Options};

fn job(s: &str) -> JobKey {
    s.parse().unwrap()
}

#[test]
fn a_full_disk_refuses_alloc_keeps_the_ledger_and_recovers_without_restart() {
    if !require_tmpfs() {
        return;
    }
    let disk = Tmpfs::mount(2 << 20).unwrap();
    refuses_keeps_and_recovers(
        &disk.path().join("state"),
        || disk.fill(),
        || disk.unfill(),
        "database or disk is full; nothing was changed",
    );
}

/// SQLite calls EDQUOT a "disk I/O error"; cderd still says the disk is
/// full, and why. The quota is a btrfs qgroup (the one quota this kernel
/// offers that holds root). The commit's WAL write is refused before the
/// shared-memory index is touched; a btrfs that is full as a whole is not
/// tested: there writes to SQLite's mmapped `-shm` can end in SIGBUS
/// (docs/testing.md, "Faults").
#[test]
fn a_used_up_quota_is_refused_as_a_full_disk_and_recovers_without_restart() {
    if !require_quota_dir() {
        return;
    }
    let disk = QuotaDir::mount(4 << 20).unwrap();
    refuses_keeps_and_recovers(
        &disk.path().join("state"),
        || disk.fill(),
        || disk.unfill(),
        "database or disk is full (disk quota exceeded); nothing was changed",
    );
}

fn refuses_keeps_and_recovers(
    state: &std::path::Path,
    fill: impl Fn() -> Result<u64, String>,
    unfill: impl Fn() -> Result<(), String>,
    expected: &str,
) {
    let db = state.join("cderd.db");
    let mut node = Node::with(4, Options { state_dir: Some(state.to_path_buf()), ..Options::default() });
    let mut c = node.client();
    c.alloc(&AllocRequest::new(job("slurm:1"), 1000, 1)).unwrap();
    let filled = fill().unwrap();
    assert!(filled > 0, "the file system had no room left before the test filled it");

    // The WAL may still have room for a few commits; the history grows
    // with every alloc/release, so a refusal must come.
    let mut refusal = None;
    for n in 2..2000 {
        let key = job(&format!("slurm:{n}"));
        let owners = live_owners(&db);
        let before = c.status().unwrap().devices;
        match c.alloc(&AllocRequest::new(key.clone(), 1000, 1)) {
            Ok(_) => {
                if let Err(e) = c.release(&key) {
                    // A refused release keeps the record: the job still holds its device.
                    assert!(e.to_string().contains(expected), "{e}");
                    assert!(live_owners(&db).iter().any(|(_, j)| *j == key.to_string()), "{e}");
                    refusal = Some((key, e, owners, before, true));
                    break;
                }
            }
            Err(e) => {
                refusal = Some((key, e, owners, before, false));
                break;
            }
        }
    }
    let (key, err, owners, before, held) = refusal.expect("no request was refused on a full disk");
    eprintln!("refused at {key} ({}): {err}", if held { "release" } else { "alloc" });
    let ClientError::Server(reply) = &err else { panic!("not a refusal: {err}") };
    assert_eq!(reply.code, ErrorCode::Internal, "{err}");
    assert!(reply.message.contains(expected), "{}", reply.message);
    assert!(reply.message.contains(&db.display().to_string()), "the refusal names the database: {}", reply.message);
    if !held {
        // Nothing was changed: the same live owners and the same states.
        assert_eq!(live_owners(&db), owners);
        assert_eq!(c.status().unwrap().devices, before);
        assert!(c.env(&key).is_err(), "a refused alloc left a record for {key}");
    }
    // cderd keeps answering on a full disk.
    assert!(node.alive(), "cderd died on a full disk; log:\n{}", node.log());
    let s = c.status().unwrap();
    assert!(s.devices.iter().any(|d| d.state == DeviceState::Allocated), "slurm:1 lost its device: {s:?}");

    // Space again: the next request succeeds on the same daemon.
    unfill().unwrap();
    if held {
        c.release(&key).unwrap();
    }
    let next = job("slurm:99999");
    let a = c.alloc(&AllocRequest::new(next.clone(), 1000, 1)).unwrap();
    assert_eq!(a.devices.len(), 1);
    assert!(live_owners(&db).iter().any(|(_, j)| *j == next.to_string()));
    assert!(live_owners(&db).iter().any(|(_, j)| j == "slurm:1"), "slurm:1's record survived");
    assert!(node.alive());
    // And it stays on disk across a crash.
    node.kill();
    node.start();
    assert!(live_owners(&db).iter().any(|(_, j)| *j == next.to_string()));
    drop(node);
}
