//! The publication strategies the seed thesis compares (chapter 3), and the
//! GLUE entries each one produces.
//!
//! Every node group becomes one `GLUE2ExecutionEnvironment` under the CE's
//! ComputingService, carrying its mandatory attributes and the
//! ComputingManager foreign key. The CDER attributes (`GPGPUFreeInstances=30`
//! …) are then attached as the strategies say:
//!
//! * `attribute-extension`: `GLUE2EntityOtherInfo: Key=Value` on the entity;
//! * `class-extension`: one `GLUE2Extension` child per key (LocalID, Key,
//!   Value, EntityForeignKey);
//! * `hybrid`: static keys as OtherInfo, dynamic ones (counts) as Extensions;
//! * `tagged-environment`: GLUE 1.3 `GlueHostApplicationSoftwareRunTimeEnvironment`
//!   tags on one `GlueSubCluster` per group, under `o=grid`.
//!
//! * `glue21-accelerator`: GLUE 2.1's AcceleratorEnvironment and the
//!   ComputingShare/ComputingManager AcceleratorInfo entities ([`crate::glue21`]).
//!
//! vGPGPU services become `GLUE2ApplicationEnvironment`s (`rCUDA`, `VCL`)
//! with `FreeVGPGPU` / `TotalVGPGPU`, attached the same way.

use std::collections::BTreeSet;

use cder_request::glue;

use crate::config::ProviderConfig;
use crate::error::ProviderError;
use crate::ldif::Entry;
use crate::site::{DeviceClass, Environment, NodeGroup};
use crate::sources::{GroupCounts, VirtualEnvironment};

pub use crate::config::Strategy;
pub use crate::sources::Snapshot;

/// Whether a published key changes while the site runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Fixed by the hardware and the config (model, memory …).
    Static,
    /// Changes as jobs come and go (free, used counts).
    Dynamic,
}

/// One published key/value with its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The CDER key, class prefix and attribute (`GPGPUFree`); each
    /// strategy decides the GLUE attribute that carries it.
    pub key: String,
    /// The value as published.
    pub value: String,
    /// Whether it changes while the site runs.
    pub kind: Kind,
}

/// The GLUE suffix every DN here hangs from.
pub const GLUE2_SUFFIX: &str = "GLUE2GroupID=resource,o=glue";
/// The GLUE 1.3 suffix.
pub const GLUE13_SUFFIX: &str = "mds-vo-name=resource,o=grid";

/// The CDER key/values of one ExecutionEnvironment, in design.md's order:
/// the counts (dynamic), then `PerNode` and the device attributes (static),
/// per class.
pub fn environment_attributes(classes: &[&DeviceClass], counts: &GroupCounts) -> Vec<Published> {
    let mut out = Vec::new();
    for class in classes {
        let p = &class.prefix;
        let c = counts.devices.get(&class.key).copied().unwrap_or_default();
        for (suffix, value) in glue::COUNT_SUFFIXES.into_iter().zip([c.total, c.free, c.used, c.offline]) {
            out.push(Published { key: glue::key(p, suffix), value: value.to_string(), kind: Kind::Dynamic });
        }
        if let Some(s) = counts.shares.get(&class.key) {
            for (suffix, value) in glue::SHARE_SUFFIXES.into_iter().zip([s.total, s.free, s.used]) {
                out.push(Published { key: glue::key(p, suffix), value: value.to_string(), kind: Kind::Dynamic });
            }
        }
        out.push(Published {
            key: glue::key(p, glue::PER_NODE_SUFFIX),
            value: class.per_node.to_string(),
            kind: Kind::Static,
        });
        for (name, value) in &class.attributes {
            out.push(Published { key: format!("{p}{name}"), value: value.clone(), kind: Kind::Static });
        }
    }
    out
}

