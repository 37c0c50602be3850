//! The TORQUE hooks against a real cderd with four devices, run exactly as
//! pbs_mom runs them (see tests/common/mod.rs for the contract reproduced).

use crate::common;

use std::collections::BTreeSet;

use common::{epilogue_args, prologue_args, Node, JOB_GID, JOB_UID, OTHER_UID};

const GPUS2: &str = "neednodes=1:ppn=2:gpus=2,nodes=1:ppn=2:gpus=2,walltime=01:00:00";
const GPUS1: &str = "neednodes=1:ppn=1:gpus=1,nodes=1:ppn=1:gpus=1,walltime=00:10:00";

fn set(v: &[u32]) -> BTreeSet<u32> {
    v.iter().copied().collect()
}

#[test]
fn two_jobs_disjoint_third_requeued_then_runs_after_an_epilogue() {
    let Some(node) = Node::start("") else { return };

    let a = node.hook("prologue", &prologue_args("101.ce.example.org", GPUS2));
    assert_eq!(a.code, 0, "{a:?}");
    let b = node.hook("prologue", &prologue_args("102.ce.example.org", GPUS2));
    assert_eq!(b.code, 0, "{b:?}");
    // Routine success says nothing in the job's error file.
    assert!(a.stderr.is_empty() && b.stderr.is_empty(), "{a:?} {b:?}");

    let held = node.holders();
    let da = set(&held["torque:101.ce.example.org"]);
    let db = set(&held["torque:102.ce.example.org"]);
    assert_eq!((da.len(), db.len()), (2, 2), "{held:?}");
    assert!(da.is_disjoint(&db), "{held:?}");

    // A retried prologue gets the same devices (idempotent alloc).
    assert_eq!(node.hook("prologue", &prologue_args("101.ce.example.org", GPUS2)).code, 0);
    assert_eq!(set(&node.holders()["torque:101.ce.example.org"]), da);

    // The third job: devices only busy -> requeue (exit status > 1).
    let c = node.hook("prologue", &prologue_args("103.ce.example.org", GPUS1));
    assert_eq!(c.code, 2, "{c:?}");
    assert!(c.stderr.contains("requeued"), "{c:?}");
    assert!(!node.holders().contains_key("torque:103.ce.example.org"));

    // A request this node can never meet -> abort (exit status 1), reason on stderr.
    let never = node.hook("prologue", &prologue_args("104.ce.example.org", "nodes=1:ppn=1:gpus=5"));
    assert_eq!(never.code, 1, "{never:?}");
    assert!(never.stderr.contains("can never run here"), "{never:?}");
    let garbage = node.hook("prologue", &prologue_args("105.ce.example.org", "nodes=1:gpus=lots"));
    assert_eq!(garbage.code, 1, "{garbage:?}");

    // The first job ends; its epilogue frees two devices; the third job runs.
    let e = node.hook("epilogue", &epilogue_args("101.ce.example.org"));
    assert_eq!(e.code, 0, "{e:?}");
    let c = node.hook("prologue", &prologue_args("103.ce.example.org", GPUS1));
    assert_eq!(c.code, 0, "{c:?}");
    let held = node.holders();
    let dc = set(&held["torque:103.ce.example.org"]);
    assert_eq!(dc.len(), 1);
    assert!(dc.is_subset(&da), "the third job got a device of the finished job: {held:?}");
    assert!(!held.contains_key("torque:101.ce.example.org"));

    // A second epilogue for the same job is a no-op, still exit 0.
    assert_eq!(node.hook("epilogue", &epilogue_args("101.ce.example.org")).code, 0);
    assert_eq!(node.holders(), held);
}

