//! The health watch: cderd drains an NVML device that fails (and, through
//! `vendor_watch`, a ROCm SMI or Level Zero one).
//!
//! One thread per `discovery = "nvml"` type (`[node.health] watch`, on by
//! default) registers for NVML's critical Xid and double-bit ECC events and,
//! every `interval_s` (and whenever no event set can be had), polls each GPU:
//! still reachable by UUID, volatile uncorrected ECC count not grown since
//! it was last seen. Not every Xid means a bad GPU: those NVIDIA's catalogue
//! puts on the application (`[node.health] ignore_xids`, by default 13, 31,
//! 43, 45, 68) are logged, the others drain (or only `drain_xids`).
//!
//! The last ECC count seen is kept in `state_dir` (`health-ecc-<type>.json`):
//! a count already non-zero when cderd starts drains only if it grew while
//! cderd was down, not again at every restart; a count lower than the one
//! kept (GPU reset, driver reload, reboot) is the new baseline.
//!
//! A GPU that fails is drained with the reason (`Xid 79`,
//! `double-bit ECC error`, `GPU lost: …`), through the same durable drain as
//! `cderctl drain`: a job that holds it keeps it (it goes offline at
//! release), nobody is given it again, and it stays drained across restarts
//! until an operator runs `cderctl undrain` — or, with `[node.health]
//! return_after_s`, until its GPU has polled healthy that long. A device
//! already drained keeps the reason it has. MIG instances are drained with their GPU: a GPU's
//! devices are those with its PCI bus id.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cder_model::{CderType, Device, Discovery};
use cder_protocol::{DeviceRequest, DrainRequest, Request};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};

use crate::daemon::{Caller, Daemon};

/// Starts one watch thread per NVML type, unless `[node.health] watch = false`.
pub fn spawn(daemon: &Arc<Daemon>) {
    let health = &daemon.config().node.health;
    if !health.watch {
        tracing::info!("[node.health] watch = false: devices are not watched");
        return;
    }
    let interval = Duration::from_secs(health.interval_s);
    for cder in daemon.config().cders.iter().filter(|c| c.discovery == Discovery::Nvml) {
        let daemon = Arc::clone(daemon);
        let name = cder.name().to_string();
        let cder = cder.clone();
        let spawned = std::thread::Builder::new().name(format!("health-{name}")).spawn(move || loop {
            // Returns only when NVML cannot be used at all; try again later.
            if let Err(e) = watch(&daemon, &cder, interval) {
                tracing::warn!(cder_type = cder.name(), "health watch: {e}; retrying in {}s", interval.as_secs());
            }
            std::thread::sleep(interval);
        });
        if let Err(e) = spawned {
            tracing::error!(cder_type = name, "cannot start the health watch thread: {e}");
        }
    }
}

/// One physical GPU being watched.
pub(crate) struct Watched {
    pub(crate) uuid: String,
    /// Volatile uncorrected ECC errors when last seen; `None` when the board
    /// has no ECC (or could not say yet).
    pub(crate) ecc_seen: Option<u64>,
    /// cderd's devices on it: the GPU, or its MIG instances.
    pub(crate) devices: Vec<String>,
}

