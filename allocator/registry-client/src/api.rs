//! The registry's HTTP/JSON interface: the thesis's operations (Figure 4.2)
//! plus offline/online and status.
//!
//! | method, path | body / query | reply | who |
//! |---|---|---|---|
//! | `POST /v1/register` | [`RegisterRequest`] | [`Registered`] | operators |
//! | `POST /v1/unregister` | [`UnregisterRequest`] | [`Unregistered`] | operators |
//! | `POST /v1/request` | [`BackendRequest`] | [`BackendAllocation`] | operators |
//! | `POST /v1/release` | [`ReleaseRequest`] | [`BackendsReleased`] | operators |
//! | `POST /v1/offline`, `/v1/online` | [`OfflineRequest`] | [`RegistryStatus`] of the backends changed | operators |
//! | `GET /v1/query?name=free&method=rCUDA` | — | [`QueryReply`] | any authenticated uid |
//! | `GET /v1/status` | — | [`RegistryStatus`] | any authenticated uid |
//! | `GET /v1/allocation?job=slurm:42` | — | [`JobAllocations`] | operators, the job's owner |
//!
//! Bodies are JSON objects; unknown fields are refused. Errors are
//! [`ApiError`] with a 4xx/5xx status.

use std::collections::BTreeMap;

use cder_model::{JobKey, VgpgpuMethod};
use serde::{Deserialize, Serialize};

/// The largest `count` one request may ask for.
pub const MAX_COUNT: u32 = 4096;
/// The highest device index a backend may be pinned to (it is written
/// into `CUDA_VISIBLE_DEVICES` / `GPU_DEVICE_ORDINAL` of the backend).
pub const MAX_DEVICE: u32 = 65535;
/// Longest identifier (UUID, host, reason) accepted, in bytes.
pub const MAX_ID_BYTES: usize = 255;

/// `POST /v1/register`: a factory announces one backend (the thesis's
/// container). The registry answers with the endpoint the backend must
/// listen on; registering the same UUID again returns the same endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The device UUID on NVIDIA, `<fqdn>:<device>` elsewhere.
    pub uuid: String,
    /// `Nvidia`, `AMD`, …
    pub vendor: String,
    /// The device's index on its host (what the backend is pinned to).
    pub device: u32,
    /// The host jobs reach the backend on.
    pub host: String,
    /// The API-interception methods the backend serves.
    pub methods: Vec<VgpgpuMethod>,
}

/// The endpoint given to a registered backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registered {
    /// The backend's device UUID, as registered.
    pub uuid: String,
    /// The host the backend listens on.
    pub host: String,
    /// The port the registry gave the backend (stable for its UUID).
    pub port: u16,
    /// `host:port`.
    pub endpoint: String,
}

/// `POST /v1/unregister`: the backend's device is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnregisterRequest {
    /// The device UUID given at registration.
    pub uuid: String,
}

/// The reply to unregister; `removed` is false when it was not registered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unregistered {
    /// The device UUID the factory asked to remove.
    pub uuid: String,
    /// False when no backend had that UUID (unregister is idempotent).
    pub removed: bool,
}

/// `POST /v1/request`: `count` backends for `job`'s frontend on `node`.
/// Idempotent per (job, node): asking again returns the same backends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendRequest {
    /// The job the backends are for (`slurm:42`, `torque:7.server`).
    pub job: JobKey,
    /// How many backends the frontend wants, 1 to [`MAX_COUNT`].
    pub count: u32,
    /// The frontend node (the thesis's "node number"): where the job runs.
    pub node: String,
    /// The interception method the frontend's library speaks; backends of
    /// other methods are never given.
    pub method: VgpgpuMethod,
    /// The job's owner, who may then read the allocation
    /// (`GET /v1/allocation`) with its own credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The most backends the job may hold on all its nodes together: what
    /// its batch system granted (SLURM's `vgpgpu` licences). A request
    /// that would take the job past it is refused (`conflict`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_limit: Option<u32>,
}

/// One backend given to a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backend {
    /// The UUID of the device behind the backend.
    pub uuid: String,
    /// The device's vendor (`Nvidia`, `AMD`, …), as registered.
    pub vendor: String,
    /// The host the frontend connects to.
    pub host: String,
    /// The port the backend listens on there.
    pub port: u16,
    /// The device index on `host` the backend is pinned to.
    pub device: u32,
}

