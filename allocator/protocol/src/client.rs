//! A blocking client over `std::os::unix::net::UnixStream`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use cder_model::JobKey;

use crate::reply::{
    parse_reply, Accounting, Allocation, Confined, DeviceStatus, ErrorCode, ErrorReply, Pong, Reconciled, Released,
    Status, Usage,
};
use crate::request::{
    AccountingRequest, AllocRequest, DeviceRequest, DrainRequest, EnvRequest, JobRequest, ReconcileRequest, Request,
    UsageRequest,
};

/// Longest reply line the client reads (a large node's accounting fits well).
pub const MAX_REPLY_BYTES: u64 = 64 * 1024 * 1024;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached: cderd is not running, or the path is wrong.
    #[error("cannot connect to cderd at {}: {source}", path.display())]
    Connect {
        /// The socket path tried.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// No reply within the timeout.
    #[error("cderd did not answer within {0:?}")]
    Timeout(Duration),
    /// Reading or writing the socket failed.
    #[error("talking to cderd: {0}")]
    Io(#[source] std::io::Error),
    /// cderd closed the connection without a reply.
    #[error("cderd closed the connection without replying")]
    Closed,
    /// The reply was not a well-formed protocol reply.
    #[error("{0}")]
    BadReply(String),
    /// cderd answered with an error.
    #[error("cderd refused: {0}")]
    Server(ErrorReply),
}

// Not `#[from]`: that would also make the reply the error's source, and
// error-chain printers would then say it twice.
impl From<ErrorReply> for ClientError {
    fn from(e: ErrorReply) -> Self {
        ClientError::Server(e)
    }
}

impl ClientError {
    /// The daemon's error code, when the daemon answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server(e) => Some(e.code),
            _ => None,
        }
    }

    /// True when the daemon could not be reached or did not answer at all
    /// (as opposed to answering "no"): what a `fail=open` policy keys on.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ClientError::Connect { .. } | ClientError::Timeout(_) | ClientError::Closed | ClientError::Io(_))
    }
}

/// One connection to cderd. Requests are answered in order; a client may be
/// reused for many calls.
///
/// ```no_run
/// use std::time::Duration;
/// use cder_protocol::{AllocRequest, Client};
/// let job = "slurm:4242".parse().unwrap();
/// let mut client = Client::connect("/run/cder/cderd.sock", Duration::from_secs(10))?;
/// let allocation = client.alloc(&AllocRequest::new(job, 1000, 2))?;
/// for (key, value) in &allocation.env.0 {
///     println!("{key}={value}");
/// }
/// # Ok::<(), cder_protocol::ClientError>(())
/// ```
#[derive(Debug)]
pub struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    timeout: Duration,
}

impl Client {
    /// Connects to the daemon's socket. `timeout` bounds every later read
    /// and write (a connect to a local Unix socket does not wait, except
    /// while the daemon's accept backlog is full).
    pub fn connect(path: impl AsRef<Path>, timeout: Duration) -> Result<Client, ClientError> {
        let path = path.as_ref();
        let stream =
            UnixStream::connect(path).map_err(|source| ClientError::Connect { path: path.to_path_buf(), source })?;
        // A zero Duration is rejected by set_read_timeout; treat it as the smallest wait.
        let timeout = timeout.max(Duration::from_millis(1));
        stream.set_read_timeout(Some(timeout)).map_err(ClientError::Io)?;
        stream.set_write_timeout(Some(timeout)).map_err(ClientError::Io)?;
        let writer = stream.try_clone().map_err(ClientError::Io)?;
        Ok(Client { reader: BufReader::new(stream), writer, timeout })
    }

    /// Sends one request and returns the raw `result` value.
    pub fn call(&mut self, request: &Request) -> Result<Value, ClientError> {
        self.send_line(request.to_line().as_bytes())?;
        let line = self.read_line()?;
        parse_reply(&line).map_err(ClientError::BadReply)?.map_err(ClientError::Server)
    }

