//! Benchmark: submission-to-start of one-GPU batch jobs over the
//! multi-host test cluster (tests/src/cluster.rs: three workers of two fake
//! GPUs, each a host of its own with slurmd and cderd), through cder versus
//! native GRES, in the same run.
//!
//! * cder: `sbatch --gpgpu-per-node=1` with spank_cder.so loaded on every
//!   host (job_submit_cder.so turns the request into GRES; the job prolog
//!   records SLURM's devices in that host's cderd, the batch step reads
//!   and confines, the epilog releases);
//! * native: `sbatch --gres=gpu:1` with plugstack.conf empty (no cder on
//!   the hosts; job_submit_cder.so stays loaded in slurmctld, where it
//!   returns at once for a job without a cder request).
//!
//! Jobs go in waves of one per GPU of the cluster (so every host starts
//! jobs at once), the sides alternating wave by wave, the first side
//! alternating round by round. A job's submission-to-start is the time from
//! just before its `sbatch` ran to the first line of its script
//! (`date +%s.%N` on its host; every host shares the machine's clock).
//!
//! ```text
//! cargo run -p cder-tests --bin cder-cluster-bench -- [JOBS]   # per side, default 100
//! ```
//!
//! With `CDER_TESTS_PROFILE=release` (after `cargo build --release -p
//! spank-cder -p job-submit-cder -p cderd`) the release-built plugins and
//! cderd are measured, as a site installs them; this program only runs
//! `sbatch` and `scontrol`, so its own build does not matter.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cder_demos::{count_arg, mean, median};
use cder_tests::cluster::{require_cluster, Cluster, ClusterConfig};
use cder_tests::slurm::SlurmClient;

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Submits `n` jobs with `args` at once and returns each one's
/// submission-to-start in seconds, once all have ended.
fn wave(cluster: &Cluster, args: &[&str], n: usize) -> Result<Vec<f64>, String> {
    let script = "#!/bin/sh\necho START=$(date +%s.%N)\n";
    let mut jobs = Vec::with_capacity(n);
    for _ in 0..n {
        let submitted = now();
        jobs.push((cluster.sbatch(args, script)?, submitted));
    }
    let mut out = Vec::with_capacity(n);
    for (id, submitted) in jobs {
        let done = cluster.wait_job(id, Duration::from_secs(120))?;
        if done.state != "COMPLETED" {
            return Err(format!(
                "job {id} ({args:?}) ended {}: {}\n{}",
                done.state,
                cluster.job_output(id),
                cluster.logs()
            ));
        }
        let text = cluster.job_output(id);
        let start: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("START="))
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| format!("job {id} printed no START: {text:?}"))?;
        out.push(start - submitted);
    }
    Ok(out)
}

/// Waits (up to 20 s) until every host's cderd holds nothing: the last
/// cder jobs' epilogs ran before plugstack.conf changes under them.
fn settle(cluster: &Cluster) {
    let _ = cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(20), || {
        cluster
            .workers
            .iter()
            .all(|w| w.cderd_status().is_ok_and(|s| s.counts.values().all(|c| c.allocated == 0)))
            .then_some(())
    });
}

fn run(cluster: &Cluster, per_side: usize) -> Result<(), String> {
    let slots = cluster.workers.len() * cluster.config.gpus as usize;
    let (mut cder, mut native) = (Vec::new(), Vec::new());
    let mut round = 0;
    while cder.len() < per_side || native.len() < per_side {
        for side_is_cder in if round % 2 == 0 { [true, false] } else { [false, true] } {
            let have = if side_is_cder { cder.len() } else { native.len() };
            let n = slots.min(per_side - have);
            if n == 0 {
                continue;
            }
            if side_is_cder {
                cluster.set_plugstack(&[])?;
                cder.extend(wave(cluster, &["--gpgpu-per-node=1"], n)?);
                settle(cluster);
            } else {
                cluster.disable_spank()?;
                native.extend(wave(cluster, &["--gres=gpu:1"], n)?);
            }
        }
        round += 1;
    }
    println!(
        "cder-cluster-bench: submission-to-start of one-GPU jobs, {} workers x {} GPUs, waves of {slots}, {} build, same cluster, same run",
        cluster.workers.len(),
        cluster.config.gpus,
        cder_tests::slurm::profile()
    );
    let ms = |v: f64| v * 1000.0;
    for (name, v) in [("native --gres=gpu:1", &native), ("cder --gpgpu-per-node=1", &cder)] {
        println!("{name:<24} n={:<4} mean {:>8.1} ms  median {:>8.1} ms", v.len(), ms(mean(v)), ms(median(v)));
    }
    println!(
        "cder vs native: mean {:+.1} ms per job (ratio {:.3}), median {:+.1} ms per job (ratio {:.3})",
        ms(mean(&cder) - mean(&native)),
        mean(&cder) / mean(&native),
        ms(median(&cder) - median(&native)),
        median(&cder) / median(&native)
    );
    Ok(())
}

fn main() -> ExitCode {
    let per_side = match count_arg("cder-cluster-bench", "JOBS", 100) {
        Ok(n) => n,
        Err(code) => return code,
    };
    if !require_cluster() {
        return ExitCode::from(1);
    }
    let cluster = match Cluster::start(&ClusterConfig::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cder-cluster-bench: {e}");
            return ExitCode::from(1);
        }
    };
    match run(&cluster, per_side) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cder-cluster-bench: {e}");
            ExitCode::from(1)
        }
    }
}
