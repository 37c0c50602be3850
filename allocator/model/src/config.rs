//! `/etc/cder/cder.toml`: the node section and the configured CDER types.
//!
//! Every error names the file, the line and column, and the key, so an admin
//! can go straight to the mistake:
//! `cder.toml:14:14: cder.device.memory_mib: invalid type: string "lots", expected u64`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize};
use toml::Spanned;

use crate::device::{Device, DeviceNumber, Health};

/// Where the config lives unless `--config` or `CDER_CONFIG` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/cder/cder.toml";
/// The node daemon's socket unless `[node] socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/cder/cderd.sock";
/// The environment variable that overrides [`DEFAULT_CONFIG_PATH`].
pub const CONFIG_ENV: &str = "CDER_CONFIG";

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The `[node]` table: socket, state, operators, enforcement.
    #[serde(default)]
    pub node: NodeConfig,
    /// The `[[cder]]` tables, in file order.
    #[serde(default, rename = "cder")]
    pub cders: Vec<CderType>,
    /// `[registry]`: the cluster's vGPGPU registry (see [`crate::registry`]).
    #[serde(default)]
    pub registry: Option<crate::registry::RegistryConfig>,
    /// `[slurm]`: what spank_cder.so does beyond allocating.
    #[serde(default)]
    pub slurm: SlurmSection,
}

/// `[slurm]`: what spank_cder.so does at the job's end beyond releasing.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// Whether the job epilog writes the job's GPU use (cderd's `usage`)
    /// into its `AdminComment`, which `sacct` shows.
    #[serde(default)]
    pub admin_comment: AdminCommentMode,
    /// The `scontrol` the epilog runs (a bare name is looked up in `PATH`).
    #[serde(default = "default_scontrol")]
    pub scontrol: PathBuf,
    /// Seconds the `usage` question and each `scontrol` may take; past
    /// that the comment is skipped and the epilog goes on.
    #[serde(default = "default_admin_comment_timeout_s")]
    pub admin_comment_timeout_s: u64,
}

impl Default for SlurmSection {
    fn default() -> Self {
        SlurmSection {
            admin_comment: AdminCommentMode::default(),
            scontrol: default_scontrol(),
            admin_comment_timeout_s: default_admin_comment_timeout_s(),
        }
    }
}

/// `[slurm] admin_comment`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AdminCommentMode {
    /// Leave `AdminComment` alone (sites use it for their own notes, and
    /// tools such as jobstats overwrite it).
    #[default]
    Off,
    /// Put cder's figures under the key `cder` of a JSON object: set it when
    /// the comment is empty, add the key to a comment that is a JSON object,
    /// and leave any other comment as it is.
    Merge,
    /// As `merge`, except where SLURM measures each job's GPU use itself
    /// (23.02 and later: `gres/gpuutil` and `gres/gpumem` TRES, gathered in
    /// slurmstepd by the `gpu/nvml` or `gpu/rsmi` plugin and kept by
    /// slurmdbd): there `sacct` has it already, and the comment is left alone.
    Auto,
}

fn default_scontrol() -> PathBuf {
    "scontrol".into()
}
fn default_admin_comment_timeout_s() -> u64 {
    5
}

/// `[node]`: how the node daemon runs.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// The Unix socket cderd listens on.
    #[serde(default = "default_socket")]
    pub socket: PathBuf,
    /// Octal mode of the socket. Any uid may connect (to read its own jobs
    /// and `status`); what it may do is decided per request by SO_PEERCRED.
    #[serde(default = "default_socket_mode", deserialize_with = "octal_mode")]
    pub socket_mode: u32,
    /// Where the durable state (SQLite) lives.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Users (names or numeric uids) allowed, besides root, to allocate,
    /// release, drain, resume and reconcile — e.g. `slurm`.
    #[serde(default)]
    pub operators: Vec<String>,
    /// Longest request line cderd accepts, in bytes.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: usize,
    /// Which free devices cderd chooses where it chooses (TORQUE with MAUI
    /// or without NVML, `cderctl alloc`): `locality` (fewest NUMA nodes,
    /// Mendonca's best-effort local) or `first` (lowest indices).
    #[serde(default)]
    pub selection: Selection,
    /// Device-file ownership and NVML compute-mode enforcement.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// The health watch over NVML devices.
    #[serde(default)]
    pub health: HealthWatch,
    /// What each job does with its NVML devices: sampling, idle detection.
    #[serde(default)]
    pub usage: UsageSampling,
    /// GPUs offered as shares (SLURM `gres/shard`) instead of whole.
    #[serde(default)]
    pub sharing: Sharing,
    /// NVIDIA MPS on shared GPUs: one control daemon per GPU, limits in
    /// proportion to each job's shares.
    #[serde(default)]
    pub mps: Mps,
    /// What cderd tells the batch system while it keeps a device out of
    /// the pool (drains the node).
    #[serde(default)]
    pub batch: BatchNode,
}

/// `[node.batch]`: while cderd keeps one of this node's devices out of the
/// pool (a process still holds it after its job, it is drained, its file
/// vanished, discovery found it unhealthy), the batch system must place no
/// job on it. Neither SLURM nor TORQUE can take one GPU of a node out of
/// the schedule (SLURM changes a file-bound GRES count only to zero, and
/// back only with a restart), so cderd drains the whole node, with a reason
/// that names each device and why, and returns it once every device is
/// back, but only a drain of its own: a reason it did not write is an
/// admin's (or SLURM's), and is left alone.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BatchNode {
    /// Which batch system to tell (`auto`: the one whose configuration this
    /// node has).
    #[serde(default)]
    pub drain_node: DrainNode,
    /// This node's name in the batch system; default: `[node.sharing]
    /// slurm_node_name` for SLURM, else the host name up to its first dot.
    #[serde(default)]
    pub node_name: Option<String>,
    /// The `scontrol` cderd runs (a bare name is looked up in `PATH`).
    #[serde(default = "default_scontrol")]
    pub scontrol: PathBuf,
    /// The `pbsnodes` cderd runs (a bare name is looked up in `PATH`).
    #[serde(default = "default_pbsnodes")]
    pub pbsnodes: PathBuf,
    /// Seconds each `scontrol` or `pbsnodes` may take before it is killed
    /// (and tried again later).
    #[serde(default = "default_batch_timeout_s")]
    pub timeout_s: u64,
}

impl Default for BatchNode {
    fn default() -> Self {
        BatchNode {
            drain_node: DrainNode::default(),
            node_name: None,
            scontrol: default_scontrol(),
            pbsnodes: default_pbsnodes(),
            timeout_s: default_batch_timeout_s(),
        }
    }
}

/// `[node.batch] drain_node`. A config without the key tells no batch
/// system (`off`): a test's or a demo's cderd on a machine that happens to
/// have a slurm.conf must not drain a real node; the packaged
/// `/etc/cder/cder.toml` (deploy/cder.example.toml) says `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DrainNode {
    /// `slurm` where the node has SLURM's configuration (`SLURM_CONF`,
    /// `/etc/slurm/slurm.conf`, a configless cache), else `torque` where it
    /// has TORQUE's `server_name`, else `off`; decided once at start, and
    /// logged.
    Auto,
    /// `scontrol update NodeName=… State=DRAIN Reason="cder: …"`, and
    /// `State=UNDRAIN` when every device is back.
    Slurm,
    /// `pbsnodes -o -N "cder: …"`, and `pbsnodes -c -N ""` when every
    /// device is back.
    Torque,
    /// Tell no batch system (the default where the key is not given): a
    /// job placed on a kept-out device is refused by cderd (its prolog's
    /// record fails, naming the device and why).
    #[default]
    Off,
}

