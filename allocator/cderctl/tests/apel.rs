//! `cderctl accounting --apel` end to end: a real cderd, the spool read by
//! python-dirq's QueueSimple as ssmsend reads it, and every message parsed by
//! APEL's own loader code (third-party/apel, unmodified).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::node_cli::{text, Daemon};

/// The venv deploy/install-deps.sh makes, holding python-dirq, jsonschema,
/// future and iso8601 (what APEL's loader imports).
fn python() -> PathBuf {
    std::env::var_os("CDER_VENV").map_or_else(|| PathBuf::from("/opt/cder-venv"), PathBuf::from).join("bin/python")
}

fn python_ready() -> bool {
    Command::new(python())
        .args(["-c", "import dirq, jsonschema, future, iso8601"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn this_month() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    // Civil month of a unix time (Howard Hinnant's days → date).
    let z = now.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}")
}

/// The spool's one message as APEL's own loader reads it (apel_check.py):
/// checks that it passed APEL's schema and record checks and that every
/// field came back as written; returns apel_check.py's output.
fn apel_loaded(spool: &Path) -> serde_json::Value {
    let checked = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apel_check.py"))
        .arg(spool)
        .env("PYTHONPATH", Path::new(env!("CARGO_MANIFEST_DIR")).join("../../third-party/apel"))
        .output()
        .unwrap();
    assert!(checked.status.success(), "APEL's loader refused cder's records: {}", text(&checked.stderr));
    let out: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(out["elements"], 1, "one message in the spool: {out}");
    let sent = &out["messages"][0];
    assert_eq!(sent["Type"], "APEL-accelerator-message");
    assert_eq!(sent["Version"], "0.1");
    let parsed = out["records"].as_array().unwrap();
    let written = sent["UsageRecords"].as_array().unwrap();
    assert_eq!(parsed.len(), written.len(), "{out}");
    // Every field APEL keeps round-trips; APEL stores a missing string as "None".
    for (w, p) in written.iter().zip(parsed) {
        for (k, v) in w.as_object().unwrap() {
            let want = match v {
                serde_json::Value::Null if k == "GlobalUserName" => serde_json::json!("None"),
                other => other.clone(),
            };
            assert_eq!(&p[k], &want, "{k}: written {v}, APEL holds {}", p[k]);
        }
    }
    out
}

#[test]
fn apel_records_of_share_jobs_count_their_fraction() {
    if !cder_testkit::require(
        python_ready(),
        &format!("{} with dirq, jsonschema, future, iso8601 (deploy/install-deps.sh)", python().display()),
    ) {
        return;
    }
    let d = Daemon::start_with("[node.sharing]\nshares_per_gpu = 4\n");
    d.alloc_shares("slurm:51", 0, 4);
    d.alloc_shares("slurm:52", 1, 1);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    for job in ["slurm:51", "slurm:52"] {
        assert!(d.ctl(&["release", "--job", job]).status.success());
    }
    let spool = d.dir.path().join("outgoing");
    let month = this_month();
    let out =
        d.ctl(&["accounting", "--apel", "--month", &month, "--site", "TEST-SITE", "--spool", spool.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("2 record(s) in 1 message(s)"), "{}", text(&out.stderr));
    let out = apel_loaded(&spool);
    let by_job = |id: &str| {
        out["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["AssociatedRecord"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id}: {out}"))
    };
    let (all, one) = (by_job("51"), by_job("52"));
    // Count is the part of a GPU: all 4 of 4 shares one GPU, 1 of 4 a quarter;
    // AvailableDuration stays the seconds held.
    assert_eq!((&all["Count"], &all["Type"]), (&1.0.into(), &"GPU".into()), "{out}");
    assert_eq!((&one["Count"], &one["Type"]), (&0.25.into(), &"GPU".into()), "{out}");
    assert!(all["AvailableDuration"].as_i64().unwrap() >= 2, "{out}");
    assert!(one["AvailableDuration"].as_i64().unwrap() >= 2, "{out}");
}

#[test]
fn apel_records_parse_with_apels_own_loader() {
    if !cder_testkit::require(
        python_ready(),
        &format!("{} with dirq, jsonschema, future, iso8601 (deploy/install-deps.sh)", python().display()),
    ) {
        return;
    }
    let d = Daemon::start();
    let ok = |args: &[&str]| {
        let out = d.ctl(args);
        assert!(out.status.success(), "cderctl {args:?}: {}", text(&out.stderr));
        out
    };
    ok(&["alloc", "--job", "slurm:4242", "--uid", "1001", "--count", "2"]);
    ok(&["alloc", "--job", "torque:17.ce.example.org", "--uid", "2000", "--count", "1"]);
    // Accounting counts whole seconds: let the jobs hold their devices for some.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    ok(&["release", "--job", "torque:17.ce.example.org"]);
    let map = d.dir.path().join("apel-users.toml");
    std::fs::write(
        &map,
        "default_fqan = \"/ops\"\n[[user]]\nuids = \"1000-1010\"\nfqan = \"/atlas/Role=production/Capability=NULL\"\n\
         global_user_name = \"/DC=ch/DC=cern/CN=Jane Doe\"\n",
    )
    .unwrap();
    let spool = d.dir.path().join("outgoing");
    let month = this_month();
    let args = ["accounting", "--apel", "--month", &month, "--site", "TEST-SITE", "--spool"];
    let mut args: Vec<&str> = args.to_vec();
    args.extend([spool.to_str().unwrap(), "--user-map", map.to_str().unwrap()]);
    let wrote = ok(&args);
    assert!(text(&wrote.stderr).contains("2 record(s) in 1 message(s)"), "{}", text(&wrote.stderr));

    let out = apel_loaded(&spool);
    let parsed = out["records"].as_array().unwrap();
    assert_eq!(parsed.len(), 2, "{out}");
    let by_job =
        |id: &str| parsed.iter().find(|r| r["AssociatedRecord"] == id).unwrap_or_else(|| panic!("{id}: {out}"));
    let slurm = by_job("4242");
    assert_eq!(slurm["AssociatedRecordType"], "job");
    assert_eq!(slurm["SiteName"], "TEST-SITE");
    assert_eq!(slurm["Count"], 2.0);
    assert_eq!(slurm["Type"], "GPU");
    assert_eq!(slurm["Model"], "Tesla K20m");
    assert_eq!(slurm["FQAN"], "/atlas/Role=production/Capability=NULL");
    assert_eq!(slurm["GlobalUserName"], "/DC=ch/DC=cern/CN=Jane Doe");
    assert_eq!(slurm["MeasurementMonth"].as_i64().unwrap(), month[5..].parse::<i64>().unwrap());
    assert_eq!(slurm["MeasurementYear"].as_i64().unwrap(), month[..4].parse::<i64>().unwrap());
    let torque = by_job("17.ce.example.org");
    assert_eq!(torque["Count"], 1.0);
    assert!(torque["AvailableDuration"].as_i64().unwrap() >= 2, "{torque}");
    assert!(slurm["AvailableDuration"].as_i64().unwrap() >= 2, "{slurm}");
    assert_eq!(torque["FQAN"], "/ops", "an unmapped uid gets the map's default");
    // Static devices have no sampler behind them: nothing measured, nothing claimed.
    assert_eq!(torque["ActiveDuration"], serde_json::Value::Null);

    // Bad input is refused with exit 2, naming what is wrong.
    let bad = d.ctl(&["accounting", "--apel", "--month", "2026-13", "--site", "S"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    let bad = d.ctl(&["accounting", "--apel", "--month", &month]);
    assert_eq!(bad.status.code(), Some(2), "--site is required: {}", text(&bad.stderr));
    std::fs::write(&map, "[[user]]\nuid = 1\nfqan = \"\"\n").unwrap();
    let bad = d.ctl(&["accounting", "--apel", "--month", &month, "--site", "S", "--user-map", map.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("user[0].fqan"), "{}", text(&bad.stderr));
}
