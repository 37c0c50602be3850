//! The usage sampler: what each job does with the NVML devices it holds.
//!
//! One thread (`[node.usage] sample = true`, the default, and at least one
//! `discovery = "nvml"` type) asks NVML every `sample_period_s` about every
//! device a running job holds: utilisation, memory in use, the compute
//! processes with their memory and SM utilisation. A whole GPU's
//! utilisation is GPM's graphics activity over the period where the GPU
//! has GPM (Hopper and later), else `nvmlDeviceGetUtilizationRates` (the
//! driver's last sample window); NVML has none for a MIG
//! instance except GPM (Hopper and later: `nvmlGpmMigSampleGet` on its GPU,
//! the graphics utilisation between two samples), so an instance on an
//! older GPU has memory and processes but no utilisation. Each sample goes
//! to the job that holds the device (a MIG instance's job for an instance);
//! each process is also tagged with the job whose cgroup holds it. A GPU
//! shared by several jobs (shares, docs/sharing.md) is asked once per
//! period, and each sharer gets only its own processes: the sum of their
//! SM utilisation and of their memory, never the whole GPU's.
//!
//! One transaction per period rolls the samples up in the ledger
//! ([`crate::store::Store::record_usage`]): a kill -9 loses at most the
//! period being sampled. The thread never holds the store's lock while it
//! talks to NVML, so a job's `alloc` waits at most for that commit.
//!
//! Idle devices: a running job's device below `idle_below_percent` (or,
//! with no utilisation, with no compute process) for `idle_after_s` is
//! logged once per idle spell, shows in `status`, and starts `idle_hook`
//! (if set) in the background, killed after `idle_hook_timeout_s`.
//!
//! Devices of `rocm-smi` and `level-zero` types are sampled in the same
//! periods through [`crate::vendor_watch::observe`]: utilisation and memory
//! in use, no process list.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cder_model::{Discovery, JobKey, UsageSampling};
use cder_protocol::{IdleDevice, ProcessUsage};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{GpmSample, Nvml};

use crate::cgroup::DeviceCgroups;
use crate::daemon::{now_ms, Daemon, UsageTarget};
use crate::store::UsageObservation;

const MIB: u64 = 1024 * 1024;

/// Starts the sampler thread, unless sampling is off or no type uses NVML
/// or another vendor's library.
pub fn spawn(daemon: &Arc<Daemon>) {
    let usage = &daemon.config().node.usage;
    if !usage.sample {
        tracing::info!("[node.usage] sample = false: device use is not sampled");
        return;
    }
    let vendor_types = daemon.config().cders.iter().any(|c| cder_inventory::reads_devices(c.discovery));
    if !vendor_types && !daemon.config().cders.iter().any(|c| c.discovery == Discovery::Nvml) {
        tracing::info!("no discovery = \"nvml\", \"rocm-smi\" or \"level-zero\" type: no device use to sample");
        return;
    }
    let daemon = Arc::clone(daemon);
    let spawned = std::thread::Builder::new().name("cderd-usage".into()).spawn(move || loop {
        let nvmls = open_types(&daemon);
        if nvmls.is_empty() && !vendor_types {
            std::thread::sleep(Duration::from_secs(60));
            continue;
        }
        Sampler::new(&nvmls).run(&daemon);
    });
    if let Err(e) = spawned {
        tracing::error!("cannot start the usage sampler thread: {e}");
    }
}

/// NVML for each `discovery = "nvml"` type that can open it (type name,
/// library); a type that cannot is logged and left out.
pub fn open_types(daemon: &Daemon) -> Vec<(String, Nvml)> {
    let mut out = Vec::new();
    for cder in daemon.config().cders.iter().filter(|c| c.discovery == Discovery::Nvml) {
        match cder_inventory::open_nvml(cder) {
            Ok(nvml) => out.push((cder.name().to_string(), nvml)),
            Err(e) => tracing::warn!(cder_type = cder.name(), "usage sampler: {e}; its devices are not sampled"),
        }
    }
    out
}

