//! A blocking registry client: HTTP/1.1 over one `TcpStream` per call,
//! std only (it is loaded into slurmstepd with the SPANK plugin, so no
//! async runtime and no TLS stack). Every call carries a fresh MUNGE
//! credential bound to it.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use cder_model::{JobKey, RegistryConfig, VgpgpuMethod};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::*;
use crate::munge::{request_payload, Munge, MungeError};

/// The largest reply the client reads.
const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryClientError {
    /// `[registry] url` is not `http://host[:port]` (the URL as given);
    /// there is no TLS, MUNGE authenticates each call instead.
    #[error("registry URL {0:?} is not http://host:port")]
    Url(String),
    /// No credential could be made (munged down, program missing).
    #[error("MUNGE: {0}")]
    Munge(#[from] MungeError),
    /// Connecting, sending or reading failed or timed out: the registry
    /// is down or unreachable, so callers may fall back (`fail=open`).
    #[error("registry {endpoint} unreachable: {source}")]
    Unavailable {
        /// The `host:port` called.
        endpoint: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The registry answered with something that is not HTTP or not the
    /// JSON expected.
    #[error("registry {endpoint}: malformed reply: {message}")]
    Malformed {
        /// The `host:port` called.
        endpoint: String,
        /// What was wrong with the reply.
        message: String,
    },
    /// The registry answered with an error body.
    #[error("registry refused ({status}): {error}")]
    Refused {
        /// The HTTP status of the reply.
        status: u16,
        /// The error the registry gave.
        error: ApiError,
    },
}

impl RegistryClientError {
    /// The registry's error code, when it answered with one.
    pub fn code(&self) -> Option<ApiErrorCode> {
        match self {
            RegistryClientError::Refused { error, .. } => Some(error.code),
            _ => None,
        }
    }

    /// True when the registry could not be reached or did not answer.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, RegistryClientError::Unavailable { .. })
    }
}

/// A reply: HTTP status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawReply {
    /// The HTTP status code.
    pub status: u16,
    /// The body as received (at most 16 MiB).
    pub body: Vec<u8>,
}

/// The client.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    /// `host:port`.
    endpoint: String,
    munge: Munge,
    timeout: Duration,
}

impl RegistryClient {
    /// A client for `url` (`http://host:port`).
    pub fn new(url: &str, munge: Munge, timeout: Duration) -> Result<RegistryClient, RegistryClientError> {
        let rest = url.strip_prefix("http://").ok_or_else(|| RegistryClientError::Url(url.to_string()))?;
        let endpoint = rest.trim_end_matches('/').to_string();
        if endpoint.is_empty() || endpoint.contains('/') {
            return Err(RegistryClientError::Url(url.to_string()));
        }
        let endpoint = if endpoint.contains(':') { endpoint } else { format!("{endpoint}:80") };
        Ok(RegistryClient { endpoint, munge, timeout })
    }

    /// A client as `[registry]` configures it.
    pub fn from_config(c: &RegistryConfig) -> Result<RegistryClient, RegistryClientError> {
        RegistryClient::new(&c.url, Munge::from_config(c), Duration::from_secs(c.timeout_s))
    }

