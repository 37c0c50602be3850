//! spank_cder.so and job_submit_cder.so on a cluster of real hosts: one
//! slurmctld on the head and a slurmd, a cderd and fake GPUs on each of
//! three workers, every host in network, mount and UTS namespaces of its
//! own (tests/src/cluster.rs). What a single node cannot show: a request
//! per node times nodes, one ledger per node, and one node's failure kept
//! to that node.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cder_testkit::wait_for;
use cder_tests::cluster::{is_zombie, require_cluster, Cluster, ClusterConfig};
use cder_tests::slurm::{parse_env_lines, serial, visible_set, SlurmClient};

const JOB_TIMEOUT: Duration = Duration::from_secs(120);

fn start(config: ClusterConfig) -> Option<(cder_tests::slurm::Serial, Cluster)> {
    if !require_cluster() {
        return None;
    }
    let guard = serial();
    let cluster = Cluster::start(&config).unwrap_or_else(|e| panic!("starting the cluster: {e}"));
    Some((guard, cluster))
}

/// Shell lines printing `OPEN=<indices>`: which of the host's fake GPUs
/// this process can open (the kernel's answer, cderd's cgroup included).
fn open_probe(gpus: u32) -> String {
    let mut s = String::from("open=''\n");
    for i in 0..gpus {
        s.push_str(&format!("if ( : < /run/gpu/gpu{i} ) 2>/dev/null; then open=\"${{open}}{i},\"; fi\n"));
    }
    s.push_str("echo OPEN=${open%,}\n");
    s
}

/// Waits until cderd on every worker holds nothing.
fn wait_all_free(cluster: &Cluster) -> BTreeMap<String, u32> {
    // After 30 s the counts as they are: the caller's assertion says what is wrong.
    let mut free = BTreeMap::new();
    let _ = cder_testkit::wait_for_value(Duration::from_secs(30), Duration::from_millis(200), || {
        free = cluster
            .workers
            .iter()
            .map(|w| (w.name.clone(), w.cderd_status().map_or(0, |s| s.counts["gpgpu"].free)))
            .collect();
        free.values().all(|&f| f == cluster.config.gpus).then_some(())
    });
    free
}

#[test]
fn two_nodes_two_gpus_each_and_all_four_released() {
    let Some((_g, cluster)) = start(ClusterConfig { gpus: 3, ..ClusterConfig::default() }) else { return };
    let flag = cluster.jobs_dir().join("go-multi");
    // One task per node prints its host, what it sees and what it can open.
    let task = cluster.jobs_dir().join("task.sh");
    std::fs::write(
        &task,
        format!("{}echo HOST=$(hostname) CVD=$CUDA_VISIBLE_DEVICES OPEN=${{open%,}}\n", open_probe(3)),
    )
    .unwrap();
    let script = format!(
        "#!/bin/sh\nsrun -N2 --ntasks-per-node=1 /bin/sh {}\nwhile [ ! -e {} ]; do sleep 0.2; done\n",
        task.display(),
        flag.display()
    );
    let id = cluster
        .sbatch(&["-N", "2", "--gpgpu-per-node=2"], &script)
        .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    let info = cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let nodes = cluster.job_nodes(&info).unwrap();
    assert_eq!(nodes.len(), 2, "{info:?}");

    // Each of the two hosts' own ledger holds two devices for the job; the
    // third host's holds nothing.
    wait_for("both ledgers", Duration::from_secs(30), || {
        nodes.iter().all(|n| cluster.worker(n).ledger(id).is_ok_and(|l| l.len() == 2))
    });
    for w in &cluster.workers {
        let held = w.ledger(id).unwrap();
        assert_eq!(held.len(), if nodes.contains(&w.name) { 2 } else { 0 }, "{}: {held:?}", w.name);
    }
    wait_for("both tasks' lines", Duration::from_secs(60), || cluster.job_output(id).matches("HOST=").count() == 2);
    let out = cluster.job_output(id);
    let mut seen = BTreeSet::new();
    for line in out.lines().filter(|l| l.starts_with("HOST=")) {
        let fields: BTreeMap<&str, &str> = line.split_whitespace().filter_map(|w| w.split_once('=')).collect();
        let host = fields["HOST"];
        assert!(seen.insert(host.to_string()), "two tasks on {host}: {out}");
        assert!(nodes.iter().any(|n| n == host), "a task ran on {host}, not in {nodes:?}");
        // Inside cderd's cgroup the job numbers its devices from 0.
        assert_eq!(visible_set(fields.get("CVD").unwrap_or(&"")), vec![0, 1], "{line}");
        // What the kernel lets it open is exactly what its host's ledger holds.
        let open = visible_set(fields.get("OPEN").unwrap_or(&""));
        assert_eq!(open, cluster.worker(host).ledger(id).unwrap(), "{line}");
    }

    std::fs::write(&flag, "").unwrap();
    let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(done.state, "COMPLETED", "{}\n{}", cluster.job_output(id), cluster.logs());
    let free = wait_all_free(&cluster);
    assert!(free.values().all(|&f| f == 3), "not all four released: {free:?}\n{}", cluster.logs());
}

