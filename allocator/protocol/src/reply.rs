//! Replies: `{"v":1,"ok":true,"result":{…}}` or
//! `{"v":1,"ok":false,"error":{"code":…,"message":…}}`, and the typed results.
//!
//! Result types accept unknown fields when read, so that a newer daemon may
//! add fields without breaking older clients; requests are the strict side.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use cder_model::{JobEnvironment, JobKey};

use crate::PROTOCOL_VERSION;

/// Why a request failed, as a stable machine-readable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, unknown op or field, wrong type, a value out of bounds.
    BadRequest,
    /// The line was longer than the daemon's limit; the connection is closed.
    TooLarge,
    /// `v` names a protocol version the daemon does not speak.
    UnsupportedVersion,
    /// The caller's uid may not do this.
    PermissionDenied,
    /// Too few free devices satisfy the request; the reply carries `free`.
    Insufficient,
    /// The job holds no allocation here.
    UnknownJob,
    /// No such device (or type) on this node.
    UnknownDevice,
    /// The request contradicts the job's existing allocation or a device's owner.
    Conflict,
    /// The daemon failed (database, enforcement); the state is unchanged.
    Internal,
    /// `confine`: no device cgroup (v1 `devices` controller or v2 with a
    /// device BPF program) can be used on this node, or enforcement is off.
    EnforcementUnavailable,
    /// A code this client does not know (from a newer daemon).
    #[serde(other)]
    Unknown,
}

impl ErrorCode {
    /// The wire name, e.g. `insufficient`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Insufficient => "insufficient",
            ErrorCode::UnknownJob => "unknown_job",
            ErrorCode::UnknownDevice => "unknown_device",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Internal => "internal",
            ErrorCode::EnforcementUnavailable => "enforcement_unavailable",
            ErrorCode::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// In `unknown_job`'s message from `env`, before the reason cderd refused
/// the job's `alloc` (docs/protocol.md): a client may show the reason alone.
pub const REFUSED_TO_RECORD: &str = "cderd refused to record it: ";

/// The `error` object of a failed reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ErrorReply {
    /// What kind of failure (the caller branches on it).
    pub code: ErrorCode,
    /// One line for a person: what was wrong and, where it helps, what to do.
    pub message: String,
    /// With `insufficient`: how many devices are free that satisfy the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<u32>,
}

impl ErrorReply {
    /// An error without a free count.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorReply {
        ErrorReply { code, message: message.into(), free: None }
    }
}

/// One reply line as it travels.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireReply {
    v: u32,
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorReply>,
}

/// The success line for `result`, newline-terminated.
pub fn ok_line<T: Serialize>(result: &T) -> String {
    #[derive(Serialize)]
    struct OkReply<'a, T> {
        v: u32,
        ok: bool,
        result: &'a T,
    }
    // Result types are plain data; serialising them cannot fail, but a
    // failure would still be an error reply rather than a panic.
    let mut line = serde_json::to_string(&OkReply { v: PROTOCOL_VERSION, ok: true, result }).unwrap_or_else(|e| {
        error_line(&ErrorReply::new(ErrorCode::Internal, format!("cannot encode the result: {e}")))
            .trim_end()
            .to_string()
    });
    line.push('\n');
    line
}

/// The failure line for `error`, newline-terminated.
pub fn error_line(error: &ErrorReply) -> String {
    let mut line =
        serde_json::to_string(&WireReply { v: PROTOCOL_VERSION, ok: false, result: None, error: Some(error.clone()) })
            .unwrap_or_default();
    line.push('\n');
    line
}

/// Reads a reply line: `Ok(Ok(result))`, `Ok(Err(error))`, or `Err` with a
/// description when the line is not a well-formed reply.
pub fn parse_reply(line: &str) -> Result<Result<Value, ErrorReply>, String> {
    let wire: WireReply =
        serde_json::from_str(line.trim_end()).map_err(|e| format!("malformed reply from cderd: {e}"))?;
    if wire.v != PROTOCOL_VERSION {
        return Err(format!("cderd replied with protocol version {}, this client speaks {PROTOCOL_VERSION}", wire.v));
    }
    match (wire.ok, wire.result, wire.error) {
        (true, Some(result), _) => Ok(Ok(result)),
        (false, _, Some(error)) => Ok(Err(error)),
        _ => Err("malformed reply from cderd: neither a result nor an error".into()),
    }
}

