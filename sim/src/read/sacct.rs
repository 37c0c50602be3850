//! A site's own SLURM accounting: the output of `sacct -P` (`|`-separated,
//! a header line naming the fields), so an admin replays their own
//! cluster's last month:
//!
//! ```text
//! sacct -a -X -P -S 2024-05-01 -E 2024-06-01 \
//!     -o JobID,Submit,Start,End,Elapsed,NNodes,NCPUS,AllocTRES,Timelimit,State
//! ```
//!
//! Fields are found by name, in any order and case: `JobID` and `Submit`
//! are required; the run time is `ElapsedRaw` (seconds), else `Elapsed`
//! (`[D-]HH:MM:SS`), else `End` − `Start`; `NNodes` (or `AllocNodes`),
//! `NCPUS` (or `AllocCPUS`, `ReqCPUS`), GPUs from `AllocTRES` (or
//! `ReqTRES`: `gres/gpu=2`, `gres/gpu:a100=2`), the limit from
//! `TimelimitRaw` (minutes) or `Timelimit`. Job steps (`1234.batch`,
//! `1234.0`) are left out; a job that never started or has not ended
//! (`Start` or `End` `Unknown`/`None`) is dropped and counted.

use std::path::Path;

use cder_request::gres::tres_entries;

use super::error::{LineErrors, OnBadLine, TraceError};
use super::input;
use crate::time::seconds;
use crate::workload::{Job, Request, Workload};

/// Reads `sacct -P` output.
pub fn read(path: &Path, rule: OnBadLine, limit: Option<usize>) -> Result<Workload, TraceError> {
    let mut lines = input::open(path)?;
    let mut errors = LineErrors::new(path, rule);
    let mut header: Option<Vec<String>> = None;
    let mut jobs = Vec::new();
    let mut dropped = 0;
    while let Some(next) = lines.next() {
        let (number, text) = next?;
        let Ok(text) = text else {
            errors.bad(number, "line", "not UTF-8 text")?;
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = text.split('|').collect();
        let Some(names) = &header else {
            let names: Vec<String> = fields.iter().map(|f| f.trim().to_ascii_lowercase()).collect();
            if !names.iter().any(|n| n == "jobid") || !names.iter().any(|n| n == "submit") {
                return Err(TraceError::format(
                    path,
                    format!("line {number}: not a `sacct -P` header (JobID and Submit are required): {text:?}"),
                ));
            }
            if !["elapsedraw", "elapsed", "end"].iter().any(|f| names.iter().any(|n| n == f)) {
                return Err(TraceError::format(path, "no run time: the header has none of ElapsedRaw, Elapsed, End"));
            }
            header = Some(names);
            continue;
        };
        // sacct -P ends each line with a `|` when asked for --parsable
        // (not --parsable2): one empty field more than the header.
        let fields = if fields.len() == names.len() + 1 && fields.last() == Some(&"") {
            &fields[..names.len()]
        } else {
            &fields[..]
        };
        if fields.len() != names.len() {
            errors.bad(number, "line", format!("{} fields where the header names {}", fields.len(), names.len()))?;
            continue;
        }
        let get = |name: &str| names.iter().position(|n| n == name).map(|i| fields[i].trim());
        let Some(id) = get("jobid") else { continue };
        if id.contains('.') {
            continue;
        }
        match parse_job(id, &get) {
            Ok(Some(job)) => jobs.push(job),
            Ok(None) => dropped += 1,
            Err((field, message)) => {
                errors.bad(number, field, message)?;
                continue;
            }
        }
        if limit.is_some_and(|l| jobs.len() >= l) {
            break;
        }
    }
    if header.is_none() {
        return Err(TraceError::format(path, "empty: no header line"));
    }
    let mut w = Workload::new(path.display().to_string(), jobs);
    w.skipped = errors.skipped;
    w.dropped = dropped;
    Ok(w)
}

type FieldError = (&'static str, String);

fn parse_job<'a>(id: &str, get: &dyn Fn(&str) -> Option<&'a str>) -> Result<Option<Job>, FieldError> {
    let unknown = |v: &str| v.is_empty() || v.eq_ignore_ascii_case("unknown") || v.eq_ignore_ascii_case("none");
    let submit = get("submit").unwrap_or("");
    let submit =
        timestamp(submit).ok_or(("Submit", format!("{submit:?} is not a time such as 2024-05-01T12:00:00")))?;
    let start = get("start").filter(|v| !unknown(v));
    let end = get("end").filter(|v| !unknown(v));
    if get("start").is_some_and(unknown) {
        return Ok(None);
    }
    let run = if let Some(raw) = get("elapsedraw") {
        raw.parse::<u64>().map_err(|_| ("ElapsedRaw", format!("{raw:?} is not a number of seconds")))?
    } else if let Some(e) = get("elapsed") {
        clock(e).ok_or(("Elapsed", format!("{e:?} is not [D-]HH:MM:SS")))?
    } else {
        match (start, end) {
            (Some(s), Some(e)) => {
                let s = timestamp(s).ok_or(("Start", format!("{s:?} is not a time")))?;
                let e = timestamp(e).ok_or(("End", format!("{e:?} is not a time")))?;
                e.checked_sub(s).ok_or(("End", "before Start".to_string()))?
            }
            _ => return Ok(None),
        }
    };
    if get("end").is_some_and(unknown) {
        return Ok(None);
    }
    let count = |names: &[&'static str]| -> Result<Option<u32>, FieldError> {
        for &n in names {
            if let Some(v) = get(&n.to_ascii_lowercase()) {
                if v.is_empty() {
                    continue;
                }
                return v.parse::<u32>().map(Some).map_err(|_| (n, format!("{v:?} is not a count")));
            }
        }
        Ok(None)
    };
    let nodes = count(&["NNodes", "AllocNodes"])?.unwrap_or(1).max(1);
    let cpus = count(&["NCPUS", "AllocCPUS", "ReqCPUS"])?.unwrap_or(1).max(1);
    let (mut gpus, mut model) = (0u64, None);
    for field in ["AllocTRES", "ReqTRES"] {
        let Some(tres) = get(&field.to_ascii_lowercase()).filter(|t| !t.is_empty()) else { continue };
        let mut typed = 0;
        for entry in tres_entries(tres) {
            let item = entry.item.map_err(|e| (field, format!("{tres:?}: {e}")))?;
            if item.name != "gpu" {
                continue;
            }
            match item.gres_type {
                None => gpus = item.count,
                Some(t) => {
                    typed += item.count;
                    model = Some(t);
                }
            }
        }
        if gpus == 0 {
            gpus = typed;
        }
        break;
    }
    let limit = if let Some(raw) = get("timelimitraw").filter(|v| !v.is_empty()) {
        raw.parse::<u64>().ok().map(|m| seconds(m * 60))
    } else {
        get("timelimit").and_then(limit_of)
    };
    let per_node = |total: u64| u32::try_from(total.div_ceil(nodes as u64)).unwrap_or(u32::MAX);
    Ok(Some(Job {
        id: id.to_string(),
        submit: seconds(submit),
        run: seconds(run),
        limit,
        request: Request { nodes, cores: per_node(cpus as u64), gpus: per_node(gpus), model, ..Request::default() },
        class: 0,
    }))
}

/// `2024-05-01T12:34:56` as seconds since 1970 (no zone: only differences matter).
pub fn timestamp(text: &str) -> Option<u64> {
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (h, min, s) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || s > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days).ok().map(|d| d * 86_400 + h * 3600 + min * 60 + s)
}

