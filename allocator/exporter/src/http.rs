//! The HTTP/1.1 side: `GET /metrics` only, bounded and with deadlines.
//!
//! A fixed pool of workers serves connections from a queue as long as the
//! pool; a connection that finds the queue full is answered `503` at once
//! and closed, so a flood costs no threads. Each connection must send its
//! request head within `head_timeout` (however slowly it trickles, the
//! deadline is the whole head's), at most `max_head_bytes`, parsed by
//! `httparse` (as the registry's front end parses its heads); the reply must
//! be taken within `write_timeout`. No keep-alive: Prometheus opens a
//! connection per scrape target anyway, at most one per interval.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{sync_channel, Receiver, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Headers a request may carry.
const MAX_HEADERS: usize = 32;

/// The server's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once (the workers), and as many more waiting.
    pub max_connections: usize,
    /// Time to send the request head after connecting.
    pub head_timeout: Duration,
    /// Time for the client to take the reply.
    pub write_timeout: Duration,
    /// Request line plus headers at most.
    pub max_head_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 8,
            head_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_head_bytes: 8 * 1024,
        }
    }
}

/// What the handler is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
}

/// What the handler answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status code.
    pub status: u16,
    /// Its `Content-Type`.
    pub content_type: String,
    /// The body.
    pub body: String,
}

impl Response {
    /// A plain-text reply.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response { status, content_type: "text/plain; charset=utf-8".into(), body: body.into() }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn write_response(stream: &mut TcpStream, r: &Response, head_only: bool, timeout: Duration) {
    let _ = stream.set_write_timeout(Some(timeout));
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    if !head_only {
        let _ = stream.write_all(r.body.as_bytes());
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}

/// Why a request head could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP.
    #[error("malformed request head: {0}")]
    Malformed(String),
    /// Longer than the limit.
    #[error("request head longer than {0} bytes")]
    TooLarge(usize),
    /// Not all of it within the deadline.
    #[error("request head not received within the deadline")]
    Timeout,
    /// The client went away first.
    #[error("connection closed before the request head was complete")]
    Closed,
}

/// Parses a complete head at the start of `buf`; `Ok(None)` while partial.
pub fn parse_head(buf: &[u8], max_head: usize) -> Result<Option<Request>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {
            let accept = req
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("accept"))
                .map(|h| String::from_utf8_lossy(h.value).into_owned());
            let path = req.path.unwrap_or("/");
            Ok(Some(Request {
                method: req.method.unwrap_or("").to_string(),
                path: path.split('?').next().unwrap_or(path).to_string(),
                accept,
            }))
        }
        Ok(httparse::Status::Partial) if buf.len() >= max_head => Err(HeadError::TooLarge(max_head)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge(max_head)),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

/// Reads the head within the deadline, however it is split.
fn read_head(stream: &mut TcpStream, limits: &Limits) -> Result<Request, HeadError> {
    let deadline = Instant::now() + limits.head_timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let left =
            deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()).ok_or(HeadError::Timeout)?;
        let _ = stream.set_read_timeout(Some(left));
        let want = chunk.len().min(limits.max_head_bytes + 1 - buf.len().min(limits.max_head_bytes));
        match stream.read(&mut chunk[..want]) {
            Ok(0) => return Err(HeadError::Closed),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(HeadError::Timeout)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(HeadError::Closed),
        }
        if let Some(request) = parse_head(&buf, limits.max_head_bytes)? {
            return Ok(request);
        }
    }
}

fn serve_one(mut stream: TcpStream, limits: &Limits, handler: &(dyn Fn(&Request) -> Response + Send + Sync)) {
    let request = match read_head(&mut stream, limits) {
        Ok(r) => r,
        Err(HeadError::Closed) => return,
        Err(e @ HeadError::Timeout) => {
            return write_response(&mut stream, &Response::text(408, e.to_string()), false, limits.write_timeout)
        }
        Err(e @ HeadError::TooLarge(_)) => {
            return write_response(&mut stream, &Response::text(431, e.to_string()), false, limits.write_timeout)
        }
        Err(e) => return write_response(&mut stream, &Response::text(400, e.to_string()), false, limits.write_timeout),
    };
    let head_only = request.method == "HEAD";
    let response = if request.method != "GET" && !head_only {
        Response::text(405, "only GET and HEAD\n")
    } else {
        handler(&request)
    };
    write_response(&mut stream, &response, head_only, limits.write_timeout);
}

