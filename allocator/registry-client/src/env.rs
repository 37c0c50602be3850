//! The API-interception environment a job's frontend gets for its backends.
//!
//! * rCUDA: `RCUDA_DEVICE_COUNT=n` and `RCUDA_DEVICE_<j>=<host>@<port>:0`
//!   for j in 0..n. Each backend is an rCUDA server pinned to one GPU
//!   (`CUDA_VISIBLE_DEVICES=<device>`), so within it that GPU is number 0;
//!   the port tells apart the servers of one host (rCUDA's `server@port`
//!   form). The local `CUDA_VISIBLE_DEVICES` is left alone: the job's CUDA
//!   calls go to the rCUDA library, not to local GPUs.
//! * VCL: a node file listing the backends, one `<host>:<port>` per line,
//!   named by `VCL_NODEFILE`; `VCL_DEVICE_COUNT=n`.

use std::collections::BTreeMap;
use std::path::Path;

use cder_model::{JobEnvironment, VgpgpuMethod};

use crate::api::Backend;

/// The variables for `backends` under `method`. For VCL, `vcl_nodefile` is
/// where [`vcl_nodefile`]'s text was (or will be) written.
pub fn job_environment(method: VgpgpuMethod, backends: &[Backend], vcl_nodefile: Option<&Path>) -> JobEnvironment {
    let mut env = BTreeMap::new();
    match method {
        VgpgpuMethod::Rcuda => {
            env.insert("RCUDA_DEVICE_COUNT".to_string(), backends.len().to_string());
            for (j, b) in backends.iter().enumerate() {
                env.insert(format!("RCUDA_DEVICE_{j}"), format!("{}@{}:0", b.host, b.port));
            }
        }
        VgpgpuMethod::Vcl => {
            env.insert("VCL_DEVICE_COUNT".to_string(), backends.len().to_string());
            if let Some(p) = vcl_nodefile {
                env.insert("VCL_NODEFILE".to_string(), p.display().to_string());
            }
        }
    }
    JobEnvironment(env)
}

/// The VCL node file: one `host:port` per backend.
pub fn vcl_nodefile(backends: &[Backend]) -> String {
    backends.iter().map(|b| format!("{}\n", b.endpoint())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(host: &str, port: u16) -> Backend {
        Backend { uuid: format!("GPU-{host}-{port}"), vendor: "Nvidia".into(), host: host.into(), port, device: 0 }
    }

    #[test]
    fn rcuda_lists_every_endpoint_in_order() {
        let env = job_environment(VgpgpuMethod::Rcuda, &[b("n1", 8308), b("n2", 8309), b("n2", 8308)], None);
        assert_eq!(env.get("RCUDA_DEVICE_COUNT"), Some("3"));
        assert_eq!(env.get("RCUDA_DEVICE_1"), Some("n2@8309:0"));
        assert_eq!(env.get("RCUDA_DEVICE_2"), Some("n2@8308:0"));
        assert_eq!(env.get("RCUDA_DEVICE_3"), None);
    }

    #[test]
    fn vcl_names_its_node_file() {
        let backends = [b("n1", 8308), b("n2", 8310)];
        let env = job_environment(VgpgpuMethod::Vcl, &backends, Some(Path::new("/run/x/vcl.nodes")));
        assert_eq!(env.get("VCL_NODEFILE"), Some("/run/x/vcl.nodes"));
        assert_eq!(env.get("VCL_DEVICE_COUNT"), Some("2"));
        assert_eq!(vcl_nodefile(&backends), "n1:8308\nn2:8310\n");
    }
}