impl Backend {
    /// `host:port`.
    pub fn endpoint(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// What a job's frontend on one node holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendAllocation {
    /// The job holding the backends.
    pub job: JobKey,
    /// The frontend node they were given for.
    pub node: String,
    /// The method all of them serve for this job.
    pub method: VgpgpuMethod,
    /// The backends the frontend may connect to.
    pub backends: Vec<Backend>,
}

/// `GET /v1/allocation?job=…`: what a job holds, on every node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobAllocations {
    /// The job asked about.
    pub job: JobKey,
    /// One entry per node where the job holds backends; empty when it holds none.
    pub allocations: Vec<BackendAllocation>,
}

impl JobAllocations {
    /// Every backend of the job, node by node.
    pub fn backends(&self) -> Vec<Backend> {
        self.allocations.iter().flat_map(|a| a.backends.iter().cloned()).collect()
    }
}

/// `POST /v1/release`: every backend of `job`, on every node. Idempotent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The job whose backends go back to the pool.
    pub job: JobKey,
}

/// How many backends a release returned to the pool (0 the second time).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendsReleased {
    /// The job that was released.
    pub job: JobKey,
    /// How many backends it held; 0 when it held none or was already released.
    pub released: u32,
}

/// `POST /v1/offline` and `/v1/online`: one backend (`uuid`) or every
/// backend of a host (`host`) — exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfflineRequest {
    /// One backend, by device UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Every backend registered on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Why (offline only; shown in status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What `query` can count (the thesis's QueryName).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryName {
    /// Registered, online and not held by a job.
    Free,
    /// Registered (online or offline).
    Total,
    /// Held by a job.
    InUse,
    /// Registered and set offline.
    Offline,
}

impl QueryName {
    /// Every name, as written in the query string.
    pub const ALL: [(&'static str, QueryName); 4] = [
        ("free", QueryName::Free),
        ("total", QueryName::Total),
        ("in_use", QueryName::InUse),
        ("offline", QueryName::Offline),
    ];

    /// The name as written in the query string (`in_use` for [`QueryName::InUse`]).
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(_, q)| *q == self).map_or("free", |(s, _)| s)
    }
}

impl std::str::FromStr for QueryName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = if s == "used" || s == "in-use" { "in_use" } else { s };
        Self::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, q)| *q)
            .ok_or_else(|| format!("{s:?} is not a query name (free, total, in_use, offline)"))
    }
}

/// The answer to `query`: one integer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryReply {
    /// What was counted.
    pub name: QueryName,
    /// The method counted; `None`: backends of any method.
    pub method: Option<VgpgpuMethod>,
    /// The count.
    pub value: u64,
}

/// A backend's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendState {
    /// Online and held by no job: the next request may get it.
    Free,
    /// Held by a job until that job is released.
    Allocated,
    /// Set offline by an operator and held by no job: never handed out.
    Offline,
}

/// One registered backend in `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendStatus {
    /// The device UUID.
    pub uuid: String,
    /// The device's vendor, as registered.
    pub vendor: String,
    /// The host the backend listens on.
    pub host: String,
    /// The port it was given.
    pub port: u16,
    /// The device index on its host it is pinned to.
    pub device: u32,
    /// The methods it serves.
    pub methods: Vec<VgpgpuMethod>,
    /// Allocated when a job holds it, else offline or free.
    pub state: BackendState,
    /// Set offline by an operator (an allocated backend may be too: it turns
    /// offline when its job releases it).
    pub offline: bool,
    /// The operator's reason for setting it offline, if one was given.
    pub reason: Option<String>,
    /// The job holding it, if allocated.
    pub job: Option<JobKey>,
    /// The frontend node it was given for, if allocated.
    pub node: Option<String>,
}

/// Backend counts for one method (or all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendCounts {
    /// Registered backends, online or offline.
    pub total: u64,
    /// Backends online and held by no job.
    pub free: u64,
    /// Backends held by a job.
    pub in_use: u64,
    /// Backends set offline and held by no job (one still held counts as in use).
    pub offline: u64,
}

impl BackendCounts {
    /// The count a [`QueryName`] asks for.
    pub fn get(&self, name: QueryName) -> u64 {
        match name {
            QueryName::Free => self.free,
            QueryName::Total => self.total,
            QueryName::InUse => self.in_use,
            QueryName::Offline => self.offline,
        }
    }
}

/// `GET /v1/status`: every registered backend and the counts, per method
/// (keys `rCUDA`, `VCL`) and over all (`all`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryStatus {
    /// Every registered backend (and any unregistered one a job still
    /// holds), by host and device.
    pub backends: Vec<BackendStatus>,
    /// BackendCounts keyed by method name (`rCUDA`, `VCL`) and `all`.
    pub counts: BTreeMap<String, BackendCounts>,
}

