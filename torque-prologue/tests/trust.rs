//! Device exclusivity and privilege on the TORQUE side, against a real cderd and real
//! cgroups, with the hooks run exactly as pbs_mom runs them (TORQUE is not
//! packaged here; tests/common/mod.rs reproduces pbs_mom's contract, and
//! its job files and gpu file as TORQUE's source writes them).
//!
//! * the batch system decides how many devices (only the form the
//!   scheduler counts) and, where it chose, which (exec_gpus);
//! * the job starter puts the job into cderd's device cgroup, so two jobs of
//!   one user cannot open each other's devices, and never runs a job as root;
//! * reconcile never frees an allocation newer than its snapshot.

use crate::common;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{epilogue_args, hostname, prologue_args, Devices, Node, JOB_GID, JOB_UID};

fn set(v: &[u32]) -> BTreeSet<u32> {
    v.iter().copied().collect()
}

/// The submit filter as qsub runs it, with `settings` as torque.toml.
fn submit_filter(node: &Node, script: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cder-torque-submit-filter"))
        .env_clear()
        .env("CDER_TORQUE_CONFIG", &node.torque_toml)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(script);
    child.wait_with_output().unwrap()
}

#[test]
fn hand_written_mark_is_refused_by_the_filter_and_ignored_by_the_prologue() {
    let Some(node) = Node::start("[torque]\ndirective = \"native\"\n") else { return };
    let script = b"#!/bin/sh\n#PBS -l nodes=1:ppn=1\n#PBS -l other=cder:gpgpu:4\n./grab-all-gpus\n";
    let out = submit_filter(&node, script);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("job script line 3: -l other=cder:gpgpu:4: TORQUE does not count devices asked for this way"),
        "{err}"
    );

    // Submitted some other way, the mark reaches pbs_mom; TORQUE counted no
    // GPUs for the job, and the prologue gives it none.
    let r = node.hook(
        "prologue",
        &prologue_args("700.ce", "neednodes=1:ppn=1,nodes=1:ppn=1,other=cder:gpgpu:4,walltime=01:00:00"),
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("ignored other=cder:gpgpu:4"), "the job's error file says why: {r:?}");
    assert!(node.holders().is_empty(), "{:?}", node.holders());
    // So a later job that TORQUE counted four GPUs for runs, not requeued.
    let r = node.hook("prologue", &prologue_args("701.ce", "neednodes=1:ppn=1:gpus=4,nodes=1:ppn=1:gpus=4"));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(node.holders()["torque:701.ce"].len(), 4);
}

#[test]
fn torque_assigned_gpus_are_adopted_from_the_gpu_file_and_the_job_file() {
    let Some(node) = Node::start("") else { return };
    let host = hostname();
    // Mother superior: pbs_mom wrote $PBS_HOME/aux/<id>gpu (PBS_GPUFILE)
    // before the prologue; another host's GPU in it is not ours.
    std::fs::write(node.pbs_home().join("aux/800.ce.example.orggpu"), format!("{host}-gpu3\n{host}-gpu1\nwn99-gpu0\n"))
        .unwrap();
    node.write_job_file("800.ce.example.org", Some(&format!("{host}-gpu/3+{host}-gpu/1+wn99-gpu/0")));
    let r =
        node.hook("prologue", &prologue_args("800.ce.example.org", "neednodes=2:ppn=1:gpus=2,nodes=2:ppn=1:gpus=2"));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(set(&node.holders()["torque:800.ce.example.org"]), set(&[1, 3]), "exactly TORQUE's choice");

    // A sister (prologue.parallel) has no gpu file: exec_gpus of the job file.
    node.write_job_file("801.ce", Some(&format!("wn98-gpu/0+{host}-gpu/2")));
    let r = node.hook("prologue.parallel", &prologue_args("801.ce", "nodes=2:ppn=1:gpus=1"));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(node.holders()["torque:801.ce"], vec![2]);

    // TORQUE assigns a GPU cderd's ledger has held by another job: the
    // batch system and the ledger disagree; the job is requeued, loudly.
    node.write_job_file("802.ce", Some(&format!("{host}-gpu/2")));
    let r = node.hook("prologue", &prologue_args("802.ce", "nodes=1:ppn=1:gpus=1"));
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("the batch system and the ledger disagree"), "{r:?}");
    assert!(!node.holders().contains_key("torque:802.ce"));

    // Without a TORQUE assignment (no exec_gpus), cderd chooses as many as counted.
    node.write_job_file("803.ce", None);
    assert_eq!(node.hook("prologue", &prologue_args("803.ce", "nodes=1:ppn=1:gpus=1")).code, 0);
    assert_eq!(node.holders()["torque:803.ce"], vec![0]);
}

