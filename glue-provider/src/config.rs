//! `/etc/cder/glue-provider.toml`: what the provider publishes and where it
//! reads the counts.
//!
//! The provider has its own file because `cder.toml` is the node's config
//! (and rejects unknown tables). Errors are [`cder_model::ConfigError`]s that
//! name the file, line, column and key, as `cder.toml`'s do.
//!
//! ```toml
//! [site]
//! computing_service_id = "ce.example.org_ComputingElement"
//! computing_manager_id = "ce.example.org_ComputingElement_Manager"
//! ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
//! cluster_id = "ce.example.org"          # GLUE 1.3, for tagged-environment
//! strategies = ["attribute-extension"]
//!
//! [counts]
//! source = "slurm"                       # cderd | slurm | torque | static
//!
//! [[group]]
//! id = "ce.example.org_gts450"
//! nodes = ["wn[01-16]"]
//! platform = "amd64"
//! main_memory_mib = 16384
//!
//! [[group.device]]
//! model = "GeForce GTS 450"
//! count = 2
//! memory_mib = 1024
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cder_model::{config, ConfigError};
use cder_request::hostlist::{self, Hostlist};
use serde::Deserialize;
use toml::Spanned;

/// Where the provider's config lives unless `--config` or `CDER_GLUE_CONFIG` says otherwise.
pub const DEFAULT_PROVIDER_CONFIG: &str = "/etc/cder/glue-provider.toml";
/// The environment variable that overrides [`DEFAULT_PROVIDER_CONFIG`].
pub const PROVIDER_CONFIG_ENV: &str = "CDER_GLUE_CONFIG";

/// The whole provider configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `[site]`: the ids every published entry hangs from.
    pub site: Site,
    /// Present when this provider also publishes the ComputingService and
    /// ComputingManager entries (a site whose CE does not publish them).
    #[serde(default)]
    pub service: Option<Service>,
    /// `[counts]`: where the dynamic (free/used) numbers come from.
    pub counts: CountsConfig,
    /// The node groups: one ExecutionEnvironment each.
    #[serde(rename = "group")]
    pub groups: Vec<GroupConfig>,
    /// Virtual-GPGPU application environments (rCUDA, VCL).
    #[serde(default, rename = "virtual")]
    pub virtual_environments: Vec<VirtualConfig>,
    /// The VOs the site serves and who their jobs run as: with any, one
    /// ComputingShare per (queue, VO) is published ([`crate::shares`]).
    #[serde(default, rename = "vo")]
    pub vos: Vec<VoConfig>,
}

/// One `[[vo]]`: how the site maps a VO's jobs to its batch system, as it
/// maps the VO's grid users to pool accounts. A job belongs to the VO when
/// its account, group, user or QOS is listed here.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoConfig {
    /// The VO's name, as in `GLUE2PolicyRule: VO:<name>` and the JDL's `VirtualOrganisation`.
    pub name: Spanned<String>,
    /// SLURM accounts the VO's jobs are charged to (`AllowAccounts`).
    #[serde(default)]
    pub accounts: Vec<String>,
    /// Unix groups of the VO's pool accounts (SLURM `AllowGroups`, TORQUE `acl_groups`).
    #[serde(default)]
    pub groups: Vec<String>,
    /// Pool accounts (TORQUE `acl_users`): a job run by one of them is the VO's.
    #[serde(default)]
    pub users: Vec<String>,
    /// SLURM QOS the VO's jobs run under (`AllowQos`; their `GrpTRES` and
    /// `MaxTRESPerJob` on the GPU GRES limit the VO's shares).
    #[serde(default)]
    pub qos: Vec<String>,
    /// The queues (partitions) the CE sends the VO's jobs to; default: every
    /// one that admits the VO.
    #[serde(default)]
    pub queues: Option<Vec<String>>,
}

/// `[site]`: the ids the published entries hang from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    /// `GLUE2ServiceID` of the CE's ComputingService (the parent in the DN).
    pub computing_service_id: Spanned<String>,
    /// `GLUE2ManagerID` of the LRMS's ComputingManager (the foreign key).
    pub computing_manager_id: Spanned<String>,
    /// The CE endpoint / GLUE 1.3 `GlueCEUniqueID`.
    pub ce_unique_id: Spanned<String>,
    /// GLUE 1.3 `GlueClusterUniqueID`; required by `tagged-environment`.
    #[serde(default)]
    pub cluster_id: Option<Spanned<String>>,
    /// `GLUE2EntityValidity` in seconds: how long consumers may trust a value.
    #[serde(default = "default_validity")]
    pub validity: u64,
    /// Strategies used when `--strategy` is not given.
    #[serde(default)]
    pub strategies: Option<Spanned<Vec<Strategy>>>,
    /// The node config that `inventory = true` groups discover through.
    #[serde(default)]
    pub cder_config: Option<PathBuf>,
    /// `GLUE2ShareID`s of the CE's ComputingShares that run on these groups:
    /// `glue21-accelerator` publishes a ComputingShareAcceleratorInfo for each.
    #[serde(default)]
    pub computing_share_ids: Vec<String>,
}

