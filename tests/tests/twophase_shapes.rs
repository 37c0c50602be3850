//! Phase 1 on every shape a real top-level BDII holds: the GPU
//! keys on ComputingShares or on ExecutionEnvironments, as OtherInfo or as
//! Extension children; shares naming their EE or not; services in a
//! top-level BDII's site tree; GLUE 1.3 beside GLUE 2.0; generic EE IDs
//! reused by every site. Each snapshot (`cder_tests::egi_snapshot`) is
//! loaded with slapadd into a real slapd running Debian's BDII config
//! (stock indexes: IDs and objectClass) and the GLUE schemas; for each one
//! `cder-jdl list-match` must find exactly the CEs the generator's record
//! says, in the same order and with the same ranks as the Python ldap3 +
//! classad2 reference (tests/bench/twophase_reference.py).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use cder_testkit::require_programs;
use cder_tests::egi_snapshot::{generate, Placement, SnapshotSpec, Strategy};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, index_env};

const PYTHON: &str = "/opt/cder-venv/bin/python";
/// Ranked by device memory: distinct ranks, so the order is tested too.
const JOB: &str = "[ Requirements = other.GPGPUVendor == \"Nvidia\" && (other.GPGPUMainMemorySize >= 1024); Rank = other.GPGPUMainMemorySize ]";

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::AttributeExtension => "attribute-extension",
        Strategy::ClassExtension => "class-extension",
    }
}

/// Runs one shape; `read_all`: cder reads every strategy (GLUE 1.3 included), not just the published one.
fn shape(spec: SnapshotSpec, read_all: bool) {
    if !require_slapd() || !require_programs(&["/usr/sbin/slapadd", PYTHON]) {
        return;
    }
    let name = strategy_name(spec.strategy);
    let what = format!(
        "{:?} {name} share->EE key {} GLUE 1.3 {} site tree {} reused ids {}",
        spec.placement, spec.share_ee_fk, spec.glue13, spec.site_tree, spec.reused_ee_ids
    );
    let snap = generate(&spec);
    let expected: BTreeSet<String> = snap
        .gpu
        .iter()
        .filter(|(_, vendor, mem)| vendor == "Nvidia" && *mem >= 1024)
        .map(|(ce, _, _)| ce.clone())
        .collect();
    let all: BTreeSet<&String> = snap.gpu.iter().map(|g| &g.0).collect();
    assert!(!expected.is_empty() && expected.len() < all.len(), "{what}: the data must both match and not match");
    let slapd = Slapd::start_preloaded(&SlapdOptions { maxsize: Some(1 << 30), port: None }, &snap.ldif)
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.jdl");
    std::fs::write(&job, JOB).unwrap();

    let mut cmd = Command::new(cder_jdl());
    cmd.envs(index_env(dir.path()));
    cmd.args(["list-match", "--json", "--bdii", &slapd.url()]).env_remove("LCG_GFAL_INFOSYS");
    if !read_all {
        cmd.args(["--strategy", name]);
    }
    let out = cmd.arg(&job).output().unwrap();
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours: Vec<(String, f64)> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["ce"].as_str().unwrap().to_string(), m["rank"].as_f64().unwrap()))
        .collect();
    assert_eq!(ours.iter().map(|m| m.0.clone()).collect::<BTreeSet<_>>(), expected, "{what}");
    assert_eq!(v["warnings"].as_array().unwrap().len(), 0, "{what}: {v}");
    if read_all {
        assert!(
            v["matches"].as_array().unwrap().iter().all(|m| m["schema"] == "GLUE2"),
            "{what}: a CE published in both schemas is offered from GLUE 2.0: {v}"
        );
    }

    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/twophase_reference.py");
    let out = Command::new(PYTHON).arg(&reference).args([&slapd.url(), name]).arg(&job).output().unwrap();
    assert!(out.status.success(), "reference {what}: {}", String::from_utf8_lossy(&out.stderr));
    let theirs: Vec<(String, f64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(ce, r)| (ce.to_string(), r.trim().parse().unwrap()))
        .collect();
    assert_eq!(ours, theirs, "{what}: the matches, their order and ranks equal the reference's");
    if spec.glue13 && spec.placement == Placement::ExecutionEnvironments {
        // GLUE 1.3 alone describes the same CEs (its tags sit on SubClusters, the EEs' twins).
        let out = Command::new(cder_jdl())
            .envs(index_env(dir.path()))
            .args(["list-match", "--json", "--strategy", "tagged-environment", "--bdii", &slapd.url()])
            .arg(&job)
            .output()
            .unwrap();
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let g13: Vec<(String, f64)> = v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["ce"].as_str().unwrap().to_string(), m["rank"].as_f64().unwrap()))
            .collect();
        assert!(v["matches"].as_array().unwrap().iter().all(|m| m["schema"] == "GLUE1.3"), "{what}: {v}");
        assert_eq!(g13, theirs, "{what}: GLUE 1.3 alone");
    }
}

fn spec(placement: Placement, strategy: Strategy) -> SnapshotSpec {
    SnapshotSpec { ces: 24, gpu_shares: 30, placement, site_tree: true, ..SnapshotSpec::thesis(strategy) }
}

#[test]
fn keys_on_shares_as_other_info() {
    shape(spec(Placement::Shares, Strategy::AttributeExtension), false);
}

#[test]
fn keys_on_shares_as_extensions() {
    shape(spec(Placement::Shares, Strategy::ClassExtension), false);
}

#[test]
fn keys_on_execution_environments_as_other_info() {
    shape(spec(Placement::ExecutionEnvironments, Strategy::AttributeExtension), false);
}

