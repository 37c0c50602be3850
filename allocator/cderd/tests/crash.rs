//! Crash test: a client runs random alloc / release / drain / resume while
//! the real daemon is SIGKILLed at random moments, 60 times, and restarted.
//! After every restart: no device belongs to two jobs, every acknowledged
//! change is still there, and `status` agrees with the database file.
//! The seed is printed; `CDER_CRASH_SEED=<n>` replays a run.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cder_model::JobKey;
use cder_protocol::{AllocRequest, Client, ClientError, DeviceState};
use common::{live_owners, Node, Rng, CDERD};

const ITERATIONS: usize = 60;
const JOBS: u64 = 12;
const DEVICES: u32 = 8;

/// What the client knows for certain, from acknowledged replies.
#[derive(Debug, Clone, PartialEq)]
enum Known {
    /// The job holds exactly these device UUIDs (empty: nothing).
    Holds(BTreeSet<String>),
    /// A request about it was in flight when the daemon died.
    Uncertain,
}

#[derive(Default)]
struct Model {
    jobs: BTreeMap<u64, Known>,
    /// Device index → drained, or None when a drain/resume was in flight.
    drained: BTreeMap<u32, Option<bool>>,
    acked: usize,
}

fn key(j: u64) -> JobKey {
    format!("slurm:{j}").parse().unwrap()
}

/// Random operations until the connection dies; updates `model` as replies arrive.
fn client_loop(socket: std::path::PathBuf, model: Arc<Mutex<Model>>, mut rng: Rng) {
    let Ok(mut c) = Client::connect(&socket, Duration::from_secs(10)) else { return };
    loop {
        let op = rng.below(100);
        let j = rng.below(JOBS);
        let d = rng.below(u64::from(DEVICES)) as u32;
        let count = 1 + rng.below(3) as u32;
        // Mark first: if the daemon dies before the reply, the outcome is unknown.
        {
            let mut m = model.lock().unwrap();
            if op < 75 {
                m.jobs.insert(j, Known::Uncertain);
            } else {
                m.drained.insert(d, None);
            }
        }
        let dead = |e: &ClientError| e.is_unavailable();
        let outcome = if op < 40 {
            match c.alloc(&AllocRequest::new(key(j), 1000 + j as u32, count)) {
                Ok(a) => Outcome::Holds(j, a.devices.into_iter().map(|d| d.uuid).collect()),
                Err(e) if dead(&e) => return,
                // Refused (insufficient / conflict): nothing changed; learn the truth from env.
                Err(_) => match c.env(&key(j)) {
                    Ok(a) => Outcome::Holds(j, a.devices.into_iter().map(|d| d.uuid).collect()),
                    Err(e) if dead(&e) => return,
                    Err(_) => Outcome::Holds(j, BTreeSet::new()),
                },
            }
        } else if op < 75 {
            match c.release(&key(j)) {
                Ok(_) => Outcome::Holds(j, BTreeSet::new()),
                Err(e) if dead(&e) => return,
                Err(e) => panic!("release refused: {e}"),
            }
        } else if op < 88 {
            match c.drain(&format!("gpgpu:{d}"), "crash test") {
                Ok(_) => Outcome::Drained(d, true),
                Err(e) if dead(&e) => return,
                Err(e) => panic!("drain refused: {e}"),
            }
        } else {
            match c.resume(&format!("gpgpu:{d}")) {
                Ok(_) => Outcome::Drained(d, false),
                Err(e) if dead(&e) => return,
                Err(e) => panic!("resume refused: {e}"),
            }
        };
        let mut m = model.lock().unwrap();
        match outcome {
            Outcome::Holds(j, held) => m.jobs.insert(j, Known::Holds(held)).map(|_| ()),
            Outcome::Drained(d, drained) => m.drained.insert(d, Some(drained)).map(|_| ()),
        };
        m.acked += 1;
    }
}

/// What an acknowledged reply established.
enum Outcome {
    Holds(u64, BTreeSet<String>),
    Drained(u32, bool),
}

