//! spank_cder.so and job_submit_cder.so loaded by a real slurmctld and
//! slurmd (Debian's SLURM 22.05) on 127.0.0.1, with a real cderd holding
//! four fake GPUs (character devices with distinct numbers, as gres.conf
//! names them). Only the GPUs are fake: every SLURM daemon, command and
//! plugin hook is the real one. With `TaskPlugin=task/none` the plugin
//! confines each task with cderd's `confine`, so a job numbers its devices
//! from 0 and what it can open is checked instead of the indices.

use std::collections::BTreeMap;
use std::time::Duration;

use cder_tests::slurm::{parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// A job that prints when it started, what it can open and sees, what an
/// srun step inside it sees, and when it ended. It first waits (up to 60 s)
/// at a barrier until two jobs have started, so that two jobs given GPUs at
/// the same time do run at the same time however slow the machine is.
fn reporting_job(cluster: &SlurmCluster, barrier: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\n\
touch {barrier}/$SLURM_JOB_ID\n\
i=0; while [ $(ls {barrier} | wc -l) -lt 2 ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n\
echo START=$(date +%s.%N)\n\
{}\
env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|ROCR_VISIBLE_DEVICES)='\n\
echo STEP_CUDA_VISIBLE_DEVICES=$(srun -n1 printenv CUDA_VISIBLE_DEVICES)\n\
sleep 4\n\
echo END=$(date +%s.%N)\n",
        cluster.open_probe(),
        barrier = barrier.display()
    )
}

fn start(config: SlurmConfig) -> Option<(cder_tests::slurm::Serial, SlurmCluster)> {
    if !require_slurm() {
        return None;
    }
    let guard = serial();
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    Some((guard, cluster))
}

/// Polls cderd until no device is allocated (release happens in the job
/// epilog, which may finish just after the job is reported done).
fn wait_all_free(cluster: &SlurmCluster) -> cder_protocol::Status {
    // After 20 s the status as it is: the caller's assertion says what is wrong.
    let mut last = None;
    let free = cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(200), || {
        let status = cluster.cderd_status().expect("cderd status");
        if status.counts["gpgpu"].allocated == 0 {
            return Some(status);
        }
        last = Some(status);
        None
    });
    free.or(last).expect("looked at least once")
}

#[test]
fn three_jobs_of_two_gpus_share_four_gpus_without_overlap() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    let barrier = cluster.dir().join("barrier");
    std::fs::create_dir_all(&barrier).unwrap();
    let script = reporting_job(&cluster, &barrier);
    let ids: Vec<u32> = (0..3)
        .map(|_| cluster.sbatch(&["--gpgpu-per-node=2"], &script).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs())))
        .collect();
    let mut runs = Vec::new();
    for &id in &ids {
        let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
        let out = cluster.job_output(id);
        assert_eq!(info.state, "COMPLETED", "job {id}: {info:?}\noutput:\n{out}\n{}", cluster.logs());
        let env = parse_env_lines(&out);
        let start: f64 = env["START"].parse().unwrap();
        let end: f64 = env["END"].parse().unwrap();
        // Confined to its two devices, the job numbers them 0 and 1, and
        // can open exactly two.
        assert_eq!(visible_set(&env["CUDA_VISIBLE_DEVICES"]), vec![0, 1], "job {id}\n{out}");
        let gpus = visible_set(&env["OPEN"]);
        assert_eq!(gpus.len(), 2, "job {id} can open {:?}\n{out}", env["OPEN"]);
        assert!(gpus.iter().all(|&g| g < 4), "{gpus:?}");
        assert_eq!(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
        // A step inside the job sees the job's devices, not new ones.
        assert_eq!(
            visible_set(&env["STEP_CUDA_VISIBLE_DEVICES"]),
            vec![0, 1],
            "job {id}: step saw other devices\n{out}"
        );
        // The GRES request is what the scheduler counted.
        assert!(info.fields.get("TresPerNode").is_some_and(|t| t.contains("gpu:2")), "{info:?}");
        runs.push((id, start, end, gpus));
    }
    // Some jobs did run together, or "disjoint" below would prove nothing.
    let overlapping = runs
        .iter()
        .enumerate()
        .flat_map(|(i, a)| runs[i + 1..].iter().map(move |b| (a, b)))
        .filter(|(a, b)| a.1 < b.2 && b.1 < a.2)
        .count();
    assert!(
        overlapping >= 1,
        "no two jobs ran at the same time, so disjointness was not tested: {runs:?}\n{}",
        cluster.logs()
    );
    // At most two at once, and jobs that overlapped saw disjoint devices.
    for (i, a) in runs.iter().enumerate() {
        let concurrent = runs.iter().filter(|b| b.1 <= a.1 && a.1 < b.2).count();
        assert!(concurrent <= 2, "{concurrent} jobs ran at once at {}: {runs:?}", a.1);
        for b in &runs[i + 1..] {
            if a.1 < b.2 && b.1 < a.2 {
                assert!(
                    a.3.iter().all(|g| !b.3.contains(g)),
                    "jobs {} and {} ran together on {:?} / {:?}",
                    a.0,
                    b.0,
                    a.3,
                    b.3
                );
            }
        }
    }
    let mut by_start = runs.clone();
    by_start.sort_by(|a, b| a.1.total_cmp(&b.1));
    let first_end = by_start[0].2.min(by_start[1].2);
    assert!(by_start[2].1 >= first_end, "the third job started before either of the first two ended: {runs:?}");
    let status = wait_all_free(&cluster);
    assert_eq!(status.counts["gpgpu"].free, 4, "{status:?}\n{}", cluster.logs());
    assert!(status.devices.iter().all(|d| d.job.is_none()), "{status:?}");
}

