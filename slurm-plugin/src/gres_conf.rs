//! slurmd's GPU list as it builds it from `gres.conf`, and the translation
//! of SLURM's GPU indices into cderd's devices **by device file**.
//!
//! `SLURM_JOB_GPUS` and `SLURM_STEP_GPUS` hold positions in slurmd's device
//! list: gres.conf's records for this node and GRES in file order, each
//! `File=` expression expanded (one position per file; a `MultipleFiles=`
//! record is one position). That order need not be cderd's: a MIG GPU with
//! a 1g, a 2g and a 1g instance is listed by profile in gres.conf (one
//! `Type=` per record), while cderd numbers instances in MIG index order.
//! The device file is what both sides name the same way: gres.conf's
//! `File=` and cderd's `path` (`device_path`, `mig_device_path`).

use std::path::{Path, PathBuf};

use cder_request::gres::{Detail, GresItem};
use cder_request::hostlist::Hostlist;

/// One device of slurmd's list for a GRES.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GresDevice {
    /// Its position in slurmd's list: what `SLURM_JOB_GPUS` names.
    pub index: u32,
    /// The record's `Type=` (a model or a MIG profile), if any.
    pub gres_type: Option<String>,
    /// Its device file(s): one for `File=`, several for `MultipleFiles=`.
    pub files: Vec<PathBuf>,
    /// The gres.conf line it was declared on (1-based), for messages.
    pub line: usize,
}

/// A gres.conf slurmd would read, but whose device order cder cannot
/// reproduce, or a line it cannot parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {key}={value}: {why}")]
pub struct GresConfError {
    /// The gres.conf path.
    pub file: String,
    /// The line (1-based; a continued line counts from its first).
    pub line: usize,
    /// The key at fault.
    pub key: String,
    /// Its value.
    pub value: String,
    /// What is wrong.
    pub why: String,
    /// The record is `AutoDetect=`: slurmd lists devices as the driver
    /// reports them (PCI bus order for whole GPUs), not as the file does.
    pub autodetect: bool,
}

/// How gres.conf's `File=` and `NodeName=` lists expand (`/dev/nvidia[0-3]`,
/// `node[01-04,7],gpu9`): file names allowed, and no more names than one
/// node may have devices.
const GRES_CONF_LIST: Hostlist = Hostlist::names(cder_request::MAX_COUNT as usize);

/// Expands one gres.conf list; `None` when it is malformed or too long.
fn expand_list(expr: &str) -> Option<Vec<String>> {
    GRES_CONF_LIST.expand(expr).ok()
}

/// The devices slurmd lists for GRES `gres` (`gpu`) on node `node`, from
/// gres.conf text (`file` names it in messages). Records of other nodes or
/// GRES are skipped; with `node` unknown every record counts. Records
/// without files (counts only) give no device. `AutoDetect` (other than
/// `off`) is refused: slurmd then orders the devices as the driver reports
/// them, which the file cannot tell.
pub fn gres_devices(text: &str, file: &str, node: Option<&str>, gres: &str) -> Result<Vec<GresDevice>, GresConfError> {
    let mut out = Vec::new();
    let mut index = 0u32;
    let records = cder_request::gres_conf::parse(text).map_err(|e| GresConfError {
        file: file.to_string(),
        line: e.line,
        key: e.word.clone(),
        value: String::new(),
        why: "expected Key=Value".to_string(),
        autodetect: false,
    })?;
    for record in &records {
        let first_line = record.line;
        let bad = |key: &str, value: &str, why: &str| GresConfError {
            file: file.to_string(),
            line: first_line,
            key: key.to_string(),
            value: value.to_string(),
            why: why.to_string(),
            autodetect: false,
        };
        let get = |key: &str| record.get(key);
        if let (Some(expr), Some(me)) = (get("nodename"), node) {
            let names = expand_list(expr).ok_or_else(|| bad("NodeName", expr, "not a host list"))?;
            if !names.iter().any(|n| n == me) {
                continue;
            }
        }
        if let Some(mode) = get("autodetect") {
            if !mode.eq_ignore_ascii_case("off") {
                return Err(GresConfError {
                    autodetect: true,
                    ..bad(
                        "AutoDetect",
                        mode,
                        "slurmd then orders the GPUs as the driver reports them, which cder cannot read from gres.conf; list each device with File= (AutoDetect=off)",
                    )
                });
            }
        }
        // slurmd matches gres.conf names case-insensitively (`Name=GPU` is gpu).
        if !record.names(gres) {
            continue;
        }
        let gres_type = get("type").map(str::to_string);
        if let Some(expr) = get("multiplefiles") {
            let files = expand_list(expr).ok_or_else(|| bad("MultipleFiles", expr, "not a list of files"))?;
            out.push(GresDevice {
                index,
                gres_type,
                files: files.into_iter().map(PathBuf::from).collect(),
                line: first_line,
            });
            index += 1;
        } else if let Some((key, expr)) = record.get_any(&["file", "files"]) {
            let key = if key.eq_ignore_ascii_case("file") { "File" } else { "Files" };
            let files = expand_list(expr).ok_or_else(|| bad(key, expr, "not a file name list"))?;
            for f in files {
                out.push(GresDevice {
                    index,
                    gres_type: gres_type.clone(),
                    files: vec![PathBuf::from(f)],
                    line: first_line,
                });
                index += 1;
            }
        }
    }
    Ok(out)
}

