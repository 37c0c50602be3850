//! Requests: what a client may ask of cderd, and the strict parser the
//! daemon runs on every line it reads.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use cder_model::{DeviceCgroup, JobKey};

use crate::reply::{ErrorCode, ErrorReply};
use crate::PROTOCOL_VERSION;

/// The CDER type a request means when it names none.
pub const DEFAULT_TYPE: &str = "gpgpu";

/// Most devices one `alloc` may ask for; anything larger is a malformed
/// request. The bound every request parser shares (`cder_request`).
pub const MAX_COUNT: u32 = cder_request::MAX_COUNT;

/// Longest `alloc` `wait_ms`: five minutes, beyond any prolog's timeout.
pub const MAX_WAIT_MS: u64 = 300_000;

/// Latest time a request may name (9999-12-31T23:59:59Z, unix seconds):
/// bounds `accounting`'s period so that no arithmetic on it can overflow.
pub const MAX_UNIX_TIME: i64 = 253_402_300_799;

/// Longest free-text field (`reason`, `model`, a device name) accepted.
pub const MAX_TEXT_LEN: usize = 1024;

/// One request, as sent on the wire: `{"v":1,"op":"<op>", …fields}`.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Liveness check; answered with [`crate::Pong`].
    Ping,
    /// Give a job devices (operators only).
    Alloc(AllocRequest),
    /// Take a job's devices back (operators only).
    Release(JobRequest),
    /// The environment of a job's allocation (the job's uid, operators).
    Env(EnvRequest),
    /// Every device with its state and owner (anyone).
    Status,
    /// Take a device out of service (operators only).
    Drain(DrainRequest),
    /// Put a drained device back into service (operators only).
    Resume(DeviceRequest),
    /// Release every allocation whose job is not live any more (operators only).
    Reconcile(ReconcileRequest),
    /// Per-job, per-device usage records and the pool's utilisation.
    Accounting(AccountingRequest),
    /// Move the calling process (SO_PEERCRED pid) into the job's device
    /// cgroup(s) (root, operators, and the job's own uid).
    Confine(JobRequest),
    /// What jobs did with their devices: utilisation, memory, idle devices
    /// (operators see every job, others their own).
    Usage(UsageRequest),
}

/// Most recent samples one `usage` request may ask for.
pub const MAX_RECENT_SAMPLES: u32 = 10_000;

/// `usage`: per-job, per-device use from cderd's samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageRequest {
    /// Only this job; `None` = every job on record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobKey>,
    /// Only jobs that held a device at some time since this, unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// Also the most recent samples of the ring, at most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recent: Option<u32>,
}

/// `alloc`: give `job`, run by `uid`, `count` devices of `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllocRequest {
    /// The job to allocate for.
    pub job: JobKey,
    /// The uid the job runs as; `env` is allowed to it.
    pub uid: u32,
    /// How many devices; 0 records the job with an empty visible list.
    pub count: u32,
    /// The CDER type (`gpgpu` unless given).
    #[serde(rename = "type", default = "default_type")]
    pub cder_type: String,
    /// Only devices with at least this much memory, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[serde(alias = "min_memory_mb")]
    pub min_memory_mib: Option<u64>,
    /// Only devices whose model contains this text (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Record exactly these device indices instead of choosing (used when the
    /// batch system has already chosen, e.g. SLURM `mode=observe`). When
    /// given, its length must equal `count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<u32>>,
    /// Record exactly the devices at these files instead of choosing: one
    /// entry per device, the file(s) the batch system knows it by (SLURM's
    /// gres.conf `File=`, or `MultipleFiles=` for a MIG instance), matched
    /// against each device's own file. Lets a job prolog name SLURM's choice
    /// without first asking `status` for cderd's files. When given, its
    /// length must equal `count`; not together with `devices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_files: Option<Vec<Vec<String>>>,
    /// Wait out a conflict (another job still holding the devices, its
    /// release on the way) for up to this many milliseconds before
    /// answering `conflict`: lets a job prolog send its `alloc` without
    /// waiting for the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// `false`: the batch system keeps the job's processes to their devices
    /// itself (SLURM's task/cgroup with `ConstrainDevices=yes`), so cderd
    /// does not set up the job's device cgroups ahead of `confine`, nor
    /// names them in `env`. Recorded with the allocation: only root and
    /// the operators may `confine` such a job (its own user is refused,
    /// since on cgroup v2 the move would take the process out of the batch
    /// system's cgroup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_cgroups: Option<bool>,
    /// Shares of each listed device the batch system granted (SLURM's
    /// `gres/shard` count), where the node offers its GPUs as shares: the
    /// job holds that many of each device's shares beside other sharers,
    /// not the device whole. Needs `devices` or `device_files`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u32>,
}