/// The sampler's state between periods.
pub struct Sampler<'n> {
    nvmls: &'n [(String, Nvml)],
    /// The previous GPM sample of each MIG instance (a metric needs two).
    gpm_previous: HashMap<String, GpmSample<'n>>,
    /// The newest per-process sample timestamp seen, per device.
    process_seen: HashMap<String, u64>,
    /// Idle (job, device) already warned about in this idle spell.
    warned: BTreeSet<(String, String)>,
    /// When the previous period was sampled, unix ms.
    previous_ms: Option<i64>,
    /// Where `PID/cgroup` is read to tag a process with its job.
    proc_root: PathBuf,
    /// The readers of the types read through their vendor's library.
    vendor_readers: HashMap<String, crate::vendor_watch::Reader>,
}

impl<'n> Sampler<'n> {
    /// A sampler over these opened types (see [`open_types`]).
    pub fn new(nvmls: &'n [(String, Nvml)]) -> Sampler<'n> {
        Sampler {
            nvmls,
            gpm_previous: HashMap::new(),
            process_seen: HashMap::new(),
            warned: BTreeSet::new(),
            previous_ms: None,
            proc_root: PathBuf::from("/proc"),
            vendor_readers: HashMap::new(),
        }
    }

    /// Reads processes' cgroups under `root` instead of `/proc` (tests).
    pub fn with_proc_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.proc_root = root.into();
        self
    }

    /// Samples every period, on a fixed schedule, for ever.
    pub fn run(&mut self, daemon: &Daemon) {
        let usage = &daemon.config().node.usage;
        let period = Duration::from_secs_f64(usage.sample_period_s);
        tracing::info!(
            period_s = usage.sample_period_s,
            active_threshold_percent = usage.active_threshold_percent,
            idle_below_percent = usage.idle_below_percent,
            idle_after_s = usage.idle_after_s,
            "usage sampler started"
        );
        let mut next = Instant::now() + period;
        loop {
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            if let Err(e) = self.tick(daemon) {
                tracing::warn!("usage sampler: {e}");
            }
            next += period;
            // Behind (a slow NVML, a suspended host): skip, never burst.
            if next < Instant::now() {
                next = Instant::now() + period;
            }
        }
    }

    /// One period: observe, commit, look for idle devices. Returns how many
    /// samples were recorded.
    pub fn tick(&mut self, daemon: &Daemon) -> Result<usize, String> {
        let observations = self.observe_all(daemon)?;
        let recorded = daemon.record_usage(&observations).map_err(|e| e.message)?;
        let idle = daemon.idle_devices().map_err(|e| e.message)?;
        self.warn_idle(daemon.config().node.usage.clone(), idle);
        Ok(recorded)
    }

    /// Asks NVML about every device a running job holds (no lock held).
    pub fn observe_all(&mut self, daemon: &Daemon) -> Result<Vec<UsageObservation>, String> {
        let targets = daemon.usage_targets().map_err(|e| e.message)?;
        let jobs: Vec<(JobKey, String)> = {
            let mut seen = BTreeSet::new();
            targets.iter().filter(|t| seen.insert(t.job.clone())).map(|t| (t.job.clone(), t.token.clone())).collect()
        };
        // Where cder's own device groups are: a process is tagged by them too.
        let cgroup_parent = daemon.config().node.enforcement.cgroup_parent.clone();
        let at_ms = now_ms();
        let previous_ms = self.previous_ms.replace(at_ms);
        let nvmls = self.nvmls;
        let mut out = Vec::with_capacity(targets.len());
        let mut shared_seen: HashMap<String, UsageObservation> = HashMap::new();
        for target in &targets {
            let Some((_, nvml)) = nvmls.iter().find(|(t, _)| *t == target.cder_type) else { continue };
            if !target.shared {
                out.push(self.observe(nvml, target, (at_ms, previous_ms), &jobs, &cgroup_parent));
                continue;
            }
            // One look at a shared GPU per period, split between its sharers.
            if !shared_seen.contains_key(&target.uuid) {
                let whole = self.observe(nvml, target, (at_ms, previous_ms), &jobs, &cgroup_parent);
                shared_seen.insert(target.uuid.clone(), whole);
            }
            out.push(own_share(&shared_seen[&target.uuid], &target.job));
        }
        // A sharer's part of a device these libraries list no process of is unknown.
        let vendor = crate::vendor_watch::observe(daemon, &targets, (at_ms, previous_ms), &mut self.vendor_readers);
        out.extend(
            vendor.into_iter().map(|(whole, shared)| if shared { own_share(&whole, &whole.job) } else { whole }),
        );
        // Instances no longer held keep no GPM sample.
        self.gpm_previous.retain(|uuid, _| targets.iter().any(|t| &t.uuid == uuid));
        self.process_seen.retain(|uuid, _| targets.iter().any(|t| &t.uuid == uuid));
        Ok(out)
    }