fn default_validity() -> u64 {
    600
}

/// `[service]`: the CE's own entries, for sites whose CE does not publish them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// `GLUE2ServiceType`, e.g. `org.glite.ce.CREAM` or `org.nordugrid.arex`.
    #[serde(rename = "type")]
    pub service_type: String,
    /// `GLUE2ServiceQualityLevel` (default `production`).
    #[serde(default = "default_quality")]
    pub quality_level: String,
    /// `GLUE2ServiceAdminDomainForeignKey`: the site's GOCDB name.
    pub admin_domain: String,
    /// `GLUE2ManagerProductName`, e.g. `SLURM`, `TORQUE`.
    pub manager_product: String,
    /// `GLUE2ManagerProductVersion`, when known.
    #[serde(default)]
    pub manager_version: Option<String>,
}

fn default_quality() -> String {
    "production".into()
}

/// Where the dynamic counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CountSourceKind {
    /// The local node's cderd (`status`): a single-node site.
    Cderd,
    /// `scontrol -d show node -o`: `Gres=` and `GresUsed=` of every node.
    Slurm,
    /// `pbsnodes -x`: `<gpus>`, `<gpu_status>` and the node state.
    Torque,
    /// The `free` / `used` / `offline` values written in `[[group.device]]`.
    Static,
}

/// `[counts]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountsConfig {
    /// Which of cderd, SLURM, TORQUE or the config gives the counts.
    pub source: Spanned<CountSourceKind>,
    /// cderd's socket (default `/run/cder/cderd.sock`).
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The `scontrol` program for `source = "slurm"` (default: from `PATH`).
    #[serde(default = "default_scontrol")]
    pub scontrol: PathBuf,
    /// The `squeue` program that lists SLURM's jobs for `[[vo]]` shares (default: from `PATH`).
    #[serde(default = "default_squeue")]
    pub squeue: PathBuf,
    /// The `pbsnodes` program for `source = "torque"` (default: from `PATH`).
    #[serde(default = "default_pbsnodes")]
    pub pbsnodes: PathBuf,
    /// The `qstat` program that lists TORQUE's queues and jobs for `[[vo]]` shares (default: from `PATH`).
    #[serde(default = "default_qstat")]
    pub qstat: PathBuf,
    /// Seconds to wait for cderd or the LRMS command (1 to [`MAX_TIMEOUT_S`]).
    #[serde(default = "default_timeout")]
    pub timeout_s: Spanned<u64>,
    /// SLURM GRES name per CDER type (default: `gpu` for `gpgpu`, else the type name).
    #[serde(default)]
    pub gres: BTreeMap<String, String>,
    /// Where vGPGPU counts come from: the `[[virtual]]` values, or the
    /// cluster registry named in the node config's `[registry]`.
    #[serde(default)]
    pub virtual_source: VirtualSourceKind,
}

/// Where vGPGPU counts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VirtualSourceKind {
    /// `total` / `free` of each `[[virtual]]`.
    #[default]
    Config,
    /// `cder-registryd`'s status (the `[registry]` of `site.cder_config`).
    Registry,
}

fn default_scontrol() -> PathBuf {
    "scontrol".into()
}
fn default_squeue() -> PathBuf {
    "squeue".into()
}
fn default_pbsnodes() -> PathBuf {
    "pbsnodes".into()
}
fn default_qstat() -> PathBuf {
    "qstat".into()
}

fn default_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 30)
}

/// The longest `counts.timeout_s`: bdii-update runs providers every few
/// minutes, and a deadline must stay a time the clock can represent.
pub const MAX_TIMEOUT_S: u64 = 3600;

impl CountsConfig {
    /// The SLURM GRES name that counts devices of `cder_type`.
    pub fn gres_name(&self, cder_type: &str) -> String {
        self.gres.get(cder_type).cloned().unwrap_or_else(|| {
            if cder_type == "gpgpu" {
                "gpu".into()
            } else {
                cder_type.into()
            }
        })
    }
}