fn watch(daemon: &Daemon, cder: &CderType, interval: Duration) -> Result<(), String> {
    let nvml = cder_inventory::open_nvml(cder).map_err(|e| e.to_string())?;
    // NVML's own answer, without discover_type's "no device" and count
    // checks: a GPU lost since start must still be found missing and drained.
    let ours: Vec<Device> = cder_inventory::discover_nvml(cder).map_err(|e| e.to_string())?;
    let mut gpus = Vec::new();
    let mut ecc_at_start = Vec::new();
    let count = nvml.device_count().map_err(|e| format!("nvmlDeviceGetCount_v2: {e}"))?;
    for index in 0..count {
        // A GPU that cannot be asked (lost before this start) is not in the
        // inventory either: cderd already counts it unhealthy.
        let identity = nvml.device_by_index(index).and_then(|gpu| Ok((gpu.uuid()?, gpu.pci_info()?.bus_id, gpu)));
        let (uuid, bus, gpu) = match identity {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(cder_type = cder.name(), index, "health watch: GPU {index} not watched: {e}");
                continue;
            }
        };
        let devices: Vec<String> = ours.iter().filter(|d| d.pci_bus_id == bus).map(|d| d.uuid.clone()).collect();
        if devices.is_empty() {
            continue;
        }
        gpus.push(Watched { uuid, ecc_seen: None, devices });
        // Counted before the event set exists, so an event for an error seen here is not a second drain.
        let now = gpu.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile).ok();
        ecc_at_start.push(now);
    }
    let ecc_file = daemon.config().node.state_dir.join(format!("health-ecc-{}.json", cder.name()));
    let mut kept = read_ecc(&ecc_file);
    for (gpu, now) in gpus.iter_mut().zip(ecc_at_start) {
        let Some(now) = now else { continue };
        match ecc_verdict(kept.get(&gpu.uuid).copied(), now) {
            Some(reason) => fail(daemon, gpu, &format!("{reason} while cderd was not watching"), &mut BTreeSet::new()),
            None if now > 0 && !kept.contains_key(&gpu.uuid) => tracing::warn!(
                gpu = %gpu.uuid,
                "health watch: {now} uncorrected ECC errors since the driver loaded, from before cderd watched this GPU: not drained; only new ones drain (nvidia-smi -q -d ECC,ROW_REMAPPER shows them)"
            ),
            None => {}
        }
        gpu.ecc_seen = Some(now);
        kept.insert(gpu.uuid.clone(), now);
    }
    write_ecc(&ecc_file, &kept);
    // A GPU lost after discovery but before the loop above is in `ours` yet
    // unwatched: what counts as found is what is watched.
    let watched: BTreeSet<&str> = gpus.iter().flat_map(|g| g.devices.iter().map(String::as_str)).collect();
    drain_lost_since_start(daemon, cder, &watched);
    let mut events = event_set(&nvml, &gpus);
    tracing::info!(
        cder_type = cder.name(),
        gpus = gpus.len(),
        events = events.is_some(),
        interval_s = interval.as_secs(),
        "health watch started"
    );
    let mut failed: BTreeSet<String> = BTreeSet::new();
    let return_after = Duration::from_secs(daemon.config().node.health.return_after_s);
    // GPU UUID → since when it has polled healthy, for the return policy.
    let mut healthy_since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut next_poll = Instant::now();
    loop {
        let wait = next_poll.saturating_duration_since(Instant::now());
        match events.as_ref().map(|set| set.wait(wait.as_millis().clamp(1, u128::from(u32::MAX)) as u32)) {
            Some(Ok(event)) => {
                if let Ok(uuid) = event.device.uuid() {
                    let reason = if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                        match event.event_data {
                            Some(XidError::Value(xid)) if !daemon.config().node.health.drains_xid(xid) => {
                                tracing::warn!(gpu = %uuid, xid, "health watch: Xid {xid} is an application error ([node.health] ignore_xids / drain_xids): the job that caused it fails, the GPU is not drained");
                                continue;
                            }
                            Some(XidError::Value(xid)) => format!("Xid {xid}"),
                            _ => "Xid (number unknown)".to_string(),
                        }
                    } else {
                        "double-bit ECC error".to_string()
                    };
                    if let Some(gpu) = gpus.iter_mut().find(|g| g.uuid == uuid) {
                        fail(daemon, gpu, &reason, &mut failed);
                        healthy_since.remove(&gpu.uuid);
                        // This error is counted now: the next poll must not drain it again.
                        // Kept at once too: a restart before the next poll must not drain it again either.
                        if let Ok(n) = event.device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
                            gpu.ecc_seen = Some(n);
                            kept.insert(gpu.uuid.clone(), n);
                            write_ecc(&ecc_file, &kept);
                        }
                    }
                }
                continue;
            }
            Some(Err(NvmlError::Timeout)) => {}
            Some(Err(e)) => {
                // The set is unusable (e.g. the driver went away): poll only.
                tracing::warn!(cder_type = cder.name(), "nvmlEventSetWait: {e}; polling only");
                events = None;
            }
            None => std::thread::sleep(wait),
        }
        if Instant::now() < next_poll {
            continue;
        }
        next_poll = Instant::now() + interval;
        for gpu in &mut gpus {
            match poll(&nvml, gpu) {
                Some(reason) => {
                    fail(daemon, gpu, &reason, &mut failed);
                    healthy_since.remove(&gpu.uuid);
                }
                None if !return_after.is_zero() => {
                    let since = *healthy_since.entry(gpu.uuid.clone()).or_insert_with(Instant::now);
                    if since.elapsed() >= return_after && give_back(daemon, gpu) {
                        failed.remove(&gpu.uuid);
                    }
                }
                None => {}
            }
        }
        if gpus.iter().any(|g| g.ecc_seen.is_some_and(|n| kept.get(&g.uuid) != Some(&n))) {
            for gpu in &gpus {
                if let Some(n) = gpu.ecc_seen {
                    kept.insert(gpu.uuid.clone(), n);
                }
            }
            write_ecc(&ecc_file, &kept);
        }
    }
}