    /// One device's sample at `at` (now, the previous period).
    fn observe(
        &mut self,
        nvml: &'n Nvml,
        target: &UsageTarget,
        at: (i64, Option<i64>),
        jobs: &[(JobKey, String)],
        cgroup_parent: &str,
    ) -> UsageObservation {
        let mut observation = UsageObservation {
            job: target.job.clone(),
            uuid: target.uuid.clone(),
            mig_parent: None,
            at_ms: at.0,
            previous_ms: at.1,
            utilisation: None,
            source: "none",
            memory_mib: None,
            processes: None,
        };
        let device = match nvml.device_by_uuid(target.uuid.as_str()) {
            Ok(device) => device,
            Err(e) => {
                tracing::debug!(device = %target.uuid, "usage sampler: nvmlDeviceGetHandleByUUID: {e}");
                return observation;
            }
        };
        observation.memory_mib = device.memory_info().ok().map(|m| m.used / MIB);
        if cder_model::is_mig_uuid(&target.uuid) {
            if let Ok(parent) = device.mig_parent_device() {
                observation.mig_parent = parent.uuid().ok();
                if parent.gpm_support().unwrap_or(false) {
                    let sample = cder_inventory::mig_instance_ids(&device)
                        .and_then(|(gpu_instance, _)| parent.gpm_mig_sample(gpu_instance));
                    match sample {
                        Ok(sample) => {
                            if let Some(previous) = self.gpm_previous.get(&target.uuid) {
                                observation.utilisation = graphics_utilisation(nvml, previous, &sample);
                                observation.source = "gpm";
                            }
                            self.gpm_previous.insert(target.uuid.clone(), sample);
                        }
                        Err(e) => tracing::debug!(device = %target.uuid, "usage sampler: nvmlGpmMigSampleGet: {e}"),
                    }
                }
            }
        } else {
            // GPM (Hopper and later) averages over the whole period; the
            // driver's utilisation is its last sample window only.
            if device.gpm_support().unwrap_or(false) {
                match device.gpm_sample() {
                    Ok(sample) => {
                        if let Some(previous) = self.gpm_previous.get(&target.uuid) {
                            observation.utilisation = graphics_utilisation(nvml, previous, &sample);
                            observation.source = "gpm";
                        }
                        self.gpm_previous.insert(target.uuid.clone(), sample);
                    }
                    Err(e) => tracing::debug!(device = %target.uuid, "usage sampler: nvmlGpmSampleGet: {e}"),
                }
            }
            if observation.utilisation.is_none() {
                if let Ok(rates) = device.utilization_rates() {
                    observation.utilisation = Some(rates.gpu.min(100));
                    observation.source = "device";
                }
            }
        }
        let sm: Option<HashMap<u32, u32>> =
            match device.process_utilization_stats(self.process_seen.get(&target.uuid).copied()) {
                Ok(samples) => {
                    let mut latest: HashMap<u32, (u64, u32)> = HashMap::new();
                    for s in &samples {
                        let entry = latest.entry(s.pid).or_insert((s.timestamp, s.sm_util));
                        if s.timestamp >= entry.0 {
                            *entry = (s.timestamp, s.sm_util);
                        }
                    }
                    if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
                        self.process_seen.insert(target.uuid.clone(), newest);
                    }
                    Some(latest.into_iter().map(|(pid, (_, sm))| (pid, sm.min(100))).collect())
                }
                // No process ran since the last look.
                Err(NvmlError::NotFound) => Some(HashMap::new()),
                Err(_) => None,
            };
        if let Ok(list) = device.running_compute_processes() {
            observation.processes = Some(
                list.into_iter()
                    .map(|p| ProcessUsage {
                        pid: p.pid,
                        memory_mib: match p.used_gpu_memory {
                            nvml_wrapper::enums::device::UsedGpuMemory::Used(bytes) => Some(bytes / MIB),
                            nvml_wrapper::enums::device::UsedGpuMemory::Unavailable => None,
                        },
                        sm_percent: sm.as_ref().map(|m| m.get(&p.pid).copied().unwrap_or(0)),
                        job: job_of_process(&self.proc_root, p.pid, jobs, cgroup_parent),
                    })
                    .collect(),
            );
        }
        observation
    }

    /// Logs, and hands to the hook, each device newly idle; forgets those
    /// no longer idle, so that a later idle spell is reported again.
    fn warn_idle(&mut self, usage: UsageSampling, idle: Vec<IdleDevice>) {
        let now: BTreeSet<(String, String)> = idle.iter().map(|d| (d.job.to_string(), d.uuid.clone())).collect();
        for device in idle.iter().filter(|d| !self.warned.contains(&(d.job.to_string(), d.uuid.clone()))) {
            tracing::warn!(
                job = %device.job,
                uid = device.uid,
                device = %format!("{}:{}", device.cder_type, device.index),
                model = %device.model,
                uuid = %device.uuid,
                idle_since = device.idle_since,
                "idle GPU: job {} (uid {}) holds {} {} below {}% for {:.0} s",
                device.job,
                device.uid,
                device.model,
                device.uuid,
                usage.idle_below_percent,
                device.idle_seconds
            );
            if let Some(hook) = &usage.idle_hook {
                run_hook(hook, Duration::from_secs(usage.idle_hook_timeout_s), device, usage.idle_below_percent);
            }
        }
        self.warned = now;
    }
}

