//! vGPGPU requests (seed thesis §4.2.3, SLURM use-case): a job asks for
//! `--vgpgpu-per-node=N` backends of one API-interception method
//! (`--vgpgpu-method=rCUDA|VCL`, default rCUDA), or a CE passes the JDL keys
//! `VirtualGPGPUPerNode` / `VirtualGPGPUMethod` (alias `VirtualGPGPUType`)
//! in its environment. The controller turns it into `licenses=vgpgpu:N×nodes`
//! (SLURM's counting semaphore, sized to the registry's total by the admin:
//! `cderctl registry slurm-licenses`), and on each node the SPANK plugin
//! requests N backends from the registry and sets the rCUDA / VCL
//! environment.

use cder_request::keys::{VIRTUAL_GPGPU_METHOD, VIRTUAL_GPGPU_PER_NODE, VIRTUAL_GPGPU_TYPE};
use cder_request::VgpgpuRequest;

use crate::request::{env_lookup, CONTROL_PREFIX};

/// `--vgpgpu-per-node=N`.
pub const OPT_VGPGPU_PER_NODE: &str = "vgpgpu-per-node";
/// `--vgpgpu-method=rCUDA|VCL`.
pub const OPT_VGPGPU_METHOD: &str = "vgpgpu-method";
/// The job-control twins the controller reads.
pub const CONTROL_VGPGPU_PER_NODE: &str = "CDER_VGPGPU_PER_NODE";
/// Job-control twin of `--vgpgpu-method`.
pub const CONTROL_VGPGPU_METHOD: &str = "CDER_VGPGPU_METHOD";
/// The SLURM licence that counts backends.
pub const LICENSE: &str = cder_request::lrms::VGPGPU_LICENCE;

/// The raw values, wherever they came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawVgpgpu {
    /// The per-node count as given.
    pub per_node: Option<String>,
    /// The method as given.
    pub method: Option<String>,
    /// Where they came from, for messages (`--vgpgpu-per-node`, `VirtualGPGPUPerNode`).
    pub origin: &'static str,
}

impl RawVgpgpu {
    /// From `spank_job_env` (controller: unprefixed; prolog: `SPANK_`).
    pub fn from_control_env<S: AsRef<str>>(spank_job_env: &[S]) -> RawVgpgpu {
        let get = |name: &str| {
            env_lookup(spank_job_env, name)
                .or_else(|| env_lookup(spank_job_env, &format!("{CONTROL_PREFIX}{name}")))
                .map(str::to_string)
        };
        RawVgpgpu {
            per_node: get(CONTROL_VGPGPU_PER_NODE),
            method: get(CONTROL_VGPGPU_METHOD),
            origin: "--vgpgpu-per-node",
        }
    }

    /// From the JDL keys in a job's environment.
    pub fn from_jdl_env<S: AsRef<str>>(environment: &[S]) -> RawVgpgpu {
        RawVgpgpu {
            per_node: env_lookup(environment, VIRTUAL_GPGPU_PER_NODE).map(str::to_string),
            method: env_lookup(environment, VIRTUAL_GPGPU_METHOD)
                .or_else(|| env_lookup(environment, VIRTUAL_GPGPU_TYPE))
                .map(str::to_string),
            origin: VIRTUAL_GPGPU_PER_NODE,
        }
    }

    /// Options win over JDL keys.
    pub fn or(self, fallback: RawVgpgpu) -> RawVgpgpu {
        if self.per_node.is_some() || self.method.is_some() {
            self
        } else {
            fallback
        }
    }

    /// `None` when no vGPGPU was asked for; a message naming the option or
    /// key when a value is bad. The reading is `cder_request`'s, shared by
    /// every door: a count from 1 to 4096 (0 refused), rCUDA when no method
    /// is named, a method without a count refused.
    pub fn parse(&self) -> Result<Option<VgpgpuRequest>, String> {
        let read = cder_request::VgpgpuRequest::read(self.per_node.as_deref(), self.method.as_deref());
        match read {
            Ok(r) => Ok(r),
            Err(cder_request::VgpgpuError::Count(e)) => {
                Err(format!("{}={:?}: {e}", self.origin, self.per_node.as_deref().unwrap_or_default()))
            }
            Err(cder_request::VgpgpuError::Method(e)) => Err(format!("vGPGPU method: {e}")),
            Err(cder_request::VgpgpuError::MethodWithoutCount) => Err(format!(
                "a vGPGPU method ({}) was given without {}",
                self.method.as_deref().unwrap_or_default(),
                self.origin
            )),
        }
    }
}

/// `licenses` with the `vgpgpu` count set to `total` (replacing any the
/// user wrote, keeping other licences): `matlab:1` → `matlab:1,vgpgpu:6`.
pub fn licenses_with(existing: Option<&str>, total: u64) -> String {
    let mut items: Vec<String> = existing
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .filter(|i| {
            let name = i.split([':', '*']).next().unwrap_or("");
            // `vgpgpu`, or `vgpgpu@server` for a remote licence of that name.
            name != LICENSE && !name.starts_with(&format!("{LICENSE}@"))
        })
        .map(str::to_string)
        .collect();
    items.push(format!("{LICENSE}:{total}"));
    items.join(",")
}

