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
//!   TORQUE 6 writes it as XML (`<exec_gpus flags="…">…</exec_gpus>`, the
//!   job id in `<jobid>`), TORQUE 4.2 and 5 as binary `svrattrl` records
//!   (`exec_gpus\0<value>\0`). Both are found by looking for the attribute's
//!   name, without depending on the struct layout of a TORQUE build.
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
        let in_mom_priv = |dir: &Path| dir.file_name().is_some_and(|n| n == "mom_priv").then(|| dir.parent().map(Path::to_path_buf)).flatten();
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

/// The value of attribute `name` in a job file of either format.
pub fn attribute_in_job_file(bytes: &[u8], name: &str) -> Option<String> {
    let name = name.as_bytes();
    let mut from = 0;
    while let Some(at) = find(&bytes[from..], name).map(|p| p + from) {
        let after = at + name.len();
        // Not the tail of a longer name (`myexec_gpus`).
        let starts_word = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        match bytes.get(after) {
            // Binary svrattrl: name NUL value NUL (no resource part).
            Some(0) if starts_word && bytes.get(at.wrapping_sub(1)) != Some(&b'<') => {
                let value = &bytes[after + 1..];
                let end = value.iter().position(|&b| b == 0)?;
                return Some(String::from_utf8_lossy(&value[..end]).into_owned());
            }
            // XML: <name flags="…">value</name>
            Some(b'>' | b' ') if at > 0 && bytes[at - 1] == b'<' => {
                let open_end = after + bytes[after..].iter().position(|&b| b == b'>')? + 1;
                let value = &bytes[open_end..];
                let end = value.iter().position(|&b| b == b'<')?;
                return Some(xml_unescape(&String::from_utf8_lossy(&value[..end])));
            }
            _ => from = after,
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

/// The job id a job file belongs to: TORQUE 6's `<jobid>`; in a binary
/// file, the first NUL-terminated string that starts with the file's name
/// (the job id field comes first, and the name may be a shortened prefix
/// of it); else the file's name.
pub fn job_id_in_job_file(bytes: &[u8], stem: &str) -> String {
    if let Some(id) = attribute_in_job_file(bytes, "jobid").filter(|id| !id.is_empty()) {
        if find(bytes, b"<jobid>").is_some() {
            return id;
        }
    }
    if !stem.is_empty() {
        if let Some(at) = find(bytes, stem.as_bytes()) {
            let rest = &bytes[at..];
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
/// any at all: the gpu file when pbs_mom wrote one (mother superior), else
/// `exec_gpus` of the job file. `Ok(None)`: TORQUE chose no GPUs for the
/// job (no `exec_gpus`), or none of its entries names this host.
pub fn assigned_gpus(home: &PbsHome, job_id: &str, hostname: &str) -> Result<Option<Assignment>, String> {
    let here = |all: Vec<ExecGpu>, source: PathBuf| -> Option<Assignment> {
        let devices: Vec<u32> = all.iter().filter(|g| is_this_host(&g.host, hostname)).map(|g| g.index).collect();
        (!devices.is_empty()).then_some(Assignment { devices, source })
    };
    let gpu_file = home.gpu_file(job_id);
    match fs::read(&gpu_file) {
        Ok(bytes) => {
            let all = parse_gpu_file(&String::from_utf8_lossy(&bytes)).map_err(|e| format!("{}: {e}", gpu_file.display()))?;
            if let Some(a) = here(all, gpu_file) {
                return Ok(Some(a));
            }
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
    Ok(here(all, path))
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

    #[test]
    fn job_files_of_both_formats() {
        let xml = b"<?xml version=\"1.0\"?>\n<job><version>1</version><state>4</state><jobid>17.ce.example.org</jobid>\
<attributes><Job_Name flags=\"1\">x</Job_Name><exec_gpus flags=\"1025\">wn01-gpu/2+wn01-gpu/3</exec_gpus></attributes></job>";
        assert_eq!(attribute_in_job_file(xml, "exec_gpus").as_deref(), Some("wn01-gpu/2+wn01-gpu/3"));
        assert_eq!(job_id_in_job_file(xml, "17.ce.example.org"), "17.ce.example.org");
        let mut bin = vec![7u8, 0, 0, 0];
        bin.extend_from_slice(b"17.ce.example.org\0\0\0\x40\0\0\0exec_host\0wn01/0\0");
        bin.extend_from_slice(b"\x20\0\0\0exec_gpus\0wn01-gpu/1\0\0\0");
        assert_eq!(attribute_in_job_file(&bin, "exec_gpus").as_deref(), Some("wn01-gpu/1"));
        assert_eq!(attribute_in_job_file(&bin, "exec_mics"), None);
        // A shortened file prefix still yields the full id.
        assert_eq!(job_id_in_job_file(&bin, "17.ce"), "17.ce.example.org");
        assert_eq!(job_id_in_job_file(b"", "18.ce"), "18.ce");
    }

    #[test]
    fn pbs_home_from_the_hook() {
        assert_eq!(PbsHome::of_hook(Path::new("/var/spool/torque/mom_priv/prologue"), None), Some(PbsHome("/var/spool/torque".into())));
        assert_eq!(PbsHome::of_hook(Path::new("prologue"), Some(Path::new("/srv/torque/mom_priv"))), Some(PbsHome("/srv/torque".into())));
        assert_eq!(PbsHome::of_hook(Path::new("/usr/libexec/cder/cder-torque-hook"), Some(Path::new("/"))), None);
    }
}
