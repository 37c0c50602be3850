//! GPUs offered as shares (`[node.sharing]`, SLURM's `gres/shard`): which
//! devices, how many shares each, and the check at start that SLURM's
//! gres.conf offers exactly those. SLURM 22.05 requires a `Name=gpu` record
//! on every file a `Name=shard` record names, and a contradiction between
//! the two files would let the scheduler count what cderd refuses (or the
//! reverse), so cderd does not start on one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cder_model::config::Sharing;
use cder_request::hostlist::Hostlist;

use crate::store::LedgerRow;

/// A gres.conf that contradicts `[node.sharing]`, naming the file and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {message}")]
pub struct SharingError {
    /// gres.conf (or cder.toml, for the settings themselves).
    pub file: String,
    /// The line at fault (0: the file as a whole).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// The devices offered as shares, (type, index) → shares each, from the
/// settings and the node's `gpgpu` devices (`devices`: cderd's ledger).
pub fn offered(sharing: &Sharing, devices: &[LedgerRow]) -> BTreeMap<(String, u32), u32> {
    if sharing.shares_per_gpu == 0 {
        return BTreeMap::new();
    }
    devices
        .iter()
        .filter(|d| d.cder_type == cder_request::GPGPU && d.present)
        .map(|d| ((d.cder_type.clone(), d.index), sharing.shares_per_gpu))
        .collect()
}

/// One `Name=gpu` or `Name=shard` record of this node.
#[derive(Debug)]
struct Record {
    line: usize,
    name: String,
    files: Vec<PathBuf>,
    count: Option<u32>,
}

const FILE_LIST: Hostlist = Hostlist::names(cder_request::MAX_COUNT as usize);

fn records(text: &str, file: &str, node: Option<&str>) -> Result<Vec<Record>, SharingError> {
    let mut out = Vec::new();
    let recs = cder_request::gres_conf::parse(text).map_err(|e| SharingError {
        file: file.to_string(),
        line: e.line,
        message: format!("{:?}: expected Key=Value", e.word),
    })?;
    for record in &recs {
        let first = record.line;
        let bad = |message: String| SharingError { file: file.to_string(), line: first, message };
        let get = |key: &str| record.get(key);
        if let (Some(expr), Some(me)) = (get("nodename"), node) {
            let names = FILE_LIST.expand(expr).map_err(|e| bad(format!("NodeName={expr}: {e}")))?;
            if !names.iter().any(|n| n == me) {
                continue;
            }
        }
        let Some(name) = ["gpu", "shard"].into_iter().find(|n| record.names(n)) else { continue };
        let name = name.to_string();
        let files = match get("file").or(get("files")) {
            Some(expr) => FILE_LIST
                .expand(expr)
                .map_err(|e| bad(format!("File={expr}: {e}")))?
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            None => Vec::new(),
        };
        // SLURM reads Count= with its suffixes (`Count=1K` is 1024 shards).
        let count = match get("count") {
            Some(c) => {
                let n = cder_request::gres::parse_count(c).map_err(|e| bad(format!("Count={c}: {}", e.why)))?;
                Some(u32::try_from(n).map_err(|_| bad(format!("Count={c}: more than {} shares", u32::MAX)))?)
            }
            None => None,
        };
        out.push(Record { line: first, name, files, count });
    }
    Ok(out)
}

/// Checks gres.conf `text` (at `file`, records of `node`) against the
/// devices offered as shares: every `Name=shard` record names one file, of a
/// device cderd manages and offers as shares, with `Count=` its shares, and
/// a `Name=gpu` record names the same file; every offered device has its
/// shard record. `devices`: cderd's ledger.
pub fn check_gres_conf(
    text: &str,
    file: &str,
    node: Option<&str>,
    offered: &BTreeMap<(String, u32), u32>,
    devices: &[LedgerRow],
    config_file: &str,
) -> Result<(), SharingError> {
    let recs = records(text, file, node)?;
    let gpu_files: BTreeSet<&PathBuf> = recs.iter().filter(|r| r.name == "gpu").flat_map(|r| &r.files).collect();
    let by_path = |p: &Path| devices.iter().filter(|d| d.cder_type == cder_request::GPGPU).find(|d| d.path == p);
    let mut shard_files: BTreeSet<PathBuf> = BTreeSet::new();
    for r in recs.iter().filter(|r| r.name == "shard") {
        let bad = |message: String| SharingError { file: file.to_string(), line: r.line, message };
        let [path] = r.files.as_slice() else {
            return Err(bad(format!(
                "a Name=shard record names {} file(s); give each shared GPU its own record with one File= and its Count=",
                r.files.len()
            )));
        };
        let Some(d) = by_path(path) else {
            return Err(bad(format!("Name=shard File={}: no GPU cderd manages has that file", path.display())));
        };
        let Some(&shares) = offered.get(&(d.cder_type.clone(), d.index)) else {
            return Err(bad(format!(
                "Name=shard File={}: {} is not offered as shares in {config_file} ([node.sharing] shares_per_gpu); SLURM would share a GPU cderd hands out whole",
                path.display(),
                d.name()
            )));
        };
        if r.count != Some(shares) {
            let count = r.count.map_or_else(|| "no Count=".to_string(), |c| format!("Count={c}"));
            return Err(bad(format!(
                "Name=shard File={}: {count}, but {config_file} offers {} as {shares} shares ([node.sharing] shares_per_gpu)",
                path.display(),
                d.name()
            )));
        }
        if !gpu_files.contains(path) {
            return Err(bad(format!(
                "Name=shard File={}: no Name=gpu record names that file; SLURM shares only GPUs it has as gpu",
                path.display()
            )));
        }
        if !shard_files.insert(path.clone()) {
            return Err(bad(format!("Name=shard File={}: a second shard record for one GPU", path.display())));
        }
    }
    // SLURM 22.05 spreads a node's shards evenly over all its GPUs, whatever
    // File= says: a GPU without its shard record would be shared all the same.
    if !shard_files.is_empty() {
        for r in recs.iter().filter(|r| r.name == "gpu") {
            if let Some(f) = r.files.iter().find(|f| !shard_files.contains(*f)) {
                return Err(SharingError {
                    file: file.to_string(),
                    line: r.line,
                    message: format!(
                        "Name=gpu File={}: no Name=shard record for it; SLURM spreads a node's shards over all its GPUs, so a node shares every GPU or none",
                        f.display()
                    ),
                });
            }
        }
    }
    for (ty, index) in offered.keys() {
        let Some(d) = devices.iter().find(|d| &d.cder_type == ty && d.index == *index) else { continue };
        if !shard_files.contains(&d.path) {
            return Err(SharingError {
                file: file.to_string(),
                line: 0,
                message: format!(
                    "{config_file} offers {} ({}) as shares, but no Name=shard record names that file",
                    d.name(),
                    d.path.display()
                ),
            });
        }
    }
    Ok(())
}

/// SLURM's gres.conf as `[node.sharing] slurm_gres_conf` names it: the
/// file's name, its text and the node whose records apply; `None` when the
/// key is not set. The sharing check and the count check both read it so.
pub struct GresConf {
    /// The path, as errors name it.
    pub file: String,
    /// Its whole text.
    pub text: String,
    /// The `NodeName` whose records apply (every record when `None`).
    pub node: Option<String>,
}

impl GresConf {
    /// Reads the file `sharing` names, if it names one.
    pub fn read(sharing: &Sharing) -> Result<Option<GresConf>, SharingError> {
        let Some(path) = &sharing.slurm_gres_conf else { return Ok(None) };
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SharingError {
            file: file.clone(),
            line: 0,
            message: format!("cannot read it: {e}"),
        })?;
        Ok(Some(GresConf { file, text, node: gres_node_name(sharing) }))
    }
}