#[test]
fn jobs_without_devices_and_other_request_forms() {
    let Some(node) = Node::start("") else { return };
    // No gpus: runs without asking cderd for anything.
    let r = node.hook("prologue", &prologue_args("200.ce", "neednodes=1:ppn=4,nodes=1:ppn=4,walltime=00:01:00"));
    assert_eq!(r.code, 0, "{r:?}");
    assert!(node.holders().is_empty());
    // gres= and the submit filter's mark count where MAUI counts them
    // (the hooks read torque.toml on every run).
    std::fs::write(&node.torque_toml, "[torque]\ndirective = \"maui\"\n").unwrap();
    assert_eq!(node.hook("prologue", &prologue_args("201.ce", "nodes=1,gres=gpgpu:1")).code, 0);
    assert_eq!(node.hook("prologue", &prologue_args("202.ce", "nodes=1:ppn=1,other=cder:gpgpu:2")).code, 0);
    std::fs::write(&node.torque_toml, "").unwrap();
    let held = node.holders();
    assert_eq!((held["torque:201.ce"].len(), held["torque:202.ce"].len()), (1, 2), "{held:?}");
    // A sister node runs prologue.parallel/epilogue.parallel the same way.
    let mut sister = prologue_args("203.ce", "nodes=1:ppn=1+1:ppn=1:gpus=1");
    sister[0] = "203.ce";
    assert_eq!(node.hook("prologue.parallel", &sister).code, 0);
    assert_eq!(node.holders()["torque:203.ce"].len(), 1);
    assert_eq!(node.hook("epilogue.parallel", &epilogue_args("203.ce")).code, 0);
    assert_eq!(node.hook("epilogue.precancel", &epilogue_args("202.ce")).code, 0);
    let held = node.holders();
    assert!(!held.contains_key("torque:203.ce") && !held.contains_key("torque:202.ce"), "{held:?}");
    // An unknown user can never run: abort.
    let mut unknown = prologue_args("204.ce", GPUS1);
    unknown[1] = "no-such-user-cder";
    assert_eq!(node.hook("prologue", &unknown).code, 1);
    // pbs_mom's argument list with newer versions' extra arguments.
    let mut extra = prologue_args("205.ce", GPUS1);
    extra.push("/var/spool/torque/mom_priv/jobs/205.ce.SC");
    extra.push("whatever-comes-next");
    assert_eq!(node.hook("prologue", &extra).code, 0);
    // Requeued, then qalter'ed to another count: the stale allocation of the
    // same job is replaced, not a conflict that blocks it forever.
    assert_eq!(node.hook("prologue", &prologue_args("206.ce", "nodes=1:gpus=1")).code, 0);
    assert_eq!(node.holders()["torque:206.ce"].len(), 1);
    assert_eq!(node.hook("epilogue", &epilogue_args("205.ce")).code, 0);
    let r = node.hook("prologue", &prologue_args("206.ce", "nodes=1:gpus=2"));
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(node.holders()["torque:206.ce"].len(), 2);
}

#[test]
fn job_starter_gives_the_job_exactly_its_own_devices() {
    // The environment path, without a device cgroup (tests/trust.rs confines).
    let Some(node) = Node::start("[torque]\nconfine = \"off\"\n") else { return };
    assert_eq!(node.hook("prologue", &prologue_args("300.ce", GPUS2)).code, 0);
    assert_eq!(node.hook("prologue", &prologue_args("301.ce", GPUS1)).code, 0);
    let held = node.holders();
    let mine: Vec<String> = held["torque:300.ce"].iter().map(u32::to_string).collect();

    // As pbs_mom execs it: starter, shell, shell's argv[0]; script on stdin.
    let env = [
        ("PBS_JOBID", "300.ce"),
        ("PBS_JOBCOOKIE", "0123456789ABCDEF"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("PATH", "/usr/bin:/bin"),
    ];
    let r = node.job_starter(JOB_UID, JOB_GID, &env, &["/bin/sh", "-sh"], b"id -u\nenv\n");
    assert_eq!(r.code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], JOB_UID.to_string(), "runs as the job's user");
    assert!(lines.contains(&format!("CUDA_VISIBLE_DEVICES={}", mine.join(",")).as_str()), "{}", r.stdout);
    assert!(lines.contains(&"CUDA_DEVICE_ORDER=PCI_BUS_ID"), "{}", r.stdout);
    assert!(lines.contains(&"PBS_JOBID=300.ce"), "the job's own environment is kept: {}", r.stdout);
    assert!(r.stderr.is_empty(), "{r:?}");

    // By hand, inside a job: cder-job-starter PROGRAM ARGS.
    let r = node.job_starter(
        JOB_UID,
        JOB_GID,
        &[("PBS_JOBID", "300.ce")],
        &["/usr/bin/printenv", "CUDA_VISIBLE_DEVICES"],
        b"",
    );
    assert_eq!(r.stdout.trim(), mine.join(","), "{r:?}");

    // Another user running with this job's id: no devices, and a message.
    let r = node.job_starter(OTHER_UID, OTHER_UID, &env, &["/bin/sh", "-sh"], b"env\n");
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.lines().any(|l| l == "CUDA_VISIBLE_DEVICES="), "{}", r.stdout);
    assert!(r.stderr.contains("not a job of this user"), "{r:?}");

    // A job without devices: the empty list, silently.
    let r = node.job_starter(JOB_UID, JOB_GID, &[("PBS_JOBID", "399.ce")], &["/bin/sh", "-sh"], b"env\n");
    assert!(r.stdout.lines().any(|l| l == "CUDA_VISIBLE_DEVICES="), "{}", r.stdout);
    assert!(r.stderr.is_empty(), "{r:?}");

    // cder-env for sites without a job starter: read-only exports for eval.
    let env_bin = node.cder_env.clone();
    let config = node.config.to_str().unwrap();
    let r = node.run_as(JOB_UID, JOB_GID, &env_bin, &["--shell", "--config", config], &[("PBS_JOBID", "300.ce")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains(&format!(
            "CUDA_VISIBLE_DEVICES='{}'; export CUDA_VISIBLE_DEVICES; readonly CUDA_VISIBLE_DEVICES",
            mine.join(",")
        )),
        "{}",
        r.stdout
    );
    let script = format!("eval \"$({} --shell --config {config})\"; echo \"$CUDA_VISIBLE_DEVICES\"; (CUDA_VISIBLE_DEVICES=0,1,2,3) 2>/dev/null || echo read-only", env_bin.display());
    let r =
        node.run_as(JOB_UID, JOB_GID, std::path::Path::new("/bin/sh"), &["-c", &script], &[("PBS_JOBID", "300.ce")]);
    assert_eq!(r.stdout, format!("{}\nread-only\n", mine.join(",")), "{r:?}");
    let r = node.run_as(OTHER_UID, OTHER_UID, &env_bin, &["--config", config], &[("PBS_JOBID", "300.ce")]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("CUDA_VISIBLE_DEVICES=\n"), "{r:?}");

    // prologue.user runs as the job's user and reports into the job's output.
    let r = node.hook_as("prologue.user", &prologue_args("300.ce", GPUS2), JOB_UID, JOB_GID);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains(&format!("CUDA_VISIBLE_DEVICES={}", mine.join(","))), "{r:?}");
    let r = node.hook_as("epilogue.user", &epilogue_args("300.ce"), JOB_UID, JOB_GID);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("torque:300.ce used gpgpu:"), "{r:?}");
}

