//! MUNGE credentials, through the `munge` and `unmunge` programs of the
//! `munge` package (the credential service SLURM clusters already run).
//!
//! A request is authenticated by the header `Authorization: MUNGE <cred>`.
//! The credential's payload is the request itself —
//! `"<METHOD> <path?query>\n"` followed by the exact body bytes — so a
//! credential made for one request cannot authorize another, and munged
//! refuses to decode any credential twice (replay) or after its TTL. The
//! registry learns the caller's uid from munged, never from the request.
//!
//! The programs are used rather than libmunge so that no C library is
//! loaded into slurmstepd with the SPANK plugin; a credential costs one
//! fork+exec, well below a job start's other costs.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A MUNGE failure.
#[derive(Debug, thiserror::Error)]
pub enum MungeError {
    /// The program could not be started (not installed, not executable).
    #[error("cannot run {}: {source}", program.display())]
    Spawn {
        /// `munge` or `unmunge`, as configured.
        program: PathBuf,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// The program ran and refused: munged unreachable, or a credential
    /// that is invalid, expired or replayed.
    #[error("{} failed (exit {status}): {message}", program.display())]
    Failed {
        /// `munge` or `unmunge`, as configured.
        program: PathBuf,
        /// Its exit status (-1 when killed by a signal).
        status: i32,
        /// What its exit status means, or else what it printed.
        message: String,
    },
    /// Output that is no credential (`munge`) or no numeric UID/GID
    /// (`unmunge`), or a payload that cannot be passed on a command line
    /// (not UTF-8, a NUL byte); the text says which.
    #[error("unmunge printed something unexpected: {0}")]
    Garbled(String),
}

impl MungeError {
    /// True when munged itself is out of reach (not running, its socket
    /// gone, or no answer in time) or the program could not run: the
    /// fault is the service's, not the credential's.
    pub fn is_munged_down(&self) -> bool {
        match self {
            MungeError::Spawn { .. } => true,
            MungeError::Failed { status, .. } => matches!(status, 6 | 7),
            MungeError::Garbled(_) => false,
        }
    }
}

/// A verified credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The uid of the process that made the credential, as munged vouches.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// The bytes the credential carries: the request it was made for.
    pub payload: Vec<u8>,
}

/// How to reach munged.
#[derive(Debug, Clone)]
pub struct Munge {
    /// The `munge` program that encodes credentials (clients).
    pub munge_program: PathBuf,
    /// The `unmunge` program that decodes them (the registry).
    pub unmunge_program: PathBuf,
    /// munged's socket; `None`: MUNGE's default.
    pub socket: Option<PathBuf>,
}

impl Munge {
    /// From `[registry]`.
    pub fn from_config(c: &cder_model::RegistryConfig) -> Munge {
        Munge {
            munge_program: c.munge_program.clone(),
            unmunge_program: c.unmunge_program.clone(),
            socket: c.munge_socket.clone(),
        }
    }

    /// Runs `program` with `args`, `input` (if any) on stdin; its exit
    /// status, stdout and stderr.
    fn run(
        &self,
        program: &Path,
        args: &[&std::ffi::OsStr],
        input: Option<&[u8]>,
    ) -> Result<(i32, Vec<u8>, String), MungeError> {
        let spawn = |source| MungeError::Spawn { program: program.to_path_buf(), source };
        let mut cmd = Command::new(program);
        if let Some(s) = &self.socket {
            cmd.arg("--socket").arg(s);
        }
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = cmd.spawn().map_err(spawn)?;
        // A writer thread: the child may fill its stdout pipe before it has
        // read all of stdin.
        let writer = match (child.stdin.take(), input) {
            (Some(mut stdin), Some(input)) => {
                let input = input.to_vec();
                Some(std::thread::spawn(move || stdin.write_all(&input)))
            }
            _ => None,
        };
        let mut out = Vec::new();
        let mut err = String::new();
        if let Some(mut s) = child.stdout.take() {
            s.read_to_end(&mut out).map_err(spawn)?;
        }
        if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        let status = child.wait().map_err(spawn)?;
        if let Some(w) = writer {
            let _ = w.join();
        }
        Ok((status.code().unwrap_or(-1), out, err.trim().to_string()))
    }

    /// A credential whose payload is `payload`.
    pub fn encode(&self, payload: &[u8]) -> Result<String, MungeError> {
        // The payload goes on the command line, not through a pipe: in
        // slurmstepd SIGPIPE may not be ignored, and a pipe write to a
        // munge that died would kill the step daemon. Payloads are JSON
        // text (no NUL) bounded by the body limit.
        let text =
            std::str::from_utf8(payload).map_err(|e| MungeError::Garbled(format!("payload is not UTF-8: {e}")))?;
        if text.contains('\0') {
            return Err(MungeError::Garbled("payload holds a NUL byte".into()));
        }
        let arg = std::ffi::OsString::from(format!("--string={text}"));
        let (status, out, err) = self.run(&self.munge_program, &[arg.as_os_str()], None)?;
        if status != 0 {
            return Err(MungeError::Failed { program: self.munge_program.clone(), status, message: err });
        }
        let cred = String::from_utf8_lossy(&out).trim().to_string();
        if !cred.starts_with("MUNGE:") {
            return Err(MungeError::Garbled(cred));
        }
        Ok(cred)
    }

