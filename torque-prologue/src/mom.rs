//! What pbs_mom keeps on disk about its jobs, read as TORQUE writes it.
//!
//! * `$PBS_HOME/aux/<job id>gpu` — the GPUs TORQUE assigned the job
//!   (`exec_gpus`), one `<host>-gpu<index>` per line. pbs_mom writes it on
//!   the mother superior before it runs the prologue
//!   (`take_care_of_nodes_file` → `write_attr_to_file(pjob,
//!   JOB_ATR_exec_gpus, "gpu")` in `src/resmom/start_exec.c`, TORQUE 4.2.10
//!   … 6.1) and names it to the job as `PBS_GPUFILE`; the prologue's own
//!   environment does not carry that variable, so the path is rebuilt here.
//! * `$PBS_HOME/mom_priv/jobs/<file prefix>.JB` — the job file, written
//!   before the prologue and removed after the epilogue. It holds the job's
//!   attributes, among them `exec_gpus` = `host-gpu/0+host-gpu/1+other-gpu/0`:
//!   TORQUE 6 writes it as XML (`<exec_gpus flags="…">…</exec_gpus>` under
//!   `<attributes>`, the job id in `<jobid>`), TORQUE 4.2 and 5 as the fixed
//!   `ji_qs` struct followed by binary `svrattrl` records. Both are read by
//!   their structure: an attribute is an element or a record of its own,
//!   never text inside another attribute's value (a user's `-v` list).
//!
//! Where TORQUE assigned GPUs (native `gpus=` with its GPU support), those
//! indices are the job's devices on this node; cderd chooses only where
//! TORQUE did not (MAUI GRES, TORQUE without GPU assignment).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The suffix of pbs_mom's job files (`JOB_FILE_SUFFIX`).
pub const JOB_FILE_SUFFIX: &str = ".JB";

/// `$PBS_HOME`, the directory holding `mom_priv/` and `aux/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PbsHome(pub PathBuf);

impl PbsHome {
    /// PBS_HOME as a hook finds it: the parent of the `mom_priv/` directory
    /// that pbs_mom runs the hook from (its path, else the working
    /// directory pbs_mom gives it). `None` when neither is in a `mom_priv/`
    /// (a site's own prologue calling cder from elsewhere: set
    /// `[torque] pbs_home`).
    pub fn of_hook(argv0: &Path, cwd: Option<&Path>) -> Option<PbsHome> {
        let in_mom_priv = |dir: &Path| {
            dir.file_name().is_some_and(|n| n == "mom_priv").then(|| dir.parent().map(Path::to_path_buf)).flatten()
        };
        argv0
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .and_then(in_mom_priv)
            .or_else(|| cwd.and_then(in_mom_priv))
            .map(PbsHome)
    }

    /// `mom_priv/jobs`, where pbs_mom keeps the files of its running jobs.
    pub fn jobs_dir(&self) -> PathBuf {
        self.0.join("mom_priv/jobs")
    }

    /// `PBS_GPUFILE` of job `job_id`.
    pub fn gpu_file(&self, job_id: &str) -> PathBuf {
        self.0.join("aux").join(format!("{job_id}gpu"))
    }

    /// The job file of `job_id`: `<job id>.JB` when it exists, else the
    /// file whose content names the job (pbs_mom may shorten the prefix).
    pub fn job_file(&self, job_id: &str) -> io::Result<Option<(PathBuf, Vec<u8>)>> {
        let direct = self.jobs_dir().join(format!("{job_id}{JOB_FILE_SUFFIX}"));
        match fs::read(&direct) {
            Ok(bytes) => return Ok(Some((direct, bytes))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let files = match job_files(&self.jobs_dir()) {
            Ok(f) => f,
            // No job directory: pbs_mom holds no job file to read.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        for (path, stem) in files {
            let bytes = fs::read(&path)?;
            if job_id_in_job_file(&bytes, &stem) == job_id {
                return Ok(Some((path, bytes)));
            }
        }
        Ok(None)
    }
}

/// One GPU of `exec_gpus`: the host TORQUE names and the index on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecGpu {
    /// The host name, as TORQUE wrote it.
    pub host: String,
    /// The GPU index on that host.
    pub index: u32,
}

/// A malformed `exec_gpus` or gpu file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {entry:?} is not <host>-gpu<index>")]
pub struct ExecGpusError {
    /// What was being read (`exec_gpus` or the gpu file's path).
    pub source_name: String,
    /// The entry that did not parse.
    pub entry: String,
}

/// `exec_gpus` = `host-gpu/0+host-gpu/1`.
pub fn parse_exec_gpus(value: &str) -> Result<Vec<ExecGpu>, ExecGpusError> {
    value.split('+').map(str::trim).filter(|e| !e.is_empty()).map(|e| split_entry(e, "-gpu/", "exec_gpus")).collect()
}

/// The gpu file: one `host-gpu0` per line (exec_gpus with the `/` dropped).
pub fn parse_gpu_file(text: &str) -> Result<Vec<ExecGpu>, ExecGpusError> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| split_entry(l, "-gpu", "PBS_GPUFILE")).collect()
}

