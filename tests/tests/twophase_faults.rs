//! Phase 1 while the BDII's slapd fails: killed while a `list-match` waits
//! for its answer (slapd paused first, as a hung server, then killed), and
//! down when one starts. list-match names the BDII that failed and exits 1
//! (a runtime failure, not bad input); once slapd is started again on the
//! same port and databases, the next list-match answers as before.

use std::process::{Command, Stdio};
use std::time::Duration;

use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce, gpu_sites, grid_ldif, provider};

const JDL: &str = "[ Requirements = other.GPGPUVendor == \"Nvidia\" && other.GPGPUMainMemorySize >= 4096 ]";

fn list_match(url: &str, jdl: &std::path::Path) -> Command {
    let mut c = Command::new(cder_jdl());
    c.args(["list-match", "--bdii", url, "--json", "--timeout", "60"]).arg(jdl);
    c.env_remove("LCG_GFAL_INFOSYS").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill").arg(format!("-{sig}")).arg(pid.to_string()).status().unwrap();
    assert!(status.success(), "kill -{sig} {pid}");
}

#[test]
fn list_match_names_the_bdii_that_failed_and_works_again_after_slapd_restarts() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ldif = grid_ldif(&provider(), &gpu_sites(), &["attribute-extension"], 2, dir.path()).unwrap();
    let mut slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    let url = slapd.url();
    let jdl = dir.path().join("job.jdl");
    std::fs::write(&jdl, JDL).unwrap();
    let ok = list_match(&url, &jdl).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let before: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    let ces: Vec<&str> = before["matches"].as_array().unwrap().iter().map(|m| m["ce"].as_str().unwrap()).collect();
    assert!(ces.contains(&ce(0, "gpu").as_str()), "{before}");

    // slapd hangs (SIGSTOP): the kernel still accepts the connection and
    // takes the request; list-match waits for an answer. Then slapd dies.
    signal(slapd.pid(), "STOP");
    let running = list_match(&url, &jdl).spawn().unwrap();
    // Not a timing assertion: if list-match has not connected yet when
    // slapd dies, it is refused instead, and must say the same things.
    std::thread::sleep(Duration::from_millis(500));
    slapd.kill();
    let out = running.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a failed BDII is a runtime failure: {stderr}");
    assert!(stderr.contains(&url), "the BDII is named: {stderr}");
    assert!(out.stdout.is_empty(), "no matches printed from a failed query: {}", String::from_utf8_lossy(&out.stdout));

    // Down when list-match starts: refused, named, exit 1.
    let out = list_match(&url, &jdl).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("{url}: BDII unreachable")), "{stderr}");

    // slapd back on the same port and data: the same answer as before.
    slapd.restart().unwrap_or_else(|e| panic!("{e}"));
    let again = list_match(&url, &jdl).output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let after: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(after["matches"], before["matches"]);
}
