//! Alibaba's GPU cluster trace 2023 (`cluster-trace-gpu-v2023`, "openb"):
//! comma-separated, with a header line naming the columns.
//!
//! Tasks (`openb_pod_list_*.csv`): `name`, `cpu_milli`, `memory_mib`,
//! `num_gpu`, `gpu_milli` (thousandths of a GPU, for GPU sharing),
//! `gpu_spec` (the models a task accepts, `|`-separated, or empty),
//! `creation_time`, `scheduled_time`, `deletion_time` (seconds). Columns are
//! found by name, so the `multigpu50` list, which has no times, reads too
//! (every task then arrives at 0 and runs 0 s: fit for the fill replay,
//! where time plays no part).
//!
//! Nodes (`openb_node_list_*.csv`): `sn`, `cpu_milli`, `memory_mib`, `gpu`,
//! `model`; read by `cluster::Cluster::from_alibaba`.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::{LineErrors, OnBadLine, TraceError};
use super::input;
use crate::time::seconds;
use crate::workload::{Job, Request, Workload};

/// A CSV file's rows as maps from the header's names, with line numbers.
pub struct Table {
    /// The header's names in order.
    pub columns: Vec<String>,
    /// (line number, fields) of each data row with as many fields as names.
    pub rows: Vec<(usize, Vec<String>)>,
}

impl Table {
    /// The position of column `name`, or a format error naming the file.
    pub fn column(&self, path: &Path, name: &str) -> Result<usize, TraceError> {
        self.find(name).ok_or_else(|| {
            TraceError::format(path, format!("no column {name:?} in the header ({})", self.columns.join(",")))
        })
    }

