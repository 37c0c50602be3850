//! The fault campaign (tests/src/campaign.rs), briefly and with a fixed
//! seed: every fault kind at least once into a real SLURM and cderd while
//! jobs run, and no violation of the node's invariants after any of them.
//! `cder-faults --duration 600` runs it for long (docs/testing.md).
//! `CDER_FAULTS_SEED=<n>` replays another seed.

use std::time::Duration;

use cder_tests::campaign::{Campaign, CampaignConfig, Fault};
use cder_tests::slurm::{require_slurm, serial};

const SEED: u64 = 35_0001;

#[test]
fn every_fault_kind_leaves_no_violation() {
    if !require_slurm() || !cder_testkit::require_root("a tmpfs for cderd's state, device cgroups") {
        return;
    }
    let _serial = serial();
    let seed = std::env::var("CDER_FAULTS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED);
    eprintln!("faults_campaign: seed {seed} (CDER_FAULTS_SEED={seed} to replay)");
    let config = CampaignConfig { seed, duration: Duration::from_secs(60), faults: Fault::ALL.to_vec(), verbose: true };
    let report = Campaign::start(config).and_then(Campaign::run).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let table = report.table();
    eprintln!("{table}");
    for fault in Fault::ALL {
        assert!(
            report.faults.get(&fault).is_some_and(|s| s.injected >= 1),
            "seed {seed}: {} was never injected\n{table}",
            fault.name()
        );
    }
    assert!(report.jobs >= 5, "seed {seed}: only {} jobs ran\n{table}", report.jobs);
    assert_eq!(report.violation_count(), 0, "seed {seed}: violations\n{table}");
}