/// A sharer's part of one sample of a shared GPU: its own processes (by
/// their cgroups), the sum of their SM utilisation and of their memory.
/// Where NVML gave no per-process SM figures the utilisation is unknown,
/// never the whole GPU's.
pub fn own_share(whole: &UsageObservation, job: &JobKey) -> UsageObservation {
    let mine: Option<Vec<ProcessUsage>> =
        whole.processes.as_ref().map(|ps| ps.iter().filter(|p| p.job.as_ref() == Some(job)).cloned().collect());
    let utilisation = mine.as_ref().and_then(|ps| {
        ps.iter().try_fold(0u32, |sum, p| p.sm_percent.map(|sm| sum.saturating_add(sm))).map(|sum| sum.min(100))
    });
    let memory_mib = mine.as_ref().map(|ps| ps.iter().filter_map(|p| p.memory_mib).sum());
    UsageObservation {
        job: job.clone(),
        uuid: whole.uuid.clone(),
        mig_parent: whole.mig_parent.clone(),
        at_ms: whole.at_ms,
        previous_ms: whole.previous_ms,
        utilisation,
        source: if utilisation.is_some() { "process" } else { "none" },
        memory_mib,
        processes: mine,
    }
}

/// GPM's graphics utilisation between two samples, percent.
fn graphics_utilisation<'n>(nvml: &'n Nvml, earlier: &GpmSample<'n>, later: &GpmSample<'n>) -> Option<u32> {
    let results = nvml_wrapper::gpm::gpm_metrics_get(nvml, earlier, later, &[GpmMetricId::GraphicsUtil]).ok()?;
    let value = results.into_iter().next()?.ok()?.value;
    value.is_finite().then(|| value.round().clamp(0.0, 100.0) as u32)
}

/// The running job whose cgroup holds `pid`, by `/proc/PID/cgroup`: cder's
/// own device cgroup of the job (under `cgroup_parent`), SLURM's `job_<id>`
/// or TORQUE's `torque/<id>` directory. `None` when none does (or the
/// process is gone).
pub fn job_of_process(proc_root: &Path, pid: u32, jobs: &[(JobKey, String)], cgroup_parent: &str) -> Option<JobKey> {
    let text = std::fs::read_to_string(proc_root.join(pid.to_string()).join("cgroup")).ok()?;
    job_of_cgroups(&text, jobs, cgroup_parent)
}

