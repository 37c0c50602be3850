//! Which devices a job has on a node, as SLURM granted them, and the
//! visibility variables that name them in the numbering the job's processes
//! will see.
//!
//! SLURM is the authority: the job prolog reads `SLURM_JOB_GPUS`, which
//! slurmd builds from the job's credential (the GRES the controller
//! allocated, as gres.conf indices), and records exactly those devices with
//! cderd. Steps only read that record; what a step asks for is a request
//! that may select among the job's devices, never add to them.

use std::collections::BTreeMap;
use std::path::Path;

use cder_model::JobEnvironment;
use cder_protocol::{AllocatedDevice, Allocation};

use crate::request::GPGPU;

/// The variable slurmd sets in the job prolog's environment (and slurmstepd
/// in the batch step's) from the credential: the job's GPU indices.
pub const SLURM_JOB_GPUS: &str = "SLURM_JOB_GPUS";
/// The variable slurmstepd sets for an srun step: the step's GPU indices.
pub const SLURM_STEP_GPUS: &str = "SLURM_STEP_GPUS";

/// Parses a GRES index list (`0,2,3`). `None` when any item is not an
/// index: a malformed list must not be taken for "no devices".
pub fn parse_index_list(text: &str) -> Option<Vec<u32>> {
    let text = text.trim();
    if text.is_empty() {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        if let Some((a, b)) = item.split_once('-') {
            let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            if b < a || b - a > 4096 {
                return None;
            }
            out.extend(a..=b);
        } else {
            out.push(item.parse().ok()?);
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// A SLURM boolean as its config parser reads it (`s_p_handle_boolean`,
/// case-insensitive): `None` for anything else, which SLURM refuses.
pub fn slurm_boolean(value: &str) -> Option<bool> {
    let value = value.trim();
    let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
    let is = |words: &[&str]| words.iter().any(|w| value.eq_ignore_ascii_case(w));
    if is(&["yes", "up", "true", "1"]) {
        Some(true)
    } else if is(&["no", "down", "false", "0"]) {
        Some(false)
    } else {
        None
    }
}

/// `ConstrainDevices` in `cgroup.conf` (SLURM's own default is no; the
/// last line wins, as in SLURM). An error names the line whose value SLURM
/// would refuse: slurmd does not start with such a file.
pub fn constrain_devices(cgroup_conf: &str) -> Result<bool, String> {
    let mut on = Ok(false);
    for (n, line) in cgroup_conf.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some((k, v)) = line.split_once('=') {
            if k.trim().eq_ignore_ascii_case("ConstrainDevices") {
                on = slurm_boolean(v).ok_or_else(|| {
                    format!("line {}: ConstrainDevices={:?} is not a SLURM boolean (yes, up, true, 1, no, down, false, 0)", n + 1, v.trim())
                });
            }
        }
    }
    on
}

/// True when `TaskPlugin` (comma-separated, each name with or without its
/// `task/` prefix, as slurmd loads them) includes task/cgroup.
pub fn task_cgroup(task_plugin: Option<&str>) -> bool {
    task_plugin.is_some_and(|t| t.split(',').map(str::trim).any(|p| p.strip_prefix("task/").unwrap_or(p) == "cgroup"))
}

/// True when SLURM itself puts every task into a device cgroup holding its
/// GRES: `task/cgroup` among the task plugins and `ConstrainDevices` true
/// in the cgroup.conf next to slurm.conf. `Err` for a value SLURM would
/// refuse, which the caller logs.
pub fn slurm_constrains_devices_checked(task_plugin: Option<&str>, slurm_conf: Option<&Path>) -> Result<bool, String> {
    if !task_cgroup(task_plugin) {
        return Ok(false);
    }
    let path = slurm_conf.and_then(Path::parent).map(|d| d.join("cgroup.conf")).unwrap_or_else(|| "/etc/slurm/cgroup.conf".into());
    match std::fs::read_to_string(&path) {
        Ok(text) => constrain_devices(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(_) => Ok(false),
    }
}

/// [`slurm_constrains_devices_checked`], a value SLURM would refuse counted
/// as not constrained: cder then keeps its own fence.
pub fn slurm_constrains_devices(task_plugin: Option<&str>, slurm_conf: Option<&Path>) -> bool {
    slurm_constrains_devices_checked(task_plugin, slurm_conf).unwrap_or(false)
}

/// How the job's processes are kept to their devices, which decides how
/// CUDA and its twins number them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// No device cgroup: every device is openable, numbered absolutely.
    None,
    /// SLURM's device cgroup holds the step's own devices.
    SlurmCgroup,
    /// cderd's device cgroup (`confine`) holds the job's devices.
    CderCgroup,
}

/// The devices a step uses: the job's devices, narrowed to the step's GPU
/// list when SLURM gave one. The step list comes from the step's
/// environment, so it can only select among the job's devices.
pub fn step_devices(job: &[AllocatedDevice], step_gpus: Option<&[u32]>) -> Vec<AllocatedDevice> {
    job.iter()
        .filter(|d| match step_gpus {
            Some(gpus) if d.cder_type == GPGPU => gpus.contains(&d.index),
            _ => true,
        })
        .cloned()
        .collect()
}

/// The step's environment: cderd's variables for the job (absolute indices
/// or UUIDs), rewritten so that they name exactly `step`'s devices in the
/// numbering the processes see under `enforcement`: absolute indices with
/// no cgroup; positions among the devices the cgroup lets them open
/// (numbered from 0, in node order) inside one, as SLURM writes them.
pub fn step_env(alloc: &Allocation, step: &[AllocatedDevice], enforcement: Enforcement) -> JobEnvironment {
    let mut env = alloc.env.0.clone();
    let mut by_type: BTreeMap<&str, Vec<&AllocatedDevice>> = BTreeMap::new();
    for d in &alloc.devices {
        by_type.entry(d.cder_type.as_str()).or_default().push(d);
    }
    for (ty, mut held) in by_type {
        held.sort_by_key(|d| d.index);
        let absolute = held.iter().map(|d| d.index.to_string()).collect::<Vec<_>>().join(",");
        let uuids = held.iter().map(|d| d.uuid.as_str()).collect::<Vec<_>>().join(",");
        let mut visible: Vec<&AllocatedDevice> = step.iter().filter(|d| d.cder_type == ty).collect();
        visible.sort_by_key(|d| d.index);
        // What the processes can open, in node order: CUDA numbers those.
        let openable: Vec<u32> = match enforcement {
            Enforcement::None => Vec::new(),
            Enforcement::SlurmCgroup => visible.iter().map(|d| d.index).collect(),
            Enforcement::CderCgroup => held.iter().map(|d| d.index).collect(),
        };
        let ids = visible
            .iter()
            .map(|d| match enforcement {
                Enforcement::None => d.index.to_string(),
                _ => openable.iter().position(|&i| i == d.index).unwrap_or(0).to_string(),
            })
            .collect::<Vec<_>>()
            .join(",");
        let visible_uuids = visible.iter().map(|d| d.uuid.as_str()).collect::<Vec<_>>().join(",");
        for value in env.values_mut() {
            if *value == absolute {
                *value = ids.clone();
            } else if *value == uuids {
                *value = visible_uuids.clone();
            }
        }
    }
    JobEnvironment(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cder_model::{JobKey, Lrms};

    fn dev(index: u32) -> AllocatedDevice {
        AllocatedDevice { cder_type: GPGPU.into(), index, uuid: format!("GPU-{index}"), path: None }
    }

    fn alloc(indices: &[u32]) -> Allocation {
        let list = indices.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let mut env = BTreeMap::new();
        env.insert("CUDA_VISIBLE_DEVICES".to_string(), list);
        env.insert("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string());
        Allocation {
            job: JobKey::new(Lrms::Slurm, "7").unwrap(),
            uid: 1000,
            devices: indices.iter().map(|&i| dev(i)).collect(),
            env: JobEnvironment(env),
            cgroups: None,
        }
    }

    #[test]
    fn index_lists() {
        assert_eq!(parse_index_list("2,0,3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_index_list("1-3"), Some(vec![1, 2, 3]));
        assert_eq!(parse_index_list(""), Some(vec![]));
        assert_eq!(parse_index_list("0,x"), None);
        assert_eq!(parse_index_list("3-1"), None);
    }

    #[test]
    fn cgroup_conf_switch() {
        assert_eq!(constrain_devices("CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n"), Ok(true));
        assert_eq!(constrain_devices("constraindevices = YES # on"), Ok(true));
        assert_eq!(constrain_devices("#ConstrainDevices=yes\nConstrainCores=yes\n"), Ok(false));
        assert_eq!(constrain_devices("ConstrainDevices=no"), Ok(false));
        assert!(!slurm_constrains_devices(Some("task/none"), None));
        assert!(!slurm_constrains_devices(None, None));
    }

    #[test]
    fn constrain_devices_takes_every_spelling_slurm_takes() {
        for on in ["yes", "Up", "TRUE", "1", "\"yes\"", " true "] {
            assert_eq!(constrain_devices(&format!("ConstrainDevices={on}\n")), Ok(true), "{on:?}");
        }
        for off in ["no", "DOWN", "False", "0"] {
            assert_eq!(constrain_devices(&format!("ConstrainDevices=yes\nConstrainDevices={off}\n")), Ok(false), "{off:?}");
        }
        for bad in ["y", "on", "2", "enabled"] {
            let e = constrain_devices(&format!("CgroupPlugin=cgroup/v1\nConstrainDevices={bad}\n")).unwrap_err();
            assert!(e.starts_with("line 2:") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn task_plugin_names_as_slurmd_loads_them() {
        assert!(task_cgroup(Some("task/cgroup")));
        assert!(task_cgroup(Some("cgroup")));
        assert!(task_cgroup(Some("task/affinity,cgroup")));
        assert!(task_cgroup(Some("affinity, task/cgroup")));
        assert!(!task_cgroup(Some("task/affinity")));
        assert!(!task_cgroup(Some("task/cgroupx")));
        assert!(!task_cgroup(None));
    }

    #[test]
    fn constrain_devices_1_beside_slurm_conf_is_slurms_fence() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("slurm.conf");
        std::fs::write(&conf, "").unwrap();
        std::fs::write(dir.path().join("cgroup.conf"), "ConstrainDevices=1\n").unwrap();
        assert!(slurm_constrains_devices(Some("task/affinity,task/cgroup"), Some(&conf)));
        assert!(!slurm_constrains_devices(Some("task/none"), Some(&conf)));
        std::fs::write(dir.path().join("cgroup.conf"), "ConstrainDevices=on\n").unwrap();
        let e = slurm_constrains_devices_checked(Some("task/cgroup"), Some(&conf)).unwrap_err();
        assert!(e.contains("cgroup.conf") && e.contains("line 1") && e.contains("\"on\""), "{e}");
    }

    #[test]
    fn numbering_follows_the_enforcement() {
        let a = alloc(&[1, 3]);
        let all = step_devices(&a.devices, None);
        assert_eq!(step_env(&a, &all, Enforcement::None).get("CUDA_VISIBLE_DEVICES"), Some("1,3"));
        assert_eq!(step_env(&a, &all, Enforcement::CderCgroup).get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(step_env(&a, &all, Enforcement::SlurmCgroup).get("CUDA_VISIBLE_DEVICES"), Some("0,1"));
        assert_eq!(step_env(&a, &all, Enforcement::CderCgroup).get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        // A step of GPU 3 only: SLURM's step cgroup opens just that one;
        // cder's job cgroup opens both, where 3 is the second.
        let one = step_devices(&a.devices, Some(&[3, 0]));
        assert_eq!(one, vec![dev(3)]);
        assert_eq!(step_env(&a, &one, Enforcement::SlurmCgroup).get("CUDA_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(step_env(&a, &one, Enforcement::CderCgroup).get("CUDA_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(step_env(&a, &one, Enforcement::None).get("CUDA_VISIBLE_DEVICES"), Some("3"));
    }

    #[test]
    fn uuids_are_filtered_not_renumbered() {
        let mut a = alloc(&[0, 2]);
        a.env.0.insert("CUDA_VISIBLE_DEVICES".into(), "GPU-0,GPU-2".into());
        let one = step_devices(&a.devices, Some(&[2]));
        assert_eq!(step_env(&a, &one, Enforcement::SlurmCgroup).get("CUDA_VISIBLE_DEVICES"), Some("GPU-2"));
    }

    #[test]
    fn no_devices_stay_empty() {
        let a = alloc(&[]);
        assert_eq!(step_env(&a, &[], Enforcement::CderCgroup).get("CUDA_VISIBLE_DEVICES"), Some(""));
    }
}