fn split_entry(entry: &str, separator: &str, source_name: &str) -> Result<ExecGpu, ExecGpusError> {
    let bad = || ExecGpusError { source_name: source_name.to_string(), entry: entry.to_string() };
    let (host, index) = entry.rsplit_once(separator).ok_or_else(bad)?;
    if host.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    Ok(ExecGpu { host: host.to_string(), index: index.parse().map_err(|_| bad())? })
}

/// Whether TORQUE's name for a node is this host: the same name, or the
/// same short name (pbs_mom's `mom_alias` may be either).
pub fn is_this_host(torque_name: &str, hostname: &str) -> bool {
    let short = |n: &str| n.split('.').next().unwrap_or(n).to_ascii_lowercase();
    torque_name.eq_ignore_ascii_case(hostname) || short(torque_name) == short(hostname)
}

/// The value of job attribute `name` in a job file of either format: a
/// direct child of `<attributes>` in TORQUE 6's XML, a top-level `svrattrl`
/// record (no resource part) in the binary form. Text inside another
/// attribute's value (`Variable_List`, a `Resource_List` entry) never counts.
pub fn attribute_in_job_file(bytes: &[u8], name: &str) -> Option<String> {
    if is_xml(bytes) {
        return xml_children(bytes, &["job", "attributes"]).into_iter().find(|(n, _)| n == name).map(|(_, v)| v);
    }
    let records = svrattrl_records(bytes)?;
    records.iter().find(|r| r.name == name.as_bytes() && r.resource.is_none()).map(|r| {
        // A string value ends at its first NUL (al_valln counts it).
        let end = r.value.iter().position(|&b| b == 0).unwrap_or(r.value.len());
        String::from_utf8_lossy(&r.value[..end]).into_owned()
    })
}

fn is_xml(bytes: &[u8]) -> bool {
    bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'<')
}

/// The element children of the element at `path` (from the root) in an XML
/// document as libxml2 writes it (TORQUE 6's job file): each child's name
/// and unescaped text. A small reader, not a validating parser: prolog,
/// comments and CDATA are skipped or read; anything malformed ends the read.
fn xml_children(bytes: &[u8], path: &[&str]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(bytes);
    let s = text.as_ref();
    let mut stack: Vec<String> = Vec::new();
    let mut out = Vec::new();
    // The child of `path` being read, with its text so far.
    let mut current: Option<(String, String)> = None;
    let mut i = 0;
    while i < s.len() {
        let rest = &s[i..];
        if !rest.starts_with('<') {
            let end = rest.find('<').unwrap_or(rest.len());
            if let Some((_, value)) = current.as_mut().filter(|_| stack.len() == path.len() + 1) {
                value.push_str(&xml_unescape(&rest[..end]));
            }
            i += end;
            continue;
        }
        let skip_to = |close: &str| rest.find(close).map(|p| i + p + close.len());
        if rest.starts_with("<?") {
            let Some(next) = skip_to("?>") else { break };
            i = next;
        } else if rest.starts_with("<!--") {
            let Some(next) = skip_to("-->") else { break };
            i = next;
        } else if let Some(cdata) = rest.strip_prefix("<![CDATA[") {
            let Some(end) = cdata.find("]]>") else { break };
            if let Some((_, value)) = current.as_mut().filter(|_| stack.len() == path.len() + 1) {
                value.push_str(&cdata[..end]);
            }
            i += "<![CDATA[".len() + end + 3;
        } else if rest.starts_with("<!") {
            let Some(next) = skip_to(">") else { break };
            i = next;
        } else if let Some(close) = rest.strip_prefix("</") {
            let Some(end) = close.find('>') else { break };
            let name = close[..end].trim();
            if stack.last().map(String::as_str) != Some(name) {
                break;
            }
            if stack.len() == path.len() + 1 {
                out.extend(current.take());
            }
            stack.pop();
            i += 2 + end + 1;
        } else {
            let Some(end) = tag_end(rest) else { break };
            let tag = &rest[1..end];
            let self_closing = tag.ends_with('/');
            let tag = tag.trim_end_matches('/');
            let name = tag.split(|c: char| c.is_ascii_whitespace()).next().unwrap_or("").to_string();
            if name.is_empty() {
                break;
            }
            let at_parent = stack.len() == path.len() && stack.iter().zip(path).all(|(a, b)| a == b);
            if self_closing {
                if at_parent {
                    out.push((name, String::new()));
                }
            } else {
                if at_parent {
                    current = Some((name.clone(), String::new()));
                }
                stack.push(name);
            }
            i += end + 1;
        }
    }
    out
}