/// The node count a job_desc asks for: `min_nodes`, or 1 when unset
/// (SLURM's NO_VAL / 0).
pub fn nodes_of(min_nodes: u32) -> u64 {
    if min_nodes == 0 || min_nodes >= 0xffff_fffe {
        1
    } else {
        u64::from(min_nodes)
    }
}

/// The `vgpgpu` licences a job of `per_node` backends on `min_nodes`
/// nodes takes: [`cder_request::job_total`], refused above its bound.
pub fn licence_total(per_node: u32, min_nodes: u32) -> Result<u32, String> {
    let nodes = nodes_of(min_nodes);
    cder_request::job_total(per_node, nodes).ok_or_else(|| {
        format!("cder: {per_node} vGPGPUs per node on {nodes} nodes exceed {} for one job", cder_request::MAX_JOB_TOTAL)
    })
}

/// The `vgpgpu` licences a job record holds (`licenses` as slurmctld
/// reports it: `vgpgpu:6`, `matlab:1,vgpgpu*2`), summed.
pub fn granted_licenses(licenses: Option<&str>) -> u64 {
    licenses
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter_map(|item| {
            let (name, count) = match item.split_once([':', '*']) {
                Some((n, c)) => (n, c.trim().parse::<u64>().ok()?),
                None => (item, 1),
            };
            (name == LICENSE).then_some(count)
        })
        .sum()
}

/// Backends per node the controller granted: the job's `vgpgpu` licences
/// divided by its nodes (job_submit sets N × nodes).
pub fn granted_per_node(licenses: Option<&str>, num_nodes: u32) -> u64 {
    granted_licenses(licenses) / u64::from(num_nodes.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cder_request::VgpgpuMethod;

    #[test]
    fn options_win_and_values_are_checked() {
        let opts = RawVgpgpu::from_control_env(&["CDER_VGPGPU_PER_NODE=3", "CDER_VGPGPU_METHOD=vcl"]);
        let jdl = RawVgpgpu::from_jdl_env(&["VirtualGPGPUPerNode=1", "VirtualGPGPUType=rCUDA"]);
        assert_eq!(
            opts.clone().or(jdl.clone()).parse().unwrap(),
            Some(VgpgpuRequest { per_node: 3, method: VgpgpuMethod::Vcl })
        );
        assert_eq!(
            RawVgpgpu::default().or(jdl).parse().unwrap(),
            Some(VgpgpuRequest { per_node: 1, method: VgpgpuMethod::Rcuda })
        );
        let prolog = RawVgpgpu::from_control_env(&["SPANK_CDER_VGPGPU_PER_NODE=2"]);
        assert_eq!(prolog.parse().unwrap().unwrap().per_node, 2);
        // 0 is refused on every door (cder_request): leave the option out to ask for none.
        assert!(RawVgpgpu::from_control_env(&["CDER_VGPGPU_PER_NODE=0"]).parse().unwrap_err().contains("at least 1"));
        let e = RawVgpgpu::from_control_env(&["CDER_VGPGPU_PER_NODE=three"]).parse().unwrap_err();
        assert!(e.contains("--vgpgpu-per-node") && e.contains("three"), "{e}");
        let e = RawVgpgpu::from_jdl_env(&["VirtualGPGPUPerNode=1", "VirtualGPGPUMethod=CUDA"]).parse().unwrap_err();
        assert!(e.contains("CUDA"), "{e}");
        assert!(RawVgpgpu::from_control_env(&["CDER_VGPGPU_METHOD=VCL"]).parse().is_err());
    }

    #[test]
    fn granted_licences_are_read_from_the_job_record() {
        assert_eq!(granted_licenses(Some("vgpgpu:6")), 6);
        assert_eq!(granted_licenses(Some("matlab:1,vgpgpu*2")), 2);
        assert_eq!(granted_licenses(Some("vgpgpuX:5,matlab")), 0);
        assert_eq!(granted_licenses(None), 0);
        assert_eq!(granted_per_node(Some("vgpgpu:6"), 2), 3);
        assert_eq!(granted_per_node(Some("vgpgpu:6"), 0), 6);
    }

    #[test]
    fn licences_keep_others_and_replace_ours() {
        assert_eq!(licenses_with(None, 6), "vgpgpu:6");
        assert_eq!(licenses_with(Some("matlab:1, vgpgpu:2"), 6), "matlab:1,vgpgpu:6");
        assert_eq!(licenses_with(Some("vgpgpu*9,fluent"), 3), "fluent,vgpgpu:3");
        assert_eq!(licenses_with(Some("vgpgpuX:1"), 3), "vgpgpuX:1,vgpgpu:3");
        assert_eq!(nodes_of(0xffff_fffe), 1);
        assert_eq!(nodes_of(2), 2);
        assert_eq!(licence_total(3, 2), Ok(6));
        assert_eq!(licence_total(3, 0), Ok(3));
        let e = licence_total(4096, 17).unwrap_err();
        assert!(e.contains("exceed 65536"), "{e}");
    }
}
