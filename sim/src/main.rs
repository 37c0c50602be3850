//! `cder-sim`: replays a workload through cder's own placement code under
//! several policies and prints them side by side (see `--help`).

// The clap arguments' doc comments are the --help text, printed as written.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};

use cder_sim::cluster::Cluster;
use cder_sim::metrics::Outcome;
use cder_sim::policy::Policy;
use cder_sim::read::swf::{NodeShape, SwfOptions};
use cder_sim::read::{alibaba, input, sacct, swf, OnBadLine};
use cder_sim::service::Recorded;
use cder_sim::workload::Workload;
use cder_sim::{batch, fill, report, seeds};

/// The trace formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The Parallel Workloads Archive's Standard Workload Format.
    Swf,
    /// Alibaba's 2023 GPU trace, a task list (openb_pod_list_*.csv).
    Alibaba,
    /// `sacct -P` output of a SLURM cluster.
    Sacct,
}

/// What to do with a malformed line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BadLines {
    /// Name it on stderr and leave it out.
    Skip,
    /// Stop at it (exit 2).
    Refuse,
}

/// The seeds' experiments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Seed {
    /// The seed thesis, §4.4.2, Table 4.5 (physical vs vGPGPU random vs local first).
    Walsh,
    /// Seed 002, §4.6 (conservative backfilling, basic vs best effort local, Curie).
    Mendonca,
    /// Seed 001, §IV-D (TORQUE-like, MCT, FMS on moldable CPU/GPU jobs).
    Ravi,
    /// Seed 004, §3.7.1.4 (GPUs shared 4 ways vs serialized, offloading).
    Becchi,
    /// Sharing on Alibaba's trace: GPU requests left unplaced as the cluster fills.
    Weng,
}

#[derive(Parser)]
#[command(
    name = "cder-sim",
    version,
    about = "Replay a workload through cder's own placement code and compare policies side by side",
    long_about = "cder-sim answers an admin's \"what if\" before production changes it: what if the \
registry allocated vGPGPUs local first, cderd chose devices by NUMA locality, or each GPU were offered \
as 4 shares? It replays a workload - a Standard Workload Format log, Alibaba's GPU trace, or the \
`sacct -P` output of the site's own SLURM - on a cluster described in cluster.toml, once per policy, \
in a seeded, single-threaded discrete-event loop with integer (millisecond) times, and prints one \
table: makespan, mean wait, bounded slowdown, GPU utilisation, locality and the unplaceable fraction.\n\n\
Every placement question is asked of cder's own code, in-process: which devices of a node (cderd's \
[node] selection: locality, first; also which processors, in conservative backfilling or with \
node=locality), which vGPGPU backends (the registry's [registry] policy: random, local-first, spread), \
and, with rank:EXPR, phase 1's ClassAd Rank of each node. The batch system around them is a model: \
FCFS, list scheduling, EASY or conservative backfilling; which nodes a job gets (first-fit, \
least-loaded, best-fit, random-fit); which GPU a share takes.\n\n\
A POLICY is words joined by `+`, each answering one question; what a policy leaves out comes from \
the cluster's [scheduler] table: e.g. `physical`, `local-first`, `random`, `first+conservative`, \
`best-fit+share=best`, `easy+estimates=requested`, `fcfs+rank:other.FreeCores`. \
docs/simulation.md lists them all.\n\n\
Traces: SWF fields 2 (submit), 4 (run time), 5 or 8 (processors), 9 (requested time), 16 \
(partition); Alibaba's name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, creation_time, \
scheduled_time, deletion_time; sacct's JobID, Submit, Start, End, Elapsed or ElapsedRaw, NNodes, \
NCPUS, AllocTRES (gres/gpu), Timelimit, found by the header's names. gzip is read as it is. A \
malformed line is named (file:line: field: what) and refused (exit 2) or, with --bad-lines skip, \
left out; a job that cannot be replayed (unknown run time or size, never started) is dropped and \
counted.",
    after_help = "EXAMPLES:\n    \
cder-sim --trace sacct-may.txt --cluster cluster.toml --policy physical,local-first,random\n    \
sacct -a -X -P -S 2024-05-01 -E 2024-06-01 -o JobID,Submit,Start,End,Elapsed,NNodes,NCPUS,AllocTRES,Timelimit,State > may.txt\n    \
cder-sim --trace CEA-Curie-2011-2.1-cln.swf.gz --cluster curie.toml --policy easy+first,easy+locality --json\n    \
cder-sim --trace openb_pod_list_default.csv.gz --alibaba-nodes openb_node_list_all_node.csv.gz \\\n        \
--fill --policy first-fit,best-fit+share=best,random-fit+share=random\n    \
cder-sim --reproduce walsh\n\n\
EXIT STATUS:\n    0 success, 1 runtime failure (a plot not written), 2 bad input or usage (a malformed \
trace line refused, a bad cluster file, an unknown policy)."
)]
pub struct Args {
    /// The workload: SWF, Alibaba's task CSV, or sacct -P output (plain or gzip)
    #[arg(long, value_name = "FILE", required_unless_present = "reproduce")]
    pub trace: Option<PathBuf>,

