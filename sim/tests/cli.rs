//! The command line: --help, a replay's table, JSON and plots, and the
//! exit status of bad input (2) with the line named.

use std::path::Path;
use std::process::{Command, Output};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cder-sim")).args(args).output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Two nodes of 8 cores and 2 GPUs; FCFS, least loaded first.
const CLUSTER: &str = "[[nodes]]\nnames = \"wn[1-2]\"\ncores = 8\ngpus = 2\ngpu_model = \"GTS450\"\n\
                       [scheduler]\nqueue = \"fcfs\"\nnode = \"least-loaded\"\n";

/// A site's sacct: two one-GPU jobs, then a two-GPU one, and a job step.
const SACCT: &str = "JobID|Submit|Start|End|Elapsed|NNodes|NCPUS|AllocTRES|Timelimit|State\n\
    1|2024-05-01T00:00:00|2024-05-01T00:00:00|2024-05-01T00:10:00|00:10:00|1|2|cpu=2,gres/gpu=1|01:00:00|COMPLETED\n\
    2|2024-05-01T00:00:01|2024-05-01T00:00:01|2024-05-01T00:10:01|00:10:00|1|2|cpu=2,gres/gpu=1|01:00:00|COMPLETED\n\
    2.batch|2024-05-01T00:00:01|2024-05-01T00:00:01|2024-05-01T00:10:01|00:10:00|1|2|cpu=2|01:00:00|COMPLETED\n\
    3|2024-05-01T00:00:02|2024-05-01T00:00:02|2024-05-01T00:10:02|00:10:00|1|2|cpu=2,gres/gpu=2|01:00:00|COMPLETED\n";

fn files(dir: &Path, sacct: &str) -> (String, String) {
    let c = dir.join("cluster.toml");
    let t = dir.join("may.txt");
    std::fs::write(&c, CLUSTER).unwrap();
    std::fs::write(&t, sacct).unwrap();
    (c.display().to_string(), t.display().to_string())
}

#[test]
fn help_says_what_it_does_and_its_exit_status() {
    let o = sim(&["--help"]);
    let (out, _) = text(&o);
    assert!(o.status.success());
    for needed in ["EXAMPLES:", "EXIT STATUS:", "--policy", "--bad-lines", "local-first", "sacct -P"] {
        assert!(out.contains(needed), "--help lacks {needed:?}:\n{out}");
    }
    assert!(sim(&["--version"]).status.success());
}

#[test]
fn a_site_replays_its_sacct_under_several_policies() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, trace) = files(dir.path(), SACCT);
    let plots = dir.path().join("plots");
    let o = sim(&[
        "--trace",
        &trace,
        "--cluster",
        &cluster,
        "--policy",
        "physical,local-first,random",
        "--plots",
        plots.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("3 jobs"), "{out}");
    // Physical: job 3 waits for a node with two free GPUs (10 min); vGPGPUs take one on each.
    let row =
        |p: &str| out.lines().find(|l| l.starts_with(p)).unwrap_or_else(|| panic!("no {p} row:\n{out}")).to_string();
    assert!(row("physical ").contains("20m 00s"), "{out}");
    assert!(row("local-first").contains("10m 02s"), "{out}");
    for svg in ["gpu-utilisation.svg", "waits.svg"] {
        let body = std::fs::read_to_string(plots.join(svg)).unwrap();
        assert!(body.starts_with("<svg") && body.contains("local-first"), "{svg}");
    }
    let o = sim(&["--trace", &trace, "--cluster", &cluster, "--policy", "physical", "--policy", "spread", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["jobs"], 3);
    assert_eq!(v["policies"][1]["policy"], "spread");
    assert_eq!(v["policies"][0]["makespan_s"], 1200.0);
}

#[test]
fn a_malformed_line_is_named_and_exit_2_unless_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let broken = SACCT.replace("T00:10:01|00:10:00", "T00:10:01|00:1O:00");
    let (cluster, trace) = files(dir.path(), &broken);
    let o = sim(&["--trace", &trace, "--cluster", &cluster]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("may.txt:3: Elapsed: \"00:1O:00\" is not [D-]HH:MM:SS"), "{err}");
    let o = sim(&["--trace", &trace, "--cluster", &cluster, "--bad-lines", "skip"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("skipped") && err.contains("may.txt:3"), "{err}");
    assert!(out.contains("2 jobs"), "{out}");
    // An unknown policy, a bad cluster file: bad input too.
    assert_eq!(sim(&["--trace", &trace, "--cluster", &cluster, "--policy", "fastest"]).status.code(), Some(2));
    std::fs::write(dir.path().join("cluster.toml"), "[[nodes]]\nnames = \"wn1\"\ncore = 8\n").unwrap();
    let o = sim(&["--trace", &trace, "--cluster", &cluster]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("cluster.toml:3"), "{}", text(&o).1);
    assert_eq!(sim(&["--cluster", &cluster]).status.code(), Some(2), "no --trace is a usage error");
}
