//! `cder-registryd`'s request handling: authentication, authorization,
//! routing, JSON errors. A malformed or hostile request gets a 4xx and the
//! service carries on; a panic in one request becomes a 500. The HTTP
//! front end (connections, deadlines, bounds) is [`crate::http`].

use std::sync::Mutex;

use cder_model::{RegistryConfig, VgpgpuMethod};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::*;
use crate::munge::{request_payload, Munge};
use crate::policy::BackendPolicy;
use crate::store::BackendLedger;

/// The registry: its store, policy, and who may change what.
pub struct Registry {
    store: Mutex<BackendLedger>,
    policy: Box<dyn BackendPolicy>,
    munge: Munge,
    operators: std::collections::BTreeSet<u32>,
    max_body: usize,
}

/// Who called, as munged says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// The caller's uid.
    pub uid: u32,
}

/// A request head munged vouched for: the caller, and the body its
/// credential was made for (the request's body must be exactly this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    /// The uid the credential names.
    pub uid: u32,
    /// The body the credential was made for.
    pub body: Vec<u8>,
}

/// The operations only root and operators may call.
const OPERATOR_PATHS: [&str; 6] =
    ["/v1/register", "/v1/unregister", "/v1/request", "/v1/release", "/v1/offline", "/v1/online"];
/// The operations any authenticated uid may call.
const READ_PATHS: [&str; 3] = ["/v1/query", "/v1/status", "/v1/allocation"];

/// The path of a request target (without the query).
fn path_of(target: &str) -> &str {
    target.split_once('?').map_or(target, |(p, _)| p)
}

/// The checks a head gets before any credential is spent or any body read:
/// a known path and an `Authorization: MUNGE <credential>` of sane shape.
pub fn screen(head: &crate::head::Head, max_body: usize) -> Result<(), ApiError> {
    let path = path_of(&head.target);
    if !OPERATOR_PATHS.contains(&path) && !READ_PATHS.contains(&path) {
        return Err(ApiError::new(ApiErrorCode::NotFound, format!("no such endpoint {path:?}")));
    }
    credential_of(head.authorization.as_deref(), max_body).map(|_| ())
}

/// The credential in an `Authorization` value, or 401.
fn credential_of(auth: Option<&str>, max_body: usize) -> Result<&str, ApiError> {
    let unauth = |m: &str| ApiError::new(ApiErrorCode::Unauthenticated, m);
    let cred = auth
        .and_then(|a| a.trim().strip_prefix("MUNGE "))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| unauth("every request needs an `Authorization: MUNGE <credential>` header"))?;
    // base64 of the payload (the body plus the request line) and MUNGE's
    // own fields: well under twice the body limit plus 4 KiB.
    let longest = max_body.saturating_mul(2).saturating_add(4096);
    // `MUNGE:<base64>:` as munge writes it; anything else is refused here,
    // before a worker spends an unmunge on it.
    let inner = cred.strip_prefix("MUNGE:").and_then(|c| c.strip_suffix(':')).unwrap_or("");
    let base64 = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    if cred.len() > longest || inner.len() < 16 || !inner.bytes().all(base64) {
        return Err(unauth("malformed MUNGE credential"));
    }
    Ok(cred)
}

/// Why the registry could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// An `[registry] operators` entry names no user.
    #[error("[registry] operators: {0}")]
    Operators(String),
    /// The state directory is unusable.
    #[error(transparent)]
    StateDir(#[from] cder_ledger::durable::StateDirError),
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] crate::store::BackendLedgerError),
}

impl Registry {
    /// Opens the state in `config.state_dir` with the configured policy.
    pub fn open(config: &RegistryConfig) -> Result<Registry, StartError> {
        Self::open_with(config, crate::policy::from_config(config.policy))
    }

    /// As [`Registry::open`], with any policy.
    pub fn open_with(config: &RegistryConfig, policy: Box<dyn BackendPolicy>) -> Result<Registry, StartError> {
        // 0700 whatever the umask; refused when group or others may write.
        cder_ledger::durable::create_state_dir(&config.state_dir)?;
        let store = BackendLedger::open(&config.state_dir.join("registry.db"), config.port_base)?;
        let operators = cder_ledger::resolve_operators(&config.operators).map_err(StartError::Operators)?;
        Ok(Registry {
            store: Mutex::new(store),
            policy,
            munge: Munge::from_config(config),
            operators,
            max_body: config.max_body_bytes,
        })
    }