/// The ComputingShare attributes of a share's limits and load. A time the
/// LRMS does not limit is left out where GLUE lets it be (`Max…`) and is
/// [`crate::sources::UNLIMITED_TIME`] where EGI's profile requires it (`Default…`).
fn push_share_policy(e: &mut Entry, p: &crate::sources::SharePolicy) {
    let unlimited = crate::sources::UNLIMITED_TIME;
    if let Some(t) = p.max_wall_time {
        e.push("GLUE2ComputingShareMaxWallTime", t.to_string());
    }
    e.push("GLUE2ComputingShareDefaultWallTime", p.default_wall_time.unwrap_or(unlimited).to_string());
    if let Some(t) = p.max_cpu_time {
        e.push("GLUE2ComputingShareMaxCPUTime", t.to_string());
    }
    e.push("GLUE2ComputingShareDefaultCPUTime", p.default_cpu_time.unwrap_or(unlimited).to_string());
    if let Some(n) = p.max_total_jobs {
        e.push("GLUE2ComputingShareMaxTotalJobs", n.to_string());
    }
    if let Some(n) = p.max_running_jobs {
        e.push("GLUE2ComputingShareMaxRunningJobs", n.to_string());
    }
    e.push("GLUE2ComputingShareMaxSlotsPerJob", p.max_slots_per_job.to_string());
    e.push("GLUE2ComputingShareMaxMainMemory", p.max_main_memory_mib.to_string());
    e.push("GLUE2ComputingShareGuaranteedMainMemory", p.guaranteed_main_memory_mib.to_string());
    e.push("GLUE2ComputingShareMaxVirtualMemory", p.max_virtual_memory_mib.to_string());
    e.push("GLUE2ComputingShareGuaranteedVirtualMemory", p.guaranteed_virtual_memory_mib.to_string());
    let total = p.running_jobs.saturating_add(p.waiting_jobs);
    e.push("GLUE2ComputingShareTotalJobs", total.to_string());
    e.push("GLUE2ComputingShareRunningJobs", p.running_jobs.to_string());
    e.push("GLUE2ComputingShareWaitingJobs", p.waiting_jobs.to_string());
    e.push("GLUE2ComputingShareEstimatedAverageWaitingTime", p.estimated_average_waiting_time.to_string());
    e.push("GLUE2ComputingShareEstimatedWorstWaitingTime", p.estimated_worst_waiting_time.to_string());
    e.push("GLUE2ComputingShareFreeSlots", p.free_slots.to_string());
    e.push("GLUE2ComputingShareUsedSlots", p.used_slots.to_string());
}

/// The CDER key/values of one per-VO ComputingShare: what the VO can get
/// (`<P>TotalInstances`, `<P>FreeInstances`, `<P>UsedInstances`) and, as
/// `<P>PerNode`, the most one of its jobs can get on a node. Phase 1 reads
/// a share's keys over its ExecutionEnvironment's.
pub fn share_attributes(share: &crate::sources::VoShare) -> Vec<Published> {
    let mut out = Vec::new();
    for (p, d) in &share.devices {
        for (suffix, value) in glue::COUNT_SUFFIXES.into_iter().take(3).zip([d.total, d.free, d.used]) {
            out.push(Published { key: glue::key(p, suffix), value: value.to_string(), kind: Kind::Dynamic });
        }
        out.push(Published {
            key: glue::key(p, glue::PER_NODE_SUFFIX),
            value: d.max_per_job.to_string(),
            kind: Kind::Dynamic,
        });
    }
    out
}

/// The key/values of one vGPGPU application environment.
pub fn virtual_attributes(v: &VirtualEnvironment) -> Vec<Published> {
    vec![
        Published { key: glue::TOTAL_VGPGPU.into(), value: v.total.to_string(), kind: Kind::Dynamic },
        Published { key: glue::FREE_VGPGPU.into(), value: v.free.to_string(), kind: Kind::Dynamic },
    ]
}