/// Drains the devices cderd found at its start that NVML no longer shows
/// now that the watch begins: a GPU lost in between would otherwise be
/// neither watched nor drained, and handed out.
fn drain_lost_since_start(daemon: &Daemon, cder: &CderType, found: &BTreeSet<&str>) {
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
    let lost = status
        .devices
        .iter()
        .filter(|d| d.cder_type == cder.name() && d.reason.is_none() && !found.contains(d.uuid.as_str()));
    for device in lost {
        let gpu = Watched { uuid: device.uuid.clone(), ecc_seen: None, devices: vec![device.uuid.clone()] };
        fail(daemon, &gpu, "GPU lost: not found by NVML when the health watch started", &mut BTreeSet::new());
    }
}

/// Whether an uncorrected ECC count drains, given the one seen before
/// (`None`: never seen): only growth does; a lower count is a reset counter.
fn ecc_verdict(seen: Option<u64>, now: u64) -> Option<String> {
    grown_count(seen, now, "double-bit ECC error", "uncorrected since boot")
}

/// The drain reason when an error count grew since it was `seen`: a first
/// sight is the baseline, and a lower count (a reset) the new one. The
/// words name the error and what the count counts (NVML's and the other
/// vendors' watches share the rule, not the words).
pub(crate) fn grown_count(seen: Option<u64>, now: u64, error: &str, counted: &str) -> Option<String> {
    let before = seen?;
    (now > before).then(|| format!("{error} ({now} {counted}, {before} before)"))
}

/// The ECC counts kept by [`write_ecc`]; none when missing or unreadable
/// (then every count is a baseline, as at a first start).
pub(crate) fn read_ecc(path: &Path) -> BTreeMap<String, u64> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!(file = %path.display(), "health watch: unreadable ECC baseline ({e}); counts seen now are the baseline");
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

/// Keeps the ECC counts (write, fsync, rename), so a restart compares with them.
pub(crate) fn write_ecc(path: &Path, counts: &BTreeMap<String, u64>) {
    let tmp = path.with_extension("json.tmp");
    let written = serde_json::to_vec(counts).map_err(std::io::Error::other).and_then(|bytes| {
        let mut f = std::fs::File::create(&tmp)?;
        std::io::Write::write_all(&mut f, &bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    });
    if let Err(e) = written {
        tracing::warn!(file = %path.display(), "health watch: cannot keep the ECC baseline: {e}");
    }
}

/// An event set with every watched GPU that supports the events, or `None`
/// where NVML offers none (then polling alone watches).
fn event_set<'n>(nvml: &'n Nvml, gpus: &[Watched]) -> Option<EventSet<'n>> {
    let wanted = EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR;
    let mut set = match nvml.create_event_set() {
        Ok(set) => set,
        Err(e) => {
            tracing::info!("nvmlEventSetCreate: {e}; polling only");
            return None;
        }
    };
    for gpu in gpus {
        let Ok(device) = nvml.device_by_uuid(gpu.uuid.as_str()) else { continue };
        let types = device.supported_event_types().map(|t| t & wanted).unwrap_or(EventTypes::empty());
        if types.is_empty() {
            continue;
        }
        set = match device.register_events(types, set) {
            Ok(set) => set,
            Err(e) => {
                tracing::info!(gpu = %gpu.uuid, "nvmlDeviceRegisterEvents: {}; polling only", e.error);
                return None;
            }
        };
    }
    Some(set)
}

/// Why a GPU is to be drained now, if it is; notes its ECC count.
fn poll(nvml: &Nvml, gpu: &mut Watched) -> Option<String> {
    let device = match nvml.device_by_uuid(gpu.uuid.as_str()) {
        Ok(device) => device,
        Err(e @ (NvmlError::GpuLost | NvmlError::NotFound)) => return Some(format!("GPU lost: {e}")),
        Err(_) => return None,
    };
    match device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
        // Seen once: an operator's undrain is not undone at the next poll.
        Ok(now) => ecc_verdict(gpu.ecc_seen.replace(now).or(Some(now)), now),
        Err(e @ NvmlError::GpuLost) => Some(format!("GPU lost: {e}")),
        _ => None,
    }
}

