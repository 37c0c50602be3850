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
//! Location and Contacts. The GPU carriers are picked by a fixed
//! pseudo-random sequence, so a snapshot is reproducible.
//!
//! Every shape a real top-level BDII holds can be made ([`Placement`],
//! [`SnapshotSpec`]): the keys on ComputingShares or on
//! ExecutionEnvironments (where `cder-glue-provider` puts them), as OtherInfo
//! or as Extension children; shares linked to their EE by
//! `GLUE2ComputingShareExecutionEnvironmentForeignKey` or not at all (then
//! every share of the service offers every EE); GLUE 1.3 (GlueCluster,
//! SubCluster with the tags, one GlueCE per queue) beside GLUE 2.0; and
//! generic EE IDs reused by every site (`execenv0`, as real BDIIs show).

use std::fmt::Write;

/// Where the GPU data goes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// 12 `GLUE2EntityOtherInfo: Key=Value` on each GPU share.
    AttributeExtension,
    /// 12 `GLUE2Extension` children of each GPU share.
    ClassExtension,
}

/// Which entities carry the GPU keys.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// ComputingShares (one queue and VO each).
    Shares,
    /// ExecutionEnvironments (node groups), as `cder-glue-provider` publishes.
    ExecutionEnvironments,
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
    /// Entities that carry GPU data (shares or EEs, per `placement`).
    pub gpu_shares: usize,
    /// How the GPU data is published.
    pub strategy: Strategy,
    /// Where it is published.
    pub placement: Placement,
    /// Shares name their EE (`GLUE2ComputingShareExecutionEnvironmentForeignKey`).
    pub share_ee_fk: bool,
    /// GLUE 1.3 beside GLUE 2.0 (under `o=grid`).
    pub glue13: bool,
    /// EE IDs are generic (`execenv0`, …), the same at every site.
    pub reused_ee_ids: bool,
    /// A top-level BDII's tree: services under
    /// `GLUE2GroupID=resource,GLUE2DomainID=<site>,GLUE2GroupID=grid,o=glue`,
    /// GLUE 1.3 under `mds-vo-name=<site>,mds-vo-name=local,o=grid`
    /// (otherwise everything under the resource group, as a site BDII).
    pub site_tree: bool,
}

impl SnapshotSpec {
    /// The thesis's scale: ≥ 10^5 entities, 100 GPU shares.
    pub fn thesis(strategy: Strategy) -> SnapshotSpec {
        SnapshotSpec {
            ces: 830,
            queues: 10,
            vos: 4,
            app_envs: 30,
            gpu_shares: 100,
            strategy,
            placement: Placement::Shares,
            share_ee_fk: true,
            glue13: false,
            reused_ee_ids: false,
            site_tree: false,
        }
    }

