//! The health watch of the real cderd binary. The NVIDIA driver is the fake
//! NVML library built in this workspace (loaded through nvml-wrapper's
//! lib_path, as the real one is; no GPU exists on CI); events are injected
//! through its `CDER_FAKE_NVML_EVENTS` control file: an Xid critical error,
//! a double-bit ECC error (event and counter), a GPU fallen off the bus.

use crate::common;

use std::time::Duration;

use cder_fake_nvml::{FakeDevice, FakeEvent, FakeNvml};
use cder_protocol::{AccountingRequest, AllocRequest, DeviceState, DeviceStatus};
use common::Node;

fn fake_device(i: u32) -> FakeDevice {
    FakeDevice::a100("4ea17400", i, 40960)
}

/// Waits (generously: the machine may be loaded) until device `i` matches.
fn wait_for(node: &Node, i: u32, what: &str, ok: impl Fn(&DeviceStatus) -> bool) -> DeviceStatus {
    let mut last = None;
    cder_testkit::wait_for_value(Duration::from_secs(180), Duration::from_millis(100), || {
        let status = node.status();
        let device = status.devices.iter().find(|d| d.uuid == fake_device(i).uuid).expect("device in status").clone();
        if ok(&device) {
            return Some(device);
        }
        last = Some(device);
        None
    })
    .unwrap_or_else(|| panic!("device {i} never became {what}: {last:?}\nlog:\n{}", node.log()))
}

/// Waits (as generously as [`wait_for`]) until cderd's log says `what`.
fn wait_for_log(node: &Node, what: &str, ok: impl Fn(&str) -> bool) {
    let logged = cder_testkit::wait_for_value(Duration::from_secs(180), Duration::from_millis(100), || {
        ok(&node.log()).then_some(())
    });
    assert!(logged.is_some(), "cderd never logged {what}:\n{}", node.log());
}

#[test]
fn failing_gpus_are_drained_with_the_reason_and_stay_drained() {
    let (mut node, events) = watched_node(4, "", &[]);
    let event = |i: u32| FakeEvent { uuid: fake_device(i).uuid, ..Default::default() };

    // 1. An Xid on a GPU a job holds: drained with the Xid, the job keeps it.
    let mut c = node.client();
    let a = c.alloc(&AllocRequest::new("slurm:1".parse().unwrap(), 4321, 1)).unwrap();
    assert_eq!(a.devices[0].uuid, fake_device(0).uuid);
    FakeEvent { xid: Some(79), ..event(0) }.append(&events).unwrap();
    let d0 = wait_for(&node, 0, "drained by Xid 79", |d| d.reason.as_deref() == Some("Xid 79"));
    assert_eq!(
        (d0.state, d0.job.as_ref().map(|j| j.to_string())),
        (DeviceState::Allocated, Some("slurm:1".to_string()))
    );
    // The drain is durable before it is logged: wait for the admin's hint.
    wait_for_log(&node, "the scontrol hint", |log| {
        log.contains("scontrol update nodename=") && log.contains("state=drain") && log.contains("Xid 79")
    });

    // 2. A double-bit ECC error on a free GPU: offline at once.
    FakeEvent { double_bit_ecc: true, ..event(1) }.append(&events).unwrap();
    let d1 = wait_for(&node, 1, "drained by ECC", |d| {
        d.reason.as_deref().is_some_and(|r| r.starts_with("double-bit ECC error"))
    });
    assert_eq!(d1.state, DeviceState::Offline);

    // 3. Released, the Xid GPU goes offline; only the healthy ones are handed out.
    c.release(&"slurm:1".parse().unwrap()).unwrap();
    assert_eq!(wait_for(&node, 0, "offline", |d| d.job.is_none()).state, DeviceState::Offline);
    let b = c.alloc(&AllocRequest::new("slurm:2".parse().unwrap(), 4321, 2)).unwrap();
    let mut got: Vec<&str> = b.devices.iter().map(|d| d.uuid.as_str()).collect();
    got.sort();
    assert_eq!(got, [fake_device(2).uuid.as_str(), fake_device(3).uuid.as_str()]);
    assert!(c.alloc(&AllocRequest::new("slurm:3".parse().unwrap(), 4321, 1)).is_err(), "a drained GPU was handed out");
    c.release(&"slurm:2".parse().unwrap()).unwrap();

    // 4. The drains survive a restart (and old events are not replayed).
    node.terminate();
    node.start();
    let status = node.status();
    let reason = |i: u32| status.devices.iter().find(|d| d.uuid == fake_device(i).uuid).and_then(|d| d.reason.clone());
    assert_eq!(reason(0).as_deref(), Some("Xid 79"));
    assert!(reason(1).is_some_and(|r| r.starts_with("double-bit ECC error")), "{:?}", reason(1));
    assert_eq!(reason(2), None);

    // 5. Only an operator's undrain returns it; the watch does not drain it again.
    let mut c = node.client();
    c.resume(&fake_device(1).uuid).unwrap();
    assert_eq!(wait_for(&node, 1, "free", |d| d.reason.is_none()).state, DeviceState::Free);

    // 6. A GPU fallen off the bus (found by polling): drained as lost.
    FakeEvent { lost: true, ..event(2) }.append(&events).unwrap();
    let d2 = wait_for(&node, 2, "drained as lost", |d| d.reason.as_deref().is_some_and(|r| r.starts_with("GPU lost")));
    assert_eq!(d2.state, DeviceState::Offline);
    assert_eq!(node.status().devices.iter().find(|d| d.uuid == fake_device(1).uuid).unwrap().state, DeviceState::Free);

    // A restart with the GPU still lost: cderd starts, the lost GPU stays out of service.
    node.terminate();
    node.start();
    let lost = node.status().devices.into_iter().find(|d| d.uuid == fake_device(2).uuid).unwrap();
    assert_ne!(lost.state, DeviceState::Free, "{lost:?}");
    assert!(lost.reason.as_deref().is_some_and(|r| r.starts_with("GPU lost")), "{lost:?}");
    let mut c = node.client();

    // 7. Accounting lists every drain: the Xid and the loss still open, the ECC one closed by the undrain.
    let accounting = c.accounting(&AccountingRequest::default()).unwrap();
    let drains: Vec<(String, bool)> = accounting.drains.iter().map(|d| (d.reason.clone(), d.end.is_some())).collect();
    assert_eq!(drains.len(), 3, "{drains:?}");
    assert_eq!(drains[0], ("Xid 79".to_string(), false));
    assert!(drains[1].0.starts_with("double-bit ECC error") && drains[1].1, "{drains:?}");
    assert!(drains[2].0.starts_with("GPU lost") && !drains[2].1, "{drains:?}");
    assert_eq!(accounting.drains[0].uuid, fake_device(0).uuid);
}

