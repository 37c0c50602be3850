//! Phase 1 against a real BDII: slapd with Debian's BDII config and the
//! GLUE schemas, loaded with the output of the real `cder-glue-provider`
//! for three GPU sites (plus the shares and endpoints their CEs publish)
//! and two sites without GPUs. `cder-jdl list-match` must find exactly the
//! CEs each of the thesis's example requests fits, whichever strategy the
//! sites publish with.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce, gpu_sites, grid_ldif, index_env, provider, VO};

fn list_match(bdii: &str, extra: &[&str], jdl: &str, dir: &Path) -> Output {
    let path = dir.join(format!("job-{}.jdl", jdl.len() ^ extra.len()));
    std::fs::write(&path, jdl).unwrap();
    Command::new(cder_jdl())
        .envs(index_env(dir))
        .args(["list-match", "--bdii", bdii, "--json", "--timeout", "20"])
        .args(extra)
        .arg(&path)
        .env_remove("LCG_GFAL_INFOSYS")
        .stdin(Stdio::null())
        .output()
        .expect("running cder-jdl")
}

/// The matching CEs, in rank order.
fn matched(out: &Output) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "list-match printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap().to_string()).collect()
}

fn set(v: &[String]) -> BTreeSet<String> {
    v.iter().cloned().collect()
}

