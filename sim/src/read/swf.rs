//! The Standard Workload Format (SWF 2.2) of the Parallel Workloads
//! Archive: `;` comment lines (the header), then one job per line, 18
//! whitespace-separated numbers. `-1` means unknown.
//!
//! Read here: 1 job number, 2 submit time (s), 4 run time (s), 5 allocated
//! processors (8, requested processors, where 5 is unknown), 9 requested
//! time (s), 16 partition. A job whose run time or size is unknown (a job
//! cancelled before it started) is dropped and counted, not malformed.

use std::path::Path;

use super::error::{LineErrors, OnBadLine, TraceError};
use super::input;
use crate::time::seconds;
use crate::workload::{Job, Request, Workload};

/// How to read an SWF log.
#[derive(Debug, Clone, Default)]
pub struct SwfOptions {
    /// Only jobs of this partition (field 16), e.g. Curie's 8, "hybrid".
    pub partition: Option<i64>,
    /// Jobs take whole nodes of this many cores, each with `gpus_per_node`
    /// GPUs (SWF knows processors only); None: processors anywhere.
    pub node_shape: Option<NodeShape>,
    /// Stop after this many jobs.
    pub limit: Option<usize>,
}

/// Processors read as nodes: `ceil(processors / cores)` nodes of `cores`
/// cores and `gpus` GPUs each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeShape {
    /// Cores per node.
    pub cores: u32,
    /// GPUs per node the job asks for.
    pub gpus: u32,
}

const FIELDS: [&str; 18] = [
    "job number (field 1)",
    "submit time (field 2)",
    "wait time (field 3)",
    "run time (field 4)",
    "allocated processors (field 5)",
    "average CPU time (field 6)",
    "used memory (field 7)",
    "requested processors (field 8)",
    "requested time (field 9)",
    "requested memory (field 10)",
    "status (field 11)",
    "user (field 12)",
    "group (field 13)",
    "executable (field 14)",
    "queue (field 15)",
    "partition (field 16)",
    "preceding job (field 17)",
    "think time (field 18)",
];

/// Reads an SWF log (plain or gzip).
pub fn read(path: &Path, options: &SwfOptions, rule: OnBadLine) -> Result<Workload, TraceError> {
    let mut lines = input::open(path)?;
    let mut errors = LineErrors::new(path, rule);
    let mut jobs = Vec::new();
    let mut dropped = 0usize;
    while let Some(next) = lines.next() {
        let (number, text) = next?;
        let Ok(text) = text else {
            errors.bad(number, "line", "not UTF-8 text")?;
            continue;
        };
        let text = text.trim();
        if text.is_empty() || text.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        if fields.len() != 18 {
            errors.bad(number, "line", format!("{} fields where SWF has 18", fields.len()))?;
            continue;
        }
        let mut values = [0i64; 18];
        let mut bad = None;
        for (i, f) in fields.iter().enumerate() {
            match parse_number(f) {
                Some(v) => values[i] = v,
                None => {
                    bad = Some((i, *f));
                    break;
                }
            }
        }
        if let Some((i, f)) = bad {
            errors.bad(number, FIELDS[i], format!("{f:?} is not a number"))?;
            continue;
        }
        if values[1] < 0 {
            errors.bad(number, FIELDS[1], format!("{} is before the log's start", values[1]))?;
            continue;
        }
        if options.partition.is_some_and(|p| values[15] != p) {
            continue;
        }
        let procs = if values[4] > 0 { values[4] } else { values[7] };
        if values[3] < 0 || procs <= 0 {
            dropped += 1;
            continue;
        }
        let procs = u32::try_from(procs).unwrap_or(u32::MAX);
        let request = match options.node_shape {
            None => Request { cores: procs, ..Request::default() },
            Some(shape) => Request {
                nodes: procs.div_ceil(shape.cores.max(1)),
                cores: procs.min(shape.cores),
                gpus: shape.gpus,
                ..Request::default()
            },
        };
        jobs.push(Job {
            id: fields[0].to_string(),
            submit: seconds(values[1] as u64),
            run: seconds(values[3] as u64),
            limit: (values[8] > 0).then(|| seconds(values[8] as u64)),
            request,
            class: 0,
        });
        if options.limit.is_some_and(|l| jobs.len() >= l) {
            break;
        }
    }
    let mut w = Workload::new(path.display().to_string(), jobs);
    w.skipped = errors.skipped;
    w.dropped = dropped;
    Ok(w)
}

