//! `job_submit_cder.so`: Independence on the controller.
//!
//! Loaded by slurmctld (`JobSubmitPlugins=cder`, with the plugin's folder in
//! `PluginDir`). A cder request, whether it came as SPANK options
//! (`CDER_*` in the job-control environment) or as the JDL key
//! `GPGPUPerNode` a CE put into the job's environment, becomes
//! `tres_per_node` GRES (`gres:gpu:N`), so the scheduler never places more
//! jobs on a node than it has devices. Malformed requests, counts no node
//! can hold and unknown types are refused at submit time; the user sees
//! the reason. A job that asks for whole GPUs in any form is kept off the
//! nodes that offer theirs as shares, at submit and on every update.

#![deny(missing_docs)]

use cder_slurm::job_submit::{
    check_tasks_per_gpu, check_tres_update, exclude_shared_nodes, node_gres, translate, GresAsked, Submission,
};
use cder_slurm::sys::{self, JobDesc, JobRecord, Level};

/// vGPGPU jobs take `vgpgpu` licences, N per node, so SLURM holds them
/// until that many backends are free (`cder_slurm::vgpgpu`).
fn vgpgpu(job: &mut JobDesc<'_>, submit_uid: u32) -> Result<(), String> {
    use cder_slurm::vgpgpu::{licence_total, licenses_with, RawVgpgpu};
    let raw = RawVgpgpu::from_control_env(&job.spank_job_env()).or(RawVgpgpu::from_jdl_env(&job.environment()));
    if let Some(req) = raw.parse()? {
        let total = licence_total(req.per_node, job.min_nodes())?;
        let licenses = licenses_with(job.licenses().as_deref(), u64::from(total));
        sys::log(
            Level::Verbose,
            &format!(
                "job_submit/cder: uid {submit_uid}: {} {} vGPGPU(s) per node -> licenses {licenses:?}",
                req.per_node, req.method
            ),
        );
        job.set_licenses(&licenses);
    }
    Ok(())
}

/// A submission: the cder request translated, then the job's GPU GRES per
/// node stamped for its prolog (`cder_slurm::node_gres`), whatever the
/// submitter put there removed first.
fn submit(job: &mut JobDesc<'_>, submit_uid: u32) -> Result<(), String> {
    translate_request(job, submit_uid)?;
    keep_whole_gpus_off_shared(job, None, submit_uid)?;
    stamp_node_gres(job);
    Ok(())
}

/// A job description's GRES, in every form SLURM takes them.
fn gres_asked(job: &JobDesc<'_>) -> GresAsked {
    GresAsked {
        tres_per_node: job.tres_per_node(),
        tres_per_job: job.tres_per_job(),
        tres_per_task: job.tres_per_task(),
        tres_per_socket: job.tres_per_socket(),
        ntasks_per_gpu: job.ntasks_per_tres(),
    }
}

/// Keeps a job that asks for whole GPUs, in any form (`--gres=gpu`,
/// `--gpus`, `--gpus-per-task`, `--gpus-per-socket`, `--ntasks-per-gpu`),
/// off the nodes that share theirs, through its `exc_nodes`. On an update
/// (`record`: the job as the controller holds it), what the update leaves
/// decides: an `ExcNodeList` that the owner clears or shortens gets the
/// sharing nodes back, and a new GPU count keeps the job's own exclusions.
fn keep_whole_gpus_off_shared(
    job: &mut JobDesc<'_>,
    record: Option<&JobRecord<'_>>,
    submit_uid: u32,
) -> Result<(), String> {
    let asked = gres_asked(job);
    let exc_nodes = job.exc_nodes();
    // Cheap first: most submissions ask for no GPU, most updates touch neither.
    let relevant = match record {
        None => asked.whole_gpus(),
        Some(_) => exc_nodes.is_some() || asked.any(),
    };
    if !relevant {
        return Ok(());
    }
    // Read per job: slurm.conf is small, and a reconfigure that changes
    // the nodes' GRES is then honoured at once.
    let nodes = node_gres(sys::slurm_conf_path().as_deref())?;
    if nodes.shard_nodes.is_empty() {
        return Ok(());
    }
    let (asked, exc_nodes) = match record {
        None => {
            check_tasks_per_gpu(&asked, &nodes)?;
            (asked, exc_nodes)
        }
        Some(record) => {
            let mut recorded = record.describe().map_err(|e| {
                format!("cder: cannot read the job's record to keep its whole GPUs off the nodes that share theirs ({e}); ask an operator")
            })?;
            let recorded = recorded.desc();
            (gres_asked(&recorded).updated_by(&asked), exc_nodes.or_else(|| recorded.exc_nodes()))
        }
    };
    if let Some(exc) = exclude_shared_nodes(&asked, exc_nodes.as_deref(), &nodes) {
        sys::log(
            Level::Verbose,
            &format!("job_submit/cder: uid {submit_uid}: whole GPUs, kept off the nodes that share theirs: exc_nodes {exc:?}"),
        );
        job.set_exc_nodes(&exc);
    }
    Ok(())
}

