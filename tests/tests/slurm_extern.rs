//! The extern step (`PrologFlags=contain`) on a node where cder confines the
//! tasks (`TaskPlugin=task/none`): a real slurmctld and slurmd (Debian's
//! SLURM 22.05) with a real cderd; only the GPUs are fake (character
//! devices, see `cder_tests::slurm::FAKE_GPU_NUMBERS`).
//!
//! `pam_slurm_adopt` puts an ssh login into a job's extern step: it asks
//! the extern slurmstepd to track the login's process, which lands in the
//! cgroups the extern step's process is in. Neither sshd nor the PAM module
//! runs here (libpam-slurm-adopt is not installed, and sshd would need the
//! host's PAM stack): the test simulates only the adoption, as root, by
//! writing a process of uid 65534 (the job's user, `nobody`) into the
//! `cgroup.procs` of the extern step's device cgroup, as the module's
//! request to slurmstepd does for a login. That process must be kept to
//! the job's devices: no free GPU, no GPU of another job.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use cder_tests::slurm::{parse_env_lines, require_slurm, serial, visible_set, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// The pids `scontrol listpids` shows in job `id`'s extern step.
fn extern_pids(cluster: &SlurmCluster, id: u32) -> Vec<u32> {
    cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        let text = cluster.scontrol(&["listpids", &id.to_string()]).unwrap_or_default();
        let pids: Vec<u32> = text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"extern")).then(|| f.first()?.parse().ok())?
            })
            .collect();
        (!pids.is_empty()).then_some(pids)
    })
    .unwrap_or_default()
}

/// The `cgroup.procs` of the device cgroup process `pid` is in: the v1
/// `devices` hierarchy where the node has it, else cgroup2.
fn device_cgroup_procs(pid: u32) -> PathBuf {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = |v1: bool| {
        mountinfo.lines().find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mut r = right.split_whitespace();
            let (fstype, _, options) = (r.next()?, r.next()?, r.next()?);
            let found =
                if v1 { fstype == "cgroup" && options.split(',').any(|o| o == "devices") } else { fstype == "cgroup2" };
            found.then(|| PathBuf::from(left.split_whitespace().nth(4).unwrap()))
        })
    };
    let v1 = cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        controllers.split(',').any(|c| c == "devices").then(|| path.to_string())
    });
    let (root, path) = match (v1, mount(true)) {
        (Some(path), Some(root)) => (root, path),
        _ => {
            let path = cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap().to_string();
            (mount(false).expect("a cgroup2 mount"), path)
        }
    };
    root.join(path.trim_start_matches('/')).join("cgroup.procs")
}

/// A login adopted into a job's extern step (simulated: its process written
/// into the extern step's device cgroup, as root) opens only that job's
/// GPU: neither a free one nor another job's. Before cder confined the
/// extern step, its process stayed in slurmd's device cgroup, and the
/// "adopted" process of uid 65534 opened every GPU of the node.
#[test]
fn a_login_adopted_into_the_extern_step_opens_only_its_jobs_gpus() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    let config = SlurmConfig { extra_slurm_conf: "PrologFlags=contain\n".into(), ..SlurmConfig::default() };
    let cluster =
        SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM with PrologFlags=contain: {e}"));
    let flag = cluster.jobs_dir().join("extern-done");
    let script = format!("#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.2; done\n", flag.display());
    let mine = cluster.sbatch_as_user(&["--gpgpu-per-node=1"], &script).unwrap();
    let other = cluster.sbatch_as_user(&["--gpgpu-per-node=1"], &script).unwrap();
    for id in [mine, other] {
        cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    }
    // Each job holds one GPU once its prolog has run.
    let held = cluster.wait_ledger(mine, 1, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let others = cluster.wait_ledger(other, 1, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));

    let pids = extern_pids(&cluster, mine);
    let Some(&extern_pid) = pids.first() else {
        panic!("job {mine} has no extern step process (scontrol listpids)\n{}", cluster.logs())
    };
    let procs = device_cgroup_procs(extern_pid);

    // The "login": a shell of the job's user that waits to be adopted, then
    // reports what it can open.
    let go = cluster.jobs_dir().join("adopted");
    let probe = format!("while [ ! -e '{}' ]; do sleep 0.05; done\n{}", go.display(), cluster.open_probe());
    let mut login = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", &probe])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::fs::write(&procs, login.id().to_string())
        .unwrap_or_else(|e| panic!("adopting pid {} into {}: {e}", login.id(), procs.display()));
    std::fs::write(&go, b"").unwrap();
    let mut report = String::new();
    login.stdout.take().unwrap().read_to_string(&mut report).unwrap();
    login.wait().unwrap();
    let open = visible_set(parse_env_lines(&report).get("OPEN").map(String::as_str).unwrap_or_default());
    assert_eq!(
        open,
        held,
        "a process adopted into job {mine}'s extern step ({}) opened GPUs {open:?}; the job holds {held:?}, \
         job {other} holds {others:?}\n{}",
        procs.display(),
        cluster.logs()
    );

    // The jobs end as usual (the extern step's process is ended with the job).
    std::fs::write(&flag, b"").unwrap();
    for id in [mine, other] {
        let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(done.state, "COMPLETED", "job {id}: {done:?}\n{}", cluster.logs());
    }
}
