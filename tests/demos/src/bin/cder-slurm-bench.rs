//! Benchmark: what spank_cder.so adds to `srun -n1 true`.
//!
//! Starts the one-node test cluster (real slurmctld/slurmd, cderd with four
//! fake GPUs) and times `srun -n1 true` with plugstack.conf empty (the
//! reference) and with spank_cder.so loaded, in the same run, interleaved
//! in rounds so both see the same machine noise:
//!
//! * `steps`: steps inside one allocation (`salloc --no-shell`, then
//!   `srun --jobid`): the per-step cost, the case the target is set for;
//! * `jobs`: each srun its own job (allocation, prolog/epilog included);
//! * `jobs+gpu`: each srun its own job asking `--gpgpu-per-node=1`
//!   (allocation from and release to cderd);
//! * `gpu-job`: the start cost of a one-GPU job through cder
//!   (`--gpgpu-per-node=1` with spank_cder.so: job prolog recording SLURM's
//!   GRES in cderd, the step reading it, the task entering its device cgroups, release) against the same
//!   job as native `--gres=gpu:1` with plugstack.conf empty (no cder on the
//!   node; job_submit_cder.so stays loaded in slurmctld, where it returns at
//!   once for a job without a cder request). Target: at most 2 ms added.
//! * `spank-only`: the same native `--gres=gpu:1` job with spank_cder.so
//!   loaded but pointed at no cderd (`socket=` a missing path, `fail=open`,
//!   `confine=off`): the plugin's load and its failure paths (which log
//!   errors), none of cderd's work.
//! * `prolog-floor`: the same native job with a trivial C SPANK plugin whose
//!   only callbacks are a job prolog and epilog that return at once (built
//!   here with `cc`): what SLURM spends on any plugin that records jobs in a
//!   job prolog, whoever writes it. No design with a SPANK job prolog starts
//!   a job faster than this over native.
//!
//! * `share-job`: on a second cluster whose four fake GPUs are each offered
//!   as 4 shares (`gres/shard`, cderd's `[node.sharing]`), a one-share job
//!   through cder (`--gpgpu-shares-per-node=1`: the job prolog also asks
//!   slurmctld for the shares it granted, cderd records them in its shares
//!   ledger) against the same job as native `--gres=shard:1` with
//!   plugstack.conf empty; printed beside `gpu-job`, the whole-GPU job.
//!
//! Run with `RUST_LOG=cderd=debug CDER_KEEP_TMP=1` to keep cderd's log, whose
//! `alloc timing` and `confine timing` lines break the cderd side down.
//!
//! `--task-cgroup` runs both sides with SLURM's own device enforcement
//! (`TaskPlugin=task/cgroup`, `ConstrainDevices=yes`): the native job is then
//! moved into SLURM's cgroups too, and cder only records and reads the
//! ledger. `--warmup-ms N` sets cderd's `cgroup_warmup_ms` (0: no warm-up of
//! the kernel's cgroup migration lock). `--spank-arg WORD` (repeatable) adds
//! a plugstack.conf word for spank_cder.so on the cder sides, e.g.
//! `confine=off` to leave cderd's device cgroups out. `--rounds R` splits
//! each side's sruns into R interleaved rounds (default 10); besides the
//! mean and median over all sruns, each line prints the median over rounds
//! of each round's own added median ("paired"), from which the host's drift
//! between rounds cancels out. `--only LINE` (repeatable) measures just
//! those lines; `gpu-job` brings `prolog-floor` with it. The first line printed
//! says whether a cgroup hierarchy is mounted with `favordynmods`.
//!
//! ```text
//! CDER_TESTS_PROFILE=release cargo run --release -p cder-tests --bin cder-slurm-bench -- \
//!     [--task-cgroup] [--warmup-ms N] [--spank-arg WORD]... [--rounds R] [--only LINE]... [STEPS]   # default 50
//! ```
//!
//! (`CDER_TESTS_PROFILE=release` loads the release-built plugins and cderd,
//! as a site installs them; without it the debug builds are measured.)