/// Drains a failed GPU's devices that are not drained yet, and says what the
/// batch system's admin should do.
pub(crate) fn fail(daemon: &Daemon, gpu: &Watched, reason: &str, failed: &mut BTreeSet<String>) {
    let drained: BTreeMap<String, bool> = match daemon.status() {
        Ok(status) => status.devices.into_iter().map(|d| (d.uuid, d.reason.is_some())).collect(),
        Err(e) => {
            tracing::error!(gpu = %gpu.uuid, reason, "health watch: cannot read the device table: {}", e.message);
            return;
        }
    };
    for uuid in &gpu.devices {
        if drained.get(uuid).copied().unwrap_or(true) {
            continue;
        }
        // The daemon's own drain, as root: durable before it is logged.
        let request = Request::Drain(DrainRequest { device: uuid.clone(), reason: reason.to_string() });
        match daemon.handle(Caller { uid: 0, pid: std::process::id() as i32, process: None }, &request) {
            Ok(_) => {
                tracing::error!(device = %uuid, gpu = %gpu.uuid, reason, "health watch drained the device; a job holding it keeps it; `cderctl undrain {uuid}` returns it");
                // Where cderd drains the node itself ([node.batch]), the advice is moot.
                if failed.insert(gpu.uuid.clone()) && daemon.node_drain().batch().is_none() {
                    tracing::error!(
                        "SLURM: to keep jobs off this node until it is repaired, run: scontrol update nodename={} state=drain reason=\"cder: {reason} on {}\"",
                        short_hostname(),
                        gpu.uuid
                    );
                }
            }
            Err(e) => tracing::error!(device = %uuid, reason, "health watch cannot drain the device: {}", e.message),
        }
    }
}

/// Whether the return policy may return a device drained for this reason:
/// the watch's Xid and lost-GPU drains. A double-bit ECC error needs an
/// operator (GPU reset, maybe a new board), and an operator's own drain
/// is the operator's to end.
fn is_returnable(reason: &str) -> bool {
    reason.starts_with("Xid ") || reason.starts_with("GPU lost")
}

/// The return policy: resumes the GPU's devices the watch drained. True
/// when one was returned.
pub(crate) fn give_back(daemon: &Daemon, gpu: &Watched) -> bool {
    let Ok(status) = daemon.status() else { return false };
    let mut returned = false;
    for d in status.devices.iter().filter(|d| gpu.devices.contains(&d.uuid)) {
        let Some(reason) = d.reason.as_deref().filter(|r| is_returnable(r)) else { continue };
        let request = Request::Resume(DeviceRequest { device: d.uuid.clone() });
        match daemon.handle(Caller { uid: 0, pid: std::process::id() as i32, process: None }, &request) {
            Ok(_) => {
                tracing::warn!(device = %d.uuid, gpu = %gpu.uuid, was = reason, "health watch returned the device: healthy for [node.health] return_after_s");
                returned = true;
            }
            Err(e) => tracing::error!(device = %d.uuid, "health watch cannot return the device: {}", e.message),
        }
    }
    returned
}

/// This node's name as SLURM knows it by default (the short host name).
fn short_hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    name.trim().split('.').next().filter(|n| !n.is_empty()).unwrap_or("$(hostname -s)").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_grown_ecc_count_drains() {
        // First sight: the baseline, whatever it is.
        assert_eq!(ecc_verdict(None, 3), None);
        assert_eq!(ecc_verdict(Some(3), 3), None);
        // A reset counter (GPU reset, reboot) is the new baseline.
        assert_eq!(ecc_verdict(Some(3), 0), None);
        assert_eq!(
            ecc_verdict(Some(3), 4).as_deref(),
            Some("double-bit ECC error (4 uncorrected since boot, 3 before)")
        );
    }

    #[test]
    fn the_kept_ecc_counts_survive_a_restart_and_a_bad_file_is_a_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("health-ecc-gpgpu.json");
        assert!(read_ecc(&file).is_empty());
        let counts = BTreeMap::from([("GPU-a".to_string(), 2u64)]);
        write_ecc(&file, &counts);
        assert_eq!(read_ecc(&file), counts);
        std::fs::write(&file, b"{not json").unwrap();
        assert!(read_ecc(&file).is_empty());
    }
}