/// Serves `listener` for ever: `limits.max_connections` workers, each
/// calling `handler` for one request at a time.
pub fn serve(listener: TcpListener, limits: Limits, handler: Arc<dyn Fn(&Request) -> Response + Send + Sync>) {
    let workers = limits.max_connections.max(1);
    let (tx, rx) = sync_channel::<TcpStream>(workers);
    let rx: Arc<Mutex<Receiver<TcpStream>>> = Arc::new(Mutex::new(rx));
    for n in 0..workers {
        let (rx, handler) = (Arc::clone(&rx), Arc::clone(&handler));
        let spawned = std::thread::Builder::new().name(format!("cder-exporter-{n}")).spawn(move || loop {
            let next = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
            match next {
                Ok(stream) => serve_one(stream, &limits, handler.as_ref()),
                Err(_) => return,
            }
        });
        if let Err(e) = spawned {
            tracing::error!("cannot start worker {n}: {e}");
        }
    }
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors or a connection reset before accept:
                // back off a little rather than spin.
                tracing::warn!("accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        match tx.try_send(stream) {
            Ok(()) => {}
            Err(TrySendError::Full(mut s)) => {
                let busy = Response::text(503, "too many connections\n");
                write_response(&mut s, &busy, false, Duration::from_millis(200));
            }
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(limits: Limits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Arc<dyn Fn(&Request) -> Response + Send + Sync> = Arc::new(|r: &Request| {
            if r.path == "/slow" {
                std::thread::sleep(Duration::from_millis(1500));
            }
            Response::text(200, format!("{} {}\n", r.path, r.accept.clone().unwrap_or_default()))
        });
        std::thread::spawn(move || serve(listener, limits, handler));
        addr
    }

    fn get(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn heads_are_parsed_and_bounded() {
        let r = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n", 1024);
        let r = r.unwrap().unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
        assert_eq!(r.accept.as_deref(), Some("application/openmetrics-text"));
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\n", 1024), Ok(None));
        assert_eq!(parse_head(&[b'A'; 64], 64), Err(HeadError::TooLarge(64)));
        assert!(matches!(parse_head(b"\x01\x02 nonsense\r\n\r\n", 1024), Err(HeadError::Malformed(_))));
    }

    #[test]
    fn a_silent_client_is_dropped_at_the_deadline_and_others_are_served() {
        let limits = Limits { max_connections: 1, head_timeout: Duration::from_millis(300), ..Limits::default() };
        let addr = start(limits);
        let mut silent = TcpStream::connect(addr).unwrap();
        silent.write_all(b"GET /met").unwrap();
        let mut out = String::new();
        silent.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = silent.read_to_string(&mut out);
        assert!(out.starts_with("HTTP/1.1 408 "), "{out}");
        let ok = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("/metrics \n"), "{ok}");
        let post = get(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    }

    #[test]
    fn beyond_the_pool_and_its_queue_connections_are_refused_not_queued() {
        let limits = Limits { max_connections: 1, ..Limits::default() };
        let addr = start(limits);
        // One being served (slowly), one waiting in the queue: the rest get 503.
        // (Apart in time, so the worker has taken the first off the queue.)
        let busy: Vec<_> = (0..2)
            .map(|_| {
                let t = std::thread::spawn(move || get(addr, b"GET /slow HTTP/1.1\r\n\r\n"));
                std::thread::sleep(Duration::from_millis(250));
                t
            })
            .collect();
        let refused = get(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(refused.starts_with("HTTP/1.1 503 "), "{refused}");
        for b in busy {
            let b = b.join().unwrap();
            assert!(b.starts_with("HTTP/1.1 200 "), "{b}");
        }
    }
}