/// The index of the `>` that ends the start tag at the beginning of `s`,
/// skipping quoted attribute values.
fn tag_end(s: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in s.char_indices().skip(1) {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            _ => {}
        }
    }
    None
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// `sizeof(struct svrattrl)` as a 64-bit pbs_mom writes it
/// (src/include/attribute.h): a `list_link` (3 pointers), a `struct attropl`
/// (4 pointers and an enum, padded to 40), then `al_tsize`, `al_nameln`,
/// `al_rescln`, `al_valln` and `al_flags`, 4 bytes each, padded to 88.
const SVRATTRL_SIZE: usize = 88;
/// Where `al_tsize` sits in the header; the three lengths follow it.
const AL_TSIZE_AT: usize = 64;
/// `al_tsize` of the dummy record that ends the list (`ENDATTRIBUTES`,
/// src/server/attr_recov.c).
const END_ATTRIBUTES: i32 = -711;

/// One `svrattrl` record of a binary job file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Svrattrl<'a> {
    name: &'a [u8],
    resource: Option<&'a [u8]>,
    value: &'a [u8],
}

/// The attribute records of a binary job file (TORQUE 4.2 and 5: the fixed
/// `ji_qs` struct, then each attribute as `save_attr` writes it, header then
/// name, resource and value, back to back, ended by an `ENDATTRIBUTES`
/// record), and the offset where they begin. The size of `ji_qs` depends on
/// the build, so the list is found as the first 8-aligned offset from which
/// a whole, well-formed chain of records reaches its end marker: the chain's
/// own lengths, not a byte pattern, say where each record begins.
fn svrattrl_chain(bytes: &[u8]) -> Option<(usize, Vec<Svrattrl<'_>>)> {
    (0..bytes.len().saturating_sub(SVRATTRL_SIZE))
        .step_by(8)
        .find_map(|start| walk_chain(bytes, start).map(|records| (start, records)))
}

fn svrattrl_records(bytes: &[u8]) -> Option<Vec<Svrattrl<'_>>> {
    svrattrl_chain(bytes).map(|(_, records)| records)
}

fn walk_chain(bytes: &[u8], start: usize) -> Option<Vec<Svrattrl<'_>>> {
    let int_at =
        |at: usize| -> Option<i32> { bytes.get(at..at + 4).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]])) };
    let mut records = Vec::new();
    let mut at = start;
    loop {
        let tsize = int_at(at + AL_TSIZE_AT)?;
        if tsize == END_ATTRIBUTES {
            // An empty list is no evidence of where the records begin.
            return (!records.is_empty() && at + SVRATTRL_SIZE <= bytes.len()).then_some(records);
        }
        let [nameln, rescln, valln] =
            [int_at(at + AL_TSIZE_AT + 4)?, int_at(at + AL_TSIZE_AT + 8)?, int_at(at + AL_TSIZE_AT + 12)?];
        let lengths = [nameln, rescln, valln].map(|l| usize::try_from(l).ok());
        let [Some(nameln), Some(rescln), Some(valln)] = lengths else { return None };
        let tsize = usize::try_from(tsize).ok()?;
        // attrlist_alloc: al_tsize = sizeof(svrattrl) + the three lengths.
        if nameln < 2 || tsize != SVRATTRL_SIZE.checked_add(nameln)?.checked_add(rescln)?.checked_add(valln)? {
            return None;
        }
        let data = bytes.get(at + SVRATTRL_SIZE..at.checked_add(tsize)?)?;
        let (name, rest) = data.split_at(nameln);
        let (resource, value) = rest.split_at(rescln);
        let name = nul_terminated_name(name)?;
        let resource = match rescln {
            0 => None,
            _ => Some(nul_terminated_name(resource)?),
        };
        records.push(Svrattrl { name, resource, value });
        at += tsize;
    }
}

