//! `cder-registryd`'s HTTP/1.1 front end: one event loop (mio's poll on
//! epoll) holds every connection, a fixed pool of workers does the slow
//! parts (unmunge, SQLite), and a request is authenticated before its body
//! is read.
//!
//! Why not tiny_http (used before): it reads each request's head in a
//! thread of its own with no deadline, and hands a request to a worker
//! before its body is read, so eight clients that announce a large body and
//! send one byte held all eight workers, and every half-open connection
//! kept a thread. Here a connection costs a buffer, not a thread:
//!
//! 1. **Head** — read by the loop within `header_timeout_s` of connecting,
//!    at most [`Limits::max_head_bytes`], parsed by `httparse`. An unknown
//!    path, a body larger than `max_body_bytes`, a missing or malformed
//!    `Authorization: MUNGE …` header is answered at once.
//! 2. **Authenticating** — a worker runs unmunge. The credential's payload
//!    is the whole request (`"METHOD PATH\n"` + body), so its body length
//!    must equal `Content-Length`, or the request is refused unread.
//! 3. **Body** — read by the loop within `body_timeout_s`, only for a
//!    caller munged vouched for; then compared with the payload.
//! 4. **Handling** — a worker serves it; **Writing** — the loop sends the
//!    reply within `body_timeout_s`; the connection is closed (no
//!    keep-alive). A reply sent before the body was read is followed by a
//!    short drain, so the client sees the reply rather than a reset.
//!
//! At `max_connections` the oldest connection not yet authenticated is
//! dropped for the new one, so clients that hold connections open cannot
//! lock out the others. An authenticated connection cannot be dropped, so
//! one uid holds at most `max_connections_per_uid` of them (body being
//! read, or being served); beyond that its requests are refused (429) as
//! soon as they are authenticated, and their slots can be taken again.
//! Deadlines are checked every [`SWEEP`].

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};

use crate::api::{ApiError, ApiErrorCode};
pub use crate::head::Head;
use crate::service::{Authorized, Registry};

/// How often deadlines are checked (their precision).
pub const SWEEP: Duration = Duration::from_millis(200);
/// How long a connection answered before its body was read is drained.
const DRAIN: Duration = Duration::from_secs(2);
/// The most bytes drained from such a connection.
const DRAIN_BYTES: usize = 1024 * 1024;
/// Headers a request may carry.
const MAX_HEADERS: usize = 32;
/// File descriptors kept for everything but connections (the database,
/// unmunge's pipes, logs).
const RESERVED_FDS: u64 = 64;

/// The go-ahead for a client that sent `Expect: 100-continue`.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// The front end's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most; at the limit the oldest one not yet
    /// authenticated is closed.
    pub max_connections: usize,
    /// Authenticated requests in progress per uid at most.
    pub max_connections_per_uid: usize,
    /// Time to send the request head after connecting.
    pub header_timeout: Duration,
    /// Time to send the body after the head.
    pub body_timeout: Duration,
    /// Request body size limit.
    pub max_body_bytes: usize,
    /// Request line plus headers: the credential carries the body, base64
    /// encoded, so this is about twice `max_body_bytes` plus room.
    pub max_head_bytes: usize,
    /// Threads that authenticate and serve requests.
    pub workers: usize,
}

impl Limits {
    /// From `[registry]` and `--threads`; an error names the key whose
    /// value overflows.
    pub fn from_config(c: &cder_model::RegistryConfig, workers: usize) -> Result<Limits, String> {
        let max_head_bytes = c
            .max_body_bytes
            .checked_mul(2)
            .and_then(|n| n.checked_add(16 * 1024))
            .ok_or_else(|| format!("registry.max_body_bytes: {} is too large", c.max_body_bytes))?;
        Ok(Limits {
            max_connections: c.max_connections.max(1),
            max_connections_per_uid: c.max_connections_per_uid.max(1),
            header_timeout: Duration::from_secs(c.header_timeout_s),
            body_timeout: Duration::from_secs(c.body_timeout_s),
            max_body_bytes: c.max_body_bytes,
            max_head_bytes,
            workers: workers.max(1),
        })
    }
}

