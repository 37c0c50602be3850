//! The node socket: a Unix stream socket, one thread per connection (up to
//! [`MAX_CONNECTIONS`], fewer for unprivileged uids), one newline-terminated request per line, each line
//! read with a bound so no client can make the daemon buffer without limit.
//! A connection's thread waits [`KEEP_IDLE_THREAD`] for the next connection
//! before it ends: a job's start makes three short connections in a few
//! milliseconds, and starting a thread cost more than answering one.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cder_protocol::{error_line, ok_line, ErrorCode, ErrorReply, Request};

use crate::daemon::Daemon;
use crate::peer::{Caller, ProcessIdentity};

/// Connections waiting to be accepted; a client connecting past that
/// waits in connect(2) for room. Small, so that root's connection never
/// queues behind thousands of a user's.
pub const BACKLOG: i32 = 64;
/// Connections served at once; more are answered with an error and closed.
pub const MAX_CONNECTIONS: usize = 256;
/// A connection idle this long is closed, freeing its slot.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// A client that does not read its reply within this is dropped.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection thread with nothing to serve ends after this.
pub const KEEP_IDLE_THREAD: Duration = Duration::from_secs(30);

type Work = Box<dyn FnOnce() + Send>;

/// Connection threads that outlive their connection, idle for a while:
/// a new connection goes to one of them, or to a new thread when none is
/// idle (so there are never fewer threads than connections being served).
#[derive(Default)]
struct Threads {
    state: Mutex<ThreadsState>,
    wake: Condvar,
}

#[derive(Default)]
struct ThreadsState {
    queue: VecDeque<Work>,
    idle: usize,
}

impl Threads {
    fn lock(&self) -> std::sync::MutexGuard<'_, ThreadsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `work` on an idle thread, or on a new one.
    fn run(self: &Arc<Self>, work: Work) -> std::io::Result<()> {
        let mut state = self.lock();
        // Each queued item has an idle thread of its own to take it: an
        // idle thread ends only after looking at the queue under the lock.
        if state.idle > state.queue.len() {
            state.queue.push_back(work);
            drop(state);
            self.wake.notify_one();
            return Ok(());
        }
        drop(state);
        let threads = Arc::clone(self);
        std::thread::Builder::new().name("cderd-conn".into()).spawn(move || {
            work();
            threads.serve_queue();
        })?;
        Ok(())
    }

    /// Takes queued work until none comes for [`KEEP_IDLE_THREAD`].
    fn serve_queue(&self) {
        let mut state = self.lock();
        loop {
            state.idle += 1;
            state = self
                .wake
                .wait_timeout_while(state, KEEP_IDLE_THREAD, |s| s.queue.is_empty())
                .map(|(s, _)| s)
                .unwrap_or_else(|p| p.into_inner().0);
            state.idle -= 1;
            let Some(work) = state.queue.pop_front() else { return };
            drop(state);
            work();
            state = self.lock();
        }
    }
}

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A live cderd answers on the socket path: a second daemon would
    /// give the same devices out twice.
    #[error("socket {}: another cderd is already listening there", .0.display())]
    InUse(PathBuf),
    /// Creating, binding or securing the socket failed.
    #[error("socket {}: {what}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// The error the kernel returned.
        source: std::io::Error,
    },
}

/// Binds the node socket at `path` with `mode`: creates the parent dir,
/// removes a stale socket left by a crash (but never a live one, nor a file
/// that is not a socket), binds, then sets the mode.
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, ServeError> {
    let io = |what, source| ServeError::Io { path: path.to_path_buf(), what, source };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io("creating its directory", e))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(ServeError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(|e| io("removing the stale socket", e))?;
        }
        Ok(_) => {
            return Err(io(
                "refusing to replace it",
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "exists and is not a socket"),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("inspecting it", e)),
    }
    // The socket is created under the process umask (tighter or equal), then
    // opened up to the configured mode: never looser than configured.
    let listener = UnixListener::bind(path).map_err(|e| io("binding", e))?;
    crate::sys::set_backlog(&listener, BACKLOG).map_err(|e| io("setting its backlog", e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| io("setting its mode", e))?;
    Ok(listener)
}