    /// The position of column `name`, if the header has it.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

/// Reads a header and its rows (no quoting: the trace has none).
pub fn read_table(path: &Path, errors: &mut LineErrors, limit: Option<usize>) -> Result<Table, TraceError> {
    let mut lines = input::open(path)?;
    let mut columns: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    while let Some(next) = lines.next() {
        let (number, text) = next?;
        let Ok(text) = text else {
            errors.bad(number, "line", "not UTF-8 text")?;
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let fields: Vec<String> = text.split(',').map(|f| f.trim().to_string()).collect();
        match &columns {
            None => {
                let mut seen = BTreeMap::new();
                for (i, c) in fields.iter().enumerate() {
                    if let Some(first) = seen.insert(c.clone(), i) {
                        return Err(TraceError::format(
                            path,
                            format!("line {number}: column {c:?} is named twice (columns {} and {})", first + 1, i + 1),
                        ));
                    }
                }
                columns = Some(fields);
            }
            Some(cols) if fields.len() != cols.len() => {
                errors.bad(number, "line", format!("{} fields where the header names {}", fields.len(), cols.len()))?;
            }
            Some(_) => {
                rows.push((number, fields));
                if limit.is_some_and(|l| rows.len() >= l) {
                    break;
                }
            }
        }
    }
    let columns = columns.ok_or_else(|| TraceError::format(path, "empty: no header line"))?;
    Ok(Table { columns, rows })
}

/// Reads a task list (`openb_pod_list_*.csv`).
pub fn read(path: &Path, rule: OnBadLine, limit: Option<usize>) -> Result<Workload, TraceError> {
    let mut errors = LineErrors::new(path, rule);
    let table = read_table(path, &mut errors, limit)?;
    let name = table.column(path, "name")?;
    let cpu = table.column(path, "cpu_milli")?;
    let num_gpu = table.column(path, "num_gpu")?;
    let gpu_milli = table.column(path, "gpu_milli")?;
    let memory = table.find("memory_mib");
    let spec = table.find("gpu_spec");
    let creation = table.find("creation_time");
    let scheduled = table.find("scheduled_time");
    let deletion = table.find("deletion_time");
    let mut jobs = Vec::with_capacity(table.rows.len());
    let mut dropped = 0;
    for (line, f) in &table.rows {
        // Ok(Err(())): the line is malformed and was skipped.
        let mut number = |col: usize| -> Result<Result<Option<u64>, ()>, TraceError> {
            let text = &f[col];
            if text.is_empty() {
                return Ok(Ok(None));
            }
            match text.parse::<u64>() {
                Ok(v) => Ok(Ok(Some(v))),
                Err(_) => {
                    errors.bad(*line, table.columns[col].clone(), format!("{text:?} is not a whole number"))?;
                    Ok(Err(()))
                }
            }
        };
        let mut values = [None; 7];
        let mut skip = false;
        for (slot, col) in
            [Some(cpu), Some(num_gpu), Some(gpu_milli), memory, creation, scheduled, deletion].into_iter().enumerate()
        {
            if let Some(col) = col {
                match number(col)? {
                    Ok(v) => values[slot] = v,
                    Err(()) => {
                        skip = true;
                        break;
                    }
                }
            }
        }
        if skip {
            continue;
        }
        let [cpu_milli, gpus, milli, mem, created, started, deleted] = values;
        let (cpu_milli, gpus, milli, mem) =
            (cpu_milli.unwrap_or(0), gpus.unwrap_or(0), milli.unwrap_or(0), mem.unwrap_or(0));
        let (whole, fraction) = match (gpus, milli) {
            (0, _) => (0, 0),
            (n, 1000) => (n, 0),
            (1, m) if (1..1000).contains(&m) => (0, m),
            (n, m) => {
                errors.bad(
                    *line,
                    table.columns[gpu_milli].clone(),
                    format!("{m} with num_gpu {n}: a task takes whole GPUs (1000) or a part (1..999) of one"),
                )?;
                continue;
            }
        };
        let submit = created.unwrap_or(0);
        let run = match (started.or(created), deleted) {
            (Some(s), Some(d)) if d >= s => d - s,
            (Some(s), Some(d)) => {
                errors.bad(*line, "deletion_time", format!("{d} is before the task started ({s})"))?;
                continue;
            }
            (None, None) => 0,
            _ => {
                dropped += 1;
                continue;
            }
        };
        let model = spec.map(|c| f[c].clone()).filter(|s| !s.is_empty());
        jobs.push(Job {
            id: f[name].clone(),
            submit: seconds(submit),
            run: seconds(run),
            limit: None,
            request: Request {
                nodes: 1,
                cores: u32::try_from(cpu_milli.div_ceil(1000)).unwrap_or(u32::MAX),
                gpus: u32::try_from(whole).unwrap_or(u32::MAX),
                gpu_milli: fraction as u32,
                mem_mib: mem,
                model,
            },
            class: 0,
        });
    }
    let mut w = Workload::new(path.display().to_string(), jobs);
    w.skipped = errors.skipped;
    w.dropped = dropped;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn tasks_whole_and_shared_and_malformed() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        write!(
            f,
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
             p0,12000,16384,1,1000,,LS,Running,0,100,0\n\
             p1,6000,12288,1,460,V100M16|V100M32,LS,Running,10,110,20\n\
             p2,500,100,0,0,,BE,Running,5,6,5\n\
             p3,8000,100,2,500,,BE,Running,5,6,5\n\
             p4,8000,1OO,1,1000,,BE,Running,5,6,5\n"
        )
        .unwrap();
        let e = read(f.path(), OnBadLine::Refuse, None).unwrap_err().to_string();
        assert!(
            e.ends_with(":5: gpu_milli: 500 with num_gpu 2: a task takes whole GPUs (1000) or a part (1..999) of one"),
            "{e}"
        );
        let w = read(f.path(), OnBadLine::Skip, None).unwrap();
        assert_eq!(w.jobs.len(), 3);
        assert_eq!(w.skipped.len(), 2);
        assert!(w.skipped[1].ends_with(":6: memory_mib: \"1OO\" is not a whole number"), "{:?}", w.skipped);
        let p1 = w.jobs.iter().find(|j| j.id == "p1").unwrap();
        assert_eq!((p1.request.gpu_milli, p1.request.gpus, p1.run, p1.submit), (460, 0, 90_000, 10_000));
        assert_eq!(p1.request.model.as_deref(), Some("V100M16|V100M32"));
        let p2 = w.jobs.iter().find(|j| j.id == "p2").unwrap();
        assert_eq!((p2.request.cores, p2.request.wants_gpu()), (1, false));
    }

    #[test]
    fn missing_columns_are_named() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        writeln!(f, "name,cpu_milli,num_gpu\np,1,0").unwrap();
        let e = read(f.path(), OnBadLine::Skip, None).unwrap_err().to_string();
        assert!(e.contains("no column \"gpu_milli\""), "{e}");
    }
}