/// One `[[group]]`: a class of identical worker nodes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// `GLUE2ResourceID` of the ExecutionEnvironment (and GLUE 1.3 SubCluster id).
    pub id: Spanned<String>,
    /// `GLUE2EntityName` of the ExecutionEnvironment (and GLUE 1.3 SubCluster name); default: the id.
    #[serde(default)]
    pub name: Option<String>,
    /// Host names or SLURM-style host lists (`wn[01-16]`).
    pub nodes: Spanned<Vec<String>>,
    /// `GLUE2ExecutionEnvironmentPlatform`: `amd64`, `i686`, `aarch64` …
    pub platform: String,
    /// Per node, MB.
    #[serde(alias = "main_memory_mb")]
    pub main_memory_mib: u64,
    /// `GLUE2ExecutionEnvironmentOSFamily` (default `linux`).
    #[serde(default = "default_os_family")]
    pub os_family: String,
    /// `GLUE2ExecutionEnvironmentOSName`, e.g. `CentOS`.
    #[serde(default)]
    pub os_name: Option<String>,
    /// `GLUE2ExecutionEnvironmentOSVersion`.
    #[serde(default)]
    pub os_version: Option<String>,
    /// `GLUE2ExecutionEnvironmentConnectivityIn`: jobs can be reached from outside (default false).
    #[serde(default)]
    pub connectivity_in: bool,
    /// `GLUE2ExecutionEnvironmentConnectivityOut`: jobs can open outbound connections (default true).
    #[serde(default = "default_true")]
    pub connectivity_out: bool,
    /// `GLUE2ExecutionEnvironmentPhysicalCPUs`: CPU sockets per node.
    #[serde(default)]
    pub physical_cpus: Option<u32>,
    /// `GLUE2ExecutionEnvironmentLogicalCPUs`: hardware threads per node.
    #[serde(default)]
    pub logical_cpus: Option<u32>,
    /// `GLUE2ExecutionEnvironmentCPUVendor`.
    #[serde(default)]
    pub cpu_vendor: Option<String>,
    /// `GLUE2ExecutionEnvironmentCPUModel`.
    #[serde(default)]
    pub cpu_model: Option<String>,
    /// `GLUE2ExecutionEnvironmentCPUClockSpeed`, in MHz.
    #[serde(default)]
    pub cpu_clock_mhz: Option<u32>,
    /// `GLUE2ExecutionEnvironmentVirtualMemorySize`: RAM plus swap per node,
    /// MB; needed where the count source cannot see swap (SLURM, static).
    #[serde(default)]
    #[serde(alias = "virtual_memory_mb")]
    pub virtual_memory_mib: Option<u64>,
    /// `GLUE2ExecutionEnvironmentCPUTimeScalingFactor`: the factor the LRMS
    /// applies to a job's CPU-time limit on these nodes (TORQUE's mom
    /// `$cputmult`); default 1, as SLURM and an unset `$cputmult` scale nothing.
    #[serde(default = "unscaled")]
    pub cpu_time_scaling_factor: Spanned<f64>,
    /// `GLUE2ExecutionEnvironmentWallTimeScalingFactor`: likewise for the
    /// wall-time limit (TORQUE's mom `$wallmult`); default 1.
    #[serde(default = "unscaled")]
    pub wall_time_scaling_factor: Spanned<f64>,
    /// Take the devices from this node's inventory (`cder.toml`, NVML or
    /// static) instead of `[[group.device]]`.
    #[serde(default)]
    pub inventory: bool,
    /// The devices on each node of the group, one entry per kind.
    #[serde(default, rename = "device")]
    pub devices: Vec<GroupDevice>,
}

fn unscaled() -> Spanned<f64> {
    Spanned::new(0..0, 1.0)
}

fn default_os_family() -> String {
    "linux".into()
}
fn default_true() -> bool {
    true
}

cder_model::device_table! {
    /// One `[[group.device]]`: `count` identical devices on every node.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct GroupDevice {
        /// The CDER type the devices belong to (default `gpgpu`), as in `cder.toml`.
        #[serde(rename = "type", default = "default_type")]
        pub cder_type: String,
        /// Published prefix (default: the upper-cased type, `GPGPU`).
        #[serde(default)]
        pub prefix: Option<String>,
        /// The vendor as published (default `Nvidia`).
        #[serde(default = "default_vendor")]
        pub vendor: String,
        /// Devices per node.
        pub count: u32,
        @attributes
        /// The SLURM GRES type that counts these devices (`gpu:<gres_type>:N`);
        /// needed when a group has several kinds of device of one type.
        #[serde(default)]
        pub gres_type: Option<String>,
        /// With `counts.source = "static"`: devices of the whole group in use,
        /// drained/unhealthy, and free (default: the rest).
        #[serde(default)]
        pub used: Option<u32>,
        /// Devices of the whole group drained or unhealthy (with `counts.source = "static"`).
        #[serde(default)]
        pub offline: Option<u32>,
        /// Free devices of the whole group (with `counts.source = "static"`; default: the rest).
        #[serde(default)]
        pub free: Option<u32>,
    }
}