/// Connection slots, counted per uid, so that unprivileged users cannot
/// starve the batch system's hooks: operators may use every slot, any other
/// uid at most [`MAX_CONNECTIONS_PER_USER`], and all of them together leave
/// [`RESERVED_FOR_OPERATORS`] free.
#[derive(Default)]
struct Slots {
    by_uid: Mutex<HashMap<u32, usize>>,
}

/// Connections one non-operator uid may hold at once.
pub const MAX_CONNECTIONS_PER_USER: usize = 16;
/// Connections only root and operators may take.
pub const RESERVED_FOR_OPERATORS: usize = 32;

impl Slots {
    fn take(&self, uid: u32, operator: bool) -> Result<(), String> {
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        let total: usize = by_uid.values().sum();
        let mine = by_uid.get(&uid).copied().unwrap_or(0);
        if total >= MAX_CONNECTIONS {
            return Err(format!("cderd is serving {MAX_CONNECTIONS} connections; try again"));
        }
        if !operator {
            if mine >= MAX_CONNECTIONS_PER_USER {
                return Err(format!(
                    "uid {uid} already holds {MAX_CONNECTIONS_PER_USER} connections to cderd; close some"
                ));
            }
            if total >= MAX_CONNECTIONS - RESERVED_FOR_OPERATORS {
                return Err("cderd is busy; the remaining connections are reserved for the batch system".into());
            }
        }
        by_uid.insert(uid, mine + 1);
        Ok(())
    }

    fn give_back(&self, uid: u32) {
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                by_uid.remove(&uid);
            }
        }
    }
}

/// The nice value of a thread while it serves a connection of neither root
/// nor an operator: under CPU contention the batch system's requests, and
/// the thread accepting connections, run first.
pub const USER_CONNECTION_NICE: i32 = 10;
/// Refused connections of one uid are logged at most once in this long.
pub const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// The log lines about refused connections: a flood of them must not cost
/// the accepting thread a line each.
#[derive(Default)]
struct Refusals {
    by_uid: HashMap<u32, (std::time::Instant, u64)>,
}

impl Refusals {
    fn refused(&mut self, uid: u32, pid: i32, why: &str) {
        let now = std::time::Instant::now();
        match self.by_uid.get_mut(&uid) {
            Some((logged, unlogged)) if now.duration_since(*logged) < REFUSALS_LOGGED_EVERY => *unlogged += 1,
            Some((logged, unlogged)) => {
                tracing::warn!(uid, pid, "refusing a connection: {why} ({unlogged} more refused since the last line)");
                (*logged, *unlogged) = (now, 0);
            }
            None => {
                tracing::warn!(uid, pid, "refusing a connection: {why}");
                self.by_uid.insert(uid, (now, 0));
            }
        }
    }
}

/// Serves `listener` forever (until accept fails fatally).
pub fn serve(daemon: Arc<Daemon>, listener: UnixListener) -> std::io::Result<()> {
    let slots = Arc::new(Slots::default());
    let mut refusals = Refusals::default();
    let threads = Arc::new(Threads::default());
    let max_line = daemon.config().node.max_request_bytes;
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends pass; keep serving the others.
                tracing::warn!("accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let cred = match crate::sys::peer_cred(&stream) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("SO_PEERCRED failed, dropping the connection: {e}");
                continue;
            }
        };
        // Before a thread takes it: an `env` arriving later waits for this
        // connection's first request (a job prolog's unanswered `alloc`).
        // Only the batch system's connections can carry one: a user's
        // silent connections must not make every `env` wait.
        let operator = daemon.is_operator(cred.uid);
        let arrival = operator.then(|| daemon.arrived());
        if let Err(why) = slots.take(cred.uid, operator) {
            if let Some(seq) = arrival {
                daemon.arrival_read(seq);
            }
            refusals.refused(cred.uid, cred.pid, &why);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = (&stream).write_all(error_line(&ErrorReply::new(ErrorCode::Internal, why)).as_bytes());
            continue;
        }
        // Only for a connection taken: a refused one costs no more reads.
        let caller = Caller { uid: cred.uid, pid: cred.pid, process: ProcessIdentity::at_connect(&stream, cred.pid) };
        let slots_here = Arc::clone(&slots);
        let daemon_here = Arc::clone(&daemon);
        let spawned = threads.run(Box::new(move || {
            let _niced = if operator { None } else { Niced::to(USER_CONNECTION_NICE) };
            connection(&daemon_here, stream, caller, arrival, max_line);
            slots_here.give_back(caller.uid);
        }));
        if let Err(e) = spawned {
            if let Some(seq) = arrival {
                daemon.arrival_read(seq);
            }
            slots.give_back(caller.uid);
            tracing::error!("cannot start a connection thread: {e}");
        }
    }
    Ok(())
}