    /// The state, as `GET /v1/status` gives it.
    pub fn status(&self) -> Result<RegistryStatus, ApiError> {
        self.with_store(|s| s.status())
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Runs `f` on the state; a failure becomes the API error that names
    /// the database (and a full disk as such).
    fn with_store<T>(
        &self,
        f: impl FnOnce(&mut BackendLedger) -> Result<T, crate::store::BackendLedgerError>,
    ) -> Result<T, ApiError> {
        let mut store = self.store();
        let result = f(&mut store);
        result.map_err(|e| store.api_error(e))
    }

    fn store(&self) -> std::sync::MutexGuard<'_, BackendLedger> {
        // A panic under the lock leaves no half-done transaction behind
        // (rusqlite rolls back on drop), so the store is still sound.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_operator(&self, uid: u32) -> bool {
        uid == 0 || self.operators.contains(&uid)
    }

    /// Serves one request already read: `(status, JSON body)`. `auth` is
    /// the `Authorization` header. (The front end does the same in steps:
    /// [`screen`], [`Registry::authenticate_head`], then
    /// [`Registry::serve_authorized`] once the body is in.)
    pub fn handle(&self, method: &str, url: &str, auth: Option<&str>, body: &[u8]) -> (u16, String) {
        let head = crate::head::Head {
            method: method.to_string(),
            target: url.to_string(),
            authorization: auth.map(str::to_string),
            content_length: body.len(),
            expect_continue: false,
            len: 0,
        };
        let who = screen(&head, self.max_body).and_then(|()| self.authenticate_head(&head));
        match who {
            Ok(who) => self.serve_authorized(method, url, &who, body),
            Err(e) => (e.code.http_status(), to_json(&e)),
        }
    }

    /// Checks the head's credential with munged: who sent it, and the body
    /// it was made for. Runs before the body is read.
    pub fn authenticate_head(&self, head: &crate::head::Head) -> Result<Authorized, ApiError> {
        let unauth = |m: String| ApiError::new(ApiErrorCode::Unauthenticated, m);
        let cred = credential_of(head.authorization.as_deref(), self.max_body)?;
        let v = self.munge.decode(cred).map_err(|e| {
            if e.is_munged_down() {
                let socket = self.munge.socket.as_ref().map_or("its default socket".into(), |s| s.display().to_string());
                ApiError::new(
                    ApiErrorCode::Unavailable,
                    format!("MUNGE: munged does not answer at {socket}, so no credential can be checked ({e}); nothing was done, try again"),
                )
            } else {
                unauth(format!("credential refused: {e}"))
            }
        })?;
        let prefix = request_payload(&head.method, &head.target, b"");
        match v.payload.strip_prefix(prefix.as_slice()) {
            Some(body) => Ok(Authorized { uid: v.uid, body: body.to_vec() }),
            None => {
                Err(unauth(format!("the credential was made for another request, not {} {}", head.method, head.target)))
            }
        }
    }

    /// Serves a request whose head [`Registry::authenticate_head`] passed,
    /// once its body is read: the body must be the credential's.
    pub fn serve_authorized(&self, method: &str, url: &str, who: &Authorized, body: &[u8]) -> (u16, String) {
        let result = if body == who.body.as_slice() {
            self.dispatch(method, url, Caller { uid: who.uid }, body)
        } else {
            Err(ApiError::new(
                ApiErrorCode::Unauthenticated,
                format!("the credential was made for another request, not {method} {url} with this body"),
            ))
        };
        match result {
            Ok(json) => (200, json),
            Err(e) => (e.code.http_status(), to_json(&e)),
        }
    }