/// `[D-]HH:MM:SS`, `MM:SS` as seconds.
pub fn clock(text: &str) -> Option<u64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, text),
    };
    let parts: Vec<u64> = rest.split(':').map(|p| p.parse::<u64>().ok()).collect::<Option<_>>()?;
    let s = match parts[..] {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] => m * 60 + s,
        [h] if days > 0 => h * 3600,
        _ => return None,
    };
    Some(days * 86_400 + s)
}

/// A `Timelimit` as SLURM prints it; `UNLIMITED`, `Partition_Limit`: none.
fn limit_of(text: &str) -> Option<u64> {
    if text.contains(':') || text.contains('-') {
        return clock(text).map(seconds);
    }
    text.parse::<u64>().ok().map(|minutes| seconds(minutes * 60))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_jobs_and_leaves_steps_out() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            "JobID|Submit|Start|End|Elapsed|NNodes|NCPUS|AllocTRES|Timelimit|State\n\
             10|2024-05-01T00:00:00|2024-05-01T00:00:10|2024-05-01T00:01:10|00:01:00|2|16|billing=16,cpu=16,gres/gpu=4,gres/gpu:a100=4,mem=8G,node=2|1-00:00:00|COMPLETED\n\
             10.batch|2024-05-01T00:00:00|2024-05-01T00:00:10|2024-05-01T00:01:10|00:01:00|1|8|||COMPLETED\n\
             11|2024-05-01T00:00:05|Unknown|Unknown|00:00:00|1|1||UNLIMITED|PENDING\n\
             12|2024-05-01T00:00:07|2024-05-01T00:00:10|2024-05-01T01:00:10|01:00:00|1|4|cpu=4|30:00|TIMEOUT\n\
             13|2024-05-01T00:00:09|2024-05-01T00:00:10|2024-05-01T01:00:10|1:0O:00|1|4|cpu=4|30:00|TIMEOUT\n"
        )
        .unwrap();
        let e = read(f.path(), OnBadLine::Refuse, None).unwrap_err().to_string();
        assert!(e.ends_with(":6: Elapsed: \"1:0O:00\" is not [D-]HH:MM:SS"), "{e}");
        let w = read(f.path(), OnBadLine::Skip, None).unwrap();
        assert_eq!(w.jobs.len(), 2);
        assert_eq!(w.dropped, 1);
        let j = &w.jobs[0];
        assert_eq!((j.run, j.request.nodes, j.request.cores, j.request.gpus), (60_000, 2, 8, 2));
        assert_eq!((j.limit, j.request.model.as_deref()), (Some(86_400_000), Some("a100")));
        assert_eq!(w.jobs[1].submit - j.submit, 7_000);
        assert_eq!(w.jobs[1].limit, Some(1_800_000));
    }

    #[test]
    fn times_and_clocks() {
        assert_eq!(timestamp("1970-01-02T00:00:01"), Some(86_401));
        assert_eq!(timestamp("2024-03-01T00:00:00").unwrap() - timestamp("2024-02-28T00:00:00").unwrap(), 2 * 86_400);
        assert_eq!(timestamp("2024-13-01T00:00:00"), None);
        assert_eq!(clock("2-01:00:05"), Some(2 * 86_400 + 3605));
        assert_eq!(clock("05:07"), Some(307));
        assert_eq!(clock("x"), None);
        assert_eq!(limit_of("UNLIMITED"), None);
        assert_eq!(limit_of("90"), Some(5_400_000));
    }

    #[test]
    fn not_sacct_output_is_refused_whole() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "hello|world").unwrap();
        assert!(read(f.path(), OnBadLine::Skip, None).unwrap_err().to_string().contains("not a `sacct -P` header"));
    }
}