#[test]
fn packed_jobs_never_share_a_device_on_any_host() {
    let Some((_g, cluster)) = start(ClusterConfig::default()) else { return };
    let total = cluster.workers.len() as u32 * cluster.config.gpus;
    let flag = cluster.jobs_dir().join("go-packed");
    let script = format!(
        "#!/bin/sh\necho HOST=$(hostname)\n{}while [ ! -e {flag} ]; do sleep 0.2; done\n",
        open_probe(cluster.config.gpus),
        flag = flag.display()
    );
    let ids: Vec<u32> = (0..total).map(|_| cluster.sbatch(&["--gpgpu-per-node=1"], &script).unwrap()).collect();
    for &id in &ids {
        cluster.wait_running(id, JOB_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    }
    // One more does not fit anywhere: it waits for a GPU.
    let extra = cluster.sbatch(&["--gpgpu-per-node=1"], &script).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let waiting = cluster.job(extra).unwrap();
    assert_eq!(waiting.state, "PENDING", "{waiting:?}\n{}", cluster.squeue());

    wait_for("every job's probe", Duration::from_secs(60), || {
        ids.iter().all(|&id| cluster.job_output(id).contains("OPEN="))
    });
    let mut taken: BTreeMap<(String, u32), u32> = BTreeMap::new();
    for &id in &ids {
        let out = cluster.job_output(id);
        let env = parse_env_lines(&out);
        let host = env["HOST"].clone();
        let open = visible_set(&env["OPEN"]);
        assert_eq!(open.len(), 1, "job {id} can open {open:?}:\n{out}");
        assert_eq!(open, cluster.worker(&host).ledger(id).unwrap(), "job {id} on {host}");
        if let Some(other) = taken.insert((host.clone(), open[0]), id) {
            panic!("jobs {other} and {id} share {host}'s GPU {}", open[0]);
        }
    }
    // Every device of every host is in use, each by one job.
    assert_eq!(taken.len() as u32, total, "{taken:?}");
    for w in &cluster.workers {
        let s = w.cderd_status().unwrap();
        assert_eq!(s.counts["gpgpu"].allocated, cluster.config.gpus, "{}: {s:?}", w.name);
    }

    std::fs::write(&flag, "").unwrap();
    for &id in ids.iter().chain([&extra]) {
        let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
        assert_eq!(done.state, "COMPLETED", "job {id}: {}", cluster.job_output(id));
    }
    let free = wait_all_free(&cluster);
    assert!(free.values().all(|&f| f == cluster.config.gpus), "{free:?}");
}

#[test]
fn a_host_without_cderd_fails_only_its_own_steps() {
    let Some((_g, mut cluster)) = start(ClusterConfig::default()) else { return };
    let down = cluster.worker_index("w2");
    cluster.stop_cderd(down);
    let script = "#!/bin/sh\necho RAN=yes HOST=$(hostname)\n";
    let per_host: Vec<(String, u32)> = cluster
        .workers
        .iter()
        .map(|w| (w.name.clone(), cluster.sbatch(&["-w", &w.name, "--gpgpu-per-node=1"], script).unwrap()))
        .collect();
    // A job over the two healthy hosts runs too.
    let both =
        cluster.sbatch(&["-N", "2", "-w", "w1,w3", "--gpgpu-per-node=1"], "#!/bin/sh\nsrun -N2 hostname\n").unwrap();
    for (host, id) in &per_host {
        let done = cluster.wait_job(*id, JOB_TIMEOUT).unwrap();
        let out = cluster.job_output(*id);
        if host == "w2" {
            assert_eq!(done.state, "FAILED", "{done:?}\n{out}");
            assert!(!out.contains("RAN=yes"), "ran without its device:\n{out}");
            assert!(
                out.contains("cannot connect to cderd") && out.contains("fail=closed"),
                "no readable reason:\n{out}"
            );
        } else {
            assert_eq!(done.state, "COMPLETED", "{host}: {done:?}\n{out}\n{}", cluster.logs());
            assert!(out.contains(&format!("RAN=yes HOST={host}")), "{out}");
        }
    }
    let done = cluster.wait_job(both, JOB_TIMEOUT).unwrap();
    let out = cluster.job_output(both);
    assert_eq!(done.state, "COMPLETED", "{out}");
    let hosts: BTreeSet<&str> = out.lines().collect();
    assert_eq!(hosts, BTreeSet::from(["w1", "w3"]), "{out}");

    // cderd back on w2: its jobs run again.
    cluster.start_cderd(down).unwrap();
    let id = cluster.sbatch(&["-w", "w2", "--gpgpu-per-node=1"], script).unwrap();
    let done = cluster.wait_job(id, JOB_TIMEOUT).unwrap();
    assert_eq!(done.state, "COMPLETED", "{}", cluster.job_output(id));
    let free = wait_all_free(&cluster);
    assert!(free.values().all(|&f| f == cluster.config.gpus), "{free:?}");
}

/// The harness itself: a test that panics with the cluster running leaves
/// no namespace and none of the cluster's processes behind.
#[test]
fn a_panicking_test_leaves_no_namespace_or_process_behind() {
    let Some((_g, cluster)) = start(ClusterConfig { workers: 2, ..ClusterConfig::default() }) else { return };
    let id = cluster.sbatch(&["-N", "2", "--gpgpu-per-node=1"], "#!/bin/sh\nsrun -N2 sleep 300\n").unwrap();
    cluster.wait_running(id, JOB_TIMEOUT).unwrap();
    let namespaces = cluster.namespaces();
    let pids = cluster.pids();
    assert_eq!(namespaces.len(), 4, "{namespaces:?}");
    assert!(pids.len() >= 3 * 2, "holders, daemons and the job's steps: {pids:?}");
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _cluster = cluster;
        panic!("a failing test");
    }));
    assert!(failed.is_err());
    let out = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&out.stdout);
    for ns in &namespaces {
        assert!(!left.lines().any(|l| l.split_whitespace().next() == Some(ns.as_str())), "{ns} is left: {left}");
    }
    let alive: Vec<String> = pids
        .iter()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists() && !is_zombie(**p))
        .map(|p| {
            format!(
                "{p} {}",
                std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default().replace('\0', " ")
            )
        })
        .collect();
    assert!(alive.is_empty(), "still running: {alive:?}");
}
