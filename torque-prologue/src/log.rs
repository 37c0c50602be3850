//! Where the hooks say what they did: one line on stderr (pbs_mom copies a
//! batch prologue's stderr into the job's error file, so users see why their
//! job was requeued or aborted) and the same line to syslog (the only trace
//! of a `.parallel` or `precancel` hook, whose output pbs_mom discards).

use std::os::unix::net::UnixDatagram;

/// Syslog severities the hooks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// `LOG_ERR`.
    Error = 3,
    /// `LOG_WARNING`.
    Warning = 4,
    /// `LOG_INFO`.
    Info = 6,
}

/// The facility: LOG_DAEMON, as for pbs_mom itself.
const FACILITY_DAEMON: u8 = 3;

/// Writes `message` to stderr and, best effort, to the local syslog socket.
pub fn log(tag: &str, severity: Severity, message: &str) {
    eprintln!("{tag}: {message}");
    to_syslog(SYSLOG_SOCKET, tag, severity, message);
}

/// Writes `message` to syslog only: routine news that would clutter the
/// job's error file.
pub fn note(tag: &str, severity: Severity, message: &str) {
    to_syslog(SYSLOG_SOCKET, tag, severity, message);
}

/// The local syslog daemon's socket.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// Sends one RFC 3164 line to the syslog socket at `socket`. Failures are
/// ignored: a node without syslog still has the stderr line.
pub fn to_syslog(socket: &str, tag: &str, severity: Severity, message: &str) {
    let line = format_line(tag, severity, message);
    if let Ok(sock) = UnixDatagram::unbound() {
        let _ = sock.send_to(line.as_bytes(), socket);
    }
}

fn format_line(tag: &str, severity: Severity, message: &str) -> String {
    let pri = FACILITY_DAEMON * 8 + severity as u8;
    // Control characters would split the record or forge another one.
    let clean: String = message.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    format!("<{pri}>{tag}[{}]: {clean}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_reach_a_syslog_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let server = UnixDatagram::bind(&path).unwrap();
        to_syslog(path.to_str().unwrap(), "cder-epilogue", Severity::Error, "release failed\nfake record");
        let mut buf = [0u8; 512];
        let n = server.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(got.starts_with("<27>cder-epilogue["), "{got}");
        assert!(got.ends_with("]: release failed fake record"), "{got}");
        // No socket: no panic, nothing else happens.
        to_syslog("/nonexistent/log", "t", Severity::Info, "x");
    }
}