/// Parses the head at the start of `buf`: `Ok(None)` while incomplete.
/// Refuses heads over `max_head`, bodies over `max_body`, bad or repeated
/// `Content-Length`, and `Transfer-Encoding` (every client of this service
/// sends a length).
pub fn parse_head(buf: &[u8], max_head: usize, max_body: usize) -> Result<Option<Head>, ApiError> {
    let too_long =
        || ApiError::new(ApiErrorCode::HeadersTooLarge, format!("request head longer than {max_head} bytes"));
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= max_head => return Err(too_long()),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(ApiError::new(ApiErrorCode::HeadersTooLarge, format!("more than {MAX_HEADERS} headers")))
        }
        Err(e) => return Err(ApiError::bad(format!("malformed HTTP request head: {e}"))),
    };
    if len > max_head {
        return Err(too_long());
    }
    let mut content_length: Option<usize> = None;
    let mut authorization = None;
    let mut expect_continue = false;
    for h in req.headers.iter() {
        let name = h.name;
        if name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(h.value).unwrap_or("").trim();
            let n = parse_length(text, max_body)?;
            if content_length.is_some_and(|m| m != n) {
                return Err(ApiError::bad("Content-Length: given twice with different values"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ApiError::bad("Transfer-Encoding is not supported; send Content-Length"));
        } else if name.eq_ignore_ascii_case("authorization") {
            if authorization.is_some() {
                return Err(ApiError::new(ApiErrorCode::Unauthenticated, "Authorization: given twice"));
            }
            let v = std::str::from_utf8(h.value)
                .map_err(|_| ApiError::new(ApiErrorCode::Unauthenticated, "Authorization: not ASCII"))?;
            authorization = Some(v.to_string());
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = h.value.eq_ignore_ascii_case(b"100-continue");
        }
    }
    Ok(Some(Head {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        authorization,
        content_length: content_length.unwrap_or(0),
        expect_continue,
        len,
    }))
}

/// `Content-Length`: ASCII digits only (no sign, no blanks inside), at
/// most `max_body`.
fn parse_length(text: &str, max_body: usize) -> Result<usize, ApiError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::bad(format!("Content-Length: {text:?} is not a non-negative integer")));
    }
    let too_large = || {
        ApiError::new(
            ApiErrorCode::TooLarge,
            format!("Content-Length: {text} is more than max_body_bytes ({max_body})"),
        )
    };
    let n: u64 = text.parse().map_err(|_| too_large())?;
    match usize::try_from(n) {
        Ok(n) if n <= max_body => Ok(n),
        _ => Err(too_large()),
    }
}

/// The reason phrase of a status this service sends.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        _ => "Unknown",
    }
}

/// A complete reply with `Connection: close`.
pub fn reply_bytes(status: u16, json: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        json.len()
    )
    .into_bytes();
    out.extend_from_slice(json.as_bytes());
    out
}

fn error_reply(e: &ApiError) -> Vec<u8> {
    reply_bytes(e.code.http_status(), &crate::service::to_json(e))
}

/// What a connection is waiting for.
enum Phase {
    Head,
    /// A worker is checking the credential of this head (still in `buf`,
    /// possibly with body bytes after it).
    Authenticating(Box<Head>),
    /// Reading `head.content_length` body bytes for an authenticated caller.
    Body(Box<Head>, Box<Authorized>),
    /// A worker is serving the request.
    Handling,
    /// Sending `out[sent..]`; then drain (input left unread) or close.
    Writing {
        out: Vec<u8>,
        sent: usize,
        drain: bool,
    },
    /// Reply sent, write side shut; discarding input until EOF.
    Draining {
        discarded: usize,
    },
}

struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    buf: Vec<u8>,
    phase: Phase,
    /// When the current phase must be over (`None`: a worker has it).
    deadline: Option<Instant>,
    opened: Instant,
    /// Who munged vouched for, once authenticated.
    uid: Option<u32>,
}

impl Conn {
    /// Not yet vouched for by munged: may be dropped for a newcomer.
    fn evictable(&self) -> bool {
        matches!(self.phase, Phase::Head | Phase::Draining { .. })
    }

    /// Holds a slot that cannot be taken back: an authenticated request
    /// whose body is awaited or which a worker serves.
    fn in_progress_for(&self, uid: u32) -> bool {
        self.uid == Some(uid) && matches!(self.phase, Phase::Body(..) | Phase::Handling)
    }
}

/// Work for the pool.
enum Job {
    Authenticate(Token, Box<Head>),
    Serve(Token, Box<Head>, Box<Authorized>, Vec<u8>),
}

/// Work done.
enum Done {
    Authenticated(Token, Result<Box<Authorized>, ApiError>),
    Served(Token, Vec<u8>),
}