fn default_pbsnodes() -> PathBuf {
    "pbsnodes".into()
}

fn default_batch_timeout_s() -> u64 {
    10
}

/// `[node] selection`: the device selection policy by name
/// (`cder_ledger::policy::by_name` maps it to the policy itself, for cderd
/// and `cder-sim` alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Selection {
    /// Fewest NUMA nodes (the default).
    #[default]
    Locality,
    /// Lowest indices.
    First,
}

impl Selection {
    /// The name in the config, which is also the policy's name.
    pub fn name(self) -> &'static str {
        match self {
            Selection::Locality => "locality",
            Selection::First => "first",
        }
    }
}

/// `[node.mps]`: with `enabled`, each GPU offered as shares (`[node.sharing]`)
/// gets its own MPS control daemon while it has sharers, started by cderd
/// with the GPU's UUID as `CUDA_VISIBLE_DEVICES` and its own pipe and log
/// directories, and stopped (`quit`) when the last sharer leaves. The
/// server's active-thread percentage and pinned-memory limit follow the
/// sharers' shares (docs/sharing.md, "MPS").
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Mps {
    /// Whether shared GPUs run under MPS.
    #[serde(default)]
    pub enabled: bool,
    /// The control program (started with `-d`; commands on its stdin).
    #[serde(default = "default_mps_control")]
    pub mps_control: PathBuf,
    /// Where each GPU's `CUDA_MPS_PIPE_DIRECTORY` and
    /// `CUDA_MPS_LOG_DIRECTORY` are made (`<dir>/<uuid>/pipe`, `…/log`);
    /// jobs must be able to reach it.
    #[serde(default = "default_mps_dir")]
    pub runtime_dir: PathBuf,
}

impl Default for Mps {
    fn default() -> Self {
        Mps { enabled: false, mps_control: default_mps_control(), runtime_dir: default_mps_dir() }
    }
}

fn default_mps_control() -> PathBuf {
    PathBuf::from("/usr/bin/nvidia-cuda-mps-control")
}
fn default_mps_dir() -> PathBuf {
    PathBuf::from("/run/cder/mps")
}

/// `[node.usage]`: cderd samples the NVML devices it has allocated
/// (utilisation, memory used, per-process use) every `sample_period_s`,
/// rolls the samples up per job and device in its database, and warns
/// about a job whose device stays idle.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSampling {
    /// Whether to sample at all.
    #[serde(default = "default_true")]
    pub sample: bool,
    /// Seconds between samples (fractions allowed; 0.05 to 3600).
    #[serde(default = "default_sample_period_s")]
    pub sample_period_s: f64,
    /// A period counts as active when the device's utilisation is at or
    /// above this percentage (1 to 100).
    #[serde(default = "default_usage_percent")]
    pub active_threshold_percent: u32,
    /// A device whose utilisation stays below this percentage (1 to 100)
    /// for `idle_after_s` is idle.
    #[serde(default = "default_usage_percent")]
    pub idle_below_percent: u32,
    /// How long a device must stay below `idle_below_percent` to be idle.
    #[serde(default = "default_idle_after_s")]
    pub idle_after_s: f64,
    /// A command run (no shell) once per idle episode, with the job, user
    /// and device in `CDER_*` variables; none by default (no mail is sent).
    #[serde(default)]
    pub idle_hook: Option<Vec<String>>,
    /// Seconds the hook may run before it is killed.
    #[serde(default = "default_idle_hook_timeout_s")]
    pub idle_hook_timeout_s: u64,
    /// Most recent samples kept in the database (a ring: the oldest row is
    /// overwritten); the per-job aggregates are kept whatever this is.
    #[serde(default = "default_ring_samples")]
    pub ring_samples: u32,
}

impl Default for UsageSampling {
    fn default() -> Self {
        UsageSampling {
            sample: true,
            sample_period_s: default_sample_period_s(),
            active_threshold_percent: default_usage_percent(),
            idle_below_percent: default_usage_percent(),
            idle_after_s: default_idle_after_s(),
            idle_hook: None,
            idle_hook_timeout_s: default_idle_hook_timeout_s(),
            ring_samples: default_ring_samples(),
        }
    }
}

fn default_sample_period_s() -> f64 {
    10.0
}
fn default_usage_percent() -> u32 {
    5
}
fn default_idle_after_s() -> f64 {
    1800.0
}
fn default_idle_hook_timeout_s() -> u64 {
    30
}
fn default_ring_samples() -> u32 {
    10_000
}

/// `[node.sharing]`: this node offers every `gpgpu` device as
/// `shares_per_gpu` shares, as SLURM's `gres/shard` counts them (SLURM 22.05
/// spreads a node's shards evenly over all its GPUs, so a node shares all
/// or none): a shared GPU is never handed out whole, and its sharers are
/// not fenced from one another on the GPU (docs/sharing.md).
#[derive(Debug, Clone, Deserialize, Serialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Sharing {
    /// Shares per shared GPU: gres.conf's `Count=` of its `Name=shard`
    /// record. 0 (the default): nothing is shared.
    #[serde(default)]
    pub shares_per_gpu: u32,
    /// SLURM's gres.conf on this node: cderd checks at start that its
    /// `Name=shard` records offer exactly these GPUs, so, and refuses to
    /// start otherwise, naming the line.
    #[serde(default)]
    pub slurm_gres_conf: Option<PathBuf>,
    /// This node's `NodeName` in gres.conf; default: the host name.
    #[serde(default)]
    pub slurm_node_name: Option<String>,
}

/// `[node.health]`: cderd watches its NVML devices (Xid critical errors,
/// double-bit ECC errors, a GPU fallen off the bus) and drains a device that
/// fails, naming why. A job holding it keeps it; nobody gets it again until
/// an operator runs `cderctl undrain`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HealthWatch {
    /// Whether to watch at all.
    #[serde(default = "default_true")]
    pub watch: bool,
    /// Seconds between polls (device reachable, ECC counters); events are
    /// taken as they come in between.
    #[serde(default = "default_health_interval_s")]
    pub interval_s: u64,
    /// Return policy: a device the watch drained for an Xid or a lost GPU
    /// goes back into service once its GPU has polled healthy (reachable,
    /// no new uncorrected ECC error) for this many seconds. Double-bit ECC
    /// drains and operators' drains are never returned by it. `0` (default):
    /// only `cderctl undrain` returns a device.
    #[serde(default)]
    pub return_after_s: u64,
    /// Xids that drain; every other Xid is only logged. Exclusive with
    /// `ignore_xids`. Unset: every Xid not in `ignore_xids` drains.
    #[serde(default)]
    pub drain_xids: Option<Spanned<Vec<u64>>>,
    /// Xids that are only logged, every other Xid drains. Unset (and no
    /// `drain_xids`): [`APPLICATION_XIDS`].
    #[serde(default)]
    pub ignore_xids: Option<Spanned<Vec<u64>>>,
}

/// The Xids NVIDIA's Xid catalogue puts on the application, not the GPU
/// (docs.nvidia.com/deploy/xid-errors; the same list NVIDIA's Kubernetes
/// device plugin skips): 13 graphics engine exception, 31 GPU memory page
/// fault, 43 GPU stopped processing (the job's fault), 45 preemptive
/// cleanup after an earlier error, 68 video processor exception. The job
/// that caused one fails; the GPU serves the next job.
pub const APPLICATION_XIDS: [u64; 5] = [13, 31, 43, 45, 68];