fn default_type() -> String {
    DEFAULT_TYPE.to_string()
}

impl AllocRequest {
    /// A request for `count` devices of the default type, no constraints.
    pub fn new(job: JobKey, uid: u32, count: u32) -> AllocRequest {
        AllocRequest {
            job,
            uid,
            count,
            cder_type: default_type(),
            min_memory_mib: None,
            model: None,
            devices: None,
            device_files: None,
            wait_ms: None,
            prepare_cgroups: None,
            shares: None,
        }
    }
}

/// `release`, `env` and `confine`: one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// The job.
    pub job: JobKey,
}

/// `env`: one job's allocation, its environment numbered for where the
/// caller's processes run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvRequest {
    /// The job.
    pub job: JobKey,
    /// The device cgroup the processes that get the environment run in;
    /// `none` (the default): node indices. `job` is answered relative only
    /// where cderd can confine the job, since its `confine` refuses
    /// elsewhere; the reply's `device_cgroup` says which numbering it is.
    #[serde(default, skip_serializing_if = "is_no_cgroup")]
    pub device_cgroup: DeviceCgroup,
    /// The indices of the job's devices of the default type that the
    /// processes use (a SLURM step's GPUs); the environment names only
    /// those. Absent: all the job's devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_devices: Option<Vec<u32>>,
}

fn is_no_cgroup(cgroup: &DeviceCgroup) -> bool {
    *cgroup == DeviceCgroup::None
}

impl EnvRequest {
    /// The job's whole allocation, in node indices: the plain `env`.
    pub fn new(job: JobKey) -> EnvRequest {
        EnvRequest { job, device_cgroup: DeviceCgroup::None, step_devices: None }
    }
}

/// `drain`: take `device` out of service, saying why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// `"<type>:<index>"` (`gpgpu:3`) or the device's UUID.
    pub device: String,
    /// Why, for `status` and the operator log.
    pub reason: String,
}

/// `resume`: one device, named as in [`DrainRequest::device`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceRequest {
    /// `"<type>:<index>"` (`gpgpu:3`) or the device's UUID.
    pub device: String,
}

/// `reconcile`: the jobs the batch system still knows; every other job
/// holding devices here (of `lrms`, when given) is released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    /// Every job the batch system still knows.
    pub live_jobs: Vec<JobKey>,
    /// `slurm`, `torque` or `local`: only jobs of that batch system are
    /// considered, so that a SLURM job list never frees TORQUE jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lrms: Option<String>,
    /// The ledger's `generation` (from `status`) read BEFORE the batch
    /// system's list of live jobs was taken: allocations with a later
    /// sequence number are never released by this reconcile, since the
    /// list cannot know them. `None` considers every allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<u64>,
}

/// `accounting`: records overlapping `[since, until]` (unix seconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountingRequest {
    /// Start, unix seconds; `None` = from the first record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// End, unix seconds; `None` = now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
}

/// `ping` and `status` take no fields; this rejects any that are sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoFields {}

