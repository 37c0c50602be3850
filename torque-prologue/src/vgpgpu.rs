//! TORQUE's vGPGPU flow (seed thesis §4.2.3, use-case 2). TORQUE/MAUI has no
//! counting semaphore that takes N at once, so:
//!
//! * the submit filter ([`hold_script`]) puts a job that asks for
//!   `VirtualGPGPUPerNode=N` on user hold (`#PBS -h`) and records its needs
//!   in its variable list (`#PBS -v VirtualGPGPUPerNode=N,VirtualGPGPUMethod=M`),
//!   where `qstat -x` shows them;
//! * `cder-torque-monitor` ([`Monitor::iterate`]), run with operator rights
//!   on the server host, loops: it releases the registry backends of jobs
//!   that finished or vanished (`qstat -x`), then takes the held vGPGPU
//!   jobs in submission order and, while the registry has enough free
//!   backends for the first, requests them on the job's behalf (job key
//!   `torque:<id>`, node [`MONITOR_NODE`]) and runs `qrls`. One job at a
//!   time, so requests never race; strictly in order, so a big job is not
//!   starved by small ones behind it.

use std::process::Command;

use cder_model::{JobKey, Lrms, VgpgpuMethod};
use cder_request::{VgpgpuError, VgpgpuRequest};
use cder_model::{Config, JobEnvironment};
use cder_registry_client::api::{BackendRequest, QueryName};
use cder_registry_client::Client;

/// The job keys (thesis Table 4.1).
pub const PER_NODE_KEY: &str = "VirtualGPGPUPerNode";
pub const METHOD_KEY: &str = "VirtualGPGPUMethod";
pub const TYPE_KEY: &str = "VirtualGPGPUType";
/// Every vGPGPU key a `#CDER` line may carry.
pub const KEYS: [&str; 3] = [PER_NODE_KEY, METHOD_KEY, TYPE_KEY];
/// The node name the monitor's requests are recorded under; the job's own
/// hooks ask with the same key and get the same backends (requests are
/// idempotent per job and node).
pub const MONITOR_NODE: &str = "torque-monitor";

/// One job of `qstat -x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QstatJob {
    pub id: String,
    pub state: String,
    pub hold_types: String,
    pub qtime: u64,
    pub variables: Vec<(String, String)>,
    /// `Resource_List.nodes`, e.g. `2:ppn=4` or `n1+n2`.
    pub nodes: Option<String>,
    /// `euser`: the user the job runs as.
    pub euser: Option<String>,
}

impl QstatJob {
    fn var(&self, name: &str) -> Option<&str> {
        self.variables.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The vGPGPU need: (backends in all, method); `None` for other jobs;
    /// an error for a malformed request.
    pub fn need(&self) -> Result<Option<(u32, VgpgpuMethod)>, String> {
        let request = VgpgpuRequest::read(self.var(PER_NODE_KEY), self.var(METHOD_KEY).or_else(|| self.var(TYPE_KEY)))
            .map_err(|e| format!("{}: {e}", self.id))?;
        Ok(request.map(|r| (r.total(node_count(self.nodes.as_deref())), r.method)))
    }

    /// The job key, `torque:<id>`.
    pub fn key(&self) -> Result<JobKey, String> {
        JobKey::new(Lrms::Torque, &self.id).map_err(|e| e.to_string())
    }

    /// The numeric part of the id, to order jobs queued in one second.
    fn sequence(&self) -> u64 {
        self.id.split(['.', '[']).next().and_then(|s| s.parse().ok()).unwrap_or(u64::MAX)
    }
}

/// Nodes a `nodes=` spec asks for: `2:ppn=4` → 2, `n1+n2:ppn=2` → 2,
/// `3+1:gpus=1` → 4; none → 1.
pub fn node_count(spec: Option<&str>) -> u32 {
    let Some(spec) = spec else { return 1 };
    spec.split('+')
        .map(|part| {
            let first = part.split(':').next().unwrap_or("");
            first.parse::<u32>().unwrap_or(1).max(1)
        })
        .sum::<u32>()
        .max(1)
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

/// The text of the first `<tag>…</tag>` in `xml`.
fn element<'a>(xml: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(&xml[start..end])
}

/// Parses `qstat -x` output (TORQUE's `<Data><Job>…</Job></Data>`; empty
/// output means no jobs).
pub fn parse_qstat_x(xml: &str) -> Result<Vec<QstatJob>, String> {
    let xml = xml.trim();
    if xml.is_empty() {
        return Ok(Vec::new());
    }
    if !xml.contains("<Data>") && !xml.contains("<Data/>") {
        return Err("qstat -x printed no <Data> element".into());
    }
    let mut jobs = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<Job>") {
        let end = rest[start..].find("</Job>").ok_or("unterminated <Job>")? + start;
        let block = &rest[start + 5..end];
        let id = element(block, "Job_Id").map(unescape).ok_or("a <Job> without <Job_Id>")?;
        let variables = element(block, "Variable_List")
            .map(|v| {
                unescape(v)
                    .split(',')
                    .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        jobs.push(QstatJob {
            state: element(block, "job_state").map(unescape).unwrap_or_default(),
            hold_types: element(block, "Hold_Types").map(unescape).unwrap_or_default(),
            qtime: element(block, "qtime").and_then(|t| t.trim().parse().ok()).unwrap_or(0),
            nodes: element(block, "Resource_List").and_then(|r| element(r, "nodes")).map(unescape),
            euser: element(block, "euser").map(unescape),
            variables,
            id,
        });
        rest = &rest[end + 6..];
    }
    Ok(jobs)
}

/// What one iteration did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Iteration {
    /// Jobs whose backends were garbage-collected.
    pub collected: Vec<String>,
    /// Jobs released from hold (in order).
    pub released: Vec<String>,
    /// The first held job that did not fit, if any.
    pub waiting: Option<String>,
}

/// The monitor: registry client and the TORQUE commands it runs.
pub struct Monitor {
    pub client: Client,
    pub qstat: String,
    pub qrls: String,
}

impl Monitor {
    fn qstat_x(&self) -> Result<Vec<QstatJob>, String> {
        let out = Command::new(&self.qstat).arg("-x").output().map_err(|e| format!("{}: {e}", self.qstat))?;
        if !out.status.success() {
            return Err(format!("{} -x failed ({}): {}", self.qstat, out.status, String::from_utf8_lossy(&out.stderr).trim()));
        }
        parse_qstat_x(&String::from_utf8_lossy(&out.stdout))
    }