/// Writes what the prolog may read instead of asking slurmctld: only the
/// controller's word reaches it (slurmctld copies the job-control
/// environment when the job is made, and never on update).
fn stamp_node_gres(job: &mut JobDesc<'_>) {
    use cder_slurm::node_gres::{stamp, without_stamp, NODE_GRES};
    let env = job.spank_job_env();
    let mut kept = without_stamp(&env);
    let value = stamp(
        job.tres_per_node().as_deref(),
        job.tres_per_job().as_deref(),
        job.tres_per_task().as_deref(),
        job.tres_per_socket().as_deref(),
    );
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        kept.push(format!("{NODE_GRES}={value}"));
    }
    if kept != env {
        job.set_spank_job_env(&kept);
    }
}

fn translate_request(job: &mut JobDesc<'_>, submit_uid: u32) -> Result<(), String> {
    vgpgpu(job, submit_uid)?;
    let sub = Submission {
        environment: job.environment(),
        spank_job_env: job.spank_job_env(),
        tres_per_node: job.tres_per_node(),
    };
    let cheap_check = cder_slurm::request::RawRequest::from_control_env(&sub.spank_job_env)
        .or(cder_slurm::request::RawRequest::from_jdl_env(&sub.environment));
    if cheap_check.is_empty() {
        return Ok(());
    }
    // Read per submission: slurm.conf is small, and a reconfigure that
    // changes the nodes' GRES is then honoured at once.
    let nodes = node_gres(sys::slurm_conf_path().as_deref())?;
    if let Some(tres) = translate(&sub, &nodes)? {
        sys::log(
            Level::Verbose,
            &format!(
                "job_submit/cder: uid {submit_uid}: tres_per_node {:?} -> {tres:?}",
                sub.tres_per_node.as_deref().unwrap_or("")
            ),
        );
        job.set_tres_per_node(&tres);
    }
    Ok(())
}

/// An update (`scontrol update job`) carries only what changes: a device
/// count in `TresPerNode` is the owner's to set only at submit time (the
/// node honours the controller's grant, which must stay the validated
/// one), a new cder request in it is checked and translated as at
/// submit time, and a job left asking for whole GPUs stays off the nodes
/// that share theirs, whatever `ExcNodeList` the update sets.
fn modify(job: &mut JobDesc<'_>, record: &JobRecord<'_>, submit_uid: u32) -> Result<(), String> {
    if let Some(update) = job.tres_per_node() {
        let nodes = node_gres(sys::slurm_conf_path().as_deref())?;
        let operator = submit_uid == 0 || submit_uid == sys::slurm_user_id();
        check_tres_update(Some(&update), operator, &nodes)?;
    }
    cder_slurm::node_gres::check_stamped_update(
        job.tres_per_node().as_deref(),
        job.tres_per_job().as_deref(),
        job.tres_per_task().as_deref(),
        job.tres_per_socket().as_deref(),
    )?;
    translate_request(job, submit_uid)?;
    keep_whole_gpus_off_shared(job, Some(record), submit_uid)
}

cder_slurm::job_submit_plugin!("cder", submit, modify);
