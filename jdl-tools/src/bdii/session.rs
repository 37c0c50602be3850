//! LDAP sessions whose replies are read by [`wire`]: one search after
//! another on each connection, and a small pool of them for the many
//! searches under services.
//!
//! A scan gets a connection of its own (slapd keeps one paged-results state
//! per connection); the per-service searches share [`WIRE_SESSIONS`]
//! connections, each reused, so that slapd works on that many at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bdii::entry::Entry;
use crate::bdii::search::{BdiiError, Search, Tap, TAP_BATCH};
use crate::bdii::wire::{self, Message, NameCache};

/// Searches under services in flight at once, one per connection: as many
/// as the bench's `ldapsearch` processes, and enough to keep slapd busy
/// (keys on 10,000 EEs, 830 services: fetch 436 ms with 2, 381 with 4,
/// 357–381 with 8, 343–379 with 16).
pub const WIRE_SESSIONS: usize = 8;

/// The `host:port` of an `ldap://` URL (port 389 when none is given);
/// `None` for any other scheme, `Some(Err(()))` for an `ldap://` URL whose
/// host or port cannot be one.
pub fn tcp_address(url: &str) -> Option<Result<String, ()>> {
    let rest = url.strip_prefix("ldap://")?;
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = if host.is_empty() { "localhost" } else { host };
    let (name, port) = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => (host, None),
            Some((_, p)) => (&host[..host.len() - p.len()], Some(p.strip_prefix(':').unwrap_or("x"))),
            None => return Some(Err(())),
        },
        None => match host.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        },
    };
    let name_ok = !name.is_empty() && !name.contains(|c: char| c.is_whitespace() || "@#%".contains(c));
    Some(match port.map(str::parse::<u16>) {
        _ if !name_ok => Err(()),
        None => Ok(format!("{host}:389")),
        Some(Ok(_)) => Ok(host.to_string()),
        Some(Err(_)) => Err(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_ldap_urls() {
        assert_eq!(tcp_address("ldap://bdii.example.org:2170"), Some(Ok("bdii.example.org:2170".into())));
        assert_eq!(tcp_address("ldap://bdii.example.org/o=glue"), Some(Ok("bdii.example.org:389".into())));
        assert_eq!(tcp_address("ldap://[::1]:2170/"), Some(Ok("[::1]:2170".into())));
        assert_eq!(tcp_address("ldap://[::1]"), Some(Ok("[::1]:389".into())));
        assert_eq!(tcp_address("ldap://"), Some(Ok("localhost:389".into())));
        for bad in ["ldap://host:port", "ldap://host:99999", "ldap://[::1", "ldap://a b:1", "ldap://u@h:1", "ldap://:1"]
        {
            assert_eq!(tcp_address(bad), Some(Err(())), "{bad}");
        }
        assert_eq!(tcp_address("ldapi://%2Frun%2Fslapd"), None);
    }
}

/// Where and how long to wait.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The BDII's URL, as errors name it.
    pub url: String,
    /// Its `host:port`.
    pub address: String,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Timeout for each answer from the server.
    pub timeout: Duration,
    /// Entries per page of a paged search.
    pub page_size: i32,
}

/// One anonymous LDAP session (a BDII needs no bind).
pub struct Session {
    stream: tokio::net::TcpStream,
    /// Bytes read and not yet parsed: less than one message between reads.
    buf: Vec<u8>,
    /// The last message ID used.
    id: i32,
}

impl Session {
    /// Connects.
    pub async fn open(peer: &Peer) -> Result<Session, BdiiError> {
        let connect = tokio::net::TcpStream::connect(peer.address.as_str());
        let stream = match tokio::time::timeout(peer.connect_timeout, connect).await {
            Err(_) => {
                return Err(BdiiError::Timeout {
                    url: peer.url.clone(),
                    after: peer.connect_timeout,
                    what: "connecting".into(),
                })
            }
            Ok(Err(e)) => return Err(BdiiError::Unreachable { url: peer.url.clone(), message: e.to_string() }),
            Ok(Ok(stream)) => stream,
        };
        let _ = stream.set_nodelay(true);
        Ok(Session { stream, buf: Vec::with_capacity(1 << 16), id: 0 })
    }

    /// One search (its pages one after another when `s.paged`): every
    /// entry, or with `tap` every entry handed over in batches instead.
    /// A server's error code is an error, except 32 (noSuchObject: the
    /// base is absent, e.g. no GLUE 1.3 tree), which finds nothing.
    pub async fn search(
        &mut self,
        peer: &Peer,
        s: &Search,
        tap: Option<&(usize, Tap)>,
    ) -> Result<Vec<Entry>, BdiiError> {
        let started = std::time::Instant::now();
        let failed = |message: String| BdiiError::Search {
            url: peer.url.clone(),
            base: s.base.clone(),
            filter: s.filter.clone(),
            message,
        };
        let lost = |message: String| BdiiError::Unreachable { url: peer.url.clone(), message };
        let timed_out =
            || BdiiError::Timeout { url: peer.url.clone(), after: peer.timeout, what: format!("search {}", s.filter) };
        let attrs = if s.attrs.is_empty() { vec!["*".to_string()] } else { s.attrs.clone() };
        let mut out = Vec::new();
        let mut kept = 0;
        let mut pages = 0;
        let mut names = NameCache::default();
        let mut cookie: Vec<u8> = Vec::new();
        let done = loop {
            self.id = self.id.checked_add(1).unwrap_or(1);
            let id = i64::from(self.id);
            let page = s.paged.then_some((peer.page_size, cookie.as_slice()));
            let request = wire::search_request(self.id, &s.base, s.scope as i64, &s.filter, &attrs, page)
                .ok_or_else(|| failed("the filter does not parse".into()))?;
            match tokio::time::timeout(peer.timeout, self.stream.write_all(&request)).await {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => return Err(lost(format!("sending the search: {e}"))),
                Ok(Ok(())) => {}
            }
            pages += 1;
            let mut start = 0;
            let done = 'page: loop {
                while let Some(len) = wire::message_len(&self.buf[start..]).map_err(|e| failed(e.to_string()))? {
                    let (got, message) =
                        Message::parse(&self.buf[start..start + len], &mut names).map_err(|e| failed(e.to_string()))?;
                    start += len;
                    match message {
                        Message::Entry(e) if got == id => {
                            kept += 1;
                            out.push(e);
                            if let Some((at, tap)) = tap.filter(|_| out.len() >= TAP_BATCH) {
                                let _ = tap.send((*at, std::mem::take(&mut out)));
                            }
                        }
                        Message::Done(done) if got == id => break 'page done,
                        Message::Notice(n) => {
                            return Err(lost(format!(
                                "the server ended the connection: result code {} {}",
                                n.rc, n.text
                            )))
                        }
                        _ => {}
                    }
                }
                // What is left is less than one message: moved to the front, then read on.
                self.buf.drain(..start);
                start = 0;
                self.buf.reserve(1 << 16);
                match tokio::time::timeout(peer.timeout, self.stream.read_buf(&mut self.buf)).await {
                    Err(_) => return Err(timed_out()),
                    Ok(Err(e)) => return Err(lost(e.to_string())),
                    Ok(Ok(0)) => return Err(lost("the server closed the connection before the search ended".into())),
                    Ok(Ok(_)) => {}
                }
            };
            self.buf.drain(..start);
            if done.rc != 0 || done.cookie.is_empty() || !s.paged {
                break done;
            }
            cookie = done.cookie;
        };
        if let Some((at, tap)) = tap.filter(|_| !out.is_empty()) {
            let _ = tap.send((*at, std::mem::take(&mut out)));
        }
        tracing::debug!(base = s.base, scope = ?s.scope, filter = s.filter, attrs = s.attrs.join(" "), paged = s.paged, entries = kept, pages, elapsed_ms = started.elapsed().as_secs_f64() * 1e3, "search");
        if done.rc != 0 && done.rc != 32 {
            return Err(failed(format!("result code {} {}", done.rc, done.text)));
        }
        Ok(out)
    }

    /// Ends the session politely (an UnbindRequest), then closes it.
    pub async fn close(mut self) {
        self.id = self.id.checked_add(1).unwrap_or(1);
        let _ = self.stream.write_all(&wire::unbind_request(self.id)).await;
    }
}