#[test]
fn epilogue_with_cderd_down_keeps_the_node_and_reconcile_frees_the_devices() {
    let Some(mut node) = Node::start("[torque]\ncderd_timeout_s = 2\n") else { return };
    assert_eq!(node.hook("prologue", &prologue_args("400.ce", GPUS2)).code, 0);
    assert_eq!(node.hook("prologue", &prologue_args("401.ce", GPUS1)).code, 0);

    node.stop_cderd();
    let e = node.hook("epilogue", &epilogue_args("400.ce"));
    // Exit 0: pbs_mom never marks the node down over cder.
    assert_eq!(e.code, 0, "{e:?}");
    assert!(e.stderr.contains("release failed") && e.stderr.contains("cderctl reconcile"), "{e:?}");
    // A prologue meanwhile requeues its job: cderd cannot be asked.
    let p = node.hook("prologue", &prologue_args("402.ce", GPUS1));
    assert_eq!(p.code, 2, "{p:?}");

    node.start_cderd();
    assert!(node.holders().contains_key("torque:400.ce"), "the missed release left the devices held");
    let live = node.dir.path().join("live-jobs");
    std::fs::write(&live, "# from mom_priv/jobs\ntorque:401.ce\n").unwrap();
    let r = node.cderctl(&["reconcile", "--live-jobs", live.to_str().unwrap(), "--lrms", "torque"]);
    assert_eq!(r.code, 0, "{r:?}");
    let held = node.holders();
    assert!(!held.contains_key("torque:400.ce"), "{held:?}");
    assert_eq!(held["torque:401.ce"].len(), 1, "{held:?}");
}

#[test]
fn a_silent_cderd_is_bounded_by_the_hooks_own_timeout_within_prologalarm() {
    let Some(node) = Node::start("[torque]\ncderd_timeout_s = 1\n") else { return };
    // Replace the socket with one that accepts connections but never answers.
    let socket = node.socket.clone();
    let mut node = node;
    node.stop_cderd();
    let _ = std::fs::remove_file(&socket);
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // A site's $prologalarm of 60 s: the hook must decide well before.
    let r = node.hook_with_alarm("prologue", &prologue_args("500.ce", GPUS1), None, 60);
    assert_eq!(r.code, 2, "requeued by the hook itself, not killed by the alarm (-4): {r:?}");
    assert!(r.stderr.contains("did not answer"), "{r:?}");
    let e = node.hook_with_alarm("epilogue", &epilogue_args("500.ce"), None, 60);
    assert_eq!(e.code, 0, "{e:?}");
}

#[test]
fn pbs_mom_refuses_hooks_writable_by_others_and_ours_are_not() {
    let Some(node) = Node::start("") else { return };
    use std::os::unix::fs::PermissionsExt;
    let path = node.mom_priv.join("epilogue.parallel");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(node.hook("epilogue.parallel", &epilogue_args("600.ce")).code, -1, "the harness checks like pbs_mom");
    // Installed as the install script does, every hook passes the check.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o500)).unwrap();
    assert_eq!(node.hook("epilogue.parallel", &epilogue_args("600.ce")).code, 0);
    // And a mistaken name is a usage error, not silence.
    let other = node.mom_priv.join("prologue.site");
    std::fs::copy(node.mom_priv.join("prologue"), &other).unwrap();
    assert_eq!(node.hook("prologue.site", &prologue_args("600.ce", GPUS1)).code, 2);
    let _ = OTHER_UID;
}