/// Checks the restarted daemon against the model, then resets the model
/// to the daemon's state (which is now certain).
fn verify_and_resync(node: &Node, model: &mut Model, iteration: usize, seed: u64) {
    let ctx = format!("iteration {iteration}, seed {seed}");
    // The daemon's own consistency check, on the database at rest… it runs
    // while the daemon is up too, since SQLite readers do not block in WAL.
    let check = std::process::Command::new(CDERD).arg("--config").arg(&node.config).arg("--check").output().unwrap();
    assert!(check.status.success(), "{ctx}: cderd --check: {}", String::from_utf8_lossy(&check.stderr));

    let status = node.status();
    let mut owners_from_status: BTreeMap<String, String> = BTreeMap::new();
    for d in &status.devices {
        if let Some(job) = &d.job {
            assert_eq!(d.state, DeviceState::Allocated, "{ctx}");
            owners_from_status.insert(d.uuid.clone(), job.to_string());
        }
    }
    // Status agrees with the database, and no device has two live owners.
    let from_db = live_owners(&node.db());
    let devices_in_db: BTreeSet<&String> = from_db.iter().map(|(d, _)| d).collect();
    assert_eq!(devices_in_db.len(), from_db.len(), "{ctx}: a device has two live owners in the database: {from_db:?}");
    assert_eq!(
        from_db.into_iter().collect::<BTreeMap<_, _>>(),
        owners_from_status,
        "{ctx}: status disagrees with the database"
    );
    let c = &status.counts["gpgpu"];
    assert_eq!(c.total, c.free + c.allocated + c.offline + c.unhealthy, "{ctx}");

    // Every acknowledged change is still there.
    for (j, known) in &model.jobs {
        if let Known::Holds(held) = known {
            let actual: BTreeSet<String> = owners_from_status
                .iter()
                .filter(|(_, job)| **job == key(*j).to_string())
                .map(|(d, _)| d.clone())
                .collect();
            assert_eq!(&actual, held, "{ctx}: job slurm:{j} lost or gained devices");
        }
    }
    let conn = rusqlite::Connection::open_with_flags(node.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    for (d, known) in &model.drained {
        let drained_in_db: bool =
            conn.query_row("SELECT drained FROM devices WHERE idx = ?1", [d], |r| r.get(0)).unwrap();
        let dev = &status.devices[*d as usize];
        let offline_in_status =
            dev.state == DeviceState::Offline || (dev.state == DeviceState::Allocated && dev.reason.is_some());
        assert_eq!(
            drained_in_db, offline_in_status,
            "{ctx}: device {d} drain state differs between status and database"
        );
        if let Some(expected) = known {
            assert_eq!(drained_in_db, *expected, "{ctx}: acknowledged drain/resume of device {d} was lost");
        }
    }

    // Resync: the daemon's state is now the certain truth.
    model.jobs.clear();
    for j in 0..JOBS {
        let held =
            owners_from_status.iter().filter(|(_, job)| **job == key(j).to_string()).map(|(d, _)| d.clone()).collect();
        model.jobs.insert(j, Known::Holds(held));
    }
    for d in &status.devices {
        model.drained.insert(d.index, Some(d.state == DeviceState::Offline || d.reason.is_some()));
    }
}

#[test]
fn sigkill_at_random_points_loses_nothing_acknowledged() {
    let seed = std::env::var("CDER_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1);
    eprintln!("crash test seed {seed} (CDER_CRASH_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let mut node = Node::new(DEVICES);
    let mut model = Model::default();
    for j in 0..JOBS {
        model.jobs.insert(j, Known::Holds(BTreeSet::new()));
    }
    for d in 0..DEVICES {
        model.drained.insert(d, Some(false));
    }
    let mut total_acked = 0;
    let mut killed_mid_request = 0;
    for iteration in 0..ITERATIONS {
        let shared = Arc::new(Mutex::new(std::mem::take(&mut model)));
        let worker_rng = Rng(rng.next() | 1);
        let socket = node.socket.clone();
        let worker_model = Arc::clone(&shared);
        let worker = std::thread::spawn(move || client_loop(socket, worker_model, worker_rng));
        // Kill anywhere from immediately to a few dozen requests in.
        std::thread::sleep(Duration::from_micros(rng.below(40_000)));
        node.kill();
        worker.join().expect("client thread panicked");
        model = Arc::try_unwrap(shared).ok().unwrap().into_inner().unwrap();
        total_acked += std::mem::take(&mut model.acked);
        let in_flight =
            model.jobs.values().any(|k| *k == Known::Uncertain) || model.drained.values().any(Option::is_none);
        killed_mid_request += usize::from(in_flight);
        node.start();
        verify_and_resync(&node, &mut model, iteration, seed);
    }
    eprintln!("{ITERATIONS} kills ({killed_mid_request} with a request in flight), {total_acked} acknowledged requests checked");
    assert!(killed_mid_request > 0, "no kill landed during a request");
    assert!(
        total_acked > ITERATIONS,
        "too few requests were acknowledged ({total_acked}) for the test to mean anything"
    );
}
