//! What a reader says about a trace it cannot read, and what it does with
//! a malformed line.

use std::fmt;
use std::path::{Path, PathBuf};

/// What to do with a malformed line: name it and go on, or stop there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBadLine {
    /// Name it on the workload's list of skipped lines and read on.
    Skip,
    /// Stop: the first malformed line is the reader's error.
    #[default]
    Refuse,
}

/// One malformed line: where, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// The trace file.
    pub path: PathBuf,
    /// 1-based line number.
    pub line: usize,
    /// The field at fault, by the format's own name (`run time (field 4)`,
    /// `gpu_milli`, `Elapsed`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}: {}", self.path.display(), self.line, self.field, self.message)
    }
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A malformed line, with `--bad-lines refuse`.
    #[error("{0}")]
    Line(BadLine),
    /// The file as a whole is not of the format (no header, no jobs).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl TraceError {
    /// A whole-file error.
    pub fn format(path: &Path, message: impl Into<String>) -> TraceError {
        TraceError::Format { path: path.to_path_buf(), message: message.into() }
    }
}

/// Collects a reader's malformed lines under the chosen rule.
#[derive(Debug)]
pub struct LineErrors {
    path: PathBuf,
    rule: OnBadLine,
    /// The lines skipped so far, described.
    pub skipped: Vec<String>,
}

impl LineErrors {
    /// Errors of the trace at `path` under `rule`.
    pub fn new(path: &Path, rule: OnBadLine) -> LineErrors {
        LineErrors { path: path.to_path_buf(), rule, skipped: Vec::new() }
    }

    /// Records a malformed line: an error under `Refuse`, a note under `Skip`.
    pub fn bad(&mut self, line: usize, field: impl Into<String>, message: impl Into<String>) -> Result<(), TraceError> {
        let bad = BadLine { path: self.path.clone(), line, field: field.into(), message: message.into() };
        match self.rule {
            OnBadLine::Refuse => Err(TraceError::Line(bad)),
            OnBadLine::Skip => {
                self.skipped.push(bad.to_string());
                Ok(())
            }
        }
    }
}