#[test]
fn a_sister_gets_only_what_exec_gpus_names_for_it() {
    let Some(node) = Node::start("") else { return };
    let host = hostname();
    // qsub -l nodes=wnA:ppn=1:gpus=1+<this host>:ppn=1: TORQUE put the one
    // GPU on wnA and counts every GPU of this host free.
    let limits = format!("neednodes=wnA:ppn=1:gpus=1+{host}:ppn=1,nodes=wnA:ppn=1:gpus=1+{host}:ppn=1");
    node.write_job_file("1100.ce", Some("wnA-gpu/0"));
    let r = node.hook("prologue.parallel", &prologue_args("1100.ce", &limits));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!node.holders().contains_key("torque:1100.ce"), "TORQUE counted no GPU here: {:?}", node.holders());

    // TORQUE 4.2's binary job file, with a -v list that spells exec_gpus
    // (the arst value is saved NUL-separated) before TORQUE's own record.
    let variables = format!("PBS_O_HOME=/home/u\0X=exec_gpus\0{host}-gpu/3\0exec_gpus\0{host}-gpu/2\0");
    node.write_binary_job_file(
        "1101.ce",
        &[
            ("Job_Name", None, b"x\0"),
            ("Resource_List", Some("nodes"), limits.as_bytes()),
            ("Variable_List", None, variables.as_bytes()),
            ("exec_gpus", None, b"wnA-gpu/0\0"),
        ],
    );
    let r = node.hook("prologue.parallel", &prologue_args("1101.ce", &limits));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(!node.holders().contains_key("torque:1101.ce"), "the variable list is not exec_gpus: {:?}", node.holders());
    // The same on the mother superior, where TORQUE did assign one here.
    node.write_binary_job_file(
        "1102.ce",
        &[
            ("Job_Name", None, b"x\0"),
            ("Variable_List", None, variables.as_bytes()),
            ("exec_gpus", None, format!("{host}-gpu/1+wnA-gpu/0\0").as_bytes()),
        ],
    );
    let r = node.hook("prologue", &prologue_args("1102.ce", "nodes=2:ppn=1:gpus=1"));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(node.holders()["torque:1102.ce"], vec![1], "exactly TORQUE's record");
}

/// Runs, through the job starter as pbs_mom execs it, a job that tries to
/// read one byte of each device; prints its environment's device list and
/// each open's outcome.
fn probe(node: &Node, job: &str) -> common::Run {
    probe_with(node, job, &[])
}

/// [`probe`] with more variables in the job's environment.
fn probe_with(node: &Node, job: &str, env: &[(&str, &str)]) -> common::Run {
    let mut script = String::from("echo \"CVD=$CUDA_VISIBLE_DEVICES\"\n");
    for (i, p) in node.device_paths.iter().enumerate() {
        script.push_str(&format!("if head -c 1 {} >/dev/null 2>/tmp/cder-probe-$$; then echo 'dev{i} open'; else echo \"dev{i} $(cat /tmp/cder-probe-$$)\"; fi\n", p.display()));
    }
    script.push_str("rm -f /tmp/cder-probe-$$\n");
    let mut all = vec![("PBS_JOBID", job), ("PATH", "/usr/bin:/bin")];
    all.extend_from_slice(env);
    node.job_starter(JOB_UID, JOB_GID, &all, &["/bin/sh", "-sh"], script.as_bytes())
}