#[test]
fn a_job_that_asked_for_nothing_sees_an_empty_list_and_runs() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    let id = cluster.sbatch(&[], "#!/bin/sh\nenv | grep -E '^CUDA_VISIBLE_DEVICES='\necho RAN=yes\n").unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{out}\n{}", cluster.logs());
    let env = parse_env_lines(&out);
    assert_eq!(env.get("RAN").map(String::as_str), Some("yes"), "{out}");
    assert_eq!(
        env.get("CUDA_VISIBLE_DEVICES").map(String::as_str),
        Some(""),
        "must be set and empty, never unset (= all):\n{out}"
    );
    assert_eq!(wait_all_free(&cluster).counts["gpgpu"].free, 4);
}

#[test]
fn fail_closed_without_cderd_fails_the_job_with_a_readable_reason() {
    let Some((_g, mut cluster)) = start(SlurmConfig::default()) else { return };
    cluster.stop_cderd();
    let id = cluster.sbatch(&["--gpgpu-per-node=2"], "#!/bin/sh\necho RAN=yes\n").unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "FAILED", "{info:?}\n{out}");
    assert!(!out.contains("RAN=yes"), "the job ran without its devices:\n{out}");
    assert!(
        out.contains("cannot connect to cderd") && out.contains("fail=closed"),
        "no readable reason in the output:\n{out}"
    );
}

#[test]
fn fail_open_without_cderd_runs_the_job_with_an_empty_list() {
    let config = SlurmConfig { spank_args: vec!["fail=open".into()], ..SlurmConfig::default() };
    let Some((_g, mut cluster)) = start(config) else { return };
    cluster.stop_cderd();
    let id = cluster
        .sbatch(&["--gpgpu-per-node=2"], "#!/bin/sh\nenv | grep -E '^CUDA_VISIBLE_DEVICES='\necho RAN=yes\n")
        .unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{out}\n{}", cluster.logs());
    let env = parse_env_lines(&out);
    assert_eq!(env.get("RAN").map(String::as_str), Some("yes"));
    assert_eq!(env.get("CUDA_VISIBLE_DEVICES").map(String::as_str), Some(""), "{out}");
}