/// A connection thread running at a user's nice value until dropped, when
/// it gets its own back (also if serving the connection panicked).
struct Niced;

impl Niced {
    /// Lowers this thread's priority to `nice`; `None` where it could not
    /// be raised back (a daemon not run as root), so it is left as it is.
    fn to(nice: i32) -> Option<Niced> {
        if !crate::sys::running_as_root() {
            return None;
        }
        match crate::sys::set_thread_nice(nice) {
            Ok(()) => Some(Niced),
            Err(e) => {
                tracing::warn!("setting a connection thread's nice value to {nice}: {e}");
                None
            }
        }
    }
}

impl Drop for Niced {
    fn drop(&mut self) {
        if let Err(e) = crate::sys::set_thread_nice(0) {
            tracing::warn!("giving a connection thread its nice value back: {e}");
        }
    }
}

/// Marks the connection's arrival read however its thread leaves it.
struct Arrival<'a> {
    daemon: &'a Daemon,
    seq: Option<u64>,
}

impl Drop for Arrival<'_> {
    fn drop(&mut self) {
        if let Some(seq) = self.seq {
            self.daemon.arrival_read(seq);
        }
    }
}

/// Serves one connection (the `arrival`th accepted) until it closes, idles
/// out, or sends a line too long.
fn connection(daemon: &Daemon, stream: UnixStream, caller: Caller, arrival: Option<u64>, max_line: usize) {
    let _arrival = Arrival { daemon, seq: arrival };
    let _ = stream.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        let limit = max_line as u64 + 1;
        let n = match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Ok(n) => n,
            Err(_) => return,
        };
        if n == 0 {
            return;
        }
        let complete = line.last() == Some(&b'\n');
        let body_len = if complete { line.len() - 1 } else { line.len() };
        if body_len > max_line {
            let reply = ErrorReply::new(
                ErrorCode::TooLarge,
                format!("request line longer than {max_line} bytes; closing the connection"),
            );
            tracing::warn!(uid = caller.uid, pid = caller.pid, "request too large");
            let _ = writer.write_all(error_line(&reply).as_bytes());
            return;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            // An empty line is not a request; ignore it rather than answer.
            if !complete {
                return;
            }
            continue;
        }
        let reply = answer_arrival(daemon, caller, &line, arrival);
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
        if !complete {
            // The client closed its side after a last unterminated line.
            return;
        }
    }
}

/// One request line in, one reply line out; never panics.
pub fn answer(daemon: &Daemon, caller: Caller, line: &[u8]) -> String {
    answer_arrival(daemon, caller, line, None)
}