/// A torque.toml the job's user wrote, as `qsub -v CDER_TORQUE_CONFIG=$HOME/t.toml` names it.
fn users_own_torque_toml(node: &Node) -> std::path::PathBuf {
    let path = node.dir.path().join("users-t.toml");
    std::fs::write(&path, "[torque]\nconfine = \"off\"\n").unwrap();
    std::os::unix::fs::chown(&path, Some(JOB_UID), Some(JOB_GID)).unwrap();
    path
}

#[test]
fn the_jobs_environment_does_not_configure_the_job_starter() {
    let Some(node) = Node::start_with("[torque]\nconfine = \"required\"\n", Devices::Char { cgroup: "v1" }) else {
        return;
    };
    let user_toml = users_own_torque_toml(&node);
    let hostile = [("CDER_CONFIG", "/nonexistent"), ("CDER_TORQUE_CONFIG", user_toml.to_str().unwrap())];

    // The audit's repro: the starter itself as $job_starter names it, as
    // uid 65534 with `env -i PBS_JOBID=17.ce CDER_CONFIG=/nonexistent …`.
    // It reads /etc/cder only, and a job it cannot confine does not run.
    let mut env = vec![("PBS_JOBID", "17.ce")];
    env.extend_from_slice(&hostile);
    let r = node.run_as(JOB_UID, JOB_GID, &node.job_starter_bin, &["/bin/sh", "-c", "echo JOB RAN"], &env);
    assert!(!r.stdout.contains("JOB RAN"), "ran unconfined: {r:?}");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not starting the job"), "the job's error file says why: {r:?}");

    // As pbs_mom runs it the variables change nothing either: cderd has
    // no record of 17.ce, so it is refused …
    let r = node.job_starter(JOB_UID, JOB_GID, &env, &["/bin/sh", "-sh"], b"echo JOB RAN\n");
    assert!(!r.stdout.contains("JOB RAN"), "{r:?}");
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("cderd has no record of the job") && r.stderr.contains("confine = \"required\""),
        "{r:?}"
    );

    // … and a recorded job runs confined, away from every device.
    assert_eq!(node.hook("prologue", &prologue_args("1200.ce", "neednodes=1:ppn=1,nodes=1:ppn=1")).code, 0);
    let r = probe_with(&node, "1200.ce", &hostile);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("CVD=\n"), "{}", r.stdout);
    for i in 0..4 {
        let line = r.stdout.lines().find(|l| l.starts_with(&format!("dev{i} "))).unwrap_or_default();
        assert!(
            line.contains("Operation not permitted"),
            "device {i} is fenced whatever the job's variables say: {}",
            r.stdout
        );
    }
    assert_eq!(node.hook("epilogue", &epilogue_args("1200.ce")).code, 0);
}

#[test]
fn with_cderd_down_the_job_starter_does_not_start_the_job() {
    let Some(mut node) = Node::start("[torque]\nconfine = \"required\"\n") else { return };
    assert_eq!(node.hook("prologue", &prologue_args("1300.ce", "nodes=1:ppn=1:gpus=1")).code, 0);
    node.stop_cderd();
    let socket = node.socket.display().to_string();
    for confine in ["required", "optional"] {
        std::fs::write(&node.torque_toml, format!("[torque]\nconfine = \"{confine}\"\n")).unwrap();
        let r = node.job_starter(JOB_UID, JOB_GID, &[("PBS_JOBID", "1300.ce")], &["/bin/sh", "-sh"], b"echo JOB RAN\n");
        assert_eq!(r.code, 1, "{confine}: {r:?}");
        assert!(!r.stdout.contains("JOB RAN"), "{confine}: {r:?}");
        assert!(
            r.stderr.contains(&socket) && r.stderr.contains(&format!("confine = \"{confine}\"")),
            "{confine}: the reason, in the job's error file: {r:?}"
        );
    }
    // "off" (TORQUE's own cgroups fence the devices): the empty list.
    std::fs::write(&node.torque_toml, "[torque]\nconfine = \"off\"\n").unwrap();
    let r = node.job_starter(
        JOB_UID,
        JOB_GID,
        &[("PBS_JOBID", "1300.ce")],
        &["/bin/sh", "-sh"],
        b"echo \"JOB RAN CVD=$CUDA_VISIBLE_DEVICES\"\n",
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, "JOB RAN CVD=\n"), "{r:?}");
}