#[test]
fn bad_requests_are_refused_at_submit_time() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    let cases: [(&[&str], &str); 6] = [
        (&["--gpgpu-per-node=0"], "cder: --gpgpu-per-node=0: the count must be at least 1"),
        (&["--gpgpu-per-node=abc"], "cder: --gpgpu-per-node=abc: not a whole number of devices"),
        (&["--gpgpu-per-node=-1"], "the count must be at least 1"),
        (
            &["--gpgpu-per-node=5"],
            "cder: --gpgpu-per-node=5: more than any node has (at most 4 gpgpu devices per node)",
        ),
        (&["--cder=fpga:1"], "unknown CDER type \"fpga\" (this cluster has: gpgpu)"),
        (&["--cder=gpgpu:9"], "cder: --cder=gpgpu:9: more than any node has"),
    ];
    for (args, expected) in cases {
        let err = cluster.sbatch(args, "#!/bin/sh\ntrue\n").expect_err(&format!("{args:?} was accepted"));
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(err.contains("exited exit status: 1"), "{args:?}: sbatch must exit non-zero: {err}");
    }
    // The same refusal for the JDL key a CE sets.
    let err = cluster.sbatch_env(&[], "#!/bin/sh\ntrue\n", &[("GPGPUPerNode", "two")]).unwrap_err();
    assert!(err.contains("cder: GPGPUPerNode=two: not a whole number of devices"), "{err}");
    let queue = cluster.run("squeue", &["-h"]).unwrap();
    assert!(queue.stdout.is_empty(), "a refused job was queued: {}", String::from_utf8_lossy(&queue.stdout));
}

#[test]
fn the_jdl_key_in_the_submit_environment_becomes_a_gres_request() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    let id = cluster
        .sbatch_env(&[], "#!/bin/sh\nenv | grep -E '^CUDA_VISIBLE_DEVICES='\nsleep 2\n", &[("GPGPUPerNode", "2")])
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let shown = cluster.scontrol(&["show", "job", &id.to_string()]).unwrap();
    // 22.05 prints the TRES as `gres:gpu:2`, 23.02 and later `gres/gpu:2`.
    assert!(
        shown.contains("TresPerNode=gres:gpu:2") || shown.contains("TresPerNode=gres/gpu:2"),
        "scontrol show job:\n{shown}"
    );
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{out}\n{}", cluster.logs());
    assert_eq!(visible_set(&parse_env_lines(&out)["CUDA_VISIBLE_DEVICES"]).len(), 2, "{out}");
}

#[test]
fn a_job_killed_by_scancel_releases_its_devices() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    let id = cluster.sbatch(&["--gpgpu-per-node=2"], "#!/bin/sh\nsleep 300\n").unwrap();
    cluster.wait_running(id, JOB_TIMEOUT).unwrap();
    let key = format!("slurm:{id}");
    let mut held = Vec::new();
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        let status = cluster.cderd_status().unwrap();
        held = status
            .devices
            .iter()
            .filter(|d| d.job.as_ref().map(|j| j.to_string()) == Some(key.clone()))
            .map(|d| d.index)
            .collect();
        (held.len() == 2).then_some(())
    });
    assert_eq!(held.len(), 2, "cderd never showed the job's devices\n{}", cluster.logs());
    let out = cluster.run("scancel", &[&id.to_string()]).unwrap();
    assert!(out.status.success());
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(info.state, "CANCELLED", "{info:?}");
    let status = wait_all_free(&cluster);
    assert_eq!(status.counts["gpgpu"].free, 4, "scancel left devices allocated: {status:?}\n{}", cluster.logs());
}

/// `mode=observe` of earlier releases is still accepted; as always now,
/// cderd records exactly the devices SLURM's GRES chose.
#[test]
fn observe_mode_records_the_devices_slurm_chose() {
    let config = SlurmConfig { spank_args: vec!["mode=observe".into()], ..SlurmConfig::default() };
    let Some((_g, cluster)) = start(config) else { return };
    let id = cluster
        .sbatch(
            &["--gpgpu-per-node=2"],
            "#!/bin/sh\nenv | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS)='\nsleep 30\n",
        )
        .unwrap();
    cluster.wait_running(id, JOB_TIMEOUT).unwrap();
    let key = format!("slurm:{id}");
    let (mut held, mut out) = (Vec::new(), String::new());
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        let status = cluster.cderd_status().unwrap();
        held = status
            .devices
            .iter()
            .filter(|d| d.job.as_ref().map(|j| j.to_string()) == Some(key.clone()))
            .map(|d| d.index)
            .collect();
        out = cluster.job_output(id);
        (held.len() == 2 && out.contains("CUDA_VISIBLE_DEVICES")).then_some(())
    });
    let env: BTreeMap<String, String> = parse_env_lines(&out);
    let chosen =
        visible_set(env.get("SLURM_JOB_GPUS").or(env.get("CUDA_VISIBLE_DEVICES")).map(String::as_str).unwrap_or(""));
    assert_eq!(chosen.len(), 2, "SLURM's GRES gave {chosen:?}\n{out}");
    held.sort_unstable();
    assert_eq!(held, chosen, "cderd recorded other devices than SLURM chose\n{out}\n{}", cluster.logs());
    cluster.run("scancel", &[&id.to_string()]).unwrap();
    cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(wait_all_free(&cluster).counts["gpgpu"].free, 4);
}