/// Renders every entry the strategies call for, parents before children.
/// An empty `strategies` gives the bare GLUE 2.0 entries with no CDER data
/// (the benchmark's baseline).
pub fn render(
    config: &ProviderConfig,
    snapshot: &Snapshot,
    strategies: &[Strategy],
) -> Result<Vec<Entry>, ProviderError> {
    render_entries(config, snapshot, strategies, true)
}

/// [`render`]; with `complete` false, an ExecutionEnvironment lacks the
/// values EGI requires instead of being refused (ARC mode, where the EE is
/// ARC's and only cder's keys are taken from it).
pub(crate) fn render_entries(
    config: &ProviderConfig,
    snapshot: &Snapshot,
    strategies: &[Strategy],
    complete: bool,
) -> Result<Vec<Entry>, ProviderError> {
    let required = |value: Result<String, ProviderError>| match value {
        Ok(v) => Ok(Some(v)),
        Err(e) if complete => Err(e),
        Err(_) => Ok(None),
    };
    let set: BTreeSet<Strategy> = strategies.iter().copied().collect();
    let as_other_info = |kind: Kind| {
        set.contains(&Strategy::AttributeExtension) || (kind == Kind::Static && set.contains(&Strategy::Hybrid))
    };
    let as_extension = |kind: Kind| {
        set.contains(&Strategy::ClassExtension) || (kind == Kind::Dynamic && set.contains(&Strategy::Hybrid))
    };
    let glue2 = set.iter().any(|s| *s != Strategy::TaggedEnvironment) || set.is_empty();

    let site = &config.site;
    let service_id = site.computing_service_id.get_ref();
    let manager_id = site.computing_manager_id.get_ref();
    let service_dn = format!("GLUE2ServiceID={service_id},{GLUE2_SUFFIX}");
    let created = glue_time(snapshot.created);
    let validity = site.validity.to_string();
    let mut entries = Vec::new();

    if glue2 {
        if let Some(service) = &config.service {
            let mut e = Entry::new(service_dn.clone());
            e.push("objectClass", "GLUE2Service").push("objectClass", "GLUE2ComputingService");
            e.push("GLUE2ServiceID", service_id.clone());
            e.push("GLUE2EntityCreationTime", created.clone()).push("GLUE2EntityValidity", validity.clone());
            e.push("GLUE2ServiceType", service.service_type.clone());
            e.push("GLUE2ServiceQualityLevel", service.quality_level.clone());
            e.push("GLUE2ServiceAdminDomainForeignKey", service.admin_domain.clone());
            entries.push(e);

            let mut m = Entry::new(format!("GLUE2ManagerID={manager_id},{service_dn}"));
            m.push("objectClass", "GLUE2Manager").push("objectClass", "GLUE2ComputingManager");
            m.push("GLUE2ManagerID", manager_id.clone());
            m.push("GLUE2EntityCreationTime", created.clone()).push("GLUE2EntityValidity", validity.clone());
            m.push("GLUE2ManagerProductName", service.manager_product.clone());
            m.push("GLUE2ManagerProductVersion", manager_version(config, snapshot)?);
            let totals = manager_totals(config, snapshot)?;
            m.push("GLUE2ComputingManagerTotalPhysicalCPUs", totals.physical_cpus.to_string());
            m.push("GLUE2ComputingManagerTotalLogicalCPUs", totals.logical_cpus.to_string());
            if let Some(slots) = totals.slots {
                m.push("GLUE2ComputingManagerTotalSlots", slots.to_string());
            }
            m.push("GLUE2ManagerServiceForeignKey", service_id.clone());
            m.push("GLUE2ComputingManagerComputingServiceForeignKey", service_id.clone());
            entries.push(m);
        }

        for (group, counts, env) in environments(snapshot) {
            let g = &group.config;
            let hw = Hardware::of(group, counts)?;
            let id = env.id.as_str();
            let dn = format!("GLUE2ResourceID={id},{service_dn}");
            let mut e = Entry::new(dn.clone());
            e.push("objectClass", "GLUE2Resource").push("objectClass", "GLUE2ExecutionEnvironment");
            e.push("GLUE2ResourceID", id);
            if let Some(name) = &env.name {
                e.push("GLUE2EntityName", name.clone());
            }
            e.push("GLUE2EntityCreationTime", created.clone()).push("GLUE2EntityValidity", validity.clone());
            e.push("GLUE2ResourceManagerForeignKey", manager_id.clone());
            e.push("GLUE2ExecutionEnvironmentPlatform", g.platform.clone());
            e.push("GLUE2ExecutionEnvironmentTotalInstances", group.nodes.len().to_string());
            if let Some(n) = counts.nodes_used {
                e.push("GLUE2ExecutionEnvironmentUsedInstances", n.to_string());
            }
            if let Some(n) = counts.nodes_unavailable {
                e.push("GLUE2ExecutionEnvironmentUnavailableInstances", n.to_string());
            }
            if let Some(n) = hw.physical_cpus {
                e.push("GLUE2ExecutionEnvironmentPhysicalCPUs", n.to_string());
            }
            if let Some(n) = hw.logical_cpus {
                e.push("GLUE2ExecutionEnvironmentLogicalCPUs", n.to_string());
            }
            if let Some(v) = &g.cpu_vendor {
                e.push("GLUE2ExecutionEnvironmentCPUVendor", v.clone());
            }
            if let Some(v) = &g.cpu_model {
                e.push("GLUE2ExecutionEnvironmentCPUModel", v.clone());
            }
            if let Some(n) = g.cpu_clock_mhz {
                e.push("GLUE2ExecutionEnvironmentCPUClockSpeed", n.to_string());
            }
            // f64's Display: 1.0 is "1", as EGI's validator reads the factor as an integer first.
            e.push("GLUE2ExecutionEnvironmentCPUTimeScalingFactor", g.cpu_time_scaling_factor.get_ref().to_string());
            e.push("GLUE2ExecutionEnvironmentWallTimeScalingFactor", g.wall_time_scaling_factor.get_ref().to_string());
            e.push("GLUE2ExecutionEnvironmentMainMemorySize", g.main_memory_mib.to_string());
            if let Some(v) = required(hw.required_virtual_memory(group, config).map(|n| n.to_string()))? {
                e.push("GLUE2ExecutionEnvironmentVirtualMemorySize", v);
            }
            e.push("GLUE2ExecutionEnvironmentOSFamily", g.os_family.clone());
            if let Some(v) = required(hw.required_os_name(group, config))? {
                e.push("GLUE2ExecutionEnvironmentOSName", v);
            }
            if let Some(v) = required(hw.required_os_version(group, config))? {
                e.push("GLUE2ExecutionEnvironmentOSVersion", v);
            }
            e.push("GLUE2ExecutionEnvironmentConnectivityIn", g.connectivity_in.to_string());
            e.push("GLUE2ExecutionEnvironmentConnectivityOut", g.connectivity_out.to_string());
            e.push("GLUE2ExecutionEnvironmentComputingManagerForeignKey", manager_id.clone());
            let attrs = environment_attributes(&env.classes, counts);
            attach(&mut entries, e, id, &attrs, as_other_info, as_extension);
        }

        for v in &snapshot.virtual_environments {
            let id = v.id.clone().unwrap_or_else(|| format!("{manager_id}_{}", v.method));
            let mut e = Entry::new(format!("GLUE2ApplicationEnvironmentID={id},{service_dn}"));
            e.push("objectClass", "GLUE2ApplicationEnvironment");
            e.push("GLUE2ApplicationEnvironmentID", id.clone());
            e.push("GLUE2EntityCreationTime", created.clone()).push("GLUE2EntityValidity", validity.clone());
            e.push("GLUE2ApplicationEnvironmentAppName", v.method.clone());
            if let Some(version) = &v.version {
                e.push("GLUE2ApplicationEnvironmentAppVersion", version.clone());
            }
            e.push("GLUE2ApplicationEnvironmentState", "installednotverified");
            e.push("GLUE2ApplicationEnvironmentComputingManagerForeignKey", manager_id.clone());
            attach(&mut entries, e, &id, &virtual_attributes(v), as_other_info, as_extension);
        }
        for share in &snapshot.shares {
            let dn = format!("GLUE2ShareID={},{service_dn}", share.id);
            let mut e = Entry::new(dn.clone());
            e.push("objectClass", "GLUE2Share").push("objectClass", "GLUE2ComputingShare");
            e.push("GLUE2ShareID", share.id.clone());
            e.push("GLUE2EntityName", format!("{} for {}", share.queue, share.vo));
            e.push("GLUE2EntityCreationTime", created.clone()).push("GLUE2EntityValidity", validity.clone());
            e.push("GLUE2ShareServiceForeignKey", service_id.clone());
            e.push("GLUE2ComputingShareMappingQueue", share.queue.clone());
            e.push("GLUE2ComputingShareServingState", share.serving_state);
            push_share_policy(&mut e, &share.policy);
            for ee in &share.environments {
                e.push("GLUE2ComputingShareExecutionEnvironmentForeignKey", ee.clone());
                e.push("GLUE2ShareResourceForeignKey", ee.clone());
            }
            attach(&mut entries, e, &share.id, &share_attributes(share), as_other_info, as_extension);
            // As CREAM publishes a VO share's policy: `<share id>_policy`, under the share.
            let policy_id = format!("{}_policy", share.id);
            let mut p = Entry::new(format!("GLUE2PolicyID={policy_id},{dn}"));
            p.push("objectClass", "GLUE2Policy").push("objectClass", "GLUE2MappingPolicy");
            p.push("GLUE2PolicyID", policy_id.clone());
            p.push("GLUE2EntityCreationTime", created.clone()).push("GLUE2EntityValidity", validity.clone());
            p.push("GLUE2PolicyScheme", "org.glite.standard");
            p.push("GLUE2PolicyRule", format!("VO:{}", share.vo));
            p.push("GLUE2PolicyUserDomainForeignKey", share.vo.clone());
            p.push("GLUE2MappingPolicyShareForeignKey", share.id.clone());
            entries.push(p);
        }
        if set.contains(&Strategy::Glue21Accelerator) {
            entries.extend(crate::glue21::entries(config, snapshot, &service_dn, &created));
        }
    }

    if set.contains(&Strategy::TaggedEnvironment) {
        entries.extend(glue13_entries(config, snapshot)?);
    }
    Ok(entries)
}

