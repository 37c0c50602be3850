//! GPUs offered as shares (SLURM 22.05's `gres/shard`), counted by the
//! real slurmctld, recorded and fenced by a real cderd: the node's one
//! fake GPU is offered as 4 shares (gres.conf `Name=shard Count=4` on its
//! file, and cder.toml `[node.sharing]`). SLURM 22.05 spreads a node's
//! shards over all its GPUs whatever `File=` says, so a node shares all its
//! GPUs or none. Jobs run as `nobody`, on task/none (cderd's `confine`
//! fences) and task/cgroup (SLURM's).
//!
//! What is asserted is what each job can open, its `CUDA_VISIBLE_DEVICES`,
//! SLURM's job states and cderd's ledger of shares (`status`); with MPS on
//! (the fake control daemon) and the sampler on (the fake NVML's per-process
//! answers), the limits cderd set and each sharer's own usage.

use std::path::Path;
use std::time::Duration;

use cder_tests::slurm::{parse_env_lines, require_slurm, serial, SlurmCluster, SlurmConfig};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// One node whose one fake GPU is shared four ways.
pub fn shared_config(cgroup: bool) -> SlurmConfig {
    SlurmConfig {
        cgroup,
        gpus: 1,
        gres_types: "gpu,shard".into(),
        node_gres: Some("gpu:1,shard:4".into()),
        gres_conf: Some(
            "NodeName=node1 Name=gpu File={dir}/dev/gpu0\nNodeName=node1 Name=shard Count=4 File={dir}/dev/gpu0\n"
                .into(),
        ),
        cderd_sharing: "shares_per_gpu = 4\nslurm_gres_conf = \"{dir}/gres.conf\"\nslurm_node_name = \"node1\"\n"
            .into(),
        ..SlurmConfig::default()
    }
}

/// A job that prints what it can open and sees, then waits for `flag`.
fn probe(cluster: &SlurmCluster, flag: &Path) -> String {
    format!(
        "#!/bin/sh\n{}echo CVD=${{CUDA_VISIBLE_DEVICES-unset}}\nwhile [ ! -e '{}' ]; do sleep 0.2; done\n",
        cluster.open_probe(),
        flag.display()
    )
}