impl HealthWatch {
    /// Whether an Xid drains the GPU (`[node.health] drain_xids` /
    /// `ignore_xids`); otherwise it is only logged.
    pub fn drains_xid(&self, xid: u64) -> bool {
        match (&self.drain_xids, &self.ignore_xids) {
            (Some(drain), _) => drain.get_ref().contains(&xid),
            (None, Some(ignore)) => !ignore.get_ref().contains(&xid),
            (None, None) => !APPLICATION_XIDS.contains(&xid),
        }
    }
}

impl Default for HealthWatch {
    fn default() -> Self {
        HealthWatch {
            watch: true,
            interval_s: default_health_interval_s(),
            return_after_s: 0,
            drain_xids: None,
            ignore_xids: None,
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_health_interval_s() -> u64 {
    10
}

/// `[node.enforcement]`: real exclusivity, where root allows it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Enforcement {
    /// On allocation, chown each device file to the job's uid with `job_mode`.
    #[serde(default)]
    pub device_files: bool,
    /// Mode of a job's device files while it holds them (octal; default 0600).
    #[serde(default = "default_job_mode", deserialize_with = "octal_mode")]
    pub job_mode: u32,
    /// Owner, group and mode restored on release (the driver's defaults).
    #[serde(default)]
    pub idle_owner: u32,
    /// Group restored on release.
    #[serde(default)]
    pub idle_group: u32,
    /// Mode restored on release (octal; default 0600: idle devices are root's).
    #[serde(default = "default_idle_mode", deserialize_with = "octal_mode")]
    pub idle_mode: u32,
    /// Set NVML compute mode EXCLUSIVE_PROCESS on allocation, DEFAULT on release.
    #[serde(default)]
    pub nvml_exclusive_process: bool,
    /// Per-job device cgroups that `confine` puts a job's processes into.
    #[serde(default)]
    pub cgroup: CgroupMode,
    /// Mount point of the cgroup v1 `devices` controller; found in
    /// /proc/self/mountinfo when not given.
    #[serde(default)]
    pub cgroup_v1_root: Option<PathBuf>,
    /// Mount point of the cgroup2 hierarchy; found in /proc/self/mountinfo
    /// when not given.
    #[serde(default)]
    pub cgroup_v2_root: Option<PathBuf>,
    /// The directory under each root that holds cderd's per-job groups.
    #[serde(default = "default_cgroup_parent")]
    pub cgroup_parent: String,
    /// What to do with a free device that a process still holds open.
    #[serde(default)]
    pub held_open: HeldOpen,
    /// Users whose open descriptors do not make a device busy (root's never
    /// do): daemons that keep every GPU open, such as nvidia-persistenced.
    /// A name that does not exist on the node is ignored.
    #[serde(default = "default_held_open_ignore_users")]
    pub held_open_ignore_users: Vec<String>,
    /// For how long after an `alloc` or `env` cderd keeps the kernel's
    /// cgroup migration lock warm, so that a task's `confine` need not wait
    /// for an RCU grace period (milliseconds; 0: never; no effect where a
    /// cgroup hierarchy is mounted with `favordynmods`).
    #[serde(default = "default_cgroup_warmup_ms")]
    pub cgroup_warmup_ms: u64,
}

/// `[node.enforcement] cgroup`: which device cgroups cderd manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CgroupMode {
    /// Every kind this node offers (v1 `devices`, v2 with a device BPF
    /// program); none is not an error until a job asks to be confined.
    #[default]
    Auto,
    /// The cgroup v1 `devices` controller; cderd refuses to start without it.
    V1,
    /// cgroup v2 with a BPF_PROG_TYPE_CGROUP_DEVICE program; required.
    V2,
    /// Both, both required.
    Both,
    /// No device cgroups: `confine` answers `enforcement_unavailable`.
    Off,
}

/// `[node.enforcement] held_open`: a free device some process still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HeldOpen {
    /// Never hand it out: the holder could use it beside the job (a
    /// descriptor opened while the device was free survives chmod/chown).
    #[default]
    Skip,
    /// Hand it out anyway, logging a warning that names the holder.
    Allow,
}

impl Default for Enforcement {
    fn default() -> Self {
        Enforcement {
            device_files: false,
            job_mode: default_job_mode(),
            idle_owner: 0,
            idle_group: 0,
            idle_mode: default_idle_mode(),
            nvml_exclusive_process: false,
            cgroup: CgroupMode::default(),
            cgroup_v1_root: None,
            cgroup_v2_root: None,
            cgroup_parent: default_cgroup_parent(),
            held_open: HeldOpen::default(),
            held_open_ignore_users: default_held_open_ignore_users(),
            cgroup_warmup_ms: default_cgroup_warmup_ms(),
        }
    }
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            socket: default_socket(),
            socket_mode: default_socket_mode(),
            state_dir: default_state_dir(),
            operators: Vec::new(),
            max_request_bytes: default_max_request_bytes(),
            selection: Selection::default(),
            enforcement: Enforcement::default(),
            health: HealthWatch::default(),
            usage: UsageSampling::default(),
            sharing: Sharing::default(),
            mps: Mps::default(),
            batch: BatchNode::default(),
        }
    }
}

fn default_socket() -> PathBuf {
    DEFAULT_SOCKET.into()
}
fn default_socket_mode() -> u32 {
    0o666
}
fn default_state_dir() -> PathBuf {
    "/var/lib/cder".into()
}
fn default_max_request_bytes() -> usize {
    64 * 1024
}
fn default_job_mode() -> u32 {
    0o600
}
/// Root-only while idle: a descriptor opened while a device is free would
/// survive the chown to the next job, so nobody but root may open one then.
fn default_idle_mode() -> u32 {
    0o600
}
fn default_cgroup_parent() -> String {
    "cder".into()
}
fn default_cgroup_warmup_ms() -> u64 {
    1000
}

fn default_held_open_ignore_users() -> Vec<String> {
    vec!["nvidia-persistenced".into()]
}

/// How a type's devices are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Discovery {
    /// Ask the NVIDIA driver through NVML.
    Nvml,
    /// Ask the AMD driver through ROCm SMI (`librocm_smi64`).
    RocmSmi,
    /// Ask Intel's driver through the Level Zero loader (`libze_loader`),
    /// Sysman for health and use.
    LevelZero,
    /// Read the kernel's DRM devices (`/sys/class/drm`, `/dev/dri`), no
    /// vendor library: what a node without one still shows.
    DevScan,
    /// The vendor's library when it is installed and loads, else the `/dev`
    /// scan.
    Auto,
    /// Take the `[[cder.device]]` entries of the config as they are.
    Static,
}

impl Discovery {
    /// The name it has in the config (`dev-scan`).
    pub fn name(self) -> &'static str {
        match self {
            Discovery::Nvml => "nvml",
            Discovery::RocmSmi => "rocm-smi",
            Discovery::LevelZero => "level-zero",
            Discovery::DevScan => "dev-scan",
            Discovery::Auto => "auto",
            Discovery::Static => "static",
        }
    }
}

/// Which identifiers go into the visibility variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VisibleIds {
    /// Indices in PCI bus order (with `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
    #[default]
    Index,
    /// Device UUIDs (`GPU-…`), immune to renumbering.
    Uuid,
}

/// How a GPU in MIG mode is offered (`mig = "whole" | "instances"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum MigOffer {
    /// The GPU is one device, whatever its MIG mode; its instances are the
    /// job's business (as without MIG).
    #[default]
    Whole,
    /// A GPU in MIG mode is offered as its MIG instances, each a device of
    /// its own (`MIG-…` UUID, profile such as `1g.10gb`); GPUs not in MIG
    /// mode stay whole.
    Instances,
}

