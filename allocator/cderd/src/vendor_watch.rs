//! Health and use of the devices that vendors' libraries other than NVML
//! report: the `rocm-smi` and `level-zero` types, read through
//! [`cder_inventory::read_devices`].
//!
//! Health: one thread per such type (`[node.health] watch`) reads its
//! devices every `interval_s` and drains, through the same durable drain as
//! NVML's watch ([`crate::health`]), a device that
//!
//! * the library reports a fault for (`GPU lost: …`),
//! * a read that succeeded no longer lists (`GPU lost: not reported by …`),
//! * or whose uncorrectable ECC count grew since it was last seen
//!   (`uncorrectable ECC error (…)`): the count is kept in `state_dir`
//!   (`health-ecc-<type>.json`) with NVML's rules: the first count seen is
//!   the baseline, a count that grew while cderd was down drains at its
//!   start, a lower one (reset, reboot) is the new baseline.
//!
//! A read that fails as a whole (no driver, the library's lock held by
//! another process) drains nothing: it is logged, and the next one tries
//! again. `[node.health] return_after_s` returns the lost-GPU drains as it
//! does NVML's.
//!
//! Use: the usage sampler (`usage`) records each held device's
//! busy percentage (source `device`) and memory in use from the same reads,
//! once per type and period. These libraries list no process per device
//! here, so there is no per-process attribution, and a device shared by
//! several jobs gets no utilisation (never the whole device's).
//!
//! Every read runs on a thread of its own, outside the ledger lock, and is
//! waited for at most [`READ_DEADLINE`]: a library stuck in a wedged driver
//! delays neither a request nor the next period (a read still running when
//! the next is due is not doubled; the late one is logged).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cder_inventory::{reads_devices, DeviceReading};
use cder_model::{CderType, Discovery};

use crate::daemon::{Daemon, UsageTarget};
use crate::health::{self, Watched};
use crate::store::UsageObservation;

/// The longest a health check or a usage sample waits for one type's read.
pub const READ_DEADLINE: Duration = Duration::from_secs(10);

/// The library a type's readings come from, for logs and drain reasons.
fn source(cder: &CderType) -> &'static str {
    match cder.discovery {
        Discovery::RocmSmi => "ROCm SMI",
        Discovery::LevelZero => "Level Zero",
        _ => "its library",
    }
}

/// Reads one type's devices on a thread of its own, within [`READ_DEADLINE`].
#[derive(Default)]
pub struct Reader {
    /// A read has started and not returned yet.
    in_flight: Arc<AtomicBool>,
}

impl Reader {
    /// The type's readings, or why there are none now.
    pub fn read(&self, cder: &CderType) -> Result<Vec<DeviceReading>, String> {
        if self.in_flight.swap(true, Ordering::SeqCst) {
            return Err(format!("{}: the previous read has not returned yet", source(cder)));
        }
        let (tx, rx) = mpsc::channel();
        let (owned, in_flight) = (cder.clone(), Arc::clone(&self.in_flight));
        let spawned = std::thread::Builder::new().name(format!("read-{}", cder.name())).spawn(move || {
            // A panic in the library's wrapper is an answer, not a dead daemon thread.
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| cder_inventory::read_devices(&owned)))
                .map_err(|_| format!("{}: reading the devices panicked", source(&owned)))
                .and_then(|read| read.map_err(|e| e.to_string()));
            in_flight.store(false, Ordering::SeqCst);
            let _ = tx.send(result);
        });
        if let Err(e) = spawned {
            self.in_flight.store(false, Ordering::SeqCst);
            return Err(format!("cannot start a thread to read {}: {e}", source(cder)));
        }
        rx.recv_timeout(READ_DEADLINE)
            .unwrap_or_else(|_| Err(format!("{} did not answer within {} s", source(cder), READ_DEADLINE.as_secs())))
    }
}

/// Starts one watch thread per type read through its vendor's library,
/// unless `[node.health] watch = false`.
pub fn spawn_health(daemon: &Arc<Daemon>) {
    let health = &daemon.config().node.health;
    if !health.watch {
        return;
    }
    let interval = Duration::from_secs(health.interval_s);
    for cder in daemon.config().cders.iter().filter(|c| reads_devices(c.discovery)) {
        let (daemon, cder) = (Arc::clone(daemon), cder.clone());
        let name = cder.name().to_string();
        let spawned = std::thread::Builder::new().name(format!("health-{name}")).spawn(move || {
            let mut watch = Watch::new(&daemon, &cder);
            tracing::info!(
                cder_type = cder.name(),
                interval_s = interval.as_secs(),
                "health watch started ({})",
                source(&cder)
            );
            loop {
                match watch.reader.read(&cder) {
                    Ok(readings) => watch.check(&daemon, &cder, &readings),
                    Err(e) => {
                        tracing::warn!(cder_type = cder.name(), "health watch: {e}; devices not checked this time")
                    }
                }
                std::thread::sleep(interval);
            }
        });
        if let Err(e) = spawned {
            tracing::error!(cder_type = name, "cannot start the health watch thread: {e}");
        }
    }
}

/// One type's watch between checks.
struct Watch {
    reader: Reader,
    ecc_file: std::path::PathBuf,
    /// Uncorrectable ECC counts last seen (and kept in `ecc_file`).
    kept: BTreeMap<String, u64>,
    /// Whether a check has run since cderd started.
    checked: bool,
    /// Devices drained by this watch (for the batch system's hint, once).
    failed: BTreeSet<String>,
    /// Device → since when it has read healthy, for the return policy.
    healthy_since: BTreeMap<String, Instant>,
}

