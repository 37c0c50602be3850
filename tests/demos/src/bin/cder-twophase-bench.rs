//! The thesis's Table 3.4 experiment at its scale: phase 1 (`list-match`)
//! against a BDII (real slapd, Debian's BDII config with its stock indexes,
//! GLUE schemas) holding a synthetic EGI-like snapshot of more than 10^5
//! GLUE 2.0 entities in a top-level BDII's site tree, of which 100 (and
//! again 10,000) carry the 12 GPU keys: on ComputingShares or on
//! ExecutionEnvironments (where `cder-glue-provider` puts them), as
//! OtherInfo or as Extension children — every placement a real BDII holds.
//!
//! Timed end to end (retrieval, offers, match, rank, output):
//! * `cder-jdl list-match` as a process (the binary next to this one);
//! * the same through the library, in process;
//! * the reference: the thesis prototype's way, Python with ldap3 and
//!   HTCondor's classad2 (tests/bench/twophase_reference.py), as a process,
//!   and its own work time without interpreter start-up and imports.
//!
//! Both must find the same CEs in the same order (the job ranks by device
//! memory). Prints medians and the ratios; targets: at most 0.1 s end to end
//! with 100 GPU carriers, 0.5 s with 10,000, always faster than the reference.
//!
//! ```text
//! cargo build --release -j 2 -p cder-jdl -p cder-tests --bin cder-jdl --bin cder-twophase-bench
//! target/release/cder-twophase-bench [--runs 10] [--gpu-shares 100,10000] [--ces 830] [--placements shares,ees]
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_jdl::bdii::{build_offers, Bdii, QueryOptions, Strategies};
use cder_jdl::listmatch::{list_match, Request};
use cder_tests::egi_snapshot::{generate, Placement, SnapshotSpec, Strategy};
use cder_tests::ldap::{Slapd, SlapdOptions};

const JOB: &str = "[\n  Requirements = other.GPGPUVendor == \"Nvidia\" && (other.GPGPUMainMemorySize >= 512);\n  Rank = other.GPGPUMainMemorySize;\n]\n";
const PYTHON: &str = "/opt/cder-venv/bin/python";