/// [`answer`] for a line from the `arrival`th connection accepted (see
/// [`Daemon::handle_arrival`]).
fn answer_arrival(daemon: &Daemon, caller: Caller, line: &[u8], arrival: Option<u64>) -> String {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let request = Request::from_line(line).inspect_err(|_| {
            // No `alloc` to register: later `env`s need not wait for it.
            if let Some(seq) = arrival {
                daemon.arrival_read(seq);
            }
        })?;
        let result = match arrival {
            Some(seq) => daemon.handle_arrival(caller, &request, seq),
            None => daemon.handle(caller, &request),
        };
        if let Err(e) = &result {
            if e.code == ErrorCode::PermissionDenied || e.code == ErrorCode::Internal {
                tracing::warn!(uid = caller.uid, pid = caller.pid, op = request.op(), "{e}");
            }
        }
        result
    }));
    match outcome {
        Ok(Ok(value)) => ok_line(&value),
        Ok(Err(e)) => error_line(&e),
        Err(_) => {
            tracing::error!(uid = caller.uid, "a request handler panicked; any open transaction was rolled back");
            error_line(&ErrorReply::new(ErrorCode::Internal, "internal error (see the cderd log)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_queues_few_connections_ahead_of_roots() {
        // ss(8) prints a listening socket's backlog as its Send-Q.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cderd.sock");
        let _listener = bind(&path, 0o666).unwrap();
        let out = std::process::Command::new("ss").args(["-xlnH"]).output().expect("ss (iproute2)");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.contains(path.to_str().unwrap())).unwrap_or_else(|| panic!("{text}"));
        let send_q: i32 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert_eq!(send_q, BACKLOG, "{line}");
    }

    #[test]
    fn a_flood_of_refusals_is_one_log_line_per_uid_and_period() {
        let mut refusals = Refusals::default();
        for _ in 0..1000 {
            refusals.refused(65534, 1, "busy");
        }
        refusals.refused(1000, 2, "busy");
        assert_eq!(refusals.by_uid[&65534].1, 999, "the first was logged, the rest counted");
        assert_eq!(refusals.by_uid[&1000].1, 0);
        // After the period the next refusal is logged and the count starts again.
        refusals.by_uid.get_mut(&65534).unwrap().0 -= REFUSALS_LOGGED_EVERY;
        refusals.refused(65534, 1, "busy");
        assert_eq!(refusals.by_uid[&65534].1, 0);
    }

    #[test]
    fn a_users_connection_is_served_at_a_lower_priority_and_the_thread_gets_its_own_back() {
        let nice_of_thread = || {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            // Field 19 (nice): the 17th after the command's closing ')'.
            stat.rsplit_once(')').unwrap().1.split_whitespace().nth(16).unwrap().parse::<i32>().unwrap()
        };
        let Some(niced) = Niced::to(USER_CONNECTION_NICE) else {
            eprintln!("skipping: a thread's nice value can be raised back only by root");
            return;
        };
        assert_eq!(nice_of_thread(), USER_CONNECTION_NICE);
        drop(niced);
        assert_eq!(nice_of_thread(), 0);
    }

    #[test]
    fn connection_threads_are_reused_and_never_too_few() {
        let threads = Arc::new(Threads::default());
        // One after another: the finished thread takes the next one.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let mut ids = std::collections::HashSet::new();
        for _ in 0..20 {
            let done = done_tx.clone();
            threads.run(Box::new(move || done.send(std::thread::current().id()).unwrap())).unwrap();
            ids.insert(done_rx.recv_timeout(Duration::from_secs(10)).unwrap());
            // Let the thread get back to waiting before the next arrives.
            while threads.lock().idle == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(ids.len(), 1, "one thread served all twenty, one after another");
        // All at once: eight held connections get eight threads.
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        for _ in 0..8 {
            let (started, gate) = (started_tx.clone(), Arc::clone(&gate));
            threads
                .run(Box::new(move || {
                    started.send(std::thread::current().id()).unwrap();
                    let open = gate.0.lock().unwrap();
                    let _open = gate.1.wait_while(open, |o| !*o).unwrap();
                }))
                .unwrap();
        }
        let running: std::collections::HashSet<_> = (0..8)
            .map(|_| started_rx.recv_timeout(Duration::from_secs(10)).expect("a connection waited for a thread"))
            .collect();
        assert_eq!(running.len(), 8);
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
    }

    #[test]
    fn unprivileged_users_cannot_take_every_slot() {
        let slots = Slots::default();
        for _ in 0..MAX_CONNECTIONS_PER_USER {
            slots.take(1000, false).unwrap();
        }
        assert!(slots.take(1000, false).unwrap_err().contains("uid 1000"));
        slots.give_back(1000);
        slots.take(1000, false).unwrap();
        // Many users together stop short of the operators' reserve.
        let mut uid = 2000;
        while slots.take(uid, false).is_ok() {
            uid += 1;
        }
        let taken: usize = slots.by_uid.lock().unwrap().values().sum();
        assert_eq!(taken, MAX_CONNECTIONS - RESERVED_FOR_OPERATORS);
        for _ in 0..RESERVED_FOR_OPERATORS {
            slots.take(0, true).unwrap();
        }
        assert!(slots.take(0, true).unwrap_err().contains("serving"));
    }
}
