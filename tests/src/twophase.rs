//! A small grid for the two-phase tests: three sites with different GPUs,
//! published by the real `cder-glue-provider`, two sites without GPUs, and
//! what each CE's own information providers add (ComputingShares with
//! their MappingPolicies, ComputingEndpoints; GLUE 1.3 GlueCEs), as CREAM's
//! GIP publishes them.
//!
//! | CE | LRMS | GPUs | per node | memory MB | CC | vGPGPU | queues (VOs) |
//! |---|---|---|---|---|---|---|---|
//! | ce-a | SLURM | Tesla K20m | 2 | 4800 | 3.5 | rCUDA 8 (6 free) | gpu (gputestvo, atlas), atlasgpu (atlas) |
//! | ce-b | TORQUE | GeForce GTX 680 | 4 | 2048 | 3.0 | VCL 20 (10 free) | gpgpu (gputestvo) |
//! | ce-c | SLURM | FirePro S9150 (AMD) | 1 | 16384 | — | — | gpu (gputestvo) |
//! | ce-d, ce-e | PBS | none | | | | | long, short (gputestvo) |

use std::path::{Path, PathBuf};

/// The VO every test site supports.
pub const VO: &str = "gputestvo";

/// One GPU site.
#[derive(Clone, Debug)]
pub struct GpuSite {
    /// Host name (`ce-a.example.org`).
    pub host: String,
    /// `SLURM` / `TORQUE`.
    pub lrms: String,
    /// The EE (node group) id.
    pub group: String,
    /// Nodes in the group.
    pub nodes: u32,
    /// The provider's `[[group.device]]` table body.
    pub device: String,
    /// Free, used devices (static counts).
    pub free: u32,
    /// Devices in use.
    pub used: u32,
    /// `[[virtual]]` method, total, free.
    pub virtual_gpgpu: Option<(String, u32, u32)>,
    /// Queues: (name, VOs, estimated waiting time s, free slots).
    pub queues: Vec<(String, Vec<String>, u32, u32)>,
}

impl GpuSite {
    /// The ComputingService id.
    pub fn service(&self) -> String {
        format!("{}_ComputingElement", self.host)
    }
    /// The CE id of a queue (`GlueCEUniqueID`, CREAM's form).
    pub fn ce_id(&self, queue: &str) -> String {
        format!("{}:8443/cream-{}-{queue}", self.host, self.lrms.to_ascii_lowercase())
    }
    /// The provider config.
    pub fn provider_config(&self) -> String {
        let first_queue = self.queues.first().map(|q| q.0.clone()).unwrap_or_default();
        let mut s = format!(
            "[site]\ncomputing_service_id = \"{svc}\"\ncomputing_manager_id = \"{svc}_Manager\"\nce_unique_id = \"{ce}\"\ncluster_id = \"{host}\"\n\n\
             [service]\ntype = \"org.glite.ce.CREAM\"\nadmin_domain = \"{host}\"\nmanager_product = \"{lrms}\"\nmanager_version = \"{version}\"\n\n\
             [counts]\nsource = \"static\"\n\n[[group]]\nid = \"{group}\"\nnodes = [\"wn[001-{nodes:03}]\"]\nplatform = \"amd64\"\nmain_memory_mib = 65536\nlogical_cpus = 16\nphysical_cpus = 2\n\
             virtual_memory_mib = 65536\nos_name = \"CentOS\"\nos_version = \"7.9\"\n\n\
             [[group.device]]\n{device}\nfree = {free}\nused = {used}\noffline = 0\n",
            svc = self.service(),
            ce = self.ce_id(&first_queue),
            host = self.host,
            lrms = self.lrms,
            // The releases these fixtures' outputs are written after.
            version = if self.lrms == "TORQUE" { "6.1.3" } else { "22.05.8" },
            group = self.group,
            nodes = self.nodes,
            device = self.device.trim(),
            free = self.free,
            used = self.used,
        );
        if let Some((m, total, free)) = &self.virtual_gpgpu {
            s.push_str(&format!("\n[[virtual]]\nmethod = \"{m}\"\ntotal = {total}\nfree = {free}\n"));
        }
        s
    }
}

