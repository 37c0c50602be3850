//! `spank_cder.so`: the node side of cder for SLURM.
//!
//! ```text
//! # plugstack.conf
//! required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_cder.so socket=/run/cder/cderd.sock fail=closed mode=managed
//! ```
//!
//! * srun/sbatch/salloc get `--gpgpu-per-node=N`, `--cder=TYPE:N` and
//!   `--gpgpu-min-memory=MB`; on the submit host the values are copied into
//!   the job-control environment, where `job_submit_cder.so` sees them.
//! * In slurmstepd (remote context), as root, the plugin asks the node's
//!   cderd for the job's devices (job key `slurm:<jobid>`; idempotent, so
//!   every step of a job sees the same devices) and, just before each task
//!   execs, sets the visibility variables cderd returned. A job that asked
//!   for nothing gets the empty visible list, never "all".
//! * The devices are released when the batch step ends (`slurm_spank_exit`)
//!   and, in any case, by the job epilog (`slurm_spank_job_epilog`), which
//!   also covers `scancel` and srun-only jobs.
//! * `fail=closed` (default) fails the job with a readable message when
//!   cderd is unreachable or has too few free devices; `fail=open` runs it
//!   with an empty visible list. `mode=observe` records the devices SLURM's
//!   GRES chose and changes nothing in the job.

use std::collections::BTreeMap;
use std::io::Write;

use cder_model::{JobEnvironment, JobKey, Lrms, VendorKind};
use cder_protocol::{AllocRequest, Client, ClientError, ErrorCode};
use cder_slurm::args::{FailMode, Mode, PluginArgs};
use cder_slurm::request::{
    RawRequest, Request, Source, Sourced, CONTROL_CDER, CONTROL_GPGPU_MIN_MEMORY, CONTROL_GPGPU_PER_NODE, GPGPU,
    JDL_GPGPU_PER_NODE, OPT_CDER, OPT_GPGPU_MIN_MEMORY, OPT_GPGPU_PER_NODE,
};
use cder_slurm::spank::{Context, Plugin, Spank, SpankError, SpankOption, SpankResult};
use cder_slurm::sys::{log, Level};

mod vgpgpu;

/// What the tasks of this step get, decided as root in `init_post_opt`.
#[derive(Debug)]
enum Outcome {
    /// Set these variables.
    Env(JobEnvironment),
    /// Leave the environment alone (`mode=observe`).
    Untouched,
    /// Refuse to start the task, with this message on its stderr.
    Fail(String),
}

#[derive(Default)]
struct CderSpank {
    options: RawRequest,
    args: Option<PluginArgs>,
    outcome: Option<Outcome>,
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

/// In the task: set the variables of `outcome`, or refuse with its reason.
fn apply(outcome: Option<&Outcome>, spank: &Spank) -> SpankResult {
    match outcome {
        Some(Outcome::Env(env)) => {
            for (k, v) in &env.0 {
                spank.setenv(k, v)?;
            }
            Ok(())
        }
        Some(Outcome::Fail(message)) => {
            // This runs in the task, whose stderr is the job's: the user
            // reads why the job did not start in its own output.
            let _ = writeln!(std::io::stderr(), "{message}");
            Err(SpankError::new(message.clone()))
        }
        Some(Outcome::Untouched) | None => Ok(()),
    }
}

impl CderSpank {
    fn args(&self) -> PluginArgs {
        self.args.clone().unwrap_or_default()
    }

    /// Parses the plugstack.conf words once. Every callback gets them, and
    /// not every context calls `slurm_spank_init` (the job epilog does not).
    fn load_args(&mut self, words: &[String]) -> SpankResult {
        if self.args.is_none() {
            self.args = Some(PluginArgs::parse(words).map_err(|e| SpankError::new(e.to_string()))?);
        }
        Ok(())
    }

    fn connect(&self) -> Result<Client, ClientError> {
        let a = self.args();
        Client::connect(&a.socket, a.timeout)
    }

    /// The request of this step: its options, else the JDL key a CE put in
    /// the job's environment.
    fn request(&self, spank: &Spank) -> Result<Request, String> {
        let jdl = RawRequest {
            gpgpu_per_node: spank
                .getenv(JDL_GPGPU_PER_NODE)
                .map(|value| Sourced { value, source: Source::JdlKey(JDL_GPGPU_PER_NODE) }),
            ..RawRequest::default()
        };
        self.options.clone().or(jdl).parse().map_err(|e| e.to_string())
    }