impl Request {
    /// The `op` name of this request.
    pub fn op(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Alloc(_) => "alloc",
            Request::Release(_) => "release",
            Request::Env(_) => "env",
            Request::Status => "status",
            Request::Drain(_) => "drain",
            Request::Resume(_) => "resume",
            Request::Reconcile(_) => "reconcile",
            Request::Accounting(_) => "accounting",
            Request::Confine(_) => "confine",
            Request::Usage(_) => "usage",
        }
    }

    /// Whether only root and the configured operators may send it.
    pub fn needs_operator(&self) -> bool {
        matches!(
            self,
            Request::Alloc(_) | Request::Release(_) | Request::Drain(_) | Request::Resume(_) | Request::Reconcile(_)
        )
    }

    /// The wire form: one JSON object followed by `\n`.
    pub fn to_line(&self) -> String {
        let fields = match self {
            Request::Ping | Request::Status => Ok(Value::Object(Map::new())),
            Request::Alloc(r) => serde_json::to_value(r),
            Request::Release(r) | Request::Confine(r) => serde_json::to_value(r),
            Request::Env(r) => serde_json::to_value(r),
            Request::Drain(r) => serde_json::to_value(r),
            Request::Resume(r) => serde_json::to_value(r),
            Request::Reconcile(r) => serde_json::to_value(r),
            Request::Accounting(r) => serde_json::to_value(r),
            Request::Usage(r) => serde_json::to_value(r),
        };
        // These types serialise to objects by construction; the fallback only
        // keeps this total.
        let mut object = match fields {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        // `v` and `op` first, as the protocol document writes requests.
        let mut text = format!("{{\"v\":{PROTOCOL_VERSION},\"op\":\"{}\"", self.op());
        for (key, value) in std::mem::take(&mut object) {
            text.push(',');
            text.push_str(&Value::String(key).to_string());
            text.push(':');
            text.push_str(&value.to_string());
        }
        text.push_str("}\n");
        text
    }

    /// Parses one request line (without or with its trailing newline) as the
    /// daemon does: the version first, then the op, then the op's fields with
    /// unknown ones rejected, then the values' own rules.
    pub fn from_line(line: &[u8]) -> Result<Request, ErrorReply> {
        let bad = |message: String| ErrorReply::new(ErrorCode::BadRequest, message);
        let text = std::str::from_utf8(line).map_err(|e| bad(format!("request is not UTF-8: {e}")))?;
        let value: Value = serde_json::from_str(text.trim_end_matches(['\n', '\r']))
            .map_err(|e| bad(format!("request is not JSON: {e}")))?;
        let Value::Object(mut object) = value else {
            return Err(bad("request must be a JSON object".into()));
        };
        match object.remove("v") {
            None => return Err(bad("missing field `v` (the protocol version, 1)".into())),
            Some(Value::Number(n)) if n.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => {}
            Some(Value::Number(n)) => {
                return Err(ErrorReply::new(
                    ErrorCode::UnsupportedVersion,
                    format!("protocol version {n} is not supported; this daemon speaks {PROTOCOL_VERSION}"),
                ))
            }
            Some(other) => return Err(bad(format!("field `v` must be the number {PROTOCOL_VERSION}, not {other}"))),
        }
        let op = match object.remove("op") {
            None => return Err(bad("missing field `op`".into())),
            Some(Value::String(op)) => op,
            Some(other) => return Err(bad(format!("field `op` must be a string, not {other}"))),
        };
        let fields = Value::Object(object);
        fn parse<T: serde::de::DeserializeOwned>(op: &str, fields: Value) -> Result<T, ErrorReply> {
            serde_json::from_value(fields).map_err(|e| ErrorReply::new(ErrorCode::BadRequest, format!("{op}: {e}")))
        }
        let request = match op.as_str() {
            "ping" => parse::<NoFields>(&op, fields).map(|_| Request::Ping)?,
            "status" => parse::<NoFields>(&op, fields).map(|_| Request::Status)?,
            "alloc" => Request::Alloc(parse(&op, fields)?),
            "release" => Request::Release(parse(&op, fields)?),
            "env" => Request::Env(parse(&op, fields)?),
            "drain" => Request::Drain(parse(&op, fields)?),
            "resume" => Request::Resume(parse(&op, fields)?),
            "reconcile" => Request::Reconcile(parse(&op, fields)?),
            "accounting" => Request::Accounting(parse(&op, fields)?),
            "confine" => Request::Confine(parse(&op, fields)?),
            "usage" => Request::Usage(parse(&op, fields)?),
            _ => {
                let shown: String = op.chars().take(64).collect();
                return Err(bad(format!(
                    "unknown op {shown:?} (expected ping, alloc, release, env, status, drain, resume, reconcile, accounting, confine or usage)"
                )));
            }
        };
        request.validate().map_err(bad)?;
        Ok(request)
    }

    /// The rules serde's types cannot say: bounds, names, consistency.
    fn validate(&self) -> Result<(), String> {
        match self {
            Request::Alloc(r) => {
                if r.count > MAX_COUNT {
                    return Err(format!("alloc: count {} is larger than {MAX_COUNT}", r.count));
                }
                if r.uid == u32::MAX {
                    return Err("alloc: uid 4294967295 is not a user".into());
                }
                check_type_name(&r.cder_type)?;
                if let Some(model) = &r.model {
                    check_text("model", model)?;
                }
                if let Some(n) = r.shares {
                    if n == 0 || n > MAX_COUNT {
                        return Err(format!("alloc: shares must be 1 to {MAX_COUNT}, not {n}"));
                    }
                    if r.count == 0 || (r.devices.is_none() && r.device_files.is_none()) {
                        return Err(
                            "alloc: shares need the devices the batch system chose (devices or device_files)".into()
                        );
                    }
                }
                if r.wait_ms.is_some_and(|ms| ms > MAX_WAIT_MS) {
                    return Err(format!("alloc: wait_ms is larger than {MAX_WAIT_MS} (5 minutes)"));
                }
                if let Some(devices) = &r.devices {
                    if devices.len() != r.count as usize {
                        return Err(format!("alloc: {} devices listed but count is {}", devices.len(), r.count));
                    }
                    let mut sorted = devices.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    if sorted.len() != devices.len() {
                        return Err("alloc: a device index is listed twice".into());
                    }
                }
                if let Some(files) = &r.device_files {
                    if r.devices.is_some() {
                        return Err("alloc: give devices or device_files, not both".into());
                    }
                    if files.len() != r.count as usize {
                        return Err(format!("alloc: {} device files listed but count is {}", files.len(), r.count));
                    }
                    for group in files {
                        if group.is_empty() || group.len() > 8 {
                            return Err("alloc: each entry of device_files names 1 to 8 files".into());
                        }
                        for f in group {
                            check_text("device file", f)?;
                            if !f.starts_with('/') {
                                return Err(format!(
                                    "alloc: device file {:?} is not an absolute path",
                                    f.chars().take(64).collect::<String>()
                                ));
                            }
                        }
                    }
                }
                Ok(())
            }
            Request::Drain(r) => {
                check_device_name(&r.device)?;
                check_text("reason", &r.reason)?;
                if r.reason.trim().is_empty() {
                    return Err("drain: the reason must not be empty".into());
                }
                Ok(())
            }
            Request::Resume(r) => check_device_name(&r.device),
            Request::Reconcile(r) => match r.lrms.as_deref() {
                None | Some("slurm" | "torque" | "local") => Ok(()),
                Some(other) => Err(format!(
                    "reconcile: lrms {:?} is not slurm, torque or local",
                    other.chars().take(32).collect::<String>()
                )),
            },
            Request::Accounting(r) => {
                for (field, value) in [("since", r.since), ("until", r.until)] {
                    match value {
                        Some(t) if t < 0 => return Err(format!("accounting: {field} must not be negative")),
                        Some(t) if t > MAX_UNIX_TIME => {
                            return Err(format!(
                            "accounting: {field} {t} is out of range (at most {MAX_UNIX_TIME}, the end of year 9999)"
                        ))
                        }
                        _ => {}
                    }
                }
                match (r.since, r.until) {
                    (Some(s), Some(u)) if s > u => Err(format!("accounting: since {s} is after until {u}")),
                    _ => Ok(()),
                }
            }
            Request::Env(r) => match &r.step_devices {
                Some(list) if list.len() > MAX_COUNT as usize => {
                    Err(format!("env: more than {MAX_COUNT} step_devices"))
                }
                _ => Ok(()),
            },
            Request::Usage(r) => match (r.since, r.recent) {
                (Some(t), _) if !(0..=MAX_UNIX_TIME).contains(&t) => {
                    Err(format!("usage: since {t} is out of range (0 to {MAX_UNIX_TIME})"))
                }
                (_, Some(n)) if n > MAX_RECENT_SAMPLES => {
                    Err(format!("usage: recent {n} is more than {MAX_RECENT_SAMPLES} samples"))
                }
                _ => Ok(()),
            },
            Request::Ping | Request::Status | Request::Release(_) | Request::Confine(_) => Ok(()),
        }
    }
}