/// Every ExecutionEnvironment of the snapshot with its group and counts.
fn environments(snapshot: &Snapshot) -> impl Iterator<Item = (&NodeGroup, &GroupCounts, Environment<'_>)> {
    snapshot
        .groups
        .iter()
        .flat_map(|(group, counts)| group.environments().into_iter().map(move |env| (group, counts, env)))
}

/// Pushes `entity` with its OtherInfo values, then its Extension children.
fn attach(
    entries: &mut Vec<Entry>,
    mut entity: Entry,
    id: &str,
    attrs: &[Published],
    as_other_info: impl Fn(Kind) -> bool,
    as_extension: impl Fn(Kind) -> bool,
) {
    for a in attrs.iter().filter(|a| as_other_info(a.kind)) {
        entity.push("GLUE2EntityOtherInfo", format!("{}={}", a.key, a.value));
    }
    let parent_dn = entity.dn.clone();
    entries.push(entity);
    for a in attrs.iter().filter(|a| as_extension(a.kind)) {
        let mut x = Entry::new(format!("GLUE2ExtensionLocalID={},{parent_dn}", a.key));
        x.push("objectClass", "GLUE2Extension");
        x.push("GLUE2ExtensionLocalID", a.key.clone());
        x.push("GLUE2ExtensionKey", a.key.clone());
        x.push("GLUE2ExtensionValue", a.value.clone());
        x.push("GLUE2ExtensionEntityForeignKey", id);
        entries.push(x);
    }
}