    /// The trace's format [default: guessed from its first line]
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// The cluster: cluster.toml (its [[nodes]] and [scheduler] defaults)
    #[arg(long, value_name = "FILE", required_unless_present_any = ["reproduce", "alibaba_nodes"])]
    pub cluster: Option<PathBuf>,

    /// The cluster as Alibaba's node list (openb_node_list_*.csv)
    #[arg(long, value_name = "FILE", conflicts_with = "cluster")]
    pub alibaba_nodes: Option<PathBuf>,

    /// Policies to compare, comma-separated or repeated [default: the cluster's [scheduler]]
    #[arg(long, value_name = "POLICY,…")]
    pub policy: Vec<String>,

    /// Seeds every random choice (the registry's random, random-fit, fill draws)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// What to do with a malformed trace line
    #[arg(long, value_enum, default_value = "refuse")]
    pub bad_lines: BadLines,

    /// Replay only the first N jobs (by submit time)
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,

    /// SWF: only this partition's jobs (field 16), e.g. 8 for Curie's GPU partition
    #[arg(long, value_name = "N")]
    pub partition: Option<i64>,

    /// SWF: read processors as whole nodes of CORES cores, each job asking GPUS GPUs per node
    #[arg(long, value_name = "CORES:GPUS")]
    pub swf_nodes: Option<String>,

    /// Fill the cluster instead (Weng et al.): tasks drawn from the trace arrive and never leave;
    /// prints the share of GPU requests left unplaced as the GPU asked for grows
    #[arg(long)]
    pub fill: bool,

    /// The fill's points: GPU asked for over the cluster's GPUs
    #[arg(long, value_name = "X,…", value_delimiter = ',', default_value = "0.5,0.7,0.8,0.9,1.0,1.1")]
    pub fill_points: Vec<f64>,

    /// Print JSON instead of the table
    #[arg(long)]
    pub json: bool,

    /// Write gpu-utilisation.svg and waits.svg (one line per policy) into DIR
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// No progress bar on stderr (it shows only when stderr is a terminal)
    #[arg(long)]
    pub no_progress: bool,

    /// Reproduce a seed's experiment and print its table beside the seed's (docs/simulation.md)
    #[arg(long, value_enum, value_name = "SEED")]
    pub reproduce: Option<Seed>,

    /// Where the traces are, for --reproduce [default: $CDER_TRACES, else ../shared/traces beside the repository]
    #[arg(long, value_name = "DIR")]
    pub traces: Option<PathBuf>,

    /// --reproduce: samples (or instances, for mendonca) per cell [default: the documented run's]
    #[arg(long, value_name = "N")]
    pub samples: Option<u32>,
}

/// A failure and its exit status.
struct Failure {
    status: u8,
    message: String,
}

fn bad(message: impl Into<String>) -> Failure {
    Failure { status: 2, message: message.into() }
}

fn runtime(message: impl Into<String>) -> Failure {
    Failure { status: 1, message: message.into() }
}