fn check_text(what: &str, text: &str) -> Result<(), String> {
    if text.len() > MAX_TEXT_LEN {
        return Err(format!("{what} is longer than {MAX_TEXT_LEN} bytes"));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{what} must not contain control characters"));
    }
    Ok(())
}

/// The one type-name rule (`cder_request`), which cder.toml and the
/// controller's request parser apply too.
fn check_type_name(name: &str) -> Result<(), String> {
    cder_request::check_type_name(name).map_err(|e| format!("type {e}"))
}

/// A device is `<type>:<index>` or a UUID-like token; nothing else gets in.
fn check_device_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_:.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!("device {:?} is neither <type>:<index> nor a UUID", name.chars().take(40).collect::<String>()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(line: &str) -> ErrorCode {
        Request::from_line(line.as_bytes()).unwrap_err().code
    }

    #[test]
    fn round_trips_every_op() {
        let job: JobKey = "slurm:4242".parse().unwrap();
        let requests = vec![
            Request::Ping,
            Request::Status,
            Request::Alloc(AllocRequest {
                min_memory_mib: Some(4096),
                model: Some("K20".into()),
                ..AllocRequest::new(job.clone(), 1000, 2)
            }),
            Request::Alloc(AllocRequest { devices: Some(vec![1, 3]), ..AllocRequest::new(job.clone(), 1000, 2) }),
            Request::Alloc(AllocRequest {
                devices: Some(vec![0]),
                wait_ms: Some(10_000),
                prepare_cgroups: Some(false),
                ..AllocRequest::new(job.clone(), 1000, 1)
            }),
            Request::Alloc(AllocRequest {
                device_files: Some(vec![
                    vec!["/dev/nvidia1".into(), "/dev/nvidia-caps/nvidia-cap48".into()],
                    vec!["/dev/nvidia2".into()],
                ]),
                ..AllocRequest::new(job.clone(), 1000, 2)
            }),
            Request::Alloc(AllocRequest {
                devices: Some(vec![1]),
                shares: Some(3),
                ..AllocRequest::new(job.clone(), 1000, 1)
            }),
            Request::Release(JobRequest { job: job.clone() }),
            Request::Env(EnvRequest::new(job.clone())),
            Request::Env(EnvRequest {
                device_cgroup: DeviceCgroup::Job,
                step_devices: Some(vec![1]),
                ..EnvRequest::new(job.clone())
            }),
            Request::Env(EnvRequest { device_cgroup: DeviceCgroup::Step, ..EnvRequest::new(job.clone()) }),
            Request::Drain(DrainRequest { device: "gpgpu:3".into(), reason: "Xid 79".into() }),
            Request::Resume(DeviceRequest { device: "GPU-aaaa".into() }),
            Request::Reconcile(ReconcileRequest {
                live_jobs: vec![job.clone()],
                lrms: Some("slurm".into()),
                as_of: None,
            }),
            Request::Reconcile(ReconcileRequest { live_jobs: vec![], lrms: None, as_of: Some(17) }),
            Request::Confine(JobRequest { job: job.clone() }),
            Request::Accounting(AccountingRequest { since: Some(1), until: Some(2) }),
        ];
        for r in requests {
            let line = r.to_line();
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
            assert_eq!(Request::from_line(line.as_bytes()).unwrap(), r, "{line}");
        }
    }

    #[test]
    fn protocol_doc_examples_parse() {
        let r = Request::from_line(
            br#"{"v":1,"op":"alloc","job":"slurm:4242","uid":1000,"count":2,"type":"gpgpu","min_memory_mib":4096}"#,
        )
        .unwrap();
        let Request::Alloc(a) = r else { panic!("not alloc") };
        assert_eq!((a.uid, a.count, a.min_memory_mib), (1000, 2, Some(4096)));
        // The field's first name, from a plugin older than its cderd.
        let Request::Alloc(a) = Request::from_line(
            br#"{"v":1,"op":"alloc","job":"slurm:4242","uid":1000,"count":2,"type":"gpgpu","min_memory_mb":4096}"#,
        )
        .unwrap() else {
            panic!("not alloc")
        };
        assert_eq!(a.min_memory_mib, Some(4096));
        assert!(Request::from_line(br#"{"v":1,"op":"drain","device":"gpgpu:3","reason":"Xid 79"}"#).is_ok());
        assert!(Request::from_line(br#"{"v":1,"op":"reconcile","live_jobs":["slurm:4243"],"lrms":"slurm"}"#).is_ok());
        let Request::Alloc(a) =
            Request::from_line(br#"{"v":1,"op":"alloc","job":"local:a","uid":1,"count":1}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(a.cder_type, "gpgpu");
    }

    #[test]
    fn env_without_the_new_fields_is_the_plain_env() {
        let Request::Env(r) = Request::from_line(br#"{"v":1,"op":"env","job":"slurm:4242"}"#).unwrap() else {
            panic!("not env")
        };
        assert_eq!(r, EnvRequest::new("slurm:4242".parse().unwrap()));
        assert_eq!(Request::Env(r).to_line(), "{\"v\":1,\"op\":\"env\",\"job\":\"slurm:4242\"}\n");
        let Request::Env(r) =
            Request::from_line(br#"{"v":1,"op":"env","job":"slurm:1","device_cgroup":"step","step_devices":[2]}"#)
                .unwrap()
        else {
            panic!()
        };
        assert_eq!((r.device_cgroup, r.step_devices), (DeviceCgroup::Step, Some(vec![2])));
    }

    #[test]
    fn rejects_malformed_requests_with_codes() {
        assert_eq!(code("{not json"), ErrorCode::BadRequest);
        assert_eq!(code("[1,2]"), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"op":"ping"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":"1","op":"ping"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":2,"op":"ping"}"#), ErrorCode::UnsupportedVersion);
        assert_eq!(code(r#"{"v":1,"op":"explode"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"ping","extra":1}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":-1}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":"2"}"#), ErrorCode::BadRequest);
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":1,"colour":"red"}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(code(r#"{"v":1,"op":"alloc","job":"slurm:1; rm -rf /","uid":1,"count":1}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":99999}"#), ErrorCode::BadRequest);
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":2,"devices":[1]}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":2,"devices":[1,1]}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":2,"device_files":[["/dev/nvidia0"]]}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":1,"device_files":[[]]}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":1,"device_files":[["nvidia0"]]}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(
                r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":1,"devices":[0],"device_files":[["/dev/nvidia0"]]}"#
            ),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"v":1,"op":"alloc","job":"slurm:1","uid":1,"count":1,"type":"GPU'; DROP"}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(code(r#"{"v":1,"op":"drain","device":"gpgpu:1","reason":""}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"drain","device":"../etc","reason":"x"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"reconcile","live_jobs":[],"lrms":"lsf"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"accounting","since":5,"until":1}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"confine","job":"slurm:1","pid":7}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"env","job":"slurm:1","device_cgroup":"node"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"release","job":"slurm:1","device_cgroup":"job"}"#), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"v":1,"op":"reconcile","live_jobs":[],"as_of":-1}"#), ErrorCode::BadRequest);
        assert_eq!(code("\u{0}\u{1}"), ErrorCode::BadRequest);
    }

    #[test]
    fn accounting_times_out_of_range_name_the_field() {
        // i64::MAX would overflow the daemon's arithmetic.
        let e = Request::from_line(br#"{"v":1,"op":"accounting","since":9223372036854775807}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
        assert!(e.message.contains("since") && e.message.contains("out of range"), "{}", e.message);
        let e = Request::from_line(br#"{"v":1,"op":"accounting","until":253402300800}"#).unwrap_err();
        assert!(e.message.contains("until"), "{}", e.message);
        let e = Request::from_line(br#"{"v":1,"op":"accounting","since":-9223372036854775808}"#).unwrap_err();
        assert!(e.message.contains("since") && e.message.contains("negative"), "{}", e.message);
        // Beyond i64 altogether: serde refuses, naming the op.
        assert_eq!(code(r#"{"v":1,"op":"accounting","since":99999999999999999999}"#), ErrorCode::BadRequest);
        assert!(Request::from_line(br#"{"v":1,"op":"accounting","since":0,"until":253402300799}"#).is_ok());
    }

    #[test]
    fn operator_ops_are_marked() {
        let job: JobKey = "slurm:1".parse().unwrap();
        assert!(Request::Alloc(AllocRequest::new(job.clone(), 1, 1)).needs_operator());
        assert!(Request::Release(JobRequest { job: job.clone() }).needs_operator());
        assert!(!Request::Env(EnvRequest::new(job.clone())).needs_operator());
        // The job's own uid confines its processes; the daemon checks ownership.
        assert!(!Request::Confine(JobRequest { job }).needs_operator());
        assert!(!Request::Status.needs_operator());
        assert!(!Request::Accounting(AccountingRequest::default()).needs_operator());
    }
}
