//! A synthetic EGI-like GLUE 2.0 snapshot for the thesis's Table 3.4
//! experiment: a top-level BDII holding more than 10^5 GLUE 2.0 entities,
//! of which some ComputingShares carry GPU data, as Attribute-Extension
//! (12 `GLUE2EntityOtherInfo` keys each) or Class-Extension (12
//! `GLUE2Extension` objects each).
//!
//! The shape follows what EGI's CREAM CEs publish per CE: a
//! ComputingService, its ComputingManager, two ComputingEndpoints with
//! AccessPolicies, two ExecutionEnvironments with Benchmarks, one
//! ComputingShare (and MappingPolicy) per queue and VO, and dozens of
//! ApplicationEnvironments (software tags); per site an AdminDomain, a
//! Location and Contacts. The GPU shares are picked by a fixed
//! pseudo-random sequence, so a snapshot is reproducible.

use std::fmt::Write;

/// Where the GPU data goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// 12 `GLUE2EntityOtherInfo: Key=Value` on each GPU share.
    AttributeExtension,
    /// 12 `GLUE2Extension` children of each GPU share.
    ClassExtension,
}

/// Snapshot parameters.
#[derive(Clone, Debug)]
pub struct SnapshotSpec {
    /// Computing Elements (two per site).
    pub ces: usize,
    /// Queues per CE.
    pub queues: usize,
    /// VOs per queue (one share each).
    pub vos: usize,
    /// ApplicationEnvironments per CE.
    pub app_envs: usize,
    /// Shares that carry GPU data.
    pub gpu_shares: usize,
    /// How the GPU data is published.
    pub strategy: Strategy,
}

impl SnapshotSpec {
    /// The thesis's scale: ≥ 10^5 entities, 100 GPU shares.
    pub fn thesis(strategy: Strategy) -> SnapshotSpec {
        SnapshotSpec { ces: 830, queues: 10, vos: 4, app_envs: 30, gpu_shares: 100, strategy }
    }
}

/// What a snapshot holds.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The LDIF, top entries included (ready for `slapadd`).
    pub ldif: String,
    /// GLUE 2.0 entities (every entry under `o=glue` but the groups and `o=glue`).
    pub entities: usize,
    /// ComputingShares.
    pub shares: usize,
    /// `GLUE2Extension` objects.
    pub extensions: usize,
    /// The GPU shares: (CE id, vendor, memory MB), in generation order.
    pub gpu: Vec<(String, String, u32)>,
}

/// A small deterministic generator (64-bit LCG, Knuth's constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const VOS: [&str; 8] = ["atlas", "cms", "lhcb", "alice", "biomed", "gputestvo", "ops", "dteam"];
const MODELS: [(&str, &str, u32, &str, u32, u32, u32); 6] = [
    // vendor, model, memory MB, CC, MPs, cores/MP, clock MHz
    ("Nvidia", "GeForce GTS 450", 1024, "2.1", 4, 48, 1660),
    ("Nvidia", "Tesla M2090", 6144, "2.0", 16, 32, 1300),
    ("Nvidia", "Tesla K20m", 4800, "3.5", 13, 192, 705),
    ("Nvidia", "Tesla K40m", 12288, "3.5", 15, 192, 745),
    ("AMD", "FirePro S9150", 16384, "", 44, 64, 900),
    ("Nvidia", "Quadro 600", 512, "2.1", 2, 48, 1280),
];

/// The 12 GPU keys of a share (thesis Listing 3.9's keys).
fn gpu_keys(rng: &mut Lcg) -> (Vec<(String, String)>, (String, u32)) {
    let (vendor, model, mem, cc, mp, cpm, clock) = MODELS[rng.below(MODELS.len())];
    let per_node = [1, 2, 4][rng.below(3)];
    let nodes = 1 + rng.below(16) as u32;
    let total = per_node * nodes;
    let used = rng.below(total as usize + 1) as u32;
    let cc = if cc.is_empty() { "0.0" } else { cc };
    let keys = vec![
        ("GPGPUTotalInstances", total.to_string()),
        ("GPGPUUsedInstances", used.to_string()),
        ("GPGPUCUDAComputeCapability", cc.to_string()),
        ("GPGPUMainMemorySize", mem.to_string()),
        ("GPGPUMP", mp.to_string()),
        ("GPGPUCoresPerMP", cpm.to_string()),
        ("GPGPUCores", (mp * cpm).to_string()),
        ("GPGPUClockSpeed", clock.to_string()),
        ("GPGPUECCSupport", (model.starts_with("Tesla") || vendor == "AMD").to_string()),
        ("GPGPUVendor", vendor.to_string()),
        ("GPGPUModel", model.to_string()),
        ("GPGPUPerNode", per_node.to_string()),
    ];
    (keys.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), (vendor.to_string(), mem))
}

