//! The vGPGPU half of the node side (seed thesis §4.2.3, SLURM flow):
//! `--vgpgpu-per-node=N` / `--vgpgpu-method=rCUDA|VCL` (or the JDL keys
//! `VirtualGPGPUPerNode` / `VirtualGPGPUMethod` in the job's environment).
//! In slurmstepd, as root, it requests N backends for this node from the
//! cluster registry (job key `slurm:<id>`, idempotent, so every step sees
//! the same ones), sets the rCUDA variables or the VCL node file, and
//! releases the job's backends when the batch step ends and in the job
//! epilog (which also covers `scancel`). SLURM's `vgpgpu` licences, set by
//! `job_submit_cder.so`, keep surplus jobs pending.

use std::path::PathBuf;

use cder_model::{Config, JobKey, RegistryConfig, VgpgpuMethod};
use cder_registry_client::api::BackendRequest;
use cder_registry_client::env::{job_environment, vcl_nodefile};
use cder_registry_client::RegistryClient;
use cder_request::keys::VIRTUAL_GPGPU_PER_NODE;

use super::{Node, TaskOutcome};
use crate::args::{FailMode, PluginArgs};
use crate::gres_conf::node_position;
use crate::sys::Level;
use crate::vgpgpu::{granted_licenses, granted_per_node, RawVgpgpu};

/// What slurmstepd knows of a step's vGPGPU request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgpgpuStep {
    /// The job.
    pub job: JobKey,
    /// Its SLURM id, if SLURM said.
    pub job_id: Option<u32>,
    /// The uid it runs as, if SLURM said.
    pub uid: Option<u32>,
    /// The step's options, else the JDL keys of its environment.
    pub raw: RawVgpgpu,
    /// The request came as `--vgpgpu-per-node` (not the JDL key).
    pub from_option: bool,
}

/// The registry section of the plugin's config.
pub fn registry_config(args: &PluginArgs) -> Result<RegistryConfig, String> {
    let path = args.config_path();
    let config = Config::load(Some(&path)).map_err(|e| e.to_string())?;
    config.registry.ok_or_else(|| format!("{}: no [registry] section", path.display()))
}

/// Remote context, as root: this node's backends and their variables;
/// `None` for a step that asks for none.
pub fn allocate(step: &VgpgpuStep, args: &PluginArgs, node: &dyn Node) -> Option<TaskOutcome> {
    let job = &step.job;
    let req = match step.raw.parse() {
        Ok(Some(r)) => r,
        Ok(None) => return None,
        Err(message) => return Some(TaskOutcome::Fail(format!("cder: {message}"))),
    };
    let fail = |message: String| {
        node.log(Level::Error, &format!("spank_cder: {message}"));
        Some(TaskOutcome::Fail(message))
    };
    // The controller counted `vgpgpu` licences for the job at submit time;
    // a request in the job's environment or a step option must not take
    // more backends than that.
    let origin = if step.from_option { "--vgpgpu-per-node" } else { VIRTUAL_GPGPU_PER_NODE };
    let granted = step.job_id.ok_or_else(|| "job id unknown".to_string()).and_then(|id| node.granted(id));
    let (per_node, licences, nodes) = match granted {
        Ok(g) => {
            (granted_per_node(g.licenses.as_deref(), g.num_nodes), granted_licenses(g.licenses.as_deref()), g.nodes)
        }
        Err(why) => {
            node.log(
                Level::Error,
                &format!("spank_cder: {job}: reading the job's vgpgpu licences from slurmctld: {why}"),
            );
            (0, 0, None)
        }
    };
    if u64::from(req.per_node) > per_node {
        return fail(format!(
            "cder: {origin}={}: SLURM granted {job} {per_node} vgpgpu licence(s) per node; ask when submitting (sbatch --vgpgpu-per-node={}); the step is not started",
            req.per_node, req.per_node
        ));
    }
    // The registry keys a job's backends by node: the name must be
    // slurmd's, never the step's SLURMD_NODENAME, which the user sets.
    let name = match node.node_name() {
        Some(n) if nodes.as_deref().is_none_or(|list| node_position(list, &n).is_some()) => n,
        other => {
            return fail(format!(
                "cder: this node ({}) is not among the nodes SLURM gave {job} ({}); no vGPGPU backends, the step is not started",
                other.as_deref().unwrap_or("name unknown"),
                nodes.as_deref().unwrap_or("?")
            ))
        }
    };
    // The registry's own fence: all nodes together stay within the
    // licences, whatever node names reach it.
    let job_limit = Some(u32::try_from(licences).unwrap_or(u32::MAX));
    let got = registry_config(args).and_then(|rc| {
        let client = RegistryClient::from_config(&rc).map_err(|e| e.to_string())?;
        let r = BackendRequest {
            job: job.clone(),
            count: req.per_node,
            node: name.clone(),
            method: req.method,
            uid: step.uid,
            job_limit,
        };
        let a = client.request_for(&r).map_err(|e| e.to_string())?;
        let nodefile = match req.method {
            VgpgpuMethod::Vcl => {
                let path: PathBuf = rc.vcl_dir.join(format!("{}-{name}.nodes", job.to_string().replace(':', "-")));
                std::fs::create_dir_all(&rc.vcl_dir)
                    .and_then(|()| std::fs::write(&path, vcl_nodefile(&a.backends)))
                    .map_err(|e| format!("writing the VCL node file {}: {e}", path.display()))?;
                Some(path)
            }
            VgpgpuMethod::Rcuda => None,
        };
        Ok((a, nodefile))
    });
    Some(match got {
        Ok((a, nodefile)) => {
            let endpoints = a.backends.iter().map(|b| b.endpoint()).collect::<Vec<_>>().join(" ");
            node.log(
                Level::Info,
                &format!("spank_cder: {job}: {} {} backend(s) on {name}: {endpoints}", a.backends.len(), req.method),
            );
            TaskOutcome::Env(job_environment(req.method, &a.backends, nodefile.as_deref()))
        }
        Err(why) => {
            node.log(Level::Error, &format!("spank_cder: {job}: {} {} vGPGPU(s): {why}", req.per_node, req.method));
            match args.fail {
                FailMode::Closed => TaskOutcome::Fail(format!(
                    "cder: {} {} vGPGPU(s) for {job}: {why} (fail=closed); the job is not started",
                    req.per_node, req.method
                )),
                // Without backends the job runs with none (count 0).
                FailMode::Open => TaskOutcome::Env(job_environment(req.method, &[], None)),
            }
        }
    })
}

/// Gives the job's backends (all nodes) back. Never fails: an epilog
/// failure would drain the node. Jobs without vGPGPUs cost one request
/// only where `[registry]` is configured.
pub fn release(args: &PluginArgs, job: &JobKey, when: &str, node: &dyn Node) {
    let Ok(rc) = registry_config(args) else { return };
    match RegistryClient::from_config(&rc)
        .map_err(|e| e.to_string())
        .and_then(|c| c.release(job).map_err(|e| e.to_string()))
    {
        Ok(r) if r.released > 0 => {
            node.log(Level::Info, &format!("spank_cder: {job}: {when}: released {} vGPGPU backend(s)", r.released))
        }
        Ok(_) => {}
        Err(e) => node.log(Level::Error, &format!("spank_cder: {job}: {when}: releasing vGPGPU backends: {e}")),
    }
    if let Ok(entries) = std::fs::read_dir(&rc.vcl_dir) {
        let prefix = format!("{}-", job.to_string().replace(':', "-"));
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
