//! The node side of `spank_cder.so` as plain functions: the job prolog's
//! record, the step's plan, SLURM's GPU indices mapped to cderd's, and the
//! question to slurmctld. SLURM and cderd reach them through [`Node`] and
//! [`Cderd`], so they are tested without either.
//!
//! SLURM decides how many devices a job has on a node and which; cder uses
//! exactly those (docs/slurm.md, "Who decides").

pub mod admin_comment;
pub mod vgpgpu;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cder_model::{DeviceCgroup, DeviceNumber, JobEnvironment, JobKey, SharedFile, VendorKind};
use cder_protocol::{
    AllocRequest, AllocatedDevice, Allocation, Client, ClientError, Confined, EnvRequest, ErrorCode, Status, Usage,
    UsageRequest,
};

use crate::args::{Confine, FailMode, PluginArgs};
use crate::devices::{slurm_constrains_devices_checked, SLURM_JOB_GPUS};
use crate::gres_conf::{
    cderd_indices, detail_count, detail_indices, load_gres_devices, node_position, several_types, slurm_device_files,
    GresDevice,
};
use crate::node_gres::{NodeGres, PROLOG_NODE_GRES};
use crate::request::{
    Request, Source, GPGPU, GPGPU_SHARES, OPT_CDER, OPT_GPGPU_MIN_MEMORY, OPT_GPGPU_PER_NODE, OPT_GPGPU_SHARES_PER_NODE,
};
use crate::spank::SpankOption;
use crate::sys::{GrantedJob, Level};
use crate::vgpgpu::{OPT_VGPGPU_METHOD, OPT_VGPGPU_PER_NODE};
use cder_request::gres::parse_index_list;

/// What a step's tasks get when it is not their plan's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// Set these variables.
    Env(JobEnvironment),
    /// Refuse to start the task, with this message on its stderr.
    Fail(String),
}

/// Why a step gets no plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The step asks for something its job does not have, or asks it
    /// malformed: it is not started, whatever `fail=` says.
    Request(String),
    /// cderd could not serve the job: `fail=closed` refuses the step,
    /// `fail=open` runs it with the empty visible list.
    Unserved(String),
}

impl Refusal {
    /// What the tasks get under `fail`; logs an unserved job.
    pub fn outcome(self, job: &JobKey, fail: FailMode, node: &dyn Node) -> TaskOutcome {
        match self {
            Refusal::Request(message) => TaskOutcome::Fail(message),
            Refusal::Unserved(why) => {
                node.log(Level::Error, &format!("spank_cder: {job}: {why}"));
                match fail {
                    FailMode::Closed => TaskOutcome::Fail(format!("cder: {why} (fail=closed); the job is not started")),
                    FailMode::Open => TaskOutcome::Env(empty_env()),
                }
            }
        }
    }
}

/// The step's share of the job's devices, read from cderd's record of
/// what SLURM granted the job.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The job.
    pub job: JobKey,
    /// The tasks' variables, rendered by cderd for `device_cgroup`.
    pub env: JobEnvironment,
    /// The device cgroup `env` is numbered for.
    pub device_cgroup: DeviceCgroup,
    /// cderd's device cgroups of the job, ready for a task to enter.
    pub cgroups: Option<Vec<String>>,
    /// cderd's indices of the step's GPUs, where SLURM gave the step some
    /// of its job's.
    pub step_devices: Option<Vec<u32>>,
    /// cder keeps the tasks to the job's devices (`confine`): SLURM does
    /// not, and `confine=` allows it.
    pub confine: bool,
    /// Where SLURM confines: the shared files (kfd) the job holds no
    /// device of, which SLURM leaves open and each task denies in the
    /// job's SLURM group ([`crate::shared_fence`]).
    pub shared_denied: Vec<cder_model::SharedFile>,
}

/// What the node functions ask of cderd: [`Client`] in the plugin.
pub trait Cderd {
    /// `env`.
    fn env(&mut self, request: &EnvRequest) -> Result<Allocation, ClientError>;
    /// `alloc`, answered.
    fn alloc(&mut self, request: &AllocRequest) -> Result<Allocation, ClientError>;
    /// `alloc`, the answer not waited for.
    fn alloc_unanswered(&mut self, request: &AllocRequest) -> Result<(), ClientError>;
    /// `status`.
    fn status(&mut self) -> Result<Status, ClientError>;
    /// `confine` of the calling process.
    fn confine(&mut self, job: &JobKey) -> Result<Confined, ClientError>;
    /// `release`, answered: how many devices were released.
    fn release(&mut self, job: &JobKey) -> Result<u32, ClientError>;
    /// `release`, the answer not waited for.
    fn release_unanswered(&mut self, job: &JobKey) -> Result<(), ClientError>;
    /// `usage`: what the sampler measured.
    fn usage(&mut self, request: &UsageRequest) -> Result<Usage, ClientError>;
}

impl Cderd for Client {
    fn env(&mut self, request: &EnvRequest) -> Result<Allocation, ClientError> {
        self.env_for(request)
    }
    fn alloc(&mut self, request: &AllocRequest) -> Result<Allocation, ClientError> {
        Client::alloc(self, request)
    }
    fn alloc_unanswered(&mut self, request: &AllocRequest) -> Result<(), ClientError> {
        Client::alloc_unanswered(self, request)
    }
    fn status(&mut self) -> Result<Status, ClientError> {
        Client::status(self)
    }
    fn confine(&mut self, job: &JobKey) -> Result<Confined, ClientError> {
        Client::confine(self, job)
    }
    fn release(&mut self, job: &JobKey) -> Result<u32, ClientError> {
        Client::release(self, job).map(|r| r.released)
    }
    fn release_unanswered(&mut self, job: &JobKey) -> Result<(), ClientError> {
        Client::release_unanswered(self, job)
    }
    fn usage(&mut self, request: &UsageRequest) -> Result<Usage, ClientError> {
        Client::usage(self, request)
    }
}