fn default_type() -> String {
    cder_request::GPGPU.into()
}
fn default_vendor() -> String {
    "Nvidia".into()
}

/// One `[[virtual]]`: an API-interception vGPGPU service (rCUDA, VCL).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualConfig {
    /// `rCUDA`, `VCL`, …: the ApplicationEnvironment's AppName.
    pub method: Spanned<String>,
    /// `GLUE2ApplicationEnvironmentID` (default `<manager id>_<method>`).
    #[serde(default)]
    pub id: Option<String>,
    /// `GLUE2ApplicationEnvironmentAppVersion` of the method's software.
    #[serde(default)]
    pub version: Option<String>,
    /// Installed vGPGPUs (with `counts.virtual_source = "config"`).
    #[serde(default)]
    pub total: Option<u32>,
    /// Free vGPGPUs (with `counts.virtual_source = "config"`).
    #[serde(default)]
    pub free: Option<u32>,
}

impl ProviderConfig {
    /// The config file to read: `explicit`, else `$CDER_GLUE_CONFIG`, else the default.
    pub fn resolve_path(explicit: Option<&Path>) -> PathBuf {
        config::resolve_path(explicit, PROVIDER_CONFIG_ENV, DEFAULT_PROVIDER_CONFIG)
    }

    /// Reads and validates the config chosen by [`ProviderConfig::resolve_path`].
    pub fn load(explicit: Option<&Path>) -> Result<ProviderConfig, ConfigError> {
        let path = Self::resolve_path(explicit);
        Self::parse(&config::read_text(&path)?, &path)
    }