/// Splits a --policy value at commas outside parentheses and quotes
/// (a rank expression may call functions).
fn split_policies(values: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for v in values {
        let (mut depth, mut quoted, mut start) = (0i32, false, 0);
        for (i, c) in v.char_indices() {
            match c {
                '"' => quoted = !quoted,
                '(' | '[' | '{' if !quoted => depth += 1,
                ')' | ']' | '}' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => {
                    out.push(v[start..i].trim().to_string());
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.push(v[start..].trim().to_string());
    }
    out.retain(|p| !p.is_empty());
    out
}

fn guess_format(path: &Path) -> Result<Format, Failure> {
    let mut lines = input::open(path).map_err(|e| bad(e.to_string()))?;
    while let Some(next) = lines.next() {
        let (_, text) = next.map_err(|e| bad(e.to_string()))?;
        let Ok(text) = text else { break };
        let t = text.trim();
        if t.is_empty() || t.starts_with(';') {
            continue;
        }
        let lower = t.to_ascii_lowercase();
        return Ok(if lower.contains('|') && lower.split('|').any(|f| f.trim() == "jobid") {
            Format::Sacct
        } else if lower.contains("cpu_milli") {
            Format::Alibaba
        } else {
            Format::Swf
        });
    }
    Ok(Format::Swf)
}

fn load_workload(args: &Args, trace: &Path) -> Result<Workload, Failure> {
    let rule = match args.bad_lines {
        BadLines::Skip => OnBadLine::Skip,
        BadLines::Refuse => OnBadLine::Refuse,
    };
    let format = match args.format {
        Some(f) => f,
        None => guess_format(trace)?,
    };
    let node_shape = match &args.swf_nodes {
        None => None,
        Some(s) => {
            let (c, g) =
                s.split_once(':').ok_or_else(|| bad(format!("--swf-nodes {s:?}: say CORES:GPUS, e.g. 8:2")))?;
            let parse = |v: &str| v.parse::<u32>().map_err(|_| bad(format!("--swf-nodes {s:?}: {v:?} is not a count")));
            let cores = parse(c)?;
            if cores == 0 {
                return Err(bad("--swf-nodes: a node has at least one core"));
            }
            Some(NodeShape { cores, gpus: parse(g)? })
        }
    };
    let mut w = match format {
        Format::Swf => {
            let options = SwfOptions { partition: args.partition, node_shape, limit: args.jobs };
            swf::read(trace, &options, rule)
        }
        Format::Alibaba => alibaba::read(trace, rule, args.jobs),
        Format::Sacct => sacct::read(trace, rule, args.jobs),
    }
    .map_err(|e| bad(e.to_string()))?;
    if let Some(n) = args.jobs {
        w.truncate(n);
    }
    w.rebase();
    for line in w.skipped.iter().take(10) {
        eprintln!("cder-sim: skipped {line}");
    }
    if w.skipped.len() > 10 {
        eprintln!("cder-sim: … and {} more malformed lines skipped", w.skipped.len() - 10);
    }
    if w.jobs.is_empty() {
        return Err(bad(format!(
            "{}: no job to replay ({} dropped, {} malformed)",
            trace.display(),
            w.dropped,
            w.skipped.len()
        )));
    }
    Ok(w)
}

/// A progress bar on stderr, when stderr is a terminal.
struct Bar {
    on: bool,
    label: String,
    started: Instant,
}

impl Bar {
    fn show(&self, done: usize, total: usize) {
        if !self.on || total == 0 {
            return;
        }
        let width = 30;
        let filled = done * width / total;
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\r{:<24} [{}{}] {:>3} % {done}/{total} jobs, {:.0} s",
            self.label,
            "#".repeat(filled),
            ".".repeat(width - filled),
            done * 100 / total,
            self.started.elapsed().as_secs_f64()
        );
        if done >= total {
            let _ = writeln!(err);
        }
    }
}

fn replay(args: &Args) -> Result<(), Failure> {
    let trace = args.trace.as_deref().ok_or_else(|| bad("--trace is required"))?;
    let cluster = match (&args.cluster, &args.alibaba_nodes) {
        (Some(c), _) => Cluster::load(c).map_err(bad)?,
        (None, Some(n)) => Cluster::from_alibaba(n, OnBadLine::Refuse).map_err(|e| bad(e.to_string()))?,
        (None, None) => return Err(bad("--cluster or --alibaba-nodes is required")),
    };
    let defaults = Policy::from_scheduler(&cluster.scheduler, "default").map_err(bad)?;
    let mut items = split_policies(&args.policy);
    if items.is_empty() {
        items.push(String::new());
    }
    let policies: Vec<Policy> = items
        .iter()
        .map(|i| if i.is_empty() { Ok(defaults.clone()) } else { Policy::parse(i, &defaults) })
        .collect::<Result<_, _>>()
        .map_err(bad)?;
    let w = load_workload(args, trace)?;
    let progress = !args.no_progress && std::io::stderr().is_terminal();
    if args.fill {
        let mut curves = Vec::new();
        for p in &policies {
            curves.push((p.label.clone(), fill::fill(&cluster, &w.jobs, p, args.seed, &args.fill_points)));
        }
        if args.json {
            let value: Vec<serde_json::Value> = curves
                .iter()
                .map(|(label, points)| {
                    serde_json::json!({
                        "policy": label,
                        "points": points.iter().map(|p| serde_json::json!({
                            "arrived": p.arrived, "unplaced": p.unplaced, "failed_tasks": p.failed_tasks
                        })).collect::<Vec<_>>()
                    })
                })
                .collect();
            println!("{}", serde_json::json!({ "trace": w.source, "tasks": w.jobs.len(), "fill": value }));
        } else {
            print!("{}", report::fill_table(&curves));
        }
        return Ok(());
    }
    let mut outcomes: Vec<Outcome> = Vec::new();
    for p in &policies {
        let bar = Bar { on: progress, label: p.label.clone(), started: Instant::now() };
        let o = batch::replay(&cluster, &w.jobs, p, &Recorded, args.seed, &mut |d, t| bar.show(d, t)).map_err(bad)?;
        outcomes.push(o);
    }
    let rows: Vec<_> = outcomes.iter().map(|o| o.summary(cluster.gpus())).collect();
    if args.json {
        println!("{}", report::json(&w.source, w.jobs.len(), w.skipped.len(), w.dropped, &rows));
    } else {
        println!(
            "{}: {} jobs ({} dropped, {} malformed lines skipped)",
            w.source,
            w.jobs.len(),
            w.dropped,
            w.skipped.len()
        );
        print!("{}", report::table(&rows));
    }
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir).map_err(|e| runtime(format!("{}: {e}", dir.display())))?;
        for (name, svg) in [
            ("gpu-utilisation.svg", report::utilisation_svg(&outcomes, cluster.gpus())),
            ("waits.svg", report::waits_svg(&outcomes)),
        ] {
            let svg = svg.map_err(runtime)?;
            let path = dir.join(name);
            std::fs::write(&path, svg).map_err(|e| runtime(format!("{}: {e}", path.display())))?;
        }
    }
    Ok(())
}

