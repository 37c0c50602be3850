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

/// The vendored copy of EGI's glue-validator (third-party/glue-validator).
pub fn glue_validator_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../third-party/glue-validator")
}

/// python3 and the vendored glue-validator, or [`cder_testkit::missing`].
pub fn require_glue_validator() -> bool {
    let script = glue_validator_dir().join("bin/glue-validator");
    cder_testkit::require_programs(&["python3", script.to_str().expect("UTF-8 path")])
}

/// One message of glue-validator: `W034`, the entry's first RDN, the attribute and the published value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorMessage {
    /// `E021`, `W034`, `I095` …
    pub code: String,
    /// The first RDN of the affected DN (`GLUE2ResourceID=…`).
    pub rdn: String,
    /// `Affected attribute:`.
    pub attribute: String,
    /// `Published value:`.
    pub value: String,
}

/// glue-validator's verdict on one LDIF: its nagios line's counts and every message.
#[derive(Debug, Clone)]
pub struct ValidatorVerdict {
    /// `errors N` of the first line.
    pub errors: usize,
    /// `warnings N`.
    pub warnings: usize,
    /// `info N`.
    pub info: usize,
    /// The messages, in the validator's order.
    pub messages: Vec<ValidatorMessage>,
    /// Everything it printed, for failure messages.
    pub output: String,
}

impl ValidatorVerdict {
    /// The messages of one severity (`'E'`, `'W'`, `'I'`).
    pub fn of(&self, severity: char) -> Vec<&ValidatorMessage> {
        self.messages.iter().filter(|m| m.code.starts_with(severity)).collect()
    }
}

/// Runs the vendored glue-validator (`args`: `[]` for the EGI profile,
/// `["-g", "glue1", "-s", "general"]` for GLUE 1.3) on `ldif` with
/// verbosity 3 and parses what it says. Panics when it cannot run or
/// prints no verdict line.
pub fn glue_validator(ldif: &str, args: &[&str]) -> ValidatorVerdict {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("site.ldif");
    std::fs::write(&file, ldif).expect("writing the LDIF");
    let root = glue_validator_dir();
    let out = Command::new("python3")
        .arg(root.join("bin/glue-validator"))
        .arg("-f")
        .arg(&file)
        .args(args)
        .args(["-v", "3"])
        .env("PYTHONPATH", &root)
        // Keeps the vendored tree as committed.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .output()
        .expect("running python3 glue-validator");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // "OK - errors 0, warnings 0, info 14 | errors=0;warnings=0;info=14"
    let first = output.lines().next().unwrap_or_default();
    let count = |name: &str| -> usize {
        let after = first.split_once(&format!("{name} ")).unwrap_or_else(|| panic!("no verdict in:\n{output}")).1;
        after.split(|c: char| !c.is_ascii_digit()).next().unwrap_or_default().parse().expect("a count")
    };
    let (errors, warnings, info) = (count("errors"), count("warnings"), count("info"));
    let mut messages: Vec<ValidatorMessage> = Vec::new();
    for line in output.lines().map(str::trim) {
        let Some((code, rest)) = line.split_once(' ') else { continue };
        let is_code =
            code.len() == 4 && code.starts_with(['E', 'W', 'I']) && code[1..].bytes().all(|b| b.is_ascii_digit());
        if !is_code {
            continue;
        }
        if let Some(dn) = rest.strip_prefix("Affected DN: ") {
            messages.push(ValidatorMessage {
                code: code.to_string(),
                rdn: dn.trim().to_string(),
                attribute: String::new(),
                value: String::new(),
            });
        } else if let (Some(a), Some(m)) = (rest.strip_prefix("Affected attribute: "), messages.last_mut()) {
            m.attribute = a.trim().to_string();
        } else if let (Some(v), Some(m)) = (rest.strip_prefix("Published value: "), messages.last_mut()) {
            m.value = v.trim().to_string();
        }
    }
    assert_eq!(messages.len(), errors + warnings + info, "every counted message parsed:\n{output}");
    ValidatorVerdict { errors, warnings, info, messages, output }
}