    /// Parses and validates config text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<ProviderConfig, ConfigError> {
        let config: ProviderConfig = config::from_toml(text, path)?;
        config.validate(text, path)?;
        Ok(config)
    }

    /// The strategies to use when none are given on the command line.
    pub fn default_strategies(&self) -> Vec<Strategy> {
        match &self.site.strategies {
            Some(list) if !list.get_ref().is_empty() => list.get_ref().clone(),
            _ => vec![Strategy::AttributeExtension],
        }
    }

    fn validate(&self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let at = |offset: usize, key: &str, message: String| ConfigError::at(path, text, offset, key, message);
        for (key, id) in [
            ("site.computing_service_id", &self.site.computing_service_id),
            ("site.computing_manager_id", &self.site.computing_manager_id),
            ("site.ce_unique_id", &self.site.ce_unique_id),
        ]
        .into_iter()
        .chain(self.site.cluster_id.as_ref().map(|c| ("site.cluster_id", c)))
        {
            check_id(id.get_ref()).map_err(|m| at(id.span().start, key, m))?;
        }
        if self.groups.is_empty() {
            return Err(ConfigError {
                path: path.to_path_buf(),
                line: None,
                column: None,
                key: Some("group".into()),
                message: "at least one [[group]] is required".into(),
            });
        }
        let source = *self.counts.source.get_ref();
        let timeout = *self.counts.timeout_s.get_ref();
        if !(1..=MAX_TIMEOUT_S).contains(&timeout) {
            return Err(at(
                self.counts.timeout_s.span().start,
                "counts.timeout_s",
                format!("{timeout} is out of range: give 1 to {MAX_TIMEOUT_S} seconds"),
            ));
        }
        let mut ids = BTreeSet::new();
        let mut all_nodes = BTreeSet::new();
        for group in &self.groups {
            let id_at = group.id.span().start;
            check_id(group.id.get_ref()).map_err(|m| at(id_at, "group.id", m))?;
            if !ids.insert(group.id.get_ref().clone()) {
                return Err(at(id_at, "group.id", format!("group {:?} is configured twice", group.id.get_ref())));
            }
            let nodes_at = group.nodes.span().start;
            let nodes =
                Hostlist::HOSTS.expand_all(group.nodes.get_ref()).map_err(|m| at(nodes_at, "group.nodes", m.into()))?;
            if nodes.is_empty() {
                return Err(at(nodes_at, "group.nodes", "a group needs at least one node".into()));
            }
            for node in &nodes {
                if !all_nodes.insert(node.clone()) {
                    return Err(at(nodes_at, "group.nodes", format!("node {node:?} is in two groups")));
                }
            }
            if all_nodes.len() > hostlist::MAX_HOSTS {
                return Err(at(
                    nodes_at,
                    "group.nodes",
                    format!("the groups name more than {} nodes together", hostlist::MAX_HOSTS),
                ));
            }
            if group.platform.trim().is_empty() {
                return Err(at(id_at, "group.platform", "must not be empty".into()));
            }
            for (key, factor) in [
                ("group.cpu_time_scaling_factor", &group.cpu_time_scaling_factor),
                ("group.wall_time_scaling_factor", &group.wall_time_scaling_factor),
            ] {
                let f = *factor.get_ref();
                if !(f.is_finite() && f > 0.0 && f <= 1000.0) {
                    return Err(at(
                        factor.span().start,
                        key,
                        format!("{f} is not a scaling factor: give a number above 0, at most 1000"),
                    ));
                }
            }
            match (group.inventory, group.devices.is_empty()) {
                (true, false) => {
                    return Err(at(
                        id_at,
                        "group.device",
                        "a group takes its devices from the inventory or from [[group.device]], not both".into(),
                    ));
                }
                (false, true) => {
                    return Err(at(
                        id_at,
                        "group.device",
                        "list the devices in [[group.device]] or set inventory = true".into(),
                    ));
                }
                _ => {}
            }
            if group.inventory && source == CountSourceKind::Static {
                return Err(at(
                    id_at,
                    "group.inventory",
                    "counts.source = \"static\" needs [[group.device]] entries with their counts".into(),
                ));
            }
            let mut kinds = BTreeSet::new();
            for dev in &group.devices {
                let dev_at = dev.model.span().start;
                let same_type = group.devices.iter().filter(|d| d.cder_type == dev.cder_type).count();
                if !kinds.insert((dev.cder_type.clone(), dev.model.get_ref().clone(), dev.gres_type.clone())) {
                    return Err(at(dev_at, "group.device.model", format!("{:?} of type {:?} is listed twice in group {:?}: give it one entry with the per-node count", dev.model.get_ref(), dev.cder_type, group.id.get_ref())));
                }
                // Several kinds under one GRES name (models of one type, or an
                // NVIDIA and an AMD type both counted as `gpu`): only the GRES type tells them apart.
                let gres = self.counts.gres_name(&dev.cder_type);
                let same_gres = group.devices.iter().filter(|d| self.counts.gres_name(&d.cder_type) == gres).count();
                if source == CountSourceKind::Slurm && same_gres > 1 && dev.gres_type.is_none() {
                    return Err(at(dev_at, "group.device.gres_type", format!("group {:?} has several kinds of device counted by SLURM's GRES {gres:?}: SLURM counts each by its GRES type ({gres}:<type>:N), so set gres_type on each", group.id.get_ref())));
                }
                if source == CountSourceKind::Torque && same_type > 1 {
                    return Err(at(
                        dev_at,
                        "group.device.type",
                        format!(
                            "group {:?} has several kinds of {} device, which TORQUE's <gpus> count cannot tell apart",
                            group.id.get_ref(),
                            dev.cder_type
                        ),
                    ));
                }
                if dev.model.get_ref().trim().is_empty() {
                    return Err(at(dev_at, "group.device.model", "must not be empty".into()));
                }
                let prefix = dev.prefix.clone().unwrap_or_else(|| dev.cder_type.to_ascii_uppercase());
                if prefix.is_empty()
                    || !prefix.starts_with(|c: char| c.is_ascii_alphabetic())
                    || !prefix.bytes().all(|b| b.is_ascii_alphanumeric())
                {
                    return Err(at(
                        dev_at,
                        "group.device.prefix",
                        format!("{prefix:?} must be letters and digits, starting with a letter"),
                    ));
                }
                let counted = [dev.used, dev.offline, dev.free];
                if source != CountSourceKind::Static && counted.iter().any(Option::is_some) {
                    return Err(at(
                        dev_at,
                        "group.device.free",
                        "free/used/offline are only read with counts.source = \"static\"".into(),
                    ));
                }
                if dev.cores.is_none() {
                    if let (Some(mp), Some(per_mp)) = (dev.multiprocessors, dev.cores_per_mp) {
                        if mp.checked_mul(per_mp).is_none() {
                            return Err(at(
                                dev_at,
                                "group.device.cores_per_mp",
                                format!("multiprocessors {mp} × cores_per_mp {per_mp} is out of range for cores"),
                            ));
                        }
                    }
                }
                if source == CountSourceKind::Static {
                    let total = static_total(dev.count, nodes.len()).ok_or_else(|| {
                        at(
                            dev_at,
                            "group.device.count",
                            format!("{} per node × {} nodes is out of range", dev.count, nodes.len()),
                        )
                    })?;
                    for (key, value) in [
                        ("group.device.used", dev.used),
                        ("group.device.offline", dev.offline),
                        ("group.device.free", dev.free),
                    ] {
                        if let Some(n) = value.filter(|&n| n > total) {
                            return Err(at(dev_at, key, format!("{n} is more than the group's {total} devices")));
                        }
                    }
                }
            }
        }
        if source == CountSourceKind::Cderd {
            let single = self.groups.len() == 1
                && Hostlist::HOSTS.expand_all(self.groups[0].nodes.get_ref()).map(|n| n.len()) == Ok(1);
            if !single {
                return Err(at(
                    self.counts.source.span().start,
                    "counts.source",
                    "\"cderd\" reads one node's daemon: configure exactly one [[group]] with one node, or count from \"slurm\" or \"torque\"".into(),
                ));
            }
        }
        let mut methods = BTreeSet::new();
        for v in &self.virtual_environments {
            let method = v.method.get_ref();
            let v_at = v.method.span().start;
            check_id(method).map_err(|m| at(v_at, "virtual.method", m))?;
            if !methods.insert(method.clone()) {
                return Err(at(v_at, "virtual.method", format!("{method:?} is configured twice")));
            }
            match (self.counts.virtual_source, v.total, v.free) {
                (VirtualSourceKind::Config, Some(total), Some(free)) if free > total => {
                    return Err(at(v_at, "virtual.free", format!("free ({free}) is more than total ({total})")));
                }
                (VirtualSourceKind::Config, None, _) => {
                    return Err(at(
                        v_at,
                        "virtual.total",
                        "required unless counts.virtual_source = \"registry\"".into(),
                    ))
                }
                (VirtualSourceKind::Config, _, None) => {
                    return Err(at(v_at, "virtual.free", "required unless counts.virtual_source = \"registry\"".into()))
                }
                (VirtualSourceKind::Registry, Some(_), _) | (VirtualSourceKind::Registry, _, Some(_)) => {
                    return Err(at(
                        v_at,
                        "virtual.total",
                        "counts.virtual_source = \"registry\" counts vGPGPUs itself: drop total and free".into(),
                    ));
                }
                _ => {}
            }
            if let Some(id) = &v.id {
                check_id(id).map_err(|m| at(v_at, "virtual.id", m))?;
            }
        }
        let mut vo_names = BTreeSet::new();
        for vo in &self.vos {
            let vo_at = vo.name.span().start;
            let name = vo.name.get_ref();
            check_id(name).map_err(|m| at(vo_at, "vo.name", m))?;
            if !vo_names.insert(name.clone()) {
                return Err(at(vo_at, "vo.name", format!("VO {name:?} is configured twice")));
            }
            if !matches!(source, CountSourceKind::Slurm | CountSourceKind::Torque) {
                return Err(at(
                    vo_at,
                    "vo",
                    "per-VO shares read the batch system's queues and jobs: they need counts.source = \"slurm\" or \"torque\"".into(),
                ));
            }
            if vo.accounts.is_empty() && vo.groups.is_empty() && vo.users.is_empty() && vo.qos.is_empty() {
                return Err(at(
                    vo_at,
                    "vo.accounts",
                    format!("VO {name:?} names no accounts, groups, users or qos: no job could be told to be its"),
                ));
            }
            for (key, list) in [
                ("vo.accounts", &vo.accounts),
                ("vo.groups", &vo.groups),
                ("vo.users", &vo.users),
                ("vo.qos", &vo.qos),
                ("vo.queues", vo.queues.as_ref().unwrap_or(&Vec::new())),
            ] {
                if let Some(bad) = list.iter().find(|v| v.is_empty() || v.contains([',', ' ', '(', ')', '='])) {
                    return Err(at(vo_at, key, format!("{bad:?} is not a batch-system name")));
                }
            }
        }
        Ok(())
    }
}

