//! Opening a trace: plain or gzip-compressed (by its first two bytes, not
//! its name), read line by line with line numbers.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::error::TraceError;

/// A trace's lines, numbered from 1, as bytes (a line that is not UTF-8 is
/// the caller's malformed line, not an I/O error).
pub struct Lines {
    reader: Box<dyn BufRead>,
    path: std::path::PathBuf,
    number: usize,
    buf: Vec<u8>,
}

/// One line: its number, and its text (or, not UTF-8, its number again).
pub type Line<'a> = (usize, Result<&'a str, usize>);

/// Opens `path`, decompressing it if it is gzip.
pub fn open(path: &Path) -> Result<Lines, TraceError> {
    let io = |source| TraceError::Io { path: path.to_path_buf(), source };
    let mut file = File::open(path).map_err(io)?;
    let mut magic = [0u8; 2];
    let n = read_up_to(&mut file, &mut magic).map_err(io)?;
    let file = File::open(path).map_err(io)?;
    let reader: Box<dyn BufRead> = if n == 2 && magic == [0x1f, 0x8b] {
        Box::new(BufReader::with_capacity(1 << 16, MultiGzDecoder::new(BufReader::with_capacity(1 << 16, file))))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, file))
    };
    Ok(Lines { reader, path: path.to_path_buf(), number: 0, buf: Vec::new() })
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

impl Lines {
    /// The next line without its end (`\n`, `\r\n`), with its number; a
    /// line that is not UTF-8 comes back as `Err(number)`.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Line<'_>, TraceError>> {
        self.buf.clear();
        match self.reader.read_until(b'\n', &mut self.buf) {
            Ok(0) => None,
            Ok(_) => {
                self.number += 1;
                while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
                    self.buf.pop();
                }
                let n = self.number;
                Some(Ok((n, std::str::from_utf8(&self.buf).map_err(|_| n))))
            }
            Err(source) => Some(Err(TraceError::Io { path: self.path.clone(), source })),
        }
    }
}