#[test]
fn two_jobs_of_one_user_are_kept_apart_by_real_cgroups() {
    two_jobs_of_one_user_apart("v1");
}

/// The same with cgroup v2 and cderd's device BPF program.
#[test]
fn two_jobs_of_one_user_are_kept_apart_by_cgroup_v2_bpf() {
    two_jobs_of_one_user_apart("v2");
}

fn two_jobs_of_one_user_apart(cgroup: &'static str) {
    let Some(node) = Node::start_with("[torque]\nconfine = \"required\"\n", Devices::Char { cgroup }) else { return };
    let gpus2 = "neednodes=1:ppn=1:gpus=2,nodes=1:ppn=1:gpus=2";
    assert_eq!(node.hook("prologue", &prologue_args("900.ce", gpus2)).code, 0);
    assert_eq!(node.hook("prologue", &prologue_args("901.ce", gpus2)).code, 0);
    let held = node.holders();
    let (a, b) = (set(&held["torque:900.ce"]), set(&held["torque:901.ce"]));
    assert!(a.is_disjoint(&b) && a.len() == 2 && b.len() == 2, "{held:?}");

    for (job, mine) in [("900.ce", &a), ("901.ce", &b)] {
        let r = probe(&node, job);
        assert_eq!(r.code, 0, "{r:?}");
        // Inside the device cgroup the runtime numbers the job's devices from 0.
        assert!(r.stdout.contains("CVD=0,1\n"), "{job}: {}", r.stdout);
        for i in 0..4u32 {
            let line = r.stdout.lines().find(|l| l.starts_with(&format!("dev{i} "))).unwrap_or_default().to_string();
            if mine.contains(&i) {
                assert_eq!(line, format!("dev{i} open"), "{job} opens its own device: {}", r.stdout);
            } else {
                assert!(
                    line.contains("Operation not permitted"),
                    "{job} gets EPERM on the other job's device {i}: {}",
                    r.stdout
                );
            }
        }
    }
    // A third job of the same user that asked for no devices is recorded
    // with none and confined away from all of them.
    let r = node.hook("prologue", &prologue_args("902.ce", "neednodes=1:ppn=1,nodes=1:ppn=1"));
    assert_eq!(r.code, 0, "{r:?}");
    let r = probe(&node, "902.ce");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("CVD=\n"), "{}", r.stdout);
    for i in 0..4 {
        let line = r.stdout.lines().find(|l| l.starts_with(&format!("dev{i} "))).unwrap_or_default();
        assert!(line.contains("Operation not permitted"), "the device-less job is denied device {i}: {}", r.stdout);
    }
    // The same user, outside the job starter, is in no job's group: the
    // kernel, not the file mode, made the difference above.
    let r = node.run_as(
        JOB_UID,
        JOB_GID,
        std::path::Path::new("/usr/bin/head"),
        &["-c", "1", node.device_paths[0].to_str().unwrap()],
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    for job in ["900.ce", "901.ce", "902.ce"] {
        assert_eq!(node.hook("epilogue", &epilogue_args(job)).code, 0);
    }
}