/// [`job_of_process`] on the text of a `/proc/PID/cgroup` file. A path names
/// a job only where root's layout puts it: the group directly under
/// `/<cgroup_parent>`, or the batch system's own job directory
/// ([`batch_system_job`]); a `job_<id>` anywhere else may be a directory a
/// user made in a delegated subtree (`user@.service`, a job's own).
pub fn job_of_cgroups(text: &str, jobs: &[(JobKey, String)], cgroup_parent: &str) -> Option<JobKey> {
    let parent: Vec<&str> = cgroup_parent.split('/').filter(|p| !p.is_empty()).collect();
    let paths: Vec<Vec<&str>> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2)?.strip_prefix('/'))
        .map(|p| p.split('/').collect())
        .collect();
    jobs.iter()
        .find(|(job, token)| {
            let ours = DeviceCgroups::group_name(job, token);
            paths.iter().any(|parts| {
                let in_ours =
                    parts.len() > parent.len() && parts[..parent.len()] == parent[..] && parts[parent.len()] == ours;
                in_ours || batch_system_job(parts) == Some((job.lrms(), job.id()))
            })
        })
        .map(|(job, _)| job.clone())
}

/// The job a batch system's cgroup layout names, read at the one place that
/// layout puts it (components of the path after its leading `/`):
///
/// * SLURM cgroup/v2: `system.slice/slurmstepd.scope/job_<id>/…`
///   (`<node>_slurmstepd.scope` where a host runs several slurmd);
/// * SLURM cgroup/v1: `slurm/uid_<uid>/job_<id>/…` (`slurm_<node>` likewise);
/// * TORQUE 6: `torque/<id>/…`.
fn batch_system_job<'p>(parts: &[&'p str]) -> Option<(cder_model::Lrms, &'p str)> {
    use cder_model::Lrms;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match *parts {
        ["system.slice", scope, job, ..] if scope == "slurmstepd.scope" || scope.ends_with("_slurmstepd.scope") => {
            Some((Lrms::Slurm, job.strip_prefix("job_")?))
        }
        [slurm, uid, job, ..]
            if (slurm == "slurm" || slurm.starts_with("slurm_")) && uid.strip_prefix("uid_").is_some_and(numeric) =>
        {
            Some((Lrms::Slurm, job.strip_prefix("job_")?))
        }
        ["torque", id, ..] => Some((Lrms::Torque, id)),
        _ => None,
    }
}