/// An attribute or resource name: `[A-Za-z_][A-Za-z0-9_.-]*` and its NUL.
fn nul_terminated_name(field: &[u8]) -> Option<&[u8]> {
    let (last, name) = field.split_last()?;
    let ok = *last == 0
        && name.first().is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_')
        && name.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    ok.then_some(name)
}

/// The job id a job file belongs to: TORQUE 6's `<jobid>`; in a binary
/// file, the first NUL-terminated string that starts with the file's name
/// in the fixed part before the attribute records (the job id field comes
/// first, and the name may be a shortened prefix of it); else the file's
/// name.
pub fn job_id_in_job_file(bytes: &[u8], stem: &str) -> String {
    if is_xml(bytes) {
        if let Some((_, id)) = xml_children(bytes, &["job"]).into_iter().find(|(n, id)| n == "jobid" && !id.is_empty())
        {
            return id;
        }
        return stem.to_string();
    }
    let fixed = match svrattrl_chain(bytes) {
        Some((start, _)) => &bytes[..start],
        None => bytes,
    };
    if !stem.is_empty() {
        if let Some(at) = find(fixed, stem.as_bytes()) {
            let rest = &fixed[at..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(0);
            let candidate = &rest[..end];
            if end >= stem.len() && candidate.iter().all(|b| b.is_ascii_graphic()) {
                return String::from_utf8_lossy(candidate).into_owned();
            }
        }
    }
    stem.to_string()
}

/// Every `*.JB` in `dir`, with its name without the suffix.
pub fn job_files(dir: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(JOB_FILE_SUFFIX) {
            out.push((entry.path(), stem.to_string()));
        }
    }
    out.sort();
    Ok(out)
}

