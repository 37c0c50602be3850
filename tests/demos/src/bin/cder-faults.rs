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

use cder_tests::campaign::{Campaign, CampaignConfig, Fault};

const USAGE: &str = "usage: cder-faults [--seed N] [--duration SECS] [--faults NAME,...] [--quiet]\n\
    \x20 --seed N          seed of every random choice (default: from the clock; printed first)\n\
    \x20 --duration SECS   how long to run (default 120); a run also lasts until each fault was injected once\n\
    \x20 --faults LIST     kill-cderd, restart-slurmd, restart-slurmctld, kill-slurmctld, full-disk, gpu-lost,\n\
    \x20                   vanish-device, clock-jump, or all (default)\n\
    \x20 --quiet           print only the seed and the table";

fn main() -> ExitCode {
    let names = |text: &str| Fault::parse_list(text).map(|v| v.into_iter().map(Fault::name).collect());
    cder_demos::campaign_main("cder-faults", USAGE, "--faults", names, |args| {
        let faults = Fault::parse_list(&args.list)?;
        let config = CampaignConfig { seed: args.seed, duration: args.duration, faults, verbose: !args.quiet };
        let report = Campaign::start(config).and_then(Campaign::run)?;
        Ok((report.table(), report.violation_count()))
    })
}
