//! Helpers for the GLUE provider tests: run the real `cder-glue-provider`
//! binary and check what slapd holds against what it printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use cder_glue_provider::ldif::{self, Entry};

use crate::ldap::Slapd;

/// The provider binary, freshly built.
pub fn provider() -> PathBuf {
    crate::bdii::built_binary("cder-glue-provider", "cder-glue-provider").expect("building cder-glue-provider")
}

/// Runs the provider with `--config` and the given `--strategy` values.
pub fn run_provider(config: &Path, strategies: &[&str]) -> Output {
    let mut cmd = Command::new(provider());
    cmd.arg("--config").arg(config).stdin(Stdio::null());
    for s in strategies {
        cmd.args(["--strategy", s]);
    }
    cmd.output().expect("running cder-glue-provider")
}

/// Runs the provider and returns its LDIF, panicking with its stderr if it failed.
pub fn publish(config: &Path, strategies: &[&str]) -> String {
    let out = run_provider(config, strategies);
    assert!(out.status.success(), "cder-glue-provider {strategies:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("LDIF is ASCII")
}

/// An entry's values by lower-cased attribute name.
pub fn values_by_name(entry: &Entry) -> BTreeMap<String, BTreeSet<String>> {
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (name, value) in &entry.attributes {
        map.entry(name.to_ascii_lowercase()).or_default().insert(value.clone());
    }
    map
}

/// Reads every entry of `published` back from slapd (scope base, all
/// attributes) and asserts it holds exactly the published values.
pub fn assert_reads_back(slapd: &Slapd, published: &str) -> Vec<Entry> {
    let entries = ldif::parse(published).expect("provider LDIF parses");
    assert!(!entries.is_empty(), "the provider published nothing");
    for entry in &entries {
        let text = slapd
            .tool("ldapsearch", &["-LLL", "-o", "ldif-wrap=no", "-s", "base", "-b", &entry.dn, "(objectClass=*)"], None)
            .unwrap_or_else(|e| panic!("{e}"));
        let back = ldif::parse(&text).expect("ldapsearch LDIF parses");
        assert_eq!(back.len(), 1, "{} read back as {text}", entry.dn);
        assert_eq!(values_by_name(&back[0]), values_by_name(entry), "{} differs in slapd", entry.dn);
    }
    entries
}

/// The `Key=Value` OtherInfo pairs of an entry as a map.
pub fn other_info(entry: &Entry) -> BTreeMap<String, String> {
    entry
        .values("GLUE2EntityOtherInfo")
        .filter_map(|v| v.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The `[site]` and `[service]` tables of a test CE (`ce.example.org`,
/// CREAM over SLURM) and `[counts] source = "slurm"` with `counts_extra`
/// lines; the caller appends its `[[group]]`s.
pub fn slurm_ce_config(counts_extra: &str) -> String {
    format!(
        "[site]\ncomputing_service_id = \"ce.example.org_ComputingElement\"\ncomputing_manager_id = \"ce.example.org_ComputingElement_Manager\"\n\
         ce_unique_id = \"ce.example.org:8443/cream-slurm-gpgpu\"\n\n[service]\ntype = \"org.glite.ce.CREAM\"\nadmin_domain = \"EXAMPLE\"\nmanager_product = \"SLURM\"\n\n\
         [counts]\nsource = \"slurm\"\n{counts_extra}\n"
    )
}