    /// EEs per CE: two, or more when more GPU EEs are asked for than two per CE give.
    pub fn ees_per_ce(&self) -> usize {
        match self.placement {
            Placement::Shares => 2,
            Placement::ExecutionEnvironments => self.gpu_shares.div_ceil(self.ces.max(1)).max(2),
        }
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
    /// The GPU offers: (CE id, vendor, memory MB), one per GPU share, or per
    /// GPU EE and CE that offers it, in generation order.
    pub gpu: Vec<(String, String, u32)>,
    /// GLUE 1.3 entries (under `o=grid`).
    pub glue13_entries: usize,
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

/// A carrier's GPU keys, and its (vendor, memory MB).
type GpuData = (Vec<(String, String)>, (String, u32));

/// The 12 GPU keys of a share (thesis Listing 3.9's keys).
fn gpu_keys(rng: &mut Lcg) -> GpuData {
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
    let n_ee = spec.ees_per_ce();
    let carriers = match spec.placement {
        Placement::Shares => total_shares,
        Placement::ExecutionEnvironments => spec.ces * n_ee,
    };
    // Choose the GPU carriers: a partial Fisher-Yates over their indices.
    let mut idx: Vec<usize> = (0..carriers).collect();
    let n_gpu = spec.gpu_shares.min(carriers);
    for i in 0..n_gpu {
        let j = i + rng.below(carriers - i);
        idx.swap(i, j);
    }
    let mut is_gpu = vec![false; carriers];
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
        let ddn = format!("GLUE2DomainID={domain},GLUE2GroupID=grid,o=glue");
        let site13 = if spec.site_tree {
            format!("mds-vo-name={domain},mds-vo-name=local,o=grid")
        } else {
            "mds-vo-name=resource,o=grid".to_string()
        };
        if ce % 2 == 0 {
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
            if spec.site_tree {
                // A top-level BDII's tree: each site's services under its own resource group.
                let _ =
                    write!(l, "dn: GLUE2GroupID=resource,{ddn}\nobjectClass: GLUE2Group\nGLUE2GroupID: resource\n\n");
                if spec.glue13 {
                    let _ = write!(l, "dn: {site13}\nobjectClass: MDS\nmds-vo-name: {domain}\n\n");
                    out.glue13_entries += 1;
                }
            }
        }
        let host = format!("ce{ce:04}.site{site:04}.example.eu");
        let service = format!("{host}_ComputingElement");
        let group = if spec.site_tree {
            format!("GLUE2GroupID=resource,{ddn}")
        } else {
            "GLUE2GroupID=resource,o=glue".to_string()
        };
        let sdn = format!("GLUE2ServiceID={service},{group}");
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
        // The EEs, and the GPU data of those that carry it: (id, keys, vendor, memory).
        let mut gpu_ees: Vec<Option<GpuData>> = Vec::new();
        let ee_id = |e: usize| if spec.reused_ee_ids { format!("execenv{e}") } else { format!("{host}_wn{e}") };
        for e in 0..n_ee {
            let ee = ee_id(e);
            let eedn = format!("GLUE2ResourceID={ee},{sdn}");
            let _ = write!(
                l,
                "dn: {eedn}\nobjectClass: GLUE2Resource\nobjectClass: GLUE2ExecutionEnvironment\nGLUE2ResourceID: {ee}\n\
                 GLUE2ResourceManagerForeignKey: {service}_Manager\nGLUE2ExecutionEnvironmentPlatform: amd64\n\
                 GLUE2ExecutionEnvironmentTotalInstances: {}\nGLUE2ExecutionEnvironmentPhysicalCPUs: 2\nGLUE2ExecutionEnvironmentLogicalCPUs: 16\n\
                 GLUE2ExecutionEnvironmentCPUVendor: Intel\nGLUE2ExecutionEnvironmentCPUModel: Xeon E5-2650\nGLUE2ExecutionEnvironmentCPUClockSpeed: 2000\n\
                 GLUE2ExecutionEnvironmentMainMemorySize: 65536\nGLUE2ExecutionEnvironmentOSFamily: linux\nGLUE2ExecutionEnvironmentOSName: ScientificSL\n\
                 GLUE2ExecutionEnvironmentOSVersion: 6.4\nGLUE2ExecutionEnvironmentConnectivityIn: false\nGLUE2ExecutionEnvironmentConnectivityOut: true\n\
                 GLUE2ExecutionEnvironmentComputingManagerForeignKey: {service}_Manager\nGLUE2EntityOtherInfo: SmpSize=16\nGLUE2EntityOtherInfo: Cores=8,8\n",
                10 + rng.below(200),
            );
            let gpu = spec.placement == Placement::ExecutionEnvironments && is_gpu[ce * n_ee + e];
            let data = gpu.then(|| gpu_keys(&mut rng));
            let ext = write_keys(l, &eedn, &ee, data.as_ref().map(|d| d.0.as_slice()), spec.strategy);
            let _ = write!(
                l,
                "dn: GLUE2BenchmarkID={host}_wn{e}_hep-spec06,{sdn}\nobjectClass: GLUE2Benchmark\nGLUE2BenchmarkID: {host}_wn{e}_hep-spec06\n\
                 GLUE2BenchmarkType: hep-spec06\nGLUE2BenchmarkValue: {}\nGLUE2BenchmarkExecutionEnvironmentForeignKey: {ee}\n\n",
                80 + rng.below(80),
            );
            out.extensions += ext;
            out.entities += 2 + ext;
            gpu_ees.push(data);
        }
        let mut offered: std::collections::BTreeSet<(String, usize)> = std::collections::BTreeSet::new();
        for q in 0..spec.queues {
            let queue = format!("q{q}");
            for v in 0..spec.vos {
                let vo = VOS[(ce + q + v) % VOS.len()];
                let share = format!("{queue}_{vo}_{service}");
                let shdn = format!("GLUE2ShareID={share},{sdn}");
                let ce_id = format!("{host}:8443/cream-{lrms}-{queue}");
                let ee = (q + v * spec.queues) % n_ee;
                let fk = if spec.share_ee_fk {
                    format!(
                        "GLUE2ShareResourceForeignKey: {id}\nGLUE2ComputingShareExecutionEnvironmentForeignKey: {id}\n",
                        id = ee_id(ee)
                    )
                } else {
                    String::new()
                };
                let _ = write!(
                    l,
                    "dn: {shdn}\nobjectClass: GLUE2Share\nobjectClass: GLUE2ComputingShare\nGLUE2ShareID: {share}\nGLUE2ShareServiceForeignKey: {service}\n\
                     GLUE2ShareEndpointForeignKey: {host}_org.glite.ce.CREAM\n{fk}\
                     GLUE2ComputingShareComputingServiceForeignKey: {service}\nGLUE2ComputingShareComputingEndpointForeignKey: {host}_org.glite.ce.CREAM\n\
                     GLUE2ComputingShareMappingQueue: {queue}\n\
                     GLUE2ComputingShareServingState: production\nGLUE2ComputingShareMaxWallTime: 259200\nGLUE2ComputingShareMaxCPUTime: 172800\n\
                     GLUE2ComputingShareRunningJobs: {}\nGLUE2ComputingShareWaitingJobs: {}\nGLUE2ComputingShareTotalJobs: 0\n\
                     GLUE2ComputingShareFreeSlots: {}\nGLUE2ComputingShareEstimatedAverageWaitingTime: {}\nGLUE2ComputingShareEstimatedWorstWaitingTime: 86400\n\
                     GLUE2EntityOtherInfo: CREAMCEId={ce_id}\nGLUE2EntityOtherInfo: ServiceType=org.glite.ce.CREAM\n\
                     GLUE2EntityOtherInfo: InfoProviderName=glite-ce-glue2-share-static\nGLUE2EntityOtherInfo: InfoProviderVersion=1.1\n",
                    rng.below(100),
                    rng.below(50),
                    rng.below(64),
                    rng.below(3600),
                );
                let mut data = None;
                if spec.placement == Placement::Shares && is_gpu[share_no] {
                    let d = gpu_keys(&mut rng);
                    out.gpu.push((ce_id.clone(), d.1 .0.clone(), d.1 .1));
                    data = Some(d);
                }
                // The EEs this share offers: the one it names, or every one of the service.
                let linked: Vec<usize> = if spec.share_ee_fk { vec![ee] } else { (0..n_ee).collect() };
                for e in linked {
                    if let Some((_, (vendor, mem))) = &gpu_ees[e] {
                        if offered.insert((ce_id.clone(), e)) {
                            out.gpu.push((ce_id.clone(), vendor.clone(), *mem));
                        }
                    }
                }
                let ext = write_keys(l, &shdn, &share, data.as_ref().map(|d| d.0.as_slice()), spec.strategy);
                let _ = write!(
                    l,
                    "dn: GLUE2PolicyID={share}_policy,{shdn}\nobjectClass: GLUE2Policy\nobjectClass: GLUE2MappingPolicy\nGLUE2PolicyID: {share}_policy\n\
                     GLUE2PolicyScheme: org.glite.standard\nGLUE2PolicyRule: VO:{vo}\nGLUE2MappingPolicyShareForeignKey: {share}\n\n"
                );
                out.extensions += ext;
                out.entities += 2 + ext;
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
        if spec.glue13 {
            out.glue13_entries += glue13(l, spec, &host, lrms, &site13, &gpu_ees);
        }
    }
    out
}

/// Writes an entity's GPU keys: as OtherInfo (continuing the entity's
/// record, which this ends) or as Extension children. Returns the Extensions written.
fn write_keys(l: &mut String, dn: &str, id: &str, keys: Option<&[(String, String)]>, strategy: Strategy) -> usize {
    let Some(keys) = keys else {
        l.push('\n');
        return 0;
    };
    if strategy == Strategy::AttributeExtension {
        for (k, v) in keys {
            let _ = writeln!(l, "GLUE2EntityOtherInfo: {k}={v}");
        }
        l.push('\n');
        return 0;
    }
    l.push('\n');
    for (k, v) in keys {
        let _ = write!(
            l,
            "dn: GLUE2ExtensionLocalID={k},{dn}\nobjectClass: GLUE2Extension\nGLUE2ExtensionLocalID: {k}\nGLUE2ExtensionKey: {k}\n\
             GLUE2ExtensionValue: {v}\nGLUE2ExtensionEntityForeignKey: {id}\n\n"
        );
    }
    keys.len()
}

/// GLUE 1.3 of one CE, as its site BDII publishes it: per EE a
/// GlueCluster with one SubCluster (the GPU ones tagged `<Vendor>GPGPU` and
/// `Key=Value`), one GlueCE per queue naming the clusters of the EEs its
/// shares offer, so that both schemas describe the same CEs. Returns the
/// entries written.
fn glue13(l: &mut String, spec: &SnapshotSpec, host: &str, lrms: &str, site: &str, ees: &[Option<GpuData>]) -> usize {
    for (e, data) in ees.iter().enumerate() {
        let cluster = format!("{host}_wn{e}");
        let cdn = format!("GlueClusterUniqueID={cluster},{site}");
        let _ = write!(
            l,
            "dn: {cdn}\nobjectClass: GlueClusterTop\nobjectClass: GlueCluster\nobjectClass: GlueInformationService\nobjectClass: GlueKey\n\
             objectClass: GlueSchemaVersion\nGlueClusterUniqueID: {cluster}\nGlueClusterName: {cluster}\nGlueSchemaVersionMajor: 1\nGlueSchemaVersionMinor: 3\n\n"
        );
        let tags: String = match data {
            Some((keys, (vendor, _))) => std::iter::once(format!("{vendor}GPGPU"))
                .chain(keys.iter().map(|(k, v)| format!("{k}={v}")))
                .map(|t| format!("GlueHostApplicationSoftwareRunTimeEnvironment: {t}\n"))
                .collect(),
            None => "GlueHostApplicationSoftwareRunTimeEnvironment: VO-ops-tests\n".into(),
        };
        let _ = write!(
            l,
            "dn: GlueSubClusterUniqueID={cluster},{cdn}\nobjectClass: GlueClusterTop\nobjectClass: GlueSubCluster\n\
             objectClass: GlueHostApplicationSoftware\nobjectClass: GlueKey\nobjectClass: GlueSchemaVersion\nGlueSubClusterUniqueID: {cluster}\n\
             GlueSubClusterName: {cluster}\nGlueChunkKey: GlueClusterUniqueID={cluster}\nGlueHostArchitecturePlatformType: x86_64\n\
             GlueHostMainMemoryRAMSize: 65536\n{tags}GlueSchemaVersionMajor: 1\nGlueSchemaVersionMinor: 3\n\n"
        );
    }
    for q in 0..spec.queues {
        let id = format!("{host}:8443/cream-{lrms}-q{q}");
        let linked: std::collections::BTreeSet<usize> = if spec.share_ee_fk {
            (0..spec.vos).map(|v| (q + v * spec.queues) % ees.len()).collect()
        } else {
            (0..ees.len()).collect()
        };
        let _ = write!(
            l,
            "dn: GlueCEUniqueID={id},{site}\nobjectClass: GlueCETop\nobjectClass: GlueCE\nobjectClass: GlueCEInfo\n\
             objectClass: GlueCEState\nobjectClass: GlueCEPolicy\nobjectClass: GlueCEAccessControlBase\nobjectClass: GlueKey\n\
             objectClass: GlueSchemaVersion\nGlueCEUniqueID: {id}\nGlueCEName: q{q}\nGlueCEInfoHostName: {host}\n\
             GlueCEInfoLRMSType: {lrms}\nGlueCEStateStatus: Production\nGlueCEStateEstimatedResponseTime: 60\n\
             GlueCEStateFreeCPUs: 8\nGlueCEStateFreeJobSlots: 8\n{}{}\
             GlueSchemaVersionMajor: 1\nGlueSchemaVersionMinor: 3\n\n",
            (0..spec.vos).map(|v| format!("GlueCEAccessControlBaseRule: VO:{}\n", VOS[v % VOS.len()])).collect::<String>(),
            linked.iter().map(|e| format!("GlueForeignKey: GlueClusterUniqueID={host}_wn{e}\n")).collect::<String>(),
        );
    }
    2 * ees.len() + spec.queues
}

/// The `o=infosys` UpdateStats entry a `bdii-update` cycle leaves (with
/// its parent), for a snapshot loaded without bdii-update: a BDII cycle for
/// the index to record, as on a real BDII.
pub fn update_stats_ldif(entries: usize) -> String {
    format!(
        "dn: o=infosys\nobjectClass: organization\no: infosys\n\n\
         dn: Hostname=localhost,o=infosys\nobjectClass: UpdateStats\nHostname: localhost\nTotalEntries: {entries}\n\
         UpdateTime: 41\nDBUpdateTime: 12\nNewEntries: 0\nQueryTime: 2\nProvidersTime: 20\nFailedAdds: 0\n\
         ModifiedEntries: 0\nDeletedEntries: 0\nFailedDeletes: 0\nFailedModifies: 0\nPluginsTime: 0\nReadTime: 5\n\n"
    )
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

    #[test]
    fn keys_on_execution_environments_reach_the_shares_that_offer_them() {
        let base = SnapshotSpec {
            ces: 20,
            gpu_shares: 10,
            placement: Placement::ExecutionEnvironments,
            ..SnapshotSpec::thesis(Strategy::AttributeExtension)
        };
        let a = generate(&base);
        assert_eq!(a.ldif.matches("GLUE2EntityOtherInfo: GPGPUVendor=").count(), 10, "ten GPU EEs");
        // Each GPU EE is offered by the queues whose shares name it (half of a CE's ten queues).
        assert_eq!(a.gpu.len(), 10 * 5);
        let c = generate(&SnapshotSpec { strategy: Strategy::ClassExtension, ..base.clone() });
        assert_eq!(c.extensions, 120);
        assert!(
            c.ldif.contains("dn: GLUE2ExtensionLocalID=GPGPUVendor,GLUE2ResourceID=ce"),
            "Extensions are children of their EE"
        );
        assert_eq!(c.gpu, a.gpu);
        // Without the share->EE key every queue of the CE offers every GPU EE.
        let n = generate(&SnapshotSpec { share_ee_fk: false, ..base.clone() });
        assert!(!n.ldif.contains("GLUE2ComputingShareExecutionEnvironmentForeignKey"));
        assert!(n.gpu.len() >= a.gpu.len());
        // More GPU EEs than two per CE: more EEs per CE.
        let many = SnapshotSpec { gpu_shares: 100, ..base.clone() };
        assert_eq!(many.ees_per_ce(), 5);
        assert_eq!(generate(&many).ldif.matches("GLUE2EntityOtherInfo: GPGPUVendor=").count(), 100);
    }

    #[test]
    fn site_trees_glue13_and_reused_ids() {
        let spec = SnapshotSpec {
            ces: 4,
            gpu_shares: 2,
            placement: Placement::ExecutionEnvironments,
            glue13: true,
            site_tree: true,
            reused_ee_ids: true,
            ..SnapshotSpec::thesis(Strategy::AttributeExtension)
        };
        let s = generate(&spec);
        assert!(s.ldif.contains("dn: GLUE2ServiceID=ce0000.site0000.example.eu_ComputingElement,GLUE2GroupID=resource,GLUE2DomainID=SITE-0000,GLUE2GroupID=grid,o=glue"));
        assert_eq!(s.ldif.matches("GLUE2ResourceID: execenv0\n").count(), 4, "every CE has an EE called execenv0");
        assert_eq!(s.ldif.matches("objectClass: GlueCE\n").count(), 4 * 10);
        assert_eq!(s.ldif.matches("GlueHostApplicationSoftwareRunTimeEnvironment: GPGPUVendor=").count(), 2);
        assert_eq!(s.glue13_entries, 2 + 4 * (2 * 2 + 10));
    }
}
