//! The exposition: cderd's `status` and `usage` as metric families, in the
//! OpenMetrics text format (`application/openmetrics-text; version=1.0.0`,
//! ending in `# EOF`) or Prometheus's older text format (`text/plain;
//! version=0.0.4`), which differ only in how a counter's family is named
//! and in the terminator.
//!
//! Series (each device carries `gpu` (its index), `UUID`, `device` (the
//! device file's name, `nvidia0`), `modelName`, `Hostname`, `cder_type`; a
//! MIG instance also `GPU_I_PROFILE`; with [`Snapshot::job_labels`] a held
//! device also `hpc_job`, the batch system's job id, and `lrms`):
//! - `DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`: the latest sample of a
//!   held device (percent; MiB), as dcgm-exporter names them;
//! - `cder_device_allocated`: 1 while a job holds the device (whole or in
//!   shares), else 0;
//! - `cder_device_idle`: 1 while the job holding it leaves it idle (the
//!   `[node.usage]` rule), else 0;
//! - `cder_job_device_seconds_total`, `cder_job_active_seconds_total`: the
//!   running job's seconds on the device, and those measured busy; only
//!   with [`Snapshot::job_labels`].
//!
//! Whoever reaches the port reads the exposition, and cderd answers
//! `cderctl usage` for other users' jobs to root and operators only: so the
//! jobs are named only where the operator opted in (`--job-labels`), as
//! dcgm-exporter maps HPC jobs only when told to.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

use cder_protocol::{DeviceState, DeviceStatus, DeviceUsage, Status, Usage, UsageSample};

/// The OpenMetrics content type.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// Prometheus's older text format, for clients that do not ask for OpenMetrics.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0.0.
    OpenMetrics,
    /// Prometheus text 0.0.4.
    PrometheusText,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names it.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS,
            Format::PrometheusText => PROMETHEUS_TEXT,
        }
    }
}

/// What one scrape renders.
pub struct Snapshot<'a> {
    /// This node's name (the `Hostname` label).
    pub hostname: &'a str,
    /// cderd's `status`.
    pub status: &'a Status,
    /// cderd's `usage` for running jobs with recent samples; `None` when
    /// cderd does not sample (an older daemon).
    pub usage: Option<&'a Usage>,
    /// Name the job holding each device (`hpc_job`, `lrms`) and serve the
    /// per-job counters. Off unless the operator asks (`--job-labels`):
    /// any local user can scrape the port.
    pub job_labels: bool,
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One metric family being written.
struct Family<'o> {
    out: &'o mut String,
}

fn family<'o>(out: &'o mut String, format: Format, name: &str, kind: &str, help: &str) -> Family<'o> {
    // OpenMetrics names a counter's family without `_total`; the older
    // format names it as its samples are named.
    let family = match (format, kind) {
        (Format::OpenMetrics, "counter") => name.strip_suffix("_total").unwrap_or(name),
        _ => name,
    };
    let _ = writeln!(out, "# HELP {family} {help}");
    let _ = writeln!(out, "# TYPE {family} {kind}");
    Family { out }
}

impl Family<'_> {
    fn sample(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        let _ = writeln!(self.out, "{name}{{{}}} {value}", labels.join(","));
    }
}

fn device_file_name(d: &DeviceStatus) -> String {
    d.path.as_deref().and_then(|p| p.rsplit('/').next()).unwrap_or("").to_string()
}

/// The labels dcgm-exporter puts on a device, cder's, and (with
/// `job_labels`) the job's.
fn device_labels(d: &DeviceStatus, hostname: &str, job_labels: bool) -> Vec<(&'static str, String)> {
    let mut l = vec![
        ("gpu", d.index.to_string()),
        ("UUID", d.uuid.clone()),
        ("device", device_file_name(d)),
        ("modelName", d.model.clone()),
        ("Hostname", hostname.to_string()),
        ("cder_type", d.cder_type.clone()),
    ];
    if let Some((_, profile)) = d.model.rsplit_once(" MIG ") {
        l.push(("GPU_I_PROFILE", profile.trim().to_string()));
    }
    if let Some(job) = d.job.as_ref().filter(|_| job_labels) {
        l.push(("hpc_job", job.id().to_string()));
        l.push(("lrms", job.lrms().as_str().to_string()));
    }
    l
}