/// The three GPU sites of the table above.
pub fn gpu_sites() -> Vec<GpuSite> {
    let q = |name: &str, vos: &[&str], wait: u32, free: u32| {
        (name.to_string(), vos.iter().map(|v| v.to_string()).collect(), wait, free)
    };
    vec![
        GpuSite {
            host: "ce-a.example.org".into(),
            lrms: "SLURM".into(),
            group: "ce-a_k20".into(),
            nodes: 4,
            device: "model = \"Tesla K20m\"\ncount = 2\nmemory_mib = 4800\ncompute_capability = \"3.5\"\nmultiprocessors = 13\ncores_per_mp = 192\nclock_mhz = 705\necc = true".into(),
            free: 5,
            used: 3,
            virtual_gpgpu: Some(("rCUDA".into(), 8, 6)),
            queues: vec![q("gpu", &[VO, "atlas"], 120, 40), q("atlasgpu", &["atlas"], 60, 10)],
        },
        GpuSite {
            host: "ce-b.example.org".into(),
            lrms: "TORQUE".into(),
            group: "ce-b_gtx680".into(),
            nodes: 2,
            device: "model = \"GeForce GTX 680\"\ncount = 4\nmemory_mib = 2048\ncompute_capability = \"3.0\"\nmultiprocessors = 8\ncores_per_mp = 192\nclock_mhz = 1006\necc = false".into(),
            free: 8,
            used: 0,
            virtual_gpgpu: Some(("VCL".into(), 20, 10)),
            queues: vec![q("gpgpu", &[VO], 30, 16)],
        },
        GpuSite {
            host: "ce-c.example.org".into(),
            lrms: "SLURM".into(),
            group: "ce-c_s9150".into(),
            nodes: 8,
            device: "model = \"FirePro S9150\"\nvendor = \"AMD\"\ncount = 1\nmemory_mib = 16384\nclock_mhz = 900\necc = true".into(),
            free: 2,
            used: 6,
            virtual_gpgpu: None,
            queues: vec![q("gpu", &[VO], 600, 4)],
        },
    ]
}

/// The site of a local SLURM CE whose partition `debug` has `gpus` GPUs on one node.
pub fn local_slurm_site(gpus: u32) -> GpuSite {
    GpuSite {
        host: "localhost".into(),
        lrms: "SLURM".into(),
        group: "localhost_gpu".into(),
        nodes: 1,
        device: format!("model = \"Tesla K20m\"\ncount = {gpus}\nmemory_mib = 4800\ncompute_capability = \"3.5\""),
        free: gpus,
        used: 0,
        virtual_gpgpu: None,
        queues: vec![("debug".into(), vec![VO.into()], 0, 8)],
    }
}

/// The CE ids the tests expect, by site index and queue.
pub fn ce(site: usize, queue: &str) -> String {
    gpu_sites()[site].ce_id(queue)
}