/// How an Intel GPU with tiles (Level Zero sub-devices, e.g. the two of a
/// Data Center GPU Max 1550) is offered (`tiles = "whole" | "tiles"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum TileOffer {
    /// The GPU is one device; its tiles are the job's business.
    #[default]
    Whole,
    /// A GPU with tiles is offered as its tiles, each a device of its own,
    /// made visible as `ZE_AFFINITY_MASK` names one (`0.1`: GPU 0, tile 1).
    /// Tiles share their GPU's render node, so jobs on two tiles of one GPU
    /// are not fenced from each other (docs/security.md).
    Tiles,
}

/// The vendor families whose visibility variables cder knows by default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum VendorKind {
    /// NVIDIA GPUs: `CUDA_VISIBLE_DEVICES`.
    Nvidia,
    /// AMD GPUs: `ROCR_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL`.
    Amd,
    /// Intel GPUs: `ZE_AFFINITY_MASK`.
    Intel,
    /// Intel Xeon Phi (MIC) coprocessors, made visible by `OFFLOAD_DEVICES`.
    XeonPhi,
    /// Anything else; its visibility variables must be configured.
    Other(String),
}

impl VendorKind {
    /// The vendor name as published (`GPGPUVendor=Nvidia`, as the seed thesis writes it).
    pub fn published_name(&self) -> &str {
        match self {
            VendorKind::Nvidia => "Nvidia",
            VendorKind::Amd => "AMD",
            VendorKind::Intel | VendorKind::XeonPhi => "Intel",
            VendorKind::Other(name) => name,
        }
    }

    /// The variables that make this vendor's devices visible to a job.
    pub fn default_visible_env(&self) -> Option<Vec<String>> {
        let names: &[&str] = match self {
            VendorKind::Nvidia => &["CUDA_VISIBLE_DEVICES"],
            VendorKind::Amd => &["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"],
            // Level Zero may read an empty mask as "unset" (all devices): a job
            // without Intel devices relies on device-file enforcement there.
            VendorKind::Intel => &["ZE_AFFINITY_MASK"],
            VendorKind::XeonPhi => &["OFFLOAD_DEVICES"],
            VendorKind::Other(_) => return None,
        };
        Some(names.iter().map(|s| s.to_string()).collect())
    }

    /// Constant variables set alongside the visible list.
    pub fn default_extra_env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        if *self == VendorKind::Nvidia {
            // Without it CUDA numbers devices fastest-first, not as NVML does.
            env.insert("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string());
        }
        env
    }
}

impl<'de> Deserialize<'de> for VendorKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.trim().is_empty() {
            return Err(serde::de::Error::custom("vendor must not be empty"));
        }
        Ok(match s.to_ascii_lowercase().as_str() {
            "nvidia" => VendorKind::Nvidia,
            "amd" | "ati" => VendorKind::Amd,
            "intel" => VendorKind::Intel,
            "xeon-phi" | "xeonphi" | "mic" => VendorKind::XeonPhi,
            _ => VendorKind::Other(s),
        })
    }
}

/// One `[[cder]]` table: a configured device type.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CderType {
    /// Short lowercase name used in requests: `gpgpu`, `fpga`.
    pub name: Spanned<String>,
    /// The vendor family, which picks the default visibility variables.
    pub vendor: VendorKind,
    /// How the devices are found: through NVML, or listed in the config.
    pub discovery: Discovery,
    /// Prefix of the published attributes; defaults to the upper-cased name
    /// (`gpgpu` → `GPGPUTotalInstances`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Variables that carry the visible list; defaults by vendor.
    #[serde(default)]
    pub visible_env: Option<Vec<String>>,
    /// Constant variables set for every job; defaults by vendor.
    #[serde(default)]
    pub extra_env: Option<BTreeMap<String, String>>,
    /// Whether visible lists carry indices or UUIDs.
    #[serde(default)]
    pub visible_ids: VisibleIds,
    /// NVML library to load instead of the driver's `libnvidia-ml.so.1`.
    #[serde(default)]
    pub nvml_library: Option<PathBuf>,
    /// Whether a GPU in MIG mode is offered whole or as its instances
    /// (NVML discovery only).
    #[serde(default)]
    pub mig: MigOffer,
    /// The driver's MIG capability tree, where each instance's `access`
    /// file names the minor of the device file that grants it.
    #[serde(default = "default_mig_capabilities")]
    pub mig_capabilities: PathBuf,
    /// Device file of a MIG instance; `{cap}` is replaced by that minor.
    /// It is the file cderd guards for the instance: the parent's
    /// `/dev/nvidiaN` stays open to every job on that GPU, as SLURM leaves it.
    #[serde(default = "default_mig_device_path")]
    pub mig_device_path: String,
    /// Device file of a discovered device; `{index}` and `{minor}` are replaced.
    #[serde(default = "default_device_path")]
    pub device_path: String,
    /// The kernel's list of character-device majors, where discovery looks
    /// up the NVIDIA driver's (`nvidia-frontend`, `nvidia-caps`).
    #[serde(default = "default_proc_devices")]
    pub proc_devices: PathBuf,
    /// The NVIDIA driver's parameters (`ModifyDeviceFiles: 1` means the
    /// driver's `nvidia-modprobe` rewrites device files cderd set); read by
    /// `cderd --check` and at start where `device_files = true`.
    #[serde(default = "default_nvidia_params")]
    pub nvidia_params: PathBuf,
    /// ROCm SMI library to load instead of `librocm_smi64.so.1`.
    #[serde(default)]
    pub rocm_smi_library: Option<PathBuf>,
    /// Level Zero loader to load instead of `libze_loader.so.1`.
    #[serde(default)]
    pub level_zero_library: Option<PathBuf>,
    /// Whether an Intel GPU with tiles is offered whole or as its tiles
    /// (Level Zero discovery, or `auto` where Level Zero answers).
    #[serde(default)]
    pub tiles: TileOffer,
    /// Where the `/dev` scan reads `class/drm/*/device/{vendor,device,numa_node}`.
    #[serde(default = "default_sysfs_root")]
    pub sysfs_root: PathBuf,
    /// Device file of a DRM render node; `{minor}` is replaced (128 + N).
    #[serde(default = "default_render_node_path")]
    pub render_node_path: String,
    /// AMD's compute interface, one file for every GPU of the node: a job
    /// holding any device of an AMD type may open it, others may not.
    #[serde(default = "default_kfd_path")]
    pub kfd_path: PathBuf,
    /// Devices of a `static` type.
    #[serde(default, rename = "device")]
    pub devices: Vec<StaticDevice>,
}

fn default_sysfs_root() -> PathBuf {
    PathBuf::from("/sys")
}

fn default_render_node_path() -> String {
    "/dev/dri/renderD{minor}".to_string()
}

fn default_kfd_path() -> PathBuf {
    PathBuf::from("/dev/kfd")
}

fn default_mig_capabilities() -> PathBuf {
    PathBuf::from("/proc/driver/nvidia/capabilities")
}

fn default_mig_device_path() -> String {
    "/dev/nvidia-caps/nvidia-cap{cap}".to_string()
}

fn default_nvidia_params() -> PathBuf {
    PathBuf::from("/proc/driver/nvidia/params")
}

fn default_proc_devices() -> PathBuf {
    PathBuf::from("/proc/devices")
}

fn default_device_path() -> String {
    "/dev/nvidia{minor}".to_string()
}

impl CderType {
    /// The type's name (`gpgpu`).
    pub fn name(&self) -> &str {
        self.name.get_ref()
    }

    /// The attribute prefix this type publishes under.
    pub fn prefix(&self) -> String {
        self.prefix.clone().unwrap_or_else(|| self.name().to_ascii_uppercase())
    }

    /// Variables that carry the visible device list.
    pub fn visible_env(&self) -> Vec<String> {
        self.visible_env.clone().or_else(|| self.vendor.default_visible_env()).unwrap_or_default()
    }

