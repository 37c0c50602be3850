//! `spank_cder.so`: the node side of cder for SLURM.
//!
//! ```text
//! # plugstack.conf
//! required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_cder.so socket=/run/cder/cderd.sock fail=closed confine=auto
//! ```
//!
//! SLURM decides how many devices a job has on a node and which; cder uses
//! exactly those (docs/slurm.md, "Who decides").
//!
//! * srun/sbatch/salloc get `--gpgpu-per-node=N`, `--cder=TYPE:N` and
//!   `--gpgpu-min-memory=MB`; on the submit host the values are copied into
//!   the job-control environment, where `job_submit_cder.so` turns them into
//!   GRES.
//! * The job prolog (root) records in cderd the GPUs slurmd received for the
//!   job in its credential (`SLURM_JOB_GPUS` of the prolog environment), for
//!   cder and native `--gres` jobs alike (count 0 for none).
//! * slurmstepd (root) reads that record; a step's option or JDL key asking
//!   for more than the job has refuses the step with a readable message.
//! * In each task, as root, where SLURM gives no device cgroup, the task
//!   enters the job's device cgroups that cderd set up and named in its
//!   answer to the step's `env` (or asks cderd's `confine`); just before exec
//!   the visibility variables name exactly the devices the task can open,
//!   relative (from 0) inside a cgroup. A job without devices gets the empty
//!   list, never "all".
//! * The devices are released when the batch step ends (`slurm_spank_exit`)
//!   and, in any case, by the job epilog (`slurm_spank_job_epilog`).
//! * `fail=closed` (default) fails the job with a readable message when
//!   cderd is unreachable or holds no record of the job's devices;
//!   `fail=open` runs it with an empty visible list.

#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use cder_model::{JobEnvironment, JobKey, Lrms, VendorKind};
use cder_protocol::{AllocRequest, AllocatedDevice, Allocation, Client, ClientError, ErrorCode};
use cder_slurm::args::{Confine, FailMode, PluginArgs};
use cder_slurm::devices::{
    parse_index_list, slurm_constrains_devices_checked, step_devices, step_env, Enforcement, SLURM_JOB_GPUS, SLURM_STEP_GPUS,
};
use cder_request::keys::GPGPU_PER_NODE as JDL_GPGPU_PER_NODE;
use cder_slurm::request::{
    RawRequest, Request, Source, Sourced, CONTROL_CDER, CONTROL_GPGPU_MIN_MEMORY, CONTROL_GPGPU_PER_NODE, GPGPU, OPT_CDER,
    OPT_GPGPU_MIN_MEMORY, OPT_GPGPU_PER_NODE,
};
use cder_slurm::gres_conf::{cderd_indices, detail_indices, load_gres_devices, node_position, several_types, slurm_device_files, GresDevice};
use cder_slurm::spank::{Context, Plugin, Spank, SpankError, SpankOption, SpankResult};
use cder_slurm::sys::{self, log, Level};

mod vgpgpu;

/// What the tasks of this step get when it is not the job's devices:
/// decided as root in `init_post_opt`.
#[derive(Debug)]
enum Outcome {
    /// Set these variables.
    Env(JobEnvironment),
    /// Refuse to start the task, with this message on its stderr.
    Fail(String),
}

/// The step's share of the job's devices, read from cderd's record of what
/// SLURM granted the job.
#[derive(Debug)]
struct Plan {
    job: JobKey,
    /// The job's record in cderd: its devices and their variables.
    alloc: Allocation,
    /// The devices this step uses (the job's, or the step's GPUs among them).
    step: Vec<AllocatedDevice>,
    /// SLURM puts the tasks into a device cgroup of its own.
    slurm_cgroup: bool,
}

#[derive(Default)]
struct CderSpank {
    options: RawRequest,
    args: Option<PluginArgs>,
    outcome: Option<Outcome>,
    plan: Option<Plan>,
    /// This task process was put into cderd's device cgroup.
    confined: bool,
    /// `--vgpgpu-per-node`: backends from the cluster registry.
    vgpgpu: vgpgpu::Vgpgpu,
}