#[test]
fn a_job_that_cannot_be_confined_follows_the_confine_setting() {
    // cderd with device cgroups off answers confine with enforcement_unavailable.
    let Some(node) = Node::start_with("", Devices::Char { cgroup: "off" }) else { return };
    assert_eq!(node.hook("prologue", &prologue_args("950.ce", "nodes=1:ppn=1:gpus=1")).code, 0);
    let r = node.job_starter(JOB_UID, JOB_GID, &[("PBS_JOBID", "950.ce")], &["/bin/sh", "-sh"], b"echo RAN\n");
    assert_eq!(r.code, 1, "fail closed by default: {r:?}");
    assert!(!r.stdout.contains("RAN"), "{r:?}");
    assert!(
        r.stderr.contains("cannot confine the job to its devices") && r.stderr.contains("confine = \"required\""),
        "{r:?}"
    );

    std::fs::write(&node.torque_toml, "[torque]\nconfine = \"optional\"\n").unwrap();
    let r = node.job_starter(
        JOB_UID,
        JOB_GID,
        &[("PBS_JOBID", "950.ce")],
        &["/bin/sh", "-sh"],
        b"echo RAN $CUDA_VISIBLE_DEVICES\n",
    );
    assert_eq!(r.code, 0, "{r:?}");
    let index = node.holders()["torque:950.ce"][0];
    assert_eq!(r.stdout, format!("RAN {index}\n"), "absolute indices outside a cgroup: {r:?}");
    assert!(r.stderr.contains("\"optional\""), "{r:?}");
}

#[test]
fn job_starter_refuses_to_run_a_job_as_root() {
    let Some(node) = Node::start("[torque]\nconfine = \"off\"\n") else { return };
    // As pbs_mom runs it with $job_starter_run_privileged: as root.
    let mut cmd = Command::new(&node.job_starter);
    cmd.args(["/bin/sh", "-sh"])
        .env_clear()
        .env("PBS_JOBID", "990.ce")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(b"echo RAN\n");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty(), "the job did not run: {:?}", String::from_utf8_lossy(&out.stdout));
    assert!(err.contains("$job_starter_run_privileged"), "{err}");
}

/// A group that is neither root's nor the job's, that the job starter is
/// installed set-group-ID to (a site's `cder-starter`).
const STARTER_GID: u32 = 64123;

/// A copy of the job starter owned by root and `gid`, with `mode`.
fn installed_starter(node: &Node, name: &str, gid: u32, mode: u32) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = node.dir.path().join(name);
    std::fs::copy(&node.job_starter_bin, &path).unwrap();
    std::os::unix::fs::chown(&path, Some(0), Some(gid)).unwrap();
    // chown clears the set-ID bits: the mode comes after it.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// A shared library whose constructor, wherever it is loaded, leaves