/// Serves `registry` on `listener` until the process ends; an error when
/// the poller or a worker cannot be set up.
pub fn serve(registry: Arc<Registry>, listener: std::net::TcpListener, limits: Limits) -> std::io::Result<()> {
    let limits = clamp_to_fd_limit(limits);
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    let (job_tx, job_rx) = channel::<Job>();
    let (done_tx, done_rx) = channel::<Done>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    for i in 0..limits.workers {
        let (registry, job_rx, done_tx, waker) =
            (Arc::clone(&registry), Arc::clone(&job_rx), done_tx.clone(), Arc::clone(&waker));
        std::thread::Builder::new()
            .name(format!("registry-worker-{i}"))
            .spawn(move || work(&registry, &job_rx, &done_tx, &waker))?;
    }
    drop(done_tx);
    let mut front = Front { limits, conns: HashMap::new(), next: 2, jobs: job_tx, accept_blocked: false };
    let mut events = Events::with_capacity(1024);
    let mut last_sweep = Instant::now();
    loop {
        if let Err(e) = poll.poll(&mut events, Some(SWEEP)) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for event in events.iter() {
            match event.token() {
                LISTENER => front.accept(&listener, poll.registry()),
                WAKER => {}
                token => front.ready(token, poll.registry()),
            }
        }
        while let Ok(done) = done_rx.try_recv() {
            front.finish(done, poll.registry());
        }
        if front.accept_blocked {
            front.accept(&listener, poll.registry());
        }
        if last_sweep.elapsed() >= SWEEP {
            last_sweep = Instant::now();
            front.sweep(last_sweep, poll.registry());
        }
    }
}

/// A worker: authenticates heads and serves requests until the loop ends.
fn work(registry: &Registry, jobs: &Mutex<Receiver<Job>>, done: &Sender<Done>, waker: &Waker) {
    loop {
        let job = {
            let rx = jobs.lock().unwrap_or_else(|e| e.into_inner());
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        let result = match job {
            Job::Authenticate(token, head) => {
                let run = std::panic::AssertUnwindSafe(|| registry.authenticate_head(&head));
                let r = std::panic::catch_unwind(run).unwrap_or_else(|_| {
                    tracing::error!("{} {}: internal error (panic) while authenticating", head.method, head.target);
                    Err(ApiError::new(ApiErrorCode::Internal, "internal error"))
                });
                Done::Authenticated(token, r.map(Box::new))
            }
            Job::Serve(token, head, who, body) => {
                let run =
                    std::panic::AssertUnwindSafe(|| registry.serve_authorized(&head.method, &head.target, &who, &body));
                let (status, json) = std::panic::catch_unwind(run).unwrap_or_else(|_| {
                    tracing::error!(
                        "{} {}: internal error (panic); request dropped, service carries on",
                        head.method,
                        head.target
                    );
                    (500, crate::service::to_json(&ApiError::new(ApiErrorCode::Internal, "internal error")))
                });
                if status >= 400 {
                    tracing::warn!("uid {}: {} {}: {status} {json}", who.uid, head.method, head.target);
                }
                Done::Served(token, reply_bytes(status, &json))
            }
        };
        if done.send(result).is_err() {
            return;
        }
        let _ = waker.wake();
    }
}

/// The soft `RLIMIT_NOFILE` from `/proc/self/limits` (no unsafe needed).
fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Lowers `max_connections` to what the descriptor limit allows.
fn clamp_to_fd_limit(mut limits: Limits) -> Limits {
    if let Some(soft) = open_files_limit() {
        let room = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX).max(8);
        if limits.max_connections > room {
            tracing::warn!(
                "max_connections {} exceeds what the open-files limit ({soft}) leaves; using {room} (raise LimitNOFILE)",
                limits.max_connections
            );
            limits.max_connections = room;
        }
    }
    limits
}

struct Front {
    limits: Limits,
    conns: HashMap<Token, Conn>,
    next: usize,
    jobs: Sender<Job>,
    /// The last accept failed for lack of descriptors: retry each turn.
    accept_blocked: bool,
}