/// The empty visible list for every vendor cder knows: what a job gets when
/// cderd cannot be asked which types this node has.
fn empty_env() -> JobEnvironment {
    let mut env = BTreeMap::new();
    for vendor in [VendorKind::Nvidia, VendorKind::Amd, VendorKind::Intel, VendorKind::XeonPhi] {
        for var in vendor.default_visible_env().unwrap_or_default() {
            env.insert(var, String::new());
        }
    }
    JobEnvironment(env)
}

fn job_key(spank: &Spank) -> Result<JobKey, SpankError> {
    let id = spank.job_id()?;
    JobKey::new(Lrms::Slurm, &id.to_string()).map_err(|e| SpankError::new(e.to_string()))
}

fn set_all(env: &JobEnvironment, spank: &Spank) -> SpankResult {
    for (k, v) in &env.0 {
        spank.setenv(k, v)?;
    }
    Ok(())
}

/// In the task: set the variables of `outcome`, or refuse with its reason.
fn apply(outcome: Option<&Outcome>, spank: &Spank) -> SpankResult {
    match outcome {
        Some(Outcome::Env(env)) => set_all(env, spank),
        Some(Outcome::Fail(message)) => {
            // This runs in the task, whose stderr is the job's: the user
            // reads why the job did not start in its own output.
            let _ = writeln!(std::io::stderr(), "{message}");
            Err(SpankError::new(message.clone()))
        }
        None => Ok(()),
    }
}

fn list(devices: &[u32]) -> String {
    devices.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// This node's name as slurm.conf and gres.conf spell it (`NodeName=`),
/// which need not be its host name. Read from this process's environment,
/// where slurmstepd (from slurmd's config, before any plugin loads) and
/// slurmd's prolog put it; never from the job's, which srun copies from
/// the user.
fn node_name() -> Option<String> {
    std::env::var("SLURMD_NODENAME").ok().filter(|n| !n.is_empty()).or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
        host.trim().split('.').next().map(str::to_string)
    })
}

