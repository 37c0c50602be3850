//! The adversary campaign (tests/src/adversary.rs) for 60 s with a fixed
//! seed: every hostile action at least once against a real SLURM and cderd
//! beside honest jobs, and no violation after any of them.
//! `cder-adversary --duration 600` runs it for long (docs/testing.md).
//! `CDER_ADVERSARY_SEED=<n>` replays another seed.
//!
//! And the campaign catches what it claims to guard: each mutation its
//! checks name (cder_model::mutation, debug builds) put back in turn, with
//! only the actions that show it, and the campaign must report at least
//! one violation of a check that names it; unmutated, none (the 60 s
//! campaign above runs every action, those included, and asserts none).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cder_tests::adversary::{Action, Adversary, AdversaryConfig, Check, Report, STEP_START};
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
    let config = AdversaryConfig {
        seed,
        duration: Duration::from_secs(60),
        actions: Action::ALL.to_vec(),
        verbose: true,
        mutation: None,
    };
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

/// Each mutation, the actions that show it, and the checks that must trip.
fn mutations() -> BTreeMap<&'static str, (BTreeSet<Action>, BTreeSet<Check>)> {
    let mut out: BTreeMap<&str, (BTreeSet<Action>, BTreeSet<Check>)> = BTreeMap::new();
    for check in Check::ALL {
        for (mutation, actions) in check.mutations() {
            let entry = out.entry(mutation).or_default();
            entry.0.extend(actions.iter().copied());
            entry.1.insert(check);
        }
    }
    out
}

/// A short campaign (each action once) of `actions`, with `mutation` on.
fn short_run(seed: u64, actions: &BTreeSet<Action>, mutation: Option<&str>) -> Report {
    let config = AdversaryConfig {
        seed,
        duration: Duration::ZERO,
        actions: actions.iter().copied().collect(),
        verbose: true,
        mutation: mutation.map(str::to_string),
    };
    let report = Adversary::start(config).and_then(Adversary::run).unwrap_or_else(|e| panic!("{mutation:?}: {e}"));
    eprintln!("mutation {mutation:?}:\n{}", report.table());
    report
}

#[test]
fn the_campaign_reports_each_mutation_it_guards_against() {
    if !cfg!(debug_assertions) {
        eprintln!("skipping: mutations exist in debug builds only");
        return;
    }
    if !require_slurm() || !cder_testkit::require_root("device cgroups, device files, jobs as other users") {
        return;
    }
    let _serial = serial();
    let all = mutations();
    let known: BTreeSet<&str> = cder_model::mutation::ALL.iter().map(|(m, _)| *m).collect();
    assert_eq!(all.keys().copied().collect::<BTreeSet<_>>(), known, "a mutation no check names, or the reverse");
    // Mutations whose checks and actions no other mutation of the group
    // trips share one cluster (a cluster start is most of a short run).
    let groups: [&[&str]; 3] =
        [&["fuse-stat"], &["fdinfo-scan"], &["ignore-holders", "forged-stamp", "provider-job-name"]];
    assert_eq!(groups.iter().flat_map(|g| g.iter().copied()).collect::<BTreeSet<_>>(), known, "a mutation in no group");
    let mut missed = Vec::new();
    for group in groups {
        let actions: BTreeSet<Action> = group.iter().flat_map(|m| all[m].0.iter().copied()).collect();
        let report = short_run(SEED, &actions, Some(&group.join(",")));
        for mutation in group {
            let checks = &all[mutation].1;
            let tripped = checks.iter().any(|c| report.violations.get(c).is_some_and(|v| !v.is_empty()));
            if !tripped {
                missed.push(format!("{mutation}: none of {checks:?} tripped\n{}", report.table()));
            }
        }
    }
    assert!(missed.is_empty(), "mutations the campaign did not report:\n{}", missed.join("\n"));
}
