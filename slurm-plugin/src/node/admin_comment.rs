//! The job's GPU use into its SLURM `AdminComment`, which `sacct` shows
//! (`sacct -o AdminComment`), at the job's end on each node.
//!
//! SLURM 22.05 has no TRES for a GPU's utilisation per job from outside
//! (`AcctGatherGpu` and its `gres/gpuutil`, `gres/gpumem` TRES came in 23.x
//! and read NVML in slurmstepd, not cderd), but root and SlurmUser may set a
//! job's `AdminComment` with `scontrol update`, and slurmdbd keeps it. With
//! `[slurm] admin_comment = "merge"` the epilog asks cderd for the job's
//! `usage` before releasing the devices and puts a short JSON object under
//! the key `cder`. Nothing here fails the epilog: each failure is a warning.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_model::config::{AdminCommentMode, SlurmSection};
use cder_model::JobKey;
use cder_protocol::{DeviceUsage, UsageRequest};
use serde_json::{json, Map, Value};

use super::Node;
use crate::args::PluginArgs;
use crate::sys::Level;

/// Longest comment cder writes, in bytes: the bound keeps a node with many GPUs from writing kilobytes per job into
/// every accounting row (devices past it are counted in `more`).
pub const MAX_COMMENT_BYTES: usize = 1024;

/// The `cder` object for a job's devices on this node.
pub fn summary(host: Option<&str>, devices: &[DeviceUsage]) -> Value {
    let gpu = |d: &DeviceUsage| {
        json!({
            "uuid": d.uuid,
            "model": d.model,
            "device_s": d.device_seconds,
            "active_s": d.active_seconds.map(|a| a.round() as i64),
            "mean_util": d.mean_utilisation_percent.map(|m| (m * 10.0).round() / 10.0),
            "peak_mem_mib": d.peak_memory_mib,
        })
    };
    let mut gpus: Vec<Value> = devices.iter().map(gpu).collect();
    let mut more = 0;
    loop {
        let mut v = json!({ "gpus": gpus });
        if let Some(h) = host {
            v["node"] = json!(h);
        }
        if more > 0 {
            v["more"] = json!(more);
        }
        if gpus.is_empty() || json!({ "cder": v }).to_string().len() <= MAX_COMMENT_BYTES {
            return v;
        }
        gpus.pop();
        more += 1;
    }
}

/// The comment to write: `existing` with `cder` set to `ours`, or `None`
/// when `existing` is someone else's text that is not a JSON object.
pub fn merge(existing: Option<&str>, ours: Value) -> Option<String> {
    let mut object = match existing.map(str::trim).filter(|s| !s.is_empty()) {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(o)) => o,
            _ => return None,
        },
    };
    object.insert("cder".into(), ours);
    Some(Value::Object(object).to_string())
}

/// The epilog's part, before the release: the job's figures from cderd and
/// the comment set through `scontrol`. Warns on any failure.
pub fn record(args: &PluginArgs, job: &JobKey, node: &dyn Node) {
    let path = args.config_path();
    let config = match cder_model::Config::load(Some(&path)) {
        Ok(c) => c.slurm,
        // The vGPGPU and allocation paths report a broken config; here only
        // the comment is lost.
        Err(e) => {
            if path.exists() {
                node.log(Level::Verbose, &format!("spank_cder: {job}: no AdminComment: {e}"));
            }
            return;
        }
    };
    if config.admin_comment == AdminCommentMode::Off {
        return;
    }
    if config.admin_comment == AdminCommentMode::Auto {
        if let Some(why) = node.slurm_measures_gpu_use() {
            node.log(
                Level::Verbose,
                &format!("spank_cder: {job}: AdminComment left alone: SLURM accounts GPU use itself ({why})"),
            );
            return;
        }
    }
    if let Err(why) = write(&config, args, job, node) {
        node.log(Level::Error, &format!("spank_cder: {job}: AdminComment not set (the epilog goes on): {why}"));
    }
}