struct Args {
    /// Only load a snapshot and serve it until killed (for profiling).
    serve: Option<Strategy>,
    runs: usize,
    gpu_shares: Vec<usize>,
    ces: usize,
    placements: Vec<Placement>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        serve: None,
        runs: 10,
        gpu_shares: vec![100, 10_000],
        ces: SnapshotSpec::thesis(Strategy::AttributeExtension).ces,
        placements: vec![Placement::Shares, Placement::ExecutionEnvironments],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--runs" => a.runs = val()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--serve" => {
                a.serve = Some(match val()?.as_str() {
                    "attribute-extension" => Strategy::AttributeExtension,
                    "class-extension" => Strategy::ClassExtension,
                    other => return Err(format!("--serve {other}: attribute-extension or class-extension")),
                })
            }
            "--ces" => a.ces = val()?.parse().map_err(|e| format!("--ces: {e}"))?,
            "--gpu-shares" => {
                a.gpu_shares = val()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--gpu-shares: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--placements" => {
                a.placements = val()?
                    .split(',')
                    .map(|p| match p.trim() {
                        "shares" => Ok(Placement::Shares),
                        "ees" => Ok(Placement::ExecutionEnvironments),
                        other => Err(format!("--placements {other}: shares or ees")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => {
                println!("cder-twophase-bench [--runs N] [--gpu-shares 100,10000] [--ces 830] [--placements shares,ees] [--serve STRATEGY]\nTimes cder-jdl list-match against the thesis-style Python reference on a synthetic EGI snapshot in a real slapd.");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    Ok(a)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// CE ids from `list-match` text output (` - <ce>  <rank>` lines), best first.
fn cder_ces(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(" - "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// CE ids (best first) and the work time from the reference's output.
fn reference_ces(text: &str) -> (Vec<String>, Option<f64>) {
    let mut work = None;
    let mut ces = Vec::new();
    for l in text.lines() {
        if let Some(t) = l.strip_prefix("#work_seconds ") {
            work = t.trim().parse().ok();
        } else if let Some(ce) = l.split_whitespace().next() {
            ces.push(ce.to_string());
        }
    }
    (ces, work)
}

fn run_timed(cmd: &mut Command) -> Result<(Duration, String), String> {
    let t = Instant::now();
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let d = t.elapsed();
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok((d, String::from_utf8_lossy(&out.stdout).into_owned()))
}

fn in_process(url: &str, strategy: Strategy, request: &Request) -> Result<(Duration, usize), String> {
    let t = Instant::now();
    let mut opts = QueryOptions::new(url);
    opts.strategies = Strategies {
        attribute_extension: strategy == Strategy::AttributeExtension,
        class_extension: strategy == Strategy::ClassExtension,
        glue13: false,
    };
    let prefixes = vec!["GPGPU".to_string()];
    let wanted = request.wanted(&prefixes, None);
    let mut bdii = Bdii::connect(&opts).map_err(|e| e.to_string())?;
    let snap = bdii.fetch(&wanted).map_err(|e| e.to_string())?;
    let offers = build_offers(&snap, &prefixes, None);
    let res = list_match(request, &offers.offers, false);
    let text: String = res.matches.iter().map(|m| format!(" - {}  {}\n", m.ce_id, m.rank)).collect();
    std::hint::black_box(&text);
    Ok((t.elapsed(), res.matches.len()))
}

fn main() {
    if let Err(e) = real_main() {
        eprintln!("cder-twophase-bench: {e}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<(), String> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cder-twophase-bench: {e}");
            std::process::exit(2);
        }
    };
    if let Some(strategy) = args.serve {
        let spec = SnapshotSpec {
            ces: args.ces,
            gpu_shares: args.gpu_shares[0],
            placement: args.placements[0],
            site_tree: true,
            ..SnapshotSpec::thesis(strategy)
        };
        let snap = generate(&spec);
        let slapd = Slapd::start_preloaded(&SlapdOptions { maxsize: Some(4 << 30), port: None }, &snap.ldif)?;
        println!("{} ({} entities); end of standard input (Enter, Ctrl-D) stops it", slapd.url(), snap.entities);
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        drop(slapd);
        return Ok(());
    }
    let cder_jdl = cder_testkit::workspace_binary("cder-jdl", "cder-jdl")?;
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/twophase_reference.py");
    for p in [Path::new(PYTHON), reference.as_path(), Path::new("/usr/sbin/slapd"), Path::new("/usr/sbin/slapadd")] {
        if !p.exists() {
            return Err(format!("{} is missing (deploy/install-deps.sh)", p.display()));
        }
    }
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let job = work.path().join("job.jdl");
    std::fs::write(&job, JOB).map_err(|e| e.to_string())?;
    let request = Request::new(&cder_classad::ClassAd::parse(JOB).map_err(|e| e.to_string())?, None)
        .map_err(|e| e.to_string())?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "host: {} CPUs, load average {}; runs per measurement: {} (medians)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        args.runs
    );
    println!(
        "| placement | strategy | GPU carriers | GLUE 2.0 entities | setup (generate + slapadd) | matching CEs | cder-jdl list-match (process) | cder library (in process) | reference Python ldap3+classad2 (process) | reference work time | ratio process | ratio work/library |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &gpu in &args.gpu_shares {
        for &placement in &args.placements {
            for strategy in [Strategy::AttributeExtension, Strategy::ClassExtension] {
                measure(
                    &args,
                    gpu,
                    placement,
                    strategy,
                    &Setup { cder_jdl: &cder_jdl, reference: &reference, job: &job, request: &request },
                )?;
            }
        }
    }
    println!("thesis Table 3.4 (100 GPU shares): attribute-extension 1.26 s, class-extension 1.31 s; targets for cder: <= 0.1 s with 100 GPU carriers, <= 0.5 s with 10,000, every placement and strategy");
    Ok(())
}

/// One row: a snapshot of one shape in its own slapd, both sides timed.
/// What every row uses.
struct Setup<'a> {
    cder_jdl: &'a Path,
    reference: &'a Path,
    job: &'a Path,
    request: &'a Request,
}

fn measure(args: &Args, gpu: usize, placement: Placement, strategy: Strategy, setup_: &Setup) -> Result<(), String> {
    let Setup { cder_jdl, reference, job, request } = *setup_;
    let name = if strategy == Strategy::AttributeExtension { "attribute-extension" } else { "class-extension" };
    let where_ = if placement == Placement::Shares { "ComputingShares" } else { "ExecutionEnvironments" };
    let t = Instant::now();
    let spec =
        SnapshotSpec { ces: args.ces, gpu_shares: gpu, placement, site_tree: true, ..SnapshotSpec::thesis(strategy) };
    let snap = generate(&spec);
    let slapd = Slapd::start_preloaded(&SlapdOptions { maxsize: Some(4 << 30), port: None }, &snap.ldif)?;
    let setup = t.elapsed();
    let url = slapd.url();
    let runs = if gpu > 1000 { args.runs.div_ceil(3).max(1) } else { args.runs };

    let mut cmd_cder = Command::new(cder_jdl);
    // The live path: the BDII asked on every run, as the reference does.
    cmd_cder.args(["list-match", "--live", "--bdii", &url, "--strategy", name]).arg(job).env_remove("LCG_GFAL_INFOSYS");
    let mut cmd_ref = Command::new(PYTHON);
    cmd_ref.arg(reference).args([&url, name]).arg(job);
    // Warm-up: the first search pages the database into memory for both.
    let (_, cder_out) = run_timed(&mut cmd_cder)?;
    let (_, ref_out) = run_timed(&mut cmd_ref)?;
    let ours = cder_ces(&cder_out);
    let (theirs, _) = reference_ces(&ref_out);
    if ours != theirs || ours.is_empty() {
        let (a, b): (BTreeSet<&String>, BTreeSet<&String>) = (ours.iter().collect(), theirs.iter().collect());
        return Err(format!(
            "{where_} {name}, {gpu} GPU carriers: cder found {} CEs, the reference {} (or another order); first differences: {:?}",
            ours.len(),
            theirs.len(),
            a.symmetric_difference(&b).take(5).collect::<Vec<_>>()
        ));
    }
    let mut t_cder = Vec::new();
    let mut t_lib = Vec::new();
    let mut t_ref = Vec::new();
    let mut t_work = Vec::new();
    for _ in 0..runs {
        t_cder.push(run_timed(&mut cmd_cder)?.0);
        let (d, n) = in_process(&url, strategy, request)?;
        if n != ours.len() {
            return Err(format!("library found {n} CEs, the binary {}", ours.len()));
        }
        t_lib.push(d);
        let (d, out) = run_timed(&mut cmd_ref)?;
        t_ref.push(d);
        if let Some(w) = reference_ces(&out).1 {
            t_work.push(Duration::from_secs_f64(w));
        }
    }
    let (c, l, r) = (median(t_cder), median(t_lib), median(t_ref));
    let w = if t_work.is_empty() { Duration::ZERO } else { median(t_work) };
    println!(
        "| {where_} | {name} | {gpu} | {} | {:.1} s | {} | {} | {} | {} | {} | {:.1}× | {:.1}× |",
        snap.entities,
        setup.as_secs_f64(),
        ours.len(),
        ms(c),
        ms(l),
        ms(r),
        ms(w),
        r.as_secs_f64() / c.as_secs_f64(),
        w.as_secs_f64() / l.as_secs_f64(),
    );
    Ok(())
}
