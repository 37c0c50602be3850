//! The adversary campaign (tests/src/adversary.rs) for 60 s with a fixed
//! seed: every hostile action at least once against a real SLURM and cderd
//! beside honest jobs, and no violation after any of them.
//! `cder-adversary --duration 600` runs it for long (docs/testing.md).
//! `CDER_ADVERSARY_SEED=<n>` replays another seed.

use std::time::Duration;

use cder_tests::adversary::{Action, Adversary, AdversaryConfig, STEP_START};
use cder_tests::slurm::{require_slurm, serial};

const SEED: u64 = 44_0001;

#[test]
fn no_hostile_action_breaks_the_nodes_promises() {
    if !require_slurm() || !cder_testkit::require_root("device cgroups, device files, jobs as other users") {
        return;
    }
    let _serial = serial();
    let seed = std::env::var("CDER_ADVERSARY_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED);
    eprintln!("adversary_campaign: seed {seed} (CDER_ADVERSARY_SEED={seed} to replay)");
    let config =
        AdversaryConfig { seed, duration: Duration::from_secs(60), actions: Action::ALL.to_vec(), verbose: true };
    let report = Adversary::start(config).and_then(Adversary::run).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let table = report.table();
    eprintln!("{table}");
    for action in Action::ALL {
        assert!(
            report.actions.get(&action).is_some_and(|n| *n >= 1),
            "seed {seed}: {} never ran\n{table}",
            action.name()
        );
    }
    assert!(report.jobs.0 >= 3, "seed {seed}: only {} honest jobs ran\n{table}", report.jobs.0);
    assert!(
        report.honest.get(STEP_START).is_some_and(|v| !v.is_empty()),
        "seed {seed}: no honest job step started\n{table}"
    );
    assert_eq!(report.violation_count(), 0, "seed {seed}: violations\n{table}");
}
