//! `spank_cder.so`: the node side of cder for SLURM, a thin adapter over
//! [`cder_slurm::node`]: it reads SPANK items, calls the node functions and
//! applies their outcome.
//!
//! ```text
//! # plugstack.conf
//! required /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_cder.so socket=/run/cder/cderd.sock fail=closed confine=optional
//! ```
//!
//! On the submit host the options go into the job-control environment for
//! `job_submit_cder.so`; the job prolog records SLURM's GPUs in cderd; each
//! step is planned in slurmstepd and each task confined and given its
//! variables; the batch step's end and the job epilog release.

#![deny(missing_docs)]

use std::io::Write;

use cder_model::{JobEnvironment, JobKey, Lrms};
use cder_request::keys::{
    GPGPU_PER_NODE, GPGPU_SHARES_PER_NODE, VIRTUAL_GPGPU_METHOD, VIRTUAL_GPGPU_PER_NODE, VIRTUAL_GPGPU_TYPE,
};
use cder_slurm::args::{Confine, FailMode, PluginArgs};
use cder_slurm::devices::{SLURM_JOB_GPUS, SLURM_STEP_GPUS};
use cder_slurm::node::vgpgpu::{self, VgpgpuStep};
use cder_slurm::node::{self, Plan, Prolog, Slurmd, Step, TaskOutcome};
use cder_slurm::request::{
    RawRequest, Source, Sourced, CONTROL_CDER, CONTROL_GPGPU_MIN_MEMORY, CONTROL_GPGPU_PER_NODE,
    CONTROL_GPGPU_SHARES_PER_NODE, OPT_CDER, OPT_GPGPU_MIN_MEMORY, OPT_GPGPU_PER_NODE, OPT_GPGPU_SHARES_PER_NODE,
};
use cder_slurm::spank::{Context, Plugin, Spank, SpankError, SpankOption, SpankResult};
use cder_slurm::sys::{log, Level};
use cder_slurm::vgpgpu::{
    RawVgpgpu, CONTROL_VGPGPU_METHOD, CONTROL_VGPGPU_PER_NODE, OPT_VGPGPU_METHOD, OPT_VGPGPU_PER_NODE,
};

#[derive(Default)]
struct CderSpank {
    options: RawRequest,
    vgpgpu_options: RawVgpgpu,
    args: Option<PluginArgs>,
    node: Slurmd,
    /// Set when the step's tasks do not get their plan's variables.
    outcome: Option<TaskOutcome>,
    /// The vGPGPU backends' variables, or why the step cannot start.
    vgpgpu: Option<TaskOutcome>,
    plan: Option<Plan>,
    /// The variables this task gets, settled as root.
    task_env: Option<JobEnvironment>,
}

fn job_key(spank: &Spank) -> Result<JobKey, SpankError> {
    let id = spank.job_id()?;
    JobKey::new(Lrms::Slurm, &id.to_string()).map_err(|e| SpankError::new(e.to_string()))
}

fn set_all(env: &JobEnvironment, spank: &Spank) -> SpankResult {
    env.0.iter().try_for_each(|(k, v)| spank.setenv(k, v))
}

/// In the task: set the variables of `outcome`, or refuse with its reason.
fn apply(outcome: Option<&TaskOutcome>, spank: &Spank) -> SpankResult {
    match outcome {
        Some(TaskOutcome::Env(env)) => set_all(env, spank),
        Some(TaskOutcome::Fail(message)) => {
            // The task's stderr is the job's: the user reads why there.
            let _ = writeln!(std::io::stderr(), "{message}");
            Err(SpankError::new(message.clone()))
        }
        None => Ok(()),
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
            let args = PluginArgs::parse(words).map_err(|e| SpankError::new(e.to_string()))?;
            if let Some(mode) = &args.legacy_mode {
                log(
                    Level::Verbose,
                    &format!(
                        "spank_cder: mode={mode} has no effect: SLURM's GRES chooses the devices, cderd records them"
                    ),
                );
            }
            self.args = Some(args);
        }
        Ok(())
    }

    /// Remote context, as root: the step's plan and its vGPGPU backends.
    fn plan_step(&mut self, spank: &Spank) -> SpankResult {
        let args = self.args();
        let job = job_key(spank)?;
        let jdl = RawRequest {
            gpgpu_per_node: spank
                .getenv(GPGPU_PER_NODE)
                .map(|value| Sourced { value, source: Source::JdlKey(GPGPU_PER_NODE) }),
            gpgpu_shares_per_node: spank
                .getenv(GPGPU_SHARES_PER_NODE)
                .map(|value| Sourced { value, source: Source::JdlKey(GPGPU_SHARES_PER_NODE) }),
            ..RawRequest::default()
        };
        let step = Step {
            job: job.clone(),
            uid: spank.job_uid().ok(),
            request: self.options.clone().or(jdl).parse().map_err(|e| e.to_string()),
            cder_option: self.options.cder.as_ref().map(|c| c.value.clone()),
            gpus: spank.getenv(SLURM_STEP_GPUS).or_else(|| spank.getenv(SLURM_JOB_GPUS)),
        };
        match node::plan_step(&step, &args, &self.node) {
            Ok(plan) => self.plan = Some(plan),
            Err(refusal) => self.outcome = Some(refusal.outcome(&job, args.fail, &self.node)),
        }
        let jdl = RawVgpgpu {
            per_node: spank.getenv(VIRTUAL_GPGPU_PER_NODE),
            method: spank.getenv(VIRTUAL_GPGPU_METHOD).or_else(|| spank.getenv(VIRTUAL_GPGPU_TYPE)),
            origin: VIRTUAL_GPGPU_PER_NODE,
        };
        let from_option = self.vgpgpu_options.per_node.is_some();
        let raw = self.vgpgpu_options.clone().or(jdl);
        let step = VgpgpuStep { job, job_id: spank.job_id().ok(), uid: spank.job_uid().ok(), raw, from_option };
        self.vgpgpu = vgpgpu::allocate(&step, &args, &self.node);
        Ok(())
    }
}