fn reproduce(args: &Args, seed: Seed) -> Result<(), Failure> {
    let traces = args.traces.clone().unwrap_or_else(seeds::mendonca::traces_dir);
    let text = match seed {
        Seed::Walsh => seeds::walsh::markdown(&seeds::walsh::reproduce(args.samples.unwrap_or(20))),
        Seed::Mendonca => {
            let path = traces.join(seeds::mendonca::CURIE_EXTRACT);
            let n = args.samples.map_or(seeds::mendonca::INSTANCES, |s| s as usize);
            seeds::mendonca::markdown(&seeds::mendonca::reproduce(&path, n, args.seed).map_err(bad)?)
        }
        Seed::Ravi => seeds::ravi::markdown(args.samples.unwrap_or(20)).map_err(runtime)?,
        Seed::Becchi => seeds::becchi::markdown(args.samples.unwrap_or(10)),
        Seed::Weng => {
            let (cluster, tasks) = seeds::weng::load(&traces).map_err(bad)?;
            seeds::weng::markdown(&seeds::weng::curves(&cluster, &tasks, args.samples.unwrap_or(5)).map_err(bad)?)
        }
    };
    print!("{text}");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = match args.reproduce {
        Some(seed) => reproduce(&args, seed),
        None => replay(&args),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("cder-sim: {}", f.message.replace('\n', " "));
            ExitCode::from(f.status)
        }
    }
}
