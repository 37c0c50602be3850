//! The submit filter as qsub runs it: the job script on stdin, qsub's own
//! arguments on argv, the filtered script on stdout, a non-zero exit with a
//! message on stderr to refuse. (TORQUE is not packaged for these machines;
//! this reproduces qsub's side of the SUBMITFILTER contract.)
//!
//! Every case is a real-world style script in tests/scripts/<name>.in with
//! the exact expected output in <name>.out.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts")
}

/// Runs the filter like qsub: empty environment but for `env`.
fn run(script: &[u8], args: &[&str], settings: &str, env: &[(&str, &str)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("torque.toml");
    std::fs::write(&toml, settings).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cder-torque-submit-filter"))
        .args(args)
        .env_clear()
        .env("CDER_TORQUE_CONFIG", &toml)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A filter that exits early may close its stdin; qsub copes, so do we.
    let _ = child.stdin.take().unwrap().write_all(script);
    child.wait_with_output().unwrap()
}

const NATIVE: &str = "";
const MAUI: &str = "[torque]\ndirective = \"maui\"\n";

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    settings: &'static str,
    env: &'static [(&'static str, &'static str)],
}

const CASES: &[Case] = &[
    Case { name: "gromacs_native", args: &[], settings: NATIVE, env: &[] },
    Case { name: "cder_line", args: &[], settings: NATIVE, env: &[] },
    Case { name: "combined_list", args: &[], settings: NATIVE, env: &[] },
    Case { name: "already_gpus", args: &[], settings: NATIVE, env: &[] },
    Case { name: "attached_quoted_multipart", args: &[], settings: NATIVE, env: &[] },
    Case { name: "quoted_nodes", args: &[], settings: NATIVE, env: &[] },
    Case { name: "no_request", args: &[], settings: NATIVE, env: &[] },
    Case { name: "no_request", args: &[], settings: MAUI, env: &[] },
    Case { name: "after_first_command", args: &[], settings: NATIVE, env: &[] },
    Case { name: "no_shebang", args: &["-v", "GPGPUPerNode=1"], settings: NATIVE, env: &[] },
    Case { name: "maui_thesis", args: &[], settings: MAUI, env: &[] },
    Case { name: "maui_existing_x", args: &[], settings: MAUI, env: &[] },
    Case { name: "custom_prefix", args: &["-C", "#MY", "-vGPGPUPerNode=2"], settings: NATIVE, env: &[] },
    Case { name: "custom_prefix", args: &["-v", "GPGPUPerNode=2"], settings: NATIVE, env: &[("PBS_DPREFIX", "#MY")] },
    Case { name: "crlf", args: &[], settings: NATIVE, env: &[] },
    Case { name: "no_final_newline", args: &[], settings: NATIVE, env: &[] },
    Case {
        name: "cli_request",
        args: &["-q", "gpu", "-v", "GPGPUPerNode=3", "-N", "job", "job.sh"],
        settings: NATIVE,
        env: &[],
    },
    Case {
        name: "cli_overrides",
        args: &["-v", "GPGPUPerNode=2", "-l", "nodes=1:ppn=2:gpus=2", "job.sh"],
        settings: NATIVE,
        env: &[],
    },
    Case { name: "v_from_env", args: &[], settings: NATIVE, env: &[("GPGPUPerNode", "2")] },
];