fn grid(strategies: &[&str]) -> Option<(Slapd, tempfile::TempDir)> {
    if !require_slapd() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ldif = grid_ldif(&provider(), &gpu_sites(), strategies, 2, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    Some((slapd, dir))
}

/// The thesis's examples, for sites publishing with `strategy`, read with `read_as`.
fn thesis_examples(strategy: &str, read_as: &[&str]) {
    let Some((slapd, dir)) = grid(&[strategy]) else { return };
    let url = slapd.url();
    let d = dir.path();
    let (a, a_atlas, b, c) = (ce(0, "gpu"), ce(0, "atlasgpu"), ce(1, "gpgpu"), ce(2, "gpu"));
    let vo = ["--vo", VO];
    let args = |extra: &[&'static str]| -> Vec<&str> { read_as.iter().copied().chain(extra.iter().copied()).collect() };

    // Listing 3.10: vendor and memory.
    let out = list_match(
        &url,
        &args(&vo),
        "[ Requirements = GPGPUVendor == \"Nvidia\" && (GPGPUMainMemorySize >= 512); Rank = 1 ]",
        d,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(set(&matched(&out)), set(&[a.clone(), b.clone()]), "Nvidia with >= 512 MB ({strategy})");
    let out = list_match(
        &url,
        &args(&vo),
        "[ Requirements = other.GPGPUVendor == \"Nvidia\" && other.GPGPUMainMemorySize >= 4096 ]",
        d,
    );
    assert_eq!(matched(&out), vec![a.clone()], "Nvidia with >= 4 GB ({strategy})");
    // The VO filter: without it, ce-a's atlas-only queue matches too.
    let out = list_match(
        &url,
        &args(&[]),
        "[ Requirements = other.GPGPUVendor == \"Nvidia\" && other.GPGPUMainMemorySize >= 4096 ]",
        d,
    );
    assert_eq!(set(&matched(&out)), set(&[a.clone(), a_atlas.clone()]), "no VO ({strategy})");
    let out = list_match(&url, &args(&["--vo", "atlas"]), "[ Requirements = GPGPUMainMemorySize >= 1024 ]", d);
    assert_eq!(set(&matched(&out)), set(&[a.clone(), a_atlas.clone()]), "only ce-a is open to atlas ({strategy})");

    // A minimum compute capability (the AMD site publishes none: undefined, left out).
    let out = list_match(&url, &args(&vo), "[ Requirements = GPGPUCUDAComputeCapability >= 3.5 ]", d);
    assert_eq!(matched(&out), vec![a.clone()], "CC >= 3.5 ({strategy})");
    let out = list_match(&url, &args(&vo), "[ Requirements = GPGPUCUDAComputeCapability >= 3.0 ]", d);
    assert_eq!(set(&matched(&out)), set(&[a.clone(), b.clone()]), "CC >= 3.0 ({strategy})");

    // GPGPUPerNode = 2: ce-c has one GPU per node. Ranked by free/total: ce-b 8/8, ce-a 5/8.
    let out = list_match(
        &url,
        &args(&["--vo", VO, "--rank", "gpgpu-free-ratio"]),
        "[ GPGPUPerNode = 2; Requirements = true ]",
        d,
    );
    assert_eq!(matched(&out), [b.clone(), a.clone()], "GPGPUPerNode = 2 ({strategy})");
    let out = list_match(&url, &args(&vo), "[ GPGPUPerNode = 4 ]", d);
    assert_eq!(matched(&out), vec![b.clone()], "GPGPUPerNode = 4 ({strategy})");

    // vGPGPU: VirtualGPGPUPerNode × CPUNumber <= TotalVGPGPU_<method>.
    let out =
        list_match(&url, &args(&vo), "[ VirtualGPGPUPerNode = 2; VirtualGPGPUMethod = \"rCUDA\"; CPUNumber = 4 ]", d);
    assert_eq!(matched(&out), vec![a.clone()], "8 rCUDA vGPGPUs ({strategy})");
    let out =
        list_match(&url, &args(&vo), "[ VirtualGPGPUPerNode = 3; VirtualGPGPUMethod = \"rCUDA\"; CPUNumber = 3 ]", d);
    assert!(matched(&out).is_empty() && out.status.code() == Some(1), "9 rCUDA vGPGPUs fit nowhere ({strategy})");
    let out = list_match(&url, &args(&vo), "[ VirtualGPGPUPerNode = 5; VirtualGPGPUType = \"VCL\"; CPUNumber = 4 ]", d);
    assert_eq!(matched(&out), vec![b.clone()], "20 VCL vGPGPUs ({strategy})");

    // --explain names the false clause for each CE left out.
    let out = list_match(
        &url,
        &args(&["--vo", VO, "--explain"]),
        "[ Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 4096 ]",
        d,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let why: Vec<(String, Vec<String>)> = v["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["ce"].as_str().unwrap().to_string(),
                e["reasons"].as_array().unwrap().iter().map(|r| r.as_str().unwrap().to_string()).collect(),
            )
        })
        .collect();
    assert_eq!(why.iter().map(|w| w.0.clone()).collect::<Vec<_>>(), [b.clone(), c.clone()], "{v}");
    assert_eq!(why[0].1, ["GPGPUMainMemorySize >= 4096 is false"], "{v}");
    assert_eq!(why[1].1, ["GPGPUVendor == \"Nvidia\" is false"], "{v}");
    // Without --explain the JSON carries the same matches and no explanations (none were made).
    let plain = list_match(
        &url,
        &args(&["--vo", VO]),
        "[ Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 4096 ]",
        d,
    );
    let p: serde_json::Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(p.get("excluded").is_none(), "{p}");
    assert_eq!((&p["matches"], &p["closed_to_vo"], &p["offers"]), (&v["matches"], &v["closed_to_vo"], &v["offers"]));
}

#[test]
fn attribute_extension_sites_match_the_thesis_examples() {
    thesis_examples("attribute-extension", &["--strategy", "attribute-extension"]);
}

#[test]
fn class_extension_sites_match_the_thesis_examples() {
    thesis_examples("class-extension", &["--strategy", "class-extension"]);
}

#[test]
fn hybrid_sites_match_with_every_strategy_read() {
    // Static keys as OtherInfo, counts as Extensions: one offer needs both.
    thesis_examples("hybrid", &[]);
}

#[test]
fn glue13_tagged_sites_match_by_tags() {
    let Some((slapd, dir)) = grid(&["attribute-extension", "tagged-environment"]) else { return };
    let out = list_match(&slapd.url(), &["--strategy", "tagged-environment", "--vo", VO], "[ Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 2048 && Member(\"NvidiaGPGPU\", other.GlueHostApplicationSoftwareRunTimeEnvironment) ]", dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(set(&matched(&out)), set(&[ce(0, "gpu"), ce(1, "gpgpu")]));
    let out = list_match(
        &slapd.url(),
        &["--strategy", "tagged-environment", "--vo", VO],
        "[ VirtualGPGPUPerNode = 2; VirtualGPGPUMethod = \"rCUDA\"; CPUNumber = 4 ]",
        dir.path(),
    );
    assert_eq!(matched(&out), [ce(0, "gpu")]);
    // Reading both schemas, each CE comes once, from its GLUE 2.0 offer.
    let out = list_match(
        &slapd.url(),
        &["--vo", VO],
        "[ Requirements = GPGPUVendor == \"Nvidia\" && GPGPUMainMemorySize >= 2048 ]",
        dir.path(),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let schemas: Vec<(String, String)> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["ce"].as_str().unwrap().to_string(), m["schema"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(schemas.len(), 2, "{v}");
    assert!(schemas.iter().all(|(_, s)| s == "GLUE2"), "{v}");
}
