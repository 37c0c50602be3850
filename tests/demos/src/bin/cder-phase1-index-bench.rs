//! Phase 1 from the local offer index against every other way of answering
//! it, on the grid-sized synthetic BDII of `cder-twophase-bench`
//! (`cder_tests::egi_snapshot`: 830 CREAM CEs in a top-level BDII's site
//! tree, real slapd with Debian's BDII config, loaded offline with slapadd).
//!
//! Per size (GPU carriers) and shape (keys on ComputingShares or on
//! ExecutionEnvironments, as OtherInfo or as Extensions), per JDL of a mix
//! (selective, broad, match-all with Rank, no match), four arms, each timed
//! end to end as a process, in the same run, the index already fresh:
//!
//! * `live`: `cder-jdl list-match --live` against the stock BDII config;
//! * `indexed-db`: the same against a second slapd whose config also
//!   indexes `GLUE2ExtensionKey`/`GLUE2ExtensionValue` (eq) and
//!   `GLUE2EntityOtherInfo` (eq, sub): the "just fix the database" arm;
//! * `scan`: the WMS's way: every offer of the snapshot file rebuilt in
//!   memory and every ClassAd evaluated, no candidate cut (this program
//!   re-run as `--scan`);
//! * `index`: `cder-jdl list-match`, answering from the index.
//!
//! Every arm's CEs and ranks must equal the others' (and, at 10,000 carriers
//! and below, the Python reference's, `tests/bench/twophase_reference.py`):
//! the program fails otherwise. Also printed: the refresh's time against the
//! live path's, the snapshot's size per carrier, max RSS (`/usr/bin/time`)
//! of `list-match` from the index and live, the answer's age and BDII cycle,
//! and `ldapsearch` running the live path's own searches (recorded from its
//! debug log) against the live path.
//!
//! ```text
//! cargo build --release -j 2 -p cder-jdl -p cder-demos --bin cder-jdl --bin cder-phase1-index-bench
//! target/release/cder-phase1-index-bench [--runs 7] [--carriers 10000,30000,100000]
//!     [--shapes shares-attr,shares-class,ees-attr,ees-class] [--reference-up-to 10000] [--keep-going]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cder_jdl::index::OfferIndex;
use cder_jdl::listmatch::Request;
use cder_tests::egi_snapshot::{generate, update_stats_ldif, Placement, SnapshotSpec, Strategy};
use cder_tests::ldap::{Slapd, SlapdOptions};

const PYTHON: &str = "/opt/cder-venv/bin/python";

/// The JDL mix. The generator's models: 512 MB to 16 GB, 1–64 devices per share.
const JOBS: [(&str, &str); 4] = [
    (
        "selective",
        "[ Requirements = other.GPGPUMainMemorySize >= 12000 && other.GPGPUModel == \"Tesla K40m\" && other.GPGPUTotalInstances >= 60; ]",
    ),
    ("broad", "[ Requirements = other.GPGPUVendor == \"Nvidia\" && other.GPGPUMainMemorySize >= 512; ]"),
    (
        "match-all+Rank",
        "[ Requirements = other.GPGPUTotalInstances >= 1; Rank = other.GPGPUMainMemorySize * 100 - other.GPGPUUsedInstances; ]",
    ),
    ("no-match", "[ Requirements = other.GPGPUMainMemorySize >= 40000 && other.GPGPUModel == \"A100\"; ]"),
];

/// The "just fix the database" arm's extra slapd indexes.
const DB_INDEXES: [&str; 3] = ["GLUE2ExtensionKey eq", "GLUE2ExtensionValue eq", "GLUE2EntityOtherInfo eq,sub"];

#[derive(Copy, Clone)]
struct Shape {
    name: &'static str,
    placement: Placement,
    strategy: Strategy,
}

const SHAPES: [Shape; 4] = [
    Shape { name: "shares-attr", placement: Placement::Shares, strategy: Strategy::AttributeExtension },
    Shape { name: "shares-class", placement: Placement::Shares, strategy: Strategy::ClassExtension },
    Shape { name: "ees-attr", placement: Placement::ExecutionEnvironments, strategy: Strategy::AttributeExtension },
    Shape { name: "ees-class", placement: Placement::ExecutionEnvironments, strategy: Strategy::ClassExtension },
];

