//! MIG instances as SLURM typed GRES, end to end, on a real
//! slurmctld and slurmd (Debian's SLURM 22.05) with a real cderd whose
//! NVIDIA driver is the fake NVML library: two A100s in MIG mode, GPU 0 with
//! a 1g.10gb, a 2g.20gb and a 1g.10gb instance (in MIG index order), GPU 1
//! with one 1g.10gb. cderd offers them as instances (`mig = "instances"`)
//! and guards each by its capability device file; the admin's gres.conf
//! declares the same files as typed GRES, listed by profile, so slurmd's
//! device order (21, 39, 48, 30) is not cderd's (21, 30, 39, 48). The
//! capability files are character devices with the mem driver's distinct
//! numbers, so SLURM's device cgroup and cderd's tell them apart.
//!
//! "The instances the controller chose" is read from the controller
//! (`scontrol show job -d`: `GRES=gpu:1g.10gb:2(IDX:0-1)`, positions in
//! gres.conf), and compared with what the job can open (the kernel's
//! answer), its `CUDA_VISIBLE_DEVICES` (MIG UUIDs) and cderd's ledger.

use std::collections::BTreeSet;
use std::time::Duration;

use cder_protocol::DeviceState;
use cder_request::gres::{self, Detail, ScontrolLine};
use cder_tests::slurm::{fake_nvml_library, parse_env_lines, require_slurm, serial, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// One MIG instance of the fake machine.
struct Instance {
    uuid: &'static str,
    profile: &'static str,
    gpu: u32,
    gpu_instance: u32,
    /// The minor of its capability device file (`nvidia-cap<cap>`).
    cap: u32,
}

/// In MIG index order per GPU: cderd's device order.
const INSTANCES: [Instance; 4] = [
    Instance { uuid: "MIG-1c000000-0000-4000-8000-000000000021", profile: "1g.10gb", gpu: 0, gpu_instance: 9, cap: 21 },
    Instance { uuid: "MIG-2c000000-0000-4000-8000-000000000030", profile: "2g.20gb", gpu: 0, gpu_instance: 5, cap: 30 },
    Instance {
        uuid: "MIG-1c000000-0000-4000-8000-000000000039",
        profile: "1g.10gb",
        gpu: 0,
        gpu_instance: 10,
        cap: 39,
    },
    Instance { uuid: "MIG-1c000000-0000-4000-8000-000000000048", profile: "1g.10gb", gpu: 1, gpu_instance: 9, cap: 48 },
];

/// gres.conf as an admin writes it, one record per profile: slurmd lists
/// the files in this order, and `IDX:` counts in it.
const GRES_CONF: &str = "# MIG profiles as typed GRES, one record per profile\n\
    NodeName=node1 Name=gpu Type=1g.10gb File={dir}/dev/nvidia-cap[21,39,48]\n\
    NodeName=node1 Name=gpu Type=2g.20gb File={dir}/dev/nvidia-cap30\n";
const SLURMD_ORDER: [u32; 4] = [21, 39, 48, 30];

fn machine() -> String {
    let gpu = |i: u32| {
        serde_json::json!({"uuid": format!("GPU-a1000000-0000-4000-8000-00000000000{i}"), "name": "NVIDIA A100-SXM4-80GB",
            "pci_bus_id": format!("0000:{:02x}:00.0", 7 + i), "memory_mib": 81920, "compute_capability": "8.0", "cores": 6912,
            "clock_mhz": 1410, "ecc": true, "numa_node": 0, "minor": i})
    };
    let mig = |g: u32| {
        let instances: Vec<serde_json::Value> = INSTANCES
            .iter()
            .filter(|i| i.gpu == g)
            .map(|i| {
                let slices: u32 = i.profile[..1].parse().unwrap();
                serde_json::json!({"uuid": i.uuid, "profile": i.profile, "gpu_instance": i.gpu_instance, "compute_instance": 0,
                    "memory_mib": 9728 * slices, "multiprocessors": 14 * slices, "slices": slices})
            })
            .collect();
        serde_json::json!({"device": g, "enabled": true, "max_count": 7, "instances": instances})
    };
    serde_json::json!({"devices": [gpu(0), gpu(1)], "mig": [mig(0), mig(1)]}).to_string()
}

fn mig_config(cgroup: bool) -> Result<SlurmConfig, String> {
    let library = fake_nvml_library()?;
    let mut files = vec![("machine.json".to_string(), machine())];
    for i in &INSTANCES {
        files.push((
            format!("caps/gpu{}/mig/gi{}/ci0/access", i.gpu, i.gpu_instance),
            format!("DeviceFileMinor: {}\n", i.cap),
        ));
    }
    Ok(SlurmConfig {
        gpus: 0,
        cgroup,
        node_gres: Some("gpu:1g.10gb:3,gpu:2g.20gb:1".into()),
        gres_conf: Some(GRES_CONF.into()),
        device_files: INSTANCES.iter().map(|i| format!("dev/nvidia-cap{}", i.cap)).collect(),
        files,
        cder_types: Some(format!(
            "[[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = \"{}\"\nmig = \"instances\"\n\
             mig_capabilities = \"{{dir}}/caps\"\nmig_device_path = \"{{dir}}/dev/nvidia-cap{{cap}}\"\ndevice_path = \"{{dir}}/dev/nvidia{{minor}}\"\n",
            library.display()
        )),
        cderd_env: vec![("CDER_FAKE_NVML".into(), "{dir}/machine.json".into())],
        ..SlurmConfig::default()
    })
}

fn start(cgroup: bool) -> Option<(cder_tests::slurm::Serial, SlurmCluster)> {
    if !require_slurm() {
        return None;
    }
    let guard = serial();
    let name = if cgroup { "task/cgroup" } else { "task/none" };
    let config = mig_config(cgroup).unwrap_or_else(|e| panic!("{e}"));
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM with MIG GRES ({name}): {e}"));
    // cderd found the instances through the fake NVML, in MIG index order.
    let status = cluster.cderd_status().unwrap();
    let uuids: Vec<&str> = status.devices.iter().map(|d| d.uuid.as_str()).collect();
    assert_eq!(uuids, INSTANCES.iter().map(|i| i.uuid).collect::<Vec<_>>(), "cderd's devices\n{}", cluster.logs());
    Some((guard, cluster))
}

/// A job that prints its `CUDA_VISIBLE_DEVICES` and the capability files
/// it can open, then waits for `flag`.
fn probe_script(cluster: &SlurmCluster, flag: &std::path::Path) -> String {
    let mut s = format!("#!/bin/sh\n{}\n", probe_command(cluster));
    s.push_str(&format!("while [ ! -e '{}' ]; do sleep 0.2; done\n", flag.display()));
    s
}

/// The probe alone, as shell lines (for `srun sh -c`).
fn probe_command(cluster: &SlurmCluster) -> String {
    let mut s = String::from("open=''\n");
    for i in &INSTANCES {
        s.push_str(&format!(
            "if ( : < '{}/dev/nvidia-cap{c}' ) 2>/dev/null; then open=\"${{open}}{c},\"; fi\n",
            cluster.dir().display(),
            c = i.cap
        ));
    }
    s.push_str("echo OPEN=${open%,}\necho CVD=${CUDA_VISIBLE_DEVICES-unset}");
    s
}

fn wait_for_output(cluster: &SlurmCluster, id: u32, needle: &str) -> String {
    cluster.wait_output(id, needle, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"))
}

/// The capability files of the GPUs the controller allocated to a running
/// job: `IDX:` of `scontrol show job -d` are positions in gres.conf. Read
/// with the grammar the plugins use (`cder_request::gres`), so a form SLURM
/// prints that the grammar refuses fails here.
fn controller_caps(cluster: &SlurmCluster, id: u32) -> BTreeSet<u32> {
    let text = cluster.scontrol(&["show", "job", "-d", &id.to_string()]).unwrap();
    if let Some(dir) = std::env::var_os("CDER_GRES_CAPTURE") {
        std::fs::write(std::path::Path::new(&dir).join(format!("show_job_d_{id}.txt")), &text).unwrap();
    }
    let mut caps = BTreeSet::new();
    let details: Vec<&str> = text.lines().filter_map(|l| ScontrolLine::parse(l).get("GRES")).collect();
    assert!(!details.is_empty(), "job {id}: no GRES= in scontrol show job -d:\n{text}");
    for detail in details {
        let items = gres::parse_list(detail).unwrap_or_else(|e| panic!("job {id}: GRES={detail}: {e}\n{text}"));
        for item in items {
            assert_eq!(item.name, "gpu", "job {id}: GRES={detail}");
            let Some(Detail::Indices(idx)) = item.detail else { panic!("job {id}: GRES={detail}: no IDX list") };
            assert_eq!(idx.len() as u64, item.count, "job {id}: GRES={detail}: the count is the IDX list's length");
            caps.extend(idx.into_iter().map(|i| SLURMD_ORDER[i as usize]));
        }
    }
    assert!(!caps.is_empty(), "job {id}: no IDX in scontrol show job -d:\n{text}");
    caps
}

fn instance(uuid: &str) -> &'static Instance {
    INSTANCES.iter().find(|i| i.uuid == uuid).unwrap_or_else(|| panic!("{uuid:?} is no MIG instance of this node"))
}

/// Checks one running job: `CUDA_VISIBLE_DEVICES` names `count` MIG
/// instances of `profile` by UUID; they are exactly the ones the
/// controller allocated, exactly the ones the job can open, and exactly
/// the ones cderd's ledger shows held by it. Returns their UUIDs.
fn check_job(cluster: &SlurmCluster, plugin: &str, id: u32, report: &str, want: &[(&str, usize)]) -> BTreeSet<String> {
    let env = parse_env_lines(report);
    let cvd = env.get("CVD").unwrap_or_else(|| panic!("{plugin}: job {id} printed no CVD=\n{report}"));
    let uuids: BTreeSet<String> = cvd.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect();
    for (profile, count) in want {
        let n = uuids.iter().filter(|u| instance(u).profile == *profile).count();
        assert_eq!(
            n,
            *count,
            "{plugin}: job {id}: {count} {profile} instance(s) wanted, CUDA_VISIBLE_DEVICES={cvd}\n{}",
            cluster.logs()
        );
    }
    assert_eq!(
        uuids.len(),
        want.iter().map(|(_, n)| n).sum::<usize>(),
        "{plugin}: job {id}: CUDA_VISIBLE_DEVICES={cvd}"
    );
    let caps: BTreeSet<u32> = uuids.iter().map(|u| instance(u).cap).collect();
    assert_eq!(
        caps,
        controller_caps(cluster, id),
        "{plugin}: job {id} sees other instances than the controller chose\n{report}\n{}",
        cluster.logs()
    );
    let open: BTreeSet<u32> =
        env.get("OPEN").map(|o| o.split(',').filter_map(|c| c.parse().ok()).collect()).unwrap_or_default();
    assert_eq!(open, caps, "{plugin}: job {id} can open other instances than it was given\n{report}");
    let key = format!("slurm:{id}");
    let status = cluster.cderd_status().unwrap();
    let held: BTreeSet<String> = status
        .devices
        .iter()
        .filter(|d| d.job.as_ref().is_some_and(|j| j.to_string() == key))
        .map(|d| d.uuid.clone())
        .collect();
    assert_eq!(held, uuids, "{plugin}: job {id}: cderd's ledger differs from what the job sees");
    uuids
}

fn wait_done(cluster: &SlurmCluster, id: u32) {
    let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(done.state, "COMPLETED", "job {id}: {done:?}\n{}\n{}", cluster.job_output(id), cluster.logs());
}

fn wait_all_free(cluster: &SlurmCluster) {
    let mut devices = Vec::new();
    let free = cder_testkit::wait_for_value(JOB_TIMEOUT, Duration::from_millis(200), || {
        devices = cluster.cderd_status().unwrap().devices;
        devices.iter().all(|d| d.state == DeviceState::Free).then_some(())
    });
    assert!(free.is_some(), "instances not released: {devices:?}\n{}", cluster.logs());
}

/// Three jobs of typed GRES fill the node: each gets exactly the instances
/// of its profile that the controller chose (the 2g.20gb one is slurmd's
/// position 3 and cderd's index 1), no two share one, a fourth waits, and
/// every instance is free again when the jobs end.
fn typed_gres_jobs(cgroup: bool) {
    let Some((_guard, cluster)) = start(cgroup) else { return };
    let plugin = if cgroup { "task/cgroup" } else { "task/none" };
    let flag = cluster.jobs_dir().join("go");
    let script = probe_script(&cluster, &flag);
    let submit = |gres: &str| {
        cluster.sbatch_as_user(&[&format!("--gres={gres}")], &script).unwrap_or_else(|e| panic!("{plugin}: {e}"))
    };
    let two = submit("gpu:1g.10gb:2");
    let big = submit("gpu:2g.20gb:1");
    let one = submit("gpu:1g.10gb:1");
    let mut seen = BTreeSet::new();
    for (id, want) in [(two, vec![("1g.10gb", 2)]), (big, vec![("2g.20gb", 1)]), (one, vec![("1g.10gb", 1)])] {
        let report = wait_for_output(&cluster, id, "CVD=");
        for uuid in check_job(&cluster, plugin, id, &report, &want) {
            assert!(seen.insert(uuid.clone()), "{plugin}: {uuid} given to two jobs at once\n{}", cluster.logs());
        }
    }
    assert_eq!(seen.len(), INSTANCES.len(), "{plugin}: the three jobs hold every instance");
    // Every 1g.10gb instance is held: a fourth job waits for one.
    let flag4 = cluster.jobs_dir().join("go4");
    let fourth = cluster.sbatch_as_user(&["--gres=gpu:1g.10gb:1"], &probe_script(&cluster, &flag4)).unwrap();
    let info = cluster.job(fourth).unwrap();
    assert_eq!(info.state, "PENDING", "{plugin}: a fourth 1g.10gb job runs while all three are held: {info:?}");
    std::fs::write(&flag, b"").unwrap();
    for id in [two, big, one] {
        wait_done(&cluster, id);
    }
    let report = wait_for_output(&cluster, fourth, "CVD=");
    let got = check_job(&cluster, plugin, fourth, &report, &[("1g.10gb", 1)]);
    assert_eq!(got.len(), 1);
    std::fs::write(&flag4, b"").unwrap();
    wait_done(&cluster, fourth);
    wait_all_free(&cluster);
    for id in [two, big, one, fourth] {
        assert!(cluster.ledger(id).unwrap().is_empty(), "{plugin}: job {id} still holds instances after it ended");
    }
}

#[test]
fn typed_gres_jobs_get_the_instances_the_controller_chose_with_slurm_cgroups() {
    typed_gres_jobs(true);
}

#[test]
fn typed_gres_jobs_get_the_instances_the_controller_chose_with_cderd_confinement() {
    typed_gres_jobs(false);
}

/// `--cder=gpgpu:1g.10gb:N` becomes the typed GRES `gpu:1g.10gb:N`:
/// job_submit checks it against the profiles the node declares and the job
/// gets instances of that profile; a mixed request gets both profiles.
#[test]
fn the_cder_option_names_a_mig_profile() {
    let Some((_guard, cluster)) = start(true) else { return };
    let flag = cluster.jobs_dir().join("go");
    let script = probe_script(&cluster, &flag);
    let job = cluster.sbatch_as_user(&["--cder=gpgpu:1g.10gb:2"], &script).unwrap();
    let tres = cluster.job(job).unwrap().fields.get("TresPerNode").cloned().unwrap_or_default();
    assert!(tres.contains("gpu:1g.10gb:2"), "TresPerNode={tres}");
    let report = wait_for_output(&cluster, job, "CVD=");
    check_job(&cluster, "task/cgroup", job, &report, &[("1g.10gb", 2)]);
    let mixed = cluster.sbatch_as_user(&["--cder=gpgpu:1g.10gb:1,gpgpu:2g.20gb:1"], &script).unwrap();
    let report = wait_for_output(&cluster, mixed, "CVD=");
    check_job(&cluster, "task/cgroup", mixed, &report, &[("1g.10gb", 1), ("2g.20gb", 1)]);
    std::fs::write(&flag, b"").unwrap();
    wait_done(&cluster, job);
    wait_done(&cluster, mixed);
    wait_all_free(&cluster);

    // Refused at submit time, with the reason on sbatch's stderr.
    for (args, reason) in [
        ("--cder=gpgpu:1g.10gb:4", "cder: --cder=gpgpu:1g.10gb:4: more than any node has (at most 3 gpgpu devices of GRES type 1g.10gb per node)"),
        ("--cder=gpgpu:3g.40gb:1", "no node has gpgpu devices of GRES type \"3g.40gb\" (this cluster has: 1g.10gb, 2g.20gb)"),
        ("--cder=gpgpu:1g 10gb:1", "is not a GRES type name"),
        ("--cder=gpgpu:2g.20gb:2", "at most 1 gpgpu devices of GRES type 2g.20gb per node"),
        ("--cder=gpgpu:1g.10gb:3,gpgpu:2g.20gb:1,gpgpu:x:1", "at most 4 gpgpu devices per node"),
    ] {
        let e = cluster.sbatch_as_user(&[args], "#!/bin/sh\ntrue\n").expect_err(args);
        assert!(e.contains(reason), "{args}: {e}");
    }
    let e = cluster.sbatch_as_user(&["--gpgpu-per-node=3", "--cder=gpgpu:1g.10gb:2"], "#!/bin/sh\ntrue\n").unwrap_err();
    assert!(e.contains("ask for different numbers of gpgpu devices"), "{e}");
}

/// A step of one profile inside a job of two: `SLURM_STEP_GPUS` (slurmd's
/// position 3) is matched by file to cderd's 2g.20gb instance, so the step
/// sees that one alone.
#[test]
fn a_step_of_one_profile_sees_that_instance() {
    for cgroup in [true, false] {
        let Some((_guard, cluster)) = start(cgroup) else { return };
        let plugin = if cgroup { "task/cgroup" } else { "task/none" };
        let probe = probe_command(&cluster);
        let out = cluster
            .run_as_user(
                "salloc",
                &[
                    "-N1",
                    "-n1",
                    "--cder=gpgpu:1g.10gb:1,gpgpu:2g.20gb:1",
                    "srun",
                    "--gres=gpu:2g.20gb:1",
                    "sh",
                    "-c",
                    &probe,
                ],
            )
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{plugin}: {stdout}\n{stderr}\n{}", cluster.logs());
        let env = parse_env_lines(&stdout);
        let big = INSTANCES.iter().find(|i| i.profile == "2g.20gb").unwrap();
        assert_eq!(env.get("CVD").map(String::as_str), Some(big.uuid), "{plugin}: {stdout}\n{}", cluster.logs());
        let open: BTreeSet<u32> =
            env.get("OPEN").map(|o| o.split(',').filter_map(|c| c.parse().ok()).collect()).unwrap_or_default();
        if cgroup {
            // SLURM's step cgroup holds the step's GRES alone.
            assert_eq!(open, BTreeSet::from([big.cap]), "{plugin}: {stdout}");
        } else {
            // cderd's cgroup holds the job's two instances: one of each profile.
            assert!(open.contains(&big.cap) && open.len() == 2, "{plugin}: {stdout}");
            assert!(
                open.iter().any(|c| INSTANCES.iter().any(|i| i.cap == *c && i.profile == "1g.10gb")),
                "{plugin}: {stdout}"
            );
        }
        // A step may not name more of a profile than its job holds.
        let out = cluster
            .run_as_user(
                "salloc",
                &["-N1", "-n1", "--cder=gpgpu:1g.10gb:1,gpgpu:2g.20gb:1", "srun", "--cder=gpgpu:1g.10gb:2", "true"],
            )
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(
            !out.status.success(),
            "{plugin}: a step asked for 2 of the job's 1 1g.10gb instance and ran: {stdout}\n{stderr}"
        );
        assert!(
            stderr.contains("SLURM gave") && stderr.contains("1 gpgpu device(s) of GRES type 1g.10gb"),
            "{plugin}: {stdout}\n{stderr}\n{}",
            cluster.logs()
        );
        wait_all_free(&cluster);
    }
}

/// How many times slurmctld answered a one-job query (`slurm_load_job`,
/// `REQUEST_JOB_INFO_SINGLE`), from `sdiag`'s RPC statistics.
fn single_job_queries(cluster: &SlurmCluster) -> u64 {
    let out = cluster.command_stdout("sdiag");
    out.lines()
        .find(|l| l.trim_start().starts_with("REQUEST_JOB_INFO_SINGLE "))
        .and_then(|l| l.split("count:").nth(1))
        .and_then(|c| c.split_whitespace().next())
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Waits for a job's report without asking slurmctld about the job (which
/// `scontrol show job` would, with the very RPC being counted).
fn wait_report(cluster: &SlurmCluster, id: u32) -> String {
    cder_testkit::wait_for_value(JOB_TIMEOUT, Duration::from_millis(200), || {
        let out = cluster.job_output(id);
        out.contains("CVD=").then_some(out)
    })
    .unwrap_or_else(|| panic!("job {id} printed nothing\n{}", cluster.logs()))
}

/// The job prolog asks slurmctld for the job's record only when the
/// controller's stamp cannot make `SLURM_JOB_GPUS` the whole grant: a job
/// of one profile on this node of two starts without the RPC, a job of
/// both profiles with it; both get exactly what the controller chose.
#[test]
fn the_prolog_asks_slurmctld_only_for_a_job_of_several_types() {
    let Some((_guard, cluster)) = start(false) else { return };
    let flag = cluster.jobs_dir().join("go");
    let script = probe_script(&cluster, &flag);
    let before = single_job_queries(&cluster);
    let one = cluster.sbatch_as_user(&["--gres=gpu:1g.10gb:2"], &script).unwrap();
    let report = wait_report(&cluster, one);
    let after_one = single_job_queries(&cluster);
    assert_eq!(after_one, before, "the prolog of a one-profile job asked slurmctld\n{}", cluster.logs());
    let both = cluster.sbatch_as_user(&["--gres=gpu:1g.10gb:1,gpu:2g.20gb:1"], &script).unwrap();
    let report_both = wait_report(&cluster, both);
    assert!(single_job_queries(&cluster) > after_one, "the prolog of a two-profile job did not ask slurmctld");
    check_job(&cluster, "task/none", one, &report, &[("1g.10gb", 2)]);
    check_job(&cluster, "task/none", both, &report_both, &[("1g.10gb", 1), ("2g.20gb", 1)]);
    std::fs::write(&flag, b"").unwrap();
    wait_done(&cluster, one);
    wait_done(&cluster, both);
}
