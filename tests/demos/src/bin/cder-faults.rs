//! The fault campaign (tests/src/campaign.rs): faults injected one at a
//! time at seeded random moments — `kill -9` of cderd, slurmd and
//! slurmctld, a restart of slurmctld, cderd's state file system filling
//! up, a GPU falling off the bus — into a real one-node SLURM with the cder plugins and cderd over
//! the fake NVML, while a mixed-job workload runs; after each fault it
//! checks for lost allocations, devices two running jobs can open, leaked
//! cgroups, devices or processes, and daemons that do not answer in time.
//!
//! ```text
//! cargo build -p cder-demos --bin cder-faults
//! sudo target/debug/cder-faults [--seed N] [--duration SECS] [--faults kill-cderd,restart-slurmd,...] [--quiet]
//! ```
//!
//! Prints the seed first and a table at the end; exits 1 on any violation
//! (or when the cluster cannot start), 2 on bad arguments. Needs root.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cder_tests::campaign::{Campaign, CampaignConfig, Fault};
use cder_tests::slurm::require_slurm;

const USAGE: &str = "usage: cder-faults [--seed N] [--duration SECS] [--faults NAME,...] [--quiet]\n\
    \x20 --seed N          seed of every random choice (default: from the clock; printed first)\n\
    \x20 --duration SECS   how long to run (default 120); a run also lasts until each fault was injected once\n\
    \x20 --faults LIST     kill-cderd, restart-slurmd, restart-slurmctld, kill-slurmctld, full-disk, gpu-lost, or all (default)\n\
    \x20 --quiet           print only the seed and the table";

fn parse(args: &[String]) -> Result<CampaignConfig, String> {
    let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1) % 1_000_000_007;
    let mut config =
        CampaignConfig { seed, duration: Duration::from_secs(120), faults: Fault::ALL.to_vec(), verbose: true };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value =
            |name: &str| inline.clone().or_else(|| it.next().cloned()).ok_or(format!("{name} needs a value"));
        match key {
            "--seed" => {
                let v = value("--seed")?;
                config.seed = v.parse().map_err(|_| format!("--seed {v:?}: not a whole number"))?;
            }
            "--duration" => {
                let v = value("--duration")?;
                let s: u64 = v.parse().map_err(|_| format!("--duration {v:?}: not a whole number of seconds"))?;
                if s == 0 {
                    return Err("--duration must be at least 1 second".into());
                }
                config.duration = Duration::from_secs(s);
            }
            "--faults" => {
                config.faults = Fault::parse_list(&value("--faults")?).map_err(|e| format!("--faults: {e}"))?
            }
            "--quiet" => config.verbose = false,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(config)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match parse(&args) {
        Ok(c) => c,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cder-faults: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let names: Vec<&str> = config.faults.iter().map(|f| f.name()).collect();
    println!(
        "cder-faults: seed {} (replay: cder-faults --seed {} --duration {} --faults {})",
        config.seed,
        config.seed,
        config.duration.as_secs(),
        names.join(",")
    );
    if !cder_testkit::is_root() {
        eprintln!("cder-faults: needs root (a tmpfs for cderd's state, device cgroups, jobs as nobody)");
        return ExitCode::from(1);
    }
    if !require_slurm() {
        return ExitCode::from(1);
    }
    let report = match Campaign::start(config).and_then(Campaign::run) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cder-faults: {e}");
            return ExitCode::from(1);
        }
    };
    print!("{}", report.table());
    if report.violation_count() > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
