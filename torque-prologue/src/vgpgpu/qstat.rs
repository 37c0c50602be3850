//! `qstat -x` read: the held jobs and the vGPGPU need of each.

use cder_model::{JobKey, Lrms, VgpgpuMethod};
use cder_request::keys::{VIRTUAL_GPGPU_METHOD, VIRTUAL_GPGPU_PER_NODE, VIRTUAL_GPGPU_TYPE};
use cder_request::VgpgpuRequest;

/// One job of `qstat -x`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QstatJob {
    /// `Job_Id`.
    pub id: String,
    /// `job_state` (`H` held, `C` completed, …).
    pub state: String,
    /// `Hold_Types` (`u`: a user hold, as the submit filter sets).
    pub hold_types: String,
    /// `qtime`, the queue time in epoch seconds (0 when absent).
    pub qtime: u64,
    /// `Variable_List`, in its order (a later entry wins).
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
        let request = VgpgpuRequest::read(
            self.var(VIRTUAL_GPGPU_PER_NODE),
            self.var(VIRTUAL_GPGPU_METHOD).or_else(|| self.var(VIRTUAL_GPGPU_TYPE)),
        )
        .map_err(|e| format!("{}: {e}", self.id))?;
        let Some(r) = request else { return Ok(None) };
        let nodes = node_count(self.nodes.as_deref());
        let total = cder_request::job_total(r.per_node, u64::from(nodes)).ok_or_else(|| {
            format!(
                "{}: {} vGPGPUs per node on {nodes} nodes exceed {} for one job",
                self.id,
                r.per_node,
                cder_request::MAX_JOB_TOTAL
            )
        })?;
        Ok(Some((total, r.method)))
    }

    /// The job key, `torque:<id>`.
    pub fn key(&self) -> Result<JobKey, String> {
        JobKey::new(Lrms::Torque, &self.id).map_err(|e| e.to_string())
    }

    /// The numeric part of the id, to order jobs queued in one second.
    pub(crate) fn sequence(&self) -> u64 {
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
        let huge = QstatJob {
            nodes: Some("17".into()),
            variables: vec![("VirtualGPGPUPerNode".into(), "4096".into())],
            ..jobs[0].clone()
        };
        assert!(huge.need().unwrap_err().contains("exceed 65536"));
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
}