/// GLUE 1.3: with `[service]`, the GlueCluster; then one GlueSubCluster per
/// group carrying the tags `<Vendor><PREFIX>` (`NvidiaGPGPU`, as the thesis's
/// JDL matches), `Key=Value` per attribute, and the vGPGPU methods.
fn glue13_entries(config: &ProviderConfig, snapshot: &Snapshot) -> Result<Vec<Entry>, ProviderError> {
    let cluster = config.site.cluster_id.as_ref().map(|c| c.get_ref().clone()).ok_or_else(|| {
        ProviderError::Input(
            "site.cluster_id (the GLUE 1.3 GlueClusterUniqueID) is required by the tagged-environment strategy".into(),
        )
    })?;
    let cluster_dn = format!("GlueClusterUniqueID={cluster},{GLUE13_SUFFIX}");
    let mut entries = Vec::new();
    if config.service.is_some() {
        let mut c = Entry::new(cluster_dn.clone());
        for class in ["GlueClusterTop", "GlueCluster", "GlueInformationService", "GlueKey", "GlueSchemaVersion"] {
            c.push("objectClass", class);
        }
        c.push("GlueClusterUniqueID", cluster.clone());
        c.push("GlueClusterName", cluster.clone());
        c.push("GlueForeignKey", format!("GlueCEUniqueID={}", config.site.ce_unique_id.get_ref()));
        c.push("GlueClusterService", config.site.ce_unique_id.get_ref().clone());
        c.push("GlueSchemaVersionMajor", "1").push("GlueSchemaVersionMinor", "3");
        entries.push(c);
    }
    for (group, counts, env) in environments(snapshot) {
        let g = &group.config;
        let mut s = Entry::new(format!("GlueSubClusterUniqueID={},{cluster_dn}", env.id));
        for class in ["GlueClusterTop", "GlueSubCluster", "GlueHostApplicationSoftware", "GlueKey", "GlueSchemaVersion"]
        {
            s.push("objectClass", class);
        }
        s.push("GlueSubClusterUniqueID", env.id.clone());
        s.push("GlueSubClusterName", env.name.clone().unwrap_or_else(|| env.id.clone()));
        s.push("GlueChunkKey", format!("GlueClusterUniqueID={cluster}"));
        // GLUE 1.3 counts the CPUs of the whole SubCluster, down nodes included.
        let hw = Hardware::of(group, counts)?;
        s.push(
            "GlueSubClusterPhysicalCPUs",
            hw.required_total_physical(group, config, "GlueSubClusterPhysicalCPUs")?.to_string(),
        );
        s.push(
            "GlueSubClusterLogicalCPUs",
            hw.required_total_logical(group, config, "GlueSubClusterLogicalCPUs")?.to_string(),
        );
        s.push("GlueHostArchitecturePlatformType", g.platform.clone());
        s.push("GlueHostMainMemoryRAMSize", g.main_memory_mib.to_string());
        let mut tags = Vec::new();
        for class in &env.classes {
            let marker = format!("{}{}", class.attribute("Vendor").unwrap_or_default(), class.prefix);
            if !tags.contains(&marker) {
                tags.push(marker);
            }
        }
        tags.extend(environment_attributes(&env.classes, counts).into_iter().map(|a| format!("{}={}", a.key, a.value)));
        for v in &snapshot.virtual_environments {
            tags.push(v.method.clone());
            tags.extend(virtual_attributes(v).into_iter().map(|a| format!("{}{}={}", v.method, a.key, a.value)));
        }
        for tag in tags {
            // The attribute is IA5String: ASCII only.
            if !tag.is_ascii() {
                return Err(ProviderError::Input(format!(
                    "{:?}: tag {tag:?} is not ASCII, which GLUE 1.3 RunTimeEnvironment (IA5String) cannot carry; drop tagged-environment or rename the model",
                    env.id
                )));
            }
            s.push("GlueHostApplicationSoftwareRunTimeEnvironment", tag);
        }
        s.push("GlueSchemaVersionMajor", "1").push("GlueSchemaVersionMinor", "3");
        entries.push(s);
    }
    Ok(entries)
}