    /// Managed mode: ask cderd, decide what the tasks see.
    fn allocate(&self, spank: &Spank) -> Result<Outcome, SpankError> {
        let args = self.args();
        let job = job_key(spank)?;
        let uid = spank.job_uid()?;
        let req = match self.request(spank) {
            Ok(r) => r,
            Err(message) => return Ok(Outcome::Fail(message)),
        };
        let refuse = |why: String| -> Outcome {
            log(Level::Error, &format!("spank_cder: {job}: {why}"));
            match args.fail {
                FailMode::Closed => Outcome::Fail(format!("cder: {why} (fail=closed); the job is not started")),
                FailMode::Open => Outcome::Env(empty_env()),
            }
        };
        let mut client = match self.connect() {
            Ok(c) => c,
            Err(e) if req.is_empty() => {
                // It asked for nothing: the empty list is exactly right.
                log(Level::Verbose, &format!("spank_cder: {job}: {e}; no devices asked, empty visible list"));
                return Ok(Outcome::Env(empty_env()));
            }
            Err(e) => return Ok(refuse(e.to_string())),
        };
        if req.is_empty() {
            // A step of a job that holds devices sees them; a job that asked
            // for nothing is recorded with count 0, which gives the empty
            // list for every type this node has.
            return Ok(match client.env(&job) {
                Ok(a) => Outcome::Env(a.env),
                Err(e) if e.code() == Some(ErrorCode::UnknownJob) => {
                    match client.alloc(&AllocRequest::new(job.clone(), uid, 0)) {
                        Ok(a) => Outcome::Env(a.env),
                        Err(e) => {
                            log(Level::Error, &format!("spank_cder: {job}: {e}"));
                            Outcome::Env(empty_env())
                        }
                    }
                }
                Err(e) => {
                    log(Level::Error, &format!("spank_cder: {job}: {e}"));
                    Outcome::Env(empty_env())
                }
            });
        }
        let mut env = BTreeMap::new();
        for (ty, &count) in &req.counts {
            let mut alloc = AllocRequest::new(job.clone(), uid, count);
            alloc.cder_type = ty.clone();
            if ty == GPGPU {
                alloc.min_memory_mb = req.gpgpu_min_memory_mb;
            }
            let got = match client.alloc(&alloc) {
                Ok(a) => a,
                // Another step of this job asked with another count: the
                // job's devices are what it already holds.
                Err(e) if e.code() == Some(ErrorCode::Conflict) => match client.env(&job) {
                    Ok(a) => a,
                    Err(e) => return Ok(refuse(e.to_string())),
                },
                Err(e) => return Ok(refuse(format!("{count} {ty} device(s) for {job}: {e}"))),
            };
            log(
                Level::Info,
                &format!(
                    "spank_cder: {job}: uid {uid} holds {} {ty} device(s): {}",
                    got.devices.len(),
                    got.devices.iter().map(|d| d.index.to_string()).collect::<Vec<_>>().join(",")
                ),
            );
            // Lists of one type must not be blanked by another type's empty twins.
            for (k, v) in got.env.0 {
                let keep = env.get(&k).is_some_and(|old: &String| !old.is_empty()) && v.is_empty();
                if !keep {
                    env.insert(k, v);
                }
            }
        }
        Ok(Outcome::Env(JobEnvironment(env)))
    }

    /// Observe mode: record the devices SLURM's GRES gave the job.
    fn observe(&self, spank: &Spank) -> Result<Outcome, SpankError> {
        let job = job_key(spank)?;
        let uid = spank.job_uid()?;
        let list = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"].iter().find_map(|v| spank.getenv(v));
        let devices: Vec<u32> = list.iter().flat_map(|l| l.split(',')).filter_map(|s| s.trim().parse().ok()).collect();
        let mut alloc = AllocRequest::new(job.clone(), uid, devices.len() as u32);
        alloc.devices = Some(devices);
        match self.connect().and_then(|mut c| c.alloc(&alloc)) {
            Ok(a) => log(Level::Verbose, &format!("spank_cder: {job}: recorded {} device(s) chosen by SLURM", a.devices.len())),
            Err(e) => log(Level::Error, &format!("spank_cder: {job}: recording SLURM's devices: {e}")),
        }
        Ok(Outcome::Untouched)
    }

    fn release(&self, spank: &Spank, when: &str) -> SpankResult {
        let job = job_key(spank)?;
        vgpgpu::Vgpgpu::release(&self.args(), &job, when);
        match self.connect().and_then(|mut c| c.release(&job)) {
            Ok(r) => log(Level::Verbose, &format!("spank_cder: {job}: {when}: released {} device(s)", r.released)),
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
            SpankOption { name: OPT_CDER, arginfo: Some("TYPE:N"), usage: "Exclusive CDER devices per node, e.g. gpgpu:2 or fpga:1 (cder)" },
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
                let outcome = match self.args().mode {
                    Mode::Managed => self.allocate(spank)?,
                    Mode::Observe => self.observe(spank)?,
                };
                self.outcome = Some(outcome);
                let args = self.args();
                self.vgpgpu.allocate(spank, &args, &job_key(spank)?);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn task_init(&mut self, spank: &Spank, _args: &[String]) -> SpankResult {
        self.vgpgpu.task_init(spank)?;
        apply(self.outcome.as_ref(), spank)
    }

    fn exit(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        self.load_args(args)?;
        // The batch step ending is the job ending on this node; other steps
        // end while the job may still run more.
        if spank.context() == Context::Remote && spank.step_id().ok() == Some(cder_slurm::ffi::SLURM_BATCH_SCRIPT) {
            self.release(spank, "batch step ended")?;
        }
        Ok(())
    }

    fn job_epilog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        if let Err(e) = self.load_args(args) {
            // Failing an epilog drains the node; say why and carry on.
            log(Level::Error, &format!("spank_cder: job epilog: {e}"));
            return Ok(());
        }
        self.release(spank, "job epilog")
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
