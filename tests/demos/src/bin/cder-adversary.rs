//! The adversary campaign (tests/src/adversary.rs): hostile actions of
//! unprivileged users — silent connections and floods on cderd's socket,
//! snooping and forged operator requests, injected SPANK options, request
//! forms and job_submit fields, `setsid` escapes, descriptors passed out of
//! a job, device files opened outside any job, writes into cgroups, a
//! never-answering FUSE mount and a process asleep in it, a forged stamp,
//! a lock-heavy process, a job name that spells facts — one at
//! a time at seeded random moments, into a real one-node SLURM with the cder
//! plugins and cderd over the fake NVML, beside an honest user's jobs and an
//! operator's requests. After each it checks that no job could open a device
//! the ledger does not give it, that every honest request answered within
//! 1 s, that every device is accounted to exactly its holders, and that no
//! hostile request got what it asked.
//!
//! ```text
//! cargo build -p cder-demos --bin cder-adversary
//! sudo target/debug/cder-adversary [--seed N] [--duration SECS] [--actions snoop,escape,...] [--quiet]
//! ```
//!
//! Prints the seed first and a table at the end, each violation with the
//! action and seed that caused it; exits 1 on any violation (or when the
//! cluster cannot start), 2 on bad arguments. Needs root.

use std::process::ExitCode;

use cder_tests::adversary::{Action, Adversary, AdversaryConfig};

const USAGE: &str = "usage: cder-adversary [--seed N] [--duration SECS] [--actions NAME,...] [--quiet]\n\
    \x20 --seed N          seed of every random choice (default: from the clock; printed first)\n\
    \x20 --duration SECS   how long to run (default 120); a run also lasts until each action ran once\n\
    \x20 --actions LIST    silent-connections, connection-flood, snoop, forged-requests, spank-injection,\n\
    \x20                   request-forms, submit-fields, escape, fd-passing, open-outside-job, cgroup-writes,\n\
    \x20                   stalled-mount, stuck-process, forged-stamp, lock-heavy, hostile-job-name,\n\
    \x20                   or all (default)\n\
    \x20 --quiet           print only the seed and the table\n\
    Hostile users: nobody (65534), whose jobs SLURM runs, and uid 4242 (no account); the honest\n\
    user is daemon (uid 1). CDER_MUTATION=<name> (debug builds) puts back a regression the\n\
    campaign must report. docs/testing.md, \"The adversary campaign\", has the tables.";

fn main() -> ExitCode {
    let names = |text: &str| Action::parse_list(text).map(|v| v.into_iter().map(Action::name).collect());
    cder_demos::campaign_main("cder-adversary", USAGE, "--actions", names, |args| {
        let actions = Action::parse_list(&args.list)?;
        // A debug build's regression put back (docs/testing.md): the campaign must report it.
        let mutation = std::env::var(cder_model::mutation::VARIABLE).ok().filter(|m| !m.is_empty());
        let config =
            AdversaryConfig { seed: args.seed, duration: args.duration, actions, verbose: !args.quiet, mutation };
        let report = Adversary::start(config).and_then(Adversary::run)?;
        Ok((report.table(), report.violation_count()))
    })
}