/// A group's CPUs, memory and OS: the config's value where it gives one,
/// else what the count source read (the LRMS, or this node for cderd).
/// EGI's profile requires several of them; a missing one is refused with
/// the key that would give it, never guessed.
#[derive(Debug, Clone, Default)]
struct Hardware {
    physical_cpus: Option<u32>,
    logical_cpus: Option<u32>,
    total_physical_cpus: Option<u32>,
    total_logical_cpus: Option<u32>,
    total_slots: Option<u32>,
    virtual_memory_mib: Option<u64>,
    os_name: Option<String>,
    os_version: Option<String>,
}

impl Hardware {
    fn of(group: &NodeGroup, counts: &GroupCounts) -> Result<Hardware, ProviderError> {
        let g = &group.config;
        let h = &counts.hosts;
        let nodes = u32::try_from(group.nodes.len()).unwrap_or(u32::MAX);
        let times_nodes = |per_node: u32, key: &str| {
            per_node.checked_mul(nodes).ok_or_else(|| {
                ProviderError::Input(format!(
                    "group {:?}: group.{key} {per_node} × {nodes} nodes is more than GLUE's UInt32 holds",
                    group.id()
                ))
            })
        };
        Ok(Hardware {
            physical_cpus: g.physical_cpus.or(h.physical_cpus),
            logical_cpus: g.logical_cpus.or(h.logical_cpus),
            total_physical_cpus: match g.physical_cpus {
                Some(n) => Some(times_nodes(n, "physical_cpus")?),
                None => h.total_physical_cpus,
            },
            total_logical_cpus: match g.logical_cpus {
                Some(n) => Some(times_nodes(n, "logical_cpus")?),
                None => h.total_logical_cpus,
            },
            total_slots: h.total_slots,
            virtual_memory_mib: g.virtual_memory_mib.or(h.virtual_memory_mib),
            os_name: g.os_name.clone().or_else(|| h.os_name.clone()),
            os_version: g.os_version.clone().or_else(|| h.os_version.clone()),
        })
    }