impl RegistryStatus {
    /// The counts for `method`, or over all backends.
    pub fn counts_for(&self, method: Option<VgpgpuMethod>) -> BackendCounts {
        self.counts.get(method.map_or("all", |m| m.name())).copied().unwrap_or_default()
    }
}

/// Error codes, each with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiErrorCode {
    /// 400: malformed JSON, a bad field, a bad query string.
    BadRequest,
    /// 401: no MUNGE credential, or one that does not verify or bind this request.
    Unauthenticated,
    /// 403: authenticated, but not root or an operator.
    Forbidden,
    /// 404: unknown path, or unknown backend/host.
    NotFound,
    /// 405: wrong HTTP method for the path.
    MethodNotAllowed,
    /// 409: a job that holds backends asked for something else.
    Conflict,
    /// 409: not enough free backends (carries `free`).
    Insufficient,
    /// 408: the request head or body did not arrive in time.
    Timeout,
    /// 413: body larger than `max_body_bytes`.
    TooLarge,
    /// 431: request head too long or with too many headers.
    HeadersTooLarge,
    /// 429: the caller's uid already holds its share of the registry's
    /// connections (`max_connections_per_uid`) with requests in progress.
    TooManyConnections,
    /// 500: the database failed (a full disk among others); nothing was changed.
    Internal,
    /// 503: munged on the registry's host does not answer, so no
    /// credential can be checked; nothing was done, try again.
    Unavailable,
}

impl ApiErrorCode {
    /// The HTTP status that carries this code.
    pub fn http_status(self) -> u16 {
        match self {
            ApiErrorCode::BadRequest => 400,
            ApiErrorCode::Unauthenticated => 401,
            ApiErrorCode::Forbidden => 403,
            ApiErrorCode::NotFound => 404,
            ApiErrorCode::MethodNotAllowed => 405,
            ApiErrorCode::Conflict | ApiErrorCode::Insufficient => 409,
            ApiErrorCode::Timeout => 408,
            ApiErrorCode::TooLarge => 413,
            ApiErrorCode::HeadersTooLarge => 431,
            ApiErrorCode::TooManyConnections => 429,
            ApiErrorCode::Internal => 500,
            ApiErrorCode::Unavailable => 503,
        }
    }
}

/// An error reply body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(deny_unknown_fields)]
#[error("{message} ({code:?})")]
pub struct ApiError {
    /// The machine-readable reason; it also fixes the HTTP status.
    pub code: ApiErrorCode,
    /// A one-line explanation for the operator or the user.
    pub message: String,
    /// Free backends of the method, for `insufficient`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free: Option<u64>,
}

impl ApiError {
    /// An error with `code` and `message` and no free count.
    pub fn new(code: ApiErrorCode, message: impl Into<String>) -> ApiError {
        ApiError { code, message: message.into(), free: None }
    }
    /// A `bad_request` error: the caller sent something malformed.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(ApiErrorCode::BadRequest, message)
    }
}

/// Checks an identifier (UUID, host): non-empty, at most
/// [`MAX_ID_BYTES`], letters, digits and `-_.:@`.
pub fn check_id(what: &str, value: &str) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= MAX_ID_BYTES
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad(format!("{what} {value:?} must be 1-{MAX_ID_BYTES} letters, digits or -_.:@")))
    }
}

/// Checks free text (a reason): 1 to 1024 bytes, no control characters,
/// not only blanks.
pub fn check_text(what: &str, value: &str) -> Result<(), ApiError> {
    if value.trim().is_empty() || value.len() > 1024 || value.chars().any(char::is_control) {
        return Err(ApiError::bad(format!("{what} must be 1-1024 bytes without control characters")));
    }
    Ok(())
}

impl RegisterRequest {
    /// Field checks beyond JSON types.
    pub fn validate(&self) -> Result<(), ApiError> {
        check_id("uuid", &self.uuid)?;
        check_id("host", &self.host)?;
        check_id("vendor", &self.vendor)?;
        if self.device > MAX_DEVICE {
            return Err(ApiError::bad(format!("device: {} is more than {MAX_DEVICE}", self.device)));
        }
        if self.methods.is_empty() {
            return Err(ApiError::bad("methods must list at least one method (rCUDA, VCL)"));
        }
        Ok(())
    }
}

