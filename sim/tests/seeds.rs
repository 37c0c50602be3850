//! Each seed's result, reproduced through cder's own policies, with the
//! seed's figure beside the simulator's (docs/simulation.md).

use cder_sim::seeds::walsh;
use cder_sim::time::hours_minutes;

/// Table 4.5: every cell within 15 % of the thesis, the totals' ordering
/// (local first < physical < random) as the thesis found it.
#[test]
fn walsh_table_4_5() {
    let r = walsh::reproduce(20);
    let mut report = format!("fitted dispatch: physical {} ms, vGPGPU {} ms\n", r.dispatch.0, r.dispatch.1);
    let mut worst: f64 = 0.0;
    for (row, mix) in r.cells.iter().zip(walsh::MIXES) {
        report += &format!("Mix {:>3} {:>3}", mix.0, mix.1);
        for &(thesis, ours) in row {
            let off = ours / thesis - 1.0;
            worst = worst.max(off.abs());
            report += &format!("  {thesis:7.1} {ours:7.1} ({:+5.1} %)", off * 100.0);
        }
        report += "\n";
    }
    for (i, &(t, ours)) in r.totals.iter().enumerate() {
        report += &format!(
            "total {:>11}: thesis {} cder-sim {}\n",
            walsh::MODES[i],
            walsh::TABLE_4_5_TOTALS[i],
            hours_minutes((ours * 1000.0) as u64)
        );
        let _ = t;
    }
    println!("{report}");
    assert!(worst <= 0.15, "a cell is {:.1} % off the thesis:\n{report}", worst * 100.0);
    let [physical, random, local_first] = r.totals.map(|t| t.1);
    assert!(local_first < physical && physical < random, "the totals' ordering differs from the thesis:\n{report}");
}

/// The traces folder, or a skip (a failure under CI) naming what is missing.
fn trace(relative: &str) -> Option<std::path::PathBuf> {
    let path = cder_sim::seeds::mendonca::traces_dir().join(relative);
    cder_testkit::require(
        path.exists(),
        &format!("the workload trace {} (../shared/traces beside the repository, or $CDER_TRACES)", path.display()),
    )
    .then_some(path)
}

/// Seed 002, §4.6: best effort local (cderd's `locality`) keeps the
/// makespan within 2 % of basic's (`first`) in nearly every instance and
/// places most jobs locally. 16 instances here; docs/simulation.md has 512.
#[test]
fn mendonca_basic_vs_best_effort_local() {
    use cder_sim::seeds::mendonca;
    let Some(path) = trace(mendonca::CURIE_EXTRACT) else { return };
    let r = mendonca::reproduce(&path, 16, 1).unwrap();
    println!("{r:?}");
    assert!(r.within_2_percent >= 15.0 / 16.0, "{r:?}");
    assert!(r.local_share.1 > r.local_share.0 + 0.1, "{r:?}");
    assert!((r.local_share.1 - mendonca::SEED_LOCAL_SHARE).abs() < 0.1, "{r:?}");
}

/// Seed 001, §IV-D: FMS completes each mix first, both moldings alone
/// improve on TORQUE and MCT, and the gain over the faster of the two is
/// of the seed's order (up to 42 %).
#[test]
fn ravi_fms_against_torque_and_mct() {
    use cder_sim::seeds::ravi;
    let mut best: f64 = 0.0;
    for long in [0.25, 0.5, 0.75] {
        let row = ravi::mix(long, 10).unwrap();
        println!("{:.0} % long: {row:?} gain {:.1} %", long * 100.0, ravi::gain(&row) * 100.0);
        let fms = row[4].1;
        assert!(row.iter().all(|(_, t)| fms <= *t + 1e-9), "FMS is not the fastest: {row:?}");
        let baseline = row[0].1.min(row[1].1);
        assert!(row[2].1 < baseline && row[3].1 < baseline, "a molding alone does not improve: {row:?}");
        best = best.max(ravi::gain(&row));
    }
    assert!(best > 0.1, "FMS gains only {:.1} % at best", best * 100.0);
}

/// Seed 004, §3.7.1.4: the host share fitted on sharing's 28 %, then
/// offloading's further gain predicted (the seed: up to 18 %).
#[test]
fn becchi_sharing_and_offloading() {
    use cder_sim::seeds::becchi;
    let host = becchi::fit_host(4);
    let rows = becchi::rows(host, 4);
    let (sharing, offloading) = becchi::gains(&rows);
    println!("host share {host}: {rows:?}\nsharing {:.1} %, offloading {:.1} %", sharing * 100.0, offloading * 100.0);
    assert!((sharing - becchi::SEED_SHARING_GAIN).abs() < 0.01);
    assert!(offloading > 0.0, "offloading gains nothing");
    assert!(rows.iter().all(|r| r.2 <= r.1 && r.3 <= r.2 + 1e-9), "sharing or offloading is slower: {rows:?}");
}

/// Alibaba's trace, filled as Weng et al. fill it: every policy places
/// nearly everything while the cluster is half full and leaves more
/// unplaced as it fills; the table is in docs/simulation.md.
#[test]
fn weng_fill_alibaba() {
    use cder_sim::seeds::weng;
    let Some(nodes) = trace(weng::NODES) else { return };
    let traces = nodes.parent().and_then(|p| p.parent()).unwrap().to_path_buf();
    let (cluster, tasks) = weng::load(&traces).unwrap();
    assert_eq!((cluster.nodes.len(), cluster.gpus(), tasks.len()), (1523, 6212, 8152));
    assert_eq!(tasks.iter().filter(|t| t.request.gpu_milli > 0).count(), 3078);
    let curves = weng::curves(&cluster, &tasks, 1).unwrap();
    for (label, points) in &curves {
        println!("{label}: {points:?}");
        assert!(points[0].unplaced < 0.02, "{label} fails tasks in a half-empty cluster: {points:?}");
        assert!(points.windows(2).all(|w| w[0].unplaced <= w[1].unplaced + 1e-9), "{label}: {points:?}");
    }
}