    /// One pass: garbage collection, then releases in submission order.
    /// If qstat fails nothing is collected or released.
    pub fn iterate(&self) -> Result<Iteration, String> {
        let jobs = self.qstat_x()?;
        let mut it = Iteration::default();
        // 1. Backends of finished (C) or vanished torque jobs go back.
        let status = self.client.status().map_err(|e| e.to_string())?;
        let mut holders: Vec<JobKey> = status.backends.iter().filter_map(|b| b.job.clone()).filter(|j| j.lrms() == Lrms::Torque).collect();
        holders.sort();
        holders.dedup();
        for job in holders {
            let live = jobs.iter().any(|q| q.id == job.id() && q.state != "C");
            if !live {
                let r = self.client.release(&job).map_err(|e| e.to_string())?;
                eprintln!("cder-torque-monitor: {job} finished; released {} backend(s)", r.released);
                it.collected.push(job.id().to_string());
            }
        }
        // 2. Held vGPGPU jobs, oldest first, one at a time.
        let mut held: Vec<(&QstatJob, u32, VgpgpuMethod)> = Vec::new();
        for q in jobs.iter().filter(|q| q.state == "H" && q.hold_types.contains('u')) {
            match q.need() {
                Ok(Some((n, m))) => held.push((q, n, m)),
                Ok(None) => {}
                Err(e) => eprintln!("cder-torque-monitor: {e}; left on hold"),
            }
        }
        held.sort_by_key(|(q, _, _)| (q.qtime, q.sequence(), q.id.clone()));
        for (q, need, method) in held {
            let key = q.key()?;
            let free = self.client.query(QueryName::Free, Some(method)).map_err(|e| e.to_string())?;
            // A job that already holds its backends (a monitor restarted
            // between request and qrls) needs nothing more.
            let holds = status.backends.iter().filter(|b| b.job.as_ref() == Some(&key)).count() as u64;
            if holds < u64::from(need) && free < u64::from(need) {
                it.waiting = Some(q.id.clone());
                break;
            }
            // The owner may then read the allocation from inside the job.
            let uid = q.euser.as_deref().and_then(|u| crate::sys::user_by_name(u).ok()).map(|ids| ids.uid);
            let request = BackendRequest { job: key.clone(), count: need, node: MONITOR_NODE.to_string(), method, uid };
            match self.client.request_for(&request) {
                Ok(_) => {}
                Err(e) if e.code() == Some(cder_registry_client::ErrorCode::Insufficient) => {
                    it.waiting = Some(q.id.clone());
                    break;
                }
                Err(e) => return Err(format!("{key}: {e}")),
            }
            let out = Command::new(&self.qrls).arg(&q.id).output().map_err(|e| format!("{}: {e}", self.qrls))?;
            if !out.status.success() {
                // The job may have been deleted meanwhile: give its backends back.
                let _ = self.client.release(&key);
                eprintln!("cder-torque-monitor: qrls {} failed ({}): {}; backends returned", q.id, out.status, String::from_utf8_lossy(&out.stderr).trim());
                continue;
            }
            eprintln!("cder-torque-monitor: {}: {need} {method} backend(s) requested, released from hold", q.id);
            it.released.push(q.id.clone());
        }
        Ok(it)
    }
}

/// In the job, as its user (`cder-job-starter`): the rCUDA / VCL
/// environment of the backends the monitor requested for `job` (the
/// registry lets a job's owner read its allocation). `None` when `[registry]`
/// is not configured or the job holds no backends. For VCL the node file is
/// written into the user's temp dir.
pub fn job_environment(config: &Config, job: &JobKey) -> Result<Option<JobEnvironment>, String> {
    let Some(rc) = &config.registry else { return Ok(None) };
    let client = Client::from_config(rc).map_err(|e| e.to_string())?;
    let held = match client.allocation(job) {
        Ok(h) => h,
        Err(e) if e.code() == Some(cder_registry_client::ErrorCode::NotFound) => return Ok(None),
        Err(e) => return Err(format!("vGPGPU registry: {e}")),
    };
    let Some(method) = held.allocations.first().map(|a| a.method) else { return Ok(None) };
    let backends = held.backends();
    let nodefile = match method {
        VgpgpuMethod::Vcl => {
            let path = std::env::temp_dir().join(format!("cder-vcl-{}.nodes", job.to_string().replace([':', '/'], "-")));
            std::fs::write(&path, cder_registry_client::env::vcl_nodefile(&backends)).map_err(|e| format!("{}: {e}", path.display()))?;
            Some(path)
        }
        VgpgpuMethod::Rcuda => None,
    };
    Ok(Some(cder_registry_client::env::job_environment(method, &backends, nodefile.as_deref())))
}

/// The submit filter's part: a job whose variables (the header's `-v`
/// directives and `#CDER` lines, then `qsub -v`, as the filter read them
/// with qsub's rules: [`crate::filter::Filtered::variables`]) carry
/// `VirtualGPGPUPerNode=N > 0` gets, after the script's first line if that
/// is a `#!`, `#PBS -h` and `#PBS -v` with the request; other scripts are
/// returned unchanged (`None`). A malformed count or an unknown method
/// refuses the job. The lines use the job's directive `prefix`, which qsub
/// reads; with directives turned off (`-C ""`) the hold cannot be written,
/// and the job is refused.
pub fn hold_script(script: &[u8], vars: &[(String, String)], prefix: &str) -> Result<Option<Vec<u8>>, crate::filter::Rejection> {
    let get = |k: &str| vars.iter().rev().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let refuse = |m: String| crate::filter::Rejection(m);
    let count = get(PER_NODE_KEY);
    let method_text = get(METHOD_KEY).or_else(|| get(TYPE_KEY));
    // One reading for every door (cder_request): a count of 1 to MAX_COUNT,
    // rCUDA when no method is named, a method without a count refused.
    let request = VgpgpuRequest::read(count.as_deref(), method_text.as_deref()).map_err(|e| match e {
        VgpgpuError::Count(c) => refuse(format!("{PER_NODE_KEY}={:?}: {c}", count.unwrap_or_default())),
        VgpgpuError::Method(m) => refuse(format!("{METHOD_KEY}: {m}")),
        VgpgpuError::MethodWithoutCount => refuse(e.to_string()),
    })?;
    let Some(VgpgpuRequest { per_node, method }) = request else { return Ok(None) };
    if prefix.is_empty() {
        return Err(refuse(format!("qsub command line: -C \"\" turns directives off, so the {PER_NODE_KEY} job cannot be held for its backends")));
    }
    let variables = cder_request::lrms::pbs_vgpgpu_variables(&VgpgpuRequest { per_node, method });
    let directives = format!("{prefix} -h\n{prefix} -v {variables}\n");
    let mut out = Vec::with_capacity(script.len() + directives.len());
    if script.starts_with(b"#!") {
        let eol = script.iter().position(|&b| b == b'\n').map_or(script.len(), |p| p + 1);
        out.extend_from_slice(&script[..eol]);
        if eol == script.len() && !script.ends_with(b"\n") {
            out.push(b'\n');
        }
        out.extend_from_slice(directives.as_bytes());
        out.extend_from_slice(&script[eol..]);
    } else {
        out.extend_from_slice(directives.as_bytes());
        out.extend_from_slice(script);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = "<Data><Job><Job_Id>12.ce.example.org</Job_Id><job_state>H</job_state><Hold_Types>u</Hold_Types>\
<qtime>100</qtime><Resource_List><nodes>2:ppn=1</nodes><walltime>01:00:00</walltime></Resource_List>\
<euser>alice</euser><Variable_List>PBS_O_HOME=/root,VirtualGPGPUPerNode=3,VirtualGPGPUMethod=VCL,X=a&amp;b</Variable_List></Job>\
<Job><Job_Id>9.ce.example.org</Job_Id><job_state>C</job_state><qtime>90</qtime></Job></Data>";

    #[test]
    fn parses_torque_xml() {
        let jobs = parse_qstat_x(XML).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].need().unwrap(), Some((6, VgpgpuMethod::Vcl)));
        assert_eq!(jobs[0].var("X"), Some("a&b"));
        assert_eq!(jobs[0].euser.as_deref(), Some("alice"));
        assert_eq!(jobs[1].need().unwrap(), None);
        assert_eq!(jobs[0].sequence(), 12);
        assert!(parse_qstat_x("").unwrap().is_empty());
        assert!(parse_qstat_x("qstat: cannot connect").is_err());
    }