fn write(config: &SlurmSection, args: &PluginArgs, job: &JobKey, node: &dyn Node) -> Result<(), String> {
    let id: u32 = job.id().parse().map_err(|_| format!("{job} is not a SLURM job id"))?;
    let timeout = Duration::from_secs(config.admin_comment_timeout_s.max(1));
    let mut cderd = node
        .cderd(&PluginArgs { timeout: timeout.min(args.timeout), ..args.clone() })
        .map_err(|e| format!("cderd: {e}"))?;
    let usage = cderd
        .usage(&UsageRequest { job: Some(job.clone()), ..UsageRequest::default() })
        .map_err(|e| format!("cderd's usage: {e}"))?;
    // Nothing held, or released already (the batch step's end came first
    // and wrote the comment).
    if usage.devices.iter().all(|d| d.end.is_some()) {
        return Ok(());
    }
    let ours = summary(node.node_name().as_deref(), &usage.devices);
    let existing = node.granted(id)?.admin_comment;
    let Some(text) = merge(existing.as_deref(), ours) else {
        node.log(
            Level::Info,
            &format!("spank_cder: {job}: AdminComment is not JSON (another tool's?); cder leaves it as it is"),
        );
        return Ok(());
    };
    node.update_admin_comment(&config.scontrol, id, &text, timeout)?;
    node.log(Level::Verbose, &format!("spank_cder: {job}: AdminComment set ({} bytes)", text.len()));
    Ok(())
}

/// Runs `scontrol update JobId=<id> AdminComment=<text>`, killed after
/// `timeout`; `slurm_conf` is handed on as `SLURM_CONF`.
pub fn run_scontrol(
    scontrol: &std::path::Path,
    slurm_conf: Option<&std::path::Path>,
    id: u32,
    text: &str,
    timeout: Duration,
) -> Result<(), String> {
    let mut cmd = Command::new(scontrol);
    cmd.arg("update").arg(format!("JobId={id}")).arg(format!("AdminComment={text}"));
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    if let Some(conf) = slurm_conf {
        cmd.env("SLURM_CONF", conf);
    }
    let mut child = cmd.spawn().map_err(|e| format!("running {}: {e}", scontrol.display()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("{} update JobId={id}: {status}: {}", scontrol.display(), err.trim()))
                };
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} update JobId={id}: killed after {} s", scontrol.display(), timeout.as_secs()));
            }
            Err(e) => return Err(format!("waiting for {}: {e}", scontrol.display())),
        }
    }
}

/// The GPU plugins whose `gpu_p_usage_read` measures a job's GPU use (the
/// others, `gpu/nvidia` and `gpu/oneapi` among them, return nothing), by
/// the `AutoDetect=` that selects them.
const MEASURING_GPU_PLUGINS: [(&str, &str); 2] = [("nvml", "gpu_nvml.so"), ("rsmi", "gpu_rsmi.so")];