fn wait_output(cluster: &SlurmCluster, id: u32) -> std::collections::BTreeMap<String, String> {
    let out = cluster.wait_output(id, "CVD=", JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    parse_env_lines(&out)
}

fn shares_case(cgroup: bool) {
    let name = if cgroup { "task/cgroup" } else { "task/none" };
    let cluster =
        SlurmCluster::start(&shared_config(cgroup)).unwrap_or_else(|e| panic!("starting SLURM ({name}): {e}"));
    let flag = cluster.jobs_dir().join("release-shares");
    let script = probe(&cluster, &flag);
    // Four one-share jobs land on GPU 0 together, each seeing and opening it.
    let sharers: Vec<u32> = (0..4)
        .map(|i| {
            let args = if i % 2 == 0 { "--gpgpu-shares-per-node=1" } else { "--gres=shard:1" };
            cluster.sbatch_as_user(&[args], &script).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect();
    for &id in &sharers {
        cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{name}: {e}"));
        let env = wait_output(&cluster, id);
        assert_eq!(env["OPEN"], "0", "{name}: sharer {id} opens GPU 0 only\n{}", cluster.logs());
        assert_eq!(env["CVD"], "0", "{name}: sharer {id} sees its GPU as 0 inside its device cgroup");
    }
    let status = cluster.cderd_status().unwrap();
    let mut held: Vec<(String, u32, u32, u32)> =
        status.shares.iter().map(|s| (s.job.to_string(), s.index, s.shares, s.total)).collect();
    held.sort();
    let mut want: Vec<(String, u32, u32, u32)> = sharers.iter().map(|id| (format!("slurm:{id}"), 0, 1, 4)).collect();
    want.sort();
    assert_eq!(held, want, "{name}: cderd's ledger of shares");
    assert!(status.devices.iter().all(|d| d.index != 0 || d.job.is_none()), "{name}: nobody holds GPU 0 whole");

    // A fifth waits: SLURM has no shard left.
    let fifth = cluster.sbatch_as_user(&["--gpgpu-shares-per-node=1"], &script).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    let info = cluster.job(fifth).unwrap();
    assert_eq!(info.state, "PENDING", "{name}: the fifth share job waits while four run ({})", info.reason);

    // A job without a share cannot open GPU 0; a whole-GPU job never gets it.
    let none = cluster.sbatch_as_user(&[], &script).unwrap();
    let env = wait_output(&cluster, none);
    assert!(!env["OPEN"].split(',').any(|i| i == "0"), "{name}: a job without a share opened GPU 0: {env:?}");
    // job_submit keeps whole-GPU jobs, cder's and native, off nodes that
    // share their GPUs (SLURM 22.05 itself would start them on GPU 0 beside
    // the shards): with this one node, SLURM refuses them at submit time.
    for args in [["--gpgpu-per-node=1"], ["--gres=gpu:1"]] {
        match cluster.sbatch_as_user(&args, &script) {
            Err(e) => assert!(e.contains("Requested node configuration is not available"), "{name}: {args:?}: {e}"),
            Ok(id) => {
                std::thread::sleep(Duration::from_secs(4));
                let info = cluster.job(id).unwrap();
                assert_eq!(info.state, "PENDING", "{name}: whole-GPU job {id} started on a shared node");
                assert_eq!(info.fields.get("ExcNodeList").map(String::as_str), Some("node1"), "{name}: {info:?}");
                let _ = cluster.run("scancel", &[&id.to_string()]);
            }
        }
    }
    let status = cluster.cderd_status().unwrap();
    assert!(status.devices.iter().all(|d| d.job.is_none()), "{name}: nobody holds the shared GPU whole");

    // The four end; the fifth gets its share.
    std::fs::write(&flag, b"").unwrap();
    for &id in &sharers {
        assert_eq!(cluster.wait_job(id, JOB_TIMEOUT).unwrap().state, "COMPLETED", "{name}: sharer {id}");
    }
    let env = wait_output(&cluster, fifth);
    assert_eq!(env["OPEN"], "0", "{name}: the fifth sharer opens GPU 0");
    assert_eq!(cluster.wait_job(fifth, JOB_TIMEOUT).unwrap().state, "COMPLETED");
    cder_testkit::wait_for(
        &format!("{name}: no shares recorded after every sharer ended"),
        Duration::from_secs(20),
        || cluster.cderd_status().unwrap().shares.is_empty(),
    );
}

#[test]
fn four_sharers_land_on_one_gpu_a_fifth_waits_and_others_stay_out() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    shares_case(false);
    shares_case(true);
}

#[test]
fn cderd_refuses_a_gres_conf_that_contradicts_its_sharing() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    // gres.conf shares GPU 0 three ways; cder.toml says four: cderd does
    // not start, naming the line.
    let mut config = shared_config(false);
    config.gres_conf = Some(
        "NodeName=node1 Name=gpu File={dir}/dev/gpu0\nNodeName=node1 Name=shard Count=3 File={dir}/dev/gpu0\n".into(),
    );
    config.node_gres = Some("gpu:1,shard:3".into());
    let e = match SlurmCluster::start(&config) {
        Ok(_) => panic!("cderd started on a gres.conf that contradicts [node.sharing]"),
        Err(e) => e,
    };
    assert!(
        e.contains("gres.conf:2: Name=shard") && e.contains("Count=3, but cder.toml offers gpgpu:0 as 4 shares"),
        "{e}"
    );
}

/// The commands the fake MPS control daemon of `uuid` received.
fn mps_commands(cluster: &SlurmCluster, uuid: &str) -> Vec<String> {
    let log = cluster.dir().join("mps").join(uuid).join("log/control.log");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter_map(|l| l.split_once("] ").map(|(_, rest)| rest.to_string())).collect()
}

/// The fake NVML's answers: the GPU 80 % busy, and `processes` as
/// (pid, SM %, MiB) on it.
fn gpu_use(uuid: &str, processes: &[(u32, u32, u64)]) -> String {
    let processes: Vec<serde_json::Value> = processes
        .iter()
        .map(|&(pid, sm, mib)| {
            serde_json::json!({"pid": pid, "used_memory_mib": mib, "sm_percent": sm, "memory_percent": sm / 10})
        })
        .collect();
    serde_json::json!({"devices": {uuid: {"gpu_percent": 80, "memory_percent": 40, "memory_used_mib": 4096,
        "processes": processes}}})
    .to_string()
}

/// Two jobs of 2 and 1 shares on one GPU under MPS, with the sampler on:
/// the fake control daemon got the largest sharer's limit, each job's
/// environment carries its own, and each job's usage is its own
/// processes', never the GPU's.
fn mps_usage_case(cgroup: bool) {
    let name = if cgroup { "task/cgroup" } else { "task/none" };
    const UUID: &str = "GPU-5a3e0000-0000-4000-8000-000000000000";
    let library = cder_tests::slurm::fake_nvml_library().unwrap_or_else(|e| panic!("{e}"));
    // The fake control daemon is a binary of the fake NVML's package.
    let control = cder_testkit::built("cder-fake-nvml", "fake-mps-control");
    assert!(control.is_file(), "{} is built with cder-fake-nvml", control.display());
    let machine = serde_json::json!({"devices": [{"uuid": UUID, "name": "NVIDIA A100-SXM4-80GB",
        "pci_bus_id": "0000:07:00.0", "memory_mib": 81920, "compute_capability": "8.0", "cores": 6912,
        "clock_mhz": 1410, "ecc": true, "numa_node": 0, "minor": 0}]});
    let config = SlurmConfig {
        gpus: 0,
        node_gres: Some("gpu:1,shard:4".into()),
        gres_conf: Some(
            "NodeName=node1 Name=gpu File={dir}/dev/nvidia0\nNodeName=node1 Name=shard Count=4 File={dir}/dev/nvidia0\n"
                .into(),
        ),
        device_files: vec!["dev/nvidia0".into()],
        files: vec![("machine.json".into(), machine.to_string()), ("usage.json".into(), gpu_use(UUID, &[]))],
        cder_types: Some(format!(
            "[node.mps]\nenabled = true\nmps_control = \"{}\"\nruntime_dir = \"{{dir}}/mps\"\n\n\
             [node.usage]\nsample_period_s = 0.2\n\n\
             [[cder]]\nname = \"gpgpu\"\nvendor = \"nvidia\"\ndiscovery = \"nvml\"\nnvml_library = \"{}\"\n\
             device_path = \"{{dir}}/dev/nvidia{{minor}}\"\n",
            control.display(),
            library.display()
        )),
        cderd_env: vec![
            ("CDER_FAKE_NVML".into(), "{dir}/machine.json".into()),
            ("CDER_FAKE_NVML_USAGE".into(), "{dir}/usage.json".into()),
        ],
        ..shared_config(cgroup)
    };
    let cluster = SlurmCluster::start(&config).unwrap_or_else(|e| panic!("starting SLURM ({name}): {e}"));
    let flag = cluster.jobs_dir().join("release-mps");
    let jobs: Vec<(u32, std::path::PathBuf)> = [2, 1]
        .iter()
        .map(|shares| {
            let pid_file = cluster.jobs_dir().join(format!("pid-{shares}"));
            let script = format!(
                "#!/bin/sh\necho $$ > '{}'\nenv | grep CUDA_MPS\necho CVD=${{CUDA_VISIBLE_DEVICES-unset}}\n\
                 while [ ! -e '{}' ]; do sleep 0.2; done\n",
                pid_file.display(),
                flag.display()
            );
            let args = format!("--gpgpu-shares-per-node={shares}");
            let id = cluster.sbatch_as_user(&[&args], &script).unwrap_or_else(|e| panic!("{name}: {e}"));
            cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{name}: {e}"));
            (id, pid_file)
        })
        .collect();

    // (a) The server's default is the largest sharer's 2/4; each job's
    // own environment lowers it to its own fraction.
    for (&(id, _), (want, memory)) in jobs.iter().zip([("50.0", "0=40960M"), ("25.0", "0=20480M")]) {
        let env = wait_output(&cluster, id);
        assert_eq!(env["CVD"], "0", "{name}: job {id} sees the shared GPU\n{}", cluster.logs());
        assert_eq!(
            env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").map(String::as_str),
            Some(want),
            "{name}: job {id}'s own MPS fraction: {env:?}"
        );
        assert_eq!(
            env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT").map(String::as_str),
            Some(memory),
            "{name}: job {id}'s own share of the GPU's memory: {env:?}"
        );
        assert_eq!(
            env.get("CUDA_MPS_PIPE_DIRECTORY").map(String::as_str),
            Some(format!("{}/mps/{UUID}/pipe", cluster.dir().display()).as_str()),
            "{name}: job {id} talks to its GPU's MPS server: {env:?}"
        );
    }
    let commands = mps_commands(&cluster, UUID);
    assert!(
        commands.iter().any(|c| c == "Cmd:set_default_active_thread_percentage 50.0")
            && commands.iter().any(|c| c == "Cmd:set_default_device_pinned_mem_limit 0 40960M"),
        "{name}: the fake control daemon's log: {commands:?}\n{}",
        cluster.logs()
    );
    assert!(
        !commands.iter().any(|c| c.starts_with("Cmd:set_default_active_thread_percentage") && !c.ends_with(" 50.0")),
        "{name}: no other default was set: {commands:?}"
    );

    // (b) NVML lists each job's shell at its own use: 30 % and 50 % of a
    // GPU that is 80 % busy.
    let pids: Vec<u32> = jobs
        .iter()
        .map(|(id, file)| {
            let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{name}: job {id}'s pid: {e}"));
            text.trim().parse().unwrap_or_else(|e| panic!("{name}: job {id}'s pid {text:?}: {e}"))
        })
        .collect();
    let answers = gpu_use(UUID, &[(pids[0], 30, 1_000), (pids[1], 50, 2_000)]);
    std::fs::write(cluster.dir().join("usage.json"), answers).unwrap();
    let cderctl = cder_tests::slurm::cderctl().unwrap_or_else(|e| panic!("{e}"));
    let toml = cluster.dir().join("cder/cder.toml");
    let usage = |id: u32| -> serde_json::Value {
        let out = std::process::Command::new(&cderctl)
            .arg("--config")
            .arg(&toml)
            .args(["usage", "--job", &format!("slurm:{id}"), "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "cderctl usage: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    let peak = |id: u32| -> (Option<u64>, Option<u64>) {
        let v = usage(id);
        let d = v["devices"].as_array().and_then(|d| d.iter().find(|d| d["uuid"] == UUID)).cloned();
        d.map(|d| (d["peak_utilisation_percent"].as_u64(), d["peak_memory_mib"].as_u64())).unwrap_or((None, None))
    };
    let want = [(Some(30), Some(1_000)), (Some(50), Some(2_000))];
    let mut seen = Vec::new();
    let _ = cder_testkit::wait_for_value(Duration::from_secs(20), Duration::from_millis(400), || {
        seen = jobs.iter().map(|&(id, _)| peak(id)).collect();
        (seen == want).then_some(())
    });
    assert_eq!(
        seen,
        want,
        "{name}: each job's peak use is its own process's (GPU at 80 %)\n{}\n{}",
        usage(jobs[0].0),
        cluster.logs()
    );
    // A few more periods do not mix them.
    std::thread::sleep(Duration::from_secs(1));
    let again: Vec<_> = jobs.iter().map(|&(id, _)| peak(id)).collect();
    assert_eq!(again, want, "{name}: after more samples");

    std::fs::write(&flag, b"").unwrap();
    for &(id, _) in &jobs {
        assert_eq!(cluster.wait_job(id, JOB_TIMEOUT).unwrap().state, "COMPLETED", "{name}: sharer {id}");
    }
}

#[test]
fn mps_limits_are_each_jobs_fraction_and_each_job_gets_its_own_usage() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    mps_usage_case(false);
    mps_usage_case(true);
}

/// [`shared_config`] with a second, non-sharing node that never registers
/// (nothing listens at its port), in a partition `wide` with node1: a
/// job kept off node1 waits there instead of being refused, so what an
/// update does to it shows.
fn shared_and_wide_config(cgroup: bool) -> SlurmConfig {
    SlurmConfig {
        extra_slurm_conf: "NodeName=node2 NodeAddr=127.0.0.2 NodeHostname=node2 Port=1 CPUs=4 RealMemory=1000 \
                           Gres=gpu:1 State=UNKNOWN\n\
                           PartitionName=wide Nodes=node1,node2 MaxTime=INFINITE State=UP"
            .into(),
        ..shared_config(cgroup)
    }
}

/// A job's `ExcNodeList`, by name (`(null)` when none).
fn excluded(cluster: &SlurmCluster, id: u32) -> Vec<String> {
    let info = cluster.job(id).unwrap_or_else(|e| panic!("{e}"));
    let list = info.fields.get("ExcNodeList").cloned().unwrap_or_default();
    cder_request::hostlist::Hostlist::HOSTS.expand(&list).unwrap_or_default()
}

/// Issue 44.5: every other way a job asks for whole GPUs (`--gpus`,
/// `--gpus-per-task`, `--gpus-per-socket`; `--ntasks-per-gpu`, refused
/// without a GPU count) is kept off the node that shares its GPU, as
/// `--gres=gpu` is; and an update (the
/// owner's `ExcNodeList`, `ReqNodeList`, partition; an operator's GPU
/// count) never puts a job asking for whole GPUs there. All jobs and the
/// owner's updates are `nobody`'s. Without the steering, SLURM 22.05
/// starts each on node1's GPU whole beside its shards, which cderd then
/// refuses to record (`fail=closed`) or, where the prolog is not asked,
/// never sees.
#[test]
fn whole_gpus_in_any_form_and_after_any_update_stay_off_a_shared_gpu() {
    if !require_slurm() {
        return;
    }
    let _serial = serial();
    let cluster = SlurmCluster::start(&shared_and_wide_config(true)).unwrap_or_else(|e| panic!("starting SLURM: {e}"));
    let flag = cluster.jobs_dir().join("release-steer");
    let script = probe(&cluster, &flag);
    let forms: [&[&str]; 4] = [
        &["--gpus=1"],
        &["-n1", "--gpus-per-task=1"],
        &["--sockets-per-node=1", "--gpus-per-socket=1"],
        &["-n2", "--ntasks-per-gpu=2", "--gpus=1"],
    ];
    // `--ntasks-per-gpu` alone: its GPUs would not show in the job's
    // record to a later update; refused, in either partition.
    for partition in ["debug", "wide"] {
        let args = ["-p", partition, "-n1", "--ntasks-per-gpu=1"];
        match cluster.sbatch_as_user(&args, &script) {
            Err(e) => assert!(
                e.contains("cder: --ntasks-per-gpu=1 without a GPU count") && e.contains("where node1 share"),
                "{args:?}: {e}"
            ),
            Ok(id) => panic!("{args:?}: job {id} was accepted: {:?}\n{}", cluster.job(id), cluster.logs()),
        }
    }
    // (a) At submit, in the partition of node1 alone: refused (SLURM's
    // word once node1 is excluded), as `--gres=gpu:1` is.
    for args in forms {
        match cluster.sbatch_as_user(args, &script) {
            Err(e) => assert!(e.contains("Requested node configuration is not available"), "{args:?}: {e}"),
            Ok(id) => panic!(
                "{args:?}: job {id} was accepted onto the node that shares its GPU: {:?}\n{}",
                cluster.job(id),
                cluster.logs()
            ),
        }
    }
    // (b) With node2 beside it: accepted, node1 excluded, waiting.
    let mut waiting = Vec::new();
    for args in forms.iter().chain([&["--gres=gpu:1"][..]].iter()) {
        let args: Vec<&str> = ["-p", "wide"].iter().chain(args.iter()).copied().collect();
        let id = cluster.sbatch_as_user(&args, &script).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(excluded(&cluster, id).contains(&"node1".to_string()), "{args:?}: {:?}", cluster.job(id));
        waiting.push((args.join(" "), id));
    }

    // (c) The owner's updates of a waiting whole-GPU job: the exclusion
    // comes back whatever ExcNodeList says; a ReqNodeList or partition
    // naming node1 does not lift it.
    let owner = |id: u32, what: &str| -> Result<(), String> {
        let out = cluster.run_as_user("scontrol", &["update", &format!("JobId={id}"), what]).unwrap();
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };
    let (gpus, gres) = (waiting[0].1, waiting[4].1);
    for id in [gpus, gres] {
        owner(id, "ExcNodeList=").unwrap_or_else(|e| panic!("job {id}: ExcNodeList=: {e}"));
        assert_eq!(excluded(&cluster, id), ["node1"], "job {id}: ExcNodeList= cleared the exclusion");
        owner(id, "ExcNodeList=node2").unwrap_or_else(|e| panic!("job {id}: ExcNodeList=node2: {e}"));
        let mut now = excluded(&cluster, id);
        now.sort();
        assert_eq!(now, ["node1", "node2"], "job {id}: ExcNodeList=node2 dropped node1");
        owner(id, "ExcNodeList=").unwrap();
    }
    // SLURM may refuse these itself; either way node1 stays excluded.
    let _ = owner(gpus, "ReqNodeList=node1");
    let _ = owner(gres, "Partition=debug");
    for id in [gpus, gres] {
        assert!(excluded(&cluster, id).contains(&"node1".to_string()), "job {id}: {:?}", cluster.job(id));
    }
    // An operator's ExcNodeList is held to the same rule.
    cluster.scontrol(&["update", &format!("JobId={}", waiting[1].1), "ExcNodeList="]).unwrap();
    assert_eq!(excluded(&cluster, waiting[1].1), ["node1"], "root's ExcNodeList= cleared the exclusion");
    // A GPU count moved to per job, task or socket is refused (issue 43's
    // stamp), for the owner of a job without GPUs as for anyone (an update's
    // refusal reaches scontrol as its code only).
    let cpu_only = cluster.sbatch_as_user(&["-p", "wide", "--hold"], &script).unwrap();
    for what in ["TresPerJob=gres:gpu:1", "TresPerTask=gres:gpu:1", "TresPerSocket=gres:gpu:1"] {
        assert!(owner(cpu_only, what).is_err(), "{what} was accepted");
        let info = cluster.job(cpu_only).unwrap();
        assert!(!info.fields.values().any(|v| v.contains("gpu:1")), "{what}: {info:?}");
    }
    // An operator's GPU count on a waiting job without GPUs keeps the
    // job's own exclusions and adds node1's.
    cluster.scontrol(&["update", &format!("JobId={cpu_only}"), "ExcNodeList=node2"]).unwrap();
    cluster.scontrol(&["update", &format!("JobId={cpu_only}"), "TresPerNode=gres:gpu:1"]).unwrap();
    let mut now = excluded(&cluster, cpu_only);
    now.sort();
    assert_eq!(now, ["node1", "node2"], "root's TresPerNode on job {cpu_only}: {:?}", cluster.job(cpu_only));

    // (d) A few scheduling passes later none of them started: node1's GPU
    // is held by nobody, whole or in shares.
    std::thread::sleep(Duration::from_secs(6));
    for (args, id) in &waiting {
        let info = cluster.job(*id).unwrap();
        assert_eq!(info.state, "PENDING", "{args}: job {id} started: {info:?}\n{}", cluster.logs());
    }
    let status = cluster.cderd_status().unwrap();
    assert!(status.devices.iter().all(|d| d.job.is_none()), "the shared GPU was recorded whole: {status:?}");
    assert!(status.shares.is_empty(), "no job holds shares: {status:?}");
    // A share job still lands on it beside the waiting ones.
    let sharer = cluster.sbatch_as_user(&["-p", "wide", "--gres=shard:1"], &script).unwrap();
    let env = wait_output(&cluster, sharer);
    assert_eq!(env["OPEN"], "0", "the share job opens GPU 0\n{}", cluster.logs());
    std::fs::write(&flag, b"").unwrap();
    assert_eq!(cluster.wait_job(sharer, JOB_TIMEOUT).unwrap().state, "COMPLETED");
}
