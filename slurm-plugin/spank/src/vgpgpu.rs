//! The vGPGPU half of `spank_cder.so` (seed thesis §4.2.3, SLURM flow):
//! `--vgpgpu-per-node=N` / `--vgpgpu-method=rCUDA|VCL` (or the JDL keys
//! `VirtualGPGPUPerNode` / `VirtualGPGPUMethod` in the job's environment).
//! In slurmstepd, as root, it requests N backends for this node from the
//! cluster registry (job key `slurm:<id>`, idempotent, so every step sees
//! the same ones), sets the rCUDA variables or the VCL node file, and
//! releases the job's backends when the batch step ends and in the job
//! epilog (which also covers `scancel`). SLURM's `vgpgpu` licences, set by
//! `job_submit_cder.so`, keep surplus jobs pending.

use std::path::PathBuf;

use cder_model::{Config, JobKey, RegistryConfig};
use cder_registry_client::api::BackendRequest;
use cder_registry_client::env::{job_environment, vcl_nodefile};
use cder_registry_client::Client;
use cder_slurm::args::{FailMode, PluginArgs};
use cder_slurm::spank::{Spank, SpankOption, SpankResult};

use super::Outcome;
use cder_slurm::sys::{log, Level};
use cder_slurm::gres_conf::node_position;
use cder_request::keys::{
    VIRTUAL_GPGPU_METHOD as JDL_VGPGPU_METHOD, VIRTUAL_GPGPU_PER_NODE as JDL_VGPGPU_PER_NODE, VIRTUAL_GPGPU_TYPE as JDL_VGPGPU_TYPE,
};
use cder_slurm::vgpgpu::{
    granted_licenses, granted_per_node, RawVgpgpu, CONTROL_VGPGPU_METHOD, CONTROL_VGPGPU_PER_NODE, OPT_VGPGPU_METHOD,
    OPT_VGPGPU_PER_NODE,
};

/// The vGPGPU state of one plugin instance.
#[derive(Debug, Default)]
pub struct Vgpgpu {
    options: RawVgpgpu,
    outcome: Option<Outcome>,
}

/// The options this half adds.
pub fn options() -> Vec<SpankOption> {
    vec![
        SpankOption {
            name: OPT_VGPGPU_PER_NODE,
            arginfo: Some("N"),
            usage: "Virtual GPGPUs per node from the cluster's registry, reached over rCUDA or VCL (cder; JDL VirtualGPGPUPerNode)",
        },
        SpankOption { name: OPT_VGPGPU_METHOD, arginfo: Some("rCUDA|VCL"), usage: "API interception for --vgpgpu-per-node (default rCUDA)" },
    ]
}

/// The registry section of the plugin's config.
fn registry_config(args: &PluginArgs) -> Result<RegistryConfig, String> {
    let path = args.config_path();
    let config = Config::load(Some(&path)).map_err(|e| e.to_string())?;
    config.registry.ok_or_else(|| format!("{}: no [registry] section", path.display()))
}

impl Vgpgpu {
    /// Records an option; false when `name` is not one of ours.
    pub fn option(&mut self, name: &str, value: Option<&str>) -> bool {
        let value = Some(value.unwrap_or("").to_string());
        match name {
            OPT_VGPGPU_PER_NODE => self.options.per_node = value,
            OPT_VGPGPU_METHOD => self.options.method = value,
            _ => return false,
        }
        self.options.origin = "--vgpgpu-per-node";
        true
    }

    /// Local/allocator context: hand the options to the controller.
    pub fn export(&self, spank: &Spank) -> SpankResult {
        if let Some(v) = &self.options.per_node {
            spank.job_control_setenv(CONTROL_VGPGPU_PER_NODE, v)?;
        }
        if let Some(v) = &self.options.method {
            spank.job_control_setenv(CONTROL_VGPGPU_METHOD, v)?;
        }
        Ok(())
    }