impl Plugin for CderSpank {
    fn options() -> Vec<SpankOption> {
        node::options()
    }

    fn option(&mut self, name: &str, value: Option<&str>, _remote: bool) -> SpankResult {
        let value = value.unwrap_or("").to_string();
        let slot = match name {
            OPT_VGPGPU_PER_NODE | OPT_VGPGPU_METHOD => {
                let slot = if name == OPT_VGPGPU_PER_NODE {
                    &mut self.vgpgpu_options.per_node
                } else {
                    &mut self.vgpgpu_options.method
                };
                *slot = Some(value);
                self.vgpgpu_options.origin = "--vgpgpu-per-node";
                return Ok(());
            }
            OPT_GPGPU_PER_NODE => (&mut self.options.gpgpu_per_node, OPT_GPGPU_PER_NODE),
            OPT_CDER => (&mut self.options.cder, OPT_CDER),
            OPT_GPGPU_MIN_MEMORY => (&mut self.options.gpgpu_min_memory, OPT_GPGPU_MIN_MEMORY),
            OPT_GPGPU_SHARES_PER_NODE => (&mut self.options.gpgpu_shares_per_node, OPT_GPGPU_SHARES_PER_NODE),
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
                    (CONTROL_GPGPU_PER_NODE, self.options.gpgpu_per_node.as_ref().map(|v| &v.value)),
                    (CONTROL_CDER, self.options.cder.as_ref().map(|v| &v.value)),
                    (CONTROL_GPGPU_MIN_MEMORY, self.options.gpgpu_min_memory.as_ref().map(|v| &v.value)),
                    (CONTROL_GPGPU_SHARES_PER_NODE, self.options.gpgpu_shares_per_node.as_ref().map(|v| &v.value)),
                    (CONTROL_VGPGPU_PER_NODE, self.vgpgpu_options.per_node.as_ref()),
                    (CONTROL_VGPGPU_METHOD, self.vgpgpu_options.method.as_ref()),
                ];
                pairs
                    .into_iter()
                    .filter_map(|(name, v)| Some((name, v?)))
                    .try_for_each(|(name, v)| spank.job_control_setenv(name, v))
            }
            Context::Remote => self.plan_step(spank),
            _ => Ok(()),
        }
    }

    fn job_prolog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        // Failing a prolog drains the node; the steps refuse instead.
        let fail = |what: String| {
            log(Level::Error, &format!("spank_cder: {what}"));
            Ok(())
        };
        if let Err(e) = self.load_args(args) {
            return fail(format!("job prolog: {e}"));
        }
        // Said once per job in slurmd's log, where the admin who wrote
        // plugstack.conf reads; srun's users are not the ones to tell.
        if let Some(deprecated) = self.args().deprecated_confine {
            log(Level::Info, &format!("spank_cder: plugstack.conf: {deprecated}"));
        }
        let (job, job_id) = match job_key(spank).and_then(|job| Ok((job, spank.job_id()?))) {
            Ok(j) => j,
            Err(e) => return fail(format!("job prolog: {e}")),
        };
        let uid =
            std::env::var("SLURM_JOB_UID").ok().and_then(|u| u.parse::<u32>().ok()).or_else(|| spank.job_uid().ok());
        let Some(uid) = uid else { return fail(format!("{job}: job prolog: no SLURM_JOB_UID; nothing recorded")) };
        let prolog = Prolog {
            job: job.clone(),
            job_id,
            uid,
            job_gpus: std::env::var(SLURM_JOB_GPUS).ok(),
            node_gres: std::env::var(cder_slurm::node_gres::PROLOG_NODE_GRES).ok(),
        };
        match node::prolog_record(&prolog, &self.args(), &self.node) {
            Ok(record) => node::send_record(&record, &self.args(), &self.node),
            Err(e) => return fail(format!("{job}: job prolog: {e}")),
        }
        Ok(())
    }

    fn task_init_privileged(&mut self, _spank: &Spank, _args: &[String]) -> SpankResult {
        if let (None, Some(plan)) = (&self.outcome, &self.plan) {
            match node::confine_task(plan, &self.args(), std::process::id(), &self.node) {
                Ok(env) => self.task_env = Some(env),
                Err(message) => self.outcome = Some(TaskOutcome::Fail(message)),
            }
        }
        Ok(())
    }

    /// The extern step (`PrologFlags=contain`) runs no task, so no
    /// `task_init_privileged`: its one process, forked by now, is confined
    /// here, so that what is adopted into the extern step later is fenced
    /// as the job's tasks are.
    fn task_post_fork(&mut self, spank: &Spank, _args: &[String]) -> SpankResult {
        let extern_step = Some(cder_slurm::ffi::SLURM_EXTERN_CONT);
        if spank.context() != Context::Remote || spank.step_id().ok() != extern_step {
            return Ok(());
        }
        let args = self.args();
        let pids = node::own_children();
        let confined = match (&self.outcome, &self.plan) {
            (None, Some(plan)) => node::confine_extern(plan, &pids, &self.node),
            (Some(TaskOutcome::Fail(message)), _) => Err(message.clone()),
            _ => Ok(()),
        };
        let Err(message) = confined else { return Ok(()) };
        log(Level::Error, &format!("spank_cder: extern step: {message}"));
        let closed = args.confine == Confine::Required || args.fail == FailMode::Closed;
        if closed {
            // No extern step, no adoption: pam_slurm_adopt refuses the login.
            node::end_extern(&pids);
        }
        Err(SpankError::new(message))
    }

    fn task_init(&mut self, spank: &Spank, _args: &[String]) -> SpankResult {
        apply(self.vgpgpu.as_ref(), spank)?;
        if self.outcome.is_some() {
            return apply(self.outcome.as_ref(), spank);
        }
        match (&self.task_env, &self.plan) {
            (Some(env), _) => set_all(env, spank),
            (None, Some(plan)) => set_all(&plan.env, spank),
            (None, None) => Ok(()),
        }
    }

    fn exit(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        self.load_args(args)?;
        // The batch step ending is the job ending on this node; other steps
        // end while the job may still run more.
        if spank.context() == Context::Remote && spank.step_id().ok() == Some(cder_slurm::ffi::SLURM_BATCH_SCRIPT) {
            node::release(&self.args(), &job_key(spank)?, "batch step ended", true, &self.node);
        }
        Ok(())
    }

    fn job_epilog(&mut self, spank: &Spank, args: &[String]) -> SpankResult {
        if let Err(e) = self.load_args(args) {
            // Failing an epilog drains the node; say why and carry on.
            log(Level::Error, &format!("spank_cder: job epilog: {e}"));
            return Ok(());
        }
        node::release(&self.args(), &job_key(spank)?, "job epilog", false, &self.node);
        Ok(())
    }
}

cder_slurm::spank_plugin!("cder", CderSpank);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_recorded_with_their_source() {
        let mut p = CderSpank::default();
        p.option(OPT_GPGPU_PER_NODE, Some("2"), true).unwrap();
        assert_eq!(p.options.parse().unwrap().counts[cder_slurm::request::GPGPU], 2);
        assert!(p.option("nope", Some("1"), false).is_err());
    }

    #[test]
    fn vgpgpu_options_are_kept_apart() {
        let mut p = CderSpank::default();
        p.option(OPT_VGPGPU_PER_NODE, Some("3"), true).unwrap();
        p.option(OPT_VGPGPU_METHOD, Some("VCL"), true).unwrap();
        let req = p.vgpgpu_options.parse().unwrap().unwrap();
        assert_eq!((req.per_node, req.method), (3, cder_model::VgpgpuMethod::Vcl));
        assert!(p.options.is_empty());
        // --gpgpu-per-node, --gpgpu-shares-per-node, --gpgpu-min-memory, --cder, and the two vGPGPU options.
        assert_eq!(CderSpank::options().len(), 6);
    }
}