    /// Constant variables set beside the visible list.
    pub fn extra_env(&self) -> BTreeMap<String, String> {
        self.extra_env.clone().unwrap_or_else(|| self.vendor.default_extra_env())
    }

    /// Files every job holding one of this type's devices may open, and no
    /// other job: AMD's `/dev/kfd`, shared by all of a node's AMD GPUs.
    pub fn shared_files(&self) -> Vec<PathBuf> {
        match self.vendor {
            VendorKind::Amd => vec![self.kfd_path.clone()],
            _ => Vec::new(),
        }
    }

    /// The statically configured devices as full [`Device`]s.
    pub fn static_devices(&self) -> Vec<Device> {
        self.devices.iter().map(|d| d.to_device(self)).collect()
    }
}

crate::device_table! {
    /// One `[[cder.device]]` entry.
    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct StaticDevice {
        /// Index in the vendor's enumeration (PCI bus order for NVIDIA).
        pub index: Spanned<u32>,
        /// Defaults to `<type>-<index>`, unique on the node.
        #[serde(default)]
        pub uuid: Option<String>,
        /// PCI bus id, as the driver writes it (`0000:3b:00.0`).
        #[serde(default)]
        pub pci_bus_id: String,
        @attributes
        /// The device file that guards it (`/dev/nvidia0`).
        pub path: PathBuf,
        /// Its character device's number (`"195:0"`), for a file that may not
        /// exist yet when a job's device cgroups are set up.
        #[serde(default)]
        pub dev: Option<DeviceNumber>,
        /// NUMA node / locality domain.
        #[serde(default)]
        pub numa_node: u32,
        /// Whether it may be handed out.
        #[serde(default)]
        pub health: Health,
    }
}

impl StaticDevice {
    fn to_device(&self, cder: &CderType) -> Device {
        let index = *self.index.get_ref();
        Device {
            cder_type: cder.name().to_string(),
            vendor: cder.vendor.published_name().to_string(),
            index,
            uuid: self.uuid.clone().unwrap_or_else(|| format!("{}-{index}", cder.name())),
            pci_bus_id: self.pci_bus_id.clone(),
            attributes: self.attributes(),
            path: self.path.clone(),
            dev: self.dev,
            numa_node: self.numa_node,
            health: self.health,
        }
    }
}

fn octal_mode<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let s = String::deserialize(d)?;
    let digits = s.strip_prefix("0o").unwrap_or(&s);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o7777 => Ok(mode),
        _ => Err(serde::de::Error::custom(format!("{s:?} is not an octal file mode such as \"0660\""))),
    }
}

