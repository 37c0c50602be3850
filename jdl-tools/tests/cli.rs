//! The `cder-jdl` binary: output formats, error lines and exit codes.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cder-jdl")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim_end().to_string()
}

fn data(p: &str) -> String {
    format!("{}/tests/data/{p}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn eval_prints_classad_syntax() {
    for (expr, want) in [
        ("1 + 2.5", "3.5"),
        ("strcat(\"GPU\", 2)", "\"GPU2\""),
        ("{1, \"a\", undefined}", "{ 1,\"a\",undefined }"),
        ("1 / 0", "error"),
        ("x", "undefined"),
        ("[a = 1; b = a + 1]", "[ a = 1; b = a + 1 ]"),
        ("2.0 * 3", "6.0"),
    ] {
        let o = run(&["eval", expr]);
        assert_eq!(o.status.code(), Some(0), "{expr}: {}", stderr(&o));
        assert_eq!(stdout(&o), want, "{expr}");
    }
}

#[test]
fn eval_json_has_type_and_value() {
    let o = run(&["eval", "--json", "{1, 2.5, \"s\", true, undefined, error, [a = 1]}"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["type"], "list");
    let items = v["value"].as_array().unwrap();
    let types: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["integer", "real", "string", "boolean", "undefined", "error", "classad"]);
    assert_eq!(items[1]["value"], 2.5);
    assert!(items[4]["value"].is_null() && items[5]["value"].is_null());
    assert_eq!(items[6]["value"]["a"]["value"], 1);
}

#[test]
fn eval_with_an_ad_in_scope() {
    let offer = data("thesis/listing_3_9_offer.ad");
    let o = run(&["eval", "--ad", &offer, "GPGPUCores / GPGPUMP"]);
    assert_eq!(stdout(&o), "48", "{}", stderr(&o));
    let o = run(&["eval", "--ad", &offer, "--json", "GPGPUVendor == \"NVIDIA\" && GPGPUMainMemorySize >= 512"]);
    assert_eq!(stdout(&o), r#"{"type":"boolean","value":true}"#);
}

#[test]
fn eval_errors_are_one_line_with_position_and_exit_2() {
    let o = run(&["eval", "1 + (2"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o), "<expr>:1:7: expected ')', found end of input");
    let dir = std::env::temp_dir().join(format!("cder-jdl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.ad");
    std::fs::write(&bad, "[\n a = 1;\n b = ]\n").unwrap();
    let o = run(&["eval", "--ad", bad.to_str().unwrap(), "a"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o), format!("{}:3:6: expected an expression, found ']'", bad.display()));
    let o = run(&["eval", "--ad", "/nonexistent/x.ad", "a"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("/nonexistent/x.ad: cannot read"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_accepts_the_thesis_jdls() {
    for f in ["thesis/listing_3_1_named_queue.jdl", "thesis/listing_3_11_phase2.jdl", "thesis/listing_3_10_request.jdl"]
    {
        let o = run(&["check", &data(f)]);
        assert_eq!(o.status.code(), Some(0), "{f}: {}", stderr(&o));
        assert!(stdout(&o).ends_with(": ok"), "{}", stdout(&o));
    }
}

#[test]
fn check_reports_every_problem() {
    let dir = std::env::temp_dir().join(format!("cder-jdl-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("job.jdl");
    std::fs::write(
        &f,
        "[\n  Executable = \"run.sh\";\n  Arguments = (1 + ;\n  Requirements = 5 * 2;\n  GPGPUPerNode = 0;\n  \
         VirtualGPGPUMethod = \"CUDA\";\n  Rank = foo(1)\n]\n",
    )
    .unwrap();
    let o = run(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let p = f.display().to_string();
    let lines: Vec<String> = stderr(&o).lines().map(String::from).collect();
    assert_eq!(
        lines,
        vec![
            format!("{p}:3:20: error: expected an expression, found ';'"),
            format!("{p}:4:3: error: Requirements must be boolean-valued, but it is a number"),
            format!("{p}:5:3: error: GPGPUPerNode must be a positive integer, but it is 0 (integer)"),
            format!("{p}:6:3: error: unknown VirtualGPGPUMethod \"CUDA\" (string): known methods are rCUDA, VCL"),
            format!("{p}:7:10: warning: unknown function 'foo' (the call evaluates to error)"),
        ]
    );
    // Warnings alone do not fail the check.
    std::fs::write(&f, "[ Requirements = foo(1) ]").unwrap();
    let o = run(&["check", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn help_and_version() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("Examples:") && stdout(&o).contains("check"));
    let o = run(&["eval", "--help"]);
    assert!(stdout(&o).contains("--json"));
    let o = run(&["--version"]);
    assert!(stdout(&o).starts_with("cder-jdl "));
    let o = run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn index_options_are_checked_and_a_missing_snapshot_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.jdl");
    std::fs::write(&job, "[ Requirements = other.GPGPUTotalInstances >= 1 ]").unwrap();
    let job = job.to_str().unwrap();
    let index = dir.path().join("index");
    let index = index.to_str().unwrap();
    let with_env = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_cder-jdl"))
            .args(args)
            .env_remove("LCG_GFAL_INFOSYS")
            .env_remove("CDER_INDEX_MAX_AGE")
            .env("CDER_INDEX_DIR", index)
            .output()
            .unwrap()
    };
    // Bad ages and periods are usage errors naming the option.
    for bad in ["-1", "nan", "1e12"] {
        let o = with_env(&["list-match", "--bdii", "ldap://127.0.0.1:9", &format!("--max-age={bad}"), job]);
        assert_eq!(o.status.code(), Some(2), "--max-age {bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("--max-age"), "{}", stderr(&o));
    }
    let o = with_env(&["index", "refresh", "--bdii", "ldap://127.0.0.1:9", "--period=-3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--period"), "{}", stderr(&o));
    // No BDII at all: usage, as for list-match.
    let o = with_env(&["index", "refresh"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no BDII"), "{}", stderr(&o));
    // No snapshot: show says where it looked; nothing is created by looking.
    let o = with_env(&["index", "show", "--bdii", "ldap://127.0.0.1:9"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("no index of ldap://127.0.0.1:9") && stderr(&o).contains(index), "{}", stderr(&o));
    assert!(!std::path::Path::new(index).exists());
    // The help names the options of freshness.
    let o = run(&["list-match", "--help"]);
    for opt in ["--live", "--max-age", "--strict", "--index-dir", "CDER_INDEX_DIR", "CDER_INDEX_MAX_AGE"] {
        assert!(stdout(&o).contains(opt), "list-match --help lacks {opt}");
    }
    let o = run(&["index", "refresh", "--help"]);
    assert!(stdout(&o).contains("UpdateStats") && stdout(&o).contains("--force"), "{}", stdout(&o));
}