/// Why SLURM accounts each job's GPU use itself, or `None` where it does
/// not: 23.02 and later add the `gres/gpuutil` and `gres/gpumem` TRES when
/// `AccountingStorageTRES` tracks `gres/gpu`, slurmstepd's job accounting
/// gathers them through the GPU plugin gres.conf's `AutoDetect` selects,
/// and slurmdbd keeps them. `release` is the headers' `SLURM_VERSION_NUMBER`;
/// `installed` says whether a plugin file is in SLURM's plugin folders.
pub fn slurm_measures_gpu_use(
    release: u32,
    slurm_conf: &str,
    gres_conf: &str,
    installed: impl Fn(&str) -> bool,
) -> Option<String> {
    if release < 0x17_02_00 {
        return None;
    }
    let value = |text: &str, key: &str| -> Option<String> {
        text.lines()
            .filter_map(|l| l.split('#').next())
            .flat_map(|l| l.split_whitespace())
            .filter_map(|w| w.split_once('='))
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.trim().to_string())
            .next_back()
    };
    let tres = value(slurm_conf, "AccountingStorageTRES")?;
    if !tres.to_ascii_lowercase().contains("gres/gpu") {
        return None;
    }
    let storage = value(slurm_conf, "AccountingStorageType")?;
    let gather = value(slurm_conf, "JobAcctGatherType")?;
    if storage.ends_with("/none") || gather.ends_with("/none") {
        return None;
    }
    let detect = value(gres_conf, "AutoDetect")?.to_ascii_lowercase();
    let (_, plugin) = MEASURING_GPU_PLUGINS.iter().find(|(d, _)| *d == detect)?;
    installed(plugin)
        .then(|| format!("AccountingStorageTRES={tres}, AutoDetect={detect} ({plugin}), {gather}, {storage}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(i: u32, active: Option<f64>) -> DeviceUsage {
        serde_json::from_value(json!({
            "job": "slurm:7", "uid": 1000, "type": "gpgpu", "index": i,
            "uuid": format!("GPU-{i:08}-0000-4000-8000-000000000000"), "model": "NVIDIA A100-SXM4-40GB",
            "start": 1, "end": null, "device_seconds": 600, "sampled_seconds": 590.0,
            "active_seconds": active, "mean_utilisation_percent": active.map(|a| a / 6.0),
            "peak_utilisation_percent": 90, "peak_memory_mib": 1138, "samples": 59,
            "first_sample": 2, "last_sample": 600, "utilisation_source": "device"
        }))
        .unwrap()
    }

    #[test]
    fn the_summary_names_each_gpu_and_stays_short() {
        let v = summary(Some("node1"), &[dev(0, Some(480.4)), dev(1, None)]);
        assert_eq!(v["node"], "node1");
        assert_eq!(v["gpus"][0]["active_s"], 480);
        assert_eq!(v["gpus"][0]["mean_util"], 80.1);
        assert_eq!(v["gpus"][0]["device_s"], 600);
        assert_eq!(v["gpus"][1]["active_s"], Value::Null);
        let many: Vec<DeviceUsage> = (0..64).map(|i| dev(i, Some(1.0))).collect();
        let v = summary(Some("node1"), &many);
        let text = json!({ "cder": v }).to_string();
        assert!(text.len() <= MAX_COMMENT_BYTES, "{}", text.len());
        let kept = v["gpus"].as_array().unwrap().len();
        assert!(kept > 0 && kept < 64);
        assert_eq!(v["more"], 64 - kept);
    }

    /// A stand-in `scontrol` (a shell script) for the process handling only:
    /// what the real one does with the comment is the cluster test's.
    fn script(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("scontrol");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn scontrol_gets_the_comment_as_one_argument_and_is_bounded_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let seen = dir.path().join("argv");
        let ok = script(dir.path(), &format!("printf '%s\\n' \"$@\" \"$SLURM_CONF\" > '{}'", seen.display()));
        let text = r#"{"cder":{"gpus":[{"model":"NVIDIA A100 80GB PCIe"}]}}"#;
        run_scontrol(&ok, Some(std::path::Path::new("/etc/slurm/x.conf")), 42, text, Duration::from_secs(5)).unwrap();
        let argv = std::fs::read_to_string(&seen).unwrap();
        assert_eq!(argv, format!("update\nJobId=42\nAdminComment={text}\n/etc/slurm/x.conf\n"));

        let refused = script(dir.path(), "echo 'Access/permission denied' >&2; exit 1");
        let e = run_scontrol(&refused, None, 42, "{}", Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("permission denied"), "{e}");

        let hung = script(dir.path(), "exec sleep 30");
        let e = run_scontrol(&hung, None, 42, "{}", Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("killed after 1 s"), "{e}");

        let e = run_scontrol(&dir.path().join("missing"), None, 42, "{}", Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("running"), "{e}");
    }

    #[test]
    fn merging_keeps_other_keys_and_leaves_foreign_text_alone() {
        let ours = json!({ "gpus": [] });
        assert_eq!(merge(None, ours.clone()).unwrap(), r#"{"cder":{"gpus":[]}}"#);
        assert_eq!(merge(Some("  "), ours.clone()).unwrap(), r#"{"cder":{"gpus":[]}}"#);
        let m: Value = serde_json::from_str(&merge(Some(r#"{"site":"x","cder":1}"#), ours.clone()).unwrap()).unwrap();
        assert_eq!(m, json!({ "site": "x", "cder": { "gpus": [] } }));
        assert_eq!(merge(Some("JS1:H4sIAAAA"), ours.clone()), None);
        assert_eq!(merge(Some("[1,2]"), ours), None);
    }
}