/// `[node.health] return_after_s`: an Xid drain ends by itself once the GPU
/// has polled healthy that long; a double-bit ECC drain does not.
#[test]
fn the_return_policy_gives_back_xid_drains_only() {
    let (node, events) = watched_node(2, "return_after_s = 1", &[]);
    FakeEvent { uuid: fake_device(1).uuid, double_bit_ecc: true, ..Default::default() }.append(&events).unwrap();
    wait_for(&node, 1, "drained by ECC", |d| {
        d.reason.as_deref().is_some_and(|r| r.starts_with("double-bit ECC error"))
    });
    FakeEvent { uuid: fake_device(0).uuid, xid: Some(74), ..Default::default() }.append(&events).unwrap();
    wait_for(&node, 0, "drained by Xid 74", |d| d.reason.as_deref() == Some("Xid 74"));
    let back = wait_for(&node, 0, "returned", |d| d.reason.is_none());
    assert_eq!(back.state, DeviceState::Free);
    let ecc = node.status().devices.into_iter().find(|d| d.uuid == fake_device(1).uuid).unwrap();
    assert_eq!(ecc.state, DeviceState::Offline, "{ecc:?}");
    let drains = node.client().accounting(&AccountingRequest::default()).unwrap().drains;
    assert!(drains.iter().any(|d| d.reason == "Xid 74" && d.end.is_some()), "{drains:?}");
}

/// A node of `n` fake GPUs with `[node.health] interval_s = 1` plus `health`
/// lines; the events file may already hold lines (errors from before start).
fn watched_node(n: u32, health: &str, events_before: &[FakeEvent]) -> (Node, std::path::PathBuf) {
    let library = cder_fake_nvml::library_path().expect("libcder_fake_nvml.so is built beside the test binary");
    let dir = tempfile::tempdir().unwrap();
    let machine = dir.path().join("machine.json");
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, b"").unwrap();
    for e in events_before {
        e.append(&events).unwrap();
    }
    FakeNvml { devices: (0..n).map(fake_device).collect(), fail: Vec::new() }.write(&machine).unwrap();
    let devices: Vec<_> = (0..n).map(|i| dir.path().join(format!("nvidia{i}"))).collect();
    for d in &devices {
        std::fs::write(d, b"").unwrap();
    }
    let me = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let text = format!(
        "[node]\nsocket = {:?}\nstate_dir = {:?}\nsocket_mode = \"0666\"\noperators = [\"{me}\"]\n\
         [node.health]\ninterval_s = 1\n{health}\n\
         [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = {:?}\ndevice_path = \"{}/nvidia{{minor}}\"\n",
        dir.path().join("cderd.sock"),
        dir.path().join("state"),
        library,
        dir.path().display()
    );
    let env = vec![("CDER_FAKE_NVML".to_string(), machine), ("CDER_FAKE_NVML_EVENTS".to_string(), events.clone())];
    (Node::custom(dir, &text, devices, env), events)
}