    /// Sends raw bytes (which should end in `\n`) and returns the raw reply
    /// line. For tests and diagnostics; normal callers use the typed methods.
    pub fn call_raw(&mut self, bytes: &[u8]) -> Result<String, ClientError> {
        self.send_line(bytes)?;
        self.read_line()
    }

    fn send_line(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.writer.write_all(bytes).map_err(|e| self.io_error(e))?;
        self.writer.flush().map_err(|e| self.io_error(e))
    }

    fn read_line(&mut self) -> Result<String, ClientError> {
        let mut buf = Vec::new();
        let n = (&mut self.reader).take(MAX_REPLY_BYTES).read_until(b'\n', &mut buf).map_err(|e| self.io_error(e))?;
        if n == 0 {
            return Err(ClientError::Closed);
        }
        if buf.last() != Some(&b'\n') {
            return Err(if n as u64 >= MAX_REPLY_BYTES {
                ClientError::BadReply(format!("reply from cderd is longer than {MAX_REPLY_BYTES} bytes"))
            } else {
                ClientError::Closed
            });
        }
        String::from_utf8(buf).map_err(|_| ClientError::BadReply("reply from cderd is not UTF-8".into()))
    }

    fn io_error(&self, e: std::io::Error) -> ClientError {
        match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ClientError::Timeout(self.timeout),
            _ => ClientError::Io(e),
        }
    }

    fn typed<T: DeserializeOwned>(&mut self, request: &Request) -> Result<T, ClientError> {
        let value = self.call(request)?;
        serde_json::from_value(value)
            .map_err(|e| ClientError::BadReply(format!("unexpected {} result from cderd: {e}", request.op())))
    }

    /// `ping`: the daemon's version.
    pub fn ping(&mut self) -> Result<Pong, ClientError> {
        self.typed(&Request::Ping)
    }

    /// `alloc`: idempotent per job; asking again returns the same devices.
    pub fn alloc(&mut self, request: &AllocRequest) -> Result<Allocation, ClientError> {
        self.typed(&Request::Alloc(request.clone()))
    }

    /// `release`: idempotent; a job holding nothing gives `released: 0`.
    pub fn release(&mut self, job: &JobKey) -> Result<Released, ClientError> {
        self.typed(&Request::Release(JobRequest { job: job.clone() }))
    }

    /// `alloc`, without reading the answer: for SLURM's job prolog, whose
    /// wait delays the job's start. cderd keeps the outcome for the job's
    /// first `env`, which waits for it (and says why, if it was refused).
    /// Give the request a `wait_ms` so that cderd waits out a conflict.
    pub fn alloc_unanswered(&mut self, request: &AllocRequest) -> Result<(), ClientError> {
        self.send_line(Request::Alloc(request.clone()).to_line().as_bytes())
    }

    /// `release`, sent without waiting for the answer: cderd acts on it
    /// whether or not anyone reads the reply. For a job epilog, whose end
    /// SLURM waits for before it gives the node to the next job. The next
    /// job's `alloc` waits (its `wait_ms`) while the devices are still
    /// held, and cderd logs a release it could not do.
    pub fn release_unanswered(&mut self, job: &JobKey) -> Result<(), ClientError> {
        self.send_line(Request::Release(JobRequest { job: job.clone() }).to_line().as_bytes())
    }

    /// `env`: the allocation of a job (allowed to the job's uid and operators).
    pub fn env(&mut self, job: &JobKey) -> Result<Allocation, ClientError> {
        self.typed(&Request::Env(EnvRequest::new(job.clone())))
    }

    /// `env`, its environment numbered for `request`'s device cgroup and
    /// narrowed to its step's devices.
    pub fn env_for(&mut self, request: &EnvRequest) -> Result<Allocation, ClientError> {
        self.typed(&Request::Env(request.clone()))
    }

    /// `status`: every device and the counts per type.
    pub fn status(&mut self) -> Result<Status, ClientError> {
        self.typed(&Request::Status)
    }

    /// `drain`: take a device (`gpgpu:3` or a UUID) out of service.
    pub fn drain(&mut self, device: &str, reason: &str) -> Result<DeviceStatus, ClientError> {
        self.typed(&Request::Drain(DrainRequest { device: device.into(), reason: reason.into() }))
    }

    /// `resume`: put a drained device back into service.
    pub fn resume(&mut self, device: &str) -> Result<DeviceStatus, ClientError> {
        self.typed(&Request::Resume(DeviceRequest { device: device.into() }))
    }

    /// `reconcile`: release every job (of `request.lrms`) not in `live_jobs`.
    pub fn reconcile(&mut self, request: &ReconcileRequest) -> Result<Reconciled, ClientError> {
        self.typed(&Request::Reconcile(request.clone()))
    }

    /// `confine`: move this process (as the daemon sees it through
    /// SO_PEERCRED) into the job's device cgroup(s). Children forked
    /// afterwards inherit them. Afterwards the job's devices are numbered
    /// from 0: use [`Allocation::relative_env`] for the job's environment.
    /// `enforcement_unavailable` means no device cgroup can be used here;
    /// `permission_denied` for the job's own user where the batch system
    /// confines the job (its `alloc` had `prepare_cgroups: false`).
    pub fn confine(&mut self, job: &JobKey) -> Result<Confined, ClientError> {
        self.typed(&Request::Confine(JobRequest { job: job.clone() }))
    }

    /// `accounting`: usage records and utilisation over a period.
    pub fn accounting(&mut self, request: &AccountingRequest) -> Result<Accounting, ClientError> {
        self.typed(&Request::Accounting(request.clone()))
    }

    /// `usage`: what jobs did with their devices (utilisation, memory, idle
    /// devices), from cderd's samples.
    pub fn usage(&mut self, request: &UsageRequest) -> Result<Usage, ClientError> {
        self.typed(&Request::Usage(request.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{error_line, ok_line};
    use std::os::unix::net::UnixListener;

    /// A one-connection scripted server standing in for cderd.
    fn serve(replies: Vec<String>) -> (tempfile::TempDir, PathBuf, std::thread::JoinHandle<Vec<String>>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            let mut seen = Vec::new();
            for reply in replies {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                seen.push(line);
                writer.write_all(reply.as_bytes()).unwrap();
            }
            seen
        });
        (dir, path, handle)
    }

    #[test]
    fn typed_calls_and_server_errors() {
        let mut refused = ErrorReply::new(ErrorCode::Insufficient, "2 gpgpu devices requested, 1 free");
        refused.free = Some(1);
        let (_dir, path, handle) =
            serve(vec![ok_line(&Pong { version: "9".into(), protocol: 1 }), error_line(&refused)]);
        let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
        assert_eq!(c.ping().unwrap().version, "9");
        let err = c.alloc(&AllocRequest::new("slurm:1".parse().unwrap(), 5, 2)).unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::Insufficient));
        assert!(!err.is_unavailable());
        match err {
            ClientError::Server(e) => assert_eq!(e.free, Some(1)),
            other => panic!("{other}"),
        }
        let seen = handle.join().unwrap();
        assert_eq!(seen[0], "{\"v\":1,\"op\":\"ping\"}\n");
        assert!(seen[1].contains("\"op\":\"alloc\"") && seen[1].contains("\"count\":2"));
    }

    #[test]
    fn unreachable_socket_is_unavailable() {
        let err = Client::connect("/nonexistent/cderd.sock", Duration::from_secs(1)).unwrap_err();
        assert!(err.is_unavailable());
        assert!(err.to_string().contains("/nonexistent/cderd.sock"), "{err}");
    }

    #[test]
    fn silent_server_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _listener = UnixListener::bind(&path).unwrap();
        // The listener never accepts or answers: the read must time out.
        let mut c = Client::connect(&path, Duration::from_millis(50)).unwrap();
        assert!(matches!(c.ping(), Err(ClientError::Timeout(_))));
    }

    #[test]
    fn closed_connection_is_reported() {
        let (_dir, path, handle) = serve(vec![String::new()]);
        let mut c = Client::connect(&path, Duration::from_secs(5)).unwrap();
        let err = c.status().unwrap_err();
        handle.join().unwrap();
        assert!(matches!(err, ClientError::Closed), "{err}");
    }
}