    /// Decodes and verifies `cred` with munged (which also refuses replays
    /// and expired credentials).
    pub fn decode(&self, cred: &str) -> Result<Verified, MungeError> {
        let args = [std::ffi::OsStr::new("--numeric"), std::ffi::OsStr::new("--keys=STATUS,UID,GID")];
        let (status, out, err) = self.run(&self.unmunge_program, &args, Some(cred.as_bytes()))?;
        if status != 0 {
            let message = match status_text(status) {
                Some(text) => text.to_string(),
                None if err.is_empty() => String::from_utf8_lossy(&out).lines().next().unwrap_or("").to_string(),
                None => err,
            };
            return Err(MungeError::Failed { program: self.unmunge_program.clone(), status, message });
        }
        parse_unmunge(&out)
    }
}

/// What an unmunge exit status (a `munge_err_t`) means, for the ones a
/// client can cause.
fn status_text(status: i32) -> Option<&'static str> {
    Some(match status {
        6 => "munged unreachable (socket)",
        7 => "munged timed out",
        8 => "malformed credential",
        9..=13 => "credential not made by this cluster's MUNGE (version/cipher/MAC/zip/realm)",
        14 => "invalid credential (another MUNGE key?)",
        15 => "expired credential",
        16 => "rewound credential (clock skew)",
        17 => "replayed credential",
        18 => "unauthorized credential",
        _ => return None,
    })
}

/// Splits unmunge's output — `KEY: value` lines, an empty line, then the
/// payload — into uid, gid and payload.
fn parse_unmunge(out: &[u8]) -> Result<Verified, MungeError> {
    let split = out
        .windows(2)
        .position(|w| w == b"\n\n")
        .ok_or_else(|| MungeError::Garbled("no blank line after metadata".into()))?;
    let meta = String::from_utf8_lossy(&out[..split]);
    let payload = out[split + 2..].to_vec();
    let mut uid = None;
    let mut gid = None;
    for line in meta.lines() {
        let Some((k, v)) = line.split_once(':') else { continue };
        let v = v.trim();
        match k.trim() {
            "STATUS" if !v.starts_with('0') && !v.starts_with("Success") => {
                return Err(MungeError::Garbled(format!("status {v}")))
            }
            "UID" => uid = v.split_whitespace().next().and_then(|n| n.parse().ok()),
            "GID" => gid = v.split_whitespace().next().and_then(|n| n.parse().ok()),
            _ => {}
        }
    }
    match (uid, gid) {
        (Some(uid), Some(gid)) => Ok(Verified { uid, gid, payload }),
        _ => Err(MungeError::Garbled(format!("no numeric UID/GID in {meta:?}"))),
    }
}

/// The payload that binds a credential to one request.
pub fn request_payload(method: &str, path_and_query: &str, body: &[u8]) -> Vec<u8> {
    let mut p = format!("{method} {path_and_query}\n").into_bytes();
    p.extend_from_slice(body);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn munged_down_is_told_from_a_bad_credential() {
        let failed = |status| MungeError::Failed { program: "unmunge".into(), status, message: String::new() };
        assert!(failed(6).is_munged_down() && failed(7).is_munged_down());
        assert!(!failed(15).is_munged_down() && !failed(17).is_munged_down() && !failed(8).is_munged_down());
        let spawn = MungeError::Spawn { program: "unmunge".into(), source: std::io::ErrorKind::NotFound.into() };
        assert!(spawn.is_munged_down());
        assert!(!MungeError::Garbled("x".into()).is_munged_down());
    }

    #[test]
    fn parses_unmunge_output() {
        let out = b"STATUS:          0\nUID:             1000\nGID:             100\n\nPOST /v1/request\n{\"a\":1}";
        let v = parse_unmunge(out).unwrap();
        assert_eq!((v.uid, v.gid), (1000, 100));
        assert_eq!(v.payload, b"POST /v1/request\n{\"a\":1}");
        assert!(parse_unmunge(b"STATUS: 0\nUID: x\nGID: 1\n\n").is_err());
        assert!(parse_unmunge(b"UID: 1\nGID: 1").is_err());
    }

    #[test]
    fn payload_binds_method_path_and_body() {
        assert_eq!(request_payload("GET", "/v1/query?name=free", b""), b"GET /v1/query?name=free\n");
        assert_ne!(request_payload("POST", "/v1/release", b"{}"), request_payload("POST", "/v1/request", b"{}"));
    }
}
