//! Exclusivity the scheduler vouches for, on a real slurmctld and
//! slurmd (Debian's SLURM 22.05) with a real cderd, both plugins at their
//! default arguments. Only the GPUs are fake: character devices with the
//! mem driver's distinct numbers (1:5, 1:7, 1:8, 1:9), so a device cgroup
//! tells them apart. Every case runs twice: with `TaskPlugin=task/none`
//! (cderd's `confine` is the enforcement) and with `task/cgroup` +
//! `ConstrainDevices=yes` (SLURM's). Jobs are submitted by the
//! unprivileged user `nobody`, as a user would.
//!
//! What is asserted is what a job can actually open (each fake device is
//! opened from inside the job), its `CUDA_VISIBLE_DEVICES`, and cderd's
//! ledger (`status`), never the plugin's own log.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use cder_protocol::AccountingRequest;
use cder_tests::slurm::{parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `test` on a fresh cluster with task/none, then on one with
/// task/cgroup and ConstrainDevices=yes.
fn on_both_task_plugins(test: impl Fn(&SlurmCluster, &str)) {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    for cgroup in [false, true] {
        let name = if cgroup { "task/cgroup" } else { "task/none" };
        let cluster = SlurmCluster::start(&SlurmConfig { cgroup, ..SlurmConfig::default() })
            .unwrap_or_else(|e| panic!("starting SLURM with {name}: {e}"));
        test(&cluster, name);
    }
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A job that reports what it can open and sees, then waits for `flag`.
fn probe_script(cluster: &SlurmCluster, flag: Option<&PathBuf>) -> String {
    let wait = flag.map(|f| format!("while [ ! -e '{}' ]; do sleep 0.2; done\n", f.display())).unwrap_or_default();
    format!("#!/bin/sh\n{}echo CVD=${{CUDA_VISIBLE_DEVICES-unset}}\n{wait}", cluster.open_probe())
}

/// The same probe as one shell command line, for `srun sh -c`.
fn probe_command(cluster: &SlurmCluster) -> String {
    format!("{}echo CVD=${{CUDA_VISIBLE_DEVICES-unset}}", cluster.open_probe())
}

/// The job id in salloc's "Granted job allocation N".
fn granted_job(stderr: &str) -> Option<u32> {
    stderr.split("Granted job allocation ").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// Checks one job's report against the kernel and the ledger: the devices
/// it can open are exactly those cderd shows held by it, and
/// `CUDA_VISIBLE_DEVICES` names exactly those, numbered from 0 (inside a
/// device cgroup CUDA enumerates only what the job can open). Returns the
/// devices it can open (absolute indices).
fn check_consistent(cluster: &SlurmCluster, plugin: &str, id: u32, report: &str) -> Vec<u32> {
    let env = parse_env_lines(report);
    let open = visible_set(env.get("OPEN").unwrap_or_else(|| panic!("{plugin}: job {id} printed no OPEN=\n{report}")));
    let cvd = env.get("CVD").unwrap_or_else(|| panic!("{plugin}: job {id} printed no CVD=\n{report}"));
    assert_ne!(cvd, "unset", "{plugin}: job {id}: CUDA_VISIBLE_DEVICES unset means all devices\n{report}");
    let ledger = cluster.ledger(id).unwrap();
    assert_eq!(
        open,
        ledger,
        "{plugin}: job {id} can open other devices than cderd's ledger gives it\n{report}\n{}",
        cluster.logs()
    );
    let expected: Vec<u32> = (0..open.len() as u32).collect();
    assert_eq!(
        visible_set(cvd),
        expected,
        "{plugin}: job {id}: CUDA_VISIBLE_DEVICES={cvd} does not name its {} openable device(s) from 0\n{report}",
        open.len()
    );
    open
}

fn wait_for_output(cluster: &SlurmCluster, id: u32, needle: &str) -> String {
    cluster.wait_output(id, needle, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"))
}

fn wait_all_free(cluster: &SlurmCluster) -> u32 {
    // After 30 s the count as it is: the caller's assertion says what is wrong.
    let mut free = 0;
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        free = cluster.cderd_status().expect("cderd status").counts["gpgpu"].free;
        (free == cluster.config.gpus).then_some(())
    });
    free
}

/// Every device cderd ever recorded for `slurm:<id>`.
fn ever_held(cluster: &SlurmCluster, id: u32) -> Vec<u32> {
    let key = format!("slurm:{id}");
    let mut client = cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
    let acc = client.accounting(&AccountingRequest { since: None, until: None }).unwrap();
    acc.records.iter().filter(|r| r.job.to_string() == key).map(|r| r.index).collect()
}

/// A job that asks for nothing and a job that asks for 2 GPUs run; a step
/// in the first asking `--gpgpu-per-node=4` is refused, not given four.
#[test]
fn a_step_option_cannot_raise_what_the_job_was_granted() {
    on_both_task_plugins(|cluster, plugin| {
        let probe = probe_command(cluster);
        let out =
            cluster.run_as_user("salloc", &["-N1", "-n1", "srun", "--gpgpu-per-node=4", "sh", "-c", &probe]).unwrap();
        let (stdout, stderr) = text(&out);
        let id = granted_job(&stderr)
            .unwrap_or_else(|| panic!("{plugin}: salloc got no allocation:\n{stderr}\n{}", cluster.logs()));
        assert!(!out.status.success(), "{plugin}: the over-asking step ran:\n{stdout}\n{stderr}");
        assert!(!stdout.contains("CVD="), "{plugin}: the over-asking step ran:\n{stdout}");
        assert!(
            stderr.contains(&format!("cder: --gpgpu-per-node=4: SLURM gave slurm:{id} 0 gpgpu device(s) on this node")),
            "{plugin}: no readable refusal:\n{stderr}"
        );
        assert_eq!(
            ever_held(cluster, id),
            Vec::<u32>::new(),
            "{plugin}: cderd recorded devices for a job SLURM gave none"
        );
        assert_eq!(wait_all_free(cluster), 4, "{plugin}: devices left held");

        // Within its grant a step runs, with the job's devices.
        let out = cluster
            .run_as_user(
                "salloc",
                &["-N1", "-n1", "--gpgpu-per-node=2", "srun", "--gpgpu-per-node=1", "sh", "-c", &probe],
            )
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(
            out.status.success(),
            "{plugin}: a step within its grant failed:\n{stdout}\n{stderr}\n{}",
            cluster.logs()
        );
        let env = parse_env_lines(&stdout);
        let id = granted_job(&stderr).unwrap();
        let open = visible_set(&env["OPEN"]);
        assert_eq!(open.len(), 2, "{plugin}: {stdout}");
        assert_eq!(visible_set(&env["CVD"]), vec![0, 1], "{plugin}: {stdout}");
        let mut held = ever_held(cluster, id);
        held.sort_unstable();
        assert_eq!(held, open, "{plugin}: the ledger recorded other devices than the job could open");

        // The next user's job is not starved.
        let next = cluster.sbatch_as_user(&["--gpgpu-per-node=2"], &probe_script(cluster, None)).unwrap();
        let info = cluster.wait_job(next, JOB_TIMEOUT).unwrap();
        let report = cluster.job_output(next);
        assert_eq!(info.state, "COMPLETED", "{plugin}: {info:?}\n{report}\n{}", cluster.logs());
        assert_eq!(visible_set(&parse_env_lines(&report)["OPEN"]).len(), 2, "{plugin}: {report}");
    });
}

/// `GPGPUPerNode=4` in a step's environment is a request like an option:
/// the job SLURM gave no GPU gets none.
#[test]
fn the_jdl_key_in_a_steps_environment_cannot_raise_the_grant() {
    on_both_task_plugins(|cluster, plugin| {
        let probe = probe_command(cluster);
        let out = cluster
            .run_as_user("salloc", &["-N1", "-n1", "env", "GPGPUPerNode=4", "srun", "sh", "-c", &probe])
            .unwrap();
        let (stdout, stderr) = text(&out);
        let id = granted_job(&stderr).unwrap_or_else(|| panic!("{plugin}: salloc got no allocation:\n{stderr}"));
        assert!(!out.status.success() && !stdout.contains("CVD="), "{plugin}: the step ran:\n{stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!("cder: GPGPUPerNode=4: SLURM gave slurm:{id} 0 gpgpu device(s)")),
            "{plugin}: {stderr}"
        );
        assert_eq!(ever_held(cluster, id), Vec::<u32>::new(), "{plugin}");
        assert_eq!(wait_all_free(cluster), 4, "{plugin}");
    });
}

/// A held job's owner cannot change its device count after submit
/// (`scontrol update TresPerNode=gres:gpu:0`, which SLURM 22.05 would show
/// while still allocating four): job_modify refuses it. An operator's change
/// is validated, and the node honours what the controller then allocates.
#[test]
fn a_grant_changed_after_submit_stays_what_the_node_honours() {
    on_both_task_plugins(|cluster, plugin| {
        let id = cluster.sbatch_as_user(&["-H", "--gpgpu-per-node=4"], &probe_script(cluster, None)).unwrap();
        let update =
            cluster.run_as_user("scontrol", &["update", &format!("jobid={id}"), "TresPerNode=gres:gpu:0"]).unwrap();
        assert!(!update.status.success(), "{plugin}: the owner lowered the grant: {:?}", text(&update));
        let shown = cluster.job(id).unwrap().fields.get("TresPerNode").cloned().unwrap_or_default();
        assert!(shown.contains("gpu:4"), "{plugin}: TresPerNode={shown} after a refused update");
        let raise =
            cluster.run_as_user("scontrol", &["update", &format!("jobid={id}"), "TresPerNode=gres:gpu:5"]).unwrap();
        assert!(!raise.status.success(), "{plugin}: the owner raised the grant: {:?}", text(&raise));
        // An operator may change it, to a count a node has.
        let op = cluster.run("scontrol", &["update", &format!("jobid={id}"), "TresPerNode=gres:gpu:2"]).unwrap();
        assert!(op.status.success(), "{plugin}: operator update: {:?}", text(&op));
        let op0 = cluster.run("scontrol", &["update", &format!("jobid={id}"), "TresPerNode=gres:gpu:0"]).unwrap();
        assert!(
            !op0.status.success(),
            "{plugin}: a count of 0 (which SLURM would not apply) was accepted: {:?}",
            text(&op0)
        );
        let release = cluster.run_as_user("scontrol", &["release", &id.to_string()]).unwrap();
        assert!(release.status.success(), "{plugin}: scontrol release: {:?}", text(&release));
        let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
        let report = cluster.job_output(id);
        let tres = info.fields.get("TresPerNode").cloned().unwrap_or_default();
        assert!(tres.contains("gpu:2"), "{plugin}: {info:?}");
        // The batch step replays --gpgpu-per-node=4: more than the job now
        // has, so it is refused rather than given four.
        assert_eq!(info.state, "FAILED", "{plugin}: {info:?}\n{report}");
        assert!(!report.contains("OPEN="), "{plugin}: the step ran beyond its grant:\n{report}");
        assert!(
            report.contains(&format!("cder: --gpgpu-per-node=4: SLURM gave slurm:{id} 2 gpgpu device(s)")),
            "{plugin}: {report}\n{}",
            cluster.logs()
        );
        assert_eq!(ever_held(cluster, id).len(), 2, "{plugin}: the ledger does not show the 2 devices SLURM allocated");
        assert_eq!(wait_all_free(cluster), 4, "{plugin}");
        let next = cluster.sbatch_as_user(&["--gpgpu-per-node=2"], &probe_script(cluster, None)).unwrap();
        assert_eq!(
            cluster.wait_job(next, JOB_TIMEOUT).unwrap().state,
            "COMPLETED",
            "{plugin}: {}",
            cluster.job_output(next)
        );
    });
}

/// `VirtualGPGPUPerNode=6` in a step's environment takes no backend: the
/// controller granted the job no `vgpgpu` licence.
#[test]
fn vgpgpu_backends_never_exceed_the_granted_licences() {
    on_both_task_plugins(|cluster, plugin| {
        let out =
            cluster.run_as_user("salloc", &["-N1", "-n1", "env", "VirtualGPGPUPerNode=6", "srun", "env"]).unwrap();
        let (stdout, stderr) = text(&out);
        let id = granted_job(&stderr).unwrap_or_else(|| panic!("{plugin}: salloc got no allocation:\n{stderr}"));
        assert!(!out.status.success(), "{plugin}: the step ran:\n{stdout}");
        assert!(!stdout.contains("RCUDA"), "{plugin}: backends were set:\n{stdout}");
        assert!(
            stderr.contains(&format!(
                "cder: VirtualGPGPUPerNode=6: SLURM granted slurm:{id} 0 vgpgpu licence(s) per node"
            )),
            "{plugin}: {stderr}\n{}",
            cluster.logs()
        );
    });
}

/// A native `--gres=gpu:1` job, a cder `--gpgpu-per-node=2` job and a job
/// without GPUs run at once: each opens exactly its own devices, its
/// CUDA_VISIBLE_DEVICES names exactly those, and cderd's ledger shows every
/// one of them, the native job's included.
#[test]
fn native_gres_and_cder_jobs_share_the_node_and_one_ledger() {
    on_both_task_plugins(|cluster, plugin| {
        let flag = cluster.jobs_dir().join(format!("go-{}", plugin.replace('/', "-")));
        let script = probe_script(cluster, Some(&flag));
        let native = cluster.sbatch_as_user(&["--gres=gpu:1"], &script).unwrap();
        let cder = cluster.sbatch_as_user(&["--gpgpu-per-node=2"], &script).unwrap();
        let none = cluster.sbatch_as_user(&[], &script).unwrap();
        let mut seen = Vec::new();
        for (id, count) in [(native, 1), (cder, 2), (none, 0)] {
            let report = wait_for_output(cluster, id, "CVD=");
            let open = check_consistent(cluster, plugin, id, &report);
            assert_eq!(open.len(), count, "{plugin}: job {id}\n{report}");
            seen.push((id, open));
        }
        for (i, (a, da)) in seen.iter().enumerate() {
            for (b, db) in &seen[i + 1..] {
                assert!(
                    da.iter().all(|d| !db.contains(d)),
                    "{plugin}: jobs {a} and {b} can both open a device: {da:?} / {db:?}"
                );
            }
        }
        let status = cluster.cderd_status().unwrap();
        assert_eq!(status.counts["gpgpu"].allocated, 3, "{plugin}: {status:?}");
        std::fs::write(&flag, b"").unwrap();
        for id in [native, cder, none] {
            let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
            assert_eq!(info.state, "COMPLETED", "{plugin}: {info:?}\n{}", cluster.job_output(id));
        }
        assert_eq!(wait_all_free(cluster), 4, "{plugin}: devices left held");
    });
}

/// A step given one of its job's two GPUs (`srun --gres=gpu:1`) sees just
/// that one, numbered as the processes see it: with SLURM's step cgroup it
/// is the only device the step can open (index 0); under cderd's job cgroup
/// the step can open both of its job's devices, and the index is its place
/// among them.
#[test]
fn a_step_sees_its_share_of_the_jobs_devices() {
    on_both_task_plugins(|cluster, plugin| {
        let probe = format!("{}; echo STEP_GPUS=$SLURM_STEP_GPUS", probe_command(cluster));
        let out = cluster
            .run_as_user("salloc", &["-N1", "-n1", "--gpgpu-per-node=2", "srun", "--gres=gpu:1", "sh", "-c", &probe])
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{plugin}: {stdout}\n{stderr}\n{}", cluster.logs());
        let id = granted_job(&stderr).unwrap();
        let env = parse_env_lines(&stdout);
        let step = visible_set(&env["STEP_GPUS"]);
        let open = visible_set(&env["OPEN"]);
        assert_eq!(step.len(), 1, "{plugin}: {stdout}");
        let mut job = ever_held(cluster, id);
        job.sort_unstable();
        assert_eq!(job.len(), 2, "{plugin}: the ledger does not show the job's two devices");
        assert!(job.contains(&step[0]), "{plugin}: the step's GPU {step:?} is not one of its job's {job:?}");
        if plugin == "task/cgroup" {
            assert_eq!(open, step, "{plugin}: {stdout}");
            assert_eq!(env["CVD"], "0", "{plugin}: {stdout}");
        } else {
            assert_eq!(open, job, "{plugin}: {stdout}");
            let place = job.iter().position(|&g| g == step[0]).unwrap();
            assert_eq!(env["CVD"], place.to_string(), "{plugin}: {stdout}");
        }
    });
}

/// A submitter who writes cder's stamp into the job-control environment
/// (any SPANK plugin of theirs in srun/sbatch, or a hand-made submit RPC,
/// can) never has it read by the prolog: job_submit_cder.so removes it in
/// either spelling and writes its own where the GRES are per node. A test
/// SPANK plugin forges it at submit time and reports, from the job prolog,
/// what the prolog's environment holds.
#[test]
fn a_submitters_forged_stamp_never_reaches_the_prolog() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    let cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let report = cluster.dir().join("prolog-stamps");
    let source = cluster.dir().join("forge.c");
    let plugin = cluster.dir().join("plugins/forge.so");
    let text = format!(
        "#include <stdio.h>\n#include <stdlib.h>\n#include <slurm/spank.h>\nSPANK_PLUGIN(forge, 1);\n\
         int slurm_spank_init(spank_t sp, int ac, char **av) {{\n\
           if (spank_context() == S_CTX_LOCAL || spank_context() == S_CTX_ALLOCATOR) {{\n\
             spank_job_control_setenv(sp, \"CDER_NODE_GRES\", \"gres/shard:4\", 1);\n\
             spank_job_control_setenv(sp, \"SPANK_CDER_NODE_GRES\", \"gres/gpu:3\", 1);\n\
           }}\n\
           return 0;\n\
         }}\n\
         int slurm_spank_job_prolog(spank_t sp, int ac, char **av) {{\n\
           const char *v = getenv(\"SPANK_CDER_NODE_GRES\"); const char *id = getenv(\"SLURM_JOB_ID\");\n\
           FILE *f = fopen(\"{report}\", \"a\");\n\
           if (f) {{ fprintf(f, \"%s=%s\\n\", id ? id : \"?\", v ? v : \"unset\"); fclose(f); }}\n\
           return 0;\n\
         }}\n",
        report = report.display()
    );
    std::fs::write(&source, text).unwrap();
    let include = cder_tests::slurm::release_include_dir().unwrap();
    let out = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&plugin)
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .output()
        .unwrap();
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    let plugstack = cluster.dir().join("plugstack.conf");
    let mut conf = std::fs::read_to_string(&plugstack).unwrap();
    conf.push_str(&format!("required {}\n", plugin.display()));
    std::fs::write(&plugstack, conf).unwrap();

    let script = "#!/bin/sh\ntrue\n";
    let per_node = cluster.sbatch_as_user(&["--gres=gpu:1"], script).unwrap();
    let per_job = cluster.sbatch_as_user(&["--gpus=1"], script).unwrap();
    let none = cluster.sbatch_as_user(&[], script).unwrap();
    for id in [per_node, per_job, none] {
        let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
        assert_eq!(done.state, "COMPLETED", "job {id}: {done:?}\n{}", cluster.logs());
    }
    let seen = parse_env_lines(&std::fs::read_to_string(&report).unwrap_or_default());
    assert_eq!(seen.get(&per_node.to_string()).map(String::as_str), Some("gres/gpu:1"), "{seen:?}");
    assert_eq!(seen.get(&per_job.to_string()).map(String::as_str), Some("unset"), "{seen:?}");
    assert_eq!(seen.get(&none.to_string()).map(String::as_str), Some("unset"), "{seen:?}");
}