/// GLUE ids go into DNs and foreign keys unchanged, so they are kept to
/// printable ASCII without the characters a DN would have to escape.
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("must not be empty".into());
    }
    match id.chars().find(|&c| !c.is_ascii_graphic() || ",+\"\\<>;=#".contains(c)) {
        Some(c) => {
            Err(format!("{id:?} contains {c:?}; use printable ASCII without spaces or any of , + \" \\ < > ; = #"))
        }
        None => Ok(()),
    }
}

/// How CDER attributes are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// `GLUE2EntityOtherInfo: Key=Value` on the ExecutionEnvironment (the thesis's choice).
    AttributeExtension,
    /// One `GLUE2Extension` object per key.
    ClassExtension,
    /// Static keys as OtherInfo, dynamic counts as Extensions.
    Hybrid,
    /// GLUE 1.3 RunTimeEnvironment tags under `o=grid`, for legacy brokers.
    TaggedEnvironment,
    /// GLUE 2.1 AcceleratorEnvironment, ComputingShareAcceleratorInfo and
    /// ComputingManagerAcceleratorInfo entries (deploy/bdii/GLUE21-accelerator.schema).
    #[serde(rename = "glue21-accelerator")]
    #[value(name = "glue21-accelerator")]
    Glue21Accelerator,
}