fn reason_of(node: &Node, i: u32) -> Option<String> {
    node.status().devices.into_iter().find(|d| d.uuid == fake_device(i).uuid).and_then(|d| d.reason)
}

/// Application Xids (NVIDIA's catalogue: the job's fault) are logged, not
/// drained; hardware ones drain; `[node.health] drain_xids` narrows the set.
#[test]
fn application_xids_are_logged_and_hardware_xids_drain() {
    let (node, events) = watched_node(2, "", &[]);
    let xid = |i: u32, n: u64| {
        FakeEvent { uuid: fake_device(i).uuid, xid: Some(n), ..Default::default() }.append(&events).unwrap()
    };
    // Events come in order: when the Xid 48 drain shows, the Xid 13 and 31 before it were handled.
    xid(0, 13);
    xid(0, 31);
    xid(0, 48);
    wait_for(&node, 0, "drained by Xid 48", |d| d.reason.is_some());
    assert_eq!(reason_of(&node, 0).as_deref(), Some("Xid 48"), "an application Xid drained:\n{}", node.log());
    let log = node.log();
    assert!(log.contains("Xid 13 is an application error") && log.contains("Xid 31 is an application error"), "{log}");
    xid(1, 43);
    xid(1, 94);
    assert_eq!(wait_for(&node, 1, "drained by Xid 94", |d| d.reason.is_some()).reason.as_deref(), Some("Xid 94"));
    drop(node);

    // Only the listed Xids drain: 94 is logged, 79 drains.
    let (node, events) = watched_node(1, "drain_xids = [79]", &[]);
    for n in [94, 79] {
        FakeEvent { uuid: fake_device(0).uuid, xid: Some(n), ..Default::default() }.append(&events).unwrap();
    }
    assert_eq!(wait_for(&node, 0, "drained by Xid 79", |d| d.reason.is_some()).reason.as_deref(), Some("Xid 79"));
    assert!(node.log().contains("Xid 94 is an application error"), "{}", node.log());
}

/// An uncorrected ECC count already non-zero when cderd first starts is
/// the baseline: no drain, at that start or any restart. A count that grew
/// while cderd was down drains at start; an operator's undrain after it is
/// not undone by the next poll.
#[test]
fn ecc_errors_from_before_drain_only_when_the_count_grew() {
    let dbe = |i: u32| FakeEvent { uuid: fake_device(i).uuid, double_bit_ecc: true, ..Default::default() };
    // GPU 0 has one uncorrected error before cderd starts; GPU 1 is the probe.
    let (mut node, events) = watched_node(2, "", &[dbe(0)]);
    // The start-up check runs before the event set exists: once an Xid on the probe drains it, the check is done.
    let probe = |node: &Node| {
        FakeEvent { uuid: fake_device(1).uuid, xid: Some(79), ..Default::default() }.append(&events).unwrap();
        wait_for(node, 1, "probe drained", |d| d.reason.is_some());
        node.client().resume(&fake_device(1).uuid).unwrap();
    };
    probe(&node);
    assert_eq!(reason_of(&node, 0), None, "a count from before cderd watched drained:\n{}", node.log());
    assert!(node.log().contains("from before cderd watched this GPU"), "{}", node.log());

    // A restart with the same count: still no drain.
    node.terminate();
    node.start();
    probe(&node);
    assert_eq!(reason_of(&node, 0), None, "the same count drained again at restart:\n{}", node.log());

    // An error while cderd is down (counted, no event after start): drained at start.
    node.terminate();
    dbe(0).append(&events).unwrap();
    node.start();
    let d0 = wait_for(&node, 0, "drained by the grown ECC count", |d| d.reason.is_some());
    let reason = d0.reason.unwrap();
    assert!(
        reason.starts_with("double-bit ECC error (2 uncorrected since boot, 1 before)")
            && reason.contains("not watching"),
        "{reason}"
    );

    // The operator returns it; the count has not grown since: it stays in service over several polls.
    node.client().resume(&fake_device(0).uuid).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(reason_of(&node, 0), None, "re-drained without a new error:\n{}", node.log());
    // A new error while watched drains it again.
    dbe(0).append(&events).unwrap();
    wait_for(&node, 0, "drained by a new ECC error", |d| {
        d.reason.as_deref().is_some_and(|r| r.starts_with("double-bit ECC error"))
    });
}