    fn required_virtual_memory(&self, group: &NodeGroup, config: &ProviderConfig) -> Result<u64, ProviderError> {
        self.virtual_memory_mib.ok_or_else(|| {
            missing(
                group,
                config,
                "GLUE2ExecutionEnvironmentVirtualMemorySize",
                "virtual_memory_mib (RAM plus swap per node, MiB)",
            )
        })
    }

    fn required_os_name(&self, group: &NodeGroup, config: &ProviderConfig) -> Result<String, ProviderError> {
        self.os_name.clone().ok_or_else(|| {
            missing(group, config, "GLUE2ExecutionEnvironmentOSName", "os_name (e.g. \"CentOS\", \"Debian\")")
        })
    }

    fn required_os_version(&self, group: &NodeGroup, config: &ProviderConfig) -> Result<String, ProviderError> {
        self.os_version
            .clone()
            .ok_or_else(|| missing(group, config, "GLUE2ExecutionEnvironmentOSVersion", "os_version (e.g. \"7.9\")"))
    }

    fn required_total_physical(
        &self,
        group: &NodeGroup,
        config: &ProviderConfig,
        attribute: &str,
    ) -> Result<u32, ProviderError> {
        self.total_physical_cpus
            .ok_or_else(|| missing(group, config, attribute, "physical_cpus (CPU sockets per node)"))
    }

    fn required_total_logical(
        &self,
        group: &NodeGroup,
        config: &ProviderConfig,
        attribute: &str,
    ) -> Result<u32, ProviderError> {
        self.total_logical_cpus
            .ok_or_else(|| missing(group, config, attribute, "logical_cpus (hardware threads per node)"))
    }
}