/// `marker` and runs the job itself, before the job starter's main.
fn job_preload_library(node: &Node) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = node.dir.path().join("preload");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = dir.join("constructor-ran");
    let source = dir.join("hijack.c");
    std::fs::write(
        &source,
        format!(
            "#include <fcntl.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
             __attribute__((constructor)) static void hijack(void) {{\n\
             close(open(\"{}\", O_CREAT | O_WRONLY, 0666));\n\
             unsetenv(\"LD_PRELOAD\");\n\
             execl(\"/bin/sh\", \"sh\", \"-c\", \"echo UNCONFINED\", (char *)0);\n}}\n",
            marker.display()
        ),
    )
    .unwrap();
    let library = dir.join("libhijack.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&library)
        .arg(&source)
        .output()
        .expect("cc (build-essential) builds the test's library");
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    (library, marker)
}

/// `starter argv…` as `uid`:`gid` with `LD_PRELOAD=library` set for it
/// alone (setpriv, which runs as root, must not load the library itself).
fn run_preloaded(
    node: &Node,
    starter: &std::path::Path,
    library: Option<&std::path::Path>,
    argv: &[&str],
) -> common::Run {
    let preload = library.map(|l| format!("LD_PRELOAD={}", l.display())).unwrap_or_else(|| "NO_PRELOAD=1".into());
    let mut args = vec![preload.as_str(), starter.to_str().unwrap()];
    args.extend_from_slice(argv);
    node.run_as(
        JOB_UID,
        JOB_GID,
        std::path::Path::new("/usr/bin/env"),
        &args,
        &[("PBS_JOBID", "1400.ce"), ("PATH", "/usr/bin:/bin")],
    )
}

#[test]
fn the_jobs_ld_preload_does_not_run_before_the_job_starter() {
    let Some(node) = Node::start("[torque]\nconfine = \"required\"\n") else {
        return;
    };
    let (library, marker) = job_preload_library(&node);
    let argv = ["/bin/sh", "-c", "echo JOB RAN"];

    // Installed as the job starter was before: the loader runs the job's
    // library first, and it runs the job without cderd ever confining it.
    let plain = installed_starter(&node, "starter-0755", 0, 0o755);
    let r = run_preloaded(&node, &plain, Some(&library), &argv);
    assert!(r.stdout.contains("UNCONFINED") && marker.exists(), "the loader honours LD_PRELOAD: {r:?}");
    std::fs::remove_file(&marker).unwrap();

    // Set-group-ID: secure execution, the library is never loaded, and the
    // job (unknown to cderd) is refused exactly as without the variable.
    let setgid = installed_starter(&node, "starter-2755", STARTER_GID, 0o2755);
    let with = run_preloaded(&node, &setgid, Some(&library), &argv);
    assert!(!marker.exists(), "the job's library ran in the job starter: {with:?}");
    assert!(!with.stdout.contains("UNCONFINED") && !with.stdout.contains("JOB RAN"), "{with:?}");
    let without = run_preloaded(&node, &setgid, None, &argv);
    assert_eq!((with.code, &with.stdout, &with.stderr), (without.code, &without.stdout, &without.stderr));
    assert_eq!(with.code, 1, "{with:?}");
    assert!(with.stderr.contains("cderd has no record of the job"), "{with:?}");
}

#[test]
fn the_job_runs_without_the_job_starters_group_and_with_its_whole_environment() {
    let Some(node) = Node::start_with("[torque]\nconfine = \"required\"\n", Devices::Char { cgroup: "v1" }) else {
        return;
    };
    let setgid = installed_starter(&node, "starter-2755", STARTER_GID, 0o2755);
    assert_eq!(node.hook("prologue", &prologue_args("1401.ce", "neednodes=1:ppn=1,nodes=1:ppn=1")).code, 0);
    // Variables the loader takes out of a set-group-ID program's environment.
    let env = [
        ("PBS_JOBID", "1401.ce"),
        ("PATH", "/usr/bin:/bin"),
        ("LD_LIBRARY_PATH", "/opt/app/lib"),
        ("TMPDIR", "/tmp/1401.ce"),
    ];
    let script = "grep '^Gid:' /proc/self/status; echo \"LLP=$LD_LIBRARY_PATH TMPDIR=$TMPDIR CVD=$CUDA_VISIBLE_DEVICES\"; cat /proc/self/cgroup";
    let r = node.run_as(JOB_UID, JOB_GID, &setgid, &["/bin/sh", "-c", script], &env);
    assert_eq!(r.code, 0, "{r:?}");
    let gids: Vec<u32> = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Gid:"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|g| g.parse().ok())
        .collect();
    assert_eq!(gids, [JOB_GID; 4], "real, effective, saved and fs gid are the job's: {r:?}");
    assert!(r.stdout.contains("LLP=/opt/app/lib TMPDIR=/tmp/1401.ce CVD=\n"), "{r:?}");
    assert!(r.stdout.contains("torque-1401.ce-"), "confined by cderd: {r:?}");
    assert_eq!(node.hook("epilogue", &epilogue_args("1401.ce")).code, 0);
}

#[test]
fn reconcile_after_a_snapshot_keeps_a_newer_allocation() {
    let Some(node) = Node::start("") else { return };
    let gpus1 = "nodes=1:ppn=1:gpus=1";
    // 1000 runs (pbs_mom holds its job file); 1001's epilogue never ran, its file is gone.
    node.write_job_file("1000.ce", None);
    assert_eq!(node.hook("prologue", &prologue_args("1000.ce", gpus1)).code, 0);
    assert_eq!(node.hook("prologue", &prologue_args("1001.ce", gpus1)).code, 0);

    let home = cder_torque::mom::PbsHome(node.pbs_home().to_path_buf());
    let mut client = node.client();
    let as_of = cder_torque::reconcile::generation(&mut client).unwrap();
    let live = cder_torque::reconcile::snapshot(&home).unwrap();
    assert_eq!(live.iter().map(ToString::to_string).collect::<Vec<_>>(), ["torque:1000.ce"]);

    // Between the snapshot and the reconcile, pbs_mom starts job 1002.
    node.write_job_file("1002.ce", None);
    assert_eq!(node.hook("prologue", &prologue_args("1002.ce", gpus1)).code, 0);

    let done = cder_torque::reconcile::release_stale(&mut client, live, as_of).unwrap();
    assert_eq!(done.released.iter().map(ToString::to_string).collect::<Vec<_>>(), ["torque:1001.ce"]);
    let held = node.holders();
    assert!(held.contains_key("torque:1002.ce"), "the newer allocation survives: {held:?}");
    assert!(held.contains_key("torque:1000.ce") && !held.contains_key("torque:1001.ce"), "{held:?}");

    // The binary does the same steps; 1000's job file goes: its devices are freed.
    node.remove_job_file("1000.ce");
    let out = Command::new(env!("CARGO_BIN_EXE_cder-torque-reconcile"))
        .arg("--pbs-home")
        .arg(node.pbs_home())
        .env_clear()
        .env("CDER_CONFIG", &node.config)
        .env("CDER_TORQUE_CONFIG", &node.torque_toml)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "released torque:1000.ce\n");
    assert_eq!(node.holders().keys().cloned().collect::<Vec<_>>(), ["torque:1002.ce"]);

    // An unreadable job directory releases nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_cder-torque-reconcile"))
        .arg("--pbs-home")
        .arg(node.pbs_home().join("nonexistent"))
        .env_clear()
        .env("CDER_CONFIG", &node.config)
        .env("CDER_TORQUE_CONFIG", &node.torque_toml)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing released"));
    assert_eq!(node.holders().len(), 1);
    let _ = Duration::from_secs(0);
}

/// The audit's repro: a job whose shell is `--torque-config` (qsub checks
/// that a shell is absolute, pbs_server does not), so pbs_mom runs
/// `cder-job-starter --torque-config ---torque-config -c cmd` in the
/// user's home, where the user left `---torque-config` (confine = "off")
/// and a program `-c` on the job's PATH. Every option-like shell must fail
/// as a shell that does not exist fails, and nothing runs unconfined.
#[test]
fn an_option_like_job_shell_is_the_program_never_an_option() {
    use std::os::unix::fs::PermissionsExt;
    let Some(node) = Node::start_with("[torque]\nconfine = \"required\"\n", Devices::Char { cgroup: "v1" }) else {
        return;
    };
    let home = node.dir.path().join("home");
    std::fs::create_dir_all(home.join("bin")).unwrap();
    let mine = |path: &std::path::Path, text: &str, mode: u32| {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(path, Some(JOB_UID), Some(JOB_GID)).unwrap();
    };
    // torque.toml with confine off; a cder.toml whose cderd is elsewhere.
    mine(&home.join("---torque-config"), "[torque]\nconfine = \"off\"\n", 0o644);
    mine(&home.join("---config"), "[node]\nsocket = \"/nonexistent\"\n", 0o644);
    mine(&home.join("bin/-c"), "#!/bin/sh\necho JOB RAN; cat /proc/self/cgroup\n", 0o755);
    for dir in [&home, &home.join("bin")] {
        std::os::unix::fs::chown(dir, Some(JOB_UID), Some(JOB_GID)).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", home.join("bin").display());
    // pbs_mom's layout: shell, its argv[0] ("-" and its name: a login shell), then -c cmd.
    let run = |job: &str, shell: &str| {
        let login = format!("-{}", std::path::Path::new(shell).file_name().unwrap().to_str().unwrap());
        let env = [("PBS_JOBID", job), ("PATH", path.as_str()), ("HOME", home.to_str().unwrap())];
        node.job_starter_in(&home, JOB_UID, JOB_GID, &env, &[shell, &login, "-c", "echo JOB RAN"], b"")
    };
    let shells = ["--torque-config", "--config", "--help", "-h", "--version", "--", "-x", "--x", "-"];

    // A job cderd has no record of: refused, as with a shell that does not exist.
    let missing = run("1500.ce", "/nonexistent/sh");
    assert_eq!((missing.code, missing.stdout.as_str()), (1, ""), "{missing:?}");
    assert!(missing.stderr.contains("cderd has no record of the job"), "{missing:?}");
    for shell in shells {
        let r = run("1500.ce", shell);
        assert!(!r.stdout.contains("JOB RAN"), "{shell}: ran unconfined: {r:?}");
        assert_eq!((r.code, &r.stdout, &r.stderr), (missing.code, &missing.stdout, &missing.stderr), "{shell}");
    }

    // A recorded job: confined, then the shell cannot be executed (127), as
    // one that does not exist.
    assert_eq!(node.hook("prologue", &prologue_args("1501.ce", "neednodes=1:ppn=1,nodes=1:ppn=1")).code, 0);
    let missing = run("1501.ce", "/nonexistent/sh");
    assert_eq!((missing.code, missing.stdout.as_str()), (127, ""), "{missing:?}");
    assert!(missing.stderr.contains("cannot execute /nonexistent/sh"), "{missing:?}");
    for shell in shells {
        let r = run("1501.ce", shell);
        assert!(!r.stdout.contains("JOB RAN"), "{shell}: {r:?}");
        assert_eq!((r.code, r.stdout.as_str()), (127, ""), "{shell}: {r:?}");
        assert!(r.stderr.contains(&format!("cannot execute {shell}:")), "{shell}: {r:?}");
    }
    assert_eq!(node.hook("epilogue", &epilogue_args("1501.ce")).code, 0);

    // By hand, --help alone (never pbs_mom's layout) still answers.
    let r = node.run_as(JOB_UID, JOB_GID, &node.job_starter_bin, &["--help"], &[]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("USAGE"), "{r:?}");
}

#[test]
fn root_may_still_give_the_job_starter_options() {
    let Some(node) = Node::start("[torque]\nconfine = \"off\"\n") else { return };
    let root = |args: &[&str]| {
        let out = Command::new(&node.job_starter_bin).args(args).env_clear().stdin(Stdio::null()).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Options are read, and a wrong one is named …
    let (code, out, err) = root(&["--colour", "x", "/bin/sh", "-c", "echo JOB RAN"]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert!(err.contains("unknown option --colour"), "{err}");
    let (code, out, err) = root(&["--torque-config", node.torque_toml.to_str().unwrap(), "--bogus"]);
    assert_eq!((code, out.as_str()), (Some(2), ""), "{err}");
    assert!(err.contains("unknown option --bogus"), "{err}");
    // … but root never gets a job run.
    let (code, out, err) = root(&["--config", node.config.to_str().unwrap(), "--", "/bin/sh", "-c", "echo JOB RAN"]);
    assert_eq!((code, out.as_str()), (Some(1), ""), "{err}");
    assert!(err.contains("$job_starter_run_privileged"), "{err}");
}