/// The exposition of one scrape.
pub fn render(s: &Snapshot<'_>, format: Format) -> String {
    let mut out = String::new();
    let devices: Vec<(&DeviceStatus, Vec<(&str, String)>)> =
        s.status.devices.iter().map(|d| (d, device_labels(d, s.hostname, s.job_labels))).collect();
    // The latest sample of each device, if it belongs to the job holding it now.
    let mut latest: HashMap<&str, &UsageSample> = HashMap::new();
    for sample in s.usage.map(|u| u.recent.as_slice()).unwrap_or_default() {
        let holder = devices.iter().find(|(d, _)| d.uuid == sample.uuid).and_then(|(d, _)| d.job.as_ref());
        if holder == Some(&sample.job) {
            let e = latest.entry(sample.uuid.as_str()).or_insert(sample);
            if sample.at_ms > e.at_ms {
                *e = sample;
            }
        }
    }
    let mut f = family(&mut out, format, "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).");
    for (d, labels) in &devices {
        if let Some(u) = latest.get(d.uuid.as_str()).and_then(|s| s.utilisation_percent) {
            f.sample("DCGM_FI_DEV_GPU_UTIL", labels, f64::from(u));
        }
    }
    let mut f = family(&mut out, format, "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).");
    for (d, labels) in &devices {
        if let Some(m) = latest.get(d.uuid.as_str()).and_then(|s| s.memory_mib) {
            f.sample("DCGM_FI_DEV_FB_USED", labels, m as f64);
        }
    }
    let mut f = family(
        &mut out,
        format,
        "cder_device_allocated",
        "gauge",
        "1 while a job holds the device, whole or in shares.",
    );
    for (d, labels) in &devices {
        // A device held in shares names no single job, but it is held.
        let held = d.job.is_some() || d.state == DeviceState::Allocated;
        f.sample("cder_device_allocated", labels, if held { 1.0 } else { 0.0 });
    }
    let idle: BTreeSet<(&str, String)> =
        s.usage.map(|u| u.idle.iter().map(|i| (i.uuid.as_str(), i.job.to_string())).collect()).unwrap_or_default();
    let mut f = family(
        &mut out,
        format,
        "cder_device_idle",
        "gauge",
        "1 while the job holding the device has left it idle ([node.usage] idle rule).",
    );
    for (d, labels) in &devices {
        if let Some(job) = &d.job {
            let flagged = idle.contains(&(d.uuid.as_str(), job.to_string()));
            f.sample("cder_device_idle", labels, if flagged { 1.0 } else { 0.0 });
        }
    }
    // Running jobs only: a finished job's counters end with its series.
    // Without the job's labels a counter would restart at each new job
    // under the same series: none are served then.
    let running: Vec<(&DeviceUsage, &Vec<(&str, String)>)> = s
        .usage
        .filter(|_| s.job_labels)
        .map(|u| u.devices.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|u| u.end.is_none())
        .filter_map(|u| {
            devices.iter().find(|(d, _)| d.uuid == u.uuid && d.job.as_ref() == Some(&u.job)).map(|(_, l)| (u, l))
        })
        .collect();
    let mut f = family(
        &mut out,
        format,
        "cder_job_device_seconds_total",
        "counter",
        "Seconds the running job has held the device.",
    );
    for (u, labels) in &running {
        f.sample("cder_job_device_seconds_total", labels, u.device_seconds as f64);
    }
    let mut f = family(
        &mut out,
        format,
        "cder_job_active_seconds_total",
        "counter",
        "Seconds the running job kept the device busy (at or above [node.usage] active_threshold_percent).",
    );
    for (u, labels) in &running {
        if let Some(a) = u.active_seconds {
            f.sample("cder_job_active_seconds_total", labels, a);
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cder_protocol::IdleDevice;

    fn device(index: u32, job: Option<&str>, model: &str) -> DeviceStatus {
        DeviceStatus {
            cder_type: "gpgpu".into(),
            index,
            uuid: format!("GPU-{index}"),
            model: model.into(),
            memory_mib: 40_000,
            numa_node: 0,
            state: if job.is_some() { DeviceState::Allocated } else { DeviceState::Free },
            job: job.map(|j| j.parse().unwrap()),
            uid: job.map(|_| 1000),
            reason: None,
            path: Some(format!("/dev/nvidia{index}")),
        }
    }

    fn snapshot_text(format: Format) -> String {
        snapshot(format, true)
    }

    fn snapshot(format: Format, job_labels: bool) -> String {
        let status = Status {
            devices: vec![device(0, Some("slurm:42"), "NVIDIA A100 MIG 3g.40gb"), device(1, None, "Tesla \"T4\"")],
            counts: Default::default(),
            generation: 1,
            idle: vec![],
            shares: vec![],
        };
        let job: cder_model::JobKey = "slurm:42".parse().unwrap();
        let usage = Usage {
            devices: vec![DeviceUsage {
                job: job.clone(),
                uid: 1000,
                cder_type: "gpgpu".into(),
                index: 0,
                uuid: "GPU-0".into(),
                model: "NVIDIA A100 MIG 3g.40gb".into(),
                mig_parent: None,
                start: 0,
                end: None,
                device_seconds: 120,
                sampled_seconds: 120.0,
                active_seconds: Some(96.0),
                mean_utilisation_percent: Some(80.0),
                peak_utilisation_percent: Some(90),
                peak_memory_mib: 1000,
                samples: 12,
                first_sample: Some(0),
                last_sample: Some(120),
                utilisation_source: "device".into(),
                months: vec![],
            }],
            idle: vec![IdleDevice {
                job: job.clone(),
                uid: 1000,
                cder_type: "gpgpu".into(),
                index: 0,
                uuid: "GPU-0".into(),
                model: String::new(),
                idle_since: 0,
                idle_seconds: 60.0,
            }],
            recent: vec![
                UsageSample {
                    at_ms: 1,
                    job: job.clone(),
                    uuid: "GPU-0".into(),
                    utilisation_percent: Some(10),
                    memory_mib: Some(5),
                    processes: vec![],
                },
                UsageSample {
                    at_ms: 2,
                    job,
                    uuid: "GPU-0".into(),
                    utilisation_percent: Some(80),
                    memory_mib: Some(512),
                    processes: vec![],
                },
            ],
            sample_period_s: 10.0,
            active_threshold_percent: 5,
        };
        render(&Snapshot { hostname: "wn01", status: &status, usage: Some(&usage), job_labels }, format)
    }

    #[test]
    fn openmetrics_has_help_type_and_eof() {
        let text = snapshot_text(Format::OpenMetrics);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("# TYPE cder_job_device_seconds counter\n"), "{text}");
        assert!(text.contains("# HELP DCGM_FI_DEV_GPU_UTIL "), "{text}");
        let util = text.lines().find(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{")).unwrap();
        assert!(util.ends_with("} 80"), "the latest sample: {util}");
        assert!(util.contains("gpu=\"0\"") && util.contains("UUID=\"GPU-0\"") && util.contains("device=\"nvidia0\""));
        assert!(util.contains("hpc_job=\"42\"") && util.contains("Hostname=\"wn01\""), "{util}");
        assert!(util.contains("GPU_I_PROFILE=\"3g.40gb\""), "{util}");
        assert!(text.contains("modelName=\"Tesla \\\"T4\\\"\""), "escaped: {text}");
        assert!(text.lines().any(|l| l.starts_with("cder_job_active_seconds_total{") && l.ends_with(" 96")));
        assert!(text.lines().any(|l| l.starts_with("cder_device_idle{") && l.ends_with(" 1")));
        assert_eq!(text.lines().filter(|l| l.starts_with("cder_device_allocated{")).count(), 2);
    }

    #[test]
    fn without_job_labels_no_job_is_named() {
        let text = snapshot(Format::OpenMetrics, false);
        assert!(!text.contains("hpc_job") && !text.contains("lrms") && !text.contains("42"), "{text}");
        assert!(!text.lines().any(|l| l.starts_with("cder_job_")), "no per-job counters: {text}");
        // The device series stay: what is held, how busy the device is.
        let util = text.lines().find(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{")).unwrap();
        assert!(util.contains("UUID=\"GPU-0\"") && util.ends_with("} 80"), "{util}");
        assert_eq!(text.lines().filter(|l| l.starts_with("cder_device_allocated{") && l.ends_with(" 1")).count(), 1);
    }

    #[test]
    fn a_device_held_in_shares_counts_as_allocated() {
        // In `status` a shared device is allocated but names no job (the
        // sharers are listed apart).
        let shared = DeviceStatus { state: DeviceState::Allocated, ..device(2, None, "NVIDIA A100") };
        let status = Status {
            devices: vec![shared, device(3, None, "NVIDIA A100")],
            counts: Default::default(),
            generation: 1,
            idle: vec![],
            shares: vec![],
        };
        let text =
            render(&Snapshot { hostname: "wn01", status: &status, usage: None, job_labels: true }, Format::OpenMetrics);
        let allocated: Vec<&str> = text.lines().filter(|l| l.starts_with("cder_device_allocated{")).collect();
        assert!(allocated[0].contains("gpu=\"2\"") && allocated[0].ends_with(" 1"), "{text}");
        assert!(allocated[1].contains("gpu=\"3\"") && allocated[1].ends_with(" 0"), "{text}");
    }

    #[test]
    fn prometheus_text_names_counters_as_their_samples() {
        let text = snapshot_text(Format::PrometheusText);
        assert!(text.contains("# TYPE cder_job_device_seconds_total counter\n"), "{text}");
        assert!(!text.contains("# EOF"));
        assert_eq!(Format::from_accept(Some("application/openmetrics-text;version=1.0.0")), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::PrometheusText);
    }
}
