//! Phase 1 trusts a CE ID only from the service that owns it.
//! A real slapd with Debian's BDII config holds the three GPU sites of the
//! thesis tables plus a hostile site: its own provider output (an AMD GPU)
//! and CREAM shares that publish `CREAMCEId=` of ce-a's queue `gpu` with
//! its own queue `evil_partition`. `list-match` must keep ce-a's offer from
//! ce-a's share, leave the hostile claim out and show it in `--explain`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce, ce_glue2_ldif, gpu_sites, grid_ldif, index_env, provider, provider_ldif, VO};

fn list_match(bdii: &str, extra: &[&str], jdl: &str, dir: &Path) -> Output {
    let path = dir.join(format!("job-{}.jdl", jdl.len() ^ extra.len()));
    std::fs::write(&path, jdl).unwrap();
    Command::new(cder_jdl())
        .envs(index_env(dir))
        .args(["list-match", "--bdii", bdii, "--timeout", "20", "--vo", VO])
        .args(extra)
        .arg(&path)
        .env_remove("LCG_GFAL_INFOSYS")
        .stdin(Stdio::null())
        .output()
        .expect("running cder-jdl")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "list-match printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn a_hostile_site_cannot_speak_for_another_sites_ce() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sites = gpu_sites();
    let victim = ce(0, "gpu");
    let mut ldif = grid_ldif(&provider(), &sites, &["attribute-extension"], 1, d).unwrap_or_else(|e| panic!("{e}"));
    // The hostile site: ce-c's AMD hardware under its own host and service ...
    let mut evil = sites[2].clone();
    evil.host = "evil.example.net".into();
    evil.group = "evil_s9150".into();
    evil.queues = vec![("evil_partition".into(), vec![VO.into()], 0, 64)];
    ldif.push('\n');
    ldif.push_str(&provider_ldif(&provider(), &evil, &["attribute-extension"], d).unwrap_or_else(|e| panic!("{e}")));
    // ... and a share that claims ce-a's CE ID for its own queue.
    let own_claim = format!("CREAMCEId={}", evil.ce_id("evil_partition"));
    let shares = ce_glue2_ldif(&evil.host, &evil.lrms, &evil.service(), Some(&evil.group), &evil.queues);
    assert!(shares.contains(&own_claim), "the generator's CREAMCEId form changed");
    ldif.push_str(&shares.replace(&own_claim, &format!("CREAMCEId={victim}")));

    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let url = slapd.url();

    // Any GPU: ce-a is offered from its own share (queue gpu), the claim is refused.
    let out = list_match(&url, &["--json"], "[ Requirements = GPGPUPerNode >= 1; Rank = 0 ]", d);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = json(&out);
    let matches = v["matches"].as_array().unwrap();
    let a: Vec<&serde_json::Value> = matches.iter().filter(|m| m["ce"] == victim.as_str()).collect();
    assert_eq!(a.len(), 1, "{v}");
    assert_eq!(a[0]["queue"], "gpu", "the queue must come from the owner's share: {v}");
    assert!(matches.iter().all(|m| m["queue"] != "evil_partition"), "{v}");
    let refused = v["refused_claims"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{v}");
    assert_eq!(refused[0]["ce"], victim.as_str());
    assert!(refused[0]["share"].as_str().unwrap().contains("evil"), "{v}");

    // Fake GPU data under ce-a's ID does not make ce-a match: only ce-c has AMD GPUs.
    let out = list_match(&url, &["--json"], "[ Requirements = GPGPUVendor == \"AMD\"; Rank = 0 ]", d);
    let v = json(&out);
    let ces: Vec<&str> = v["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap()).collect();
    assert_eq!(ces, vec![ce(2, "gpu").as_str()], "{v}");

    // Phase 2 on ce-a's own SLURM takes the partition from ce-a's share,
    // never from the hostile share that claimed its CE ID.
    let jdl = d.join("phase2.jdl");
    std::fs::write(
        &jdl,
        "[ Executable = \"/bin/true\"; GPGPUPerNode = 1; Requirements = GPGPUPerNode >= 1; Rank = 0 ]",
    )
    .unwrap();
    let out = Command::new(cder_jdl())
        .envs(index_env(dir.path()))
        .args(["submit", "--via", "slurm", "--dry-run", "--bdii", &url, "--timeout", "20", "--vo", VO, "--ce", &victim])
        .arg(&jdl)
        .env_remove("LCG_GFAL_INFOSYS")
        .stdin(Stdio::null())
        .output()
        .expect("running cder-jdl submit");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script}{}", String::from_utf8_lossy(&out.stderr));
    assert!(script.lines().any(|l| l.trim() == "#SBATCH --partition=gpu"), "{script}");
    assert!(!script.contains("evil_partition"), "{script}");

    // --explain names the refused claim and the share that made it.
    let out = list_match(&url, &["--explain"], "[ Requirements = GPGPUPerNode >= 1; Rank = 0 ]", d);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!(" - {victim} (claimed by GLUE2ShareID=evil_partition_")), "{text}");
    assert!(text.contains("another service"), "{text}");
}
