//! `cder-registryd`'s HTTP side: authentication, authorization, routing,
//! bounded bodies, JSON errors. A malformed or hostile request gets a 4xx
//! and the service carries on; a panic in one request becomes a 500.

use std::io::Read;
use std::sync::{Arc, Mutex};

use cder_model::{RegistryConfig, VgpgpuMethod};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::*;
use crate::munge::{request_payload, Munge};
use crate::policy::BackendPolicy;
use crate::store::Store;

/// The registry: its store, policy, and who may change what.
pub struct Registry {
    store: Mutex<Store>,
    policy: Box<dyn BackendPolicy>,
    munge: Munge,
    operators: std::collections::BTreeSet<u32>,
    max_body: usize,
}

/// Who called, as munged says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
}

/// Why the registry could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("[registry] operators: {0}")]
    Operators(String),
    #[error("cannot create state dir {}: {source}", path.display())]
    StateDir { path: std::path::PathBuf, source: std::io::Error },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl Registry {
    /// Opens the state in `config.state_dir` with the configured policy.
    pub fn open(config: &RegistryConfig) -> Result<Registry, StartError> {
        Self::open_with(config, crate::policy::from_config(config.policy))
    }

    /// As [`Registry::open`], with any policy.
    pub fn open_with(config: &RegistryConfig, policy: Box<dyn BackendPolicy>) -> Result<Registry, StartError> {
        std::fs::create_dir_all(&config.state_dir).map_err(|source| StartError::StateDir { path: config.state_dir.clone(), source })?;
        let store = Store::open(&config.state_dir.join("registry.db"), config.port_base)?;
        let operators = cderd::daemon::resolve_operators(&config.operators).map_err(StartError::Operators)?;
        Ok(Registry { store: Mutex::new(store), policy, munge: Munge::from_config(config), operators, max_body: config.max_body_bytes })
    }

    /// The state, as `GET /v1/status` gives it.
    pub fn status(&self) -> Result<Status, ApiError> {
        self.store().status().map_err(crate::store::StoreError::into_api)
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        // A panic under the lock leaves no half-done transaction behind
        // (rusqlite rolls back on drop), so the store is still sound.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_operator(&self, uid: u32) -> bool {
        uid == 0 || self.operators.contains(&uid)
    }

    /// Serves one request already read: `(status, JSON body)`. `auth` is
    /// the `Authorization` header.
    pub fn handle(&self, method: &str, url: &str, auth: Option<&str>, body: &[u8]) -> (u16, String) {
        match self.dispatch(method, url, auth, body) {
            Ok(json) => (200, json),
            Err(e) => (e.code.http_status(), to_json(&e)),
        }
    }

    fn authenticate(&self, method: &str, url: &str, auth: Option<&str>, body: &[u8]) -> Result<Caller, ApiError> {
        let unauth = |m: String| ApiError::new(ErrorCode::Unauthenticated, m);
        let cred = auth
            .and_then(|a| a.trim().strip_prefix("MUNGE "))
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| unauth("every request needs an `Authorization: MUNGE <credential>` header".into()))?;
        if cred.len() > 4 * self.max_body + 4096 || !cred.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(unauth("malformed MUNGE credential".into()));
        }
        let v = self.munge.decode(cred).map_err(|e| unauth(format!("credential refused: {e}")))?;
        if v.payload != request_payload(method, url, body) {
            return Err(unauth(format!("the credential was made for another request, not {method} {url} with this body")));
        }
        Ok(Caller { uid: v.uid })
    }

    fn dispatch(&self, method: &str, url: &str, auth: Option<&str>, body: &[u8]) -> Result<String, ApiError> {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let post = |m: &str| -> Result<(), ApiError> {
            if m == "POST" {
                Ok(())
            } else {
                Err(ApiError::new(ErrorCode::MethodNotAllowed, format!("{path} takes POST, not {m}")))
            }
        };
        let get = |m: &str| -> Result<(), ApiError> {
            if m == "GET" {
                Ok(())
            } else {
                Err(ApiError::new(ErrorCode::MethodNotAllowed, format!("{path} takes GET, not {m}")))
            }
        };
        const OPERATOR_PATHS: [&str; 6] = ["/v1/register", "/v1/unregister", "/v1/request", "/v1/release", "/v1/offline", "/v1/online"];
        let known = OPERATOR_PATHS.contains(&path) || ["/v1/query", "/v1/status", "/v1/allocation"].contains(&path);
        if !known {
            // Unknown paths are refused before the credential is spent.
            return Err(ApiError::new(ErrorCode::NotFound, format!("no such endpoint {path:?}")));
        }
        let caller = self.authenticate(method, url, auth, body)?;
        if OPERATOR_PATHS.contains(&path) && !self.is_operator(caller.uid) {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!("{path} is only for root and [registry] operators; uid {} is neither", caller.uid),
            ));
        }
        let now = cderd::daemon::now();
        let api = crate::store::StoreError::into_api;
        match path {
            "/v1/register" => {
                post(method)?;
                let r: RegisterRequest = parse(body)?;
                r.validate()?;
                let done = self.store().register(&r, now).map_err(api)?;
                tracing::info!("uid {}: registered {} at {}", caller.uid, r.uuid, done.endpoint);
                Ok(to_json(&done))
            }
            "/v1/unregister" => {
                post(method)?;
                let r: UnregisterRequest = parse(body)?;
                check_id("uuid", &r.uuid)?;
                let removed = self.store().unregister(&r.uuid).map_err(api)?;
                tracing::info!("uid {}: unregistered {} (was registered: {removed})", caller.uid, r.uuid);
                Ok(to_json(&Unregistered { uuid: r.uuid, removed }))
            }
            "/v1/request" => {
                post(method)?;
                let r: BackendRequest = parse(body)?;
                r.validate()?;
                let a = self.store().request(&r, self.policy.as_ref(), now).map_err(api)?;
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
                let released = self.store().release(&r.job, now).map_err(api)?;
                tracing::info!("uid {}: {} released {released} backend(s)", caller.uid, r.job);
                Ok(to_json(&Released { job: r.job, released }))
            }
            "/v1/offline" | "/v1/online" => {
                post(method)?;
                let r: OfflineRequest = parse(body)?;
                r.validate()?;
                let offline = path == "/v1/offline";
                let backends = self.store().set_offline(&r, offline).map_err(api)?;
                tracing::info!("uid {}: {} {} backend(s) {}", caller.uid, &path[4..], backends.len(), r.uuid.as_deref().or(r.host.as_deref()).unwrap_or(""));
                let mut status = self.store().status().map_err(api)?;
                status.backends = backends;
                Ok(to_json(&status))
            }
            "/v1/allocation" => {
                get(method)?;
                let job = parse_job_query(query)?;
                let (allocations, uids) = self.store().allocations(&job).map_err(api)?;
                if allocations.is_empty() {
                    return Err(ApiError::new(ErrorCode::NotFound, format!("{job} holds no backends")));
                }
                // Like cderd's `env`: operators, or the job's own user.
                if !self.is_operator(caller.uid) && !uids.iter().all(|u| *u == Some(caller.uid)) {
                    return Err(ApiError::new(ErrorCode::Forbidden, format!("{job} is not a job of uid {}", caller.uid)));
                }
                Ok(to_json(&JobAllocations { job, allocations }))
            }
            "/v1/query" => {
                get(method)?;
                let (name, m) = parse_query(query)?;
                let status = self.store().status().map_err(api)?;
                Ok(to_json(&QueryReply { name, method: m, value: status.counts_for(m).get(name) }))
            }
            _ => {
                get(method)?;
                Ok(to_json(&self.store().status().map_err(api)?))
            }
        }
    }

    /// Serves HTTP on `server` with `threads` workers until the process
    /// ends; an error when a worker thread cannot be started.
    pub fn serve(self: Arc<Self>, server: Arc<tiny_http::Server>, threads: usize) -> std::io::Result<Vec<std::thread::JoinHandle<()>>> {
        (0..threads.max(1))
            .map(|i| {
                let me = Arc::clone(&self);
                let server = Arc::clone(&server);
                std::thread::Builder::new().name(format!("registry-http-{i}")).spawn(move || loop {
                    match server.recv() {
                        Ok(rq) => me.respond(rq),
                        Err(e) => tracing::warn!("accepting a connection: {e}"),
                    }
                })
            })
            .collect()
    }

    /// Database-level consistency problems (none expected).
    pub fn check(&self) -> Result<Vec<String>, ApiError> {
        self.store().check_invariants().map_err(crate::store::StoreError::into_api)
    }

    fn respond(&self, mut rq: tiny_http::Request) {
        let method = rq.method().as_str().to_string();
        let url = rq.url().to_string();
        let auth = rq.headers().iter().find(|h| h.field.equiv("Authorization")).map(|h| h.value.as_str().to_string());
        let (status, json) = match read_body(&mut rq, self.max_body) {
            Err(e) => (e.code.http_status(), to_json(&e)),
            Ok(body) => {
                let run = std::panic::AssertUnwindSafe(|| self.handle(&method, &url, auth.as_deref(), &body));
                std::panic::catch_unwind(run).unwrap_or_else(|_| {
                    tracing::error!("{method} {url}: internal error (panic); request dropped, service carries on");
                    (500, to_json(&ApiError::new(ErrorCode::Internal, "internal error")))
                })
            }
        };
        if status >= 400 {
            tracing::warn!("{method} {url}: {status} {json}");
        }
        let mut reply = tiny_http::Response::from_string(json).with_status_code(status);
        if let Ok(header) = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]) {
            reply.add_header(header);
        }
        if let Err(e) = rq.respond(reply) {
            tracing::debug!("{method} {url}: client went away: {e}");
        }
    }
}

/// Reads at most `max` bytes of body; 413 beyond.
fn read_body(rq: &mut tiny_http::Request, max: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || ApiError::new(ErrorCode::TooLarge, format!("request body larger than {max} bytes"));
    if rq.body_length().is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    rq.as_reader()
        .take(max as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| ApiError::bad(format!("reading the body: {e}")))?;
    if body.len() > max {
        return Err(too_large());
    }
    Ok(body)
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad(format!("malformed request body: {e}")))
}

fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"code\":\"internal\",\"message\":\"cannot encode the reply: {e}\"}}"))
}

/// `job=<lrms>:<id>` (percent-encoded).
fn parse_job_query(q: &str) -> Result<cder_model::JobKey, ApiError> {
    let mut job = None;
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("job", v)) => job = Some(crate::client::query_unescape(v).ok_or_else(|| ApiError::bad("job: malformed percent-encoding"))?),
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
        // munged is not running at that socket: the credential cannot verify.
        assert_eq!(r.handle("POST", "/v1/request", Some("MUNGE MUNGE:AAAA:"), b"{}").0, 401);
        assert_eq!(r.handle("GET", "/etc/passwd", None, b"").0, 404);
    }
}