/// Reads `gres.conf` beside `slurm.conf` (where slurmd reads it). A
/// missing file is an empty list: SLURM then has no device files either.
pub fn load_gres_devices(
    slurm_conf: Option<&Path>,
    node: Option<&str>,
    gres: &str,
) -> Result<Vec<GresDevice>, GresConfError> {
    let dir = slurm_conf.and_then(Path::parent).unwrap_or(Path::new("/etc/slurm"));
    let path = dir.join("gres.conf");
    let shown = path.display().to_string();
    match std::fs::read_to_string(&path) {
        Ok(text) => gres_devices(&text, &shown, node, gres),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(GresConfError {
            file: shown,
            line: 0,
            key: "File".into(),
            value: String::new(),
            why: e.to_string(),
            autodetect: false,
        }),
    }
}

/// True when the list holds devices of more than one `Type=` (e.g. two MIG
/// profiles). SLURM 22.05 then sets the job prolog's `SLURM_JOB_GPUS` from
/// the job's last GRES record alone (one per type), so a job of
/// `gpu:1g.10gb:1,gpu:2g.20gb:1` shows only its 2g.20gb GPU there.
pub fn several_types(devices: &[GresDevice]) -> bool {
    let mut types = devices.iter().map(|d| d.gres_type.as_deref());
    let first = types.next();
    types.any(|t| Some(t) != first)
}