    /// One HTTP exchange, authenticated; any status. `auth: false` sends no
    /// credential (for tests of the refusal).
    pub fn send(&self, method: &str, path: &str, body: &[u8], auth: bool) -> Result<RawReply, RegistryClientError> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.endpoint,
            body.len()
        );
        if !body.is_empty() {
            head.push_str("Content-Type: application/json\r\n");
        }
        if auth {
            let cred = self.munge.encode(&request_payload(method, path, body))?;
            head.push_str(&format!("Authorization: MUNGE {cred}\r\n"));
        }
        head.push_str("\r\n");
        let unavailable = |source| RegistryClientError::Unavailable { endpoint: self.endpoint.clone(), source };
        let addr = self
            .endpoint
            .to_socket_addrs()
            .map_err(unavailable)?
            .next()
            .ok_or_else(|| unavailable(std::io::Error::new(std::io::ErrorKind::NotFound, "no address")))?;
        let mut stream = TcpStream::connect_timeout(&addr, self.timeout).map_err(unavailable)?;
        stream.set_read_timeout(Some(self.timeout)).map_err(unavailable)?;
        stream.set_write_timeout(Some(self.timeout)).map_err(unavailable)?;
        // One write, no Nagle: a split head/body meets delayed ACKs.
        stream.set_nodelay(true).map_err(unavailable)?;
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        stream.write_all(&request).map_err(unavailable)?;
        let mut reply = Vec::new();
        stream.take(MAX_REPLY_BYTES as u64 + 1).read_to_end(&mut reply).map_err(unavailable)?;
        parse_reply(&reply)
            .map_err(|message| RegistryClientError::Malformed { endpoint: self.endpoint.clone(), message })
    }

    /// A typed call: `T` on 2xx, [`RegistryClientError::Refused`] otherwise.
    pub fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<T, RegistryClientError> {
        let body = match body {
            Some(b) => serde_json::to_vec(b).map_err(|e| RegistryClientError::Malformed {
                endpoint: self.endpoint.clone(),
                message: e.to_string(),
            })?,
            None => Vec::new(),
        };
        let reply = self.send(method, path, &body, true)?;
        let malformed = |e: serde_json::Error| RegistryClientError::Malformed {
            endpoint: self.endpoint.clone(),
            message: format!("{e} (status {})", reply.status),
        };
        if (200..300).contains(&reply.status) {
            serde_json::from_slice(&reply.body).map_err(malformed)
        } else {
            let error: ApiError = serde_json::from_slice(&reply.body).map_err(malformed)?;
            Err(RegistryClientError::Refused { status: reply.status, error })
        }
    }

    /// `register`.
    pub fn register(&self, r: &RegisterRequest) -> Result<Registered, RegistryClientError> {
        self.call("POST", "/v1/register", Some(r))
    }

    /// `unregister`.
    pub fn unregister(&self, uuid: &str) -> Result<Unregistered, RegistryClientError> {
        self.call("POST", "/v1/unregister", Some(&UnregisterRequest { uuid: uuid.to_string() }))
    }

    /// `request`: `count` backends for `job` on `node`.
    pub fn request(
        &self,
        job: &JobKey,
        count: u32,
        node: &str,
        method: VgpgpuMethod,
    ) -> Result<BackendAllocation, RegistryClientError> {
        self.request_for(&BackendRequest {
            job: job.clone(),
            count,
            node: node.to_string(),
            method,
            uid: None,
            job_limit: None,
        })
    }

    /// `request` with every field, e.g. the owner's `uid`.
    pub fn request_for(&self, r: &BackendRequest) -> Result<BackendAllocation, RegistryClientError> {
        self.call("POST", "/v1/request", Some(r))
    }

    /// What `job` holds on every node (operators, or the job's owner).
    pub fn allocation(&self, job: &JobKey) -> Result<JobAllocations, RegistryClientError> {
        self.call("GET", &format!("/v1/allocation?job={}", query_escape(&job.to_string())), None::<&()>)
    }

    /// `release`: every backend of `job`.
    pub fn release(&self, job: &JobKey) -> Result<BackendsReleased, RegistryClientError> {
        self.call("POST", "/v1/release", Some(&ReleaseRequest { job: job.clone() }))
    }

    /// `query`: one count, for one method or all.
    pub fn query(&self, name: QueryName, method: Option<VgpgpuMethod>) -> Result<u64, RegistryClientError> {
        let path = match method {
            Some(m) => format!("/v1/query?name={}&method={}", name.as_str(), m.name()),
            None => format!("/v1/query?name={}", name.as_str()),
        };
        let reply: QueryReply = self.call("GET", &path, None::<&()>)?;
        Ok(reply.value)
    }

    /// `status`.
    pub fn status(&self) -> Result<RegistryStatus, RegistryClientError> {
        self.call("GET", "/v1/status", None::<&()>)
    }

    /// `offline`: one backend or a whole host.
    pub fn offline(&self, r: &OfflineRequest) -> Result<RegistryStatus, RegistryClientError> {
        self.call("POST", "/v1/offline", Some(r))
    }

    /// `online`: one backend or a whole host.
    pub fn online(&self, r: &OfflineRequest) -> Result<RegistryStatus, RegistryClientError> {
        self.call("POST", "/v1/online", Some(r))
    }
}

/// Percent-encodes everything but unreserved characters and `:`.
pub fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b':') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Decodes `%XX` escapes (and `+` as space); `None` when malformed.
pub fn query_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// RegistryStatus code and body of an HTTP/1.x reply (`Content-Length` or read to
/// end; the server closes after each reply).
pub fn parse_reply(raw: &[u8]) -> Result<RawReply, String> {
    if raw.len() > MAX_REPLY_BYTES {
        return Err(format!("reply longer than {MAX_REPLY_BYTES} bytes"));
    }
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP reply: {status_line:?}"));
    }
    let status: u16 =
        parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<usize>().ok();
            } else if k.trim().eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        match length {
            Some(n) if n <= rest.len() => rest[..n].to_vec(),
            Some(n) => return Err(format!("body cut short: {} of {n} bytes", rest.len())),
            None => rest.to_vec(),
        }
    };
    Ok(RawReply { status, body })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or("bad chunk header")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|_| "bad chunk size")?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "bad chunk size")?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err("chunk cut short".into());
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_length_and_chunked_replies() {
        let r = parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk").unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"{}"[..]));
        let r =
            parse_reply(b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (409, &b"abcde"[..]));
        assert!(parse_reply(b"SSH-2.0\r\n\r\n").is_err());
        assert!(parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}").is_err());
    }

    #[test]
    fn query_escaping_round_trips() {
        for s in ["torque:12.ce.example.org", "slurm:4", "a b&c=d%"] {
            assert_eq!(query_unescape(&query_escape(s)).as_deref(), Some(s));
        }
        assert_eq!(query_escape("torque:1[2]"), "torque:1%5B2%5D");
        assert_eq!(query_unescape("%zz"), None);
    }

    #[test]
    fn urls() {
        let m = Munge { munge_program: "munge".into(), unmunge_program: "unmunge".into(), socket: None };
        assert_eq!(RegistryClient::new("http://r:1/", m.clone(), Duration::from_secs(1)).unwrap().endpoint, "r:1");
        assert_eq!(RegistryClient::new("http://r", m.clone(), Duration::from_secs(1)).unwrap().endpoint, "r:80");
        assert!(RegistryClient::new("https://r:1", m.clone(), Duration::from_secs(1)).is_err());
        assert!(RegistryClient::new("http://r:1/x", m, Duration::from_secs(1)).is_err());
    }
}