/// The node as the functions see it: slurmd's configuration, slurmctld,
/// cderd's socket and the log. [`Slurmd`] in the plugin.
pub trait Node {
    /// slurmd's GPU list for this node (gres.conf); empty where slurmd
    /// detects the GPUs itself.
    fn gres(&self) -> Result<Vec<GresDevice>, String>;
    /// This node's name as slurm.conf spells it.
    fn node_name(&self) -> Option<String>;
    /// slurmctld's record of job `job_id`.
    fn granted(&self, job_id: u32) -> Result<GrantedJob, String>;
    /// SLURM keeps the tasks to their devices itself (ConstrainDevices).
    fn slurm_cgroup(&self) -> bool;
    /// Denies `numbers` in the SLURM device cgroup of job `job_id` that
    /// task `pid` is in; returns the group.
    fn deny_in_slurm_cgroup(&self, job_id: &str, pid: u32, numbers: &[DeviceNumber]) -> Result<PathBuf, String>;
    /// A connection to cderd.
    fn cderd(&self, args: &PluginArgs) -> Result<Box<dyn Cderd>, ClientError>;
    /// One line for SLURM's log.
    fn log(&self, level: Level, text: &str);
    /// Sets job `job_id`'s `AdminComment` with `scontrol`, which is killed
    /// after `timeout`.
    fn update_admin_comment(&self, scontrol: &Path, job_id: u32, text: &str, timeout: Duration) -> Result<(), String>;
    /// slurmd's gres.conf offers GPUs of this node as shares (`Name=shard`).
    fn shards(&self) -> bool {
        false
    }
    /// Why SLURM accounts each job's GPU use itself, if it does
    /// ([`admin_comment::slurm_measures_gpu_use`]).
    fn slurm_measures_gpu_use(&self) -> Option<String> {
        None
    }
}

/// The node SLURM runs the plugin on. gres.conf is read once per process.
#[derive(Debug, Default)]
pub struct Slurmd {
    gres: OnceLock<Result<Vec<GresDevice>, String>>,
}

impl Node for Slurmd {
    fn gres(&self) -> Result<Vec<GresDevice>, String> {
        self.gres.get_or_init(|| read_gres(Some(&daemon_conf()), self.node_name().as_deref(), self)).clone()
    }

    /// Read from this process's environment, where slurmstepd (from
    /// slurmd's config, before any plugin loads) and slurmd's prolog put
    /// it; never from the job's, which srun copies from the user.
    fn node_name(&self) -> Option<String> {
        std::env::var("SLURMD_NODENAME").ok().filter(|n| !n.is_empty()).or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
            host.trim().split('.').next().map(str::to_string)
        })
    }

    fn granted(&self, job_id: u32) -> Result<GrantedJob, String> {
        crate::sys::load_job(job_id)
    }

    /// A value SLURM would refuse is logged and leaves cder's own fence.
    fn slurm_cgroup(&self) -> bool {
        slurm_constrains_devices_checked(crate::sys::task_plugin().as_deref(), Some(&daemon_conf())).unwrap_or_else(
            |e| {
                crate::sys::log(
                    Level::Error,
                    &format!("spank_cder: {e}; taking SLURM's device cgroup as off, cder confines"),
                );
                false
            },
        )
    }

    fn deny_in_slurm_cgroup(&self, job_id: &str, pid: u32, numbers: &[DeviceNumber]) -> Result<PathBuf, String> {
        crate::shared_fence::deny_in_slurm_group(job_id, pid, numbers)
    }

    fn cderd(&self, args: &PluginArgs) -> Result<Box<dyn Cderd>, ClientError> {
        Ok(Box::new(Client::connect(&args.socket, args.timeout)?))
    }

    fn log(&self, level: Level, text: &str) {
        crate::sys::log(level, text);
    }

    fn update_admin_comment(&self, scontrol: &Path, job_id: u32, text: &str, timeout: Duration) -> Result<(), String> {
        admin_comment::run_scontrol(scontrol, Some(&daemon_conf()), job_id, text, timeout)
    }

    fn shards(&self) -> bool {
        load_gres_devices(Some(&daemon_conf()), self.node_name().as_deref(), lrms_shard()).is_ok_and(|d| !d.is_empty())
    }

    fn slurm_measures_gpu_use(&self) -> Option<String> {
        let conf = daemon_conf();
        let slurm_conf = std::fs::read_to_string(&conf).ok()?;
        let gres_conf = std::fs::read_to_string(conf.with_file_name("gres.conf")).unwrap_or_default();
        // PluginDir's folders, else where Debian's packages put SLURM's own.
        let dirs: Vec<PathBuf> = slurm_conf
            .lines()
            .filter_map(|l| l.trim().split_once('='))
            .filter(|(k, _)| k.trim().eq_ignore_ascii_case("PluginDir"))
            .flat_map(|(_, v)| v.split(':').map(|d| PathBuf::from(d.trim())).collect::<Vec<_>>())
            .chain([PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm"), PathBuf::from("/usr/lib64/slurm")])
            .collect();
        admin_comment::slurm_measures_gpu_use(crate::SLURM_VERSION_NUMBER, &slurm_conf, &gres_conf, |plugin| {
            dirs.iter().any(|d| d.join(plugin).exists())
        })
    }
}

/// The slurm.conf of the daemon this plugin runs in
/// ([`crate::devices::daemon_slurm_conf`]). `SLURM_CONF` is read from this
/// process's environment, which SLURM's own config loader set (slurmd,
/// inherited by slurmstepd; the prolog's from slurmd), never a job's.
fn daemon_conf() -> PathBuf {
    crate::devices::daemon_slurm_conf(
        crate::sys::slurm_conf_path().as_deref(),
        std::env::var_os("SLURM_CONF").map(PathBuf::from).as_deref(),
        Path::exists,
    )
}

fn lrms_shard() -> &'static str {
    cder_request::lrms::SHARD_GRES
}