/// Reads and checks `[node.sharing] slurm_gres_conf`, if set.
pub fn check(
    sharing: &Sharing,
    offered: &BTreeMap<(String, u32), u32>,
    devices: &[LedgerRow],
    config_file: &str,
) -> Result<(), SharingError> {
    let Some(gres) = GresConf::read(sharing)? else { return Ok(()) };
    check_gres_conf(&gres.text, &gres.file, gres.node.as_deref(), offered, devices, config_file)
}

/// This node's `NodeName` in gres.conf: `slurm_node_name`, else the short host name.
pub(crate) fn gres_node_name(sharing: &Sharing) -> Option<String> {
    match &sharing.slurm_node_name {
        Some(n) => Some(n.clone()),
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            host.trim().split('.').next().filter(|h| !h.is_empty()).map(str::to_string)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32) -> LedgerRow {
        LedgerRow::for_test("gpgpu", index, &format!("GPU-{index}"), format!("/dev/nvidia{index}"))
    }

    fn check_text(text: &str, shares_per_gpu: u32) -> Result<(), SharingError> {
        let devices = vec![gpu(0), gpu(1)];
        let sharing = Sharing { shares_per_gpu, ..Sharing::default() };
        let offered = offered(&sharing, &devices);
        check_gres_conf(text, "gres.conf", Some("wn1"), &offered, &devices, "cder.toml")
    }

    #[test]
    fn a_matching_gres_conf_passes() {
        let text = "NodeName=wn1 Name=gpu File=/dev/nvidia[0-1]\n\
                    NodeName=wn1 Name=shard Count=4 File=/dev/nvidia0\n\
                    NodeName=wn1 Name=shard Count=4 File=/dev/nvidia1\n\
                    NodeName=wn2 Name=shard Count=9 File=/dev/nvidia7\n";
        check_text(text, 4).unwrap();
        check_text("Name=gpu File=/dev/nvidia[0-1]\n", 0).unwrap();
    }

    #[test]
    fn contradictions_name_the_line() {
        let gpus = "NodeName=wn1 Name=gpu File=/dev/nvidia[0-1]\n";
        for (text, shares, line, needle) in [
            ("Name=shard Count=4 File=/dev/nvidia0\nName=shard Count=3 File=/dev/nvidia1\n", 4, 3, "Count=3, but"),
            ("Name=shard Count=4 File=/dev/nvidia[0-1]\n", 4, 2, "names 2 file(s)"),
            ("Name=shard Count=4 File=/dev/nvidia9\n", 4, 2, "no GPU cderd manages"),
            ("Name=shard Count=4 File=/dev/nvidia0\n", 0, 2, "not offered as shares in cder.toml"),
            ("Name=shard Count=4 File=/dev/nvidia0\n", 4, 1, "File=/dev/nvidia1: no Name=shard record for it"),
            ("", 4, 0, "gpgpu:0 (/dev/nvidia0) as shares, but no Name=shard"),
            ("Name=shard Count=x File=/dev/nvidia0\n", 4, 2, "Count=x"),
        ] {
            let e = check_text(&format!("{gpus}{text}"), shares).unwrap_err();
            assert_eq!(e.line, line, "{e}");
            assert!(e.to_string().contains(needle), "{e}");
            assert!(e.to_string().starts_with(&format!("gres.conf:{line}:")), "{e}");
        }
        let e = check_text("Name=gpu File=/dev/nvidia1\nName=shard Count=4 File=/dev/nvidia0\n", 4).unwrap_err();
        assert!(e.message.contains("no Name=gpu record names that file"), "{e}");
    }

    /// gres.conf as slurmd reads it: keys and names in any case, counts
    /// with SLURM's suffixes, and a word that is no `Key=Value` refused.
    #[test]
    fn records_read_as_slurmd_reads_them() {
        let text = "NAME=GPU FILE=/dev/nvidia[0-1]\nname=Shard count=4 file=/dev/nvidia0\nName=shard Count=4 File=/dev/nvidia1\n";
        check_text(text, 4).unwrap();
        let recs = records("Name=shard Count=1K File=/dev/nvidia0\n", "g", None).unwrap();
        assert_eq!((recs[0].name.as_str(), recs[0].count), ("shard", Some(1024)));
        let e = check_text("Name=gpu File=/dev/nvidia[0-1]\nName=shard oops\n", 4).unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "\"oops\": expected Key=Value"));
    }

    #[test]
    fn nothing_shared_offers_nothing() {
        assert!(offered(&Sharing::default(), &[gpu(0)]).is_empty());
        let text = "Name=gpu File=/dev/nvidia0\nName=shard Count=4 File=/dev/nvidia0\n";
        let devices = vec![gpu(0)];
        let e = check_gres_conf(text, "g", None, &BTreeMap::new(), &devices, "cder.toml").unwrap_err();
        assert!(e.message.contains("not offered as shares"), "{e}");
    }
}