    fn dispatch(&self, method: &str, url: &str, caller: Caller, body: &[u8]) -> Result<String, ApiError> {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let post = |m: &str| -> Result<(), ApiError> {
            if m == "POST" {
                Ok(())
            } else {
                Err(ApiError::new(ApiErrorCode::MethodNotAllowed, format!("{path} takes POST, not {m}")))
            }
        };
        let get = |m: &str| -> Result<(), ApiError> {
            if m == "GET" {
                Ok(())
            } else {
                Err(ApiError::new(ApiErrorCode::MethodNotAllowed, format!("{path} takes GET, not {m}")))
            }
        };
        if !OPERATOR_PATHS.contains(&path) && !READ_PATHS.contains(&path) {
            return Err(ApiError::new(ApiErrorCode::NotFound, format!("no such endpoint {path:?}")));
        }
        if OPERATOR_PATHS.contains(&path) && !self.is_operator(caller.uid) {
            return Err(ApiError::new(
                ApiErrorCode::Forbidden,
                format!("{path} is only for root and [registry] operators; uid {} is neither", caller.uid),
            ));
        }
        let now = cder_ledger::now();
        match path {
            "/v1/register" => {
                post(method)?;
                let r: RegisterRequest = parse(body)?;
                r.validate()?;
                let done = self.with_store(|s| s.register(&r, now))?;
                tracing::info!("uid {}: registered {} at {}", caller.uid, r.uuid, done.endpoint);
                Ok(to_json(&done))
            }
            "/v1/unregister" => {
                post(method)?;
                let r: UnregisterRequest = parse(body)?;
                check_id("uuid", &r.uuid)?;
                let removed = self.with_store(|s| s.unregister(&r.uuid))?;
                tracing::info!("uid {}: unregistered {} (was registered: {removed})", caller.uid, r.uuid);
                Ok(to_json(&Unregistered { uuid: r.uuid, removed }))
            }
            "/v1/request" => {
                post(method)?;
                let r: BackendRequest = parse(body)?;
                r.validate()?;
                let a = self.with_store(|s| s.request(&r, self.policy.as_ref(), now))?;
                tracing::info!(
                    "uid {}: {} on {}: {} {} backend(s): {}",
                    caller.uid,
                    r.job,
                    r.node,
                    a.backends.len(),
                    r.method,
                    a.backends.iter().map(Backend::endpoint).collect::<Vec<_>>().join(" ")
                );
                Ok(to_json(&a))
            }
            "/v1/release" => {
                post(method)?;
                let r: ReleaseRequest = parse(body)?;
                let released = self.with_store(|s| s.release(&r.job, now))?;
                tracing::info!("uid {}: {} released {released} backend(s)", caller.uid, r.job);
                Ok(to_json(&BackendsReleased { job: r.job, released }))
            }
            "/v1/offline" | "/v1/online" => {
                post(method)?;
                let r: OfflineRequest = parse(body)?;
                r.validate()?;
                let offline = path == "/v1/offline";
                let backends = self.with_store(|s| s.set_offline(&r, offline))?;
                tracing::info!(
                    "uid {}: {} {} backend(s) {}",
                    caller.uid,
                    &path[4..],
                    backends.len(),
                    r.uuid.as_deref().or(r.host.as_deref()).unwrap_or("")
                );
                let mut status = self.with_store(|s| s.status())?;
                status.backends = backends;
                Ok(to_json(&status))
            }
            "/v1/allocation" => {
                get(method)?;
                let job = parse_job_query(query)?;
                let (allocations, uids) = self.with_store(|s| s.allocations(&job))?;
                if allocations.is_empty() {
                    return Err(ApiError::new(ApiErrorCode::NotFound, format!("{job} holds no backends")));
                }
                // Like cderd's `env`: operators, or the job's own user.
                if !self.is_operator(caller.uid) && !uids.iter().all(|u| *u == Some(caller.uid)) {
                    return Err(ApiError::new(
                        ApiErrorCode::Forbidden,
                        format!("{job} is not a job of uid {}", caller.uid),
                    ));
                }
                Ok(to_json(&JobAllocations { job, allocations }))
            }
            "/v1/query" => {
                get(method)?;
                let (name, m) = parse_query(query)?;
                let status = self.with_store(|s| s.status())?;
                Ok(to_json(&QueryReply { name, method: m, value: status.counts_for(m).get(name) }))
            }
            _ => {
                get(method)?;
                Ok(to_json(&self.with_store(|s| s.status())?))
            }
        }
    }

    /// Database-level consistency problems (none expected).
    pub fn check(&self) -> Result<Vec<String>, ApiError> {
        self.with_store(|s| s.check_invariants())
    }
}

/// The body as `T`; an error names the field at fault (`count: invalid
/// value: integer 99999999999, expected u32 …`).
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            ApiError::bad(format!("malformed request body: {}", e.inner()))
        } else {
            ApiError::bad(format!("{path}: {}", e.inner()))
        }
    })?;
    de.end().map_err(|e| ApiError::bad(format!("malformed request body: {e}")))?;
    Ok(value)
}

pub(crate) fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|e| format!("{{\"code\":\"internal\",\"message\":\"cannot encode the reply: {e}\"}}"))
}