use std::process::ExitCode;
use std::time::{Duration, Instant};

use cder_demos::{mean, median};
use cder_tests::slurm::{require_slurm, SlurmCluster, SlurmConfig};

/// The lines measured, in order; `--only` picks some.
const LINES: [&str; 7] = ["steps", "jobs", "jobs+gpu", "gpu-job", "spank-only", "prolog-floor", "share-job"];

/// Interleaved rounds per comparison unless `--rounds` says otherwise.
const ROUNDS: usize = 10;

/// Seconds each of `n` sruns took.
fn time_sruns(cluster: &SlurmCluster, args: &[&str], n: usize) -> Result<Vec<f64>, String> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let out = cluster.run("srun", args)?;
        times.push(start.elapsed().as_secs_f64());
        if !out.status.success() {
            return Err(format!("srun {args:?} failed: {}\n{}", String::from_utf8_lossy(&out.stderr), cluster.logs()));
        }
    }
    Ok(times)
}

/// Per-srun times of both sides, in seconds.
struct Sides {
    without: Vec<f64>,
    with: Vec<f64>,
    /// Per round, its median with minus its median without: the machine's
    /// drift between rounds cancels out of each.
    paired: Vec<f64>,
}

/// Waits (up to 10 s) until cderd holds no device: every job's epilog ran.
/// Then waits out cderd's cgroup warm-up window (`warmup`), so that the
/// other side's jobs neither gain nor lose from a lock cderd keeps warm.
fn settle(cluster: &SlurmCluster, warmup: Duration) {
    let _ = cder_testkit::wait_for_value(Duration::from_secs(10), Duration::from_millis(20), || {
        cluster.cderd_status().is_ok_and(|s| s.counts.values().all(|c| c.allocated == 0)).then_some(())
    });
    std::thread::sleep(warmup + Duration::from_millis(100));
}

/// Runs `n` sruns per side, in `ROUNDS` interleaved rounds; returns the
/// seconds of each srun without and with the plugin.
fn compare(
    cluster: &SlurmCluster,
    args: &[&str],
    args_with: &[&str],
    spank_args: &[String],
    warmup: Duration,
    n: usize,
    rounds: usize,
) -> Result<Sides, String> {
    compare_loaded(cluster, args, args_with, Loaded::Cder { args: spank_args, settle: Some(warmup) }, n, rounds)
}