#[test]
fn keys_on_execution_environments_as_extensions() {
    shape(spec(Placement::ExecutionEnvironments, Strategy::ClassExtension), false);
}

#[test]
fn execution_environments_no_share_names() {
    // Every share of the service offers every GPU EE of it.
    for s in [Strategy::AttributeExtension, Strategy::ClassExtension] {
        shape(SnapshotSpec { share_ee_fk: false, ..spec(Placement::ExecutionEnvironments, s) }, false);
    }
}

#[test]
fn generic_ee_ids_reused_by_every_site_join_by_the_dn_tree() {
    for s in [Strategy::AttributeExtension, Strategy::ClassExtension] {
        shape(SnapshotSpec { reused_ee_ids: true, ..spec(Placement::ExecutionEnvironments, s) }, false);
    }
}

#[test]
fn glue13_beside_glue2_read_with_every_strategy() {
    for (p, s) in [
        (Placement::ExecutionEnvironments, Strategy::AttributeExtension),
        (Placement::Shares, Strategy::ClassExtension),
    ] {
        shape(SnapshotSpec { glue13: true, ..spec(p, s) }, true);
    }
}

#[test]
fn a_site_bdii_tree_without_site_domains() {
    shape(SnapshotSpec { site_tree: false, ..spec(Placement::ExecutionEnvironments, Strategy::ClassExtension) }, false);
}

#[test]
fn paged_scans_side_by_side_on_one_connection() {
    // slapd keeps one paged-results state per connection: two scans that each
    // need several pages (EEs with OtherInfo, tagged SubClusters) must not share one.
    if !require_slapd() || !require_programs(&["/usr/sbin/slapadd"]) {
        return;
    }
    use cder_jdl::bdii::{build_offers, Bdii, QueryOptions, Wanted};
    let spec = SnapshotSpec { glue13: true, ..spec(Placement::ExecutionEnvironments, Strategy::AttributeExtension) };
    let snap = generate(&spec);
    let expected: BTreeSet<String> = snap.gpu.iter().map(|g| g.0.clone()).collect();
    let slapd = Slapd::start_preloaded(&SlapdOptions { maxsize: Some(1 << 30), port: None }, &snap.ldif)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut opts = QueryOptions::new(&slapd.url());
    opts.page_size = 5;
    let wanted = Wanted {
        keys: ["GPGPUVendor".to_string()].into(),
        prefixes: ["GPGPU".to_string()].into(),
        ..Default::default()
    };
    let fetched = Bdii::connect(&opts).unwrap().fetch(&wanted).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        fetched.carriers.len() > 5 && fetched.subclusters.len() > 5,
        "both scans span pages: {} EEs, {} SubClusters",
        fetched.carriers.len(),
        fetched.subclusters.len()
    );
    let offers = build_offers(&fetched, &["GPGPU".to_string()], None);
    assert!(offers.warnings.is_empty(), "{:?}", offers.warnings);
    assert_eq!(offers.offers.iter().map(|o| o.ce_id.clone()).collect::<BTreeSet<_>>(), expected);
}

#[test]
fn cders_ldap_reader_and_ldap3_fetch_the_same_entries() {
    // ldap:// searches are read by cder's own BER reader (bdii::wire); ldapi://
    // ones by ldap3's client. On one slapd, with pages of 5 and a VO, both must
    // fetch the same entries for every class phase 1 reads.
    if !require_slapd() || !require_programs(&["/usr/sbin/slapadd"]) {
        return;
    }
    use cder_jdl::bdii::query::Entry;
    use cder_jdl::bdii::{Bdii, Fetched, QueryOptions, Wanted};
    for spec in [
        SnapshotSpec { glue13: true, ..spec(Placement::ExecutionEnvironments, Strategy::AttributeExtension) },
        spec(Placement::Shares, Strategy::ClassExtension),
    ] {
        let snap = generate(&spec);
        let slapd = Slapd::start_preloaded(&SlapdOptions { maxsize: Some(1 << 30), port: None }, &snap.ldif)
            .unwrap_or_else(|e| panic!("{e}"));
        let wanted = Wanted {
            keys: ["GPGPUVendor".to_string(), "GPGPUMainMemorySize".to_string()].into(),
            prefixes: ["GPGPU".to_string()].into(),
            vo: Some(cder_tests::twophase::VO.into()),
            ..Default::default()
        };
        let fetch = |url: &str| -> Fetched {
            let mut opts = QueryOptions::new(url);
            opts.page_size = 5;
            Bdii::connect(&opts).and_then(|mut b| b.fetch(&wanted)).unwrap_or_else(|e| panic!("{url}: {e}"))
        };
        let (wire, ldap3) = (fetch(&slapd.url()), fetch(&slapd.ldapi_url()));
        let sorted = |v: &[Entry]| {
            let mut v = v.to_vec();
            v.sort_by(|a, b| a.dn.cmp(&b.dn));
            v
        };
        let classes = |s: &Fetched| {
            [&s.carriers, &s.extensions, &s.managers, &s.shares, &s.endpoints, &s.subclusters, &s.glue13_ces]
                .map(|v| sorted(v))
        };
        let found = classes(&wire);
        assert!(
            found[0].len() > 5 && !found[2].is_empty() && !found[4].is_empty(),
            "{spec:?}: {:?}",
            found.map(|v| v.len())
        );
        assert_eq!(found, classes(&ldap3), "{spec:?}");
        assert_eq!(wire.policies.as_deref().map(sorted), ldap3.policies.as_deref().map(sorted), "{spec:?}");
        assert!(wire.policies.as_ref().is_some_and(|p| !p.is_empty()), "{spec:?}: the VO's policies are fetched");
    }
}