impl Front {
    fn accept(&mut self, listener: &TcpListener, registry: &mio::Registry) {
        self.accept_blocked = false;
        loop {
            if self.conns.len() >= self.limits.max_connections && !self.evict_oldest(registry) {
                // Every slot holds an authenticated request: leave the rest
                // in the backlog until one finishes.
                self.accept_blocked = true;
                return;
            }
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    let token = Token(self.next);
                    self.next = self.next.wrapping_add(1).max(2);
                    if let Err(e) = registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE) {
                        tracing::warn!("{peer}: cannot watch the connection: {e}");
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let now = Instant::now();
                    let conn = Conn {
                        stream,
                        peer,
                        buf: Vec::new(),
                        phase: Phase::Head,
                        deadline: Some(now + self.limits.header_timeout),
                        opened: now,
                        uid: None,
                    };
                    self.conns.insert(token, conn);
                    // Edge-triggered: what arrived with the connection must be read now.
                    self.ready(token, registry);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and the like: make room, or try again next turn.
                    tracing::warn!("accepting a connection: {e}");
                    if !self.evict_oldest(registry) {
                        self.accept_blocked = true;
                        return;
                    }
                }
            }
        }
    }

    /// Drops the oldest connection not yet authenticated; false if none.
    fn evict_oldest(&mut self, registry: &mio::Registry) -> bool {
        let oldest = self.conns.iter().filter(|(_, c)| c.evictable()).min_by_key(|(_, c)| c.opened).map(|(t, _)| *t);
        match oldest {
            Some(t) => {
                if let Some(c) = self.conns.get(&t) {
                    tracing::debug!(
                        "{}: dropped for a new connection (max_connections {})",
                        c.peer,
                        self.limits.max_connections
                    );
                }
                self.close(t, registry);
                true
            }
            None => false,
        }
    }

    fn close(&mut self, token: Token, registry: &mio::Registry) {
        if let Some(mut c) = self.conns.remove(&token) {
            let _ = registry.deregister(&mut c.stream);
        }
    }

    /// Readiness (or a phase change): move the connection as far as it goes.
    fn ready(&mut self, token: Token, registry: &mio::Registry) {
        let Some(mut conn) = self.conns.remove(&token) else { return };
        match self.step(token, &mut conn) {
            Ok(true) => {
                self.conns.insert(token, conn);
            }
            Ok(false) => {
                let _ = registry.deregister(&mut conn.stream);
            }
            Err(e) => {
                tracing::debug!("{}: connection error: {e}", conn.peer);
                let _ = registry.deregister(&mut conn.stream);
            }
        }
    }

    /// Advances `conn`; false when it is finished and must be closed.
    fn step(&mut self, token: Token, conn: &mut Conn) -> std::io::Result<bool> {
        loop {
            match &mut conn.phase {
                Phase::Head => {
                    let cap = self.limits.max_head_bytes;
                    let eof = fill(&mut conn.stream, &mut conn.buf, cap)?;
                    match parse_head(&conn.buf, cap, self.limits.max_body_bytes) {
                        Ok(Some(head)) => {
                            if let Err(e) = crate::service::screen(&head, self.limits.max_body_bytes) {
                                tracing::warn!("{}: {} {}: {}", conn.peer, head.method, head.target, e.message);
                                self.answer(conn, error_reply(&e), true);
                                continue;
                            }
                            conn.deadline = None;
                            conn.phase = Phase::Authenticating(Box::new(head.clone()));
                            let _ = self.jobs.send(Job::Authenticate(token, Box::new(head)));
                            return Ok(true);
                        }
                        Ok(None) if eof => return Ok(false),
                        Ok(None) => return Ok(true),
                        Err(e) => {
                            tracing::debug!("{}: {}", conn.peer, e.message);
                            self.answer(conn, error_reply(&e), true);
                        }
                    }
                }
                Phase::Authenticating(_) | Phase::Handling => return Ok(true),
                Phase::Body(head, _) => {
                    let need = head.len.saturating_add(head.content_length);
                    let eof = fill(&mut conn.stream, &mut conn.buf, need)?;
                    if conn.buf.len() >= need {
                        if let Phase::Body(head, who) = std::mem::replace(&mut conn.phase, Phase::Handling) {
                            let body = conn.buf.get(head.len..need).unwrap_or_default().to_vec();
                            conn.buf = Vec::new();
                            conn.deadline = None;
                            let _ = self.jobs.send(Job::Serve(token, head, who, body));
                        }
                        return Ok(true);
                    }
                    if eof {
                        return Ok(false);
                    }
                    return Ok(true);
                }
                Phase::Writing { out, sent, drain } => {
                    while *sent < out.len() {
                        match conn.stream.write(&out[*sent..]) {
                            Ok(0) => return Ok(false),
                            Ok(n) => *sent += n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                    if !*drain {
                        return Ok(false);
                    }
                    let _ = conn.stream.shutdown(Shutdown::Write);
                    conn.phase = Phase::Draining { discarded: 0 };
                    conn.deadline = Some(Instant::now() + DRAIN);
                }
                Phase::Draining { discarded } => {
                    let mut scratch = [0u8; 16 * 1024];
                    loop {
                        match conn.stream.read(&mut scratch) {
                            Ok(0) => return Ok(false),
                            Ok(n) => {
                                *discarded = discarded.saturating_add(n);
                                if *discarded > DRAIN_BYTES {
                                    return Ok(false);
                                }
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
                            Err(e) if e.kind() == ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
            }
        }
    }

    /// Queues `out` as the reply; `unread`: input may be left, so drain
    /// after sending.
    fn answer(&self, conn: &mut Conn, out: Vec<u8>, unread: bool) {
        conn.buf = Vec::new();
        conn.phase = Phase::Writing { out, sent: 0, drain: unread };
        conn.deadline = Some(Instant::now() + self.limits.body_timeout);
    }

    /// A worker's result.
    fn finish(&mut self, done: Done, registry: &mio::Registry) {
        let token = match &done {
            Done::Authenticated(t, _) | Done::Served(t, _) => *t,
        };
        // The connection may have been dropped meanwhile (peer gone).
        let Some(mut conn) = self.conns.remove(&token) else { return };
        match done {
            Done::Authenticated(_, Err(e)) => {
                self.answer(&mut conn, error_reply(&e), true);
            }
            Done::Authenticated(_, Ok(who)) => match std::mem::replace(&mut conn.phase, Phase::Handling) {
                Phase::Authenticating(head) if head.content_length != who.body.len() => {
                    // The payload holds the body: a length that differs
                    // cannot match, so the body is not read at all.
                    let e = ApiError::new(
                        ApiErrorCode::Unauthenticated,
                        format!(
                            "the credential was made for another request, not {} {} with this body",
                            head.method, head.target
                        ),
                    );
                    self.answer(&mut conn, error_reply(&e), true);
                }
                Phase::Authenticating(head)
                    if self.conns.values().filter(|c| c.in_progress_for(who.uid)).count()
                        >= self.limits.max_connections_per_uid =>
                {
                    tracing::warn!(
                        "{}: uid {}: {} {} refused: it already has {} requests in progress (max_connections_per_uid)",
                        conn.peer,
                        who.uid,
                        head.method,
                        head.target,
                        self.limits.max_connections_per_uid
                    );
                    let e = ApiError::new(
                        ApiErrorCode::TooManyConnections,
                        format!(
                            "uid {} already has {} requests in progress (max_connections_per_uid); finish or close them and try again",
                            who.uid, self.limits.max_connections_per_uid
                        ),
                    );
                    self.answer(&mut conn, error_reply(&e), true);
                }
                Phase::Authenticating(head) => {
                    if head.expect_continue && conn.buf.len() < head.len.saturating_add(head.content_length) {
                        // A fresh socket's buffer takes these 25 bytes; if it
                        // cannot, the client sends anyway after its own wait
                        // (curl: 1 s). Half a go-ahead would garble the reply.
                        match conn.stream.write(CONTINUE) {
                            Ok(n) if n == CONTINUE.len() => {}
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                            _ => {
                                let _ = registry.deregister(&mut conn.stream);
                                return;
                            }
                        }
                    }
                    conn.uid = Some(who.uid);
                    conn.phase = Phase::Body(head, who);
                    conn.deadline = Some(Instant::now() + self.limits.body_timeout);
                }
                _ => {
                    let e = ApiError::new(ApiErrorCode::Internal, "internal error: request head lost");
                    self.answer(&mut conn, error_reply(&e), true);
                }
            },
            Done::Served(_, out) => self.answer(&mut conn, out, false),
        }
        self.conns.insert(token, conn);
        // Data may already wait in the socket (edge-triggered): go on now.
        self.ready(token, registry);
    }

    /// Closes or answers connections past their deadline.
    fn sweep(&mut self, now: Instant, registry: &mio::Registry) {
        let late: Vec<Token> =
            self.conns.iter().filter(|(_, c)| c.deadline.is_some_and(|d| d <= now)).map(|(t, _)| *t).collect();
        for token in late {
            let Some(mut conn) = self.conns.remove(&token) else { continue };
            match conn.phase {
                Phase::Body(..) => {
                    tracing::warn!("{}: body not received within {:?}; dropped", conn.peer, self.limits.body_timeout);
                    let e = ApiError::new(
                        ApiErrorCode::Timeout,
                        format!("request body not received within {} s", self.limits.body_timeout.as_secs()),
                    );
                    // One try, no waiting: the client is too slow anyway.
                    let _ = conn.stream.write(&error_reply(&e));
                }
                Phase::Head => {
                    tracing::debug!(
                        "{}: request head not received within {:?}; dropped",
                        conn.peer,
                        self.limits.header_timeout
                    );
                    if !conn.buf.is_empty() {
                        let e = ApiError::new(
                            ApiErrorCode::Timeout,
                            format!("request head not received within {} s", self.limits.header_timeout.as_secs()),
                        );
                        let _ = conn.stream.write(&error_reply(&e));
                    }
                }
                _ => {}
            }
            let _ = registry.deregister(&mut conn.stream);
        }
    }
}

/// Reads what is available into `buf` up to `cap` bytes in all; true at
/// end of stream.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, cap: usize) -> std::io::Result<bool> {
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < cap {
        let want = (cap - buf.len()).min(chunk.len());
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Ok(true),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: usize = 4096;

    #[test]
    fn heads_parse_incrementally() {
        let full = b"POST /v1/release HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\nAuthorization: MUNGE abc\r\n\r\n{\"job\":\"x\"}";
        for cut in 0..full.len() - 12 {
            assert_eq!(parse_head(&full[..cut], HEAD, 100).unwrap(), None, "cut at {cut}");
        }
        let h = parse_head(full, HEAD, 100).unwrap().unwrap();
        assert_eq!((h.method.as_str(), h.target.as_str(), h.content_length), ("POST", "/v1/release", 12));
        assert_eq!(h.authorization.as_deref(), Some("MUNGE abc"));
        assert_eq!(&full[h.len..], b"{\"job\":\"x\"}");
    }

    #[test]
    fn content_length_is_checked() {
        let head = |v: &str| format!("POST /v1/request HTTP/1.1\r\nContent-Length: {v}\r\n\r\n");
        let code = |v: &str| parse_head(head(v).as_bytes(), HEAD, 1000).unwrap_err();
        for bad in ["-5", "+5", "5x", "0x10", "", "1 2"] {
            let e = code(bad);
            assert_eq!(e.code, ApiErrorCode::BadRequest, "{bad:?}");
            assert!(e.message.starts_with("Content-Length:"), "{}", e.message);
        }
        for big in ["1001", "99999999999999999999999", "18446744073709551616"] {
            let e = code(big);
            assert_eq!(e.code, ApiErrorCode::TooLarge, "{big}");
            assert!(e.message.contains("Content-Length"), "{}", e.message);
        }
        assert_eq!(parse_head(head("1000").as_bytes(), HEAD, 1000).unwrap().unwrap().content_length, 1000);
        let twice = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(parse_head(twice, HEAD, 10).unwrap_err().code, ApiErrorCode::BadRequest);
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(parse_head(chunked, HEAD, 10).unwrap_err().message.contains("Transfer-Encoding"));
    }

    #[test]
    fn oversize_and_malformed_heads_are_refused() {
        let long = format!("GET /v1/status HTTP/1.1\r\nX: {}\r\n", "a".repeat(HEAD));
        assert_eq!(parse_head(long.as_bytes(), HEAD, 10).unwrap_err().code, ApiErrorCode::HeadersTooLarge);
        let many: String = (0..40).map(|i| format!("X{i}: y\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(parse_head(many.as_bytes(), HEAD, 10).unwrap_err().code, ApiErrorCode::HeadersTooLarge);
        assert_eq!(parse_head(b"\x16\x03\x01\x02\x00\r\n\r\n", HEAD, 10).unwrap_err().code, ApiErrorCode::BadRequest);
    }

    #[test]
    fn limits_follow_the_config() {
        let c = cder_model::RegistryConfig { max_body_bytes: 1000, header_timeout_s: 3, ..Default::default() };
        let l = Limits::from_config(&c, 0).unwrap();
        assert_eq!((l.max_head_bytes, l.workers, l.header_timeout), (2000 + 16 * 1024, 1, Duration::from_secs(3)));
        let huge = cder_model::RegistryConfig { max_body_bytes: usize::MAX, ..Default::default() };
        assert!(Limits::from_config(&huge, 1).unwrap_err().starts_with("registry.max_body_bytes"));
        let r = reply_bytes(401, "{}");
        assert!(
            r.starts_with(b"HTTP/1.1 401 Unauthorized\r\n")
                && r.ends_with(b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
        );
    }
}