/// slurmd's GPU list for this node, from the gres.conf beside slurm.conf.
fn gres_list() -> Result<Vec<GresDevice>, String> {
    let conf = sys::slurm_conf_path().or_else(|| std::env::var_os("SLURM_CONF").map(PathBuf::from));
    match load_gres_devices(conf.as_deref(), node_name().as_deref(), cder_slurm::gres::gres_name(GPGPU)) {
        Ok(list) => Ok(list),
        // slurmd lists what NVML reports, in PCI bus order, as cderd numbers
        // whole GPUs: SLURM's indices are cderd's (MIG instances are refused
        // in `to_cderd`).
        Err(e) if e.autodetect => {
            log(Level::Verbose, &format!("spank_cder: {e}; taking SLURM's GPU indices as cderd's"));
            Ok(Vec::new())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// SLURM's GPU indices (`SLURM_JOB_GPUS`, `SLURM_STEP_GPUS`: positions in
/// slurmd's gres.conf list) as cderd's indices, matched by device file:
/// slurmd's order need not be cderd's (MIG profiles listed by type). A step
/// passes its job's devices (`known`), whose files cderd's record carries;
/// the prolog asks cderd for every device (`status`).
fn to_cderd(gres: &[GresDevice], slurm: &[u32], known: Option<&[AllocatedDevice]>, client: &mut Client) -> Result<Vec<u32>, String> {
    if slurm.is_empty() {
        return Ok(Vec::new());
    }
    // (index, uuid, device file) of the gpgpu devices to look among.
    let devices: Vec<(u32, String, Option<String>)> = match known {
        Some(held) if held.iter().filter(|d| d.cder_type == GPGPU).all(|d| d.path.is_some()) => {
            held.iter().filter(|d| d.cder_type == GPGPU).map(|d| (d.index, d.uuid.clone(), d.path.clone())).collect()
        }
        _ => {
            let status = client.status().map_err(|e| e.to_string())?;
            status.devices.into_iter().filter(|d| d.cder_type == GPGPU).map(|d| (d.index, d.uuid, d.path)).collect()
        }
    };
    if gres.is_empty() {
        // gres.conf names no device files (or AutoDetect): SLURM's indices are
        // all there is, and they are cderd's for whole GPUs in PCI bus order.
        // Which MIG instances they mean, no file says.
        let mig: Vec<String> =
            devices.iter().filter(|(i, uuid, _)| slurm.contains(i) && uuid.starts_with("MIG-")).map(|(i, _, _)| format!("{GPGPU}:{i}")).collect();
        if !mig.is_empty() {
            return Err(format!(
                "gres.conf gives slurmd no device file per GPU, and cderd's {} are MIG instances, whose order slurmd and cderd need not share; declare each instance with File= (docs/slurm.md, MIG)",
                mig.join(",")
            ));
        }
        return Ok(slurm.to_vec());
    }
    let files: Vec<(u32, PathBuf)> = devices.into_iter().filter_map(|(i, _, p)| p.map(|p| (i, PathBuf::from(p)))).collect();
    cderd_indices(slurm, gres, &files, GPGPU).map_err(|e| e.to_string())
}

/// The job's GPUs on this node as the controller allocated them, where the
/// prolog's `SLURM_JOB_GPUS` cannot be trusted to hold them all: with
/// several GRES types on the node (MIG profiles), SLURM 22.05 builds it from
/// the job's last GRES record only. Asks slurmctld for the job's
/// `gres_detail_str` (what `scontrol show job -d` prints as `IDX:`); keeps
/// `from_env` when that fails or says less.
fn controller_gpus(job: &JobKey, job_id: u32, gres: &[GresDevice], from_env: &[u32]) -> Vec<u32> {
    if from_env.is_empty() || !several_types(gres) {
        return from_env.to_vec();
    }
    let node = node_name();
    let detail = sys::load_job(job_id).and_then(|granted| {
        let at = match (&granted.nodes, &node) {
            (Some(nodes), Some(node)) => node_position(nodes, node).ok_or_else(|| format!("{node} is not in the job's nodes {nodes}"))?,
            _ if granted.gres_detail.len() == 1 => 0,
            _ => return Err("cannot tell this node's entry in the job's GRES detail".to_string()),
        };
        let text = granted.gres_detail.get(at).cloned().unwrap_or_default();
        detail_indices(&text, cder_slurm::gres::gres_name(GPGPU)).ok_or_else(|| format!("unreadable GRES detail {text:?}"))
    });
    match detail {
        Ok(all) if from_env.iter().all(|i| all.contains(i)) => all,
        Ok(all) => {
            log(Level::Error, &format!("spank_cder: {job}: slurmctld's GRES detail [{}] lacks {SLURM_JOB_GPUS}=[{}]; using the latter", list(&all), list(from_env)));
            from_env.to_vec()
        }
        Err(e) => {
            log(Level::Error, &format!("spank_cder: {job}: job prolog: asking slurmctld for the job's GPUs of every GRES type: {e}; using {SLURM_JOB_GPUS}=[{}] alone", list(from_env)));
            from_env.to_vec()
        }
    }
}

/// SLURM confines the tasks to their devices itself (task/cgroup with
/// ConstrainDevices on). A value SLURM would refuse is logged and leaves
/// cder's own fence in place.
fn slurm_cgroup() -> bool {
    slurm_constrains_devices_checked(sys::task_plugin().as_deref(), sys::slurm_conf_path().as_deref()).unwrap_or_else(|e| {
        log(Level::Error, &format!("spank_cder: {e}; taking SLURM's device cgroup as off, cder confines"));
        false
    })
}

/// Moves process `pid` into each of `groups` (cgroup directories that cderd
/// set up for its job) by writing it into their `cgroup.procs`.
fn enter_cgroups(groups: &[String], pid: u32) -> Result<(), String> {
    for group in groups {
        let dir = std::path::Path::new(group);
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

impl CderSpank {
    fn args(&self) -> PluginArgs {
        self.args.clone().unwrap_or_default()
    }

    /// Parses the plugstack.conf words once. Every callback gets them, and
    /// not every context calls `slurm_spank_init` (the job epilog does not).
    fn load_args(&mut self, words: &[String]) -> SpankResult {
        if self.args.is_none() {
            let args = PluginArgs::parse(words).map_err(|e| SpankError::new(e.to_string()))?;
            if let Some(mode) = &args.legacy_mode {
                log(Level::Verbose, &format!("spank_cder: mode={mode} has no effect: SLURM's GRES chooses the devices, cderd records them"));
            }
            self.args = Some(args);
        }
        Ok(())
    }

    fn connect(&self) -> Result<Client, ClientError> {
        let a = self.args();
        Client::connect(&a.socket, a.timeout)
    }

    /// What this step asks for: its options, else the JDL key a CE put in
    /// the job's environment. Only a request: it selects among the job's
    /// devices and never adds to them.
    fn request(&self, spank: &Spank) -> Result<Request, String> {
        let jdl = RawRequest {
            gpgpu_per_node: spank
                .getenv(JDL_GPGPU_PER_NODE)
                .map(|value| Sourced { value, source: Source::JdlKey(JDL_GPGPU_PER_NODE) }),
            ..RawRequest::default()
        };
        self.options.clone().or(jdl).parse().map_err(|e| e.to_string())
    }

    /// Job prolog, as root, in the environment slurmd built from the job's
    /// credential: record in cderd exactly the GPUs SLURM gave the job on
    /// this node (none for a job without GPUs), whether it asked through
    /// cder or with a native `--gres`. Never fails: a failing prolog drains
    /// the node; a job whose devices were not recorded is refused by its
    /// steps instead (fail=closed).
    fn record(&self, spank: &Spank) {
        let job = match job_key(spank) {
            Ok(j) => j,
            Err(e) => return log(Level::Error, &format!("spank_cder: job prolog: {e}")),
        };
        let uid = std::env::var("SLURM_JOB_UID").ok().and_then(|u| u.parse::<u32>().ok()).or_else(|| spank.job_uid().ok());
        let Some(uid) = uid else {
            return log(Level::Error, &format!("spank_cder: {job}: job prolog: no SLURM_JOB_UID; nothing recorded"));
        };
        let gpus = match std::env::var(SLURM_JOB_GPUS) {
            Err(_) => Vec::new(),
            Ok(text) => match parse_index_list(&text) {
                Some(gpus) => gpus,
                None => return log(Level::Error, &format!("spank_cder: {job}: job prolog: {SLURM_JOB_GPUS}={text:?} is not an index list; nothing recorded")),
            },
        };
        // Which of cderd's devices those are: by device file, not position.
        // cderd maps the files of gres.conf in the `alloc` itself; only
        // without files (AutoDetect) are SLURM's indices taken as cderd's.
        let mut gpus = gpus;
        let mut alloc = AllocRequest::new(job.clone(), uid, gpus.len() as u32);
        if !gpus.is_empty() {
            let mapped = gres_list().and_then(|gres| {
                let job_id = spank.job_id().map_err(|e| e.to_string())?;
                let slurm = controller_gpus(&job, job_id, &gres, &gpus);
                if gres.is_empty() {
                    let cderd = self.connect().map_err(|e| e.to_string()).and_then(|mut c| to_cderd(&gres, &slurm, None, &mut c))?;
                    Ok((slurm, Some(cderd), None))
                } else {
                    let files = slurm_device_files(&slurm, &gres).map_err(|e| e.to_string())?;
                    Ok((slurm, None, Some(files)))
                }
            });
            match mapped {
                Ok((slurm, devices, files)) => {
                    alloc.count = slurm.len() as u32;
                    alloc.devices = devices;
                    alloc.device_files = files;
                    gpus = slurm;
                }
                Err(e) => {
                    return log(
                        Level::Error,
                        &format!("spank_cder: {job}: job prolog: cannot tell which of cderd's devices are SLURM's GPU(s) [{}] ({SLURM_JOB_GPUS}): {e}; nothing recorded", list(&gpus)),
                    )
                }
            }
        } else {
            alloc.devices = Some(Vec::new());
        }
        let files = |a: &AllocRequest| match &a.device_files {
            Some(f) => f.iter().map(|g| g.join("|")).collect::<Vec<_>>().join(","),
            None => list(a.devices.as_deref().unwrap_or_default()),
        };
        // SLURM frees a finished job's GRES when the job ends, and may start
        // the next job on them while the finished one's epilog, which
        // releases them in cderd, still runs beside this prolog: cderd waits
        // for that release, up to the plugin's timeout. The answer is not
        // waited for: SLURM starts the job only after its prolog ends, and
        // the job's first step gets the record, or why it was refused, from
        // cderd's `env` (BENCHMARKS.md, issue 12). That `env` gives up after
        // the timeout too: cderd's wait leaves it a second to read the answer.
        let timeout = self.args().timeout;
        let wait = timeout.saturating_sub(std::time::Duration::from_secs(1)).max(timeout / 2);
        alloc.wait_ms = Some((wait.as_millis() as u64).min(cder_protocol::MAX_WAIT_MS));
        // Where SLURM's cgroup confines the tasks (or cder is told not to),
        // cderd's groups and its lock warm-up would be work for nothing.
        if self.args().confine == Confine::Off || slurm_cgroup() {
            alloc.prepare_cgroups = Some(false);
        }
        match self.connect().and_then(|mut c| c.alloc_unanswered(&alloc)) {
            // A node without cderd (no socket) and a job without GPUs: nothing
            // cder manages here.
            Err(_) if gpus.is_empty() && !self.args().socket.exists() => {}
            Ok(()) => log(
                Level::Info,
                &format!("spank_cder: {job}: recording for uid {uid} the gpgpu device(s) SLURM gave it in cderd: SLURM's [{}] ({})", list(&gpus), files(&alloc)),
            ),
            Err(e) => log(
                Level::Error,
                &format!(
                    "spank_cder: {job}: cderd did not record the gpgpu device(s) SLURM gave the job, SLURM's [{}] ({}): {e}; SLURM and cderd disagree",
                    list(&gpus),
                    files(&alloc)
                ),
            ),
        }
    }

    /// Remote context, as root: read the job's devices from cderd and check
    /// the step's request against them.
    fn plan_step(&mut self, spank: &Spank) -> SpankResult {
        let args = self.args();
        let job = job_key(spank)?;
        let req = match self.request(spank) {
            Ok(r) => r,
            Err(message) => {
                self.outcome = Some(Outcome::Fail(message));
                return Ok(());
            }
        };
        let step_gpus = spank.getenv(SLURM_STEP_GPUS).or_else(|| spank.getenv(SLURM_JOB_GPUS));
        let has_devices = !req.is_empty() || step_gpus.as_deref().is_some_and(|s| !s.trim().is_empty());
        let refuse = |why: String| -> Outcome {
            log(Level::Error, &format!("spank_cder: {job}: {why}"));
            match args.fail {
                FailMode::Closed => Outcome::Fail(format!("cder: {why} (fail=closed); the job is not started")),
                FailMode::Open => Outcome::Env(empty_env()),
            }
        };
        let slurm_cgroup = slurm_cgroup();
        // A job without devices must still be kept from the node's devices:
        // SLURM's cgroup does that, else cderd's `confine`, which needs cderd.
        let unconfinable_ok = slurm_cgroup || args.confine == Confine::Off || !args.socket.exists();
        let mut client = match self.connect() {
            Ok(c) => c,
            Err(e) if !has_devices && unconfinable_ok => {
                log(Level::Verbose, &format!("spank_cder: {job}: {e}; no devices, empty visible list"));
                self.outcome = Some(Outcome::Env(empty_env()));
                return Ok(());
            }
            Err(e) if !has_devices => {
                self.outcome = Some(refuse(format!("{e}; without cderd this job could not be kept from the node's devices")));
                return Ok(());
            }
            Err(e) => {
                self.outcome = Some(refuse(e.to_string()));
                return Ok(());
            }
        };
        let alloc = match client.env(&job) {
            Ok(a) => a,
            Err(e) if e.code() == Some(ErrorCode::UnknownJob) && !has_devices => {
                // Not recorded by the prolog (cderd was down then). Recording
                // "no device" cannot raise anything, and lets cderd confine it.
                let uid = spank.job_uid()?;
                let mut none = AllocRequest::new(job.clone(), uid, 0);
                none.devices = Some(Vec::new());
                match client.alloc(&none) {
                    Ok(a) => a,
                    Err(e) => {
                        self.outcome = Some(refuse(e.to_string()));
                        return Ok(());
                    }
                }
            }
            Err(e) if e.code() == Some(ErrorCode::UnknownJob) => {
                // cderd's message says why, where its `alloc` was refused.
                let why = e.to_string();
                let why = why.split_once(cder_protocol::REFUSED_TO_RECORD).map_or_else(|| "the job prolog records them; see slurmd's log".to_string(), |(_, reason)| format!("it refused the job prolog's record: {reason}"));
                self.outcome = Some(refuse(format!("cderd holds no record of the devices SLURM gave {job} ({why})")));
                return Ok(());
            }
            Err(e) => {
                self.outcome = Some(refuse(e.to_string()));
                return Ok(());
            }
        };
        for (ty, &count) in &req.counts {
            let held = alloc.devices.iter().filter(|d| &d.cder_type == ty).count() as u32;
            if count > held {
                let given = match req.sources.get(ty) {
                    Some(Source::Option(o)) if *o == OPT_CDER => {
                        format!("--{OPT_CDER}={}", self.options.cder.as_ref().map(|c| c.value.as_str()).unwrap_or_default())
                    }
                    Some(other) => format!("{other}={count}"),
                    None => format!("--{OPT_CDER}={ty}:{count}"),
                };
                let message = format!(
                    "cder: {given}: SLURM gave {job} {held} {ty} device(s) on this node, and a step may use only its job's devices (ask when submitting: sbatch/salloc --gpgpu-per-node={count}); the step is not started"
                );
                log(Level::Error, &format!("spank_cder: {message}"));
                self.outcome = Some(Outcome::Fail(message));
                return Ok(());
            }
        }
        // A step naming GRES types (MIG profiles) may use only its job's
        // devices of each type; gres.conf says which type each file is.
        if let Some(by_type) = req.gres_types.get(GPGPU) {
            let gres = match gres_list() {
                Ok(g) => g,
                Err(e) => {
                    self.outcome = Some(refuse(e));
                    return Ok(());
                }
            };
            let type_of = |d: &AllocatedDevice| {
                let path = d.path.as_deref().map(std::path::Path::new)?;
                gres.iter().find(|g| g.files.iter().any(|f| f == path)).and_then(|g| g.gres_type.as_deref())
            };
            for (gres_type, &n) in by_type {
                let held = alloc.devices.iter().filter(|d| d.cder_type == GPGPU && type_of(d) == Some(gres_type.as_str())).count() as u32;
                if n > held && !gres.is_empty() {
                    let value = self.options.cder.as_ref().map(|c| c.value.as_str()).unwrap_or_default();
                    let message = format!(
                        "cder: --{OPT_CDER}={value}: SLURM gave {job} {held} {GPGPU} device(s) of GRES type {gres_type} on this node, and a step may use only its job's devices (ask when submitting: sbatch/salloc --{OPT_CDER}={GPGPU}:{gres_type}:{n}); the step is not started"
                    );
                    log(Level::Error, &format!("spank_cder: {message}"));
                    self.outcome = Some(Outcome::Fail(message));
                    return Ok(());
                }
            }
        }
        if let Some(min) = req.gpgpu_min_memory_mb {
            let status = match client.status() {
                Ok(s) => s,
                Err(e) => {
                    self.outcome = Some(refuse(e.to_string()));
                    return Ok(());
                }
            };
            let small: Vec<String> = alloc
                .devices
                .iter()
                .filter(|d| d.cder_type == GPGPU)
                .filter_map(|d| status.devices.iter().find(|s| s.cder_type == d.cder_type && s.index == d.index))
                .filter(|s| s.memory_mb < min)
                .map(|s| format!("{} {}: {} MB", s.cder_type, s.index, s.memory_mb))
                .collect();
            if !small.is_empty() {
                self.outcome = Some(refuse(format!(
                    "--{OPT_GPGPU_MIN_MEMORY}={min}: the device(s) SLURM gave {job} have less memory ({}); give the site's GRES types for memory classes",
                    small.join(", ")
                )));
                return Ok(());
            }
        }
        let step_list = match step_gpus.as_deref().and_then(parse_index_list) {
            None => None,
            Some(slurm) => match gres_list().and_then(|gres| to_cderd(&gres, &slurm, Some(&alloc.devices), &mut client)) {
                Ok(cderd) => Some(cderd),
                Err(e) => {
                    self.outcome = Some(refuse(format!("cannot tell which of cderd's devices are the step's GPU(s) [{}]: {e}", list(&slurm))));
                    return Ok(());
                }
            },
        };
        let step = step_devices(&alloc.devices, step_list.as_deref());
        self.plan = Some(Plan { job, alloc, step, slurm_cgroup });
        Ok(())
    }

    /// In the task, as root: where SLURM gives no device cgroup, ask cderd
    /// to put this process into the job's (children inherit it).
    fn confine(&mut self) {
        let args = self.args();
        let Some(plan) = &self.plan else { return };
        if plan.slurm_cgroup || args.confine == Confine::Off {
            return;
        }
        let job = plan.job.clone();
        // cderd set the groups up and named them in its answer to the
        // step's `env`: entering them here saves a round trip per task.
        // Anything amiss (an older cderd, a group gone) goes the long way.
        if let Some(groups) = plan.alloc.cgroups.as_deref().filter(|g| !g.is_empty()) {
            let pid = std::process::id();
            match enter_cgroups(groups, pid) {
                Ok(()) => {
                    // Debug: this runs in every task, just before its exec.
                    log(Level::Debug, &format!("spank_cder: {job}: task {pid} confined to its devices in {}", groups.join(" ")));
                    self.confined = true;
                    return;
                }
                Err(e) => log(Level::Verbose, &format!("spank_cder: {job}: task {pid}: {e}; asking cderd to confine it")),
            }
        }
        match self.connect().and_then(|mut c| c.confine(&job)) {
            Ok(c) => {
                log(Level::Verbose, &format!("spank_cder: {job}: task {} confined to its devices in {}", c.pid, c.cgroups.join(" ")));
                self.confined = true;
            }
            Err(e) => {
                log(Level::Error, &format!("spank_cder: {job}: confining a task to its devices: {e}"));
                let unavailable = e.code() == Some(ErrorCode::EnforcementUnavailable);
                let fatal = args.confine == Confine::Required || (!unavailable && args.fail == FailMode::Closed);
                if fatal {
                    let how = if args.confine == Confine::Required { "confine=required" } else { "fail=closed" };
                    self.outcome = Some(Outcome::Fail(format!("cder: confining {job} to its devices: {e} ({how}); the job is not started")));
                }
            }
        }
    }

    /// Releases the job's devices in cderd; `answered`: waits for cderd's
    /// answer. The job epilog does not: SLURM starts the node's next job
    /// only after the epilog ends, and the wait was the largest part of
    /// what cder added to the epilog (BENCHMARKS.md, issue 12).
    fn release(&self, spank: &Spank, when: &str, answered: bool) -> SpankResult {
        let job = job_key(spank)?;
        vgpgpu::Vgpgpu::release(&self.args(), &job, when);
        let sent = self.connect().and_then(|mut c| if answered { c.release(&job).map(|r| Some(r.released)) } else { c.release_unanswered(&job).map(|()| None) });
        match sent {
            Ok(Some(n)) => log(Level::Verbose, &format!("spank_cder: {job}: {when}: released {n} device(s)")),
            // cderd logs the release; SLURM waits for the epilog.
            Ok(None) => log(Level::Debug, &format!("spank_cder: {job}: {when}: release sent to cderd")),
            // Never fail an epilog over this: SLURM would drain the node.
            // cderd's reconcile releases jobs SLURM no longer runs.
            Err(e) => log(Level::Error, &format!("spank_cder: {job}: {when}: release failed: {e}")),
        }
        Ok(())
    }
}

impl Plugin for CderSpank {
    fn options() -> Vec<SpankOption> {
        let mut all = vec![
            SpankOption {
                name: OPT_GPGPU_PER_NODE,
                arginfo: Some("N"),
                usage: "Exclusive GPGPUs per node (cder; the JDL key GPGPUPerNode)",
            },
            SpankOption {
                name: OPT_CDER,
                arginfo: Some("TYPE[:GRESTYPE]:N"),
                usage: "Exclusive CDER devices per node, e.g. gpgpu:2, fpga:1, or a GRES type such as a MIG profile: gpgpu:1g.10gb:2 (cder)",
            },
            SpankOption { name: OPT_GPGPU_MIN_MEMORY, arginfo: Some("MB"), usage: "Only GPGPUs with at least MB megabytes of memory (cder)" },
        ];
        all.extend(vgpgpu::options());
        all
    }

    fn option(&mut self, name: &str, value: Option<&str>, _remote: bool) -> SpankResult {
        if self.vgpgpu.option(name, value) {
            return Ok(());
        }
        let value = value.unwrap_or("").to_string();
        let slot = match name {
            OPT_GPGPU_PER_NODE => (&mut self.options.gpgpu_per_node, OPT_GPGPU_PER_NODE),
            OPT_CDER => (&mut self.options.cder, OPT_CDER),
            OPT_GPGPU_MIN_MEMORY => (&mut self.options.gpgpu_min_memory, OPT_GPGPU_MIN_MEMORY),
            other => return Err(SpankError::new(format!("unknown option --{other}"))),
        };
        *slot.0 = Some(Sourced { value, source: Source::Option(slot.1) });
        Ok(())
    }

    fn init(&mut self, _spank: &Spank, args: &[String]) -> SpankResult {
        self.load_args(args)
    }

    fn init_post_opt(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        self.load_args(args)?;
        match spank.context() {
            Context::Local | Context::Allocator => {
                // The controller reads these as CDER_* in spank_job_env.
                let pairs = [
                    (CONTROL_GPGPU_PER_NODE, &self.options.gpgpu_per_node),
                    (CONTROL_CDER, &self.options.cder),
                    (CONTROL_GPGPU_MIN_MEMORY, &self.options.gpgpu_min_memory),
                ];
                for (name, value) in pairs {
                    if let Some(v) = value {
                        spank.job_control_setenv(name, &v.value)?;
                    }
                }
                self.vgpgpu.export(spank)
            }
            Context::Remote => {
                self.plan_step(spank)?;
                let args = self.args();
                self.vgpgpu.allocate(spank, &args, &job_key(spank)?);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn job_prolog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        if let Err(e) = self.load_args(args) {
            // Failing a prolog drains the node; the steps refuse instead.
            log(Level::Error, &format!("spank_cder: job prolog: {e}"));
            return Ok(());
        }
        self.record(spank);
        Ok(())
    }

    fn task_init_privileged(&mut self, _spank: &Spank, _args: &[String]) -> SpankResult {
        if self.outcome.is_none() {
            self.confine();
        }
        Ok(())
    }

    fn task_init(&mut self, spank: &Spank, _args: &[String]) -> SpankResult {
        self.vgpgpu.task_init(spank)?;
        if self.outcome.is_some() {
            return apply(self.outcome.as_ref(), spank);
        }
        if let Some(plan) = &self.plan {
            let enforcement = if plan.slurm_cgroup {
                Enforcement::SlurmCgroup
            } else if self.confined {
                Enforcement::CderCgroup
            } else {
                Enforcement::None
            };
            set_all(&step_env(&plan.alloc, &plan.step, enforcement), spank)?;
        }
        Ok(())
    }

    fn exit(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        self.load_args(args)?;
        // The batch step ending is the job ending on this node; other steps
        // end while the job may still run more.
        if spank.context() == Context::Remote && spank.step_id().ok() == Some(cder_slurm::ffi::SLURM_BATCH_SCRIPT) {
            self.release(spank, "batch step ended", true)?;
        }
        Ok(())
    }

    fn job_epilog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        if let Err(e) = self.load_args(args) {
            // Failing an epilog drains the node; say why and carry on.
            log(Level::Error, &format!("spank_cder: job epilog: {e}"));
            return Ok(());
        }
        self.release(spank, "job epilog", false)
    }
}

cder_slurm::spank_plugin!("cder", CderSpank);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_env_hides_every_known_vendor() {
        let env = empty_env();
        for var in ["CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"] {
            assert_eq!(env.get(var), Some(""), "{var}");
        }
    }

    #[test]
    fn options_are_recorded_with_their_source() {
        let mut p = CderSpank::default();
        p.option(OPT_GPGPU_PER_NODE, Some("2"), true).unwrap();
        assert_eq!(p.options.parse().unwrap().counts[GPGPU], 2);
        assert!(p.option("nope", Some("1"), false).is_err());
    }
}