/// slurmd's GPU list from the gres.conf beside `slurm_conf`.
pub fn read_gres(
    slurm_conf: Option<&Path>,
    node_name: Option<&str>,
    node: &dyn Node,
) -> Result<Vec<GresDevice>, String> {
    match load_gres_devices(slurm_conf, node_name, crate::gres::gres_name(GPGPU)) {
        Ok(list) => Ok(list),
        // slurmd lists what NVML reports, in PCI bus order, as cderd numbers
        // whole GPUs: SLURM's indices are cderd's (MIG instances are refused
        // in `to_cderd`).
        Err(e) if e.autodetect => {
            node.log(Level::Verbose, &format!("spank_cder: {e}; taking SLURM's GPU indices as cderd's"));
            Ok(Vec::new())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The srun/sbatch/salloc options of `spank_cder.so`.
pub fn options() -> Vec<SpankOption> {
    vec![
        SpankOption { name: OPT_GPGPU_PER_NODE, arginfo: Some("N"), usage: "Exclusive GPGPUs per node (cder; the JDL key GPGPUPerNode)" },
        SpankOption {
            name: OPT_CDER,
            arginfo: Some("TYPE[:GRESTYPE]:N"),
            usage: "Exclusive CDER devices per node, e.g. gpgpu:2, fpga:1, or a GRES type such as a MIG profile: gpgpu:1g.10gb:2 (cder)",
        },
        SpankOption { name: OPT_GPGPU_MIN_MEMORY, arginfo: Some("MB"), usage: "Only GPGPUs with at least MB megabytes of memory (cder)" },
        SpankOption {
            name: OPT_GPGPU_SHARES_PER_NODE,
            arginfo: Some("N"),
            usage: "N shares of one GPGPU per node, where GPUs are offered as shards; not fenced from the other sharers on the GPU (cder; the JDL key GPGPUSharesPerNode)",
        },
        SpankOption {
            name: OPT_VGPGPU_PER_NODE,
            arginfo: Some("N"),
            usage: "Virtual GPGPUs per node from the cluster's registry, reached over rCUDA or VCL (cder; JDL VirtualGPGPUPerNode)",
        },
        SpankOption { name: OPT_VGPGPU_METHOD, arginfo: Some("rCUDA|VCL"), usage: "API interception for --vgpgpu-per-node (default rCUDA)" },
    ]
}

/// The empty visible list for every vendor cder knows: what a job gets when
/// cderd cannot be asked which types this node has.
pub fn empty_env() -> JobEnvironment {
    let mut env = BTreeMap::new();
    for vendor in [VendorKind::Nvidia, VendorKind::Amd, VendorKind::Intel, VendorKind::XeonPhi] {
        for var in vendor.default_visible_env().unwrap_or_default() {
            env.insert(var, String::new());
        }
    }
    JobEnvironment(env)
}

fn list(devices: &[u32]) -> String {
    devices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// SLURM's GPU indices (`SLURM_JOB_GPUS`, `SLURM_STEP_GPUS`: positions in
/// slurmd's gres.conf list) as cderd's indices, matched by device file:
/// slurmd's order need not be cderd's (MIG profiles listed by type). A step
/// passes its job's devices (`known`), whose files cderd's record carries;
/// the prolog asks cderd for every device (`status`).
pub fn to_cderd(
    gres: &[GresDevice],
    slurm: &[u32],
    known: Option<&[AllocatedDevice]>,
    cderd: &mut dyn Cderd,
) -> Result<Vec<u32>, String> {
    if slurm.is_empty() {
        return Ok(Vec::new());
    }
    // (index, uuid, device file) of the gpgpu devices to look among.
    let devices: Vec<(u32, String, Option<String>)> = match known {
        Some(held) if held.iter().filter(|d| d.cder_type == GPGPU).all(|d| d.path.is_some()) => {
            held.iter().filter(|d| d.cder_type == GPGPU).map(|d| (d.index, d.uuid.clone(), d.path.clone())).collect()
        }
        _ => {
            let status = cderd.status().map_err(|e| e.to_string())?;
            status.devices.into_iter().filter(|d| d.cder_type == GPGPU).map(|d| (d.index, d.uuid, d.path)).collect()
        }
    };
    if gres.is_empty() {
        // gres.conf names no device files (or AutoDetect): SLURM's indices are
        // all there is, and they are cderd's for whole GPUs in PCI bus order.
        // Which MIG instances they mean, no file says.
        let mig: Vec<String> = devices
            .iter()
            .filter(|(i, uuid, _)| slurm.contains(i) && uuid.starts_with("MIG-"))
            .map(|(i, _, _)| format!("{GPGPU}:{i}"))
            .collect();
        if !mig.is_empty() {
            return Err(format!(
                "gres.conf gives slurmd no device file per GPU, and cderd's {} are MIG instances, whose order slurmd and cderd need not share; declare each instance with File= (docs/slurm.md, MIG)",
                mig.join(",")
            ));
        }
        return Ok(slurm.to_vec());
    }
    let files: Vec<(u32, PathBuf)> =
        devices.into_iter().filter_map(|(i, _, p)| p.map(|p| (i, PathBuf::from(p)))).collect();
    cderd_indices(slurm, gres, &files, GPGPU).map_err(|e| e.to_string())
}

/// The job's GPUs on this node as the controller allocated them, where the
/// prolog's `SLURM_JOB_GPUS` cannot be trusted to hold them all: with
/// several GRES types on the node (MIG profiles), SLURM 22.05 builds it from
/// the job's last GRES record only. Asks slurmctld for the job's
/// `gres_detail_str` (what `scontrol show job -d` prints as `IDX:`); keeps
/// `from_env` when that fails or says less.
pub fn controller_gpus(job: &JobKey, job_id: u32, gres: &[GresDevice], from_env: &[u32], node: &dyn Node) -> Vec<u32> {
    if from_env.is_empty() || !several_types(gres) {
        return from_env.to_vec();
    }
    let name = node.node_name();
    let detail = node.granted(job_id).and_then(|granted| {
        let text = this_nodes_detail(&granted, name.as_deref())?;
        detail_indices(&text, crate::gres::gres_name(GPGPU)).ok_or_else(|| format!("unreadable GRES detail {text:?}"))
    });
    match detail {
        Ok(all) if from_env.iter().all(|i| all.contains(i)) => all,
        Ok(all) => {
            let text = format!(
                "spank_cder: {job}: slurmctld's GRES detail [{}] lacks {SLURM_JOB_GPUS}=[{}]; using the latter",
                list(&all),
                list(from_env)
            );
            node.log(Level::Error, &text);
            from_env.to_vec()
        }
        Err(e) => {
            let text = format!(
                "spank_cder: {job}: job prolog: asking slurmctld for the job's GPUs of every GRES type: {e}; using {SLURM_JOB_GPUS}=[{}] alone",
                list(from_env)
            );
            node.log(Level::Error, &text);
            from_env.to_vec()
        }
    }
}

/// This node's entry of a job's `gres_detail_str`: the one at this node's
/// position in the job's node list, or the only one when the node cannot
/// name itself.
fn this_nodes_detail(granted: &GrantedJob, name: Option<&str>) -> Result<String, String> {
    let at = match (&granted.nodes, name) {
        (Some(nodes), Some(name)) => {
            node_position(nodes, name).ok_or_else(|| format!("{name} is not in the job's nodes {nodes}"))?
        }
        _ if granted.gres_detail.len() == 1 => 0,
        _ => return Err("cannot tell this node's entry in the job's GRES detail".to_string()),
    };
    Ok(granted.gres_detail.get(at).cloned().unwrap_or_default())
}

/// The shares of a GPU slurmctld granted job `job_id` on this node (its
/// `gres_detail_str`, `shard:3(IDX:0)`): SLURM 22.05 gives a shard job's
/// prolog `SLURM_JOB_GPUS` (the shared GPU) but not the count, and the job's
/// own environment is no authority. `Ok(None)`: the job holds no shares here.
pub fn controller_shares(job_id: u32, node: &dyn Node) -> Result<Option<u32>, String> {
    let granted = node.granted(job_id)?;
    let text = this_nodes_detail(&granted, node.node_name().as_deref())?;
    match detail_count(&text, lrms_shard()) {
        None => Err(format!("unreadable GRES detail {text:?}")),
        Some(0) => Ok(None),
        Some(n) => u32::try_from(n).map(Some).map_err(|_| format!("{n} shards in the GRES detail {text:?}")),
    }
}

/// What the job prolog knows of the job, from its environment (built by
/// slurmd from the job's credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prolog {
    /// The job.
    pub job: JobKey,
    /// Its SLURM id.
    pub job_id: u32,
    /// The uid it runs as.
    pub uid: u32,
    /// `SLURM_JOB_GPUS`, if set.
    pub job_gpus: Option<String>,
    /// `SPANK_CDER_NODE_GRES`, if set: the job's GPU GRES per node as
    /// job_submit_cder.so validated them ([`crate::node_gres`]).
    pub node_gres: Option<String>,
}

/// The prolog's record for cderd: exactly the GPUs SLURM gave the job on
/// this node (none for a job without GPUs), and SLURM's indices of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The `alloc` to send.
    pub alloc: AllocRequest,
    /// SLURM's indices of the GPUs.
    pub slurm_gpus: Vec<u32>,
}

/// The record of the GPUs SLURM gave the job, whether it asked through
/// cder or with a native `--gres`. Which of cderd's devices those are goes
/// by device file, not position: cderd maps the files of gres.conf in the
/// `alloc` itself; only without files (AutoDetect) are SLURM's indices
/// taken as cderd's. `Err`: why nothing can be recorded.
pub fn prolog_record(prolog: &Prolog, args: &PluginArgs, node: &dyn Node) -> Result<Record, String> {
    let job = &prolog.job;
    let gpus = match &prolog.job_gpus {
        None => Vec::new(),
        Some(text) => parse_index_list(text)
            .map_err(|e| format!("{SLURM_JOB_GPUS}={text:?} is not an index list ({e}); nothing recorded"))?,
    };
    let mut alloc = AllocRequest::new(job.clone(), prolog.uid, gpus.len() as u32);
    let mut slurm_gpus = gpus.clone();
    if gpus.is_empty() {
        alloc.devices = Some(Vec::new());
    } else {
        // The controller's stamp, where it makes SLURM_JOB_GPUS the whole
        // grant and gives the shares, spares the prolog its RPC.
        let stamp = match prolog.node_gres.as_deref().map(|v| (v, NodeGres::read(v))) {
            Some((_, Some(s))) if s.job_gpus_complete() => Some(s),
            Some((v, None)) => {
                node.log(
                    Level::Error,
                    &format!("spank_cder: {job}: job prolog: {PROLOG_NODE_GRES}={v:?} is not cder's; asking slurmctld"),
                );
                None
            }
            _ => None,
        };
        let gres = node.gres();
        let slurm = match (&gres, stamp) {
            (Ok(_), Some(_)) | (Err(_), _) => gpus.clone(),
            (Ok(gres), None) => controller_gpus(job, prolog.job_id, gres, &gpus, node),
        };
        let mapped = gres.and_then(|gres| {
            if gres.is_empty() {
                let mut cderd = node.cderd(args).map_err(|e| e.to_string())?;
                to_cderd(&gres, &slurm, None, cderd.as_mut()).map(|d| (Some(d), None))
            } else {
                slurm_device_files(&slurm, &gres).map(|f| (None, Some(f))).map_err(|e| e.to_string())
            }
        });
        let (devices, files) = mapped.map_err(|e| {
            format!("cannot tell which of cderd's devices are SLURM's GPU(s) [{}] ({SLURM_JOB_GPUS}): {e}; nothing recorded", list(&gpus))
        })?;
        alloc.count = slurm.len() as u32;
        alloc.devices = devices;
        alloc.device_files = files;
        // On a node offering shares, SLURM_JOB_GPUS names a shard job's GPU
        // too: slurmctld says whether, and how many shares, it granted.
        if node.shards() {
            let shares = match stamp {
                Some(s) if s.shards == 0 => None,
                Some(s) => Some(
                    u32::try_from(s.shards)
                        .map_err(|_| format!("{} shards in {PROLOG_NODE_GRES}; nothing recorded", s.shards))?,
                ),
                None => controller_shares(prolog.job_id, node)
                    .map_err(|e| format!("asking slurmctld for the shares it granted {job}: {e}; nothing recorded"))?,
            };
            if let Some(n) = shares {
                // SLURM 22.05 takes a job's shards on a node from one GPU.
                if n % alloc.count != 0 {
                    return Err(format!(
                        "SLURM granted {job} {n} shard(s) over GPUs [{}], which cder cannot split per GPU; nothing recorded",
                        list(&slurm)
                    ));
                }
                alloc.shares = Some(n / alloc.count);
            }
        }
        slurm_gpus = slurm;
    }
    // SLURM frees a finished job's GRES when the job ends, and may start
    // the next job on them while the finished one's epilog, which releases
    // them in cderd, still runs beside this prolog: cderd waits for that
    // release, up to the plugin's timeout. The job's first step gets the
    // record, or why it was refused, from cderd's `env`, which gives up
    // after the timeout too: cderd's wait leaves it a second to read.
    let wait = args.timeout.saturating_sub(Duration::from_secs(1)).max(args.timeout / 2);
    alloc.wait_ms = Some((wait.as_millis() as u64).min(cder_protocol::MAX_WAIT_MS));
    // Where SLURM's cgroup confines the tasks (or cder is told not to),
    // cderd's groups and its lock warm-up would be work for nothing.
    if args.confine == Confine::Off || node.slurm_cgroup() {
        alloc.prepare_cgroups = Some(false);
    }
    Ok(Record { alloc, slurm_gpus })
}

/// Sends the prolog's record without waiting for the answer: SLURM starts
/// the job only after its prolog ends. Never fails: a failing prolog
/// drains the node; a job whose devices were not recorded is refused by
/// its steps instead (fail=closed).
pub fn send_record(record: &Record, args: &PluginArgs, node: &dyn Node) {
    let (job, uid, gpus) = (&record.alloc.job, record.alloc.uid, &record.slurm_gpus);
    let files = match &record.alloc.device_files {
        Some(f) => f.iter().map(|g| g.join("|")).collect::<Vec<_>>().join(","),
        None => list(record.alloc.devices.as_deref().unwrap_or_default()),
    };
    match node.cderd(args).and_then(|mut c| c.alloc_unanswered(&record.alloc)) {
        // A node without cderd (no socket) and a job without GPUs: nothing
        // cder manages here.
        Err(_) if gpus.is_empty() && !args.socket.exists() => {}
        Ok(()) => node.log(
            Level::Info,
            &format!("spank_cder: {job}: recording for uid {uid} the gpgpu device(s) SLURM gave it in cderd: SLURM's [{}] ({files})", list(gpus)),
        ),
        Err(e) => node.log(
            Level::Error,
            &format!(
                "spank_cder: {job}: cderd did not record the gpgpu device(s) SLURM gave the job, SLURM's [{}] ({files}): {e}; SLURM and cderd disagree",
                list(gpus)
            ),
        ),
    }
}

/// What slurmstepd knows of a step, as root, before its tasks start.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The job.
    pub job: JobKey,
    /// The uid the job runs as, if SLURM said.
    pub uid: Option<u32>,
    /// What the step asks for (its options, else the JDL key), or why it
    /// cannot be read.
    pub request: Result<Request, String>,
    /// `--cder=` as given, for messages.
    pub cder_option: Option<String>,
    /// `SLURM_STEP_GPUS`, else `SLURM_JOB_GPUS`, of the step's environment.
    pub gpus: Option<String>,
}

/// The step's plan: its job's devices as cderd recorded them, the step's
/// request checked against them, and its environment as cderd renders it
/// for the device cgroup the tasks will run in.
pub fn plan_step(step: &Step, args: &PluginArgs, node: &dyn Node) -> Result<Plan, Refusal> {
    let job = &step.job;
    let req = step.request.clone().map_err(Refusal::Request)?;
    let has_devices = !req.is_empty() || step.gpus.as_deref().is_some_and(|s| !s.trim().is_empty());
    let slurm_cgroup = node.slurm_cgroup();
    let confine = !slurm_cgroup && args.confine != Confine::Off;
    let device_cgroup = match (slurm_cgroup, confine) {
        (true, _) => DeviceCgroup::Step,
        (false, true) => DeviceCgroup::Job,
        (false, false) => DeviceCgroup::None,
    };
    // A job without devices must still be kept from the node's devices:
    // SLURM's cgroup does that, else cderd's `confine`, which needs cderd.
    let unconfinable_ok = !confine || !args.socket.exists();
    let mut cderd = match node.cderd(args) {
        Ok(c) => c,
        Err(e) if !has_devices && unconfinable_ok => {
            node.log(Level::Verbose, &format!("spank_cder: {job}: {e}; no devices, empty visible list"));
            let env = empty_env();
            return Ok(Plan {
                job: job.clone(),
                env,
                device_cgroup,
                cgroups: None,
                step_devices: None,
                confine: false,
                shared_denied: shared_denied(slurm_cgroup, args, std::iter::empty(), node),
            });
        }
        Err(e) if !has_devices => {
            return Err(Refusal::Unserved(format!(
                "{e}; without cderd this job could not be kept from the node's devices"
            )))
        }
        Err(e) => return Err(Refusal::Unserved(e.to_string())),
    };
    let asked = EnvRequest { device_cgroup, ..EnvRequest::new(job.clone()) };
    let alloc = match cderd.env(&asked) {
        Ok(a) => a,
        Err(e) if e.code() == Some(ErrorCode::UnknownJob) && !has_devices => {
            // Not recorded by the prolog (cderd was down then). Recording
            // "no device" cannot raise anything, and lets cderd confine it.
            let uid = step.uid.ok_or_else(|| {
                Refusal::Unserved(format!("{e}; the job's uid is unknown, so no empty record can be made"))
            })?;
            let mut none = AllocRequest::new(job.clone(), uid, 0);
            none.devices = Some(Vec::new());
            cderd.alloc(&none).map_err(|e| Refusal::Unserved(e.to_string()))?
        }
        Err(e) if e.code() == Some(ErrorCode::UnknownJob) => {
            // cderd's message says why, where its `alloc` was refused.
            let why = e.to_string();
            let why = why.split_once(cder_protocol::REFUSED_TO_RECORD).map_or_else(
                || "the job prolog records them; see slurmd's log".to_string(),
                |(_, reason)| format!("it refused the job prolog's record: {reason}"),
            );
            return Err(Refusal::Unserved(format!("cderd holds no record of the devices SLURM gave {job} ({why})")));
        }
        Err(e) => return Err(Refusal::Unserved(e.to_string())),
    };
    check_request(step, &req, &alloc, cderd.as_mut(), node)?;
    // SLURM's GPUs for the step, as cderd's indices among the job's.
    let step_devices = match step.gpus.as_deref().and_then(|g| parse_index_list(g).ok()) {
        None => None,
        Some(slurm) => match node.gres().and_then(|gres| to_cderd(&gres, &slurm, Some(&alloc.devices), cderd.as_mut()))
        {
            Ok(cderd) => Some(cderd),
            Err(e) => {
                return Err(Refusal::Unserved(format!(
                    "cannot tell which of cderd's devices are the step's GPU(s) [{}]: {e}",
                    list(&slurm)
                )))
            }
        },
    };
    let job_gpus: Vec<u32> = alloc.devices.iter().filter(|d| d.cder_type == GPGPU).map(|d| d.index).collect();
    // A step of some of its job's GPUs asks again for its own share.
    let narrowed = step_devices.as_ref().filter(|s| job_gpus.iter().any(|i| !s.contains(i)));
    let answer = match narrowed {
        None => alloc.clone(),
        Some(step_list) => {
            let again = EnvRequest { step_devices: Some(step_list.clone()), ..asked };
            cderd.env(&again).map_err(|e| Refusal::Unserved(e.to_string()))?
        }
    };
    let held = alloc.devices.iter().map(|d| d.cder_type.as_str());
    Ok(Plan {
        job: job.clone(),
        env: answer.env,
        device_cgroup: answer.device_cgroup.unwrap_or_default(),
        cgroups: alloc.cgroups,
        step_devices: narrowed.cloned(),
        confine,
        shared_denied: shared_denied(slurm_cgroup, args, held, node),
    })
}

/// Where SLURM confines (`slurm_cgroup`), the shared files of cder.toml's
/// types (read from the path plugstack.conf names, never the job's) that a
/// job holding devices of `held` types may not open; none elsewhere (cderd's
/// own groups deny them). A missing cder.toml names none; an unreadable one
/// is logged.
fn shared_denied<'a>(
    slurm_cgroup: bool,
    args: &PluginArgs,
    held: impl Iterator<Item = &'a str> + Clone,
    node: &dyn Node,
) -> Vec<SharedFile> {
    if !slurm_cgroup {
        return Vec::new();
    }
    let path = args.config_path();
    match cder_model::Config::load(Some(&path)) {
        Ok(config) => crate::shared_fence::denied(&SharedFile::of_types(&config.cders), held),
        Err(e) => {
            let level = if path.exists() { Level::Error } else { Level::Verbose };
            node.log(level, &format!("spank_cder: {e}; no shared device file (kfd) is fenced inside SLURM's cgroup"));
            Vec::new()
        }
    }
}