impl Watch {
    fn new(daemon: &Daemon, cder: &CderType) -> Watch {
        let ecc_file = daemon.config().node.state_dir.join(format!("health-ecc-{}.json", cder.name()));
        let kept = health::read_ecc(&ecc_file);
        Watch {
            reader: Reader::default(),
            ecc_file,
            kept,
            checked: false,
            failed: BTreeSet::new(),
            healthy_since: BTreeMap::new(),
        }
    }

    /// Drains the devices `readings` show failed and, under the return
    /// policy, returns those that have read healthy long enough.
    fn check(&mut self, daemon: &Daemon, cder: &CderType, readings: &[DeviceReading]) {
        let status = match daemon.status() {
            Ok(status) => status,
            Err(e) => {
                return tracing::error!(
                    cder_type = cder.name(),
                    "health watch: cannot read the device table: {}",
                    e.message
                )
            }
        };
        let by_uuid: HashMap<&str, &DeviceReading> = readings.iter().map(|r| (r.uuid.as_str(), r)).collect();
        let return_after = Duration::from_secs(daemon.config().node.health.return_after_s);
        let before = self.kept.clone();
        for device in status.devices.iter().filter(|d| d.cder_type == cder.name()) {
            let uuid = device.uuid.as_str();
            let reason = match by_uuid.get(uuid) {
                None => Some(format!("GPU lost: not reported by {}", source(cder))),
                Some(reading) if reading.fault.is_some() => reading.fault.clone(),
                Some(reading) => reading.uncorrected_errors.and_then(|now| self.ecc(uuid, now)),
            };
            let gpu = Watched { uuid: uuid.to_string(), ecc_seen: None, devices: vec![uuid.to_string()] };
            match reason {
                Some(reason) => {
                    health::fail(daemon, &gpu, &reason, &mut self.failed);
                    self.healthy_since.remove(uuid);
                }
                None if !return_after.is_zero() => {
                    let since = *self.healthy_since.entry(uuid.to_string()).or_insert_with(Instant::now);
                    if since.elapsed() >= return_after && health::give_back(daemon, &gpu) {
                        self.failed.remove(uuid);
                    }
                }
                None => {}
            }
        }
        if self.kept != before {
            health::write_ecc(&self.ecc_file, &self.kept);
        }
        self.checked = true;
    }

    /// Notes a device's uncorrectable ECC count; the drain reason if it grew.
    fn ecc(&mut self, uuid: &str, now: u64) -> Option<String> {
        let seen = self.kept.insert(uuid.to_string(), now);
        if seen.is_none() && now > 0 {
            tracing::warn!(device = uuid, "health watch: {now} uncorrectable ECC errors since the driver loaded, from before cderd watched this device: not drained; only new ones drain");
        }
        let reason = ecc_verdict(seen, now)?;
        Some(if self.checked { reason } else { format!("{reason} while cderd was not watching") })
    }
}

/// Whether an uncorrectable ECC count drains, given the one seen before
/// (`None`: never seen): only growth does; a lower count is a reset counter.
fn ecc_verdict(seen: Option<u64>, now: u64) -> Option<String> {
    health::grown_count(seen, now, "uncorrectable ECC error", "since the driver loaded")
}

/// The usage sampler's observations of the `targets` whose types are read
/// through their vendor's library: one read per type (within the deadline),
/// the whole device's sample per target, with whether the target is a
/// sharer's (whose part the sampler takes).
pub fn observe(
    daemon: &Daemon,
    targets: &[UsageTarget],
    at: (i64, Option<i64>),
    readers: &mut HashMap<String, Reader>,
) -> Vec<(UsageObservation, bool)> {
    let mut read: HashMap<&str, HashMap<String, DeviceReading>> = HashMap::new();
    let mut out = Vec::new();
    for target in targets {
        let Some(cder) = daemon.config().cders.iter().find(|c| c.name() == target.cder_type) else { continue };
        if !reads_devices(cder.discovery) {
            continue;
        }
        let readings = read.entry(cder.name()).or_insert_with(|| {
            match readers.entry(cder.name().to_string()).or_default().read(cder) {
                Ok(readings) => readings.into_iter().map(|r| (r.uuid.clone(), r)).collect(),
                Err(e) => {
                    tracing::debug!(cder_type = cder.name(), "usage sampler: {e}");
                    HashMap::new()
                }
            }
        });
        let reading = readings.get(&target.uuid);
        let utilisation = reading.and_then(|r| r.utilisation_percent).map(|p| p.min(100));
        let whole = UsageObservation {
            job: target.job.clone(),
            uuid: target.uuid.clone(),
            mig_parent: None,
            at_ms: at.0,
            previous_ms: at.1,
            utilisation,
            source: if utilisation.is_some() { "device" } else { "none" },
            memory_mib: reading.and_then(|r| r.memory_used_mib),
            processes: None,
        };
        out.push((whole, target.shared));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_grown_uncorrectable_count_drains() {
        assert_eq!(ecc_verdict(None, 5), None);
        assert_eq!(ecc_verdict(Some(5), 5), None);
        assert_eq!(ecc_verdict(Some(5), 1), None);
        assert_eq!(
            ecc_verdict(Some(1), 3).as_deref(),
            Some("uncorrectable ECC error (3 since the driver loaded, 1 before)")
        );
    }
}