impl BackendRequest {
    /// Field checks beyond JSON types.
    pub fn validate(&self) -> Result<(), ApiError> {
        check_id("node", &self.node)?;
        if !(1..=MAX_COUNT).contains(&self.count) {
            return Err(ApiError::bad(format!("count: {} is not 1 to {MAX_COUNT}", self.count)));
        }
        if self.uid == Some(u32::MAX) {
            // (uid_t)-1 means "no uid" to the kernel: never an owner.
            return Err(ApiError::bad(format!("uid: {} is not a user id", u32::MAX)));
        }
        Ok(())
    }
}

impl OfflineRequest {
    /// Exactly one of `uuid` and `host`, both well-formed.
    pub fn validate(&self) -> Result<(), ApiError> {
        match (&self.uuid, &self.host) {
            (Some(u), None) => check_id("uuid", u)?,
            (None, Some(h)) => check_id("host", h)?,
            _ => return Err(ApiError::bad("give exactly one of uuid and host")),
        }
        if let Some(r) = &self.reason {
            check_text("reason", r)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_refuse_unknown_fields_and_bad_values() {
        let ok: BackendRequest =
            serde_json::from_str(r#"{"job":"slurm:1","count":3,"node":"n1","method":"rCUDA"}"#).unwrap();
        assert_eq!((ok.method, ok.uid), (VgpgpuMethod::Rcuda, None));
        assert!(ok.validate().is_ok());
        assert!(serde_json::from_str::<BackendRequest>(
            r#"{"job":"slurm:1","count":3,"node":"n1","method":"rCUDA","x":1}"#
        )
        .is_err());
        assert!(serde_json::from_str::<BackendRequest>(r#"{"job":"bogus","count":3,"node":"n1","method":"rCUDA"}"#)
            .is_err());
        assert!(serde_json::from_str::<BackendRequest>(r#"{"job":"slurm:1","count":-1,"node":"n1","method":"VCL"}"#)
            .is_err());
        for count in [0, MAX_COUNT + 1, u32::MAX] {
            let e = BackendRequest { count, ..ok.clone() }.validate().unwrap_err();
            assert_eq!(e.code, ApiErrorCode::BadRequest);
            assert!(e.message.starts_with("count:"), "{}", e.message);
        }
        let e = BackendRequest { uid: Some(u32::MAX), ..ok.clone() }.validate().unwrap_err();
        assert!(e.message.starts_with("uid:"), "{}", e.message);
        let reg = RegisterRequest {
            uuid: "u".into(),
            vendor: "v".into(),
            device: MAX_DEVICE + 1,
            host: "h".into(),
            methods: vec![VgpgpuMethod::Vcl],
        };
        assert!(reg.validate().unwrap_err().message.starts_with("device:"));
        assert!(RegisterRequest { device: MAX_DEVICE, ..reg }.validate().is_ok());
        let bad_node = BackendRequest { node: "a b".into(), ..ok };
        assert!(bad_node.validate().is_err());
    }

    #[test]
    fn offline_needs_exactly_one_target() {
        assert!(OfflineRequest::default().validate().is_err());
        let both = OfflineRequest { uuid: Some("u".into()), host: Some("h".into()), reason: None };
        assert!(both.validate().is_err());
        let host = OfflineRequest { host: Some("gpu01".into()), reason: Some("fan".into()), ..Default::default() };
        assert!(host.validate().is_ok());
        let ctl = OfflineRequest { host: Some("gpu01".into()), reason: Some("a\nb".into()), ..Default::default() };
        assert!(ctl.validate().is_err());
    }

    #[test]
    fn query_names_and_http_statuses() {
        assert_eq!("used".parse::<QueryName>().unwrap(), QueryName::InUse);
        assert_eq!("total".parse::<QueryName>().unwrap().as_str(), "total");
        assert!("everything".parse::<QueryName>().is_err());
        assert_eq!(ApiErrorCode::Insufficient.http_status(), 409);
        assert_eq!(ApiErrorCode::Unauthenticated.http_status(), 401);
        assert_eq!(ApiErrorCode::Unavailable.http_status(), 503);
        assert_eq!(serde_json::to_string(&ApiErrorCode::Unavailable).unwrap(), r#""unavailable""#);
        assert_eq!((ApiErrorCode::Timeout.http_status(), ApiErrorCode::HeadersTooLarge.http_status()), (408, 431));
        let e: ApiError = serde_json::from_str(r#"{"code":"insufficient","message":"m","free":2}"#).unwrap();
        assert_eq!(e.free, Some(2));
    }
}
