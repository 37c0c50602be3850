//! The benchmark's pipeline at a small scale (the benchmark itself is
//! `cder-twophase-bench`, not part of `cargo test`): a synthetic EGI-like
//! snapshot loaded offline with slapadd into slapd (BDII config, GLUE
//! schemas), `cder-jdl list-match` for both strategies, checked against the
//! generator's own record of the GPU shares and against the thesis-style
//! Python reference (ldap3 + classad2).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use cder_testkit::require_programs;
use cder_tests::egi_snapshot::{generate, SnapshotSpec, Strategy};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, index_env};

const PYTHON: &str = "/opt/cder-venv/bin/python";
const JOB: &str = "[ Requirements = other.GPGPUVendor == \"Nvidia\" && (other.GPGPUMainMemorySize >= 2048); Rank = 1 ]";

#[test]
fn list_match_on_a_small_snapshot_agrees_with_the_data_and_the_reference() {
    if !require_slapd() || !require_programs(&["/usr/sbin/slapadd", PYTHON]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.jdl");
    std::fs::write(&job, JOB).unwrap();
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/twophase_reference.py");
    for (strategy, name) in
        [(Strategy::AttributeExtension, "attribute-extension"), (Strategy::ClassExtension, "class-extension")]
    {
        let snap = generate(&SnapshotSpec { ces: 24, gpu_shares: 60, ..SnapshotSpec::thesis(strategy) });
        let expected: BTreeSet<String> = snap
            .gpu
            .iter()
            .filter(|(_, vendor, mem)| vendor == "Nvidia" && *mem >= 2048)
            .map(|(ce, _, _)| ce.clone())
            .collect();
        assert!(!expected.is_empty() && expected.len() < snap.gpu.len(), "the data must both match and not match");
        let slapd = Slapd::start_preloaded(&SlapdOptions { maxsize: Some(1 << 30), port: None }, &snap.ldif)
            .unwrap_or_else(|e| panic!("{e}"));
        let count =
            slapd.search("o=glue", "(objectClass=GLUE2ComputingShare)", &["1.1"]).unwrap().matches("dn:").count();
        assert_eq!(count, snap.shares, "slapadd loaded every share");

        let out = Command::new(cder_jdl())
            .envs(index_env(dir.path()))
            .args(["list-match", "--json", "--strategy", name, "--bdii", &slapd.url()])
            .arg(&job)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let ours: BTreeSet<String> =
            v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect();
        assert_eq!(ours, expected, "{name}");
        assert_eq!(v["warnings"].as_array().unwrap().len(), 0, "{name}: {v}");

        let out = Command::new(PYTHON).arg(&reference).args([&slapd.url(), name]).arg(&job).output().unwrap();
        assert!(out.status.success(), "reference {name}: {}", String::from_utf8_lossy(&out.stderr));
        let theirs: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect();
        assert_eq!(theirs, expected, "reference {name}");
    }
}