/// A job passes its GPU's descriptor over a Unix socket to a process of
/// another uid, outside any job, and ends: at the release cderd ends that
/// process (it may not hold a device no job of its own was given), counts
/// its use after the release for the job it came from, and the GPU goes
/// back to the pool only once it is gone.
#[test]
fn a_descriptor_passed_to_another_user_is_ended_and_counted_for_its_job() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    let cluster = SlurmCluster::start(&SlurmConfig::default()).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let helper = cluster.jobs_dir().join("hostile.py");
    std::fs::write(&helper, include_str!("../src/hostile.py")).unwrap();
    let socket = cluster.jobs_dir().join("fd.sock");
    let mut receiver = std::process::Command::new("setpriv")
        .args(["--reuid=4242", "--regid=4242", "--clear-groups", "--", "/usr/bin/python3"])
        .arg(&helper)
        .args(["recv-fd", &socket.display().to_string(), "120"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let gpus: Vec<String> = (0..4).map(|i| cluster.gpu_path(i).display().to_string()).collect();
    let script = format!(
        "#!/bin/sh\nwhile [ ! -S {s} ]; do sleep 0.1; done\n/usr/bin/python3 {h} send-fd {s} {g}\n",
        s = socket.display(),
        h = helper.display(),
        g = gpus.join(" ")
    );
    let id = cluster.sbatch_as_user(&["--gres=gpu:1"], &script).unwrap();
    let info = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(info.state, "COMPLETED", "{info:?}\n{}", cluster.logs());
    // The receiver is ended by cderd, not by this test.
    let ended = cder_testkit::wait_for_value(Duration::from_secs(60), Duration::from_millis(200), || {
        receiver.try_wait().ok().flatten()
    });
    let _ = receiver.kill();
    let _ = receiver.wait();
    let status = ended.unwrap_or_else(|| panic!("uid 4242 still holds job {id}'s GPU 60 s on\n{}", cluster.logs()));
    assert!(!status.success(), "the receiver ended by itself ({status}), not by cderd\n{}", cluster.logs());
    let key = format!("slurm:{id}");
    let mut client = cder_protocol::Client::connect(cluster.cderd_socket(), Duration::from_secs(5)).unwrap();
    let records = client.accounting(&AccountingRequest { since: None, until: None }).unwrap().records;
    let ours: Vec<_> = records.iter().filter(|r| r.job.to_string() == key).collect();
    let after: Vec<_> = ours.iter().filter(|r| r.after_release.is_some()).collect();
    assert!(
        after.len() == 1 && ours.len() == 2 && after[0].index == ours[0].index,
        "job {id}: one record of its GPU, and one of uid 4242's use after the release: {ours:?}\n{}",
        cluster.logs()
    );
    cder_testkit::wait_for("the GPU back in the pool once the receiver is gone", JOB_TIMEOUT, || {
        cluster.cderd_status().is_ok_and(|s| s.devices.iter().all(|d| d.job.is_none() && d.reason.is_none()))
    });
}
