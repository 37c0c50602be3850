//! Which devices a job has on a node, as SLURM granted them, and whether
//! SLURM keeps the job's processes to them itself.
//!
//! SLURM is the authority: the job prolog reads `SLURM_JOB_GPUS`, which
//! slurmd builds from the job's credential (the GRES the controller
//! allocated, as gres.conf indices), and records exactly those devices with
//! cderd. Steps only read that record; what a step asks for is a request
//! that may select among the job's devices, never add to them.

use std::path::Path;

/// The variable slurmd sets in the job prolog's environment (and slurmstepd
/// in the batch step's) from the credential: the job's GPU indices.
pub const SLURM_JOB_GPUS: &str = "SLURM_JOB_GPUS";
/// The variable slurmstepd sets for an srun step: the step's GPU indices.
pub const SLURM_STEP_GPUS: &str = "SLURM_STEP_GPUS";

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
                    format!(
                        "line {}: ConstrainDevices={:?} is not a SLURM boolean (yes, up, true, 1, no, down, false, 0)",
                        n + 1,
                        v.trim()
                    )
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

/// Where configless slurmd (23.02 and later) keeps the configs it fetched
/// from slurmctld; 22.05 kept them in `SlurmdSpoolDir/conf-cache`, which
/// it exported as `SLURM_CONF`.
pub const CONFIGLESS_SLURM_CONF: &str = "/run/slurm/conf/slurm.conf";
/// SLURM's compiled-in default (Debian's packages and SchedMD's).
pub const DEFAULT_SLURM_CONF: &str = "/etc/slurm/slurm.conf";

/// The slurm.conf the running daemon read, in the order SLURM itself
/// settles it: the path in the process's parsed config (slurmctld,
/// slurmd); else `SLURM_CONF` of the process's own environment, which
/// SLURM's config loader exports in every daemon that read a config and
/// slurmstepd inherits from slurmd (`-f`, configless and `SLURM_CONF` runs
/// alike; 23.11 and later leave the path out of slurmstepd's parsed
/// config); else the configless cache, else the compiled-in default.
/// `env` is the process's environment, never a job's.
pub fn daemon_slurm_conf(
    parsed: Option<&Path>,
    env: Option<&Path>,
    exists: impl Fn(&Path) -> bool,
) -> std::path::PathBuf {
    parsed
        .or(env)
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .or_else(|| Some(Path::new(CONFIGLESS_SLURM_CONF)).filter(|p| exists(p)).map(Path::to_path_buf))
        .unwrap_or_else(|| DEFAULT_SLURM_CONF.into())
}

/// `TaskPlugin` of a slurm.conf's text (the last line wins, as in SLURM).
pub fn task_plugin_of(slurm_conf: &str) -> Option<String> {
    let mut found = None;
    for line in slurm_conf.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some((k, v)) = line.split_once('=') {
            if k.trim().eq_ignore_ascii_case("TaskPlugin") {
                found = Some(v.trim().to_string());
            }
        }
    }
    found
}

/// True when SLURM itself puts every task into a device cgroup holding its
/// GRES: `task/cgroup` among the task plugins and `ConstrainDevices` true
/// in the cgroup.conf next to the daemon's slurm.conf. `task_plugin` is the
/// running daemon's parsed value; where the process holds none (23.11 and
/// later slurmstepd carry only part of the config), slurm.conf's own line.
/// `Err` for a value SLURM would refuse, which the caller logs.
pub fn slurm_constrains_devices_checked(task_plugin: Option<&str>, slurm_conf: Option<&Path>) -> Result<bool, String> {
    let from_file;
    let task_plugin = match (task_plugin, slurm_conf) {
        (Some(t), _) => Some(t),
        (None, Some(conf)) => {
            from_file = std::fs::read_to_string(conf).ok().and_then(|t| task_plugin_of(&t));
            from_file.as_deref()
        }
        (None, None) => None,
    };
    if !task_cgroup(task_plugin) {
        return Ok(false);
    }
    let path = slurm_conf
        .and_then(Path::parent)
        .map(|d| d.join("cgroup.conf"))
        .unwrap_or_else(|| "/etc/slurm/cgroup.conf".into());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_config_is_found_as_slurm_settles_it() {
        let none = |_: &Path| false;
        let parsed = Path::new("/srv/slurm/slurm.conf");
        let env = Path::new("/opt/slurm/etc/slurm.conf");
        assert_eq!(daemon_slurm_conf(Some(parsed), Some(env), none), parsed);
        assert_eq!(daemon_slurm_conf(None, Some(env), none), env);
        assert_eq!(
            daemon_slurm_conf(None, None, |p| p == Path::new(CONFIGLESS_SLURM_CONF)),
            Path::new(CONFIGLESS_SLURM_CONF)
        );
        assert_eq!(daemon_slurm_conf(None, Some(Path::new("")), none), Path::new(DEFAULT_SLURM_CONF));
    }

    #[test]
    fn task_plugin_is_read_from_slurm_conf_where_the_process_holds_none() {
        assert_eq!(
            task_plugin_of("TaskPlugin=task/none\n# TaskPlugin=x\ntaskplugin = task/affinity,task/cgroup # on\n")
                .as_deref(),
            Some("task/affinity,task/cgroup")
        );
        assert_eq!(task_plugin_of("ProctrackType=proctrack/cgroup\n"), None);
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("slurm.conf");
        std::fs::write(&conf, "TaskPlugin=task/cgroup\n").unwrap();
        std::fs::write(dir.path().join("cgroup.conf"), "ConstrainDevices=yes\n").unwrap();
        assert_eq!(slurm_constrains_devices_checked(None, Some(&conf)), Ok(true));
        assert_eq!(slurm_constrains_devices_checked(Some("task/none"), Some(&conf)), Ok(false));
        std::fs::write(&conf, "TaskPlugin=task/affinity\n").unwrap();
        assert_eq!(slurm_constrains_devices_checked(None, Some(&conf)), Ok(false));
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
            assert_eq!(
                constrain_devices(&format!("ConstrainDevices=yes\nConstrainDevices={off}\n")),
                Ok(false),
                "{off:?}"
            );
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
}