/// One allocated device, as `alloc` and `env` list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocatedDevice {
    /// The CDER type (`gpgpu`).
    #[serde(rename = "type")]
    pub cder_type: String,
    /// The device's index within its type.
    pub index: u32,
    /// The device UUID.
    pub uuid: String,
    /// The device file that grants it (see [`DeviceStatus::path`]); absent
    /// from older daemons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The result of `alloc` and `env`: a job's devices and its environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    /// The job.
    pub job: JobKey,
    /// The uid the job runs as.
    pub uid: u32,
    /// By type, then index.
    pub devices: Vec<AllocatedDevice>,
    /// The variables to set in the job (`CUDA_VISIBLE_DEVICES=1,3` …).
    pub env: JobEnvironment,
    /// The job's device cgroups (directories), set up and ready for a
    /// process to enter by writing its pid into their `cgroup.procs`. Only
    /// in the answer to an operator's `env` on a node where cderd confines
    /// jobs: slurmstepd's tasks enter them as root without a `confine`
    /// round trip each. Absent from older daemons (the task asks `confine`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups: Option<Vec<String>>,
    /// The device cgroup `env` is numbered for (an `env` request's
    /// `device_cgroup`, as cderd could honour it); absent: none, node indices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_cgroup: Option<cder_model::DeviceCgroup>,
    /// Shares the job holds of each of its devices, where they are shared
    /// (SLURM `gres/shard`); absent: it holds them whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u32>,
}

impl Allocation {
    /// The environment to give the job once its processes are confined to
    /// its device cgroup (`confine` succeeded, or SLURM's ConstrainDevices):
    /// indices relative to the job's own devices (`0..n-1` in node order),
    /// or UUIDs where `types` says so. `env` holds the absolute indices,
    /// right only outside a device cgroup.
    pub fn relative_env(&self, types: &[cder_model::CderType]) -> JobEnvironment {
        let held: Vec<cder_model::HeldDevice<'_>> = self
            .devices
            .iter()
            .map(|d| cder_model::HeldDevice { cder_type: &d.cder_type, index: d.index, uuid: &d.uuid })
            .collect();
        JobEnvironment::for_held(types, &held, true)
    }
}

/// The result of `release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The job.
    pub job: JobKey,
    /// How many devices were released; 0 when the job held none.
    pub released: u32,
}

/// What a device is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceState {
    /// Nobody holds it; it can be allocated.
    Free,
    /// Held by a job (even if drained meanwhile: it goes offline on release).
    Allocated,
    /// Drained by an operator, or released while a process of its last job
    /// still held it (until that process is gone); never allocated.
    Offline,
    /// Reported unhealthy, or no longer found by discovery; never allocated.
    Unhealthy,
}

/// One device in `status` (and the reply of `drain` / `resume`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// The CDER type (`gpgpu`).
    #[serde(rename = "type")]
    pub cder_type: String,
    /// The device's index within its type.
    pub index: u32,
    /// The device UUID.
    pub uuid: String,
    /// The model name.
    pub model: String,
    /// Memory in MiB.
    #[serde(alias = "memory_mb")]
    pub memory_mib: u64,
    /// The NUMA node it is attached to.
    pub numa_node: u32,
    /// What it is doing now.
    pub state: DeviceState,
    /// The job holding it; `null` unless allocated.
    pub job: Option<JobKey>,
    /// The uid of the job holding it; `null` unless allocated.
    pub uid: Option<u32>,
    /// Why it is offline or unhealthy; `null` otherwise.
    pub reason: Option<String>,
    /// The device file that grants it (`/dev/nvidia0`, a MIG instance's
    /// `/dev/nvidia-caps/nvidia-capN`): how a batch system that names
    /// devices by file (SLURM's gres.conf `File=`) finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Device counts of one type. `total` = free + allocated + offline + unhealthy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeCounts {
    /// Every device of the type.
    pub total: u32,
    /// Free devices.
    pub free: u32,
    /// Devices held by jobs.
    pub allocated: u32,
    /// Drained devices.
    pub offline: u32,
    /// Unhealthy or vanished devices.
    pub unhealthy: u32,
    /// Shares of the type's devices offered as shares (`[node.sharing]`),
    /// over every present device; 0 (and absent) where none is shared.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shares_total: u32,
    /// Shares a job could be given now: of devices neither drained nor
    /// unhealthy, those no job holds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shares_free: u32,
    /// Shares jobs hold.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shares_used: u32,
    /// The shares each shared device of the type is offered as.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shares_per_device: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The result of `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// By type (config order), then index.
    pub devices: Vec<DeviceStatus>,
    /// Counts by type.
    pub counts: BTreeMap<String, TypeCounts>,
    /// The ledger's allocation sequence number: every new allocation takes
    /// the next one, durably. Read it before taking the batch system's list
    /// of live jobs and pass it as `reconcile`'s `as_of`. (0 from a daemon
    /// that predates it.)
    #[serde(default)]
    pub generation: u64,
    /// Running jobs' devices that have been idle for `[node.usage]
    /// idle_after_s` or longer (absent from daemons that predate it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub idle: Vec<IdleDevice>,
    /// Who shares which device with how many shares: one entry per live
    /// (device, job) of a device offered as shares. Empty (and absent) on a
    /// node that shares nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<ShareStatus>,
}