/// Sessions for the searches under services: at most [`WIRE_SESSIONS`]
/// at once, each reused by the next search once its answer is read.
pub struct SessionPool {
    peer: Peer,
    idle: Mutex<Vec<Session>>,
    slots: tokio::sync::Semaphore,
}

impl SessionPool {
    /// A pool for `peer`, with `first` (the session that proved it reachable) idle in it.
    pub fn new(peer: Peer, first: Session) -> SessionPool {
        SessionPool { peer, idle: Mutex::new(vec![first]), slots: tokio::sync::Semaphore::new(WIRE_SESSIONS) }
    }

    /// The peer the pool's sessions talk to.
    pub fn peer(&self) -> &Peer {
        &self.peer
    }

    /// Runs `s`: a paged scan on a session of its own, any other search on a pooled one.
    /// A session that failed is dropped, not reused.
    pub async fn run(self: Arc<Self>, s: Search, tap: Option<(usize, Tap)>) -> Result<Vec<Entry>, BdiiError> {
        if s.paged {
            let mut own = Session::open(&self.peer).await?;
            let found = own.search(&self.peer, &s, tap.as_ref()).await?;
            own.close().await;
            return Ok(found);
        }
        let _slot = self.slots.acquire().await;
        let reused = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut session = match reused {
            Some(session) => session,
            None => Session::open(&self.peer).await?,
        };
        let found = session.search(&self.peer, &s, tap.as_ref()).await;
        if found.is_ok() {
            self.idle.lock().unwrap_or_else(|e| e.into_inner()).push(session);
        }
        found
    }
}
