//! The other ways a user asks SLURM for GPUs, on a real slurmctld and
//! slurmd with a real cderd (fake GPUs as distinct character devices):
//! `--gpus` (a per-job count, `tres_per_job`) and job arrays, whose tasks
//! are jobs of their own. Submitted by the unprivileged `nobody`. What is
//! asserted is what each job can open, its `CUDA_VISIBLE_DEVICES`, and
//! cderd's ledger. Runs on every SLURM release the suite is run with
//! (`CDER_SLURM_RELEASE`, deploy/test.sh).

use std::time::Duration;

use cder_tests::slurm::{parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// A job script that writes its id, what it can open and what it sees to
/// `jobs/report-<tag>` (tag: the array index, or `job`), then holds its
/// devices until the flag file exists.
fn holding_script(cluster: &SlurmCluster, flag: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\ntag=${{SLURM_ARRAY_TASK_ID:-job}}\nout={jobs}/report-$tag\n{{\n{probe}echo CVD=${{CUDA_VISIBLE_DEVICES-unset}}\necho ID=$SLURM_JOB_ID\n}} > $out.tmp\nmv $out.tmp $out\nwhile [ ! -e '{flag}' ]; do sleep 0.2; done\n",
        jobs = cluster.jobs_dir().display(),
        probe = cluster.open_probe(),
        flag = flag.display()
    )
}

/// Waits for `jobs/report-<tag>` and returns it parsed.
fn report(cluster: &SlurmCluster, tag: &str) -> std::collections::BTreeMap<String, String> {
    let path = cluster.jobs_dir().join(format!("report-{tag}"));
    cder_testkit::wait_for_value(JOB_TIMEOUT, Duration::from_millis(200), || {
        std::fs::read_to_string(&path).ok().map(|text| parse_env_lines(&text))
    })
    .unwrap_or_else(|| panic!("no {} after {JOB_TIMEOUT:?}\n{}\n{}", path.display(), cluster.squeue(), cluster.logs()))
}

/// The job behind a report holds exactly what it can open, `count` GPUs,
/// and sees them numbered from 0. Returns them.
fn check(
    cluster: &SlurmCluster,
    what: &str,
    env: &std::collections::BTreeMap<String, String>,
    count: usize,
) -> Vec<u32> {
    let id: u32 = env["ID"].parse().unwrap();
    let open = visible_set(&env["OPEN"]);
    assert_eq!(open.len(), count, "{what}: job {id} can open {open:?}\n{env:?}\n{}", cluster.logs());
    assert_eq!(cluster.ledger(id).unwrap(), open, "{what}: job {id}: cderd's ledger is not what it can open");
    let expected: Vec<u32> = (0..count as u32).collect();
    assert_eq!(visible_set(&env["CVD"]), expected, "{what}: job {id}: {env:?}");
    open
}

fn start() -> Option<(cder_tests::slurm::Serial, SlurmCluster)> {
    if !require_slurm() {
        return None;
    }
    let guard = serial();
    let cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    Some((guard, cluster))
}

/// `--gpus=2`: SLURM counts the job's GPUs per job, not per node; the
/// prolog records the two it chose, and the job can open exactly those.
#[test]
fn a_per_job_gpu_count_gets_exactly_those_gpus() {
    let Some((_g, cluster)) = start() else { return };
    let flag = cluster.jobs_dir().join("release-gpus");
    let id = cluster.sbatch_as_user(&["--gpus=2"], &holding_script(&cluster, &flag)).unwrap();
    let env = report(&cluster, "job");
    assert_eq!(env["ID"], id.to_string());
    check(&cluster, "--gpus=2", &env, 2);
    std::fs::write(&flag, "").unwrap();
    let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(done.state, "COMPLETED", "{done:?}\n{}", cluster.logs());
}

/// `--array=0-1 --gres=gpu:2`: each task is a job with its own two GPUs;
/// running side by side on one node of four, they hold disjoint pairs,
/// and each is released at its end.
#[test]
fn the_tasks_of_a_job_array_hold_disjoint_gpus() {
    let Some((_g, cluster)) = start() else { return };
    let flag = cluster.jobs_dir().join("release-array");
    cluster.sbatch_as_user(&["--array=0-1", "--gres=gpu:2"], &holding_script(&cluster, &flag)).unwrap();
    let first = check(&cluster, "array task 0", &report(&cluster, "0"), 2);
    let second = check(&cluster, "array task 1", &report(&cluster, "1"), 2);
    assert!(first.iter().all(|g| !second.contains(g)), "array tasks share a GPU: {first:?} and {second:?}");
    std::fs::write(&flag, "").unwrap();
    let released = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(200), || {
        (cluster.cderd_status().unwrap().counts["gpgpu"].free == cluster.config.gpus).then_some(())
    });
    assert!(released.is_some(), "the array's GPUs were not released\n{}", cluster.logs());
}