/// The jobs pbs_mom holds now: one id per job file. Every job with a file
/// counts as live whatever its state (queued, running, exiting, held for
/// its epilogue …): pbs_mom removes the file only after the epilogue, the
/// last point at which the job may hold devices. An unreadable directory is
/// an error, never an empty list (which would free every TORQUE job).
pub fn live_jobs(home: &PbsHome) -> io::Result<Vec<String>> {
    let dir = home.jobs_dir();
    let mut ids = Vec::new();
    for (path, stem) in job_files(&dir)? {
        match fs::read(&path) {
            Ok(bytes) => ids.push(job_id_in_job_file(&bytes, &stem)),
            // Removed between the listing and the read: the job ended.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }
    Ok(ids)
}

/// Where TORQUE's assignment was read from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The indices on this host, in TORQUE's order.
    pub devices: Vec<u32>,
    /// The file the assignment was read from.
    pub source: PathBuf,
}

/// The GPUs TORQUE assigned job `job_id` on this host, if TORQUE assigned
/// GPUs at all: the gpu file when pbs_mom wrote one (mother superior; it
/// writes it only when `exec_gpus` is set), else `exec_gpus` of the job
/// file. `Ok(None)`: TORQUE chose no GPUs for the job (no `exec_gpus`).
/// Where `exec_gpus` exists but names only other hosts, this host's share is
/// `Some` with no devices: TORQUE counted none here.
pub fn assigned_gpus(home: &PbsHome, job_id: &str, hostname: &str) -> Result<Option<Assignment>, String> {
    let here = |all: Vec<ExecGpu>, source: PathBuf| -> Assignment {
        Assignment {
            devices: all.iter().filter(|g| is_this_host(&g.host, hostname)).map(|g| g.index).collect(),
            source,
        }
    };
    let gpu_file = home.gpu_file(job_id);
    match fs::read(&gpu_file) {
        Ok(bytes) => {
            let all =
                parse_gpu_file(&String::from_utf8_lossy(&bytes)).map_err(|e| format!("{}: {e}", gpu_file.display()))?;
            return Ok(Some(here(all, gpu_file)));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", gpu_file.display())),
    }
    let (path, bytes) = match home.job_file(job_id) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", home.jobs_dir().display())),
    };
    let Some(value) = attribute_in_job_file(&bytes, "exec_gpus") else { return Ok(None) };
    let all = parse_exec_gpus(&value).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(here(all, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_gpus_and_gpu_file_formats() {
        let g = parse_exec_gpus("wn01-gpu/0+wn01-gpu/3+wn02.example.org-gpu/1").unwrap();
        assert_eq!(g[1], ExecGpu { host: "wn01".into(), index: 3 });
        assert_eq!(g[2].host, "wn02.example.org");
        let f = parse_gpu_file("wn01-gpu0\nwn01-gpu3\n").unwrap();
        assert_eq!(f.iter().map(|g| g.index).collect::<Vec<_>>(), [0, 3]);
        // A host name with "-gpu" in it: the last separator counts.
        assert_eq!(parse_gpu_file("my-gpu-node-gpu2\n").unwrap()[0], ExecGpu { host: "my-gpu-node".into(), index: 2 });
        assert!(parse_exec_gpus("wn01-gpu/x").is_err());
        assert!(parse_gpu_file("garbage\n").is_err());
    }

    #[test]
    fn host_names() {
        assert!(is_this_host("wn01", "wn01.example.org"));
        assert!(is_this_host("WN01.example.org", "wn01"));
        assert!(!is_this_host("wn011", "wn01"));
    }

    /// One record as `save_attr` writes it: the header (pointers as the
    /// heap left them, then the sizes) and name, resource, value.
    fn svrattrl(name: &str, resource: Option<&str>, value: &[u8]) -> Vec<u8> {
        let name = [name.as_bytes(), b"\0"].concat();
        let resource = resource.map(|r| [r.as_bytes(), b"\0"].concat()).unwrap_or_default();
        let mut out: Vec<u8> = (0..AL_TSIZE_AT as u8).map(|i| i.wrapping_mul(37) | 0x40).collect();
        for n in
            [SVRATTRL_SIZE + name.len() + resource.len() + value.len(), name.len(), resource.len(), value.len(), 1025]
        {
            out.extend_from_slice(&(n as i32).to_ne_bytes());
        }
        out.resize(SVRATTRL_SIZE, 0);
        [out, name, resource, value.to_vec()].concat()
    }

    /// A TORQUE 4.2 job file: `ji_qs` (version, then the job id), the
    /// records, the end marker.
    fn binary_job_file(job_id: &str, records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0u8; 0x2c8];
        out[..4].copy_from_slice(&0x00020300i32.to_ne_bytes());
        out[8..8 + job_id.len()].copy_from_slice(job_id.as_bytes());
        for r in records {
            out.extend_from_slice(r);
        }
        let mut end = vec![0u8; SVRATTRL_SIZE];
        end[AL_TSIZE_AT..AL_TSIZE_AT + 4].copy_from_slice(&END_ATTRIBUTES.to_ne_bytes());
        out.extend_from_slice(&end);
        out
    }

    #[test]
    fn job_files_of_both_formats() {
        let xml = b"<?xml version=\"1.0\"?>\n<job><version>1</version><state>4</state><jobid>17.ce.example.org</jobid>\
<attributes><Job_Name flags=\"1\">x</Job_Name><exec_gpus flags=\"1025\">wn01-gpu/2+wn01-gpu/3</exec_gpus></attributes></job>";
        assert_eq!(attribute_in_job_file(xml, "exec_gpus").as_deref(), Some("wn01-gpu/2+wn01-gpu/3"));
        assert_eq!(job_id_in_job_file(xml, "17.ce.example.org"), "17.ce.example.org");
        let bin = binary_job_file(
            "17.ce.example.org",
            &[
                svrattrl("Job_Name", None, b"x\0"),
                svrattrl("exec_host", None, b"wn01/0\0"),
                svrattrl("exec_gpus", None, b"wn01-gpu/1\0"),
            ],
        );
        assert_eq!(attribute_in_job_file(&bin, "exec_gpus").as_deref(), Some("wn01-gpu/1"));
        assert_eq!(attribute_in_job_file(&bin, "exec_mics"), None);
        // A shortened file prefix still yields the full id.
        assert_eq!(job_id_in_job_file(&bin, "17.ce"), "17.ce.example.org");
        assert_eq!(job_id_in_job_file(b"", "18.ce"), "18.ce");
    }

    #[test]
    fn exec_gpus_inside_another_attribute_is_not_exec_gpus() {
        // qsub -v with exec_gpus in it: the arst value is saved with a NUL
        // between its strings, earlier in the file than TORQUE's own record.
        let variables = b"PBS_O_HOME=/home/u\0X=exec_gpus\0wnB-gpu/0+wnB-gpu/1\0exec_gpus\0wnB-gpu/2\0";
        let bin = binary_job_file(
            "20.ce",
            &[
                svrattrl("Job_Name", None, b"x\0"),
                svrattrl("Resource_List", Some("nodes"), b"wnA:ppn=1:gpus=1+wnB:ppn=1\0"),
                svrattrl("Variable_List", None, variables),
                svrattrl("exec_gpus", None, b"wnA-gpu/0\0"),
            ],
        );
        assert_eq!(attribute_in_job_file(&bin, "exec_gpus").as_deref(), Some("wnA-gpu/0"));
        // No exec_gpus record at all: the variable list gives none.
        let bin =
            binary_job_file("21.ce", &[svrattrl("Job_Name", None, b"x\0"), svrattrl("Variable_List", None, variables)]);
        assert_eq!(attribute_in_job_file(&bin, "exec_gpus"), None);
        // A resource named like the attribute is not the attribute.
        let bin = binary_job_file("22.ce", &[svrattrl("Resource_List", Some("exec_gpus"), b"wnB-gpu/0\0")]);
        assert_eq!(attribute_in_job_file(&bin, "exec_gpus"), None);

        // TORQUE 6: libxml2 escapes '<' in a value; a Resource_List entry is
        // a child element of <Resource_List>, not of <attributes>.
        let xml = b"<?xml version=\"1.0\"?>\n<job>\n  <jobid>23.ce</jobid>\n  <attributes>\n    <Job_Name flags=\"1\">x</Job_Name>\n\
    <Resource_List><exec_gpus flags=\"1\">wnB-gpu/0</exec_gpus><nodes flags=\"1\">wnA:ppn=1:gpus=1+wnB:ppn=1</nodes></Resource_List>\n\
    <Variable_List flags=\"1\">X=&lt;exec_gpus&gt;wnB-gpu/1&lt;/exec_gpus&gt;,Y=exec_gpus</Variable_List>\n\
    <exec_gpus flags=\"1025\">wnA-gpu/0</exec_gpus>\n  </attributes>\n</job>\n";
        assert_eq!(attribute_in_job_file(xml, "exec_gpus").as_deref(), Some("wnA-gpu/0"));
        assert_eq!(
            attribute_in_job_file(xml, "Variable_List").as_deref(),
            Some("X=<exec_gpus>wnB-gpu/1</exec_gpus>,Y=exec_gpus")
        );
        let without = b"<job><jobid>24.ce</jobid><attributes><Resource_List><exec_gpus>wnB-gpu/0</exec_gpus></Resource_List></attributes></job>";
        assert_eq!(attribute_in_job_file(without, "exec_gpus"), None);
        assert_eq!(job_id_in_job_file(without, "24"), "24.ce");
    }

    #[test]
    fn a_host_exec_gpus_does_not_name_gets_none() {
        let dir = tempfile::tempdir().unwrap();
        let home = PbsHome(dir.path().to_path_buf());
        fs::create_dir_all(home.jobs_dir()).unwrap();
        fs::create_dir_all(dir.path().join("aux")).unwrap();
        fs::write(
            home.jobs_dir().join("30.ce.JB"),
            binary_job_file("30.ce", &[svrattrl("exec_gpus", None, b"wnA-gpu/0\0")]),
        )
        .unwrap();
        let a = assigned_gpus(&home, "30.ce", "wnB").unwrap().expect("exec_gpus exists");
        assert!(a.devices.is_empty(), "{a:?}");
        assert_eq!(assigned_gpus(&home, "30.ce", "wnA").unwrap().unwrap().devices, [0]);
        // The mother superior's gpu file, naming only a sister.
        fs::write(dir.path().join("aux/31.cegpu"), "wnB-gpu1\n").unwrap();
        assert!(assigned_gpus(&home, "31.ce", "wnA").unwrap().unwrap().devices.is_empty());
        // No exec_gpus: TORQUE chose nothing, cderd may.
        fs::write(home.jobs_dir().join("32.ce.JB"), binary_job_file("32.ce", &[svrattrl("Job_Name", None, b"x\0")]))
            .unwrap();
        assert_eq!(assigned_gpus(&home, "32.ce", "wnA").unwrap(), None);
    }

    #[test]
    fn pbs_home_from_the_hook() {
        assert_eq!(
            PbsHome::of_hook(Path::new("/var/spool/torque/mom_priv/prologue"), None),
            Some(PbsHome("/var/spool/torque".into()))
        );
        assert_eq!(
            PbsHome::of_hook(Path::new("prologue"), Some(Path::new("/srv/torque/mom_priv"))),
            Some(PbsHome("/srv/torque".into()))
        );
        assert_eq!(PbsHome::of_hook(Path::new("/usr/libexec/cder/cder-torque-hook"), Some(Path::new("/"))), None);
    }
}