/// One job's shares of one device, in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareStatus {
    /// The device's CDER type.
    #[serde(rename = "type")]
    pub cder_type: String,
    /// Its index within the type.
    pub index: u32,
    /// Its UUID.
    pub uuid: String,
    /// The job holding the shares.
    pub job: JobKey,
    /// That job's uid.
    pub uid: u32,
    /// How many shares it holds.
    pub shares: u32,
    /// How many shares the device is offered as.
    pub total: u32,
}

/// The result of `confine`: the groups the calling process was put into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confined {
    /// The job.
    pub job: JobKey,
    /// The process moved (the caller's SO_PEERCRED pid).
    pub pid: u32,
    /// Paths of the device cgroups it now belongs to (v1 and/or v2).
    pub cgroups: Vec<String>,
}

/// The result of `reconcile`: the jobs whose allocations were freed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciled {
    /// The jobs whose allocations were freed.
    pub released: Vec<JobKey>,
}

/// One job's use of one device, whole or in shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountingRecord {
    /// The job.
    pub job: JobKey,
    /// The uid the job ran as.
    pub uid: u32,
    /// The CDER type (`gpgpu`).
    #[serde(rename = "type")]
    pub cder_type: String,
    /// The device's index within its type.
    pub index: u32,
    /// The device UUID.
    pub uuid: String,
    /// Unix seconds.
    pub start: i64,
    /// Unix seconds; `null` while the job still holds the device.
    pub end: Option<i64>,
    /// `end − start`, or `now − start` while still held.
    pub device_seconds: i64,
    /// Shares of the device the job held, where the device is offered as
    /// shares (`[node.sharing]`, SLURM's `gres/shard`); absent where it
    /// held the device whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u32>,
    /// How many shares the device was offered as; with `shares`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares_total: Option<u32>,
    /// The part of the device the job held: 1 whole, `shares /
    /// shares_total` in shares. Its seconds count this much in the
    /// utilisation and in APEL's `Count`. 1 from daemons that predate it.
    #[serde(default = "whole_device")]
    pub fraction: f64,
    /// Set on a use of the device after the job's release by a process
    /// outside the job (a descriptor passed out of it, issue 52): which
    /// process, ended by cderd; the record runs from the release until it
    /// was seen gone (`end` is `null` while it lives). It counts for the
    /// job the device came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_release: Option<String>,
}

/// A record's `fraction` where the daemon gave none: it predates shares,
/// so the device was held whole.
fn whole_device() -> f64 {
    1.0
}

impl AccountingRecord {
    /// `device_seconds` weighted by `fraction`: the device-time the record
    /// counts for (a quarter of the seconds for 1 of 4 shares).
    pub fn counted_seconds(&self) -> f64 {
        self.device_seconds as f64 * self.fraction
    }
}