    #[test]
    fn node_specs() {
        assert_eq!(node_count(None), 1);
        assert_eq!(node_count(Some("n1+n2:ppn=2")), 2);
        assert_eq!(node_count(Some("3+1:gpus=1")), 4);
    }

    #[test]
    fn filter_holds_vgpgpu_jobs_only() {
        let hold = |script: &[u8], argv: &[&str]| {
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            let f = crate::filter::filter(script, &argv, &|_| None, &Default::default()).unwrap();
            hold_script(script, &f.variables, &f.prefix)
        };
        let s = b"#!/bin/bash\n#PBS -l nodes=1\n#CDER VirtualGPGPUPerNode=2\necho hi\n";
        let out = String::from_utf8(hold(s, &[]).unwrap().unwrap()).unwrap();
        assert_eq!(out, "#!/bin/bash\n#PBS -h\n#PBS -v VirtualGPGPUPerNode=2,VirtualGPGPUMethod=rCUDA\n#PBS -l nodes=1\n#CDER VirtualGPGPUPerNode=2\necho hi\n");
        let argv = ["-v", "VirtualGPGPUPerNode=1,VirtualGPGPUType=VCL"];
        assert!(String::from_utf8(hold(b"echo\n", &argv).unwrap().unwrap()).unwrap().contains("VirtualGPGPUMethod=VCL"));
        assert_eq!(hold(b"#!/bin/sh\necho\n#CDER VirtualGPGPUPerNode=2\n", &[]).unwrap(), None, "after the first command");
        // A Latin-1 comment does not end the header (qsub reads bytes).
        assert!(hold(b"#!/bin/sh\n# \xe9t\xe9\n#PBS -v VirtualGPGPUPerNode=1\n", &[]).unwrap().is_some());
        // 0 is refused, as on every door (cder_request): leave the key out to ask for none.
        assert!(hold(b"#PBS -v VirtualGPGPUPerNode=0\n", &[]).unwrap_err().0.contains("at least 1"));
        assert!(hold(b"#PBS -v VirtualGPGPUMethod=VCL\n", &[]).unwrap_err().0.contains("without VirtualGPGPUPerNode"));
        // qsub -C: the hold is written in the prefix qsub reads.
        let out = hold(b"#MY -v VirtualGPGPUPerNode=1\n./a\n", &["-C", "#MY"]).unwrap().unwrap();
        assert!(out.starts_with(b"#MY -h\n#MY -v VirtualGPGPUPerNode=1,"), "{}", String::from_utf8_lossy(&out));
        assert!(hold(b"./a\n", &["-C", "", "-v", "VirtualGPGPUPerNode=1"]).is_err());
        assert!(hold(b"#CDER VirtualGPGPUPerNode=two\n", &[]).unwrap_err().0.contains("two"));
        assert!(hold(b"#CDER VirtualGPGPUPerNode=1 VirtualGPGPUMethod=OpenGL\n", &[]).unwrap_err().0.contains("OpenGL"));
    }
}