/// In the task, as root, where SLURM confines: denies the shared files the
/// job may not open in its SLURM group. A file with no number yet (its
/// driver is not loaded) cannot be opened either. `Err`: why not.
fn deny_shared(plan: &Plan, pid: u32, node: &dyn Node) -> Result<(), String> {
    let numbers: Vec<DeviceNumber> = plan.shared_denied.iter().filter_map(SharedFile::number).collect();
    if numbers.is_empty() {
        return Ok(());
    }
    let group = node.deny_in_slurm_cgroup(plan.job.id(), pid, &numbers)?;
    let names: Vec<String> = plan.shared_denied.iter().map(SharedFile::name).collect();
    node.log(
        Level::Debug,
        &format!("spank_cder: {}: task {pid}: {} denied in {}", plan.job, names.join(", "), group.display()),
    );
    Ok(())
}

/// A step's request only selects among its job's devices: one asking for
/// more (by count, GRES type or memory) is refused.
fn check_request(
    step: &Step,
    req: &Request,
    alloc: &Allocation,
    cderd: &mut dyn Cderd,
    node: &dyn Node,
) -> Result<(), Refusal> {
    let job = &step.job;
    let cder_value = step.cder_option.as_deref().unwrap_or_default();
    let refused = |message: String| {
        node.log(Level::Error, &format!("spank_cder: {message}"));
        Refusal::Request(message)
    };
    for (ty, &count) in &req.counts {
        if ty == GPGPU_SHARES {
            let held = alloc.shares.unwrap_or(0);
            if count > held {
                let given = req
                    .sources
                    .get(ty)
                    .map_or_else(|| format!("--{OPT_CDER}={cder_value}"), |s| format!("{s}={count}"));
                return Err(refused(format!(
                    "cder: {given}: SLURM granted {job} {held} share(s) of a GPU on this node, and a step may use only its job's (ask when submitting: sbatch/salloc --{OPT_GPGPU_SHARES_PER_NODE}={count}); the step is not started"
                )));
            }
            continue;
        }
        let held = alloc.devices.iter().filter(|d| &d.cder_type == ty).count() as u32;
        if count > held {
            let given = match req.sources.get(ty) {
                Some(Source::Option(o)) if *o == OPT_CDER => format!("--{OPT_CDER}={cder_value}"),
                Some(other) => format!("{other}={count}"),
                None => format!("--{OPT_CDER}={ty}:{count}"),
            };
            return Err(refused(format!(
                "cder: {given}: SLURM gave {job} {held} {ty} device(s) on this node, and a step may use only its job's devices (ask when submitting: sbatch/salloc --gpgpu-per-node={count}); the step is not started"
            )));
        }
    }
    // A step naming GRES types (MIG profiles) may use only its job's
    // devices of each type; gres.conf says which type each file is.
    if let Some(by_type) = req.gres_types.get(GPGPU) {
        let gres = node.gres().map_err(Refusal::Unserved)?;
        let type_of = |d: &AllocatedDevice| {
            let path = d.path.as_deref().map(Path::new)?;
            gres.iter().find(|g| g.files.iter().any(|f| f == path)).and_then(|g| g.gres_type.as_deref())
        };
        for (gres_type, &n) in by_type {
            let held =
                alloc.devices.iter().filter(|d| d.cder_type == GPGPU && type_of(d) == Some(gres_type.as_str())).count()
                    as u32;
            if n > held && !gres.is_empty() {
                return Err(refused(format!(
                    "cder: --{OPT_CDER}={cder_value}: SLURM gave {job} {held} {GPGPU} device(s) of GRES type {gres_type} on this node, and a step may use only its job's devices (ask when submitting: sbatch/salloc --{OPT_CDER}={GPGPU}:{gres_type}:{n}); the step is not started"
                )));
            }
        }
    }
    if let Some(min) = req.gpgpu_min_memory_mib {
        let status = cderd.status().map_err(|e| Refusal::Unserved(e.to_string()))?;
        let small: Vec<String> = alloc
            .devices
            .iter()
            .filter(|d| d.cder_type == GPGPU)
            .filter_map(|d| status.devices.iter().find(|s| s.cder_type == d.cder_type && s.index == d.index))
            .filter(|s| s.memory_mib < min)
            .map(|s| format!("{} {}: {} MB", s.cder_type, s.index, s.memory_mib))
            .collect();
        if !small.is_empty() {
            return Err(Refusal::Unserved(format!(
                "--{OPT_GPGPU_MIN_MEMORY}={min}: the device(s) SLURM gave {job} have less memory ({}); give the site's GRES types for memory classes",
                small.join(", ")
            )));
        }
    }
    Ok(())
}

