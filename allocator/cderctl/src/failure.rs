//! An error with its exit status, and printing to a reader that may go away.

/// Exit status for bad input or usage (clap uses it too).
const EXIT_USAGE: u8 = 2;
/// Exit status for a runtime failure: a service down, too few devices.
const EXIT_FAILURE: u8 = 1;

/// An error with the exit status it deserves.
pub struct Failure {
    pub status: u8,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Failure { status: EXIT_USAGE, error: error.into() }
    }
    pub fn runtime(error: impl Into<anyhow::Error>) -> Self {
        Failure { status: EXIT_FAILURE, error: error.into() }
    }
}

/// Writes to stdout; a reader that went away (`cderctl … | head`) is not an error.
pub fn print(text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::runtime(e)),
        _ => Ok(()),
    }
}