/// Starts the idle hook for one device with the device in its environment;
/// a thread of its own waits for it and kills it after `timeout`.
fn run_hook(hook: &[String], timeout: Duration, device: &IdleDevice, below: u32) {
    let Some((program, args)) = hook.split_first() else { return };
    let child = std::process::Command::new(program)
        .args(args)
        .env("CDER_JOB", device.job.to_string())
        .env("CDER_UID", device.uid.to_string())
        .env("CDER_DEVICE", format!("{}:{}", device.cder_type, device.index))
        .env("CDER_DEVICE_UUID", &device.uuid)
        .env("CDER_DEVICE_MODEL", &device.model)
        .env("CDER_IDLE_SINCE", device.idle_since.to_string())
        .env("CDER_IDLE_SECONDS", format!("{:.0}", device.idle_seconds))
        .env("CDER_IDLE_BELOW_PERCENT", below.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return tracing::error!(hook = %program, "[node.usage] idle_hook: cannot start it: {e}"),
    };
    let (program, job) = (program.clone(), device.job.to_string());
    let waiter = std::thread::Builder::new().name("cderd-idle-hook".into()).spawn(move || {
        let deadline = Instant::now() + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return,
                Ok(Some(status)) => {
                    return tracing::warn!(hook = %program, job = %job, "[node.usage] idle_hook ended with {status}")
                }
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return tracing::warn!(hook = %program, job = %job, "[node.usage] idle_hook killed after {timeout:?}");
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return tracing::warn!(hook = %program, "[node.usage] idle_hook: {e}"),
            }
        }
    });
    if let Err(e) = waiter {
        tracing::warn!("[node.usage] idle_hook: cannot start the thread that waits for it: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SLURM, a TORQUE and a local job, with their allocation tokens.
    fn three_jobs() -> (JobKey, JobKey, JobKey, Vec<(JobKey, String)>) {
        let slurm: JobKey = "slurm:42".parse().unwrap();
        let torque: JobKey = "torque:17.ce.example.org".parse().unwrap();
        let local: JobKey = "local:demo-1".parse().unwrap();
        let jobs = vec![
            (slurm.clone(), "aaaa-bbbb".to_string()),
            (torque.clone(), "cccc".to_string()),
            (local.clone(), "0a1b2c3d-4e5f-6789".to_string()),
        ];
        (slurm, torque, local, jobs)
    }

    #[test]
    fn processes_are_attributed_by_their_cgroups() {
        let (slurm, torque, local, jobs) = three_jobs();
        let of = |text: &str| job_of_cgroups(text, &jobs, "cder");
        assert_eq!(of("0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n"), Some(slurm.clone()));
        // Several slurmd on one host: <node>_slurmstepd.scope.
        assert_eq!(of("0::/system.slice/gpu7_slurmstepd.scope/job_42/step_batch\n"), Some(slurm.clone()));
        // cgroup/v1: slurm/uid_<uid>/job_<id>.
        assert_eq!(of("12:devices:/slurm/uid_1000/job_42/step_0/task_0\n4:cpu:/\n"), Some(slurm.clone()));
        assert_eq!(of("12:memory:/slurm_gpu7/uid_1000/job_42/step_0\n"), Some(slurm.clone()));
        // job_420 is another job.
        assert_eq!(of("0::/system.slice/slurmstepd.scope/job_420/step_0\n"), None);
        assert_eq!(of("12:devices:/torque/17.ce.example.org\n4:cpu:/\n"), Some(torque.clone()));
        let ours = DeviceCgroups::group_name(&local, &jobs[2].1);
        assert_eq!(of(&format!("11:devices:/cder/{ours}\n0::/cder/x\n")), Some(local.clone()));
        // cgroup_parent may have several components.
        assert_eq!(job_of_cgroups(&format!("0::/site/gpus/{ours}\n"), &jobs, "site/gpus/"), Some(local.clone()));
        assert_eq!(of("0::/user.slice/user-1000.slice/session-3.scope\n"), None);
        assert_eq!(job_of_process(Path::new("/nonexistent"), 1, &jobs, "cder"), None);
    }

    #[test]
    fn a_job_named_in_a_users_own_cgroup_is_not_believed() {
        let (_, _, local, jobs) = three_jobs();
        let ours = DeviceCgroups::group_name(&local, &jobs[2].1);
        // Directories a user may make: under user@.service (systemd
        // delegates it), inside another job's own cgroup (SLURM's job 7
        // here), or in any subtree delegated to them.
        for hostile in [
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_42\n".to_string(),
            "0::/user.slice/user-1000.slice/user@1000.service/system.slice/slurmstepd.scope/job_42\n".into(),
            "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/job_42\n".into(),
            "0::/system.slice/slurmstepd.scope/job_7/step_0/user/system.slice/slurmstepd.scope/job_42\n".into(),
            "12:devices:/slurm/uid_1000/job_7/step_0/slurm/uid_1000/job_42\n".into(),
            "12:devices:/slurm/uid_x/job_42\n".into(),
            "12:devices:/slurm/job_42\n".into(),
            "0::/job_42\n".into(),
            "0::/user.slice/user-1000.slice/user@1000.service/torque/17.ce.example.org\n".into(),
            "0::/system.slice/slurmstepd.scope/job_7/torque/17.ce.example.org\n".into(),
            format!("0::/user.slice/user-1000.slice/user@1000.service/cder/{ours}\n"),
            format!("0::/user.slice/user-1000.slice/user@1000.service/{ours}\n"),
            format!("11:devices:/elsewhere/cder/{ours}\n"),
            // A v1 line with no path, or a relative one, names nothing.
            "12:devices:job_42\n".into(),
        ] {
            assert_eq!(job_of_cgroups(&hostile, &jobs, "cder"), None, "{hostile}");
        }
        // The job's own processes, wherever they are in its subtree, are still its.
        assert_eq!(
            job_of_cgroups(
                "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/job_42\n",
                &[("slurm:7".parse().unwrap(), "t".into())],
                "cder"
            ),
            Some("slurm:7".parse().unwrap())
        );
    }
}