/// GLUE 2.0 shares (with MappingPolicies) and the endpoint of a CE, as CREAM's providers publish them.
pub fn ce_glue2_ldif(
    host: &str,
    lrms: &str,
    service: &str,
    ee: Option<&str>,
    queues: &[(String, Vec<String>, u32, u32)],
) -> String {
    let sdn = format!("GLUE2ServiceID={service},GLUE2GroupID=resource,o=glue");
    let mut s = format!(
        "dn: GLUE2EndpointID={host}_org.glite.ce.CREAM,{sdn}\nobjectClass: GLUE2Endpoint\nobjectClass: GLUE2ComputingEndpoint\n\
         GLUE2EndpointID: {host}_org.glite.ce.CREAM\nGLUE2EndpointURL: https://{host}:8443/ce-cream/services\n\
         GLUE2EndpointInterfaceName: org.glite.ce.CREAM\nGLUE2EndpointQualityLevel: production\nGLUE2EndpointHealthState: ok\n\
         GLUE2EndpointServingState: production\nGLUE2EndpointImplementationName: CREAM\nGLUE2EndpointServiceForeignKey: {service}\n\
         GLUE2ComputingEndpointComputingServiceForeignKey: {service}\n\n"
    );
    for (queue, vos, wait, free) in queues {
        let share = format!("{queue}_{service}");
        s.push_str(&format!(
            "dn: GLUE2ShareID={share},{sdn}\nobjectClass: GLUE2Share\nobjectClass: GLUE2ComputingShare\nGLUE2ShareID: {share}\n\
             GLUE2ShareServiceForeignKey: {service}\nGLUE2ComputingShareComputingServiceForeignKey: {service}\n\
             GLUE2ShareEndpointForeignKey: {host}_org.glite.ce.CREAM\nGLUE2ComputingShareMappingQueue: {queue}\n\
             GLUE2ComputingShareServingState: production\nGLUE2ComputingShareFreeSlots: {free}\nGLUE2ComputingShareRunningJobs: 3\n\
             GLUE2ComputingShareWaitingJobs: 0\nGLUE2ComputingShareTotalJobs: 3\nGLUE2ComputingShareEstimatedAverageWaitingTime: {wait}\n\
             GLUE2ComputingShareEstimatedWorstWaitingTime: {worst}\nGLUE2ComputingShareMaxWallTime: 259200\n\
             GLUE2EntityOtherInfo: CREAMCEId={host}:8443/cream-{lrms}-{queue}\nGLUE2EntityOtherInfo: InfoProviderName=glite-ce-glue2-share-static\n",
            worst = wait * 4,
            lrms = lrms.to_ascii_lowercase(),
        ));
        if let Some(ee) = ee {
            s.push_str(&format!(
                "GLUE2ComputingShareExecutionEnvironmentForeignKey: {ee}\nGLUE2ShareResourceForeignKey: {ee}\n"
            ));
        }
        s.push('\n');
        s.push_str(&format!(
            "dn: GLUE2PolicyID={share}_policy,GLUE2ShareID={share},{sdn}\nobjectClass: GLUE2Policy\nobjectClass: GLUE2MappingPolicy\n\
             GLUE2PolicyID: {share}_policy\nGLUE2PolicyScheme: org.glite.standard\n{rules}GLUE2MappingPolicyShareForeignKey: {share}\n\n",
            rules = vos.iter().map(|v| format!("GLUE2PolicyRule: VO:{v}\n")).collect::<String>(),
        ));
    }
    s
}

/// GLUE 1.3 GlueCEs of a site's queues (the cluster comes from the provider's tagged-environment strategy).
pub fn ce_glue13_ldif(site: &GpuSite) -> String {
    let mut s = String::new();
    for (queue, vos, wait, free) in &site.queues {
        let id = site.ce_id(queue);
        s.push_str(&format!(
            "dn: GlueCEUniqueID={id},mds-vo-name=resource,o=grid\nobjectClass: GlueCETop\nobjectClass: GlueCE\nobjectClass: GlueCEInfo\n\
             objectClass: GlueCEState\nobjectClass: GlueCEPolicy\nobjectClass: GlueCEAccessControlBase\nobjectClass: GlueKey\n\
             objectClass: GlueSchemaVersion\nGlueCEUniqueID: {id}\nGlueCEName: {queue}\nGlueCEInfoHostName: {host}\n\
             GlueCEInfoLRMSType: {lrms}\nGlueCEStateStatus: Production\nGlueCEStateEstimatedResponseTime: {wait}\n\
             GlueCEStateFreeCPUs: {free}\nGlueCEStateFreeJobSlots: {free}\n{rules}GlueForeignKey: GlueClusterUniqueID={host}\n\
             GlueSchemaVersionMajor: 1\nGlueSchemaVersionMinor: 3\n\n",
            host = site.host,
            lrms = site.lrms.to_ascii_lowercase(),
            rules = vos.iter().map(|v| format!("GlueCEAccessControlBaseRule: VO:{v}\n")).collect::<String>(),
        ));
    }
    s
}