impl Shape {
    fn strategy_arg(&self) -> &'static str {
        match self.strategy {
            Strategy::AttributeExtension => "attribute-extension",
            Strategy::ClassExtension => "class-extension",
        }
    }
}

struct Args {
    runs: usize,
    carriers: Vec<usize>,
    shapes: Vec<Shape>,
    reference_up_to: usize,
    /// Report arms that answer differently and go on, instead of failing.
    keep_going: bool,
    /// The arms to run (`--arms`; default the first four): leaving the live ones out profiles the index.
    arms: Vec<&'static str>,
    /// Another `cder-jdl` (`--baseline`, e.g. built at an older commit), timed in the same run.
    baseline: Option<PathBuf>,
}

/// Every arm: the four of the table; `list-match --json` and `--json --explain` from the
/// index; and, with `--baseline`, the other binary live, from its own index, and with `--json`.
const ARMS: [&str; 9] = [
    "live",
    "indexed-db",
    "scan",
    "index",
    "index-json",
    "index-json-explain",
    "live-base",
    "index-base",
    "index-json-base",
];

fn parse_args(argv: &[String]) -> Result<Args, String> {
    let mut a = Args {
        runs: 7,
        carriers: vec![10_000, 30_000, 100_000],
        shapes: SHAPES.to_vec(),
        reference_up_to: 10_000,
        keep_going: false,
        arms: ARMS[..4].to_vec(),
        baseline: None,
    };
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        let mut val = || it.next().cloned().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--runs" => a.runs = val()?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--keep-going" => a.keep_going = true,
            "--arms" => {
                a.arms = val()?
                    .split(',')
                    .map(|s| {
                        ARMS.iter()
                            .find(|x| **x == s.trim())
                            .copied()
                            .ok_or_else(|| format!("--arms {s}: one of {}", ARMS.join(", ")))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--baseline" => a.baseline = Some(PathBuf::from(val()?)),
            "--reference-up-to" => a.reference_up_to = val()?.parse().map_err(|e| format!("--reference-up-to: {e}"))?,
            "--carriers" => {
                a.carriers = val()?
                    .split(',')
                    .map(|s| s.trim().parse().map_err(|e| format!("--carriers: {e}")))
                    .collect::<Result<_, _>>()?
            }
            "--shapes" => {
                a.shapes = val()?
                    .split(',')
                    .map(|s| {
                        SHAPES.iter().find(|x| x.name == s.trim()).copied().ok_or_else(|| {
                            format!("--shapes {s}: one of shares-attr, shares-class, ees-attr, ees-class")
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => {
                println!("cder-phase1-index-bench [--runs N] [--carriers 10000,30000,100000] [--shapes shares-attr,shares-class,ees-attr,ees-class] [--reference-up-to N] [--keep-going] [--arms live,indexed-db,scan,index,index-json,index-json-explain,live-base,index-base,index-json-base] [--baseline OTHER-CDER-JDL]\ncder-phase1-index-bench --scan SNAPSHOT JOB.jdl   (the linear-scan arm, one answer)");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.runs == 0 || a.carriers.is_empty() || a.shapes.is_empty() || a.arms.is_empty() {
        return Err("--runs, --carriers, --shapes and --arms must not be empty".into());
    }
    if a.baseline.is_none() && a.arms.iter().any(|x| x.ends_with("-base")) {
        return Err("the -base arms need --baseline".into());
    }
    Ok(a)
}

/// The WMS's way over the snapshot file: every offer the job may see is
/// rebuilt and its ClassAd evaluated, no candidate cut. The job's
/// Requirements are wrapped as `(R) || false` (the same truth value), which
/// the index's planner leaves whole to the full evaluation; the answer says
/// how many offers were evaluated, and this fails unless that is all of them.
fn scan(snapshot: &Path, job: &Path) -> Result<String, String> {
    use cder_classad::ast::{BinOp, Expr};
    use cder_classad::value::Value;
    let text = std::fs::read_to_string(job).map_err(|e| format!("{}: {e}", job.display()))?;
    let mut ad = cder_classad::ClassAd::parse(&text).map_err(|e| e.to_string())?;
    let req = ad.lookup("Requirements").cloned().unwrap_or(Expr::Lit(Value::Bool(true)));
    ad.insert("Requirements", Expr::Binary(BinOp::Or, Box::new((req, Expr::Lit(Value::Bool(false))))));
    let request = Request::new(&ad, None).map_err(|e| e.to_string())?;
    let index = OfferIndex::load(snapshot).map_err(|e| e.to_string())?;
    let answer = index.list_match(&request, None, false).map_err(|e| e.to_string())?;
    if answer.candidates != answer.visible {
        return Err(format!("the scan evaluated {} of {} offers", answer.candidates, answer.visible));
    }
    eprintln!("# scan: {} offers evaluated", answer.candidates);
    let out = answer
        .result
        .matches
        .iter()
        .map(|m| format!(" - {}  {}\n", m.ce_id, cder_classad::value::format_real(m.rank)))
        .collect();
    // The process ends here: its memory is the system's to reclaim.
    std::mem::forget((index, answer));
    Ok(out)
}

/// `--serve SHAPE CARRIERS [indexed]`: one shape's snapshot in slapd (with the
/// extra indexes when asked) until standard input ends, for profiling.
fn serve(argv: &[String]) -> Result<(), String> {
    let usage = || "--serve shares-attr|shares-class|ees-attr|ees-class CARRIERS [indexed]".to_string();
    let shape = argv.first().and_then(|n| SHAPES.iter().find(|s| s.name == n.as_str())).ok_or_else(usage)?;
    let n: usize = argv.get(1).and_then(|n| n.parse().ok()).ok_or_else(usage)?;
    let (spec, ces) = spec_of(*shape, n);
    let mut snap = generate(&spec);
    snap.ldif.push_str(&update_stats_ldif(snap.entities));
    let opts = SlapdOptions { maxsize: Some(16 << 30), port: None };
    let slapd = if argv.get(2).map(String::as_str) == Some("indexed") {
        Slapd::start_preloaded_indexed(&opts, &snap.ldif, &DB_INDEXES)?
    } else {
        Slapd::start_preloaded(&opts, &snap.ldif)?
    };
    println!("{} ({ces} CEs, {} entities); end of standard input stops it", slapd.url(), snap.entities);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(())
}

/// The generator's parameters for a shape and size: 40 shares per CE, so
/// more CEs when more GPU shares are asked for than 830 CEs hold.
fn spec_of(shape: Shape, n: usize) -> (SnapshotSpec, usize) {
    let ces = match shape.placement {
        Placement::Shares => n.div_ceil(40).max(830),
        Placement::ExecutionEnvironments => 830,
    };
    let spec = SnapshotSpec {
        ces,
        gpu_shares: n,
        placement: shape.placement,
        site_tree: true,
        ..SnapshotSpec::thesis(shape.strategy)
    };
    (spec, ces)
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// `(CE, rank)` lines of a `list-match` text answer, best first.
fn answer_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.strip_prefix(" - "))
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_string(), w.next().unwrap_or_default().to_string()))
        })
        .collect()
}

/// The `(CE, rank)` lines of a `list-match --json` answer, as the text answer writes them.
fn json_answer_lines(text: &str) -> Vec<(String, String)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else { return Vec::new() };
    let matches = v["matches"].as_array().cloned().unwrap_or_default();
    let rank = |m: &serde_json::Value| m["rank"].as_f64().unwrap_or(f64::NAN);
    matches
        .iter()
        .map(|m| (m["ce"].as_str().unwrap_or_default().to_string(), cder_classad::value::format_real(rank(m))))
        .collect()
}

/// An arm's answer: its name, its `(CE, rank)` lines and its standard error.
type Answer<'a> = (&'a str, Vec<(String, String)>, String);

/// Runs a command; a `list-match` that found nothing exits 1 and says so.
/// Returns the time, standard output and standard error.
fn run_timed(cmd: &mut Command) -> Result<(Duration, String, String), String> {
    let t = Instant::now();
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    let d = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let no_match = stdout.contains("No CE matches") || (out.status.code() == Some(1) && stdout.starts_with('{'));
    if !out.status.success() && !no_match {
        return Err(format!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok((d, stdout, String::from_utf8_lossy(&out.stderr).into_owned()))
}

/// [`run_timed`], once more when the first try fails: a failure is printed, never hidden.
fn run_retried(cmd: &mut Command) -> Result<(Duration, String, String), String> {
    run_timed(cmd).or_else(|e| {
        println!("  (a run failed and was repeated: {})", e.lines().last().unwrap_or_default());
        run_timed(cmd)
    })
}

/// Max RSS in KiB of one run of `cmd` under `/usr/bin/time`.
fn max_rss(cmd: &Command) -> Result<u64, String> {
    let mut t = Command::new("/usr/bin/time");
    t.arg("-f").arg("#maxrss %M").arg(cmd.get_program()).args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => t.env(k, v),
            None => t.env_remove(k),
        };
    }
    let out = t.stdin(Stdio::null()).output().map_err(|e| format!("/usr/bin/time: {e}"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines()
        .filter_map(|l| l.strip_prefix("#maxrss "))
        .next_back()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no max RSS from /usr/bin/time: {err}"))
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn du(path: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(path) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => du(&e.path()),
            // Blocks in use: mdb's map files are sparse, sized to maxsize.
            _ => e.metadata().map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512).unwrap_or(0),
        })
        .sum()
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--scan") {
        match argv
            .get(1)
            .zip(argv.get(2))
            .ok_or_else(|| "--scan SNAPSHOT JOB.jdl".to_string())
            .and_then(|(s, j)| scan(Path::new(s), Path::new(j)))
        {
            Ok(out) => {
                print!("{out}");
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("cder-phase1-index-bench --scan: {e}");
                std::process::exit(1);
            }
        }
    }
    if argv.first().map(String::as_str) == Some("--serve") {
        if let Err(e) = serve(&argv[1..]) {
            eprintln!("cder-phase1-index-bench --serve: {e}");
            std::process::exit(1);
        }
        return;
    }
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("cder-phase1-index-bench: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = real_main(&args) {
        eprintln!("cder-phase1-index-bench: {e}");
        std::process::exit(1);
    }
}

/// What every measurement uses.
struct Tools {
    cder_jdl: PathBuf,
    me: PathBuf,
    reference: PathBuf,
    work: tempfile::TempDir,
    jobs: Vec<(&'static str, PathBuf)>,
}

fn real_main(args: &Args) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let cder_jdl = cder_testkit::workspace_binary("cder-jdl", "cder-jdl")?;
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/twophase_reference.py");
    for p in [
        Path::new(PYTHON),
        reference.as_path(),
        Path::new("/usr/sbin/slapd"),
        Path::new("/usr/sbin/slapadd"),
        Path::new("/usr/bin/ldapsearch"),
        Path::new("/usr/bin/time"),
    ] {
        if !p.exists() {
            return Err(format!("{} is missing (deploy/install-deps.sh)", p.display()));
        }
    }
    let work = tempfile::Builder::new().prefix("cder-index-bench-").tempdir().map_err(|e| e.to_string())?;
    let mut jobs = Vec::new();
    for (name, text) in JOBS {
        let p = work.path().join(format!("{}.jdl", name.replace('+', "-")));
        std::fs::write(&p, text).map_err(|e| e.to_string())?;
        jobs.push((name, p));
    }
    let tools = Tools { cder_jdl, me, reference, work, jobs };
    println!(
        "host: {} CPUs, load average {}; runs per arm: {} (p50/p90 in ms, arms interleaved per run)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load(),
        args.runs
    );
    for &n in &args.carriers {
        for shape in &args.shapes {
            measure(args, &tools, n, *shape)?;
        }
    }
    Ok(())
}

/// The live path's searches, from its debug log: (base, scope, filter, attributes, paged).
fn recorded_searches(log: &str) -> Vec<(String, String, String, Vec<String>, bool)> {
    let field = |l: &str, k: &str| -> Option<String> {
        let at = l.find(&format!(" {k}="))? + k.len() + 2;
        let rest = &l[at..];
        if let Some(q) = rest.strip_prefix('"') {
            // Debug-quoted: ends at the first unescaped quote.
            let mut out = String::new();
            let mut esc = false;
            for c in q.chars() {
                match (esc, c) {
                    (false, '\\') => esc = true,
                    (false, '"') => return Some(out),
                    (_, c) => {
                        esc = false;
                        out.push(c)
                    }
                }
            }
            None
        } else {
            Some(rest.split_whitespace().next()?.to_string())
        }
    };
    log.lines()
        .filter(|l| l.contains(" search ") || l.ends_with(" search"))
        .filter_map(|l| {
            let base = field(l, "base")?;
            let scope = match field(l, "scope")?.as_str() {
                "Subtree" => "sub",
                "OneLevel" => "one",
                _ => "base",
            };
            let filter = field(l, "filter")?;
            let attrs = field(l, "attrs").unwrap_or_default().split_whitespace().map(str::to_string).collect();
            let paged = field(l, "paged").as_deref() == Some("true");
            Some((base, scope.to_string(), filter, attrs, paged))
        })
        .collect()
}

/// `ldapsearch` running `searches` as the live path does: the discovery scans
/// (paged) all at once, then the per-service searches, 8 processes at a time.
fn ldapsearch_replay(url: &str, searches: &[(String, String, String, Vec<String>, bool)]) -> Result<Duration, String> {
    let cmd = |s: &(String, String, String, Vec<String>, bool)| {
        let mut c = Command::new("/usr/bin/ldapsearch");
        c.args(["-x", "-LLL", "-o", "ldif_wrap=no", "-H", url, "-b", &s.0, "-s", &s.1]);
        if s.4 {
            c.arg("-E").arg(format!("pr={}/noprompt", cder_jdl::bdii::query::PAGE_SIZE));
        }
        c.arg(&s.2).args(&s.3).stdout(Stdio::null()).stderr(Stdio::piped()).stdin(Stdio::null());
        c
    };
    let t = Instant::now();
    let (scans, rest): (Vec<_>, Vec<_>) = searches.iter().partition(|s| s.4);
    let wait = |mut children: Vec<std::process::Child>| -> Result<(), String> {
        for c in children.iter_mut() {
            let st = c.wait().map_err(|e| e.to_string())?;
            // 32: no such object (a GLUE 1.3 base that is not there), as the live path allows.
            if !st.success() && st.code() != Some(32) {
                return Err(format!("ldapsearch failed: {st}"));
            }
        }
        Ok(())
    };
    wait(scans.iter().map(|s| cmd(s).spawn().map_err(|e| e.to_string())).collect::<Result<_, _>>()?)?;
    for chunk in rest.chunks(8) {
        wait(chunk.iter().map(|s| cmd(s).spawn().map_err(|e| e.to_string())).collect::<Result<_, _>>()?)?;
    }
    Ok(t.elapsed())
}

fn measure(args: &Args, tools: &Tools, n: usize, shape: Shape) -> Result<(), String> {
    let (spec, ces) = spec_of(shape, n);
    let t = Instant::now();
    let mut snap = generate(&spec);
    snap.ldif.push_str(&update_stats_ldif(snap.entities));
    let generated = t.elapsed();
    let opts = SlapdOptions { maxsize: Some(16 << 30), port: None };
    let t = Instant::now();
    let stock = Slapd::start_preloaded(&opts, &snap.ldif)?;
    let loaded = t.elapsed();
    let t = Instant::now();
    let fixed = Slapd::start_preloaded_indexed(&opts, &snap.ldif, &DB_INDEXES)?;
    let loaded_fixed = t.elapsed();
    let ldif_mb = snap.ldif.len() as f64 / 1e6;
    drop(std::mem::take(&mut snap.ldif));
    let (db, db_fixed) = (du(stock.dir()), du(fixed.dir()));
    println!(
        "\n## {} carriers, {} ({} CEs, {} GLUE 2.0 entities, {} GPU offers in the generator's record): generate {:.1} s ({ldif_mb:.0} MB LDIF), slapadd stock {:.1} s ({} MB), slapadd with the extra indexes {:.1} s ({} MB); load {}",
        n,
        shape.name,
        ces,
        snap.entities,
        snap.gpu.len(),
        generated.as_secs_f64(),
        loaded.as_secs_f64(),
        db >> 20,
        loaded_fixed.as_secs_f64(),
        db_fixed >> 20,
        load()
    );

    // The index, fresh: refreshed once (timed) from the stock slapd.
    let cache = tools.work.path().join(format!("cache-{n}-{}", shape.name));
    std::fs::create_dir_all(&cache).map_err(|e| e.to_string())?;
    let mut refresh = Command::new(&tools.cder_jdl);
    refresh.args(["index", "refresh", "--force", "--bdii", &stock.url(), "--index-dir"]).arg(&cache);
    let mut t_refresh = Vec::new();
    let mut refreshed = String::new();
    for _ in 0..args.runs.div_ceil(3) {
        let (d, out, _) = run_timed(&mut refresh)?;
        t_refresh.push(d);
        refreshed = out;
    }
    let snapshot = std::fs::read_dir(&cache)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cdx"))
        .ok_or_else(|| format!("no snapshot in {} after the refresh: {refreshed}", cache.display()))?;
    let size = std::fs::metadata(&snapshot).map_err(|e| format!("{}: {e}", snapshot.display()))?.len();
    println!("  refresh: {}", refreshed.trim());
    // The baseline's own index, refreshed by it from the same slapd.
    let base_cache = tools.work.path().join(format!("cache-base-{n}-{}", shape.name));
    if let Some(base) = &args.baseline {
        std::fs::create_dir_all(&base_cache).map_err(|e| e.to_string())?;
        let mut refresh = Command::new(base);
        refresh.args(["index", "refresh", "--force", "--bdii", &stock.url(), "--index-dir"]).arg(&base_cache);
        let (d, out, _) = run_timed(&mut refresh)?;
        println!("  baseline refresh ({} ms): {}", ms(d), out.trim());
    }

    for (job_name, job) in &tools.jobs {
        let live = |url: &str| {
            let mut c = Command::new(&tools.cder_jdl);
            c.args(["list-match", "--live", "--bdii", url, "--strategy", shape.strategy_arg()])
                .arg(job)
                .env_remove("LCG_GFAL_INFOSYS");
            c
        };
        let mut arms: Vec<(&str, Command)> = vec![("live", live(&stock.url())), ("indexed-db", live(&fixed.url()))];
        let mut c = Command::new(&tools.me);
        c.arg("--scan").arg(&snapshot).arg(job);
        arms.push(("scan", c));
        let from_index = |jdl: &Path, cache: &Path, extra: &[&str]| {
            let mut c = Command::new(jdl);
            c.args(["list-match", "--bdii", &stock.url(), "--index-dir"]).arg(cache).args(extra).arg(job);
            c
        };
        arms.push(("index", from_index(&tools.cder_jdl, &cache, &[])));
        arms.push(("index-json", from_index(&tools.cder_jdl, &cache, &["--json"])));
        arms.push(("index-json-explain", from_index(&tools.cder_jdl, &cache, &["--json", "--explain"])));
        if let Some(base) = &args.baseline {
            let mut c = Command::new(base);
            c.args(["list-match", "--live", "--bdii", &stock.url(), "--strategy", shape.strategy_arg()])
                .arg(job)
                .env_remove("LCG_GFAL_INFOSYS");
            arms.push(("live-base", c));
            arms.push(("index-base", from_index(base, &base_cache, &[])));
            arms.push(("index-json-base", from_index(base, &base_cache, &["--json"])));
        }
        arms.retain(|(name, _)| args.arms.contains(name));

        // Warm-up, and every arm's answer checked against the others'.
        let mut answers: Vec<Answer> = Vec::new();
        for (name, cmd) in arms.iter_mut() {
            let (_, out, err) = run_retried(cmd)?;
            let lines = if name.contains("json") { json_answer_lines(&out) } else { answer_lines(&out) };
            answers.push((name, lines, err));
        }
        let mut differs = Vec::new();
        for (name, lines, _) in &answers[1..] {
            if *lines != answers[0].1 {
                // The first line that differs, with its neighbours.
                let at = lines
                    .iter()
                    .zip(&answers[0].1)
                    .position(|(a, b)| a != b)
                    .unwrap_or(lines.len().min(answers[0].1.len()));
                let around =
                    |v: &[(String, String)]| v.iter().skip(at.saturating_sub(1)).take(3).cloned().collect::<Vec<_>>();
                let what = format!(
                    "{n} carriers, {}, {job_name}: arm {name} answered {} CEs, arm {} {}; first difference at line {at}: {:?} vs {:?}",
                    shape.name,
                    lines.len(),
                    answers[0].0,
                    answers[0].1.len(),
                    around(lines),
                    around(&answers[0].1)
                );
                if !args.keep_going {
                    return Err(what);
                }
                println!("  DIFFERS: {what}");
                differs.push(*name);
            }
        }
        let ces: Vec<&String> = answers[0].1.iter().map(|(ce, _)| ce).collect();
        let mut oracle = "not run".to_string();
        if n <= args.reference_up_to {
            let out = Command::new(PYTHON)
                .arg(&tools.reference)
                .args([&stock.url(), shape.strategy_arg()])
                .arg(job)
                .output()
                .map_err(|e| format!("{PYTHON}: {e}"))?;
            if !out.status.success() {
                return Err(format!("reference failed: {}", String::from_utf8_lossy(&out.stderr)));
            }
            let text = String::from_utf8_lossy(&out.stdout);
            let theirs: Vec<&str> =
                text.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_whitespace().next()).collect();
            let ours: Vec<&str> = ces.iter().map(|s| s.as_str()).collect();
            // The reference ranks ties in its own order: compare sets, and the order where ranks differ.
            let (mut a, mut b) = (ours.clone(), theirs.clone());
            a.sort();
            b.sort();
            if a != b {
                return Err(format!(
                    "{n} carriers, {}, {job_name}: cder found {} CEs, the Python reference {}",
                    shape.name,
                    ours.len(),
                    theirs.len()
                ));
            }
            oracle = format!("agrees ({} CEs)", theirs.len());
        }
        if !differs.is_empty() {
            oracle = format!("{oracle}; DIFFERS: {}", differs.join(", "));
        }
        // What the index arm says of its data (standard error): age and BDII cycle.
        let age = answers
            .iter()
            .find(|a| a.0 == "index")
            .and_then(|a| a.2.lines().find(|l| !l.trim().is_empty()).map(str::to_string));

        let mut times: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
        for _ in 0..args.runs {
            for (name, cmd) in arms.iter_mut() {
                times.entry(name).or_default().push(run_retried(cmd)?.0);
            }
        }
        // An arm left out (`--arms`) prints a dash.
        let p50 = |a: &str| times.get(a).map(|t| pct(t, 0.5));
        let p90 = |a: &str| times.get(a).map(|t| pct(t, 0.9));
        let cell = |a: &str| match (p50(a), p90(a)) {
            (Some(x), Some(y)) => format!("{} / {}", ms(x), ms(y)),
            _ => "—".to_string(),
        };
        let ratio = |a: &str| match (p50(a), p50("index")) {
            (Some(x), Some(i)) => format!("{:.0}×", x.as_secs_f64() / i.as_secs_f64()),
            _ => "—".to_string(),
        };
        println!(
            "| {n} | {} | {job_name} | {} | {} | {} | {} | **{}** | {} | {} | {} | {oracle} |",
            shape.name,
            ces.len(),
            cell("live"),
            cell("indexed-db"),
            cell("scan"),
            cell("index"),
            ratio("live"),
            ratio("indexed-db"),
            ratio("scan"),
        );
        let extra: Vec<String> =
            ARMS[4..].iter().filter(|a| times.contains_key(**a)).map(|a| format!("{a} {}", cell(a))).collect();
        if !extra.is_empty() {
            let vs = |a: &str, b: &str| match (p50(a), p50(b)) {
                (Some(x), Some(y)) => format!(" {a} / {b} {:.2}×;", x.as_secs_f64() / y.as_secs_f64()),
                _ => String::new(),
            };
            println!(
                "  also (p50 / p90 ms): {};{}{}{}{}{}",
                extra.join("; "),
                vs("index-json", "index"),
                vs("index-json-explain", "index"),
                vs("live", "live-base"),
                vs("index", "index-base"),
                vs("index-json", "index-json-base"),
            );
        }
        if let Some(age) = age {
            println!("  index answer: {}", age.trim());
        }
        let arm = |name: &str| arms.iter().position(|a| a.0 == name);
        if *job_name == "broad" && arm("live").is_none() {
            let rss = |name: &str| -> Result<String, String> {
                Ok(match arm(name) {
                    Some(k) => format!("{:.1} MiB", max_rss(&arms[k].1)? as f64 / 1024.0),
                    None => "—".into(),
                })
            };
            println!(
                "  refresh p50 {} ms; snapshot {} bytes = {:.0} bytes per carrier; max RSS: index {}, scan {}; load {}",
                ms(pct(&t_refresh, 0.5)),
                size,
                size as f64 / n as f64,
                rss("index")?,
                rss("scan")?,
                load()
            );
        }
        if *job_name == "broad" && ARMS[..4].iter().all(|a| arm(a).is_some()) {
            // Live against ldapsearch running the live path's own searches; RSS; refresh.
            let mut debug = live(&stock.url());
            debug.env("CDER_LOG", "debug").env("NO_COLOR", "1");
            let out = debug.stdin(Stdio::null()).output().map_err(|e| e.to_string())?;
            let searches = recorded_searches(&String::from_utf8_lossy(&out.stderr));
            if searches.is_empty() {
                return Err("no searches in the live path's debug log".into());
            }
            // The same number of ldapsearch processes, each a base search of the root DSE:
            // what starting them costs, taken off the replay's time.
            let empty: Vec<_> = searches
                .iter()
                .map(|s| {
                    (String::new(), "base".to_string(), "(objectClass=*)".to_string(), vec!["1.1".to_string()], s.4)
                })
                .collect();
            // Starting hundreds of processes costs more than the searches: each replay is paired
            // with an empty one just before it, and the median of the pairs' differences taken.
            let mut t_ls = Vec::new();
            let mut t_empty = Vec::new();
            let mut t_net = Vec::new();
            let mut t_live = Vec::new();
            for _ in 0..args.runs.max(5) {
                let e = ldapsearch_replay(&stock.url(), &empty)?;
                let l = ldapsearch_replay(&stock.url(), &searches)?;
                t_empty.push(e);
                t_ls.push(l);
                t_net.push(l.saturating_sub(e));
                t_live.push(run_retried(&mut arms[0].1)?.0);
            }
            let scans = searches.iter().filter(|s| s.4).count();
            let (ls, le, lv, net) = (pct(&t_ls, 0.5), pct(&t_empty, 0.5), pct(&t_live, 0.5), pct(&t_net, 0.5));
            println!(
                "  live vs ldapsearch, the same {} searches ({scans} paged scans at once, then the rest 8 processes at a time), {} pairs: live p50 {} ms; ldapsearch p50 {} ms, starting {} processes p50 {} ms, net p50 {} ms (min {} max {}): live / net {:.2}× (target <= 1.5×)",
                searches.len(),
                t_net.len(),
                ms(lv),
                ms(ls),
                searches.len(),
                ms(le),
                ms(net),
                ms(pct(&t_net, 0.0)),
                ms(pct(&t_net, 1.0)),
                lv.as_secs_f64() / net.as_secs_f64().max(1e-6)
            );
            let rss_index = max_rss(&arms[3].1)?;
            let rss_live = max_rss(&arms[0].1)?;
            let rss_scan = max_rss(&arms[2].1)?;
            println!(
                "  refresh p50 {} ms (live broad p50 {} ms: {:.1}×); snapshot {} bytes = {:.0} bytes per carrier; max RSS: index {:.1} MiB, scan {:.1} MiB, live {:.1} MiB; load {}",
                ms(pct(&t_refresh, 0.5)),
                ms(p50("live").unwrap_or_default()),
                pct(&t_refresh, 0.5).as_secs_f64() / p50("live").unwrap_or_default().as_secs_f64(),
                size,
                size as f64 / n as f64,
                rss_index as f64 / 1024.0,
                rss_scan as f64 / 1024.0,
                rss_live as f64 / 1024.0,
                load()
            );
        }
    }
    drop(stock);
    drop(fixed);
    Ok(())
}