    /// Remote context, as root: get this node's backends.
    pub fn allocate(&mut self, spank: &Spank, args: &PluginArgs, job: &JobKey) {
        let jdl = RawVgpgpu {
            per_node: spank.getenv(JDL_VGPGPU_PER_NODE),
            method: spank.getenv(JDL_VGPGPU_METHOD).or_else(|| spank.getenv(JDL_VGPGPU_TYPE)),
            origin: JDL_VGPGPU_PER_NODE,
        };
        let req = match self.options.clone().or(jdl).parse() {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(message) => {
                self.outcome = Some(Outcome::Fail(format!("cder: {message}")));
                return;
            }
        };
        // The controller counted `vgpgpu` licences for the job at submit
        // time; a request in the job's environment or a step option must
        // not take more backends than that.
        let origin = if self.options.per_node.is_some() { "--vgpgpu-per-node" } else { JDL_VGPGPU_PER_NODE };
        let (granted, licences, nodes) = match spank.job_id().map_err(|e| e.to_string()).and_then(cder_slurm::sys::load_job) {
            Ok(g) => (granted_per_node(g.licenses.as_deref(), g.num_nodes), granted_licenses(g.licenses.as_deref()), g.nodes),
            Err(why) => {
                log(Level::Error, &format!("spank_cder: {job}: reading the job's vgpgpu licences from slurmctld: {why}"));
                (0, 0, None)
            }
        };
        if u64::from(req.per_node) > granted {
            let message = format!(
                "cder: {origin}={}: SLURM granted {job} {granted} vgpgpu licence(s) per node; ask when submitting (sbatch --vgpgpu-per-node={}); the step is not started",
                req.per_node, req.per_node
            );
            log(Level::Error, &format!("spank_cder: {message}"));
            self.outcome = Some(Outcome::Fail(message));
            return;
        }
        // The registry keys a job's backends by node: the name must be
        // slurmd's, never the step's SLURMD_NODENAME, which the user sets.
        let node = match super::node_name() {
            Some(n) if nodes.as_deref().is_none_or(|list| node_position(list, &n).is_some()) => n,
            other => {
                let message = format!(
                    "cder: this node ({}) is not among the nodes SLURM gave {job} ({}); no vGPGPU backends, the step is not started",
                    other.as_deref().unwrap_or("name unknown"),
                    nodes.as_deref().unwrap_or("?")
                );
                log(Level::Error, &format!("spank_cder: {message}"));
                self.outcome = Some(Outcome::Fail(message));
                return;
            }
        };
        // The registry's own fence: all nodes together stay within the
        // licences, whatever node names reach it.
        let job_limit = Some(u32::try_from(licences).unwrap_or(u32::MAX));
        let got = registry_config(args).and_then(|rc| {
            let client = Client::from_config(&rc).map_err(|e| e.to_string())?;
            let r = BackendRequest { job: job.clone(), count: req.per_node, node: node.clone(), method: req.method, uid: spank.job_uid().ok(), job_limit };
            let a = client.request_for(&r).map_err(|e| e.to_string())?;
            let nodefile = match req.method {
                cder_model::VgpgpuMethod::Vcl => {
                    let path: PathBuf = rc.vcl_dir.join(format!("{}-{node}.nodes", job.to_string().replace(':', "-")));
                    std::fs::create_dir_all(&rc.vcl_dir)
                        .and_then(|()| std::fs::write(&path, vcl_nodefile(&a.backends)))
                        .map_err(|e| format!("writing the VCL node file {}: {e}", path.display()))?;
                    Some(path)
                }
                cder_model::VgpgpuMethod::Rcuda => None,
            };
            Ok((a, nodefile))
        });
        self.outcome = Some(match got {
            Ok((a, nodefile)) => {
                log(
                    Level::Info,
                    &format!(
                        "spank_cder: {job}: {} {} backend(s) on {node}: {}",
                        a.backends.len(),
                        req.method,
                        a.backends.iter().map(|b| b.endpoint()).collect::<Vec<_>>().join(" ")
                    ),
                );
                Outcome::Env(job_environment(req.method, &a.backends, nodefile.as_deref()))
            }
            Err(why) => {
                log(Level::Error, &format!("spank_cder: {job}: {} {} vGPGPU(s): {why}", req.per_node, req.method));
                match args.fail {
                    FailMode::Closed => Outcome::Fail(format!("cder: {} {} vGPGPU(s) for {job}: {why} (fail=closed); the job is not started", req.per_node, req.method)),
                    // Without backends the job runs with none (count 0).
                    FailMode::Open => Outcome::Env(job_environment(req.method, &[], None)),
                }
            }
        });
    }

    /// In the task: set the variables, or refuse with the reason.
    pub fn task_init(&self, spank: &Spank) -> SpankResult {
        super::apply(self.outcome.as_ref(), spank)
    }

    /// Gives the job's backends (all nodes) back. Never fails: an epilog
    /// failure would drain the node. Jobs without vGPGPUs cost one request
    /// only where `[registry]` is configured.
    pub fn release(args: &PluginArgs, job: &JobKey, when: &str) {
        let Ok(rc) = registry_config(args) else { return };
        match Client::from_config(&rc).map_err(|e| e.to_string()).and_then(|c| c.release(job).map_err(|e| e.to_string())) {
            Ok(r) if r.released > 0 => log(Level::Info, &format!("spank_cder: {job}: {when}: released {} vGPGPU backend(s)", r.released)),
            Ok(_) => {}
            Err(e) => log(Level::Error, &format!("spank_cder: {job}: {when}: releasing vGPGPU backends: {e}")),
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_ours_only() {
        let mut v = Vgpgpu::default();
        assert!(v.option(OPT_VGPGPU_PER_NODE, Some("3")));
        assert!(v.option(OPT_VGPGPU_METHOD, Some("VCL")));
        assert!(!v.option("gpgpu-per-node", Some("1")));
        let req = v.options.parse().unwrap().unwrap();
        assert_eq!((req.per_node, req.method), (3, cder_model::VgpgpuMethod::Vcl));
        assert_eq!(options().len(), 2);
    }

    #[test]
    fn a_config_without_registry_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cder.toml");
        std::fs::write(&path, "[node]\n").unwrap();
        let args = PluginArgs { config: Some(path.clone()), ..PluginArgs::default() };
        let e = registry_config(&args).unwrap_err();
        assert!(e.contains(&path.display().to_string()) && e.contains("[registry]"), "{e}");
        let args = PluginArgs { config: Some(dir.path().join("missing.toml")), ..PluginArgs::default() };
        assert!(registry_config(&args).unwrap_err().contains("missing.toml"));
    }

    #[test]
    fn cder_config_in_the_environment_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        std::fs::write(&user, "[registry]\nurl = \"http://user.example:1\"\n").unwrap();
        // The only test here that touches the environment.
        std::env::set_var(cder_model::config::CONFIG_ENV, &user);
        let got = registry_config(&PluginArgs::default());
        std::env::remove_var(cder_model::config::CONFIG_ENV);
        match got {
            Ok(rc) => assert_ne!(rc.url, "http://user.example:1", "the plugin read $CDER_CONFIG"),
            Err(e) => assert!(e.contains(cder_model::DEFAULT_CONFIG_PATH) && !e.contains("user.toml"), "{e}"),
        }
    }
}
