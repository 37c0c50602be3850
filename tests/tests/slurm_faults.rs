//! Faults on a SLURM node while jobs run: slurmctld and slurmd killed and
//! started again (and `scontrol reconfigure`), cderd killed while a job's
//! release cannot reach it, and cderd killed around the job prolog's
//! unanswered `alloc`. Real slurmctld, slurmd and cderd with cder's plugins;
//! only the GPUs are fake (character devices named in gres.conf).
//! `TaskPlugin=task/none`: cderd confines each task, so what a step can
//! open is the kernel's answer to "which devices does it have".

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_testkit::faults::Frozen;
use cder_testkit::wait_for;
use cder_tests::slurm::{cderctl, parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// A step's report, as a script file any step runs with `sh`: the fake
/// GPUs it can open (`OPEN=`) and its `CUDA_VISIBLE_DEVICES` (`CVD=`).
fn write_step_probe(cluster: &SlurmCluster) -> std::path::PathBuf {
    let path = cluster.jobs_dir().join("step-probe.sh");
    std::fs::write(&path, format!("{}echo CVD=${{CUDA_VISIBLE_DEVICES-unset}}\n", cluster.open_probe())).unwrap();
    path
}

/// Lines of `text` that start with `prefix`, the prefix cut off.
fn section(text: &str, prefix: &str) -> String {
    text.lines().filter_map(|l| l.strip_prefix(prefix)).map(|l| format!("{l}\n")).collect()
}

/// What a step reported: the devices it could open and its visible list.
fn step_report(report: &str) -> (Vec<u32>, String) {
    let env = parse_env_lines(report);
    let open = visible_set(env.get("OPEN").unwrap_or_else(|| panic!("no OPEN= in the step's report:\n{report}")));
    let cvd = env.get("CVD").unwrap_or_else(|| panic!("no CVD= in the step's report:\n{report}")).clone();
    (open, cvd)
}

fn wait_file(path: &Path, cluster: &SlurmCluster) {
    let appeared =
        cder_testkit::wait_for_value(JOB_TIMEOUT, Duration::from_millis(200), || path.exists().then_some(()));
    assert!(appeared.is_some(), "{} never appeared\n{}", path.display(), cluster.logs());
}

/// `cderctl reconcile --from slurm`, as the node runs it; its stdout.
fn reconcile(cluster: &SlurmCluster) -> String {
    let out = Command::new(cderctl().unwrap())
        .args(["reconcile", "--from", "slurm", "--socket"])
        .arg(cluster.cderd_socket())
        .envs(cluster.node_tool_env().unwrap())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "cderctl reconcile: {}\n{}", String::from_utf8_lossy(&out.stderr), cluster.logs());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// slurmctld (SIGTERM) and slurmd (SIGKILL) stop and start again while two jobs hold
/// GPUs; one job ends meanwhile, with cderd down so that neither its batch
/// step's nor its epilog's release reaches it. After the restarts: the
/// running job still holds the same devices in the ledger, its next step
/// (launched by the new slurmd) can open exactly the same devices with the
/// same visible list, and reconcile frees exactly the job that ended.
#[test]
fn slurm_daemons_restart_while_jobs_run_and_reconcile_frees_only_the_ended_job() {
    if !require_slurm() {
        return;
    }
    let _one = serial();
    let mut cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let probe = write_step_probe(&cluster);
    let jobs = cluster.jobs_dir();
    let (go_a, go_b, b_done) = (jobs.join("go-a"), jobs.join("go-b"), jobs.join("b-done"));
    let a = cluster
        .sbatch(
            &["--gpgpu-per-node=2"],
            &format!(
                "#!/bin/sh\nsrun -n1 sh {probe} | sed 's/^/BEFORE_/'\n\
                 while [ ! -e {go} ]; do sleep 0.2; done\n\
                 srun -n1 sh {probe} | sed 's/^/AFTER_/'\n",
                probe = probe.display(),
                go = go_a.display()
            ),
        )
        .unwrap();
    let b = cluster
        .sbatch(
            &["--gpgpu-per-node=1"],
            &format!(
                "#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.2; done\ntouch {done}\n",
                go = go_b.display(),
                done = b_done.display()
            ),
        )
        .unwrap();
    cluster.wait_output(a, "BEFORE_CVD=", JOB_TIMEOUT).unwrap();
    cluster.wait_running(b, JOB_TIMEOUT).unwrap();
    // b's devices are recorded by its prolog, after slurmctld calls it RUNNING.
    let held_a = cluster.wait_ledger(a, 2, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let held_b = cluster.wait_ledger(b, 1, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let (before_open, before_cvd) = step_report(&section(&cluster.job_output(a), "BEFORE_"));
    assert_eq!(before_open, held_a, "the first step opens what the ledger gives job {a}");

    // slurmctld stops (SIGTERM: it saves its state; a SIGKILL can lose a
    // job submitted a moment before, slurm's own promise); cderd dies, so
    // job b's releases go nowhere.
    cluster.stop_slurmctld().unwrap();
    cluster.kill_cderd();
    std::fs::write(&go_b, "").unwrap();
    wait_file(&b_done, &cluster);
    // slurmd dies too (job a's slurmstepd lives on); both come back.
    cluster.kill_slurmd();
    cluster.start_slurmctld().unwrap_or_else(|e| panic!("slurmctld did not come back: {e}"));
    cluster.start_slurmd().unwrap_or_else(|e| panic!("slurmd did not come back: {e}"));
    let ended = cluster.wait_job(b, JOB_TIMEOUT).unwrap();
    assert_eq!(cluster.job(a).unwrap().state, "RUNNING", "job {a} must survive the restarts\n{}", cluster.logs());

    // cderd comes back with both records: its ledger is durable.
    cluster.start_cderd().unwrap();
    assert_eq!(cluster.ledger(a).unwrap(), held_a, "job {a} keeps its devices across every restart");
    assert_eq!(cluster.ledger(b).unwrap(), held_b, "job {b} ({}) ended while cderd was down", ended.state);
    assert_eq!(reconcile(&cluster), format!("released slurm:{b}\n1 job(s) released\n"));
    assert_eq!(cluster.ledger(a).unwrap(), held_a);
    assert!(cluster.ledger(b).unwrap().is_empty());
    // A second reconcile frees nothing more.
    assert_eq!(reconcile(&cluster), "0 job(s) released\n");

    // slurmd and slurmctld read their configs again: nothing changes either.
    cluster.reconfigure().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&go_a, "").unwrap();
    let done = cluster.wait_job(a, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(a);
    assert_eq!(done.state, "COMPLETED", "{out}\n{}", cluster.logs());
    let (after_open, after_cvd) = step_report(&section(&out, "AFTER_"));
    assert_eq!(after_open, held_a, "a step after the restarts opens the same devices:\n{out}");
    assert_eq!(after_cvd, before_cvd, "and sees the same visible list:\n{out}");
    wait_for("every device free", JOB_TIMEOUT, || cluster.cderd_status().is_ok_and(|s| s.counts["gpgpu"].free == 4));
}

/// The job id in salloc's "Granted job allocation N".
fn granted_job(stderr: &str) -> Option<u32> {
    stderr.split("Granted job allocation ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// A cluster whose job prolog runs at allocation time (`PrologFlags=Alloc`),
/// so that a job's prolog and its first step are apart: `salloc --no-shell`
/// allocates (the prolog sends its `alloc`), `srun --jobid` starts a step.
fn prolog_at_allocation() -> Option<(cder_tests::slurm::Serial, SlurmCluster)> {
    if !require_slurm() {
        return None;
    }
    let guard = serial();
    let config = SlurmConfig { extra_slurm_conf: "PrologFlags=Alloc".into(), ..SlurmConfig::default() };
    Some((guard, SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM: {e}"))))
}

fn allocate(cluster: &SlurmCluster, gpus: u32) -> u32 {
    let out = cluster.run("salloc", &["--no-shell", "-N1", "-n1", &format!("--gpgpu-per-node={gpus}")]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    granted_job(&stderr).unwrap_or_else(|| panic!("salloc got no allocation:\n{stderr}\n{}", cluster.logs()))
}

/// A step of job `id` running the probe; its output and whether it succeeded.
fn step(cluster: &SlurmCluster, id: u32, probe: &Path) -> (bool, String) {
    let out = cluster.run("srun", &["--jobid", &id.to_string(), "-n1", "sh", &probe.display().to_string()]).unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The prolog's `alloc` was committed, then cderd was killed (SIGKILL)
/// before the job's first step asked `env`: the restarted cderd answers the
/// step from its ledger, and the step opens exactly the job's devices.
#[test]
fn cderd_killed_after_the_prolog_alloc_committed_still_serves_the_step() {
    let Some((_g, mut cluster)) = prolog_at_allocation() else { return };
    let probe = write_step_probe(&cluster);
    let id = allocate(&cluster, 2);
    wait_for("the prolog's record in cderd", JOB_TIMEOUT, || cluster.ledger(id).is_ok_and(|l| l.len() == 2));
    let held = cluster.ledger(id).unwrap();
    cluster.kill_cderd();
    cluster.start_cderd().unwrap();
    let (ok, report) = step(&cluster, id, &probe);
    assert!(ok, "the step failed after cderd's restart:\n{report}\n{}", cluster.logs());
    let (open, cvd) = step_report(&report);
    assert_eq!(open, held, "the step opens the devices the prolog recorded:\n{report}");
    assert_eq!(cvd.split(',').count(), 2, "{report}");
    assert_eq!(cluster.ledger(id).unwrap(), held);
    cluster.cancel_all();
    wait_for("every device free", JOB_TIMEOUT, || cluster.cderd_status().is_ok_and(|s| s.counts["gpgpu"].free == 4));
}

/// cderd is frozen when the prolog sends its `alloc` (the kernel queues the
/// connection, nobody reads it) and killed before it reads it: the record
/// is lost. The restarted cderd refuses the job's step readably, within the
/// plugin's timeout, and never hands it another job's devices; the other
/// job keeps its own.
#[test]
fn cderd_killed_before_reading_the_prolog_alloc_refuses_the_step_readably() {
    let Some((_g, mut cluster)) = prolog_at_allocation() else { return };
    let probe = write_step_probe(&cluster);
    let other = allocate(&cluster, 1);
    wait_for("the other job's record", JOB_TIMEOUT, || cluster.ledger(other).is_ok_and(|l| l.len() == 1));
    let other_held = cluster.ledger(other).unwrap();

    let frozen = Frozen::new(cluster.cderd_pid().expect("cderd runs")).unwrap();
    let id = allocate(&cluster, 2);
    let sent = format!("slurm:{id}: recording");
    let slurmd_log = cluster.dir().join("log/slurmd.log");
    wait_for("the prolog to send its alloc", JOB_TIMEOUT, || {
        std::fs::read_to_string(&slurmd_log).is_ok_and(|l| l.contains(&sent))
    });
    cluster.kill_cderd();
    drop(frozen);
    cluster.start_cderd().unwrap();
    assert!(cluster.ledger(id).unwrap().is_empty(), "the lost alloc cannot have been committed");

    let started = Instant::now();
    let (ok, report) = step(&cluster, id, &probe);
    let took = started.elapsed();
    assert!(!ok, "a step of a job cderd holds no record of must not run:\n{report}");
    assert!(
        report.contains(&format!("cderd holds no record of the devices SLURM gave slurm:{id}")),
        "no readable reason:\n{report}\n{}",
        cluster.logs()
    );
    assert!(!report.contains("CVD="), "the refused step ran:\n{report}");
    // A bound on a hang (the plugin's timeout= is 10 s), not a timing figure.
    assert!(took < JOB_TIMEOUT, "the refusal took {took:?}");
    assert!(cluster.ledger(id).unwrap().is_empty());
    assert_eq!(cluster.ledger(other).unwrap(), other_held, "the other job keeps its devices");
    // The other job's steps still run on its own device.
    let (ok, report) = step(&cluster, other, &probe);
    assert!(ok, "{report}");
    assert_eq!(step_report(&report).0, other_held, "{report}");
    cluster.cancel_all();
}