#[test]
fn table_of_real_world_scripts() {
    let mut failures = Vec::new();
    for case in CASES {
        let input = std::fs::read(scripts().join(format!("{}.in", case.name))).unwrap();
        let expected = std::fs::read(scripts().join(format!("{}.out", case.name))).unwrap();
        let out = run(&input, case.args, case.settings, case.env);
        if !out.status.success() || out.stdout != expected {
            failures.push(format!(
                "{} {:?}: status {:?}\n--- expected\n{}--- got\n{}--- stderr\n{}",
                case.name,
                case.args,
                out.status.code(),
                String::from_utf8_lossy(&expected),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn directives_after_the_first_command_are_reported() {
    let input = std::fs::read(scripts().join("after_first_command.in")).unwrap();
    let out = run(&input, &[], NATIVE, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job script line 4: ignored"), "{err}");
    assert!(err.contains("job script line 5: ignored"), "{err}");
}

/// (script, qsub args, settings, the message's distinctive part)
const REJECTED: &[(&str, &[&str], &str, &str)] = &[
    ("#PBS -v GPGPUPerNode=two\n./a\n", &[], NATIVE, "job script line 1: GPGPUPerNode=two: not a whole number"),
    ("#PBS -v GPGPUPerNode=-1\n./a\n", &[], NATIVE, "GPGPUPerNode=-1: not a whole number"),
    ("#PBS -v GPGPUPerNode=1.5\n", &[], NATIVE, "GPGPUPerNode=1.5: not a whole number"),
    // 0 is refused on every door (cder_request), as sbatch --gpgpu-per-node=0 is.
    ("#!/bin/sh\n#PBS -v GPGPUPerNode=0\ntrue\n", &[], NATIVE, "job script line 2: GPGPUPerNode=0: the count must be at least 1"),
    ("#CDER GPGPUPerNode=\n", &[], NATIVE, "GPGPUPerNode=: no value"),
    ("#CDER GPGPUPerNode=65\n", &[], NATIVE, "more than this site's limit of 64 per node"),
    ("#CDER GPGPUPerNode=3\n", &[], "[torque]\nmax_per_node = 2\n", "limit of 2 per node"),
    ("#CDER GPGPUPerNode=99999999999\n", &[], NATIVE, "far too large"),
    ("#!/bin/sh\n#CDER GPUs=2\n", &[], NATIVE, "job script line 2: #CDER GPUs=2: unknown key"),
    ("#PBS -v GPGPUPerNode=1\n#CDER GPGPUPerNode=2\n", &[], NATIVE, "job script line 2: GPGPUPerNode=2 contradicts GPGPUPerNode=1 on line 1"),
    ("#PBS -l nodes=1:ppn=2:gpus=1\n#PBS -v GPGPUPerNode=2\n", &[], NATIVE, "job script line 1: nodes=1:ppn=2:gpus=1 asks for gpus=1, which contradicts GPGPUPerNode=2"),
    ("#PBS -l nodes=1:gpus=many\n", &[], NATIVE, "job script line 1: nodes …:gpus=many: not a whole number"),
    ("./a\n", &["-v", "GPGPUPerNode=x"], NATIVE, "qsub command line: GPGPUPerNode=x: not a whole number"),
    (
        "./a\n",
        &["-v", "GPGPUPerNode=2", "-l", "nodes=1:ppn=4"],
        NATIVE,
        "-l nodes=1:ppn=4 overrides the job script, so GPGPUPerNode=2 cannot be added to it; ask there: -l nodes=1:ppn=4:gpus=2",
    ),
    (
        "#CDER GPGPUPerNode=1\n",
        &["-W", "x=NACCESSPOLICY:SINGLEJOB"],
        MAUI,
        "ask there: -W x=NACCESSPOLICY:SINGLEJOB;GRES:gpus@1",
    ),
    ("#PBS -W x=GRES:gpus@4\n#CDER GPGPUPerNode=1\n", &[], MAUI, "job script line 1: x=GRES:gpus@4 asks MAUI for 4 per node, which contradicts GPGPUPerNode=1"),
    ("#PBS -W x=GRES:gpus@999\n", &[], MAUI, "job script line 1: x=GRES:gpus@999: more than this site's limit of 64 per node"),
    // A device mark written by hand, in a form the scheduler does not count.
    ("#!/bin/sh\n#PBS -l nodes=1:ppn=1,other=cder:gpgpu:4\n./a\n", &[], NATIVE, "job script line 2: -l other=cder:gpgpu:4: TORQUE does not count devices asked for this way"),
    ("./a\n", &["-l", "other=cder:gpgpu:4"], NATIVE, "qsub command line: -l other=cder:gpgpu:4: TORQUE does not count"),
    ("#PBS -l gres=gpus:2\n./a\n", &[], NATIVE, "job script line 1: -l gres=gpus:2: TORQUE does not count"),
    ("#PBS -l other=cder:gpgpu:4\n./a\n", &[], MAUI, "job script line 1: -l other=cder:gpgpu:4: cder's mark is written by the submit filter from the GRES count MAUI sees, and the job asks MAUI for no gpgpu"),
    ("#PBS -W x=GRES:gpus@1\n#PBS -l other=cder:gpgpu:4\n./a\n", &[], MAUI, "job script line 2: -l other=cder:gpgpu:4: cder's mark is written by the submit filter from the GRES count MAUI sees, and the job's request needs other=cder:gpgpu:1"),
    // A Latin-1 comment does not end qsub's header, so what follows counts.
    ("#!/bin/sh\n# r\u{e9}sum\u{e9}\n#PBS -l nodes=1:gpus=999\n./a\n", &[], NATIVE, "job script line 3: nodes …:gpus=999: more than this site's limit of 64 per node"),
    ("#PBS -l \\\nnodes=1:gpus=999\n", &[], NATIVE, "job script line 1: nodes …:gpus=999: more than this site's limit"),
    ("./a\n", &["-C", "", "-v", "GPGPUPerNode=1"], NATIVE, "-C \"\" turns directives off"),
    ("#PBS -l other=scratch\n#CDER GPGPUPerNode=1\n", &[], MAUI, "job script line 1: -l other=scratch: cder needs other=cder:gpgpu:1"),
    ("#PBS -N\n", &[], NATIVE, "job script line 1: option -N needs a value"),
];

#[test]
fn bad_requests_are_refused_with_a_message() {
    for (script, args, settings, message) in REJECTED {
        let out = run(script.as_bytes(), args, settings, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{script:?} {args:?}: {err}");
        assert!(out.stdout.is_empty(), "{script:?}: a refused job prints no script");
        assert!(err.starts_with("cder: job refused: "), "{err}");
        assert!(err.contains(message), "{script:?} {args:?}:\n  wanted {message:?}\n  got    {err}");
    }
}

/// qsub reads the script as bytes; a Latin-1 comment (not UTF-8)
/// does not end the directives, so an over-limit request after it is
/// refused, and a `-v GPGPUPerNode` after it is honoured.
#[test]
fn latin1_comment_then_over_limit_directive_is_refused() {
    let script = b"#!/bin/bash\n# Auteur : Fran\xe7ois, r\xe9sum\xe9 des calculs\n#PBS -l nodes=1:gpus=999\n./run\n";
    let out = run(script, &[], NATIVE, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("job script line 3: nodes …:gpus=999: more than this site's limit of 64 per node"), "{err}");
}

#[test]
fn latin1_comment_then_v_gpgpupernode_is_honoured() {
    let script = b"#!/bin/bash\n# Auteur : Fran\xe7ois\n#PBS -l nodes=1:ppn=4\n#PBS -v GPGPUPerNode=2\n./run\n";
    let out = run(script, &[], NATIVE, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("ignored"), "no wrong note: {err}");
    // The Latin-1 bytes pass through unchanged; the request is written.
    assert_eq!(
        out.stdout,
        b"#!/bin/bash\n# Auteur : Fran\xe7ois\n#PBS -l nodes=1:ppn=4:gpus=2\n#PBS -v GPGPUPerNode=2\n./run\n".to_vec()
    );
    // MAUI mode likewise.
    let out = run(script, &[], MAUI, &[]);
    assert_eq!(out.status.code(), Some(0));
    let text = out.stdout;
    assert!(
        text.ends_with(b"#PBS -v GPGPUPerNode=2\n#PBS -W x=GRES:gpus@2\n#PBS -l other=cder:gpgpu:2\n./run\n"),
        "{}",
        String::from_utf8_lossy(&text)
    );
}

/// MAUI mode: a job that asks MAUI directly (`-W x=GRES:gpus@N`) gets the
/// mark the prologue reads; one that repeats the filter's mark is accepted
/// (a resubmitted, already filtered script).
#[test]
fn maui_gres_requests_get_the_mark() {
    let out = run(b"#!/bin/sh\n#PBS -W x=GRES:gpus@2\n./run\n", &[], MAUI, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"#!/bin/sh\n#PBS -W x=GRES:gpus@2\n#PBS -l other=cder:gpgpu:2\n./run\n".to_vec());
    let again = run(&out.stdout, &[], MAUI, &[]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(again.stdout, out.stdout, "filtering twice changes nothing");
}

#[test]
fn broken_settings_are_a_runtime_failure_naming_the_line() {
    let out = run(b"./a\n", &[], "[torque]\ndirective = \"lsf\"\n", &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("torque.toml:2:"), "{err}");
}

#[test]
fn help_and_version() {
    let out = Command::new(env!("CARGO_BIN_EXE_cder-torque-submit-filter")).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("SUBMITFILTER"));
    let out = Command::new(env!("CARGO_BIN_EXE_cder-torque-submit-filter")).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("cder-torque-submit-filter "));
}