/// The indices of GRES `gres` in one node's entry of the controller's
/// `gres_detail_str` (`gpu:1g.10gb:1(IDX:0),gpu:2g.20gb:2(IDX:1-2,3)`),
/// every type together, sorted. `None` when an index list is malformed.
pub fn detail_indices(detail: &str, gres: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for item in detail_items(detail)?.into_iter().filter(|i| i.name == gres) {
        if let Some(Detail::Indices(idx)) = item.detail {
            out.extend(idx);
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// The count of GRES `gres` in one node's entry of the controller's
/// `gres_detail_str` (`shard:3(IDX:0)` → 3), every type together; 0 when
/// the entry has none. `None` when a count is malformed.
pub fn detail_count(detail: &str, gres: &str) -> Option<u64> {
    detail_items(detail)?.iter().filter(|i| i.name == gres).try_fold(0u64, |sum, i| sum.checked_add(i.count))
}

/// One node's `gres_detail_str` entry as `cder_request::gres` reads it;
/// `None` when SLURM's grammar refuses it.
fn detail_items(detail: &str) -> Option<Vec<GresItem>> {
    cder_request::gres::parse_list(detail.trim()).ok()
}

/// The position of `node` in a job's node list (`node[1-4],gpu9`), which
/// is its entry in `gres_detail_str`.
pub fn node_position(nodes: &str, node: &str) -> Option<usize> {
    expand_list(nodes)?.iter().position(|n| n == node)
}

/// Why SLURM's GPU indices could not be turned into cderd's devices.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// SLURM named a position gres.conf does not have.
    #[error("SLURM names GPU {index}, but gres.conf lists {count} for this node (slurmd and this gres.conf differ; restart slurmd after editing it)")]
    NotInGresConf {
        /// The index SLURM gave.
        index: u32,
        /// How many devices gres.conf lists.
        count: usize,
    },
    /// The device file of that position is not one cderd manages.
    #[error("SLURM's GPU {index} is {files} (gres.conf line {line}), which no {cder_type} device of cderd has as its device file")]
    NotManaged {
        /// The index SLURM gave.
        index: u32,
        /// Its file(s), comma-separated.
        files: String,
        /// The gres.conf line.
        line: usize,
        /// The CDER type looked in.
        cder_type: String,
    },
}

/// The device file(s) of each GPU SLURM gave (`slurm`: positions in
/// `gres`, slurmd's list), in that order: what an `alloc` names SLURM's
/// choice by (`device_files`), so that cderd maps the files itself.
pub fn slurm_device_files(slurm: &[u32], gres: &[GresDevice]) -> Result<Vec<Vec<String>>, MapError> {
    slurm
        .iter()
        .map(|&i| {
            let dev =
                gres.iter().find(|d| d.index == i).ok_or(MapError::NotInGresConf { index: i, count: gres.len() })?;
            Ok(dev.files.iter().map(|f| f.display().to_string()).collect())
        })
        .collect()
}

/// cderd's indices of the devices SLURM gave, matched by device file:
/// `slurm` are positions in `gres` (slurmd's list), `cderd` is every
/// device of the type as cderd reports it (`index`, `path`). Sorted, without
/// duplicates.
pub fn cderd_indices(
    slurm: &[u32],
    gres: &[GresDevice],
    cderd: &[(u32, PathBuf)],
    cder_type: &str,
) -> Result<Vec<u32>, MapError> {
    let mut out = Vec::with_capacity(slurm.len());
    for &i in slurm {
        let dev = gres.iter().find(|d| d.index == i).ok_or(MapError::NotInGresConf { index: i, count: gres.len() })?;
        let found = cderd.iter().find(|(_, path)| dev.files.iter().any(|f| f == path)).map(|(index, _)| *index);
        let index = found.ok_or_else(|| MapError::NotManaged {
            index: i,
            files: dev.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(","),
            line: dev.line,
            cder_type: cder_type.to_string(),
        })?;
        out.push(index);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_counts_in_the_controllers_detail() {
        assert_eq!(detail_count("shard:3(IDX:0)", "shard"), Some(3));
        assert_eq!(detail_count("gpu:1(IDX:1),shard:2(IDX:0)", "shard"), Some(2));
        assert_eq!(detail_count("gpu:1(IDX:1)", "shard"), Some(0));
        // After a type, only a count may follow (SLURM's grammar; `shard:x` alone is type x).
        assert_eq!(detail_count("shard:tesla:x(IDX:0)", "shard"), None);
        assert_eq!(detail_count("shard:4K(IDX:0)", "shard"), Some(4096));
        assert_eq!(detail_indices("shard:3(IDX:2)", "shard"), Some(vec![2]));
    }

    #[test]
    fn host_lists() {
        assert_eq!(expand_list("/dev/nvidia[0-2]").unwrap(), ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]);
        assert_eq!(expand_list("n[01-02,7],gpu9").unwrap(), ["n01", "n02", "n7", "gpu9"]);
        assert_eq!(expand_list("/d/cap[21,39]").unwrap(), ["/d/cap21", "/d/cap39"]);
        assert_eq!(expand_list("r[1-2]n[1-2]").unwrap(), ["r1n1", "r1n2", "r2n1", "r2n2"]);
        assert_eq!(expand_list("plain").unwrap(), ["plain"]);
        for bad in ["n[1-", "n]1", "n[3-1]", "n[a-b]", "", "a,,b", "n[0-99999]"] {
            assert_eq!(expand_list(bad), None, "{bad}");
        }
    }

    /// The admin's gres.conf for a MIG GPU with a 1g, a 2g and a 1g
    /// instance: by profile, so slurmd's order is not the GPU's.
    const MIXED: &str = "# MIG on wn01\n\
        AutoDetect=off\n\
        NodeName=wn01 Name=gpu Type=1g.10gb File=/dev/nvidia-caps/nvidia-cap[21,39]\n\
        NodeName=wn01 Name=gpu Type=2g.20gb \\\n   File=/dev/nvidia-caps/nvidia-cap30\n\
        NodeName=wn02 Name=gpu File=/dev/nvidia[0-3]\n\
        NodeName=wn01 Name=fpga File=/dev/xcl0\n\
        Name=gpu Type=1g.10gb MultipleFiles=/dev/nvidia1,/dev/nvidia-caps/nvidia-cap48\n";

    #[test]
    fn slurmd_order_from_gres_conf() {
        let d = gres_devices(MIXED, "gres.conf", Some("wn01"), "gpu").unwrap();
        let files: Vec<Vec<String>> =
            d.iter().map(|d| d.files.iter().map(|f| f.display().to_string()).collect()).collect();
        assert_eq!(
            files,
            [
                vec!["/dev/nvidia-caps/nvidia-cap21".to_string()],
                vec!["/dev/nvidia-caps/nvidia-cap39".to_string()],
                vec!["/dev/nvidia-caps/nvidia-cap30".to_string()],
                vec!["/dev/nvidia1".to_string(), "/dev/nvidia-caps/nvidia-cap48".to_string()],
            ]
        );
        assert_eq!(d.iter().map(|d| d.index).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(d[2].gres_type.as_deref(), Some("2g.20gb"));
        assert_eq!(d[2].line, 4, "a continued record is reported at its first line");
        assert_eq!(gres_devices(MIXED, "gres.conf", Some("wn02"), "gpu").unwrap().len(), 5);
        assert_eq!(gres_devices(MIXED, "gres.conf", Some("wn01"), "fpga").unwrap().len(), 1);
    }

    #[test]
    fn what_cannot_be_ordered_is_refused_with_file_and_line() {
        let e = gres_devices("Name=gpu File=/dev/nvidia0\nAutoDetect=nvml\n", "/etc/slurm/gres.conf", None, "gpu")
            .unwrap_err();
        assert!(e.to_string().starts_with("/etc/slurm/gres.conf:2: AutoDetect=nvml: "), "{e}");
        assert!(e.autodetect);
        let e = gres_devices("Name=gpu File=/dev/nvidia[0-\n", "g.conf", None, "gpu").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (1, "File"));
        let e = gres_devices("Name=gpu bogus\n", "g.conf", None, "gpu").unwrap_err();
        assert!(e.to_string().contains("expected Key=Value"), "{e}");
        // Another node's AutoDetect is its own business.
        assert!(gres_devices("NodeName=x AutoDetect=nvml\nName=gpu File=/d0\n", "g", Some("y"), "gpu").is_ok());
    }

    /// slurmd reads gres.conf's keys and `Name=` values case-insensitively:
    /// `NAME=GPU` is a gpu record, as cderd's shard check reads it too.
    #[test]
    fn names_and_keys_are_case_insensitive_as_in_slurmd() {
        let d =
            gres_devices("NAME=GPU FILE=/dev/g[0-1]\nname=gpu type=a100 files=/dev/g2\n", "g", None, "gpu").unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d[2].gres_type.as_deref(), Some("a100"));
        assert_eq!(d[2].files, [PathBuf::from("/dev/g2")]);
        let e = gres_devices("Name=gpu Files=/dev/g[0-\n", "g", None, "gpu").unwrap_err();
        assert_eq!((e.key.as_str(), e.value.as_str()), ("Files", "/dev/g[0-"));
    }

    #[test]
    fn indices_map_by_device_file() {
        let gres = gres_devices(MIXED, "gres.conf", Some("wn01"), "gpu").unwrap();
        // cderd numbers the instances in MIG index order: 1g (cap21), 2g (cap30), 1g (cap39), then GPU 1's.
        let cderd: Vec<(u32, PathBuf)> = [
            "/dev/nvidia-caps/nvidia-cap21",
            "/dev/nvidia-caps/nvidia-cap30",
            "/dev/nvidia-caps/nvidia-cap39",
            "/dev/nvidia-caps/nvidia-cap48",
        ]
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u32, PathBuf::from(p)))
        .collect();
        // SLURM's 2g instance is its position 2, cderd's index 1.
        assert_eq!(cderd_indices(&[2], &gres, &cderd, "gpgpu").unwrap(), [1]);
        assert_eq!(slurm_device_files(&[2], &gres).unwrap(), [vec!["/dev/nvidia-caps/nvidia-cap30".to_string()]]);
        assert_eq!(cderd_indices(&[0, 1], &gres, &cderd, "gpgpu").unwrap(), [0, 2]);
        assert_eq!(cderd_indices(&[3], &gres, &cderd, "gpgpu").unwrap(), [3]);
        assert_eq!(cderd_indices(&[], &gres, &cderd, "gpgpu").unwrap(), Vec::<u32>::new());
        let e = cderd_indices(&[4], &gres, &cderd, "gpgpu").unwrap_err();
        assert_eq!(e, MapError::NotInGresConf { index: 4, count: 4 });
        assert_eq!(slurm_device_files(&[4], &gres).unwrap_err(), MapError::NotInGresConf { index: 4, count: 4 });
        let e = cderd_indices(&[1], &gres, &cderd[..2], "gpgpu").unwrap_err();
        assert!(e.to_string().contains("/dev/nvidia-caps/nvidia-cap39 (gres.conf line 3)"), "{e}");
    }

    /// AMD and Intel GPUs are DRM render nodes, as SLURM's docs write
    /// gres.conf for them (`Flags=amd_gpu_env` / `intel_gpu_env`): the files
    /// are not named nvidiaN, and ROCm SMI's or Level Zero's order (cderd's
    /// indices) need not be the minors' order.
    #[test]
    fn render_nodes_map_by_device_file() {
        let text = "# MI250X: two GCDs per card
            NodeName=gn[01-16] Name=gpu Type=mi250 File=/dev/dri/renderD[128-131] Flags=amd_gpu_env
            NodeName=pvc[01-02] Name=gpu Type=max1550 File=/dev/dri/renderD[128-129] Flags=intel_gpu_env
";
        let amd = gres_devices(text, "gres.conf", Some("gn07"), "gpu").unwrap();
        assert_eq!(amd.len(), 4);
        assert!(amd.iter().all(|d| d.gres_type.as_deref() == Some("mi250") && d.line == 2), "{amd:?}");
        assert_eq!(amd[3].files, [PathBuf::from("/dev/dri/renderD131")]);
        // ROCm SMI enumerates renderD130 first on this node.
        let cderd: Vec<(u32, PathBuf)> = [130, 131, 128, 129]
            .iter()
            .enumerate()
            .map(|(i, minor)| (i as u32, PathBuf::from(format!("/dev/dri/renderD{minor}"))))
            .collect();
        assert_eq!(cderd_indices(&[0, 1], &amd, &cderd, "gpgpu").unwrap(), [2, 3]);
        assert_eq!(cderd_indices(&[2], &amd, &cderd, "gpgpu").unwrap(), [0]);
        assert_eq!(
            slurm_device_files(&[1, 3], &amd).unwrap(),
            [vec!["/dev/dri/renderD129".to_string()], vec!["/dev/dri/renderD131".to_string()]]
        );
        let intel = gres_devices(text, "gres.conf", Some("pvc02"), "gpu").unwrap();
        assert_eq!(intel.iter().map(|d| d.gres_type.as_deref()).collect::<Vec<_>>(), [Some("max1550"); 2]);
        assert_eq!(cderd_indices(&[1], &intel, &cderd[2..], "gpgpu").unwrap(), [3]);
        // A card node named where cderd guards the render node is no match, and says which file.
        let card = gres_devices(
            "Name=gpu Type=max1550 File=/dev/dri/card[0-1]
",
            "gres.conf",
            None,
            "gpu",
        )
        .unwrap();
        let e = cderd_indices(&[1], &card, &cderd, "gpgpu").unwrap_err().to_string();
        assert!(e.contains("/dev/dri/card1 (gres.conf line 1)") && e.contains("gpgpu"), "{e}");
    }

    /// The `GRES=` of a job of two MIG profiles as a real slurmctld 22.05
    /// printed it (`allocator/request/testdata`): every type's indices.
    #[test]
    fn controller_detail_as_slurm_printed_it() {
        let text = include_str!("../../allocator/request/testdata/slurm-22.05/show_job_d_mig_two_types.txt");
        let detail = text.split_whitespace().find_map(|w| w.strip_prefix("GRES=")).unwrap();
        assert_eq!(detail_indices(detail, "gpu").unwrap(), [2, 3]);
        assert_eq!(detail_count(detail, "gpu"), Some(2));
        assert_eq!(detail_count(detail, "shard"), Some(0));
    }

    #[test]
    fn controller_detail() {
        assert_eq!(detail_indices("gpu:1g.10gb:1(IDX:0),gpu:2g.20gb:1(IDX:3)", "gpu").unwrap(), [0, 3]);
        assert_eq!(detail_indices("gpu:1g.10gb:3(IDX:0-1,4),fpga:1(IDX:0)", "gpu").unwrap(), [0, 1, 4]);
        assert_eq!(detail_indices("gpu(IDX:2)", "gpu").unwrap(), [2]);
        assert_eq!(detail_indices("fpga:1(IDX:0)", "gpu").unwrap(), Vec::<u32>::new());
        assert_eq!(detail_indices("", "gpu").unwrap(), Vec::<u32>::new());
        assert_eq!(detail_indices("gpu:1(IDX:x)", "gpu"), None);
        assert_eq!(node_position("n[1-3],gpu9", "gpu9"), Some(3));
        assert_eq!(node_position("n[1-3]", "n4"), None);
        let mixed = gres_devices(MIXED, "gres.conf", Some("wn01"), "gpu").unwrap();
        assert!(several_types(&mixed));
        assert!(!several_types(&gres_devices(MIXED, "gres.conf", Some("wn02"), "gpu").unwrap()[..4]));
        assert!(!several_types(&[]));
    }

    #[test]
    fn missing_gres_conf_is_no_devices() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("slurm.conf");
        assert!(load_gres_devices(Some(&conf), None, "gpu").unwrap().is_empty());
        std::fs::write(dir.path().join("gres.conf"), "Name=gpu File=/dev/g[0-1]\n").unwrap();
        assert_eq!(load_gres_devices(Some(&conf), None, "gpu").unwrap().len(), 2);
    }
}