impl Strategy {
    /// The name used on the command line and in the config.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::AttributeExtension => "attribute-extension",
            Strategy::ClassExtension => "class-extension",
            Strategy::Hybrid => "hybrid",
            Strategy::TaggedEnvironment => "tagged-environment",
            Strategy::Glue21Accelerator => "glue21-accelerator",
        }
    }

    /// Every strategy, in the order above.
    pub const ALL: [Strategy; 5] = [
        Strategy::AttributeExtension,
        Strategy::ClassExtension,
        Strategy::Hybrid,
        Strategy::TaggedEnvironment,
        Strategy::Glue21Accelerator,
    ];
}

/// The devices of a configured group (checked here, counted by
/// `sources::configured`): `count` per node × nodes, `None`
/// when that does not fit in a u32.
pub fn static_total(count: u32, nodes: usize) -> Option<u32> {
    u32::try_from(nodes).ok()?.checked_mul(count)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const SAMPLE: &str = r#"[site]
computing_service_id = "ce.example.org_ComputingElement"
computing_manager_id = "ce.example.org_ComputingElement_Manager"
ce_unique_id = "ce.example.org:8443/cream-slurm-gpgpu"
cluster_id = "ce.example.org"

[counts]
source = "static"

[[group]]
id = "ce.example.org_gts450"
nodes = ["wn[01-16]"]
platform = "amd64"
main_memory_mib = 16384
virtual_memory_mib = 20480
os_name = "CentOS"
os_version = "7.9"
physical_cpus = 2
logical_cpus = 16

[[group.device]]
model = "GeForce GTS 450"
count = 2
memory_mib = 1024
compute_capability = "2.1"
multiprocessors = 4
cores_per_mp = 48
clock_mhz = 1660
used = 2
"#;

    fn parse(text: &str) -> Result<ProviderConfig, ConfigError> {
        ProviderConfig::parse(text, Path::new("glue-provider.toml"))
    }

    #[test]
    fn sample_parses_with_defaults() {
        let c = parse(SAMPLE).unwrap();
        assert_eq!(c.groups.len(), 1);
        assert_eq!(c.groups[0].os_family, "linux");
        assert!(c.groups[0].connectivity_out && !c.groups[0].connectivity_in);
        assert_eq!(c.groups[0].devices[0].cder_type, "gpgpu");
        assert_eq!(c.groups[0].devices[0].vendor, "Nvidia");
        assert_eq!(c.site.validity, 600);
        assert_eq!(c.default_strategies(), vec![Strategy::AttributeExtension]);
        assert_eq!(c.counts.gres_name("gpgpu"), "gpu");
        assert_eq!(c.counts.gres_name("fpga"), "fpga");
    }

    #[test]
    fn the_old_mb_spellings_still_load() {
        let old =
            SAMPLE.replace("main_memory_mib", "main_memory_mb").replace("virtual_memory_mib", "virtual_memory_mb");
        let old = old.replace("\nmemory_mib = ", "\nmemory_mb = ");
        assert!(old.contains("main_memory_mb") && old.contains("\nmemory_mb = "), "{old}");
        let (o, n) = (parse(&old).unwrap(), parse(SAMPLE).unwrap());
        assert_eq!(o.groups[0].main_memory_mib, n.groups[0].main_memory_mib);
        assert_eq!(o.groups[0].virtual_memory_mib, n.groups[0].virtual_memory_mib);
        assert_eq!(o.groups[0].devices[0].memory_mib, n.groups[0].devices[0].memory_mib);
    }

    #[test]
    fn missing_key_is_named_with_its_table() {
        let e = parse(&SAMPLE.replace("computing_manager_id = \"ce.example.org_ComputingElement_Manager\"\n", ""))
            .unwrap_err();
        assert!(e.message.contains("missing field `computing_manager_id`"), "{e}");
        assert_eq!(e.key.as_deref(), Some("site.computing_manager_id"), "{e}");
        assert!(e.line.is_some(), "{e}");
        let e = parse(&SAMPLE.replace("main_memory_mib = 16384\n", "")).unwrap_err();
        assert!(e.to_string().contains("main_memory_mib"), "{e}");
    }

    #[test]
    fn unknown_and_bad_values_are_located() {
        let e = parse(&SAMPLE.replace("count = 2", "count = 2\ncuont = 3")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(24), Some("group.device.cuont")), "{e}");
        let e = parse(&SAMPLE.replace("memory_mib = 1024", "memory_mib = \"lots\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(24), Some("group.device.memory_mib")), "{e}");
        let e = parse(&SAMPLE.replace("source = \"static\"", "source = \"maui\"")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(8), Some("counts.source")), "{e}");
    }

    #[test]
    fn semantic_errors_are_located() {
        let e = parse(&SAMPLE.replace("ce.example.org_gts450", "bad,id")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(11), Some("group.id")), "{e}");
        let e = parse(&SAMPLE.replace("wn[01-16]", "wn[16-01]")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.nodes"), "{e}");
        let e =
            parse(&SAMPLE.replace("source = \"static\"", "source = \"cderd\"").replace("used = 2\n", "")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("counts.source"), "{e}");
        let e = parse(&SAMPLE.replace("source = \"static\"", "source = \"slurm\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.device.free"), "{e}");
        let twice = format!("{SAMPLE}\n[[group]]\nid = \"g2\"\nnodes = [\"wn05\"]\nplatform = \"amd64\"\nmain_memory_mib = 1\ninventory = true\n");
        let e = parse(&twice).unwrap_err();
        assert!(e.message.contains("\"wn05\" is in two groups"), "{e}");
    }

    #[test]
    fn virtual_counts_come_from_one_place() {
        let with = |counts: &str, virt: &str| {
            parse(&format!(
                "{}\n[[virtual]]\nmethod = \"rCUDA\"\n{virt}",
                SAMPLE.replace("source = \"static\"", counts)
            ))
        };
        assert!(with("source = \"static\"", "total = 4\nfree = 2\n").is_ok());
        assert_eq!(with("source = \"static\"", "total = 4\n").unwrap_err().key.as_deref(), Some("virtual.free"));
        assert_eq!(
            with("source = \"static\"", "total = 4\nfree = 5\n").unwrap_err().key.as_deref(),
            Some("virtual.free")
        );
        let registry = "source = \"static\"\nvirtual_source = \"registry\"";
        assert!(with(registry, "version = \"16.11\"\n").is_ok());
        let e = with(registry, "total = 4\nfree = 2\n").unwrap_err();
        assert!(e.message.contains("counts vGPGPUs itself"), "{e}");
    }

    #[test]
    fn out_of_range_numbers_name_their_key() {
        let e = parse(&SAMPLE.replace("source = \"static\"", "source = \"static\"\ntimeout_s = 0")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(9), Some("counts.timeout_s")), "{e}");
        let e = parse(&SAMPLE.replace("source = \"static\"", "source = \"static\"\ntimeout_s = 18446744073709"))
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("counts.timeout_s"), "{e}");
        assert!(e.message.contains("out of range"), "{e}");
        assert!(parse(&SAMPLE.replace("source = \"static\"", "source = \"static\"\ntimeout_s = 3600")).is_ok());
        // 16 nodes × 2^28 devices is past u32.
        let e = parse(&SAMPLE.replace("count = 2", "count = 268435456")).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(22), Some("group.device.count")), "{e}");
        assert!(parse(&SAMPLE.replace("count = 2", "count = 268435455")).is_ok());
        let e = parse(&SAMPLE.replace("used = 2", "used = 33")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.device.used"), "{e}");
        assert!(e.message.contains("33 is more than the group's 32 devices"), "{e}");
        let e = parse(&SAMPLE.replace("used = 2", "offline = 4294967295")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.device.offline"), "{e}");
        let e = parse(&SAMPLE.replace("multiprocessors = 4", "multiprocessors = 4294967295")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("group.device.cores_per_mp"), "{e}");
        // With cores given, the product is never computed.
        assert!(parse(&SAMPLE.replace("multiprocessors = 4", "multiprocessors = 4294967295\ncores = 192")).is_ok());
    }

    #[test]
    fn non_utf8_file_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("glue-provider.toml");
        let mut bytes = SAMPLE.replace("GeForce GTS 450", "GeForce GTS 45@").into_bytes();
        let at = bytes.iter().position(|&b| b == b'@').unwrap();
        bytes[at] = 0xff;
        std::fs::write(&path, bytes).unwrap();
        let e = ProviderConfig::load(Some(&path)).unwrap_err();
        assert_eq!(e.line, Some(22), "{e}");
        assert_eq!(e.column, Some(24), "{e}");
        assert_eq!(e.key.as_deref(), Some("group.device.model"), "{e}");
        assert!(e.message.contains("UTF-8"), "{e}");
    }
}
