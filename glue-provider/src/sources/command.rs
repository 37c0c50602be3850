//! Running a batch-system query with a deadline.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::ProviderError;

/// Runs an LRMS query with a deadline and returns its stdout; a non-zero
/// exit, a missing command or the deadline is a runtime error naming it.
pub fn run_command(program: &Path, args: &[&str], timeout: Duration) -> Result<Vec<u8>, ProviderError> {
    let shown = format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ProviderError::Runtime(format!("cannot run {shown}: {e}")))?;
    // Drain both pipes on threads so a chatty command cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        stdout.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProviderError::Runtime(format!("{shown} did not finish within {timeout:?}")));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(ProviderError::Runtime(format!("waiting for {shown}: {e}"))),
        }
    };
    let out = out_reader.join().map_err(|_| ProviderError::Runtime(format!("reading {shown}")))?;
    let out = out.map_err(|e| ProviderError::Runtime(format!("reading the output of {shown}: {e}")))?;
    let err = err_reader.join().unwrap_or_default();
    if !status.success() {
        let why = String::from_utf8_lossy(&err);
        let why = why.lines().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        return Err(ProviderError::Runtime(format!("{shown} failed ({status}): {why}")));
    }
    Ok(out)
}