/// The refusal for a value EGI's profile requires that neither the config
/// nor the count source gives.
fn missing(group: &NodeGroup, config: &ProviderConfig, attribute: &str, key: &str) -> ProviderError {
    let source = match config.counts.source.get_ref() {
        crate::config::CountSourceKind::Cderd => "this node's /proc and /etc/os-release do not give it",
        crate::config::CountSourceKind::Slurm => "scontrol show node does not report it",
        crate::config::CountSourceKind::Torque => "pbsnodes -x does not report it",
        crate::config::CountSourceKind::Static => "the static source reads no hardware",
    };
    ProviderError::Input(format!(
        "group {:?}: {attribute} is mandatory in EGI's GLUE 2 profile and {source}: set group.{key} in the provider's config",
        group.id()
    ))
}

/// `GLUE2ManagerProductVersion`, which EGI's profile requires: the
/// config's, else the version the LRMS's nodes report (SLURM `Version=`,
/// TORQUE `version=`) when they all agree.
fn manager_version(config: &ProviderConfig, snapshot: &Snapshot) -> Result<String, ProviderError> {
    if let Some(v) = config.service.as_ref().and_then(|s| s.manager_version.clone()) {
        return Ok(v);
    }
    // Nodes that never registered report none; the others must agree.
    let reported = snapshot.groups.iter().filter_map(|(_, c)| c.hosts.lrms_version.as_ref());
    match crate::sources::counts::agreed(reported) {
        Some(v) => Ok(v.clone()),
        _ => Err(ProviderError::Input(
            "GLUE2ManagerProductVersion is mandatory in EGI's GLUE 2 profile and the count source reports no single LRMS version: set service.manager_version in the provider's config (or leave [service] out where the CE's own provider publishes the Manager)".into(),
        )),
    }
}

/// The ComputingManager's totals over every group.
struct ManagerTotals {
    physical_cpus: u32,
    logical_cpus: u32,
    /// Only when the LRMS gives every group's slots.
    slots: Option<u32>,
}

/// Sums the groups' CPUs for the ComputingManager that `[service]`
/// publishes; a group whose CPUs are unknown refuses it, naming the key or
/// pointing at the CE's own provider.
fn manager_totals(config: &ProviderConfig, snapshot: &Snapshot) -> Result<ManagerTotals, ProviderError> {
    let mut totals = ManagerTotals { physical_cpus: 0, logical_cpus: 0, slots: Some(0) };
    let overflow = |what: &str| ProviderError::Input(format!("the groups' {what} add up past GLUE's UInt32"));
    let via_service = |e: ProviderError| {
        ProviderError::Input(format!("{e} (it goes into the ComputingManager that [service] publishes; leave [service] out where the CE's own provider publishes the Manager)"))
    };
    for (group, counts) in &snapshot.groups {
        let hw = Hardware::of(group, counts)?;
        let physical =
            hw.required_total_physical(group, config, "GLUE2ComputingManagerTotalPhysicalCPUs").map_err(via_service)?;
        let logical =
            hw.required_total_logical(group, config, "GLUE2ComputingManagerTotalLogicalCPUs").map_err(via_service)?;
        totals.physical_cpus = totals.physical_cpus.checked_add(physical).ok_or_else(|| overflow("CPU sockets"))?;
        totals.logical_cpus = totals.logical_cpus.checked_add(logical).ok_or_else(|| overflow("logical CPUs"))?;
        totals.slots = match (totals.slots, hw.total_slots) {
            (Some(sum), Some(n)) => Some(sum.checked_add(n).ok_or_else(|| overflow("slots"))?),
            _ => None,
        };
    }
    Ok(totals)
}

/// `GLUE2EntityCreationTime`: ISO 8601 UTC, `2026-11-21T19:59:00Z`.
pub fn glue_time(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glue_time_is_iso8601_utc() {
        assert_eq!(glue_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(glue_time(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(glue_time(1_795_291_140), "2026-11-21T19:59:00Z");
    }
}