/// Releases the job's devices and vGPGPU backends; `answered`: waits for
/// cderd's answer. The job epilog does not: SLURM starts the node's next
/// job only after the epilog ends. Never fails: SLURM would drain the node.
pub fn release(args: &PluginArgs, job: &JobKey, when: &str, answered: bool, node: &dyn Node) {
    vgpgpu::release(args, job, when, node);
    // Before the release, while cderd still counts the job's time.
    admin_comment::record(args, job, node);
    let sent = node.cderd(args).and_then(|mut c| {
        if answered {
            c.release(job).map(Some)
        } else {
            c.release_unanswered(job).map(|()| None)
        }
    });
    match sent {
        Ok(Some(n)) => node.log(Level::Verbose, &format!("spank_cder: {job}: {when}: released {n} device(s)")),
        // cderd logs the release; SLURM waits for the epilog.
        Ok(None) => node.log(Level::Debug, &format!("spank_cder: {job}: {when}: release sent to cderd")),
        // cderd's reconcile releases jobs SLURM no longer runs.
        Err(e) => node.log(Level::Error, &format!("spank_cder: {job}: {when}: release failed: {e}")),
    }
}

/// Moves process `pid` into each of `groups` (cgroup directories that cderd
/// set up for its job) by writing it into their `cgroup.procs`.
pub fn enter_cgroups(groups: &[String], pid: u32) -> Result<(), String> {
    use std::io::Write;
    for group in groups {
        let dir = Path::new(group);
        if !dir.is_absolute() || dir.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(format!("cderd named the device cgroup {group:?}, not an absolute path"));
        }
        let procs = dir.join("cgroup.procs");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .and_then(|mut f| f.write_all(pid.to_string().as_bytes()))
            .map_err(|e| format!("entering {}: {e}", procs.display()))?;
    }
    Ok(())
}