/// `job=<lrms>:<id>` (percent-encoded).
fn parse_job_query(q: &str) -> Result<cder_model::JobKey, ApiError> {
    let mut job = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("job", v)) => {
                job = Some(
                    crate::client::query_unescape(v).ok_or_else(|| ApiError::bad("job: malformed percent-encoding"))?,
                )
            }
            _ => return Err(ApiError::bad(format!("unknown query parameter {pair:?} (job)"))),
        }
    }
    let job = job.ok_or_else(|| ApiError::bad("give job=<lrms>:<id>"))?;
    job.parse().map_err(|e| ApiError::bad(format!("job: {e}")))
}

/// `name=…&method=…` (method optional; `name` defaults to `free`).
fn parse_query(q: &str) -> Result<(QueryName, Option<VgpgpuMethod>), ApiError> {
    let mut name = QueryName::Free;
    let mut method = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "name" => name = v.parse().map_err(ApiError::bad)?,
            "method" => method = Some(v.parse().map_err(ApiError::bad)?),
            other => return Err(ApiError::bad(format!("unknown query parameter {other:?} (name, method)"))),
        }
    }
    Ok((name, method))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings() {
        assert_eq!(parse_query("").unwrap(), (QueryName::Free, None));
        assert_eq!(parse_query("name=total&method=VCL").unwrap(), (QueryName::Total, Some(VgpgpuMethod::Vcl)));
        assert!(parse_query("name=total&x=1").is_err());
        assert!(parse_query("method=OpenGL").is_err());
    }

    #[test]
    fn body_errors_name_the_field() {
        let cases = [
            (r#"{"job":"slurm:1","count":4294967296,"node":"n","method":"VCL"}"#, "count: "),
            (r#"{"job":"slurm:1","count":1.5,"node":"n","method":"VCL"}"#, "count: "),
            (r#"{"job":"slurm:1","count":1,"node":"n","method":"VCL","uid":-1}"#, "uid: "),
            (r#"{"job":"slurm:1","count":1,"node":"n","method":"VCL"} trailing"#, "malformed request body: "),
            (r#"[1]"#, "[0]: "),
            (r#""x""#, "malformed request body: "),
        ];
        for (body, prefix) in cases {
            let e = parse::<BackendRequest>(body.as_bytes()).unwrap_err();
            assert!(e.message.starts_with(prefix), "{body}: {}", e.message);
        }
        let e =
            parse::<RegisterRequest>(br#"{"uuid":"u","vendor":"v","device":99999999999,"host":"h","methods":["VCL"]}"#)
                .unwrap_err();
        assert!(e.message.starts_with("device: "), "{}", e.message);
        assert_eq!(parse::<ReleaseRequest>(br#"{"job":"slurm:3"}"#).unwrap().job.to_string(), "slurm:3");
    }

    #[test]
    fn unauthenticated_and_unknown_requests_are_refused_without_munged() {
        let dir = tempfile::tempdir().unwrap();
        let config = RegistryConfig {
            state_dir: dir.path().into(),
            munge_socket: Some(dir.path().join("no-munged")),
            ..RegistryConfig::default()
        };
        let r = Registry::open(&config).unwrap();
        assert_eq!(r.handle("GET", "/v1/status", None, b"").0, 401);
        assert_eq!(r.handle("GET", "/v1/status", Some("Basic eDp5"), b"").0, 401);
        assert_eq!(r.handle("GET", "/v1/status", Some("MUNGE \u{7}"), b"").0, 401);
        // Not munge's shape: refused before unmunge runs.
        for cred in ["MUNGE MUNGE:AAAA:", "MUNGE MUNGE:AAAAAAAAAAAAAAAAAAAA", "MUNGE MUNGE:AAAAAAAA!AAAAAAAAAAAAAA:"] {
            let (status, body) = r.handle("POST", "/v1/request", Some(cred), b"{}");
            assert_eq!(status, 401);
            assert!(body.contains("malformed MUNGE credential"), "{body}");
        }
        // munged is not running at that socket: the credential cannot be
        // checked, which is the service's fault (503), not the client's.
        let (status, body) =
            r.handle("POST", "/v1/request", Some("MUNGE MUNGE:AwQFAABNm8dUWR1OksE1A7a3uksb1tGI:"), b"{}");
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("MUNGE: munged does not answer at") && body.contains("no-munged"), "{body}");
        assert_eq!(r.handle("GET", "/etc/passwd", None, b"").0, 404);
    }
}