/// An SWF number: an integer, or a decimal some logs write (rounded).
fn parse_number(f: &str) -> Option<i64> {
    f.parse::<i64>().ok().or_else(|| f.parse::<f64>().ok().filter(|v| v.is_finite()).map(|v| v.round() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    const GOOD: &str = "; Version: 2.2\n; MaxProcs: 512\n\
        1 0 5 100 16 -1 -1 16 3600 -1 1 1 1 -1 1 4 -1 -1\n\
        2 10 0 -1 32 -1 -1 32 3600 -1 5 1 1 -1 1 4 -1 -1\n\
        3 20 0 50 -1 -1 -1 8 -1 -1 1 2 1 -1 1 8 -1 -1\n";

    #[test]
    fn reads_jobs_and_drops_unknown_ones() {
        let f = write(GOOD);
        let w = read(f.path(), &SwfOptions::default(), OnBadLine::Refuse).unwrap();
        assert_eq!(w.jobs.len(), 2);
        assert_eq!(w.dropped, 1);
        assert_eq!((w.jobs[0].run, w.jobs[0].request.cores, w.jobs[0].limit), (100_000, 16, Some(3_600_000)));
        // Field 5 unknown: field 8; no requested time.
        assert_eq!((w.jobs[1].request.cores, w.jobs[1].limit), (8, None));
        let hybrid = SwfOptions {
            partition: Some(8),
            node_shape: Some(NodeShape { cores: 4, gpus: 2 }),
            ..SwfOptions::default()
        };
        let w = read(f.path(), &hybrid, OnBadLine::Refuse).unwrap();
        assert_eq!(w.jobs.len(), 1);
        assert_eq!((w.jobs[0].request.nodes, w.jobs[0].request.cores, w.jobs[0].request.gpus), (2, 4, 2));
    }

    #[test]
    fn a_malformed_line_is_named_and_refused_or_skipped() {
        let f = write(&format!("{GOOD}4 30 0 1x 4 -1 -1 4 -1 -1 1 2 1 -1 1 8 -1 -1\n5 40 0 10\n"));
        let e = read(f.path(), &SwfOptions::default(), OnBadLine::Refuse).unwrap_err().to_string();
        assert!(e.ends_with(":6: run time (field 4): \"1x\" is not a number"), "{e}");
        let w = read(f.path(), &SwfOptions::default(), OnBadLine::Skip).unwrap();
        assert_eq!(w.jobs.len(), 2);
        assert_eq!(w.skipped.len(), 2);
        assert!(w.skipped[1].ends_with(":7: line: 4 fields where SWF has 18"), "{:?}", w.skipped);
    }

    #[test]
    fn gzip_is_read_by_its_magic_and_garbage_never_panics() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(GOOD.as_bytes()).unwrap();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&gz.finish().unwrap()).unwrap();
        assert_eq!(read(f.path(), &SwfOptions::default(), OnBadLine::Refuse).unwrap().jobs.len(), 2);
        let junk = write("\u{0}\u{1}garbage\n\u{ff}\n1 2 3\n");
        assert!(read(junk.path(), &SwfOptions::default(), OnBadLine::Skip).unwrap().jobs.is_empty());
        let mut bytes = tempfile::NamedTempFile::new().unwrap();
        bytes.write_all(&[0x1f, 0x8b, 0, 1, 2, 3]).unwrap();
        assert!(read(bytes.path(), &SwfOptions::default(), OnBadLine::Skip).is_err());
    }
}