/// The processes slurmstepd of the extern step (`PrologFlags=contain`)
/// forked: its `sleep`, which SPANK does not name (the extern step has no
/// task). Read from `/proc/self/task/*/children` (its threads' children).
pub fn own_children() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else { return out };
    for t in threads.flatten() {
        let text = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// In the extern step's slurmstepd, as root, once its process is forked:
/// where cder confines the job's tasks, the extern step's processes `pids`
/// enter the job's device cgroups too, as a task does. What joins the
/// extern step's device cgroup later (a login `pam_slurm_adopt` adopts
/// where it lands there, X11 forwarding) is then kept to the job's
/// devices. `Err`: why not (the caller ends the extern step where the job
/// must be confined).
pub fn confine_extern(plan: &Plan, pids: &[u32], node: &dyn Node) -> Result<(), String> {
    if !plan.confine {
        return Ok(());
    }
    let job = &plan.job;
    if pids.is_empty() {
        return Err(format!("cder: {job}: the extern step has no process to confine"));
    }
    // cderd names the groups only to root, which slurmstepd is; `confine`
    // would move only the caller, which is slurmstepd itself.
    let groups = plan
        .cgroups
        .as_deref()
        .filter(|g| !g.is_empty())
        .ok_or_else(|| format!("cder: {job}: cderd named no device cgroup for the extern step"))?;
    for &pid in pids {
        enter_cgroups(groups, pid).map_err(|e| format!("cder: {job}: extern step pid {pid}: {e}"))?;
    }
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    node.log(
        Level::Verbose,
        &format!(
            "spank_cder: {job}: extern step pid {} confined to its devices in {}",
            pids.join(","),
            groups.join(" ")
        ),
    );
    Ok(())
}

/// Ends the extern step's processes `pids` (SIGKILL): a job that must be
/// confined keeps no extern step its logins could be adopted into unfenced.
pub fn end_extern(pids: &[u32]) {
    for &pid in pids {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill has no memory preconditions; the pids are this
            // process's own children, read just now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// In the task, as root: where SLURM gives no device cgroup, put process
/// `pid` into the job's (children inherit it), then settle the variables
/// it gets. `Err`: the task is not started, with this message.
pub fn confine_task(plan: &Plan, args: &PluginArgs, pid: u32, node: &dyn Node) -> Result<JobEnvironment, String> {
    if let Err(e) = deny_shared(plan, pid, node) {
        let job = &plan.job;
        let names: Vec<String> = plan.shared_denied.iter().map(SharedFile::name).collect();
        node.log(
            Level::Error,
            &format!("spank_cder: {job}: task {pid}: fencing {} inside SLURM's device cgroup: {e}", names.join(", ")),
        );
        if args.confine == Confine::Required {
            return Err(format!(
                "cder: {job}: fencing {} inside SLURM's device cgroup: {e} (confine=required); the job is not started",
                names.join(", ")
            ));
        }
    }
    if !plan.confine {
        return Ok(plan.env.clone());
    }
    let job = &plan.job;
    // cderd set the groups up and named them in its answer to the step's
    // `env`: entering them here saves a round trip per task. Anything
    // amiss (an older cderd, a group gone) goes the long way.
    if let Some(groups) = plan.cgroups.as_deref().filter(|g| !g.is_empty()) {
        match enter_cgroups(groups, pid) {
            Ok(()) => {
                // Debug: this runs in every task, just before its exec.
                node.log(
                    Level::Debug,
                    &format!("spank_cder: {job}: task {pid} confined to its devices in {}", groups.join(" ")),
                );
                return Ok(plan.env.clone());
            }
            Err(e) => {
                node.log(Level::Verbose, &format!("spank_cder: {job}: task {pid}: {e}; asking cderd to confine it"))
            }
        }
    }
    let e = match node.cderd(args).and_then(|mut c| c.confine(job)) {
        Ok(c) => {
            node.log(
                Level::Verbose,
                &format!("spank_cder: {job}: task {} confined to its devices in {}", c.pid, c.cgroups.join(" ")),
            );
            return Ok(plan.env.clone());
        }
        Err(e) => e,
    };
    node.log(Level::Error, &format!("spank_cder: {job}: confining a task to its devices: {e}"));
    let unavailable = e.code() == Some(ErrorCode::EnforcementUnavailable);
    if args.confine == Confine::Required || (!unavailable && args.fail == FailMode::Closed) {
        let how = if args.confine == Confine::Required { "confine=required" } else { "fail=closed" };
        return Err(format!("cder: confining {job} to its devices: {e} ({how}); the job is not started"));
    }
    if plan.device_cgroup == DeviceCgroup::None {
        return Ok(plan.env.clone());
    }
    // The task sees every device of the node: it needs node indices.
    let absolute = EnvRequest {
        device_cgroup: DeviceCgroup::None,
        step_devices: plan.step_devices.clone(),
        ..EnvRequest::new(job.clone())
    };
    match node.cderd(args).and_then(|mut c| c.env(&absolute)) {
        Ok(a) => Ok(a.env),
        Err(e) => {
            node.log(
                Level::Error,
                &format!("spank_cder: {job}: task {pid}: asking cderd for node indices: {e}; empty visible list"),
            );
            Ok(empty_env())
        }
    }
}

#[cfg(test)]
mod tests;