/// The pool's utilisation over a period (the seed thesis, Appendix C):
/// device-seconds allocated ÷ (pool size × period).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Utilisation {
    /// Start of the period, unix seconds.
    pub since: i64,
    /// End of the period, unix seconds.
    pub until: i64,
    /// Devices on the node (all types) over which the ratio is taken.
    pub pool_size: u32,
    /// Device-seconds allocated inside `[since, until]`, each record's
    /// weighted by its `fraction` (a share counts its part of the device),
    /// rounded to the second.
    pub device_seconds: i64,
    /// `device_seconds / (pool_size × (until − since))`, from the weighted
    /// sum before it is rounded.
    pub ratio: f64,
}

/// The result of `accounting`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accounting {
    /// One record per job and device.
    pub records: Vec<AccountingRecord>,
    /// The pool's utilisation over the period.
    pub utilisation: Utilisation,
    /// Drains (by an operator or cderd's health watch) overlapping the
    /// period. Absent from daemons that predate it.
    #[serde(default)]
    pub drains: Vec<DrainRecord>,
}

/// One period a device was out of service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRecord {
    /// The drained device's UUID (`GPU-…`, `MIG-…`).
    pub uuid: String,
    /// Its CDER type.
    #[serde(rename = "type")]
    pub cder_type: String,
    /// Its index among the type's devices.
    pub index: u32,
    /// `Xid 79`, `double-bit ECC error`, an operator's words …
    pub reason: String,
    /// Unix seconds.
    pub start: i64,
    /// Unix seconds; `null` while still drained.
    pub end: Option<i64>,
}

/// One job's use of one device, rolled up from cderd's samples
/// (docs/usage.md). Seconds are floating point: samples may come faster
/// than once a second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceUsage {
    /// The job.
    pub job: JobKey,
    /// The uid the job runs (ran) as.
    pub uid: u32,
    /// The CDER type (`gpgpu`).
    #[serde(rename = "type")]
    pub cder_type: String,
    /// The device's index within its type.
    pub index: u32,
    /// The device UUID (`GPU-…`, or `MIG-…` for a MIG instance).
    pub uuid: String,
    /// The model name (`NVIDIA A100-SXM4-40GB`, `… MIG 1g.10gb` for an instance).
    pub model: String,
    /// For a MIG instance: the UUID of its GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_parent: Option<String>,
    /// When the job was given the device, unix seconds.
    pub start: i64,
    /// When it gave it back, unix seconds; `null` while it holds it.
    pub end: Option<i64>,
    /// `end − start` (or `now − start`): how long the job held the device,
    /// APEL's AvailableDuration.
    pub device_seconds: i64,
    /// How much of that the samples cover (a period each; less after a
    /// cderd restart or where NVML could not answer).
    pub sampled_seconds: f64,
    /// The covered time whose utilisation was at or above `[node.usage]
    /// active_threshold_percent`; `null` when NVML gave no utilisation for
    /// the device (a MIG instance without GPM).
    pub active_seconds: Option<f64>,
    /// Time-weighted mean utilisation, percent; `null` as for `active_seconds`.
    pub mean_utilisation_percent: Option<f64>,
    /// Highest utilisation sampled, percent; `null` as for `active_seconds`.
    pub peak_utilisation_percent: Option<u32>,
    /// Highest device memory in use, MiB (for a MIG instance: its own).
    pub peak_memory_mib: u64,
    /// Samples taken.
    pub samples: u64,
    /// First and last sample, unix seconds; `null` before the first.
    pub first_sample: Option<i64>,
    /// See `first_sample`.
    pub last_sample: Option<i64>,
    /// Where the last sample's utilisation came from: `device`
    /// (nvmlDeviceGetUtilizationRates), `gpm` (GPU performance monitoring,
    /// Hopper and later: MIG instances, and whole GPUs), or `none`.
    pub utilisation_source: String,
    /// The same per calendar month (UTC) the samples were taken in, oldest
    /// first, for monthly accounting records.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub months: Vec<MonthUsage>,
}

/// One job's use of one device within one calendar month (UTC): a sample
/// counts in the month it was taken in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonthUsage {
    /// `YYYY-MM`.
    pub month: String,
    /// Time the month's samples cover, seconds.
    pub sampled_seconds: f64,
    /// The part at or above the active threshold; `null` without utilisation.
    pub active_seconds: Option<f64>,
    /// Time-weighted mean utilisation, percent; `null` without utilisation.
    pub mean_utilisation_percent: Option<f64>,
}

