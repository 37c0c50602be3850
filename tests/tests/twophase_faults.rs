//! Phase 1 under faults. The BDII's slapd fails: killed while a `list-match
//! --live` waits for its answer (slapd paused first, as a hung server, then
//! killed), and down when one starts. list-match names the BDII that failed
//! and exits 1 (a runtime failure, not bad input); once slapd is started
//! again on the same port and databases, the next list-match answers as
//! before. And the local index's directory fills up (a real tmpfs: ENOSPC;
//! a btrfs qgroup: EDQUOT) when a refresh is due: the old snapshot stays
//! whole and answers, with the warning naming the file and the full disk.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use cder_testkit::{faults, require_quota_dir, require_tmpfs, QuotaDir, Tmpfs};
use cder_tests::ldap::{require_slapd, Slapd, SlapdOptions};
use cder_tests::twophase::{cder_jdl, ce, gpu_sites, grid_ldif, provider};

const JDL: &str = "[ Requirements = other.GPGPUVendor == \"Nvidia\" && other.GPGPUMainMemorySize >= 4096 ]";

fn list_match(url: &str, jdl: &std::path::Path) -> Command {
    let mut c = Command::new(cder_jdl());
    c.args(["list-match", "--live", "--bdii", url, "--json", "--timeout", "60"]).arg(jdl);
    c.env_remove("LCG_GFAL_INFOSYS").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

#[test]
fn live_list_match_names_the_bdii_that_failed_and_works_again_after_slapd_restarts() {
    if !require_slapd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut slapd = grid(dir.path());
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
    faults::signal(slapd.pid(), "STOP").unwrap();
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

/// slapd with three GPU sites published by the real provider.
fn grid(dir: &Path) -> Slapd {
    let ldif = grid_ldif(&provider(), &gpu_sites(), &["attribute-extension"], 2, dir).unwrap();
    let slapd = Slapd::start(&SlapdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    slapd.add_base_entries().unwrap();
    slapd.add(&ldif).unwrap_or_else(|e| panic!("{e}"));
    slapd
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A list-match from the index in `index_dir` (refreshed when older than a minute).
fn from_index(url: &str, jdl: &Path, index_dir: &Path, extra: &[&str]) -> Output {
    Command::new(cder_jdl())
        .args(["list-match", "--json", "--max-age", "60", "--index-dir"])
        .arg(index_dir)
        .args(["--bdii", url])
        .args(extra)
        .arg(jdl)
        .env_remove("LCG_GFAL_INFOSYS")
        .env_remove("CDER_INDEX_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The index's directory on a file system that `fill` fills: a due
/// refresh fails to write, the old snapshot answers with a warning that
/// names the file and says `no_room` (the OS's words and cder's), the
/// snapshot is unchanged and no temp file is left; `--strict` fails
/// instead; with room again, the next list-match refreshes it.
fn old_snapshot_answers_on_a_full_disk(
    index_dir: &Path,
    fill: impl Fn() -> Result<u64, String>,
    unfill: impl Fn() -> Result<(), String>,
    no_room: &[&str],
) {
    let dir = tempfile::tempdir().unwrap();
    let slapd = grid(dir.path());
    let url = slapd.url();
    let jdl = dir.path().join("job.jdl");
    std::fs::write(&jdl, JDL).unwrap();
    let first = from_index(&url, &jdl, index_dir, &[]);
    assert!(first.status.success(), "{}", text(&first));
    let matches: serde_json::Value = serde_json::from_slice(&first.stdout).unwrap();
    let snapshot = std::fs::read_dir(index_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cdx"))
        .expect("a snapshot was written");
    let bytes = std::fs::read(&snapshot).unwrap();
    // An hour old: the next list-match must try to refresh it (a plain
    // slapd has no UpdateStats, so the refresh reads the BDII and writes).
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&snapshot).unwrap().set_modified(old).unwrap();
    assert!(fill().unwrap() > 0);

    let out = from_index(&url, &jdl, index_dir, &[]);
    assert!(out.status.success(), "the old snapshot answers: {}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: answering from an index ") && stderr.contains("could not be refreshed"),
        "{stderr}"
    );
    assert!(stderr.contains(&snapshot.display().to_string()), "the warning names the snapshot: {stderr}");
    for words in no_room {
        assert!(stderr.contains(words), "{words:?} not in {stderr}");
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["matches"], matches["matches"], "the same answer, from the old snapshot");
    assert!(v["index"]["stale"].as_str().is_some_and(|s| s.contains(no_room[0])), "{v}");
    assert!(v["index"]["age_s"].as_u64().is_some_and(|a| a >= 3600), "{v}");
    assert!(std::fs::read(&snapshot).unwrap() == bytes, "the old snapshot was changed");
    let left: Vec<_> = std::fs::read_dir(index_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!left.iter().any(|n| n.to_string_lossy().ends_with(".tmp")), "a temp file was left: {left:?}");

    let strict = from_index(&url, &jdl, index_dir, &["--strict"]);
    assert_eq!(strict.status.code(), Some(1), "{}", text(&strict));
    let err = String::from_utf8_lossy(&strict.stderr);
    assert!(err.contains(&snapshot.display().to_string()) && err.contains(no_room[0]), "{err}");
    assert!(strict.stdout.is_empty(), "{}", text(&strict));

    // Room again: the next list-match refreshes, with no warning.
    unfill().unwrap();
    let out = from_index(&url, &jdl, index_dir, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning:"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["matches"], matches["matches"]);
    assert!(v["index"]["stale"].is_null() && v["index"]["age_s"].as_u64().is_some_and(|a| a < 3600), "{v}");
}

#[test]
fn an_index_refresh_on_a_full_disk_keeps_the_old_snapshot_answering() {
    if !require_slapd() || !require_tmpfs() {
        return;
    }
    let disk = Tmpfs::mount(2 << 20).unwrap();
    let index = disk.path().join("index");
    old_snapshot_answers_on_a_full_disk(
        &index,
        || disk.fill(),
        || disk.unfill(),
        &["No space left on device", "the file system is full (the previous snapshot, if any, is kept)"],
    );
}

#[test]
fn an_index_refresh_over_a_used_up_quota_keeps_the_old_snapshot_answering() {
    if !require_slapd() || !require_quota_dir() {
        return;
    }
    let disk = QuotaDir::mount(4 << 20).unwrap();
    let index = disk.path().join("index");
    old_snapshot_answers_on_a_full_disk(
        &index,
        || disk.fill(),
        || disk.unfill(),
        &["Disk quota exceeded", "no space left under the disk quota (the previous snapshot, if any, is kept)"],
    );
}