/// What the "with" side's plugstack.conf loads.
enum Loaded<'a> {
    /// spank_cder.so with these arguments after it; `settle`: wait for
    /// cderd to hold nothing, then for its warm-up window (this long) to
    /// close, before the other side runs.
    Cder { args: &'a [String], settle: Option<Duration> },
    /// Another plugin: this plugstack.conf line.
    Line(&'a str),
}

/// [`compare`], with `loaded` on the "with" side.
fn compare_loaded(
    cluster: &SlurmCluster,
    args: &[&str],
    args_with: &[&str],
    loaded: Loaded,
    n: usize,
    rounds: usize,
) -> Result<Sides, String> {
    let per_round = n.div_ceil(rounds);
    let (mut without, mut with): (Vec<Vec<f64>>, Vec<Vec<f64>>) = (Vec::new(), Vec::new());
    let mut done = 0;
    for round in 0..rounds {
        let k = per_round.min(n - done);
        if k == 0 {
            break;
        }
        // Alternate which side goes first, so neither always runs warm.
        for side in if round % 2 == 0 { [false, true] } else { [true, false] } {
            match (&loaded, side) {
                (Loaded::Line(line), true) => std::fs::write(cluster.dir().join("plugstack.conf"), format!("{line}\n"))
                    .map_err(|e| e.to_string())?,
                (Loaded::Cder { args, .. }, _) => cluster.set_plugstack(side, args)?,
                (Loaded::Line(_), false) => cluster.set_plugstack(false, &[])?,
            }
            let t = time_sruns(cluster, if side { args_with } else { args }, k)?;
            if let (true, Loaded::Cder { settle: Some(warmup), .. }) = (side, &loaded) {
                // Untimed: the last jobs' epilogs (which release in cderd)
                // must run with the plugin loaded, before plugstack.conf
                // is emptied for the other side.
                settle(cluster, *warmup);
            }
            if side {
                with.push(t);
            } else {
                without.push(t);
            }
        }
        done += k;
    }
    let paired = with.iter().zip(&without).map(|(w, o)| median(w) - median(o)).collect();
    Ok(Sides { without: without.concat(), with: with.concat(), paired })
}

/// Builds, in `dir`, a SPANK plugin whose only callbacks are a job prolog
/// and epilog that return at once; returns its path.
fn trivial_prolog_plugin(dir: &std::path::Path) -> Result<std::path::PathBuf, String> {
    let source = dir.join("prolog_floor.c");
    let plugin = dir.join("prolog_floor.so");
    let text = "#include <slurm/spank.h>\nSPANK_PLUGIN(prolog_floor, 1);\n\
                int slurm_spank_job_prolog(spank_t sp, int ac, char **av) { return 0; }\n\
                int slurm_spank_job_epilog(spank_t sp, int ac, char **av) { return 0; }\n";
    std::fs::write(&source, text).map_err(|e| e.to_string())?;
    cder_tests::slurm::build_spank_plugin(&source, &plugin)?;
    Ok(plugin)
}

/// Prints one line (mean and median per srun, and the median over rounds
/// of each round's added median); returns the milliseconds added by each.
fn report(name: &str, n: usize, sides: &Sides) -> (f64, f64, f64) {
    let (without, with) = (mean(&sides.without), mean(&sides.with));
    let (without_med, with_med) = (median(&sides.without), median(&sides.with));
    let added = ((with - without) * 1000.0, (with_med - without_med) * 1000.0, median(&sides.paired) * 1000.0);
    println!(
        "{name:<12} n={n:<3} mean: without {:>7.2} with {:>7.2} ms/srun, ratio {:.3}, added {:+.2} ms   median: without {:>7.2} with {:>7.2}, added {:+.2} ms   paired over {} rounds: {:+.2} ms",
        without * 1000.0,
        with * 1000.0,
        with / without,
        added.0,
        without_med * 1000.0,
        with_med * 1000.0,
        added.1,
        sides.paired.len(),
        added.2,
    );
    added
}

/// The command line: `[--task-cgroup] [--warmup-ms N] [--spank-arg WORD]… [--rounds R] [--only LINE]… [STEPS]`.
struct Args {
    steps: usize,
    rounds: usize,
    task_cgroup: bool,
    warmup_ms: Option<u64>,
    /// Words after spank_cder.so on the cder sides (`confine=off` …).
    spank_args: Vec<String>,
    /// `--only`: just these lines (and the prolog floor they are read against).
    only: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        steps: 50,
        rounds: ROUNDS,
        task_cgroup: false,
        warmup_ms: None,
        spank_args: Vec::new(),
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--task-cgroup" => a.task_cgroup = true,
            "--warmup-ms" => {
                let v = it.next().ok_or("--warmup-ms needs a number of milliseconds")?;
                a.warmup_ms = Some(v.parse().map_err(|e| format!("--warmup-ms {v}: {e}"))?);
            }
            "--rounds" => {
                let v = it.next().ok_or("--rounds needs a number")?;
                a.rounds =
                    v.parse().ok().filter(|r| *r > 0).ok_or_else(|| format!("--rounds {v}: not a positive number"))?;
            }
            "--spank-arg" => {
                a.spank_args.push(it.next().ok_or("--spank-arg needs a plugstack.conf word, e.g. confine=off")?)
            }
            "--only" => {
                let v = it.next().ok_or("--only needs a line name")?;
                if !LINES.contains(&v.as_str()) {
                    return Err(format!("--only {v}: not one of {}", LINES.join(", ")));
                }
                a.only.push(v);
            }
            n => {
                a.steps =
                    n.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("{n}: not a positive number of sruns"))?
            }
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cder-slurm-bench: {e}\nusage: cder-slurm-bench [--task-cgroup] [--warmup-ms N] [--spank-arg WORD]... [--rounds R] [--only LINE]... [STEPS] (default 50 sruns per side in 10 rounds; lines: steps, jobs, jobs+gpu, gpu-job, spank-only, prolog-floor, share-job)");
            return ExitCode::from(2);
        }
    };
    let (n, rounds) = (args.steps, args.rounds.min(args.steps));
    if !require_slurm() {
        return ExitCode::from(1);
    }
    let favordynmods = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("cgroup") && l.contains("favordynmods"));
    println!(
        "cder-slurm-bench: TaskPlugin={}, cgroup favordynmods {}, cderd cgroup_warmup_ms {}, spank_cder.so words [{}]",
        if args.task_cgroup { "task/cgroup (ConstrainDevices=yes)" } else { "task/none" },
        if favordynmods { "on" } else { "off" },
        args.warmup_ms.map_or("default".to_string(), |ms| ms.to_string()),
        args.spank_args.join(" ")
    );
    let config = SlurmConfig {
        cgroup: args.task_cgroup,
        cderd_enforcement: args.warmup_ms.map(|ms| format!("cgroup_warmup_ms = {ms}")).unwrap_or_default(),
        ..SlurmConfig::default()
    };
    let cluster = match SlurmCluster::start(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cder-slurm-bench: {e}");
            return ExitCode::from(1);
        }
    };
    let wanted = |line: &str| args.only.is_empty() || args.only.iter().any(|o| o == line);
    let run = || -> Result<(), String> {
        let extra = &args.spank_args;
        // cderd's default `cgroup_warmup_ms` (deploy/cderd.md).
        let warmup = Duration::from_millis(args.warmup_ms.unwrap_or(1000));
        let native_gpu: &[&str] = &["-n1", "--gres=gpu:1", "true"];
        let mut measured: Vec<(&str, Sides)> = Vec::new();
        if wanted("steps") {
            // One allocation for the step benchmark, held without a shell.
            let alloc = cluster.run("salloc", &["--no-shell", "-n1", "-J", "bench"])?;
            let text = String::from_utf8_lossy(&alloc.stderr).to_string();
            let job = text
                .split_whitespace()
                .skip_while(|w| *w != "allocation")
                .nth(1)
                .and_then(|w| w.parse::<u32>().ok())
                .ok_or_else(|| format!("salloc printed no job id: {text}"))?;
            let jobid = format!("--jobid={job}");
            measured.push((
                "steps",
                compare(&cluster, &[&jobid, "-n1", "true"], &[&jobid, "-n1", "true"], extra, warmup, n, rounds)?,
            ));
            let _ = cluster.run("scancel", &[&job.to_string()]);
        }
        if wanted("jobs") {
            measured.push(("jobs", compare(&cluster, &["-n1", "true"], &["-n1", "true"], extra, warmup, n, rounds)?));
        }
        if wanted("jobs+gpu") {
            measured.push((
                "jobs+gpu",
                compare(&cluster, &["-n1", "true"], &["-n1", "--gpgpu-per-node=1", "true"], extra, warmup, n, rounds)?,
            ));
        }
        if wanted("gpu-job") {
            measured.push((
                "gpu-job",
                compare(&cluster, native_gpu, &["-n1", "--gpgpu-per-node=1", "true"], extra, warmup, n, rounds)?,
            ));
        }
        if wanted("spank-only") {
            let no_cderd =
                ["socket=/nonexistent/cderd.sock".to_string(), "fail=open".to_string(), "confine=off".to_string()];
            measured.push((
                "spank-only",
                compare_loaded(
                    &cluster,
                    native_gpu,
                    native_gpu,
                    Loaded::Cder { args: &no_cderd, settle: None },
                    n,
                    rounds,
                )?,
            ));
        }
        if wanted("prolog-floor") || wanted("gpu-job") {
            let floor_plugin = trivial_prolog_plugin(cluster.dir())?;
            let floor_line = format!("required {}", floor_plugin.display());
            measured.push((
                "prolog-floor",
                compare_loaded(&cluster, native_gpu, native_gpu, Loaded::Line(&floor_line), n, rounds)?,
            ));
        }
        if wanted("share-job") {
            let shared = SlurmConfig {
                gres_types: "gpu,shard".into(),
                node_gres: Some("gpu:4,shard:16".into()),
                gres_conf: Some(
                    (0..4)
                        .map(|i| format!("NodeName=node1 Name=gpu File={{dir}}/dev/gpu{i}\nNodeName=node1 Name=shard Count=4 File={{dir}}/dev/gpu{i}\n"))
                        .collect(),
                ),
                cderd_sharing: "shares_per_gpu = 4\nslurm_gres_conf = \"{dir}/gres.conf\"\nslurm_node_name = \"node1\"\n".into(),
                ..config.clone()
            };
            let sharing = SlurmCluster::start(&shared)?;
            measured.push((
                "share-job",
                compare(
                    &sharing,
                    &["-n1", "--gres=shard:1", "true"],
                    &["-n1", "--gpgpu-shares-per-node=1", "true"],
                    extra,
                    warmup,
                    n,
                    rounds,
                )?,
            ));
        }
        println!(
            "cder-slurm-bench: srun -n1 true, spank_cder.so ({} build) loaded vs plugstack.conf empty, same cluster, same run",
            cder_tests::slurm::profile()
        );
        let added: std::collections::HashMap<&str, (f64, f64, f64)> =
            measured.iter().map(|(name, sides)| (*name, report(name, n, sides))).collect();
        // Each line's native side ran on its own cluster: compare what cder
        // adds to each, not the absolute times.
        let medians = |line: &str| {
            measured
                .iter()
                .find(|(n, _)| *n == line)
                .map(|(_, s)| (median(&s.without) * 1000.0, median(&s.with) * 1000.0))
        };
        if let (Some(whole), Some(share)) = (medians("gpu-job"), medians("share-job")) {
            println!(
                "share job vs whole-GPU job, what cder adds over the native job (median; paired by round): share {:+.2} ms; {:+.2} ms (native --gres=shard:1 {:.2} ms), whole {:+.2} ms; {:+.2} ms (native --gres=gpu:1 {:.2} ms)",
                added["share-job"].1,
                added["share-job"].2,
                share.0,
                added["gpu-job"].1,
                added["gpu-job"].2,
                whole.0
            );
        }
        if let Some(steps) = added.get("steps") {
            let ok = steps.0 < 5.0 || steps.1 < 5.0;
            println!(
                "target (steps): under 5 ms added per step (mean or median): {}",
                if ok { "met" } else { "NOT met" }
            );
        }
        if let (Some(gpu_job), Some(floor)) = (added.get("gpu-job"), added.get("prolog-floor")) {
            let verdict = |ms: f64| if ms <= 2.0 { "met" } else { "NOT met" };
            println!(
                "target (gpu-job): cder adds at most 2 ms to a one-GPU job over native --gres=gpu:1: by mean {} ({:+.2} ms), by median {} ({:+.2} ms), paired by round {} ({:+.2} ms)",
                verdict(gpu_job.0),
                gpu_job.0,
                verdict(gpu_job.1),
                gpu_job.1,
                verdict(gpu_job.2),
                gpu_job.2
            );
            println!(
                "of which SLURM's own cost of any SPANK plugin with a job prolog (prolog-floor): {:+.2} ms by mean, {:+.2} ms by median, {:+.2} ms paired; cder beyond it: {:+.2} / {:+.2} / {:+.2} ms",
                floor.0,
                floor.1,
                floor.2,
                gpu_job.0 - floor.0,
                gpu_job.1 - floor.1,
                gpu_job.2 - floor.2
            );
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cder-slurm-bench: {e}");
            ExitCode::from(1)
        }
    }
}