/// A running job's device that has stayed below `[node.usage]
/// idle_below_percent` for `idle_after_s` or longer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleDevice {
    /// The job.
    pub job: JobKey,
    /// The uid it runs as.
    pub uid: u32,
    /// The CDER type.
    #[serde(rename = "type")]
    pub cder_type: String,
    /// The device's index within its type.
    pub index: u32,
    /// The device UUID.
    pub uuid: String,
    /// The model name.
    pub model: String,
    /// Since when it has been below the threshold, unix seconds.
    pub idle_since: i64,
    /// For how long, seconds.
    pub idle_seconds: f64,
}

/// One sample of one device, as the recent-sample ring keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageSample {
    /// When, unix milliseconds.
    pub at_ms: i64,
    /// The job holding the device.
    pub job: JobKey,
    /// The device UUID.
    pub uuid: String,
    /// Utilisation, percent; `null` where NVML gave none.
    pub utilisation_percent: Option<u32>,
    /// Device memory in use, MiB; `null` where NVML gave none.
    pub memory_mib: Option<u64>,
    /// The compute processes NVML listed on the device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessUsage>,
}

/// One compute process on a device, as NVML lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessUsage {
    /// The process id (in cderd's pid namespace).
    pub pid: u32,
    /// Device memory it uses, MiB; `null` where NVML cannot say (no
    /// privilege, or a MIG instance on older drivers).
    pub memory_mib: Option<u64>,
    /// Its SM utilisation over the period, percent, from
    /// nvmlDeviceGetProcessUtilization; `null` where not given.
    pub sm_percent: Option<u32>,
    /// The job whose device cgroup (or batch system cgroup) holds the
    /// process; `null` when none does.
    pub job: Option<JobKey>,
}

/// The result of `usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Per job and device, by job start then type and index.
    pub devices: Vec<DeviceUsage>,
    /// Devices of running jobs that are idle now.
    #[serde(default)]
    pub idle: Vec<IdleDevice>,
    /// The most recent samples (oldest first), when asked for with `recent`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<UsageSample>,
    /// `[node.usage] sample_period_s`.
    pub sample_period_s: f64,
    /// `[node.usage] active_threshold_percent`.
    pub active_threshold_percent: u32,
}

/// The result of `ping`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The daemon's version.
    pub version: String,
    /// The protocol version it speaks.
    pub protocol: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_lines_match_the_protocol_doc() {
        let mut e = ErrorReply::new(ErrorCode::Insufficient, "2 gpgpu devices requested, 1 free");
        e.free = Some(1);
        assert_eq!(
            error_line(&e),
            "{\"v\":1,\"ok\":false,\"error\":{\"code\":\"insufficient\",\"message\":\"2 gpgpu devices requested, 1 free\",\"free\":1}}\n"
        );
        assert_eq!(parse_reply(&error_line(&e)).unwrap().unwrap_err(), e);
        let pong = Pong { version: "0.1.0".into(), protocol: 1 };
        let line = ok_line(&pong);
        assert_eq!(line, "{\"v\":1,\"ok\":true,\"result\":{\"version\":\"0.1.0\",\"protocol\":1}}\n");
        let v = parse_reply(&line).unwrap().unwrap();
        assert_eq!(serde_json::from_value::<Pong>(v).unwrap(), pong);
    }

    #[test]
    fn unknown_codes_and_bad_replies() {
        let r = parse_reply(r#"{"v":1,"ok":false,"error":{"code":"melted","message":"x"}}"#).unwrap().unwrap_err();
        assert_eq!(r.code, ErrorCode::Unknown);
        assert!(parse_reply("garbage").is_err());
        assert!(parse_reply(r#"{"v":2,"ok":true,"result":{}}"#).is_err());
        assert!(parse_reply(r#"{"v":1,"ok":true}"#).is_err());
    }

    #[test]
    fn status_shape() {
        let s = DeviceStatus {
            cder_type: "gpgpu".into(),
            index: 0,
            uuid: "GPU-0".into(),
            model: "K20".into(),
            memory_mib: 4800,
            numa_node: 0,
            state: DeviceState::Free,
            job: None,
            uid: None,
            reason: None,
            path: None,
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["state"], "free");
        assert_eq!(v["type"], "gpgpu");
        assert!(v["job"].is_null());
    }
}
