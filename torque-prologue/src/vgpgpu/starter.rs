//! The job starter's part: the job's rCUDA / VCL environment from the
//! registry.

use cder_model::{Config, JobEnvironment, JobKey, VgpgpuMethod};
use cder_registry_client::RegistryClient;

/// In the job, as its user (`cder-job-starter`): the rCUDA / VCL
/// environment of the backends the monitor requested for `job` (the
/// registry lets a job's owner read its allocation). `None` when `[registry]`
/// is not configured or the job holds no backends. For VCL the node file is
/// written into the user's temp dir.
pub fn job_environment(config: &Config, job: &JobKey) -> Result<Option<JobEnvironment>, String> {
    let Some(rc) = &config.registry else { return Ok(None) };
    let client = RegistryClient::from_config(rc).map_err(|e| e.to_string())?;
    let held = match client.allocation(job) {
        Ok(h) => h,
        Err(e) if e.code() == Some(cder_registry_client::ApiErrorCode::NotFound) => return Ok(None),
        Err(e) => return Err(format!("vGPGPU registry: {e}")),
    };
    let Some(method) = held.allocations.first().map(|a| a.method) else { return Ok(None) };
    let backends = held.backends();
    let nodefile = match method {
        VgpgpuMethod::Vcl => {
            let path =
                std::env::temp_dir().join(format!("cder-vcl-{}.nodes", job.to_string().replace([':', '/'], "-")));
            std::fs::write(&path, cder_registry_client::env::vcl_nodefile(&backends))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Some(path)
        }
        VgpgpuMethod::Rcuda => None,
    };
    Ok(Some(cder_registry_client::env::job_environment(method, &backends, nodefile.as_deref())))
}