/// A site without GPUs: service, manager, one plain EE, two queues, an endpoint.
pub fn plain_site_ldif(host: &str) -> String {
    let service = format!("{host}_ComputingElement");
    let sdn = format!("GLUE2ServiceID={service},GLUE2GroupID=resource,o=glue");
    let mut s = format!(
        "dn: {sdn}\nobjectClass: GLUE2Service\nobjectClass: GLUE2ComputingService\nGLUE2ServiceID: {service}\n\
         GLUE2ServiceType: org.glite.ce.CREAM\nGLUE2ServiceQualityLevel: production\nGLUE2ServiceAdminDomainForeignKey: {host}\n\n\
         dn: GLUE2ManagerID={service}_Manager,{sdn}\nobjectClass: GLUE2Manager\nobjectClass: GLUE2ComputingManager\n\
         GLUE2ManagerID: {service}_Manager\nGLUE2ManagerProductName: PBS\nGLUE2ManagerServiceForeignKey: {service}\n\
         GLUE2ComputingManagerComputingServiceForeignKey: {service}\n\n\
         dn: GLUE2ResourceID={host}_wn,{sdn}\nobjectClass: GLUE2Resource\nobjectClass: GLUE2ExecutionEnvironment\n\
         GLUE2ResourceID: {host}_wn\nGLUE2ResourceManagerForeignKey: {service}_Manager\nGLUE2ExecutionEnvironmentPlatform: amd64\n\
         GLUE2ExecutionEnvironmentTotalInstances: 40\nGLUE2ExecutionEnvironmentMainMemorySize: 32768\nGLUE2ExecutionEnvironmentOSFamily: linux\n\
         GLUE2ExecutionEnvironmentConnectivityIn: false\nGLUE2ExecutionEnvironmentConnectivityOut: true\n\
         GLUE2ExecutionEnvironmentComputingManagerForeignKey: {service}_Manager\nGLUE2EntityOtherInfo: SmpSize=8\n\n"
    );
    let queues = vec![
        ("long".to_string(), vec![VO.to_string()], 3600, 100),
        ("short".to_string(), vec![VO.to_string()], 10, 100),
    ];
    s.push_str(&ce_glue2_ldif(host, "pbs", &service, Some(&format!("{host}_wn")), &queues));
    s
}

/// Runs the real provider for `site` with `strategies` (config written into `dir`).
pub fn provider_ldif(provider: &Path, site: &GpuSite, strategies: &[&str], dir: &Path) -> Result<String, String> {
    let config = dir.join(format!("{}.toml", site.host));
    std::fs::write(&config, site.provider_config()).map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(provider);
    cmd.arg("--config").arg(&config).stdin(std::process::Stdio::null());
    for s in strategies {
        cmd.args(["--strategy", s]);
    }
    let out = cmd.output().map_err(|e| format!("running {}: {e}", provider.display()))?;
    if !out.status.success() {
        return Err(format!("cder-glue-provider for {} failed: {}", site.host, String::from_utf8_lossy(&out.stderr)));
    }
    String::from_utf8(out.stdout).map_err(|e| e.to_string())
}

/// The whole grid's LDIF (without the BDII's top entries): the provider's
/// output for each GPU site with `strategies`, each CE's shares, endpoints
/// and (with `tagged-environment`) GlueCEs, and `plain_sites` sites without GPUs.
pub fn grid_ldif(
    provider: &Path,
    sites: &[GpuSite],
    strategies: &[&str],
    plain_sites: usize,
    dir: &Path,
) -> Result<String, String> {
    let mut ldif = String::new();
    for site in sites {
        ldif.push_str(&provider_ldif(provider, site, strategies, dir)?);
        ldif.push('\n');
        ldif.push_str(&ce_glue2_ldif(&site.host, &site.lrms, &site.service(), Some(&site.group), &site.queues));
        if strategies.contains(&"tagged-environment") {
            ldif.push_str(&ce_glue13_ldif(site));
        }
    }
    for i in 0..plain_sites {
        ldif.push_str(&plain_site_ldif(&format!("ce-plain{i}.example.org")));
    }
    Ok(ldif)
}

/// A workspace binary, freshly built ([`cder_testkit::built`]).
fn binary(package: &str, name: &str) -> PathBuf {
    cder_testkit::built(package, name)
}

/// The `cder-jdl` binary, freshly built.
pub fn cder_jdl() -> PathBuf {
    binary("cder-jdl", "cder-jdl")
}

/// The environment the tests run `cder-jdl list-match` and `submit` in:
/// index snapshots in `dir` (never the user's own cache, where another
/// test's BDII on a reused port may have left one), and a maximum age of 0,
/// so that each call checks the BDII first and answers, through the index,
/// from the BDII as it is now.
pub fn index_env(dir: &Path) -> [(&'static str, std::ffi::OsString); 2] {
    [("CDER_INDEX_DIR", dir.join("cder-index").into_os_string()), ("CDER_INDEX_MAX_AGE", "0".into())]
}

/// The provider binary, freshly built.
pub fn provider() -> PathBuf {
    binary("cder-glue-provider", "cder-glue-provider")
}