/// A configuration error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line and column, when the error has a place in the file.
    pub line: Option<usize>,
    /// 1-based column, with `line`.
    pub column: Option<usize>,
    /// The dotted key the error is about (`cder.device.memory_mib`).
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        write!(f, ": ")?;
        if let Some(key) = &self.key {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl Config {
    /// The config file to read: `explicit` (from `--config`), else
    /// `$CDER_CONFIG`, else `/etc/cder/cder.toml`.
    pub fn resolve_path(explicit: Option<&Path>) -> PathBuf {
        resolve_path(explicit, CONFIG_ENV, DEFAULT_CONFIG_PATH)
    }

    /// Reads and validates the config chosen by [`Config::resolve_path`].
    pub fn load(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        let path = Self::resolve_path(explicit);
        Self::parse(&read_text(&path)?, &path)
    }

    /// Parses and validates config text; `path` is only used in messages.
    ///
    /// ```
    /// use std::path::Path;
    /// use cder_model::Config;
    ///
    /// let text = r#"
    /// [node]
    /// operators = ["slurm"]
    ///
    /// [[cder]]
    /// name = "gpgpu"
    /// vendor = "nvidia"
    /// discovery = "static"
    ///
    /// [[cder.device]]
    /// index = 0
    /// model = "Tesla K20m"
    /// memory_mib = 4800
    /// path = "/dev/nvidia0"
    /// "#;
    /// let config = Config::parse(text, Path::new("cder.toml")).unwrap();
    /// let gpgpu = config.cder("gpgpu").unwrap();
    /// assert_eq!(gpgpu.prefix(), "GPGPU");
    /// assert_eq!(gpgpu.visible_env(), ["CUDA_VISIBLE_DEVICES"]);
    /// assert_eq!(gpgpu.static_devices()[0].attributes.memory_mib, 4800);
    ///
    /// // A mistake names the file, line, column and key.
    /// let e = Config::parse(&text.replace("4800", "\"lots\""), Path::new("cder.toml")).unwrap_err();
    /// assert_eq!((e.line, e.key.as_deref()), (Some(13), Some("cder.device.memory_mib")));
    /// assert!(e.to_string().starts_with("cder.toml:13:14: cder.device.memory_mib:"), "{e}");
    /// ```
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = from_toml(text, path)?;
        config.validate(text, path)?;
        Ok(config)
    }

    /// The configured type called `name`.
    pub fn cder(&self, name: &str) -> Option<&CderType> {
        self.cders.iter().find(|c| c.name() == name)
    }

    /// Checks what TOML types cannot: names, uniqueness, consistency.
    fn validate(&self, text: &str, path: &Path) -> Result<(), ConfigError> {
        let at = |offset: usize, key: &str, message: String| ConfigError::at(path, text, offset, key, message);
        let anywhere = |key: &str, message: String| ConfigError {
            path: path.to_path_buf(),
            line: None,
            column: None,
            key: Some(key.to_string()),
            message,
        };
        let parent = &self.node.enforcement.cgroup_parent;
        let parent_ok = !parent.is_empty()
            && parent.len() <= 64
            && parent != "."
            && parent != ".."
            && parent.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !parent_ok {
            return Err(anywhere(
                "node.enforcement.cgroup_parent",
                format!("{parent:?} must be one directory name of letters, digits, '.', '_' or '-'"),
            ));
        }
        for (key, root) in [
            ("node.enforcement.cgroup_v1_root", &self.node.enforcement.cgroup_v1_root),
            ("node.enforcement.cgroup_v2_root", &self.node.enforcement.cgroup_v2_root),
        ] {
            if root.as_ref().is_some_and(|r| !r.is_absolute()) {
                return Err(anywhere(key, "must be an absolute path".into()));
            }
        }
        if !(1..=3600).contains(&self.node.health.interval_s) {
            return Err(anywhere("node.health.interval_s", "must be 1 to 3600 seconds".into()));
        }
        let health = &self.node.health;
        if let (Some(drain), Some(_)) = (&health.drain_xids, &health.ignore_xids) {
            return Err(at(
                drain.span().start,
                "node.health.drain_xids",
                "give drain_xids (only these drain) or ignore_xids (all but these drain), not both".into(),
            ));
        }
        for (key, xids) in
            [("node.health.drain_xids", &health.drain_xids), ("node.health.ignore_xids", &health.ignore_xids)]
        {
            let Some(xids) = xids else { continue };
            let mut seen = BTreeSet::new();
            for xid in xids.get_ref() {
                // NVIDIA numbers Xids from 1; the catalogue stays far below 1000.
                if !(1..=999).contains(xid) {
                    return Err(at(xids.span().start, key, format!("Xid {xid} is not an Xid number (1 to 999)")));
                }
                if !seen.insert(xid) {
                    return Err(at(xids.span().start, key, format!("Xid {xid} is listed twice")));
                }
            }
        }
        let usage = &self.node.usage;
        if !(0.05..=3600.0).contains(&usage.sample_period_s) {
            return Err(anywhere("node.usage.sample_period_s", "must be 0.05 to 3600 seconds".into()));
        }
        for (key, value) in [
            ("node.usage.active_threshold_percent", usage.active_threshold_percent),
            ("node.usage.idle_below_percent", usage.idle_below_percent),
        ] {
            if !(1..=100).contains(&value) {
                return Err(anywhere(key, format!("{value} must be 1 to 100 (percent)")));
            }
        }
        if !(usage.idle_after_s.is_finite() && usage.idle_after_s >= 0.0) {
            return Err(anywhere("node.usage.idle_after_s", "must be a number of seconds, 0 or more".into()));
        }
        if usage.idle_hook.as_ref().is_some_and(|h| h.first().is_none_or(|p| !p.starts_with('/'))) {
            return Err(anywhere("node.usage.idle_hook", "must be [\"/absolute/program\", \"arg\", …]".into()));
        }
        if !(1..=3600).contains(&usage.idle_hook_timeout_s) {
            return Err(anywhere("node.usage.idle_hook_timeout_s", "must be 1 to 3600 seconds".into()));
        }
        if !(1..=10_000_000).contains(&usage.ring_samples) {
            return Err(anywhere("node.usage.ring_samples", "must be 1 to 10000000".into()));
        }
        let batch = &self.node.batch;
        if !(1..=300).contains(&batch.timeout_s) {
            return Err(anywhere("node.batch.timeout_s", "must be 1 to 300 seconds".into()));
        }
        if let Some(name) = &batch.node_name {
            let ok = !name.is_empty()
                && name.len() <= 255
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !ok {
                return Err(anywhere(
                    "node.batch.node_name",
                    format!("{name:?} must be a node name: letters, digits, '.', '_' or '-'"),
                ));
            }
        }
        for (key, program) in [("node.batch.scontrol", &batch.scontrol), ("node.batch.pbsnodes", &batch.pbsnodes)] {
            if program.as_os_str().is_empty() {
                return Err(anywhere(key, "must name a program".into()));
            }
        }
        if self.node.max_request_bytes < 256 {
            return Err(anywhere("node.max_request_bytes", "must be at least 256".into()));
        }
        if let Some(Err((key, message))) = self.registry.as_ref().map(|r| r.validate()) {
            return Err(anywhere(&key, message));
        }
        let mut names = BTreeSet::new();
        for cder in &self.cders {
            let name_at = cder.name.span().start;
            let name = cder.name();
            // The rule every request parser and the node protocol apply too.
            if cder_request::check_type_name(name).is_err() {
                return Err(at(
                    name_at,
                    "cder.name",
                    format!("{name:?} must be lowercase letters, digits, '-' or '_', starting with a letter"),
                ));
            }
            if !names.insert(name) {
                return Err(at(name_at, "cder.name", format!("type {name:?} is configured twice")));
            }
            let prefix = cder.prefix();
            if prefix.is_empty()
                || !prefix.starts_with(|c: char| c.is_ascii_alphabetic())
                || !prefix.bytes().all(|b| b.is_ascii_alphanumeric())
            {
                return Err(at(
                    name_at,
                    "cder.prefix",
                    format!("{prefix:?} must be letters and digits, starting with a letter"),
                ));
            }
            if cder.vendor.default_visible_env().is_none() && cder.visible_env.is_none() {
                return Err(at(
                    name_at,
                    "cder.visible_env",
                    format!("type {name:?} has vendor {:?}, whose visibility variables cder does not know: list them in visible_env", cder.vendor.published_name()),
                ));
            }
            let mut env_names: Vec<&String> = cder.visible_env.iter().flatten().collect();
            env_names.extend(cder.extra_env.iter().flat_map(|m| m.keys()));
            for var in env_names {
                if var.is_empty()
                    || var.starts_with(|c: char| c.is_ascii_digit())
                    || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(at(
                        name_at,
                        "cder.visible_env",
                        format!("{var:?} is not a valid environment variable name"),
                    ));
                }
            }
            match cder.discovery {
                // Discovered types would drop the entries silently.
                source if source != Discovery::Static && !cder.devices.is_empty() => {
                    return Err(at(
                        cder.devices[0].index.span().start,
                        "cder.device",
                        format!("type {name:?} uses discovery = \"{}\"; [[cder.device]] entries are only for discovery = \"static\"", source.name()),
                    ));
                }
                Discovery::Static if cder.nvml_library.is_some() => {
                    return Err(at(
                        name_at,
                        "cder.nvml_library",
                        format!(
                            "type {name:?} uses discovery = \"static\"; nvml_library is only for discovery = \"nvml\""
                        ),
                    ));
                }
                Discovery::Static if cder.mig == MigOffer::Instances => {
                    return Err(at(name_at, "cder.mig", format!("type {name:?} uses discovery = \"static\"; mig = \"instances\" is only for discovery = \"nvml\"")));
                }
                _ => {}
            }
            if cder.tiles == TileOffer::Tiles && !matches!(cder.discovery, Discovery::LevelZero | Discovery::Auto) {
                return Err(at(
                    name_at,
                    "cder.tiles",
                    format!("type {name:?}: tiles = \"tiles\" is only for discovery = \"level-zero\" (or \"auto\")"),
                ));
            }
            let mut indices = BTreeSet::new();
            let mut uuids = BTreeSet::new();
            for dev in &cder.devices {
                let index = *dev.index.get_ref();
                if !indices.insert(index) {
                    return Err(at(
                        dev.index.span().start,
                        "cder.device.index",
                        format!("index {index} of type {name:?} is configured twice"),
                    ));
                }
                let uuid = dev.uuid.clone().unwrap_or_else(|| format!("{name}-{index}"));
                if uuid.is_empty() || !uuids.insert(uuid.clone()) {
                    return Err(at(
                        dev.index.span().start,
                        "cder.device.uuid",
                        format!("uuid {uuid:?} of device {index} is empty or not unique"),
                    ));
                }
                if dev.model.get_ref().trim().is_empty() {
                    return Err(at(
                        dev.index.span().start,
                        "cder.device.model",
                        format!("device {index} of type {name:?} has an empty model"),
                    ));
                }
                if !dev.path.is_absolute() {
                    return Err(at(
                        dev.index.span().start,
                        "cder.device.path",
                        format!("device {index}: {:?} is not an absolute path", dev.path),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl ConfigError {
    /// An error about `key` at byte `offset` of the file's `text`.
    pub fn at(path: &Path, text: &str, offset: usize, key: &str, message: String) -> ConfigError {
        let (line, column) = line_col(text, offset);
        ConfigError {
            path: path.to_path_buf(),
            line: Some(line),
            column: Some(column),
            key: Some(key.to_string()),
            message,
        }
    }
}

/// The TOML file a program reads: `explicit` (its `--config`), else the
/// environment variable `env_var`, else `default`. Shared by every cder
/// program that has a config of its own.
pub fn resolve_path(explicit: Option<&Path>, env_var: &str, default: &str) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(env_var).filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| default.into())
}

/// Reads a config file as text. An unreadable file, or one that is not
/// UTF-8, is an error that says so and, for bad bytes, where.
pub fn read_text(path: &Path) -> Result<String, ConfigError> {
    let bytes = std::fs::read(path).map_err(|e| ConfigError {
        path: path.to_path_buf(),
        line: None,
        column: None,
        key: None,
        message: format!("cannot read the config: {e}"),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        // The valid prefix is text, so the bad byte can be placed in it.
        let valid = e.utf8_error().valid_up_to();
        let prefix = String::from_utf8_lossy(&e.as_bytes()[..valid]).into_owned();
        let (line, column) = line_col(&prefix, valid);
        ConfigError {
            path: path.to_path_buf(),
            line: Some(line),
            column: Some(column),
            key: key_at(&prefix, valid, ""),
            message: "not valid UTF-8 (TOML files must be UTF-8)".into(),
        }
    })
}

/// Deserializes TOML text into `T`, turning the parser's error into a
/// [`ConfigError`] with line, column and the dotted key.
pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| {
        let (line, column, key) = match e.span() {
            Some(span) => {
                let (line, column) = line_col(text, span.start);
                (Some(line), Some(column), key_at(text, span.start, e.message()))
            }
            None => (None, None, None),
        };
        ConfigError { path: path.to_path_buf(), line, column, key, message: e.message().trim().to_string() }
    })
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// The dotted key an error at `offset` is about: the table header above it
/// plus the `key =` on its line, or the field a serde message names.
fn key_at(text: &str, offset: usize, message: &str) -> Option<String> {
    let offset = offset.min(text.len());
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    // A missing field is reported at its table's header line: that header is the table.
    let header = line.trim_start().starts_with('[');
    let table_end = if header { line_end } else { line_start };
    let table = text[..table_end]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    // serde names the field in "unknown field `x`" / "missing field `x`".
    let named = message.split('`').nth(1).filter(|_| message.contains("field `"));
    let leaf = match named {
        Some(field) => Some(field.to_string()),
        None => line
            .split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty() && !k.starts_with('[')),
    };
    match (table, leaf) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (_, Some(k)) => Some(k),
        (Some(t), None) => Some(t),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("cder.toml"))
    }

    const GOOD: &str = r#"
[node]
socket = "/tmp/cderd.sock"
operators = ["slurm", "450"]

[[cder]]
name = "gpgpu"
vendor = "nvidia"
discovery = "static"

[[cder.device]]
index = 0
uuid = "GPU-aaaa"
pci_bus_id = "0000:3b:00.0"
model = "Tesla K20m"
memory_mib = 4800
compute_capability = "3.5"
multiprocessors = 13
cores_per_mp = 192
clock_mhz = 705
ecc = true
path = "/dev/nvidia0"
numa_node = 1

[[cder]]
name = "fpga"
vendor = "Xilinx"
discovery = "static"
visible_env = ["XILINX_VISIBLE_DEVICES"]

[[cder.device]]
index = 0
model = "Alveo U250"
memory_mib = 65536
path = "/dev/xclmgmt0"
"#;

    #[test]
    fn good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.node.socket, PathBuf::from("/tmp/cderd.sock"));
        assert_eq!(c.node.socket_mode, 0o666);
        assert_eq!(c.node.operators, vec!["slurm", "450"]);
        assert_eq!(c.cders.len(), 2);
        let gpu = c.cder("gpgpu").unwrap();
        assert_eq!(gpu.prefix(), "GPGPU");
        assert_eq!(gpu.visible_env(), vec!["CUDA_VISIBLE_DEVICES"]);
        assert_eq!(gpu.extra_env().get("CUDA_DEVICE_ORDER").map(String::as_str), Some("PCI_BUS_ID"));
        let devs = gpu.static_devices();
        assert_eq!(devs[0].attributes.cores, Some(13 * 192));
        assert_eq!(devs[0].vendor, "Nvidia");
        assert_eq!(devs[0].numa_node, 1);
        let fpga = c.cder("fpga").unwrap();
        assert_eq!(fpga.prefix(), "FPGA");
        assert_eq!(fpga.vendor.published_name(), "Xilinx");
        assert_eq!(fpga.static_devices()[0].uuid, "fpga-0");
        assert_eq!(fpga.static_devices()[0].attributes.cores, None);
        assert_eq!(fpga.static_devices()[0].dev, None);
    }

    #[test]
    fn the_selection_policy_is_named_and_checked() {
        assert_eq!(parse(GOOD).unwrap().node.selection, Selection::Locality);
        let first = parse(&GOOD.replace("[node]\n", "[node]\nselection = \"first\"\n")).unwrap();
        assert_eq!((first.node.selection, first.node.selection.name()), (Selection::First, "first"));
        let e = parse(&GOOD.replace("[node]\n", "[node]\nselection = \"fastest\"\n")).unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("node.selection"), Some(3)), "{e}");
    }

    #[test]
    fn static_device_number_is_optional_and_checked() {
        let with = GOOD.replace("path = \"/dev/xclmgmt0\"", "path = \"/dev/xclmgmt0\"\ndev = \"511:0\"");
        let c = parse(&with).unwrap();
        assert_eq!(c.cder("fpga").unwrap().static_devices()[0].dev, Some(DeviceNumber { major: 511, minor: 0 }));
        let bad = GOOD.replace("path = \"/dev/xclmgmt0\"", "path = \"/dev/xclmgmt0\"\ndev = \"511\"");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cder.device.dev"), "{e}");
        assert!(e.to_string().contains("MAJOR:MINOR") && e.line.is_some(), "{e}");
    }

    #[test]
    fn memory_mb_is_still_read_as_memory_mib() {
        let old = parse(&GOOD.replace("memory_mib = 4800", "memory_mb = 4800")).unwrap();
        let new = parse(GOOD).unwrap();
        let (o, n) = (old.cder("gpgpu").unwrap().static_devices(), new.cder("gpgpu").unwrap().static_devices());
        assert_eq!(o[0].attributes.memory_mib, 4800);
        assert_eq!(o.len(), n.len());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let text = GOOD.replace("memory_mib = 4800", "memory_mib = 4800\nmemroy = 1");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.line, Some(17), "{e}");
        assert_eq!(e.key.as_deref(), Some("cder.device.memroy"), "{e}");
        assert!(e.to_string().starts_with("cder.toml:17:"), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
    }

    #[test]
    fn bad_value_names_key_and_line() {
        let text = GOOD.replace("memory_mib = 4800", "memory_mib = \"lots\"");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.line, Some(16), "{e}");
        assert_eq!(e.column, Some(14), "{e}");
        assert_eq!(e.key.as_deref(), Some("cder.device.memory_mib"), "{e}");

        let e = parse(&GOOD.replace("compute_capability = \"3.5\"", "compute_capability = \"three\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cder.device.compute_capability"), "{e}");
        assert!(e.message.contains("MAJOR.MINOR"), "{e}");

        let e = parse(&GOOD.replace(
            "discovery = \"static\"\n\n[[cder.device]]\nindex = 0\nuuid",
            "discovery = \"magic\"\n\n[[cder.device]]\nindex = 0\nuuid",
        ))
        .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cder.discovery"), "{e}");
        assert_eq!(e.line, Some(9), "{e}");

        let e = parse("[node]\nsocket_mode = \"0999\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(2), Some("node.socket_mode")), "{e}");
    }

    #[test]
    fn missing_key_is_named() {
        let text = GOOD.replace("model = \"Tesla K20m\"\n", "");
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("missing field `model`"), "{e}");
        assert!(e.key.as_deref().unwrap().ends_with("model"), "{e}");
        assert!(e.line.is_some(), "{e}");
    }

    #[test]
    fn syntax_error_has_line() {
        let e = parse("[node\nsocket = 1").unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn semantic_errors_are_located() {
        let dup = GOOD.replace("name = \"fpga\"", "name = \"gpgpu\"");
        let e = parse(&dup).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(26), Some("cder.name")), "{e}");
        assert!(e.message.contains("configured twice"));

        let no_env = GOOD.replace("visible_env = [\"XILINX_VISIBLE_DEVICES\"]\n", "");
        let e = parse(&no_env).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cder.visible_env"), "{e}");

        let dup_index =
            format!("{GOOD}\n[[cder.device]]\nindex = 0\nmodel = \"x\"\nmemory_mib = 1\npath = \"/dev/x1\"\n");
        let e = parse(&dup_index).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(38), Some("cder.device.index")), "{e}");

        let nvml_with_devices = GOOD.replacen("discovery = \"static\"", "discovery = \"nvml\"", 1);
        let e = parse(&nvml_with_devices).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cder.device"), "{e}");

        let bad_name = GOOD.replace("name = \"fpga\"", "name = \"FPGA cards\"");
        assert_eq!(parse(&bad_name).unwrap_err().key.as_deref(), Some("cder.name"));

        let relative = GOOD.replace("path = \"/dev/xclmgmt0\"", "path = \"xclmgmt0\"");
        assert_eq!(parse(&relative).unwrap_err().key.as_deref(), Some("cder.device.path"));
    }

    #[test]
    fn mig_offer_is_whole_unless_asked_and_only_for_nvml() {
        let nvml = "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\n";
        assert_eq!(parse(nvml).unwrap().cders[0].mig, MigOffer::Whole);
        let instances = format!("{nvml}mig = \"instances\"\n");
        assert_eq!(parse(&instances).unwrap().cders[0].mig, MigOffer::Instances);
        let e = parse(&format!("{nvml}mig = \"slices\"\n")).unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        let e = parse(&instances.replace("\"nvml\"", "\"static\"")).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("cder.mig"), "{e}");
    }

    #[test]
    fn device_entries_of_a_discovered_type_are_refused_not_dropped() {
        for source in ["nvml", "rocm-smi", "level-zero", "dev-scan", "auto"] {
            let text = format!(
                "[[cder]]\nname = \"gpgpu\"\nvendor = \"amd\"\ndiscovery = \"{source}\"\n\n[[cder.device]]\nindex = 0\nmodel = \"MI210\"\nmemory_mib = 1\npath = \"/dev/dri/renderD128\"\n"
            );
            let e = parse(&text).unwrap_err();
            assert_eq!((e.line, e.key.as_deref()), (Some(7), Some("cder.device")), "{e}");
            assert!(
                e.message.contains(&format!("uses discovery = \"{source}\"; [[cder.device]] entries are only for")),
                "{e}"
            );
        }
    }

    #[test]
    fn tiles_are_whole_unless_asked_and_only_for_level_zero() {
        let ze = "[[cder]]\nname = \"xe\"\nvendor = \"intel\"\ndiscovery = \"level-zero\"\n";
        assert_eq!(parse(ze).unwrap().cders[0].tiles, TileOffer::Whole);
        let tiles = format!("{ze}tiles = \"tiles\"\n");
        assert_eq!(parse(&tiles).unwrap().cders[0].tiles, TileOffer::Tiles);
        let e = parse(&format!("{ze}tiles = \"halves\"\n")).unwrap_err();
        assert_eq!(e.line, Some(5), "{e}");
        let e = parse(&tiles.replace("\"level-zero\"", "\"dev-scan\"")).unwrap_err();
        assert_eq!((e.key.as_deref(), e.line), (Some("cder.tiles"), Some(2)), "{e}");
        assert!(e.to_string().contains("only for discovery = \"level-zero\""), "{e}");
    }

    #[test]
    fn empty_file_is_a_valid_node_without_devices() {
        let c = parse("").unwrap();
        assert!(c.cders.is_empty());
        assert_eq!(c.node.socket, PathBuf::from(DEFAULT_SOCKET));
    }

    #[test]
    fn non_utf8_is_placed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cder.toml");
        std::fs::write(&path, b"[node]\nsocket = \"/run/\xff.sock\"\n").unwrap();
        let e = Config::load(Some(&path)).unwrap_err();
        assert_eq!((e.line, e.column, e.key.as_deref()), (Some(2), Some(16), Some("node.socket")), "{e}");
        assert!(e.message.contains("UTF-8"), "{e}");
    }

    #[test]
    fn load_reports_unreadable_file() {
        let e = Config::load(Some(Path::new("/nonexistent/cder.toml"))).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/cder.toml: cannot read the config"), "{e}");
    }

    #[test]
    fn node_usage_has_defaults_and_bad_values_name_their_key() {
        let usage = parse(GOOD).unwrap().node.usage;
        assert!(usage.sample && usage.idle_hook.is_none());
        assert_eq!((usage.sample_period_s, usage.active_threshold_percent, usage.idle_after_s), (10.0, 5, 1800.0));
        let with = |extra: &str| parse(&format!("{GOOD}\n[node.usage]\n{extra}"));
        let set =
            with("sample_period_s = 0.2\nidle_hook = [\"/usr/local/bin/tell\", \"-q\"]\nring_samples = 5").unwrap();
        assert_eq!(set.node.usage.sample_period_s, 0.2);
        assert_eq!(
            set.node.usage.idle_hook.as_deref(),
            Some(&["/usr/local/bin/tell".to_string(), "-q".to_string()][..])
        );
        for (extra, key) in [
            ("sample_period_s = 0.01", "node.usage.sample_period_s"),
            ("active_threshold_percent = 0", "node.usage.active_threshold_percent"),
            ("idle_below_percent = 101", "node.usage.idle_below_percent"),
            ("idle_after_s = -1.0", "node.usage.idle_after_s"),
            ("idle_hook = [\"mail\"]", "node.usage.idle_hook"),
            ("idle_hook = []", "node.usage.idle_hook"),
            ("ring_samples = 0", "node.usage.ring_samples"),
            ("sampling = true", "sampling"),
        ] {
            let e = with(extra).unwrap_err().to_string();
            assert!(e.contains(key), "{extra}: {e}");
        }
    }

    #[test]
    fn xids_are_classified_by_node_health() {
        let health = |extra: &str| parse(&format!("{GOOD}\n[node.health]\n{extra}")).map(|c| c.node.health);
        // Default: NVIDIA's application Xids are logged, hardware and driver ones drain.
        let default = health("").unwrap();
        for xid in [13, 31, 43, 45, 68] {
            assert!(!default.drains_xid(xid), "Xid {xid}");
        }
        for xid in [48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154] {
            assert!(default.drains_xid(xid), "Xid {xid}");
        }
        let ignore = health("ignore_xids = [13, 94]").unwrap();
        assert!(!ignore.drains_xid(94) && ignore.drains_xid(31) && ignore.drains_xid(79));
        let only = health("drain_xids = [79, 48]").unwrap();
        assert!(only.drains_xid(79) && only.drains_xid(48) && !only.drains_xid(94) && !only.drains_xid(13));
    }

    #[test]
    fn bad_xid_lists_name_file_line_and_key() {
        let text = format!("{GOOD}\n[node.health]\ndrain_xids = [79]\nignore_xids = [13]\n");
        let line = text.lines().position(|l| l.starts_with("drain_xids")).unwrap() + 1;
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cder.toml:{line}:"))
                && e.contains("node.health.drain_xids")
                && e.contains("not both"),
            "{e}"
        );
        for (list, why) in [("[79, 0]", "Xid 0"), ("[79, 79]", "listed twice"), ("[1000]", "Xid 1000")] {
            let text = format!("{GOOD}\n[node.health]\nignore_xids = {list}\n");
            let line = text.lines().position(|l| l.starts_with("ignore_xids")).unwrap() + 1;
            let e = parse(&text).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("cder.toml:{line}:"))
                    && e.contains("node.health.ignore_xids")
                    && e.contains(why),
                "{list}: {e}"
            );
        }
        let e = parse(&format!("{GOOD}\n[node.health]\nignore_xids = [-1]\n")).unwrap_err().to_string();
        assert!(e.contains("node.health.ignore_xids"), "{e}");
    }
}