/// Generates a snapshot.
pub fn generate(spec: &SnapshotSpec) -> Snapshot {
    let mut rng = Lcg(0x5eed_cde4);
    let total_shares = spec.ces * spec.queues * spec.vos;
    // Choose the GPU shares: a partial Fisher-Yates over share indices.
    let mut idx: Vec<usize> = (0..total_shares).collect();
    let n_gpu = spec.gpu_shares.min(total_shares);
    for i in 0..n_gpu {
        let j = i + rng.below(total_shares - i);
        idx.swap(i, j);
    }
    let mut is_gpu = vec![false; total_shares];
    for &i in &idx[..n_gpu] {
        is_gpu[i] = true;
    }
    let mut out = Snapshot { ldif: String::with_capacity(spec.ces * 60_000), ..Default::default() };
    out.ldif.push_str(crate::ldap::BASE_LDIF);
    let l = &mut out.ldif;
    let mut share_no = 0;
    for ce in 0..spec.ces {
        let site = ce / 2;
        let domain = format!("SITE-{site:04}");
        if ce % 2 == 0 {
            let ddn = format!("GLUE2DomainID={domain},GLUE2GroupID=grid,o=glue");
            let _ = write!(
                l,
                "dn: {ddn}\nobjectClass: GLUE2Domain\nobjectClass: GLUE2AdminDomain\nGLUE2DomainID: {domain}\nGLUE2DomainDescription: Site {site}\n\
                 GLUE2DomainWWW: https://site{site}.example.eu\n\n\
                 dn: GLUE2LocationID={domain}_loc,{ddn}\nobjectClass: GLUE2Location\nGLUE2LocationID: {domain}_loc\nGLUE2LocationCountry: Ireland\n\
                 GLUE2LocationLatitude: 53.3\nGLUE2LocationLongitude: -6.2\n\n"
            );
            for c in 0..2 {
                let _ = write!(
                    l,
                    "dn: GLUE2ContactID={domain}_c{c},{ddn}\nobjectClass: GLUE2Contact\nGLUE2ContactID: {domain}_c{c}\n\
                     GLUE2ContactDetail: mailto:grid-admin{c}@site{site}.example.eu\nGLUE2ContactType: {}\n\n",
                    if c == 0 { "sysadmin" } else { "security" }
                );
            }
            out.entities += 4;
        }
        let host = format!("ce{ce:04}.site{site:04}.example.eu");
        let service = format!("{host}_ComputingElement");
        let sdn = format!("GLUE2ServiceID={service},GLUE2GroupID=resource,o=glue");
        let lrms = ["pbs", "slurm", "sge", "lsf"][ce % 4];
        let _ = write!(
            l,
            "dn: {sdn}\nobjectClass: GLUE2Service\nobjectClass: GLUE2ComputingService\nGLUE2ServiceID: {service}\n\
             GLUE2ServiceType: org.glite.ce.CREAM\nGLUE2ServiceQualityLevel: production\nGLUE2ServiceCapability: executionmanagement.jobexecution\n\
             GLUE2ServiceAdminDomainForeignKey: {domain}\nGLUE2ComputingServiceTotalJobs: {}\nGLUE2ComputingServiceRunningJobs: {}\n\
             GLUE2ComputingServiceWaitingJobs: 0\nGLUE2EntityOtherInfo: InfoProviderName=glite-ce-glue2-computingservice-static\n\n\
             dn: GLUE2ManagerID={service}_Manager,{sdn}\nobjectClass: GLUE2Manager\nobjectClass: GLUE2ComputingManager\n\
             GLUE2ManagerID: {service}_Manager\nGLUE2ManagerProductName: {lrms}\nGLUE2ManagerProductVersion: 2.5.7\n\
             GLUE2ManagerServiceForeignKey: {service}\nGLUE2ComputingManagerComputingServiceForeignKey: {service}\n\
             GLUE2ComputingManagerTotalLogicalCPUs: 512\nGLUE2ComputingManagerTotalPhysicalCPUs: 64\n\n",
            rng.below(500),
            rng.below(400),
        );
        out.entities += 2;
        for e in 0..2 {
            let eid = format!("{host}_org.glite.ce.CREAM{}", if e == 0 { "" } else { "_2" });
            let _ = write!(
                l,
                "dn: GLUE2EndpointID={eid},{sdn}\nobjectClass: GLUE2Endpoint\nobjectClass: GLUE2ComputingEndpoint\nGLUE2EndpointID: {eid}\n\
                 GLUE2EndpointURL: https://{host}:{}/ce-cream/services\nGLUE2EndpointInterfaceName: org.glite.ce.CREAM\n\
                 GLUE2EndpointInterfaceVersion: 2.1\nGLUE2EndpointImplementationName: CREAM\nGLUE2EndpointImplementationVersion: 1.16.4\n\
                 GLUE2EndpointQualityLevel: production\nGLUE2EndpointHealthState: ok\nGLUE2EndpointServingState: production\n\
                 GLUE2EndpointServiceForeignKey: {service}\nGLUE2ComputingEndpointComputingServiceForeignKey: {service}\n\n\
                 dn: GLUE2PolicyID={eid}_Policy,GLUE2EndpointID={eid},{sdn}\nobjectClass: GLUE2Policy\nobjectClass: GLUE2AccessPolicy\n\
                 GLUE2PolicyID: {eid}_Policy\nGLUE2PolicyScheme: org.glite.standard\n{}GLUE2AccessPolicyEndpointForeignKey: {eid}\n\n",
                8443 + e,
                (0..spec.vos).map(|v| format!("GLUE2PolicyRule: VO:{}\n", VOS[(ce + v) % VOS.len()])).collect::<String>(),
            );
            out.entities += 2;
        }
        for e in 0..2 {
            let ee = format!("{host}_wn{e}");
            let _ = write!(
                l,
                "dn: GLUE2ResourceID={ee},{sdn}\nobjectClass: GLUE2Resource\nobjectClass: GLUE2ExecutionEnvironment\nGLUE2ResourceID: {ee}\n\
                 GLUE2ResourceManagerForeignKey: {service}_Manager\nGLUE2ExecutionEnvironmentPlatform: amd64\n\
                 GLUE2ExecutionEnvironmentTotalInstances: {}\nGLUE2ExecutionEnvironmentPhysicalCPUs: 2\nGLUE2ExecutionEnvironmentLogicalCPUs: 16\n\
                 GLUE2ExecutionEnvironmentCPUVendor: Intel\nGLUE2ExecutionEnvironmentCPUModel: Xeon E5-2650\nGLUE2ExecutionEnvironmentCPUClockSpeed: 2000\n\
                 GLUE2ExecutionEnvironmentMainMemorySize: 65536\nGLUE2ExecutionEnvironmentOSFamily: linux\nGLUE2ExecutionEnvironmentOSName: ScientificSL\n\
                 GLUE2ExecutionEnvironmentOSVersion: 6.4\nGLUE2ExecutionEnvironmentConnectivityIn: false\nGLUE2ExecutionEnvironmentConnectivityOut: true\n\
                 GLUE2ExecutionEnvironmentComputingManagerForeignKey: {service}_Manager\nGLUE2EntityOtherInfo: SmpSize=16\nGLUE2EntityOtherInfo: Cores=8,8\n\n\
                 dn: GLUE2BenchmarkID={ee}_hep-spec06,{sdn}\nobjectClass: GLUE2Benchmark\nGLUE2BenchmarkID: {ee}_hep-spec06\n\
                 GLUE2BenchmarkType: hep-spec06\nGLUE2BenchmarkValue: {}\nGLUE2BenchmarkExecutionEnvironmentForeignKey: {ee}\n\n",
                10 + rng.below(200),
                80 + rng.below(80),
            );
            out.entities += 2;
        }
        for q in 0..spec.queues {
            let queue = format!("q{q}");
            for v in 0..spec.vos {
                let vo = VOS[(ce + q + v) % VOS.len()];
                let share = format!("{queue}_{vo}_{service}");
                let shdn = format!("GLUE2ShareID={share},{sdn}");
                let ce_id = format!("{host}:8443/cream-{lrms}-{queue}");
                let _ = write!(
                    l,
                    "dn: {shdn}\nobjectClass: GLUE2Share\nobjectClass: GLUE2ComputingShare\nGLUE2ShareID: {share}\nGLUE2ShareServiceForeignKey: {service}\n\
                     GLUE2ShareEndpointForeignKey: {host}_org.glite.ce.CREAM\nGLUE2ShareResourceForeignKey: {host}_wn{}\n\
                     GLUE2ComputingShareComputingServiceForeignKey: {service}\nGLUE2ComputingShareComputingEndpointForeignKey: {host}_org.glite.ce.CREAM\n\
                     GLUE2ComputingShareExecutionEnvironmentForeignKey: {host}_wn{}\nGLUE2ComputingShareMappingQueue: {queue}\n\
                     GLUE2ComputingShareServingState: production\nGLUE2ComputingShareMaxWallTime: 259200\nGLUE2ComputingShareMaxCPUTime: 172800\n\
                     GLUE2ComputingShareRunningJobs: {}\nGLUE2ComputingShareWaitingJobs: {}\nGLUE2ComputingShareTotalJobs: 0\n\
                     GLUE2ComputingShareFreeSlots: {}\nGLUE2ComputingShareEstimatedAverageWaitingTime: {}\nGLUE2ComputingShareEstimatedWorstWaitingTime: 86400\n\
                     GLUE2EntityOtherInfo: CREAMCEId={ce_id}\nGLUE2EntityOtherInfo: ServiceType=org.glite.ce.CREAM\n\
                     GLUE2EntityOtherInfo: InfoProviderName=glite-ce-glue2-share-static\nGLUE2EntityOtherInfo: InfoProviderVersion=1.1\n",
                    q % 2,
                    q % 2,
                    rng.below(100),
                    rng.below(50),
                    rng.below(64),
                    rng.below(3600),
                );
                let mut ext = Vec::new();
                if is_gpu[share_no] {
                    let (keys, (vendor, mem)) = gpu_keys(&mut rng);
                    out.gpu.push((ce_id.clone(), vendor, mem));
                    match spec.strategy {
                        Strategy::AttributeExtension => {
                            for (k, v) in &keys {
                                let _ = writeln!(l, "GLUE2EntityOtherInfo: {k}={v}");
                            }
                        }
                        Strategy::ClassExtension => ext = keys,
                    }
                }
                l.push('\n');
                let _ = write!(
                    l,
                    "dn: GLUE2PolicyID={share}_policy,{shdn}\nobjectClass: GLUE2Policy\nobjectClass: GLUE2MappingPolicy\nGLUE2PolicyID: {share}_policy\n\
                     GLUE2PolicyScheme: org.glite.standard\nGLUE2PolicyRule: VO:{vo}\nGLUE2MappingPolicyShareForeignKey: {share}\n\n"
                );
                for (k, v) in &ext {
                    let _ = write!(
                        l,
                        "dn: GLUE2ExtensionLocalID={k},{shdn}\nobjectClass: GLUE2Extension\nGLUE2ExtensionLocalID: {k}\nGLUE2ExtensionKey: {k}\n\
                         GLUE2ExtensionValue: {v}\nGLUE2ExtensionEntityForeignKey: {share}\n\n"
                    );
                }
                out.extensions += ext.len();
                out.entities += 2 + ext.len();
                out.shares += 1;
                share_no += 1;
            }
        }
        for a in 0..spec.app_envs {
            let app = format!("VO-{}-software-{a}", VOS[(ce + a) % VOS.len()]);
            let _ = write!(
                l,
                "dn: GLUE2ApplicationEnvironmentID={app}_{service},{sdn}\nobjectClass: GLUE2ApplicationEnvironment\n\
                 GLUE2ApplicationEnvironmentID: {app}_{service}\nGLUE2ApplicationEnvironmentAppName: {app}\n\
                 GLUE2ApplicationEnvironmentState: installednotverified\nGLUE2ApplicationEnvironmentComputingManagerForeignKey: {service}_Manager\n\n"
            );
            out.entities += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thesis_scale_has_enough_entities_and_the_asked_gpu_data() {
        let a = generate(&SnapshotSpec { ces: 8, ..SnapshotSpec::thesis(Strategy::AttributeExtension) });
        assert_eq!(a.shares, 8 * 40);
        assert_eq!(a.gpu.len(), 100);
        assert_eq!(a.ldif.matches("GLUE2EntityOtherInfo: GPGPU").count(), 1200);
        let c = generate(&SnapshotSpec { ces: 8, ..SnapshotSpec::thesis(Strategy::ClassExtension) });
        assert_eq!(c.extensions, 1200);
        assert_eq!(c.gpu, a.gpu, "the same shares carry the same data under both strategies");
        // 830 CEs of the thesis spec give more than 10^5 entities.
        let per_ce = (a.entities - 16) / 8;
        assert!(830 * per_ce + 4 * 415 >= 100_000, "{per_ce} entities per CE");
    }
}