#[test]
fn a_device_drained_in_cderd_but_given_by_slurm_fails_the_job_readably() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    // SLURM's GRES gives the first free devices (0,1); cderd holds device 0
    // offline. SLURM decides which devices a job gets, so cderd does not
    // choose others: the ledger and SLURM disagree, and the job does not
    // start (fail=closed) rather than run on a drained device.
    let mut client = cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
    client.drain("gpgpu:0", "test: drained in cderd only").unwrap();
    let id = cluster.sbatch(&["--gpgpu-per-node=2"], "#!/bin/sh\necho RAN=yes\n").unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "FAILED", "{info:?}\n{out}");
    assert!(!out.contains("RAN=yes"), "the job ran on a drained device:\n{out}");
    assert!(out.contains(&format!("cder: cderd holds no record of the devices SLURM gave slurm:{id}")), "{out}");
    // The job prolog does not wait for cderd's answer; the step asks cderd
    // why it refused, and the user reads it.
    assert!(
        out.contains(
            "it refused the job prolog's record: device gpgpu:0 is offline, not free (test: drained in cderd only)"
        ),
        "the refusal names the device and why: {out}"
    );
    let status = cluster.cderd_status().unwrap();
    assert!(status.devices.iter().all(|d| d.job.is_none()), "{status:?}");
}

#[test]
fn cder_type_option_and_memory_constraint_reach_cderd() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    let script = "#!/bin/sh\nenv | grep -E '^CUDA_VISIBLE_DEVICES='\necho RAN=yes\n";
    // --cder=TYPE:N is the general form of --gpgpu-per-node.
    let id = cluster.sbatch(&["--cder=gpgpu:1"], script).unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{out}\n{}", cluster.logs());
    assert_eq!(visible_set(&parse_env_lines(&out)["CUDA_VISIBLE_DEVICES"]).len(), 1, "{out}");
    assert!(info.fields.get("TresPerNode").is_some_and(|t| t.contains("gpu:1")), "{info:?}");
    // The fake devices have 4800 MB: asking for more leaves none that fits,
    // and fail=closed says so in the job's output.
    let id = cluster.sbatch(&["--gpgpu-per-node=1", "--gpgpu-min-memory=100000"], script).unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(id);
    assert_eq!(info.state, "FAILED", "{info:?}\n{out}");
    assert!(
        !out.contains("RAN=yes")
            && out.contains("cder: --gpgpu-min-memory=100000: the device(s) SLURM gave slurm:")
            && out.contains("fail=closed"),
        "{out}"
    );
    let id = cluster.sbatch(&["--gpgpu-per-node=1", "--gpgpu-min-memory=4000"], script).unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{}", cluster.job_output(id));
    assert_eq!(wait_all_free(&cluster).counts["gpgpu"].free, 4);
}

#[test]
fn srun_takes_the_options_too() {
    let Some((_g, cluster)) = start(SlurmConfig::default()) else { return };
    // srun without an allocation: local context on the submit side.
    let out = cluster.run("srun", &["--gpgpu-per-node=3", "printenv", "CUDA_VISIBLE_DEVICES"]).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stderr), cluster.logs());
    assert_eq!(visible_set(stdout.trim()).len(), 3, "{stdout}");
    let out = cluster.run("srun", &["--gpgpu-per-node=abc", "true"]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "srun accepted --gpgpu-per-node=abc");
    assert!(stderr.contains("cder: --gpgpu-per-node=abc: not a whole number of devices"), "{stderr}");
    assert_eq!(wait_all_free(&cluster).counts["gpgpu"].free, 4);
}
